"""The scored evictor's per-block work: numba-compiled loops over numpy arrays.

Imported by :class:`spfcore.evictor.Evictor` on its first scored evictor only
(vLLM's CPU build scans every loaded module when it starts and trips over
llvmlite's ffi if numba is loaded before that).

State (owned by the evictor, passed in on every call):

* ``ib``: int64 ``(NROWS, blocks)``, per block id: release order, version,
  heap stamp (the stamp of its live order-heap entry, -1: none), dedup
  stamp, tier, in (free cached, scored), pinned. ``val``: float64 value.
* The order heap, a binary min-heap with lazy deletion: ``hv`` float64 value,
  ``hi`` int64 ``(cap, 4)`` (an entry's fields side by side): heap tier,
  release order, id, stamp. Keyed by
  ``(heap tier, value, release order)`` (release orders are distinct, so the
  key is total); an entry is live iff its block is in and its stamp is the
  block's heap stamp.
* Two expiry heaps (seconds, arrivals), keyed by ``(expiry, version)``: keys
  float64 ``tk`` / ``ak`` and int64 ``(2, cap)`` rows (version, id) ``ti`` /
  ``ai``. An entry is live iff its block is in and its version is the
  block's version; stale entries are dropped when popped or compacted.
* ``c``: int64 counters (indices below).

Callers make sure each heap has room for every push of the call.
"""

from __future__ import annotations

import numba
import numpy as np

ORD, VER, HST, DST, TIER, IN, PIN = range(7)
NROWS = 7
HN, TN, AN, VERSION, LIVE, NPIN, REFUSED, HSEQ, DSEQ = range(9)
NCOUNTERS = 9
NEVER_ARRIVAL_F = float(2**62)

_jit = numba.njit(cache=True, nogil=True)


# ------------------------------------------------------------ order heap
@_jit
def _h_less(hv, hi, a, b):
    if hi[a, 0] != hi[b, 0]:
        return hi[a, 0] < hi[b, 0]
    if hv[a] != hv[b]:
        return hv[a] < hv[b]
    return hi[a, 1] < hi[b, 1]


@_jit
def _h_swap(hv, hi, a, b):
    hv[a], hv[b] = hv[b], hv[a]
    for r in range(4):
        hi[a, r], hi[b, r] = hi[b, r], hi[a, r]


@_jit
def _h_move(hv, hi, dst, src):
    hv[dst] = hv[src]
    for r in range(4):
        hi[dst, r] = hi[src, r]


@_jit
def _h_up(hv, hi, j):
    while j > 0:
        p = (j - 1) >> 1
        if _h_less(hv, hi, j, p):
            _h_swap(hv, hi, j, p)
            j = p
        else:
            break


@_jit
def _h_down(hv, hi, j, n):
    while True:
        left = 2 * j + 1
        if left >= n:
            break
        m = left
        if left + 1 < n and _h_less(hv, hi, left + 1, left):
            m = left + 1
        if _h_less(hv, hi, m, j):
            _h_swap(hv, hi, m, j)
            j = m
        else:
            break


@_jit
def _h_push(ib, val, hv, hi, c, i, ht):
    """Push block ``i``'s entry at heap tier ``ht`` (a fresh stamp)."""
    n = c[HN]
    s = c[HSEQ] + 1
    c[HSEQ] = s
    hv[n] = val[i]
    hi[n, 0] = ht
    hi[n, 1] = ib[ORD, i]
    hi[n, 2] = i
    hi[n, 3] = s
    ib[HST, i] = s
    c[HN] = n + 1
    _h_up(hv, hi, n)


@_jit
def _h_pop_top(hv, hi, c):
    """Drop the root. Bottom-up (Floyd): the hole at the root goes down to a
    leaf along the smaller children (one comparison per level), the last
    entry fills it and sifts up (rarely far). The entries left are the same
    as with the textbook pop, so is every later pop (the key is total)."""
    n = c[HN] - 1
    c[HN] = n
    if n <= 0:
        return
    j = 0
    while True:
        left = 2 * j + 1
        if left >= n:
            break
        m = left
        if left + 1 < n and _h_less(hv, hi, left + 1, left):
            m = left + 1
        _h_move(hv, hi, j, m)
        j = m
    if j != n:
        _h_move(hv, hi, j, n)
        _h_up(hv, hi, j)


@_jit
def _h_rebuild(ib, val, hv, hi, c):
    """The order heap from the live entries only (drops stale ones)."""
    n = 0
    for j in range(c[HN]):
        i = hi[j, 2]
        if ib[IN, i] and ib[HST, i] == hi[j, 3]:
            _h_move(hv, hi, n, j)
            n += 1
    c[HN] = n
    for j in range(n // 2 - 1, -1, -1):
        _h_down(hv, hi, j, n)


# ------------------------------------------------------------ expiry heaps
@_jit
def _t_less(tk, ti, a, b):
    if tk[a] != tk[b]:
        return tk[a] < tk[b]
    return ti[0, a] < ti[0, b]


@_jit
def _t_down(tk, ti, j, n):
    while True:
        left = 2 * j + 1
        if left >= n:
            break
        m = left
        if left + 1 < n and _t_less(tk, ti, left + 1, left):
            m = left + 1
        if _t_less(tk, ti, m, j):
            tk[m], tk[j] = tk[j], tk[m]
            ti[0, m], ti[0, j] = ti[0, j], ti[0, m]
            ti[1, m], ti[1, j] = ti[1, j], ti[1, m]
            j = m
        else:
            break


@_jit
def _t_push(tk, ti, n, x, v, i):
    """Push ``(x, v, i)`` onto a heap of ``n`` entries; returns the new size."""
    tk[n] = x
    ti[0, n] = v
    ti[1, n] = i
    j = n
    while j > 0:
        p = (j - 1) >> 1
        if _t_less(tk, ti, j, p):
            tk[p], tk[j] = tk[j], tk[p]
            ti[0, p], ti[0, j] = ti[0, j], ti[0, p]
            ti[1, p], ti[1, j] = ti[1, j], ti[1, p]
            j = p
        else:
            break
    return n + 1


@_jit
def _t_filter(ib, tk, ti, n, clock, live_only):
    """Keep the entries with key > ``clock`` (and, with ``live_only``, live),
    re-heapified; returns the new size."""
    m = 0
    for j in range(n):
        if tk[j] <= clock:
            continue
        if live_only:
            i = ti[1, j]
            if not ib[IN, i] or ib[VER, i] != ti[0, j]:
                continue
        tk[m] = tk[j]
        ti[0, m] = ti[0, j]
        ti[1, m] = ti[1, j]
        m += 1
    for j in range(m // 2 - 1, -1, -1):
        _t_down(tk, ti, j, m)
    return m


# ------------------------------------------------------------ operations
@_jit
def place(ids, tiers, values, exp_t, exp_a, pins, orders, cap, ib, val, hv, hi, tk, ti, ak, ai, c):
    """(Re-)insert blocks in sequence (see ``Evictor._place``); returns the
    number of pins granted, or -1 (nothing done) if an id is outside ``ib``
    or a heap lacks room for ``len(ids)`` more entries. An empty
    ``values``, ``exp_t``, ``exp_a`` or ``pins`` stands for the default of
    every block (0, no expiry, no expiry, no pin)."""
    n = ids.shape[0]
    if max(c[HN], c[TN], c[AN]) + n > hv.shape[0]:
        return -1
    nblk = ib.shape[1]
    for k in range(n):
        if ids[k] < 0 or ids[k] >= nblk:
            return -1
    has_v, has_t, has_a, has_p = values.shape[0] > 0, exp_t.shape[0] > 0, exp_a.shape[0] > 0, pins.shape[0] > 0
    v = c[VERSION]
    granted = 0
    tn, an = c[TN], c[AN]
    for k in range(n):
        i = ids[k]
        tier = tiers[k]
        value = values[k] if has_v else 0.0
        v += 1
        if has_t:
            x = exp_t[k]
            if x != np.inf:
                tn = _t_push(tk, ti, tn, x, v, i)
        if has_a:
            y = exp_a[k]
            if y < NEVER_ARRIVAL_F:
                an = _t_push(ak, ai, an, y, v, i)
        pin = False
        if has_p and pins[k]:
            if c[NPIN] < cap or ib[PIN, i]:
                pin = True
            else:
                c[REFUSED] += 1
        was = ib[PIN, i] != 0
        if ib[IN, i]:
            if not pin and not was and ib[TIER, i] == tier and val[i] == value:
                ib[VER, i] = v  # same rank: stays where it is
                continue
        else:
            ib[IN, i] = 1
            c[LIVE] += 1
            ib[ORD, i] = orders[k]
        ib[TIER, i] = tier
        val[i] = value
        ib[VER, i] = v
        if pin:
            granted += 1
            if not was:
                ib[PIN, i] = 1
                c[NPIN] += 1
        elif was:
            ib[PIN, i] = 0
            c[NPIN] -= 1
        _h_push(ib, val, hv, hi, c, i, 2 if pin else tier)
    c[VERSION] = v
    live = c[LIVE]
    if tn + an > 2 * live + 1024:
        tn = _t_filter(ib, tk, ti, tn, -np.inf, True)
        an = _t_filter(ib, ak, ai, an, -np.inf, True)
    c[TN], c[AN] = tn, an
    if c[HN] > 2 * live + 1024:
        _h_rebuild(ib, val, hv, hi, c)
    return granted


@_jit
def take(k, forget, out, outpin, ib, val, hv, hi, c):
    """Take the ``k`` lowest-ranked free cached blocks out of the order into
    ``out[:k]``, lowest first (``outpin``: whether each was pinned).
    ``forget``: they leave the evictor (their rows keep tier, value, order and
    version for :func:`restore`); else they stay free (in, pinned as they
    were) with no order entry until :func:`settle` puts them back or forgets
    them."""
    got = 0
    while got < k:
        i = hi[0, 2]
        live = ib[IN, i] != 0 and ib[HST, i] == hi[0, 3]
        _h_pop_top(hv, hi, c)
        if not live:
            continue
        ib[HST, i] = -1
        out[got] = i
        outpin[got] = ib[PIN, i] != 0
        got += 1
        if forget:
            ib[IN, i] = 0
            c[LIVE] -= 1
            if ib[PIN, i]:
                ib[PIN, i] = 0
                c[NPIN] -= 1


@_jit
def settle(cands, chosen, ib, val, hv, hi, c):
    """Candidates taken by :func:`take` (not forgotten): forget the chosen
    ones, put the others back at their rank."""
    for k in range(cands.shape[0]):
        i = cands[k]
        if chosen[k]:
            ib[IN, i] = 0
            c[LIVE] -= 1
            if ib[PIN, i]:
                ib[PIN, i] = 0
                c[NPIN] -= 1
        else:
            _h_push(ib, val, hv, hi, c, i, 2 if ib[PIN, i] else ib[TIER, i])


@_jit
def restore(ids, pinned, ib, val, hv, hi, c):
    """Undo :func:`take` / :func:`settle` forgetting ``ids``: back in, pinned
    as they were, at their rank (their expiry entries are live again: the
    version did not change)."""
    for k in range(ids.shape[0]):
        i = ids[k]
        ib[IN, i] = 1
        c[LIVE] += 1
        if pinned[k]:
            ib[PIN, i] = 1
            c[NPIN] += 1
        _h_push(ib, val, hv, hi, c, i, 2 if pinned[k] else ib[TIER, i])


@_jit
def remove_many(ids, ib, c):
    """Take free cached blocks ``ids`` out, in order (hits); returns ``-1``,
    or the position of the first id that is not a free cached block (those
    before it were taken out, the rest were not)."""
    nb = ib.shape[1]
    for k in range(ids.shape[0]):
        i = ids[k]
        if i < 0 or i >= nb or not ib[IN, i]:
            return k
        ib[IN, i] = 0  # its heap entries go stale
        c[LIVE] -= 1
        if ib[PIN, i]:
            ib[PIN, i] = 0
            c[NPIN] -= 1
    return -1


@_jit
def live_unique(ids, unpinned, ib, c):
    """The ids that are free cached blocks (and unpinned, if asked), first
    occurrence kept, in order."""
    s = c[DSEQ] + 1
    c[DSEQ] = s
    nb = ib.shape[1]
    out = np.empty(ids.shape[0], np.int64)
    m = 0
    for k in range(ids.shape[0]):
        i = ids[k]
        if i < 0 or i >= nb or not ib[IN, i] or ib[DST, i] == s:
            continue
        if unpinned and ib[PIN, i]:
            continue
        ib[DST, i] = s
        out[m] = i
        m += 1
    return out[:m]


@_jit
def _due_at(tk, n, clock):
    """Positions of the heap entries with key <= ``clock``: a pruned walk
    from the root (an entry above the clock hides its subtree), O(due)."""
    idx = np.empty(n, np.int64)
    m = 0
    if n == 0 or tk[0] > clock:
        return idx[:0]
    stack = np.empty(n, np.int64)
    stack[0] = 0
    sp = 1
    while sp:
        sp -= 1
        j = stack[sp]
        idx[m] = j
        m += 1
        ch = 2 * j + 1
        if ch < n and tk[ch] <= clock:
            stack[sp] = ch
            sp += 1
        if ch + 1 < n and tk[ch + 1] <= clock:
            stack[sp] = ch + 1
            sp += 1
    return idx[:m]


@_jit
def due_entries(tk, ti, n, clock):
    """The entries of an expiry heap with key <= ``clock``, as ``(keys,
    versions, ids)`` in heap order (unsorted); changes nothing."""
    idx = _due_at(tk, n, clock)
    m = idx.shape[0]
    bk = np.empty(m, np.float64)
    bv = np.empty(m, np.int64)
    bi = np.empty(m, np.int64)
    for q in range(m):
        j = idx[q]
        bk[q], bv[q], bi[q] = tk[j], ti[0, j], ti[1, j]
    return bk, bv, bi


_NO_DUE = (np.empty(0, np.float64), np.empty(0, np.int64), np.empty(0, np.int64))


def due(now, arrival, ib, tk, ti, ak, ai, c):
    """The blocks whose score expired by ``now`` (seconds heap, first) then
    by ``arrival``, in ``(expiry, version)`` order, live entries only, each
    block once (first occurrence). Changes no entry. Returns ``(ids, entries
    due in the seconds heap, in the arrivals heap)`` (stale ones counted).
    The entries are sorted by numpy's ``lexsort`` (numba's sorts are several
    times slower); ``(expiry, version)`` pairs are distinct, so the order is
    that of any sort."""
    tk_, tv, tid = due_entries(tk, ti, c[TN], now) if c[TN] else _NO_DUE  # (a policy uses one clock)
    ak_, av, aid = due_entries(ak, ai, c[AN], arrival) if c[AN] else _NO_DUE
    if len(tv) > 1:
        o = np.lexsort((tv, tk_))
        tv, tid = tv[o], tid[o]
    if len(av) > 1:
        o = np.lexsort((av, ak_))
        av, aid = av[o], aid[o]
    return due_live(tv, tid, av, aid, ib, c), len(tid), len(aid)


@_jit
def due_live(tv, tid, av, aid, ib, c):
    """:func:`due`'s live entries, each block once (first occurrence), from
    sorted entries ``(versions, ids)`` of both heaps."""
    s = c[DSEQ] + 1
    c[DSEQ] = s
    out = np.empty(tid.shape[0] + aid.shape[0], np.int64)
    m = 0
    for j in range(tid.shape[0]):
        i = tid[j]
        if ib[IN, i] and ib[VER, i] == tv[j] and ib[DST, i] != s:
            ib[DST, i] = s
            out[m] = i
            m += 1
    for j in range(aid.shape[0]):
        i = aid[j]
        if ib[IN, i] and ib[VER, i] == av[j] and ib[DST, i] != s:
            ib[DST, i] = s
            out[m] = i
            m += 1
    return out[:m]


@_jit
def _t_drop(ib, tk, ti, n, clock):
    """Drop the entries with key <= ``clock`` from a heap of ``n``; returns
    the new size. Few due: popped one by one (O(k log n)); else one filter
    pass and a re-heapify (O(n))."""
    if n == 0 or tk[0] > clock:
        return n
    k = _due_at(tk, n, clock).shape[0]
    if k > 64:
        return _t_filter(ib, tk, ti, n, clock, False)
    for _ in range(k):
        n -= 1
        if n > 0:
            tk[0] = tk[n]
            ti[0, 0] = ti[0, n]
            ti[1, 0] = ti[1, n]
            _t_down(tk, ti, 0, n)
    return n


@_jit
def drain(now, arrival, ib, tk, ti, ak, ai, c):
    """Drop every expiry entry due by ``now`` / ``arrival`` (the ones
    :func:`due` saw)."""
    c[TN] = _t_drop(ib, tk, ti, c[TN], now)
    c[AN] = _t_drop(ib, ak, ai, c[AN], arrival)


def warm() -> None:
    """Call every kernel once on a tiny state, with the argument types the
    evictor uses: compiles them (or loads numba's on-disk cache) now, at the
    first scored evictor's construction, not inside the first timed event."""
    nblk, cap = 8, 64
    ib = np.zeros((NROWS, nblk), np.int64)
    ib[HST] = -1
    val = np.zeros(nblk)
    hv, hi = np.zeros(cap), np.zeros((cap, 4), np.int64)
    tk, ti, ak, ai = np.zeros(cap), np.zeros((2, cap), np.int64), np.zeros(cap), np.zeros((2, cap), np.int64)
    c = np.zeros(NCOUNTERS, np.int64)
    ids = np.arange(4, dtype=np.int64)
    ones = np.ones(4)
    place(ids, np.ones(4, np.int64), ones, ones, ones, np.zeros(4, np.bool_), ids, 2, ib, val, hv, hi, tk, ti, ak, ai, c)
    e = np.empty(0)
    place(ids, np.ones(4, np.int64), e, e, e, np.empty(0, np.bool_), ids, 2, ib, val, hv, hi, tk, ti, ak, ai, c)
    live_unique(ids, True, ib, c)
    remove_many(ids[:0], ib, c)
    d, _, _ = due(2.0, 2.0, ib, tk, ti, ak, ai, c)
    drain(2.0, 2.0, ib, tk, ti, ak, ai, c)
    out, pinned = np.empty(2, np.int64), np.empty(2, np.bool_)
    take(2, True, out, pinned, ib, val, hv, hi, c)
    restore(out, pinned, ib, val, hv, hi, c)
    take(2, False, out, pinned, ib, val, hv, hi, c)
    settle(out, np.zeros(2, np.bool_), ib, val, hv, hi, c)
