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
* The arrivals clock's calendar: an expiry at an integer arrival ``x`` with
  ``base <= x < base + QW`` (``base``: the first arrival not drained yet) is
  kept, instead of on the arrivals heap, in the bucket ``x % QW``: a list of
  pool entries in push order, which is version order (versions only grow).
  Entries due by arrival ``a`` are then the buckets ``base .. a`` read in
  turn, already in ``(expiry, version)`` order: no sort, O(1) per entry
  pushed, drained or read (an expiry round re-scores about half the free
  blocks on spf's workloads, and the heap's O(log n) pushes, walk, sort and
  re-heapify dominated it). Other expiries (fractional, past, farther than
  ``QW`` arrivals) stay on the heap; the two are merged when read. ``qe``
  int64 ``(3, cap)``: per pool entry its version, id and next entry (-1:
  end); ``qb`` int64 ``(2, QW)``: per bucket its first and last entry (-1:
  empty). Free entries are chained from ``c[QFREE]``; ``c[QTOP]`` entries
  were ever used, ``c[QN]`` are in buckets now. An entry is live by the
  heaps' rule (block in, same version).
* ``c``: int64 counters (indices below).

Callers make sure each heap, and the calendar's pool, has room for every push of the call.
"""

from __future__ import annotations

import numba
import numpy as np

ORD, VER, HST, DST, TIER, IN, PIN = range(7)
NROWS = 7
HN, TN, AN, VERSION, LIVE, NPIN, REFUSED, HSEQ, DSEQ, QBASE, QN, QFREE, QTOP = range(13)
NCOUNTERS = 13
QW = 2048  # calendar buckets (arrivals ahead); above spf's max_ttl (1024) so its expiries all fit
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
def _h_move(hv, hi, dst, src):
    hv[dst] = hv[src]
    for r in range(4):
        hi[dst, r] = hi[src, r]


@_jit
def _h_key_less(t, v, o, hv, hi, b):
    """Whether key ``(t, v, o)`` ranks below entry ``b``'s."""
    if t != hi[b, 0]:
        return t < hi[b, 0]
    if v != hv[b]:
        return v < hv[b]
    return o < hi[b, 1]


@_jit
def _h_entry_less(hv, hi, a, t, v, o):
    """Whether entry ``a`` ranks below key ``(t, v, o)``."""
    if hi[a, 0] != t:
        return hi[a, 0] < t
    if hv[a] != v:
        return hv[a] < v
    return hi[a, 1] < o


@_jit
def _h_up(hv, hi, j):
    """Sift entry ``j`` up: it is held aside and its ancestors that rank
    above it move down one level each (one move per level, not a swap)."""
    t, v, o, i, s = hi[j, 0], hv[j], hi[j, 1], hi[j, 2], hi[j, 3]
    while j > 0:
        p = (j - 1) >> 1
        if not _h_key_less(t, v, o, hv, hi, p):
            break
        _h_move(hv, hi, j, p)
        j = p
    hv[j] = v
    hi[j, 0], hi[j, 1], hi[j, 2], hi[j, 3] = t, o, i, s


@_jit
def _h_down(hv, hi, j, n):
    """Sift entry ``j`` down in a heap of ``n`` (the same hole technique)."""
    t, v, o, i, s = hi[j, 0], hv[j], hi[j, 1], hi[j, 2], hi[j, 3]
    while True:
        m = 2 * j + 1
        if m >= n:
            break
        if m + 1 < n and _h_less(hv, hi, m + 1, m):
            m += 1
        if not _h_entry_less(hv, hi, m, t, v, o):
            break
        _h_move(hv, hi, j, m)
        j = m
    hv[j] = v
    hi[j, 0], hi[j, 1], hi[j, 2], hi[j, 3] = t, o, i, s


@_jit
def _h_push(ib, val, hv, hi, c, i, ht, sift=True):
    """Push block ``i``'s entry at heap tier ``ht`` (a fresh stamp); without
    ``sift`` it is only appended (the caller rebuilds the heap after)."""
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
    if sift:
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


@_jit
def _h_rebuild_rows(ib, val, hv, hi, c):
    """The order heap anew from the blocks' rows: one entry (a fresh stamp)
    per block that is in and has an entry or is marked for one (``HST`` >= 0),
    in block id order, then heapified. O(block ids): for a pool not much
    larger than the free set."""
    n = 0
    s = c[HSEQ]
    for i in range(ib.shape[1]):
        if ib[IN, i] and ib[HST, i] >= 0:
            s += 1
            hv[n] = val[i]
            hi[n, 0] = 2 if ib[PIN, i] else ib[TIER, i]
            hi[n, 1] = ib[ORD, i]
            hi[n, 2] = i
            hi[n, 3] = s
            ib[HST, i] = s
            n += 1
    c[HSEQ] = s
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


# ------------------------------------------------------------ arrivals calendar
@_jit
def _q_fits(y, c):
    """Whether arrival expiry ``y`` goes in the calendar (an integer in the window)."""
    b = c[QBASE]
    return y == np.floor(y) and b <= y < b + QW


@_jit
def _q_push(qe, qb, c, y, v, i):
    """Append ``(version v, id i)`` to the bucket of expiry ``y`` (``_q_fits``)."""
    e = c[QFREE]
    if e >= 0:
        c[QFREE] = qe[2, e]
    else:
        e = c[QTOP]
        c[QTOP] = e + 1
    qe[0, e], qe[1, e], qe[2, e] = v, i, -1
    b = np.int64(y) & (QW - 1)
    if qb[0, b] < 0:
        qb[0, b] = e
    else:
        qe[2, qb[1, b]] = e
    qb[1, b] = e
    c[QN] += 1


@_jit
def _q_last(arrival, c):
    """Last expiry due by ``arrival`` that the calendar may hold (below ``base``: none)."""
    b = c[QBASE]
    if not arrival >= b:  # (NaN: none)
        return b - 1
    top = b + QW - 1
    return top if arrival >= top else np.int64(np.floor(arrival))


@_jit
def q_due_any(arrival, qb, c):
    """Whether a calendar bucket due by ``arrival`` holds an entry. If none
    does, ``base`` moves past the clock (the buckets passed are empty: the
    window follows the clock between re-scores, and nothing else changes)."""
    last = _q_last(arrival, c)
    if c[QN]:
        for x in range(c[QBASE], last + 1):
            if qb[0, x & (QW - 1)] >= 0:
                return True
    if last >= c[QBASE]:
        c[QBASE] = np.int64(np.floor(min(arrival, NEVER_ARRIVAL_F))) + 1
    return False


@_jit
def _q_drain(arrival, qe, qb, c):
    """Drop the buckets due by ``arrival`` (their entries back to the free
    chain) and move ``base`` past them."""
    last = _q_last(arrival, c)
    if last < c[QBASE]:
        return
    for x in range(c[QBASE], last + 1):
        b = x & (QW - 1)
        h = qb[0, b]
        if h >= 0:
            t = qb[1, b]
            m = 1
            e = h
            while e != t:
                e = qe[2, e]
                m += 1
            qe[2, t] = c[QFREE]
            c[QFREE] = h
            c[QN] -= m
            qb[0, b] = qb[1, b] = -1
    # every expiry up to the clock is drained (beyond the window the calendar held none)
    c[QBASE] = np.int64(np.floor(min(arrival, NEVER_ARRIVAL_F))) + 1


@_jit
def _q_compact(ib, qe, qb, c):
    """Unlink the stale entries of every bucket (order kept)."""
    for b in range(QW):
        e = qb[0, b]
        qb[0, b] = qb[1, b] = -1
        while e >= 0:
            nx = qe[2, e]
            i = qe[1, e]
            if ib[IN, i] and ib[VER, i] == qe[0, e]:
                qe[2, e] = -1
                if qb[0, b] < 0:
                    qb[0, b] = e
                else:
                    qe[2, qb[1, b]] = e
                qb[1, b] = e
            else:
                qe[2, e] = c[QFREE]
                c[QFREE] = e
                c[QN] -= 1
            e = nx


@_jit
def q_entries(qe, qb, c):
    """Every calendar entry as ``(expiries, versions, ids)``, in due order (tests, snapshots)."""
    n = c[QN]
    xs = np.empty(n, np.float64)
    vs = np.empty(n, np.int64)
    ids = np.empty(n, np.int64)
    m = 0
    for x in range(c[QBASE], c[QBASE] + QW):
        e = qb[0, x & (QW - 1)]
        while e >= 0:
            xs[m], vs[m], ids[m] = x, qe[0, e], qe[1, e]
            m += 1
            e = qe[2, e]
    return xs[:m], vs[:m], ids[:m]


# ------------------------------------------------------------ operations
@_jit
def place(ids, tiers, values, exp_t, exp_a, pins, orders, cap, ib, val, hv, hi, tk, ti, ak, ai, qe, qb, c):
    """(Re-)insert blocks in sequence (see ``Evictor._place``); returns the
    number of pins granted, or -1 (nothing done) if an id is outside ``ib``
    or a heap lacks room for ``len(ids)`` more entries. An empty
    ``values``, ``exp_t``, ``exp_a`` or ``pins`` stands for the default of
    every block (0, no expiry, no expiry, no pin); an empty ``tiers`` or
    ``orders`` for each block's own (its row in ``ib``: a re-score)."""
    n = ids.shape[0]
    if max(c[HN], c[TN], c[AN], c[QN]) + n > hv.shape[0]:
        return -1
    nblk = ib.shape[1]
    for k in range(n):
        if ids[k] < 0 or ids[k] >= nblk:
            return -1
    has_v, has_t, has_a, has_p = values.shape[0] > 0, exp_t.shape[0] > 0, exp_a.shape[0] > 0, pins.shape[0] > 0
    has_tier, has_ord = tiers.shape[0] > 0, orders.shape[0] > 0
    # A batch that re-places a large share of the order (an expiry round re-scores about half
    # the free blocks on spf's workloads) appends its entries unsifted and rebuilds the heap
    # once from the live entries, O(heap): cheaper than n sifts, and the stale entries the
    # re-placed blocks leave behind are gone at once instead of being popped one by one by
    # later victim searches. The key is total, so the pops are the same either way.
    bulk = n >= 64 and 4 * n >= c[LIVE]
    rows = bulk and ib.shape[1] <= 2 * (c[LIVE] + n)  # rebuild from the rows: no entry pushed
    v = c[VERSION]
    granted = 0
    tn, an = c[TN], c[AN]
    for k in range(n):
        i = ids[k]
        tier = tiers[k] if has_tier else ib[TIER, i]
        value = values[k] if has_v else 0.0
        v += 1
        if has_t:
            x = exp_t[k]
            if x != np.inf:
                tn = _t_push(tk, ti, tn, x, v, i)
        if has_a:
            y = exp_a[k]
            if y < NEVER_ARRIVAL_F:
                if _q_fits(y, c):
                    _q_push(qe, qb, c, y, v, i)
                else:
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
            if has_ord:
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
        if rows:
            ib[HST, i] = 0  # (an entry to make)
        else:
            _h_push(ib, val, hv, hi, c, i, 2 if pin else tier, not bulk)
    c[VERSION] = v
    live = c[LIVE]
    if tn + an + c[QN] > 2 * live + 1024:
        tn = _t_filter(ib, tk, ti, tn, -np.inf, True)
        an = _t_filter(ib, ak, ai, an, -np.inf, True)
        _q_compact(ib, qe, qb, c)
    c[TN], c[AN] = tn, an
    if rows:
        _h_rebuild_rows(ib, val, hv, hi, c)
    elif bulk or c[HN] > 2 * live + 1024:
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


def due(now, arrival, ib, tk, ti, ak, ai, qe, qb, c):
    """The blocks whose score expired by ``now`` (seconds heap, first) then
    by ``arrival`` (calendar and arrivals heap, merged), in ``(expiry,
    version)`` order, live entries only, each block once (first occurrence).
    Changes no entry. The heaps' due entries are sorted by numpy's
    ``lexsort`` (numba's sorts are several times slower; the calendar's come
    in order, and on spf's workloads the heaps hold none);
    ``(expiry, version)`` pairs are distinct, so the order is that of any sort."""
    tk_, tv, tid = due_entries(tk, ti, c[TN], now) if c[TN] else _NO_DUE  # (a policy uses one clock)
    ak_, av, aid = due_entries(ak, ai, c[AN], arrival) if c[AN] else _NO_DUE
    if len(tv) > 1:
        o = np.lexsort((tv, tk_))
        tv, tid = tv[o], tid[o]
    if len(av) > 1:
        o = np.lexsort((av, ak_))
        ak_, av, aid = ak_[o], av[o], aid[o]
    return due_live(tv, tid, ak_, av, aid, float(arrival), ib, qe, qb, c)


@_jit
def _keep(out, m, i, v, ib, s):
    """Append block ``i`` to ``out[:m]`` if entry version ``v`` is live and
    the block is not there yet (dedup stamp ``s``); returns the new length."""
    if ib[IN, i] and ib[VER, i] == v and ib[DST, i] != s:
        ib[DST, i] = s
        out[m] = i
        m += 1
    return m


@_jit
def due_live(tv, tid, ak_, av, aid, arrival, ib, qe, qb, c):
    """:func:`due`'s live entries, each block once (first occurrence): the
    sorted seconds entries ``(versions, ids)``, then the calendar's buckets
    due by ``arrival`` merged with the sorted arrivals-heap entries
    ``(expiries, versions, ids)`` by ``(expiry, version)``."""
    s = c[DSEQ] + 1
    c[DSEQ] = s
    last = _q_last(arrival, c)
    out = np.empty(tid.shape[0] + aid.shape[0] + (c[QN] if last >= c[QBASE] else 0), np.int64)
    m = 0
    for j in range(tid.shape[0]):
        m = _keep(out, m, tid[j], tv[j], ib, s)
    h, nh = 0, aid.shape[0]
    for x in range(c[QBASE], last + 1):
        e = qb[0, x & (QW - 1)]
        while e >= 0:
            v = qe[0, e]
            while h < nh and (ak_[h] < x or (ak_[h] == x and av[h] < v)):
                m = _keep(out, m, aid[h], av[h], ib, s)
                h += 1
            m = _keep(out, m, qe[1, e], v, ib, s)
            e = qe[2, e]
    while h < nh:
        m = _keep(out, m, aid[h], av[h], ib, s)
        h += 1
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
def drain(now, arrival, ib, tk, ti, ak, ai, qe, qb, c):
    """Drop every expiry entry due by ``now`` / ``arrival`` (the ones
    :func:`due` saw)."""
    c[TN] = _t_drop(ib, tk, ti, c[TN], now)
    c[AN] = _t_drop(ib, ak, ai, c[AN], arrival)
    _q_drain(arrival, qe, qb, c)


def calendar(cap: int) -> tuple:
    """A fresh ``(qe, qb, c)``: an empty calendar with a pool of ``cap``
    entries, and the counters (the free chain empty)."""
    c = np.zeros(NCOUNTERS, np.int64)
    c[QFREE] = -1
    return np.zeros((3, cap), np.int64), np.full((2, QW), -1, np.int64), c


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
    qe, qb, c = calendar(cap)
    ids = np.arange(4, dtype=np.int64)
    ones = np.ones(4)
    st = (ib, val, hv, hi, tk, ti, ak, ai, qe, qb, c)
    place(ids, np.ones(4, np.int64), ones, ones, ones, np.zeros(4, np.bool_), ids, 2, *st)
    e = np.empty(0)
    place(ids, np.ones(4, np.int64), e, e, e, np.empty(0, np.bool_), ids, 2, *st)
    live_unique(ids, True, ib, c)
    remove_many(ids[:0], ib, c)
    q_due_any(2.0, qb, c)
    due(2.0, 2.0, ib, tk, ti, ak, ai, qe, qb, c)
    drain(2.0, 2.0, ib, tk, ti, ak, ai, qe, qb, c)
    q_entries(qe, qb, c)
    out, pinned = np.empty(2, np.int64), np.empty(2, np.bool_)
    take(2, True, out, pinned, ib, val, hv, hi, c)
    restore(out, pinned, ib, val, hv, hi, c)
    take(2, False, out, pinned, ib, val, hv, hi, c)
    settle(out, np.zeros(2, np.bool_), ib, val, hv, hi, c)
