"""The sequential replay of the ``lru`` arm as one numba-compiled loop over
int arrays: the same model, the same decisions and the same counts as
:func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` whose policy implements no hook
(vLLM's own free-queue order), about 20x faster.

Imported by the simulator on the first compiled replay only (vLLM's CPU
build scans every loaded module when it starts and trips over llvmlite's
ffi if numba is loaded before that; see :mod:`spfcore.evictor`).

Block keys are interned to dense ids ``>= 0`` by the caller; the request
arrays (and Belady's future index) are passed read-only, so one compiled
signature serves fresh arrays and the memory maps of a prepared stream
(:mod:`spfcore.sim.prepared`). State (owned
by :class:`spfcore.sim.simulator._LruState`, passed in on every call; ``nb``
= ``num_blocks``, ``K`` = key-id capacity):

* ``key_of[nb]``: the key id a block holds, -1 none (hashless or evicted).
* Per key id, the cached blocks holding it in insertion order, a doubly
  linked list (vLLM's ``BlockHashToBlockMap`` keeps duplicates; a lookup
  takes the earliest inserted): ``kh[K]`` head, ``kt[K]`` tail (int32; -1: no
  block), ``dn[nb]`` / ``dp[nb]`` next / previous block of the same key.
* vLLM's free queue of cached blocks: a doubly linked list ``ln[nb]`` /
  ``lp[nb]`` with block 0 (the null block, never free) as its sentinel:
  ``ln[0]`` is the least recently released block (the next victim),
  ``lp[0]`` the most recent; ``ln[b] = -1`` marks a block a request's touch
  took out (so a lookup that finds it twice is told).
* Hashless free blocks: a stack ``hs[nb]`` (top: the next one reused,
  vLLM prepends them).
* ``c``: int64 counters (indices below).
"""

from __future__ import annotations

import numba
import numpy as np

#: Counter indices: hashless stack size, cached free blocks, evicted cached
#: blocks (``PolicyRuntime.evictions``), allocation calls
#: (``PolicyRuntime.evict_calls``), victims written.
HSN, LRUN, EVICTIONS, EVICT_CALLS, NVICT = range(5)
NCOUNTERS = 5

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _drop(b, key_of, kh, kt, dn, dp):
    """Block ``b`` forgets its key (vLLM ``_maybe_evict_cached_block``)."""
    k = key_of[b]
    if k < 0:
        return
    key_of[b] = -1
    p, q = dp[b], dn[b]
    if p >= 0:
        dn[p] = q
    else:
        kh[k] = q
    if q >= 0:
        dp[q] = p
    else:
        kt[k] = p


@_jit
def _lookup(kh, bk, f0, n, blocks):
    """A request's cache lookup: the longest cached chain of its first ``n``
    block keys (key ids ``bk[f0:f0 + n]``; ``kh``: key id -> the earliest
    inserted block holding it, or -1) written to ``blocks[:h]``; returns ``h``,
    the hit blocks."""
    h = 0
    while h < n:
        b = kh[bk[f0 + h]]
        if b < 0:
            break
        blocks[h] = b
        h += 1
    return h


@_jit
def _insert(b, k, key_of, kh, kt, dn, dp):
    """Block ``b`` is cached with key ``k`` (appended to the key's blocks)."""
    key_of[b] = k
    t = kt[k]
    dp[b] = t
    dn[b] = -1
    if t >= 0:
        dn[t] = b
    else:
        kh[k] = b
    kt[k] = b


@_jit
def _retire(b, key_of, kh, kt, dn, dp, c, victims):
    """Block ``b`` taken as a victim: its key (if any) leaves the prefix cache
    (an eviction), and ``b`` is recorded in ``victims`` when it is kept."""
    if key_of[b] >= 0:
        c[EVICTIONS] += 1
        _drop(b, key_of, kh, kt, dn, dp)
    if len(victims):
        victims[c[NVICT]] = b
        c[NVICT] += 1
    return b


@_jit
def _take(key_of, kh, kt, dn, dp, ln, lp, hs, c, victims):
    """One victim: the top hashless block, else the free queue's head
    (:func:`_retire`)."""
    if c[HSN] > 0:
        c[HSN] -= 1
        b = hs[c[HSN]]
    else:
        b = ln[0]
        q = ln[b]
        ln[0] = q
        lp[q] = 0
        c[LRUN] -= 1
    return _retire(b, key_of, kh, kt, dn, dp, c, victims)


@_jit
def init(num_blocks, ln, lp, hs, c):
    """Every usable block (1 .. num_blocks-1) hashless and free, block 1 on
    top; an empty free queue."""
    ln[0] = 0
    lp[0] = 0
    n = num_blocks - 1
    for j in range(n):
        hs[j] = num_blocks - 1 - j
    c[HSN] = n
    c[LRUN] = 0


@_jit
def replay(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total,
           key_of, kh, kt, dn, dp, ln, lp, hs, c, blocks, hits, victims):
    """Replay requests ``r = 0 .. len(n_prompt)-1`` in order.

    Request ``r``: prompt block keys ``bk[bk_off[r]:bk_off[r+1]]``, the
    first ``nf_[r]`` of them full (stored when computed), the first
    ``n_look[r]`` looked up; decode keys
    ``dk[dk_off[r]:dk_off[r+1]]``; ``n_prompt[r]`` / ``n_total[r]`` blocks
    held after prefill / at the end. Writes ``hits[r]`` (hit blocks);
    appends every victim to ``victims`` unless it is empty. ``blocks``:
    scratch of at least ``max(n_total)`` entries.

    Returns:
        -1; or ``r >= 0``, the index of a request that needs more blocks than
        are free (nothing of it replayed); or ``-2 - r``: request ``r``'s
        lookup found block ``c[TWICE]`` twice (keys that repeat within a
        prompt: the reference loop's ``touch`` raises ``KeyError`` there; the
        blocks before it have left the free queue, as there).
    """
    for r in range(len(n_prompt)):
        f0 = bk_off[r]
        nf = nf_[r]
        # lookup: the longest cached chain (earliest inserted block per key)
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        np_, nt = n_prompt[r], n_total[r]
        if nt > c[HSN] + c[LRUN]:  # needs nt - h blocks; h of the free ones are its hits
            return r
        for j in range(h):  # touch: hit blocks leave the free queue
            b = blocks[j]
            p, q = lp[b], ln[b]
            if q < 0:  # taken out already: not free
                c[TWICE] = b
                return -2 - r
            ln[p] = q
            lp[q] = p
            ln[b] = -1
            c[LRUN] -= 1
        c[EVICT_CALLS] += 1
        for j in range(h, np_):
            blocks[j] = _take(key_of, kh, kt, dn, dp, ln, lp, hs, c, victims)
        for j in range(h, nf):  # newly computed full prompt blocks
            _insert(blocks[j], bk[f0 + j], key_of, kh, kt, dn, dp)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            done, nf_all = nf, nf + nd
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    _insert(blocks[done], dk[d0 + done - nf], key_of, kh, kt, dn, dp)
                    done += 1
                if j < nt:
                    c[EVICT_CALLS] += 1
                    blocks[nb_] = _take(key_of, kh, kt, dn, dp, ln, lp, hs, c, victims)
                    nb_ += 1
        # release, tail first: cached blocks to the free queue's tail, hashless on top
        for j in range(nb_ - 1, -1, -1):
            b = blocks[j]
            if key_of[b] >= 0:
                t = lp[0]
                ln[t] = b
                lp[b] = t
                ln[b] = 0
                lp[0] = b
                c[LRUN] += 1
        for j in range(nb_):
            b = blocks[j]
            if key_of[b] < 0:
                hs[c[HSN]] = b
                c[HSN] += 1
        hits[r] = h
    return -1


# ------------------------------------------------------------ belady_oracle
# The ``belady_oracle`` plugin's sequential decisions (spfcore_belady_oracle: score =
# -(next use * 2**16 + min(depth, 2**16 - 1)), expiring at arrival next use + 1, or at
# ``now`` for a block of the request waiting for its lookup) through the scored
# evictor's order ((value, release order), lowest first; hashless blocks first;
# expired scores re-scored at the arrival and before a pop that takes cached blocks).
#: More counter indices (belady): hook calls, order-heap and expiry-heap
#: entries, release orders and score versions handed out; (lru and belady)
#: the block a lookup found twice.
HOOK_CALLS, HN, XN, ORDER, VERSION, TWICE = range(5, 11)
NCOUNTERS_B = 11
NEVER = 2**36  # spfcore_belady_oracle.NEVER
DEPTH_SLOTS = 2**16  # spfcore_belady_oracle.DEPTH_SLOTS
INF = 2**62


@_jit
def _next_use(k, pos, uses, uses_off):
    """First arrival index > ``pos`` among key id ``k``'s uses, else NEVER
    (also for a key id beyond the index: a key no prompt holds)."""
    if k >= len(uses_off) - 1:
        return NEVER
    lo, hi = uses_off[k], uses_off[k + 1]
    while lo < hi:
        m = (lo + hi) >> 1
        if uses[m] <= pos:
            lo = m + 1
        else:
            hi = m
    return uses[lo] if lo < uses_off[k + 1] else NEVER


@_jit
def _o_less(ev, eo, a, b):
    return ev[a] < ev[b] or (ev[a] == ev[b] and eo[a] < eo[b])


@_jit
def _o_swap(ev, eo, eb, ex, a, b):
    ev[a], ev[b] = ev[b], ev[a]
    eo[a], eo[b] = eo[b], eo[a]
    eb[a], eb[b] = eb[b], eb[a]
    ex[a], ex[b] = ex[b], ex[a]


@_jit
def _o_down(ev, eo, eb, ex, j, n):
    while True:
        m = 2 * j + 1
        if m >= n:
            return
        if m + 1 < n and _o_less(ev, eo, m + 1, m):
            m += 1
        if not _o_less(ev, eo, m, j):
            return
        _o_swap(ev, eo, eb, ex, m, j)
        j = m


@_jit
def _o_up(ev, eo, eb, ex, j):
    while j > 0:
        p = (j - 1) >> 1
        if not _o_less(ev, eo, j, p):
            return
        _o_swap(ev, eo, eb, ex, j, p)
        j = p


@_jit
def _o_pop(ev, eo, eb, ex, n):
    n -= 1
    _o_swap(ev, eo, eb, ex, 0, n)
    _o_down(ev, eo, eb, ex, 0, n)
    return n


@_jit
def _compact(ev, eo, eb, ex, n, inn, ver):
    """Keep the live entries (block free, current version) and re-heapify;
    returns the new size. With ``eo`` all zero this serves the expiry heap."""
    m = 0
    for j in range(n):
        b = eb[j]
        if inn[b] and ex[j] == ver[b]:
            ev[m], eo[m], eb[m], ex[m] = ev[j], eo[j], eb[j], ex[j]
            m += 1
    for j in range(m // 2 - 1, -1, -1):
        _o_down(ev, eo, eb, ex, j, m)
    return m


@_jit
def _score(b, pos, waiting, key_of, depth, ordr, ver, inn, uses, uses_off, ov, oo, ob, ox, xv, xo, xb, xx, c):
    """(Re-)score free cached block ``b`` at position ``pos`` (``waiting``: its
    key is in the request waiting for its lookup): a new version, an order
    entry and, unless it never expires, an expiry entry."""
    if waiting:
        nu, due = pos, pos  # expires_at = now (seconds) = pos; expires_at_arrival = pos + 1
    else:
        nu = _next_use(key_of[b], pos, uses, uses_off)
        due = nu + 1 if nu < NEVER else INF
    d = depth[b]
    v = -(nu * DEPTH_SLOTS + (d if d < DEPTH_SLOTS - 1 else DEPTH_SLOTS - 1))
    c[VERSION] += 1
    ver[b] = c[VERSION]
    inn[b] = 1
    if c[HN] == len(ov):
        c[HN] = _compact(ov, oo, ob, ox, c[HN], inn, ver)
    n = c[HN]
    ov[n], oo[n], ob[n], ox[n] = v, ordr[b], b, ver[b]
    c[HN] = n + 1
    _o_up(ov, oo, ob, ox, n)
    if due < INF:
        if c[XN] == len(xv):
            c[XN] = _compact(xv, xo, xb, xx, c[XN], inn, ver)
        n = c[XN]
        xv[n], xo[n], xb[n], xx[n] = due, 0, b, ver[b]
        c[XN] = n + 1
        _o_up(xv, xo, xb, xx, n)


@_jit
def _rescore_due(pos, stamp, mark, due_buf, key_of, depth, ordr, ver, inn, uses, uses_off,
                 ov, oo, ob, ox, xv, xo, xb, xx, c):
    """Re-score every free block whose score expired by ``pos`` (one score
    hook call if any), waiting keys those with ``mark[key] == stamp``."""
    m = 0
    while c[XN] and xv[0] <= pos:
        b, x = xb[0], xx[0]
        c[XN] = _o_pop(xv, xo, xb, xx, c[XN])
        if inn[b] and x == ver[b]:
            due_buf[m] = b
            m += 1
    if m:
        c[HOOK_CALLS] += 1
        for j in range(m):
            b = due_buf[j]
            _score(b, pos, mark[key_of[b]] == stamp, key_of, depth, ordr, ver, inn, uses, uses_off,
                   ov, oo, ob, ox, xv, xo, xb, xx, c)


@_jit
def _take_b(pos, key_of, kh, kt, dn, dp, hs, inn, ver, ov, oo, ob, ox, c, victims):
    """One victim: the top hashless block, else the lowest live order entry
    (:func:`_retire`)."""
    if c[HSN] > 0:
        c[HSN] -= 1
        b = hs[c[HSN]]
    else:
        while True:
            b, x = ob[0], ox[0]
            c[HN] = _o_pop(ov, oo, ob, ox, c[HN])
            if inn[b] and x == ver[b]:
                break
        inn[b] = 0
        c[LRUN] -= 1
    return _retire(b, key_of, kh, kt, dn, dp, c, victims)


@_jit
def _alloc(n, pos, blocks, at, mark, due_buf, key_of, kh, kt, dn, dp, hs, depth, ordr, ver, inn, uses, uses_off,
           ov, oo, ob, ox, xv, xo, xb, xx, c, victims):
    """``PolicyRuntime.evict(n)``: re-score expired scores first when cached
    blocks are taken, then ``n`` victims into ``blocks[at:]``."""
    c[EVICT_CALLS] += 1
    if n > c[HSN] and c[XN] and xv[0] <= pos:
        _rescore_due(pos, -1, mark, due_buf, key_of, depth, ordr, ver, inn, uses, uses_off,
                     ov, oo, ob, ox, xv, xo, xb, xx, c)
    for j in range(n):
        blocks[at + j] = _take_b(pos, key_of, kh, kt, dn, dp, hs, inn, ver, ov, oo, ob, ox, c, victims)


@_jit
def replay_belady(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, uses, uses_off, first_arrival,
                  key_of, kh, kt, dn, dp, hs, depth, ordr, ver, inn, mark, ov, oo, ob, ox, xv, xo, xb, xx, c,
                  blocks, due_buf, hits, victims):
    """:func:`replay` for ``belady_oracle``: request ``r`` (arrival index
    ``first_arrival + r``) has block keys ``bk[bk_off[r]:bk_off[r+1]]``, the
    first ``nf_[r]`` of them full (stored), ``n_look[r]`` looked up. The
    future index: key id ``k``'s arrival indices, ascending, once per request,
    ``uses[uses_off[k]:uses_off[k+1]]``. ``due_buf``: scratch of ``num_blocks``.
    Returns as :func:`replay` (``-2 - r``: after request ``r``'s hit hook)."""
    for r in range(len(n_prompt)):
        pos = first_arrival + r
        f0 = bk_off[r]
        nf = nf_[r]
        for j in range(f0, bk_off[r + 1]):  # the waiting request's keys
            mark[bk[j]] = pos
        # arrival: the arrived hook, then expired scores re-scored (this request waiting)
        c[HOOK_CALLS] += 1  # spfcore_request_arrived
        if c[XN] and xv[0] <= pos:
            _rescore_due(pos, pos, mark, due_buf, key_of, depth, ordr, ver, inn, uses, uses_off,
                         ov, oo, ob, ox, xv, xo, xb, xx, c)
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        c[HOOK_CALLS] += 1  # spfcore_blocks_hit: the request is served, no longer waiting
        np_, nt = n_prompt[r], n_total[r]
        if nt > c[HSN] + c[LRUN]:
            return r
        for j in range(h):  # touch
            b = blocks[j]
            if not inn[b]:  # taken out already: not free
                c[TWICE] = b
                return -2 - r
            inn[b] = 0
            c[LRUN] -= 1
        _alloc(np_ - h, pos, blocks, h, mark, due_buf, key_of, kh, kt, dn, dp, hs, depth, ordr, ver, inn, uses,
               uses_off, ov, oo, ob, ox, xv, xo, xb, xx, c, victims)
        for j in range(h, nf):
            b = blocks[j]
            _insert(b, bk[f0 + j], key_of, kh, kt, dn, dp)
            depth[b] = j
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        if nt > np_ or nd:
            done, nf_all = nf, nf + nd
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    b = blocks[done]
                    _insert(b, dk[d0 + done - nf], key_of, kh, kt, dn, dp)
                    depth[b] = done
                    done += 1
                if j < nt:
                    _alloc(1, pos, blocks, nb_, mark, due_buf, key_of, kh, kt, dn, dp, hs, depth, ordr, ver, inn,
                           uses, uses_off, ov, oo, ob, ox, xv, xo, xb, xx, c, victims)
                    nb_ += 1
        # release, tail first: cached blocks scored (one call) with new release orders; hashless on top
        cached = 0
        for j in range(nb_ - 1, -1, -1):
            b = blocks[j]
            if key_of[b] >= 0:
                cached += 1
                c[ORDER] += 1
                ordr[b] = c[ORDER]
                _score(b, pos, False, key_of, depth, ordr, ver, inn, uses, uses_off,
                       ov, oo, ob, ox, xv, xo, xb, xx, c)
                c[LRUN] += 1
        if cached:
            c[HOOK_CALLS] += 1
        for j in range(nb_):
            b = blocks[j]
            if key_of[b] < 0:
                hs[c[HSN]] = b
                c[HSN] += 1
        hits[r] = h
    return -1


def warm_trace() -> tuple:
    """A tiny replay's input (two requests over key ids 0-2, as
    :func:`spfcore.sim.simulator._flatten` gives it: eight int64 arrays, and
    Belady's future index ``(uses, uses_off)`` of it), all read-only as the
    simulator passes them (memory maps of prepared streams, or views), for
    the kernels' ``warm()`` calls."""
    i64 = np.int64
    a = np.array
    trace = (a([0, 1, 0, 1, 2], i64), a([0, 2, 5], i64), a([2, 3], i64), a([1, 2], i64), a([3], i64),
             a([0, 1, 1], i64), a([2, 3], i64), a([3, 3], i64), a([0, 1, 0, 1, 1], i64), a([0, 2, 4, 5, 5], i64))
    for x in trace:
        x.flags.writeable = False
    return trace[:8], trace[8:]


def warm() -> None:
    """Call every kernel once on a tiny replay with the argument types the
    simulator uses: compiles them (or loads numba's on-disk cache) now."""
    nb, i64 = 8, np.int64
    trace, future = warm_trace()

    def state():
        key_of, dn, dp, ln, lp, hs = (np.full(nb, -1, i64) for _ in range(6))
        c = np.zeros(NCOUNTERS_B, i64)
        init(nb, ln, lp, hs, c)
        return key_of, np.full(4, -1, np.int32), np.full(4, -1, np.int32), dn, dp, ln, lp, hs, c

    key_of, kh, kt, dn, dp, ln, lp, hs, c = state()
    replay(*trace, key_of, kh, kt, dn, dp, ln, lp, hs, c, np.empty(nb, i64), np.empty(2, i64), np.empty(8, i64))
    key_of, kh, kt, dn, dp, ln, lp, hs, c = state()
    cap = 4 * nb
    z = [np.zeros(cap, i64) for _ in range(8)]
    replay_belady(*trace, *future, 0, key_of, kh, kt, dn, dp, hs,
                  np.zeros(nb, i64), np.zeros(nb, i64), np.zeros(nb, i64), np.zeros(nb, i64), np.full(4, -2, i64),
                  *z, c, np.empty(nb, i64), np.empty(nb, i64), np.empty(2, i64), np.empty(8, i64))
