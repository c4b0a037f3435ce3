"""The shipped ``belady_oracle`` arm's engine events as numba kernels over
int arrays, for :class:`spfcore.engine.compiled.BeladyKernelRuntime`: the
same decisions as a :class:`~spfcore.runtime.PolicyRuntime` driving
``spfcore_belady_oracle.BeladyOraclePolicy`` (its hooks and the scored
evictor's order and expiries), one kernel call per runtime event.

The policy's model (``spfcore_belady_oracle``; the simulator's sequential
replay of it is :func:`spfcore.sim._replay_nb.replay_belady`): a block's
score is ``-(next_use * 2**16 + min(depth, 2**16 - 1))``, ``next_use`` the
earliest *waiting* request (arrived, lookup not yet made) whose prompt
holds the block's hash, else the first arrival strictly after the position
(the latest arrival index), else :data:`NEVER`; it expires at arrival
``next_use + 1`` (not when ``NEVER``) and, when ``next_use`` is a waiting
request, at ``now`` seconds as well. The evictor takes hashless blocks
first (the most recently freed), then the lowest ``(value, release order)``
(every block is admitted: tier 1; the policy pins nothing); expired scores
are re-scored at each arrival (after the arrival hook) and before an
allocation that takes cached blocks. Which blocks a re-score round takes,
and the values it gives, are what decide; the order in which a round
re-scores its blocks decides nothing (each block keeps its release order,
and ``(value, release order)`` is total).

State (arrays, :func:`new_state`; the kernels take them as one int64
buffer whose regions they are, :func:`~spfcore.engine._kstate_nb.pack`: one
array argument to unbox a call, where an event's dozen were each unboxed):

* **Key rows** ``R[K + 1, 4]`` int64, 32 bytes per key id: the hash's four
  words ``W0 .. W3`` (the key, an ``int`` below ``2**256``, as 32
  big-endian bytes read as four int64 words: a 16-byte xxhash hash is the
  same int as 16 zero bytes and the hash, so every length up to 32 meets
  the future's ints exactly). **Next uses** ``NW[K + 1, 2]``, 16 bytes per
  key id (a prompt's keys have consecutive ids mostly, the policy numbers
  them in first-use order: an arrival's pass reads its rows in order):
  ``NEXT``, its first use strictly after the position (arrival index,
  :data:`NEVER` none), and ``WMIN``, the earliest waiting arrival whose
  prompt holds it (:data:`NEVER` none). Key id 0 is every hash no future
  request holds (and a block whose hash the runtime never heard stored):
  ``NEXT = WMIN = NEVER`` always. Ids ``1 .. K`` are the policy's own dense
  ids of the future's hashes, fixed by ``set_future`` (the table is built
  once, never changes).
* **Table** ``T[S, 2]`` (the hash's last word, key id; id 0: empty slot),
  ``S`` a power of two at least twice ``K + 1``: open addressing, linear
  probing from a mix of the four words; a probe reads a key row only when
  the last words match.
* **The future index**, per arrival index ``j`` its uses ``off[j] ..
  off[j + 1]``: key ids ``rk`` and each one's next use after ``j``
  (``after``, :data:`NEVER` none); per key id ``k`` its arrivals ascending,
  ``kuse[koff[k]:koff[k + 1]]``; ``WAIT[j]``: whether arrival ``j`` waits.
* **Blocks** ``BL[nb, 8]``, one line each: key id (-1: no hash), free and
  cached, release order, on the hashless stack ``hs``, depth, score
  version, the call stamp (a block named twice in one call).
* **The order**, lowest ``(value, release order)`` first (the value
  ``-(next_use * 2**16 + depth)``, exact in int64 as in the hooks'
  float64): entries ``E[cap, 4]`` ``(value, release order, block,
  version)``, appended by each scoring batch (a release, a re-score round)
  and cut into *runs* of consecutive entries ascending in that key
  (``RUN[r]``: first entry not taken yet, end). A finished request's chain
  released tail first is one run: an ancestor's next use is never later
  than its descendants' (a prompt holding a block holds its prefix), and
  its depth is lower. A binary min-heap ``HR`` over the runs, keyed by the
  key of an entry at or before each run's first live one (a lower bound:
  entries ascend in a run), gives the victim: the top run whose key is its
  first live entry's holds the lowest; stale heads are skipped and the key
  raised. An entry is live iff its block is free and cached with that
  version (lazy deletion: a hit or re-scored block leaves it stale); a full
  ``E`` keeps its live entries, run by run (through ``E2``). A victim is
  read in order from its run, where a heap over every block read a dozen
  scattered entries.
* **Expiries**: a heap of seconds ``TK[cap]`` float64 with rows ``TI[cap,
  2]`` ``(version, block)``; a calendar of arrivals, one bucket per arrival
  index ``1 .. span`` (an expiry is a next use plus one), ``QH[span + 1]``
  its first entry (-1: empty), entries ``QE[cap, 4]`` ``(version, block,
  next entry, -)`` handed out in order from a pool (a release's entries side
  by side; a drained bucket's slots are reused after the pool's next
  compaction, which keeps the live entries in address order), so a round
  reads its due buckets without a heap's sifts (each release leaves a stale
  entry behind for every block it re-scores, mostly due at the next
  arrival). Entries are live by the order's rule (block free, same version).
* ``c``: int64 counters (indices below).

Kernels return 0, or a negative number naming the block that breaks the
event protocol (the caller raises; nothing of the event is applied).
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.engine._kstate_nb import pack, prefetch, region, rows

#: Counter indices: hashless blocks on the stack, cached free blocks, evicted
#: cached blocks, allocations, hook calls the hook path makes, runs in the
#: runs' heap, seconds-heap and calendar entries, release orders and score versions
#: handed out, the call stamp, the policy's position (latest arrival index,
#: -1 before the first), the index's own position (``_at``), the runtime's
#: arrival clock (0 before the first arrival), blocks stored so far, the
#: calendar's lowest bucket that may hold entries, (unused), the calendar
#: pool's entries handed out, the requests waiting, the order's
#: entries and runs used.
(HSN, LRUN, EVICTIONS, EVICT_CALLS, HOOK_CALLS, HN, TN, AN, ORDER, VERSION, EPOCH, POS, AT, ARRIVAL, STORES, QLO,
 QSPARE, QTOP, NWAITING, EN, RN) = range(21)
NCOUNTERS = 21
W0, W1, W2, W3 = range(4)  # key row columns
NEXT, WMIN = range(2)  # next-use row columns
KEY, INN, ORD, HFREE, DEPTH, VER, MARK = range(7)  # block row columns (7: unused)
#: The state buffer's regions (:func:`~spfcore.engine._kstate_nb.pack`), in this order.
REGIONS = ("BL", "hs", "E", "E2", "RUN", "HR", "TK", "TI", "QE", "QH", "out", "due", "c", "R", "NW", "T", "off", "rk",
           "after", "kuse", "koff", "WAIT")
(X_BL, X_HS, X_E, X_E2, X_RUN, X_HR, X_TK, X_TI, X_QE, X_QH, X_OUT, X_DUE, X_C, X_R, X_NW, X_T, X_OFF, X_RK, X_AFTER,
 X_KUSE, X_KOFF, X_WAIT) = range(22)
#: spfcore_belady_oracle.NEVER and DEPTH_SLOTS.
NEVER = 2**36
DEPTH_SLOTS = 2**16
#: :func:`evict`'s answer when fewer than ``n`` blocks are free.
E_TOO_FEW = -1

_jit = numba.njit(cache=True, nogil=True)


# ------------------------------------------------------------ key table
@_jit
def _slot0(x0, x1, x2, x3, mask):
    x = x0 ^ x1 ^ x2 ^ x3
    x ^= x >> 29
    x ^= x >> 17
    return x & mask


@_jit
def build_table(R, T, mask, nk):
    """Insert key ids ``1 .. nk`` (their words in ``R``) into the empty ``T``."""
    for k in range(1, nk + 1):
        i = _slot0(R[k, W0], R[k, W1], R[k, W2], R[k, W3], mask)
        while T[i, 1] != 0:
            i = (i + 1) & mask
        T[i, 0], T[i, 1] = R[k, W3], k


@_jit
def _find(T, mask, R, w, j):
    """Key id of row ``j`` of ``w`` (four int64 words), 0 if no future hash."""
    w3 = w[j, 3]
    i = _slot0(w[j, 0], w[j, 1], w[j, 2], w3, mask)
    while True:
        k = T[i, 1]
        if k == 0:
            return 0
        if T[i, 0] == w3 and R[k, W0] == w[j, 0] and R[k, W1] == w[j, 1] and R[k, W2] == w[j, 2]:
            return k
        i = (i + 1) & mask


# ------------------------------------------------------------ heaps (int rows keyed by columns 0, 1)
@_jit
def _less(H, a, b):
    return H[a, 0] < H[b, 0] or (H[a, 0] == H[b, 0] and H[a, 1] < H[b, 1])


@_jit
def _swap(H, a, b):
    for x in range(4):
        H[a, x], H[b, x] = H[b, x], H[a, x]


@_jit
def _down(H, j, n):
    while True:
        m = 2 * j + 1
        if m >= n:
            return
        if m + 1 < n and _less(H, m + 1, m):
            m += 1
        if not _less(H, m, j):
            return
        _swap(H, m, j)
        j = m


@_jit
def _up(H, j):
    while j > 0:
        p = (j - 1) >> 1
        if not _less(H, j, p):
            return
        _swap(H, j, p)
        j = p


@_jit
def _pop(H, n):
    """Drop the top of a heap of ``n``; returns ``n - 1``."""
    n -= 1
    _swap(H, 0, n)
    _down(H, 0, n)
    return n


# seconds heap: float keys TK, rows TI (version, block)
@_jit
def _t_swap(TK, TI, a, b):
    TK[a], TK[b] = TK[b], TK[a]
    TI[a, 0], TI[b, 0] = TI[b, 0], TI[a, 0]
    TI[a, 1], TI[b, 1] = TI[b, 1], TI[a, 1]


@_jit
def _t_less(TK, TI, a, b):
    return TK[a] < TK[b] or (TK[a] == TK[b] and TI[a, 0] < TI[b, 0])


@_jit
def _t_down(TK, TI, j, n):
    while True:
        m = 2 * j + 1
        if m >= n:
            return
        if m + 1 < n and _t_less(TK, TI, m + 1, m):
            m += 1
        if not _t_less(TK, TI, m, j):
            return
        _t_swap(TK, TI, m, j)
        j = m


@_jit
def _t_push(TK, TI, n, x, v, b, BL):
    if n == TK.shape[0]:  # full: keep the live entries
        m = 0
        for j in range(n):
            q = TI[j, 1]
            if BL[q, INN] and BL[q, VER] == TI[j, 0]:
                TK[m], TI[m, 0], TI[m, 1] = TK[j], TI[j, 0], TI[j, 1]
                m += 1
        for j in range(m // 2 - 1, -1, -1):
            _t_down(TK, TI, j, m)
        n = m
    TK[n], TI[n, 0], TI[n, 1] = x, v, b
    j = n
    while j > 0:
        p = (j - 1) >> 1
        if not _t_less(TK, TI, j, p):
            break
        _t_swap(TK, TI, j, p)
        j = p
    return n + 1


# ------------------------------------------------------------ the arrivals calendar
@_jit
def _q_compact(QH, QE, BL, c):
    """The pool is full: keep the live entries of the buckets from
    ``c[QLO]`` on, moved down in address order (a bucket's entries stay
    near each other), every other one dropped (stale, or drained)."""
    top = c[QTOP]
    for q in range(top):
        QE[q, 3] = -1
    for x in range(c[QLO], QH.shape[0]):  # mark the live ones
        q = QH[x]
        while q >= 0:
            b = QE[q, 1]
            if BL[b, INN] and BL[b, VER] == QE[q, 0]:
                QE[q, 3] = 1
            q = QE[q, 2]
    m = 0
    for q in range(top):  # their new places
        if QE[q, 3] == 1:
            QE[q, 3] = m
            m += 1
    for x in range(c[QLO], QH.shape[0]):  # the chains of the live ones, in new places
        q, last = QH[x], -1
        QH[x] = -1
        while q >= 0:
            nxt = QE[q, 2]
            if QE[q, 3] >= 0:
                if last < 0:
                    QH[x] = QE[q, 3]
                else:
                    QE[last, 2] = QE[q, 3]
                QE[q, 2] = -1
                last = q
            q = nxt
    for q in range(top):  # moved down (a new place is never after the old one)
        t = QE[q, 3]
        if t >= 0:
            nxt = QE[q, 2]
            QE[t, 0], QE[t, 1] = QE[q, 0], QE[q, 1]
            QE[t, 2] = nxt
    c[QTOP] = m
    c[AN] = m


@_jit
def _q_push(x, v, b, QH, QE, BL, c):
    """Block ``b``'s score (version ``v``) expires at arrival ``x`` (``1 <= x
    <= span``: a next use plus one): an entry at the head of bucket ``x``,
    the pool's next one (a release's entries side by side)."""
    if c[QTOP] == QE.shape[0]:
        _q_compact(QH, QE, BL, c)
    q = c[QTOP]
    c[QTOP] = q + 1
    QE[q, 0], QE[q, 1], QE[q, 2] = v, b, QH[x]
    QH[x] = q
    if x < c[QLO]:
        c[QLO] = x
    c[AN] += 1


# ------------------------------------------------------------ the order: sorted runs
@_jit
def _live(E, q, BL):
    b = E[q, 2]
    return BL[b, INN] != 0 and BL[b, VER] == E[q, 3]


@_jit
def _rebuild(E, E2, RUN, HR, BL, c):
    """Keep the live entries of every run (in order, through ``E2``), drop
    the empty runs, rebuild the runs' heap from their heads."""
    m = 0
    nr = 0
    for h in range(c[HN]):
        r = HR[h, 2]
        s0 = m
        for q in range(RUN[r, 0], RUN[r, 1]):
            if _live(E, q, BL):
                for x in range(4):
                    E2[m, x] = E[q, x]
                m += 1
        if m > s0:
            RUN[nr, 2], RUN[nr, 3] = s0, m  # (columns 2, 3: scratch; the runs are renumbered below)
            nr += 1
    for q in range(m):
        for x in range(4):
            E[q, x] = E2[q, x]
    for r in range(nr):
        RUN[r, 0], RUN[r, 1] = RUN[r, 2], RUN[r, 3]
        q = RUN[r, 0]
        HR[r, 0], HR[r, 1], HR[r, 2] = E[q, 0], E[q, 1], r
    for j in range(nr // 2 - 1, -1, -1):
        _down(HR, j, nr)
    c[EN], c[RN], c[HN] = m, nr, nr


@_jit
def _push_run(r, E, RUN, HR, c):
    q = RUN[r, 0]
    n = c[HN]
    HR[n, 0], HR[n, 1], HR[n, 2] = E[q, 0], E[q, 1], r
    c[HN] = n + 1
    _up(HR, n)


@_jit
def _place(ids, n, now, NW, BL, E, E2, RUN, HR, TK, TI, QH, QE, c):
    """Score blocks ``ids[:n]`` (:func:`_value`, each keeping its release
    order) and append their order entries ``(value, release order, block,
    version)``: consecutive entries ascending in ``(value, release order)``
    make one run (a chain released tail first is one: its blocks' next uses
    do not fall towards its tail, and its depths do), each run one entry of
    the runs' heap, keyed by a lower bound of its first live entry."""
    if c[EN] + n > E.shape[0] or c[RN] + n > RUN.shape[0]:
        _rebuild(E, E2, RUN, HR, BL, c)
    for j in range(n):  # the blocks' next-use rows: the misses overlapped
        k = BL[ids[j], KEY]
        prefetch(NW, k if k > 0 else 0, 0)
    cur = -1
    lv = lo = 0
    for j in range(n):
        b = ids[j]
        v = _value(b, now, NW, BL, TK, TI, QH, QE, c)
        o = BL[b, ORD]
        q = c[EN]
        E[q, 0], E[q, 1], E[q, 2], E[q, 3] = v, o, b, BL[b, VER]
        c[EN] = q + 1
        if cur >= 0 and (v > lv or (v == lv and o > lo)):
            RUN[cur, 1] = q + 1
        else:
            if cur >= 0:
                _push_run(cur, E, RUN, HR, c)
            cur = c[RN]
            c[RN] = cur + 1
            RUN[cur, 0], RUN[cur, 1] = q, q + 1
        lv, lo = v, o
    if cur >= 0:
        _push_run(cur, E, RUN, HR, c)


@_jit
def _take(E, RUN, HR, BL, c):
    """The lowest live entry's block, taken from its run (the caller knows
    one is free). A run's heap key is the key of an entry at or before its
    first live one (entries ascend within a run), so the top run whose key is
    its first live entry's holds the lowest; stale heads are skipped and the
    key raised."""
    while True:
        r = HR[0, 2]
        q, end = RUN[r, 0], RUN[r, 1]
        while q < end and not _live(E, q, BL):
            q += 1
        if q == end:
            c[HN] = _pop(HR, c[HN])
            continue
        RUN[r, 0] = q
        if E[q, 0] != HR[0, 0] or E[q, 1] != HR[0, 1]:
            HR[0, 0], HR[0, 1] = E[q, 0], E[q, 1]
            _down(HR, 0, c[HN])
            continue
        b = E[q, 2]
        RUN[r, 0] = q + 1
        if q + 1 < end:
            HR[0, 0], HR[0, 1] = E[q + 1, 0], E[q + 1, 1]
            _down(HR, 0, c[HN])
        else:
            c[HN] = _pop(HR, c[HN])
        return b


# ------------------------------------------------------------ scores
@_jit
def _value(b, now, NW, BL, TK, TI, QH, QE, c):
    """(Re-)score free cached block ``b`` (``spfcore_score_blocks``'s value
    and expiries; the caller counts the hook call and makes its order
    entry): a new version, its expiry entries; returns the value."""
    k = BL[b, KEY]
    if k < 0:
        k = 0  # a block the runtime never heard stored: the hooks' key None, id 0
    w = NW[k, WMIN]
    if w < NEVER:
        nu = w
        ea = w + 1
    else:
        nu = NW[k, NEXT]
        ea = nu + 1 if nu < NEVER else -1
    d = BL[b, DEPTH]
    if d > DEPTH_SLOTS - 1:
        d = DEPTH_SLOTS - 1
    v = -(nu * DEPTH_SLOTS + d)
    c[VERSION] += 1
    ver = c[VERSION]
    BL[b, VER] = ver
    BL[b, INN] = 1
    if w < NEVER:
        c[TN] = _t_push(TK, TI, c[TN], now, ver, b, BL)
    if ea >= 0:
        _q_push(ea, ver, b, QH, QE, BL, c)
    return v


@_jit
def _expire(now, arrival, due, NW, BL, E, E2, RUN, HR, TK, TI, QH, QE, c):
    """Re-score every free cached block whose score expired by ``now``
    (seconds) or ``arrival`` (one ``spfcore_score_blocks`` call if any):
    the due entries are dropped first, live ones' blocks collected once
    each, then scored (their new expiries wait for the next round)."""
    if not ((c[TN] and TK[0] <= now) or (c[AN] and c[QLO] <= arrival)):
        return
    c[EPOCH] += 1
    e = c[EPOCH]
    m = 0
    n = c[TN]
    while n and TK[0] <= now:
        v, b = TI[0, 0], TI[0, 1]
        n -= 1
        _t_swap(TK, TI, 0, n)
        _t_down(TK, TI, 0, n)
        if BL[b, INN] and BL[b, VER] == v and BL[b, MARK] != e:
            BL[b, MARK] = e
            due[m] = b
            m += 1
    c[TN] = n
    hi = min(arrival, QH.shape[0] - 1)
    for x in range(c[QLO], hi + 1):  # the calendar's buckets due (each dropped whole)
        q = QH[x]
        while q >= 0:
            v, b, nxt = QE[q, 0], QE[q, 1], QE[q, 2]
            if BL[b, INN] and BL[b, VER] == v and BL[b, MARK] != e:
                BL[b, MARK] = e
                due[m] = b
                m += 1
            c[AN] -= 1  # (the entry's slot is reused after the pool's next compaction)
            q = nxt
        QH[x] = -1
    if hi >= c[QLO]:
        c[QLO] = hi + 1
    if m:
        c[HOOK_CALLS] += 1
        _place(due, m, now, NW, BL, E, E2, RUN, HR, TK, TI, QH, QE, c)


# ------------------------------------------------------------ events
@_jit
def _order(S):
    """The order's and the expiries' regions of ``S``, and the counters."""
    return (rows(S, X_E, 4), rows(S, X_E2, 4), rows(S, X_RUN, 4), rows(S, X_HR, 4), region(S, X_TK).view(np.float64),
            rows(S, X_TI, 2), region(S, X_QH), rows(S, X_QE, 4), region(S, X_C))


@_jit
def _pass(j, off, rk, after, NW):
    """Arrival ``j``'s uses pass: each of its keys' next use is the following one."""
    for u in range(off[j], off[j + 1]):
        NW[rk[u], NEXT] = after[u]


@_jit
def arrived(i, now, S):
    """``spfcore_request_arrived`` of arrival index ``i`` (``0 <= i < span``,
    not waiting: the caller checks), then the expired scores re-scored
    (``PolicyRuntime.arrived``). The position moves to ``i`` as the policy's
    does (the next arrival's uses pass, skipped ones too, a position that
    went back is rewound); arrival ``i`` waits: its keys' ``WMIN`` drops to
    ``i`` where it was later. Returns 0."""
    off, rk, after, WAIT = region(S, X_OFF), region(S, X_RK), region(S, X_AFTER), region(S, X_WAIT)
    due, NW, BL = region(S, X_DUE), rows(S, X_NW, 2), rows(S, X_BL, 8)
    E, E2, RUN, HR, TK, TI, QH, QE, c = _order(S)
    c[HOOK_CALLS] += 1
    at = c[AT]
    span = off.shape[0] - 1
    if i == at + 1 and i < span:  # (the usual case: one pass over its keys' rows)
        for u in range(off[i], off[i + 1]):
            k = rk[u]
            NW[k, NEXT] = after[u]
            if i < NW[k, WMIN]:
                NW[k, WMIN] = i
    else:
        if i > at:
            for j in range(at + 1, min(i + 1, span)):
                _pass(j, off, rk, after, NW)
        elif i < at:  # rewind: every key's first use strictly after i
            for k in range(1, NW.shape[0]):
                NW[k, NEXT] = NEVER
            for j in range(span - 1, i, -1):
                for u in range(off[j], off[j + 1]):
                    NW[rk[u], NEXT] = j
        for u in range(off[i], off[i + 1]):
            k = rk[u]
            if i < NW[k, WMIN]:
                NW[k, WMIN] = i
    c[AT] = i
    c[POS] = i
    WAIT[i] += 1
    c[NWAITING] += 1
    _expire(now, i, due, NW, BL, E, E2, RUN, HR, TK, TI, QH, QE, c)
    c[ARRIVAL] = i
    return 0


@_jit
def served(a, S):
    """``spfcore_blocks_hit`` of the request that waits at arrival ``a``
    (``a < 0``: none waits under its id, a repeated lookup): it no longer
    waits; a key whose ``WMIN`` was ``a`` gets the next waiting arrival
    among its uses. Counts the hook call. Returns 0."""
    off, rk, kuse, koff = region(S, X_OFF), region(S, X_RK), region(S, X_KUSE), region(S, X_KOFF)
    WAIT, NW, c = region(S, X_WAIT), rows(S, X_NW, 2), region(S, X_C)
    c[HOOK_CALLS] += 1
    if a < 0:
        return 0
    WAIT[a] -= 1
    c[NWAITING] -= 1
    if WAIT[a] > 0:
        return 0
    alone = c[NWAITING] == 0
    for u in range(off[a], off[a + 1]):
        k = rk[u]
        if NW[k, WMIN] != a:
            continue
        if alone:  # (sequential mode: no other request waits)
            NW[k, WMIN] = NEVER
            continue
        lo, hi = koff[k], koff[k + 1]
        while lo < hi:  # the first use after a (the waiting ones are all later: a was the earliest)
            m = (lo + hi) >> 1
            if kuse[m] <= a:
                lo = m + 1
            else:
                hi = m
        w = NEVER
        for q in range(lo, koff[k + 1]):
            if WAIT[kuse[q]] > 0:
                w = kuse[q]
                break
        NW[k, WMIN] = w
    return 0


@_jit
def _twice(ids, BL, c):
    """Stamp this event's blocks; the index of the first one named twice, or -1."""
    c[EPOCH] += 1
    e = c[EPOCH]
    for j in range(ids.shape[0]):
        b = ids[j]
        if BL[b, MARK] == e:
            return j
        BL[b, MARK] = e
    return -1


@_jit
def touch(ids, S):
    """Hit blocks that were free leave the order (ref count 0 -> 1; their
    heap entries go stale). Returns 0, or ``-1 - j`` for ``ids[j]`` not a
    free cached block (an id outside the pool too), or named twice (nothing
    applied)."""
    BL, c = rows(S, X_BL, 8), region(S, X_C)
    nb = BL.shape[0]
    for j in range(ids.shape[0]):
        b = ids[j]
        if b < 0 or b >= nb or not BL[b, INN]:
            return -1 - j
    j = _twice(ids, BL, c)
    if j >= 0:
        return -1 - j
    for j in range(ids.shape[0]):
        BL[ids[j], INN] = 0
    c[LRUN] -= ids.shape[0]
    return 0


@_jit
def stored(ids, raw, first_depth, a, S):
    """Blocks ``ids`` cached with keys ``raw`` (``bytes``, 32 a key: four
    int64 words each) at
    depths ``first_depth, first_depth + 1, ...`` by the request of arrival
    index ``a`` (-1: none known): each block's key id (0 for a hash no future
    request holds) and depth (the hooks' table columns; no hook is called).
    The id at that depth of arrival ``a``'s future prompt is tried first
    (its words compared: a prompt's chain, read in order), else the table.
    Returns 0, or ``-1 - j`` for block ``ids[j]`` outside the pool, holding
    a key already or named twice (nothing applied)."""
    off, rk, BL, R, T = region(S, X_OFF), region(S, X_RK), rows(S, X_BL, 8), rows(S, X_R, 4), rows(S, X_T, 2)
    c, mask = region(S, X_C), T.shape[0] - 1
    nb = BL.shape[0]
    for j in range(ids.shape[0]):
        b = ids[j]
        if b < 0 or b >= nb or BL[b, KEY] >= 0:
            return -1 - j
    j = _twice(ids, BL, c)
    if j >= 0:
        return -1 - j
    w = np.frombuffer(raw, np.int64).reshape((ids.shape[0], 4))
    s0, n0 = 0, 0
    if 0 <= a < off.shape[0] - 1:
        s0, n0 = off[a], off[a + 1] - off[a]
    for d in range(max(first_depth, 0), min(first_depth + ids.shape[0], n0)):  # the chain's key rows, overlapped
        prefetch(R, rk[s0 + d], 0)
    for j in range(ids.shape[0]):
        b = ids[j]
        d = first_depth + j
        k = 0
        if 0 <= d < n0:
            f = rk[s0 + d]
            if R[f, W0] == w[j, 0] and R[f, W1] == w[j, 1] and R[f, W2] == w[j, 2] and R[f, W3] == w[j, 3]:
                k = f
        if k == 0:
            k = _find(T, mask, R, w, j)
        BL[b, KEY] = k
        BL[b, DEPTH] = d
    c[STORES] += ids.shape[0]
    return 0


@_jit
def release(cached, hashless, now, S):
    """``PolicyRuntime.release``: cached blocks (release order) scored (one
    ``spfcore_score_blocks`` call), each with a new release order, into the
    order; then hashless blocks onto the stack, ``hashless[0]`` on top.
    Returns 0, or ``-1 - j`` for ``cached[j]`` (``j < len(cached)``) or
    ``hashless[j - len(cached)]`` that is outside the pool, free already or
    named twice in the call: nothing applied."""
    BL, hs, NW = rows(S, X_BL, 8), region(S, X_HS), rows(S, X_NW, 2)
    E, E2, RUN, HR, TK, TI, QH, QE, c = _order(S)
    nc = cached.shape[0]
    nb = BL.shape[0]
    for j in range(nc):
        b = cached[j]
        if b < 0 or b >= nb or BL[b, INN] or BL[b, HFREE]:
            return -1 - j
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if b < 0 or b >= nb or BL[b, INN] or BL[b, HFREE]:
            return -1 - nc - j
    j = _twice(cached, BL, c)
    if j >= 0:
        return -1 - j
    e = c[EPOCH]  # (the same stamp on the hashless blocks: a block in both lists is caught too)
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if BL[b, MARK] == e:
            return -1 - nc - j
        BL[b, MARK] = e
    for j in range(nc):
        c[ORDER] += 1
        BL[cached[j], ORD] = c[ORDER]
    if nc:
        _place(cached, nc, now, NW, BL, E, E2, RUN, HR, TK, TI, QH, QE, c)
    c[LRUN] += nc
    if nc:
        c[HOOK_CALLS] += 1
    for j in range(hashless.shape[0] - 1, -1, -1):
        b = hashless[j]
        hs[c[HSN]] = b
        BL[b, HFREE] = 1
        c[HSN] += 1
    return 0


@_jit
def evict(n, now, S):
    """``PolicyRuntime.evict(n)``: when cached blocks are taken, the expired
    scores re-scored first (clocks ``now`` and the latest arrival); then
    ``n`` victims into ``out[:n]``, the top hashless block first, then the
    lowest live order entry. Each cached victim loses its key (an eviction;
    no hook: the policy has no evicted hook). Returns 0, or ``E_TOO_FEW``
    (nothing taken)."""
    out, due, BL, hs, NW = region(S, X_OUT), region(S, X_DUE), rows(S, X_BL, 8), region(S, X_HS), rows(S, X_NW, 2)
    E, E2, RUN, HR, TK, TI, QH, QE, c = _order(S)
    if n > c[HSN] + c[LRUN]:
        return E_TOO_FEW
    c[EVICT_CALLS] += 1
    if n > c[HSN]:
        _expire(now, c[ARRIVAL], due, NW, BL, E, E2, RUN, HR, TK, TI, QH, QE, c)
    for j in range(n):
        if c[HSN] > 0:
            c[HSN] -= 1
            b = hs[c[HSN]]
            BL[b, HFREE] = 0
        else:
            b = _take(E, RUN, HR, BL, c)
            BL[b, INN] = 0
            c[LRUN] -= 1
        out[j] = b
        if BL[b, KEY] >= 0:
            BL[b, KEY] = -1
            c[EVICTIONS] += 1
    return 0


# ------------------------------------------------------------ state
def heap_cap(num_blocks: int) -> int:
    """Entries of the order, its runs, the seconds heap and the calendar's
    pool, each: ``4 * num_blocks + 4096`` (a full one keeps its live
    entries, at most one per free block)."""
    return 4 * num_blocks + 4096


def new_state(num_blocks: int, cap: int | None = None) -> dict:
    """A fresh state for ``num_blocks`` blocks: nothing free (the driver
    releases the free blocks first), an empty future (every hash key id 0,
    until :func:`set_index`). ``cap``: :func:`heap_cap` by default, at least
    ``2 * num_blocks + 1`` (a test sets it low to reach the compactions).

    Returns:
        ``{name: array}`` of the kernels' state (names as there; the kernels
        take :func:`~spfcore.engine._kstate_nb.pack` of it, :data:`REGIONS`),
        ``mask`` the table's (its rows - 1).
    """
    i64 = np.int64
    cap = heap_cap(num_blocks) if cap is None else cap
    if cap < 2 * num_blocks + 1:
        raise ValueError(f"cap {cap}: need at least 2 * num_blocks + 1 = {2 * num_blocks + 1}")
    c = np.zeros(NCOUNTERS, i64)
    c[POS] = c[AT] = -1
    BL = np.zeros((num_blocks, 8), i64)
    BL[:, KEY] = -1
    s = {"BL": BL, "hs": np.zeros(num_blocks, i64), "E": np.zeros((cap, 4), i64), "E2": np.zeros((cap, 4), i64),
         "RUN": np.zeros((cap, 4), i64), "HR": np.zeros((cap, 4), i64), "TK": np.zeros(cap, np.float64),
         "TI": np.zeros((cap, 2), i64), "QE": np.zeros((cap, 4), i64), "out": np.zeros(num_blocks, i64),
         "due": np.zeros(num_blocks, i64), "c": c}
    set_index(s, np.zeros((0, 4), i64), np.zeros(1, i64), np.zeros(0, i64), np.zeros(0, i64), np.full(1, NEVER, i64))
    return s


def set_index(s: dict, words: np.ndarray, off: np.ndarray, rk: np.ndarray, after: np.ndarray,
              first: np.ndarray) -> None:
    """Install a future index in state ``s`` (no request waiting); the
    kernels take ``pack(s, REGIONS)`` after it.

    Args:
        words: int64 ``(K, 4)``: key id ``k``'s hash words in row ``k - 1``.
        off: int64 ``(span + 1,)``: arrival ``j``'s uses are ``off[j] .. off[j + 1]``.
        rk: int64 per use: its key id (``1 .. K``), each id once per arrival.
        after: int64 per use: the id's next use after that arrival (:data:`NEVER`: none).
        first: int64 ``(K + 1,)``: each id's first use (index 0: :data:`NEVER`).
    """
    i64 = np.int64
    nk = len(words)
    R = np.zeros((nk + 1, 4), i64)
    R[1:] = words
    NW = np.zeros((nk + 1, 2), i64)
    NW[:, NEXT] = first
    NW[:, WMIN] = NEVER
    S = 1
    while S < 2 * (nk + 1):
        S *= 2
    T = np.zeros((S, 2), i64)
    build_table(R, T, S - 1, nk)
    span = len(off) - 1
    arr = np.repeat(np.arange(span, dtype=i64), np.diff(off))
    o = np.argsort(rk, kind="stable")
    s.update(R=R, NW=NW, QH=np.full(span + 1, -1, i64), T=T, mask=S - 1, off=off, rk=rk, after=after,
             kuse=np.ascontiguousarray(arr[o]),
             koff=np.searchsorted(rk[o], np.arange(nk + 2)).astype(i64), WAIT=np.zeros(max(span, 1), i64))


def warm() -> None:
    """Compile every kernel (or load numba's on-disk cache) on a tiny state,
    with the argument types the runtime passes."""
    i64 = np.int64
    s = new_state(4)
    words = np.arange(8, dtype=i64).reshape(2, 4) + 1
    set_index(s, words, np.array([0, 2, 3], i64), np.array([1, 2, 1], i64), np.array([1, NEVER, NEVER], i64),
              np.array([NEVER, 0, 0], i64))
    ids = np.array([1, 2], i64)
    w = words.tobytes()
    S = pack(s, REGIONS)
    release(np.zeros(0, i64), ids, 0.0, S)
    arrived(0, 0.0, S)
    evict(2, 0.0, S)
    stored(ids, w, 0, 0, S)
    release(ids, np.zeros(0, i64), 1.0, S)
    arrived(1, 1.0, S)
    served(0, S)
    touch(np.zeros(0, i64), S)
