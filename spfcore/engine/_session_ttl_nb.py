"""The shipped ``session_ttl`` arm's engine events (arrivals mode) as numba
kernels over int arrays, for
:class:`spfcore.engine.compiled.SessionTTLKernelRuntime`: the same decisions
as a :class:`~spfcore.runtime.PolicyRuntime` driving
``spfcore_session_ttl.SessionTTLPolicy`` (``ttl_seconds = None``) on the
scored evictor, one kernel call per runtime event.

The model is :mod:`spfcore.sim._replay_ttl_nb`'s (the simulator's compiled
replay of the same class; its docstring lists the semantics): per key
``until`` (the arrival at which its protection ends; -1: the policy holds no
such hash), (session, key) ownership edges, at most ``max_sessions`` live
sessions (a new one beyond forgets the least recently active: its edges go,
``until`` stays), evicting a block drops its key's ``until`` and edges (also
while a duplicate block still holds the hash, as the plugin does), a session
left with no key is dropped; the evictor's order is hashless blocks (most
recently freed first), then unpinned blocks by release order, then pinned
blocks by release order; a score pins iff ``until > arrival``; pins beyond
the cap are refused (counted, the expiry stays registered). In the engine
vLLM owns the pool and the prefix-cache map, so the kernels keep the policy,
the runtime's ``by_key`` (``OWN``: the block that stored a hash last;
evicting that block unmaps it) and the order; keys are vLLM's block hashes,
interned with :mod:`spfcore.engine._frequency_nb`'s table functions.

State (:func:`new_state`; ``nb`` = ``num_blocks``):

* **Blocks** ``BL[nb + 4, 8]`` int64, one 64-byte line a block: key id (-1:
  none), flags ``FL`` (``F_IN``: free and cached, in the order; ``F_PIN``:
  pinned; ``F_HFREE``: on the hashless stack), release order, score version,
  order-heap stamp (-1: in a list, no live heap entry), next / previous block
  of its list, the event stamp (``MARK``: a block twice in one call). Rows
  ``nb .. nb + 3`` are the lists' sentinels (``LN``: the oldest).
* **Key rows** ``R[K + 1, 8]``, one 64-byte line per key id: the hash's four
  words (every bit compared), ``until``, the first owner edge, ``OWN`` and
  the cached blocks holding it. Row ``K`` is the hook path's key ``None``:
  blocks vLLM cached after a prefix-cache reset with requests in flight (the
  runtime never heard them stored) hold no key here; the plugin touches and
  scores them as the key ``None`` (it is never evicted from the policy: the
  runtime reports only held keys evicted), so does row ``K``.
* **Table** ``T`` and free key ids ``V[FK]``: :mod:`spfcore.engine._frequency_nb`'s
  (the same counters ``NFREE``, ``NEXTID``). A key id is freed once no cached
  block holds it (its policy state went with the eviction before), so at most
  ``nb`` ids are live; ``K = 2 * nb + 64``.
* **Sessions** ``S[SC, 8]``: first / last key edge, key count, previous /
  next session in activity order, live. Session ids are interned by the
  caller (a dead id may be reused: a live one names one session).
* **Edges** ``E[EC, 8]`` int32, two edges a cache line: session (-1:
  free), key, previous / next edge of the session (first-touch order),
  previous / next edge of the key (newest first: order there decides
  nothing), in the edge hash or not (``EIN``). Free edge ids are a stack in
  the last column, ``E[:c[EFREE], EF]`` (an edge taken is the stack's top:
  no chain of cold rows to follow). A touch finds
  the edge (session, key) by walking the key's first four owners; a key of
  more has all its edges in ``ht``, hashed by (session, key)
  (:func:`spfcore.sim._replay_ttl_nb._slot`, linear probing, backward-shift
  deletion), and only those edges (and those of keys that had more) are.
  The caller grows the edges (:func:`grow_edges`) when a touch may need more
  than are free.
* **The order**, lowest ``(pinned, release order)`` first, as the simulator
  kernel's heap: four doubly linked lists through the block rows, each in
  ascending release order (:data:`NLISTS`: blocks released unpinned,
  re-scored unpinned, released pinned, re-scored pinned; O(1) a block, one
  cache line: a released block's order is the newest, and an expiry's
  re-scored blocks come in release order), and the order heap ``H = HQ[0]``
  for a re-scored block older than its list's tail (rare), a 32-byte row an
  entry: ``(pinned * 2**62 + release order, block, stamp, -)``, a binary
  min-heap on the first with lazy deletion (an entry is live iff its block
  is free with that stamp). A victim is the lowest of the four heads and the
  heap's top.
* **Expiries**: the calendar ``qe = HQ[1], qb`` (``W`` buckets, a power of
  two above the TTL: every expiry lies within a TTL of the clock), as there,
  an entry's (version, block, next entry) side by side in a 32-byte row of
  ``qe``.
* **Vectors** ``V[5, K]`` int64: a call's victims (``V[OUT]``), scratch
  (``V[DUE]``, ``V[KS]``), the hashless stack (``V[HS]``, top at
  ``c[HSN] - 1``) and the free key ids (``V[FK]``): one argument for five.
* ``c``: int64 counters and the parameters ``ttl_arrivals``, pin cap and
  ``max_sessions`` (indices below).

A kernel call unboxes each argument array (about half a microsecond each
with cold caches), so the kernels take few: the rows above, the order heap
and calendar entries in one array, the parameters in ``c``.

Kernels return 0, or a negative code (the caller raises; nothing of the event
is applied).
"""

from __future__ import annotations

import numpy as np

from spfcore.engine._frequency_nb import (EPOCH, EVICT_CALLS, EVICTIONS, HN, HOOK_CALLS, HSN, LRUN, NEXTID,
                                          NFREE, ORDER, _find, _jit, _rows)
from spfcore.sim._replay_ttl_nb import _slot

#: More counter indices (after :mod:`spfcore.engine._frequency_nb`'s): score
#: versions, pinned free blocks, pins refused, order-heap stamps, live sessions,
#: first / last session in activity order, free edge ids (``E[:, EF]``), live edges,
#: the calendar's first arrival not drained yet, its free-entry chain head and
#: entries ever used, the clock (the latest arrival index); then the
#: parameters: ``ttl_arrivals``, the pin cap, ``max_sessions``.
VERSION, NPIN, REFUSED, HSEQ, NSESS, AH, AT, EFREE, NEDGE, QBASE, QFREE, QTOP, ARR, TTL, CAP, MAXS = range(15, 31)
NCOUNTERS = 31
OUT, DUE, KS, HS, FK = range(5)  # rows of ``V``
KEY, FL, ORD, VER, HST, LN, LP, MARK = range(8)  # block row columns
F_IN, F_PIN, F_HFREE = 1, 2, 4  # FL bits: free and cached (in the order), pinned, on the hashless stack
#: The order's release-ordered lists (sentinel row ``nb + i`` each): released unpinned, re-scored unpinned,
#: released pinned, re-scored pinned.
NLISTS = 4
W0, W1, W2, W3, UNTIL, OH, OWN, NBLK = range(8)  # key row columns
SH, ST, SN, SP, SX, ALIVE = range(6)  # session row columns
ES, EK, ESP, ESN, EKP, EKN, EIN, EF = range(8)  # edge row columns (EIN: in the edge hash; EF: see ``E``)
#: Longest TTL (arrivals) the calendar takes; the builder runs the hooks above it.
QMAX = 1 << 16
E_TOO_FEW = -1  # evict: fewer than n blocks free
E_EDGES = -(2**61)  # hit / stored: fewer free edges than the touch may add (grow, then call again)
E_FULL = -(2**62)  # stored: every key id live (not reached within the bound above)
E_RANGE = -(2**60)  # a block id out of range (the index then follows: E_RANGE - j)


# ------------------------------------------------------------ (session, key) edges
@_jit
def _e_find(s, k, E, ht):
    mask = len(ht) - 1
    i = _slot(s, k, mask)
    while True:
        e = ht[i]
        if e < 0:
            return -1
        if E[e, ES] == s and E[e, EK] == k:
            return e
        i = (i + 1) & mask


@_jit
def _e_put(e, E, ht):
    mask = len(ht) - 1
    i = _slot(E[e, ES], E[e, EK], mask)
    while ht[i] >= 0:
        i = (i + 1) & mask
    ht[i] = e


@_jit
def _e_unput(e, E, ht):
    mask = len(ht) - 1
    i = _slot(E[e, ES], E[e, EK], mask)
    while ht[i] != e:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        f = ht[j]
        if f < 0:
            break
        h = _slot(E[f, ES], E[f, EK], mask)
        if (i <= j and (h <= i or h > j)) or (i > j and h <= i and h > j):
            ht[i] = f
            i = j
    ht[i] = -1


@_jit
def rehash(E, ht):
    """Rebuild ``ht`` from the live edges."""
    ht[:] = -1
    for e in range(E.shape[0]):
        if E[e, ES] >= 0 and E[e, EIN]:
            _e_put(e, E, ht)


@_jit
def _s_unlink(s, S, c):
    p, x = S[s, SP], S[s, SX]
    if p >= 0:
        S[p, SX] = x
    else:
        c[AH] = x
    if x >= 0:
        S[x, SP] = p
    else:
        c[AT] = p


@_jit
def _s_append(s, S, c):
    t = c[AT]
    S[s, SP] = t
    S[s, SX] = -1
    if t >= 0:
        S[t, SX] = s
    else:
        c[AH] = s
    c[AT] = s


@_jit
def _s_drop(s, S, c):
    _s_unlink(s, S, c)
    S[s, ALIVE] = 0
    S[s, SH] = S[s, ST] = -1
    S[s, SN] = 0
    c[NSESS] -= 1


@_jit
def _e_free(e, E, ht, c):
    if E[e, EIN]:
        _e_unput(e, E, ht)
        E[e, EIN] = 0
    E[e, ES] = -1
    E[c[EFREE], EF] = e
    c[EFREE] += 1
    c[NEDGE] -= 1


@_jit
def _forget_session(s, R, S, E, ht, c):
    """The least recently active session beyond ``max_sessions``: its edges go, ``until`` stays."""
    e = S[s, SH]
    while e >= 0:
        nx = E[e, ESN]
        k = E[e, EK]
        p, q = E[e, EKP], E[e, EKN]
        if p >= 0:
            E[p, EKN] = q
        else:
            R[k, OH] = q
        if q >= 0:
            E[q, EKP] = p
        _e_free(e, E, ht, c)
        e = nx
    _s_drop(s, S, c)


@_jit
def _evict_keys(ks, n, R, S, E, ht, c):
    """``spfcore_blocks_evicted`` for the keys ``ks[:n]`` (-1: none), in
    order: each one's ``until`` and edges go; a session left with no key is
    dropped. Returns whether any key was named. (One call for all: a call a
    key or an edge costs more than its work, its array arguments passed
    field by field; :func:`_e_free`'s body is inline.)"""
    keyed = False
    for j in range(n):
        k = ks[j]
        if k < 0:
            continue
        keyed = True
        R[k, UNTIL] = -1
        e = R[k, OH]
        while e >= 0:
            nx = E[e, EKN]
            s = E[e, ES]
            p, q = E[e, ESP], E[e, ESN]
            if p >= 0:
                E[p, ESN] = q
            else:
                S[s, SH] = q
            if q >= 0:
                E[q, ESP] = p
            else:
                S[s, ST] = p
            S[s, SN] -= 1
            if E[e, EIN]:
                _e_unput(e, E, ht)
                E[e, EIN] = 0
            E[e, ES] = -1
            E[c[EFREE], EF] = e
            c[EFREE] += 1
            c[NEDGE] -= 1
            if S[s, SN] == 0:
                _s_drop(s, S, c)
            e = nx
        R[k, OH] = -1
    return keyed


@_jit
def _unintern_all(ks, m, T, R, fk, c):
    """Key ids ``ks[:m]`` leave the table and go back on the free stack, in
    order: :func:`spfcore.engine._frequency_nb._unintern`'s backward-shift
    deletion, one call for all (a call a key costs more than its work)."""
    mask = T.shape[0] - 1
    for x in range(m):
        k = ks[x]
        i = R[k, W0] & mask
        while T[i, 1] != k + 1:
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            q = T[j, 1]
            if q == 0:
                break
            home = T[j, 0] & mask
            if (j > i and (home <= i or home > j)) or (j < i and home <= i and home > j):
                T[i, 0], T[i, 1] = T[j, 0], q
                i = j
        T[i, 1] = 0
        fk[c[NFREE]] = k
        c[NFREE] += 1


@_jit
def _touch(s, ks, n, end, R, S, E, ht, c):
    """A store or hit of session ``s`` (-1: none) on key ids ``ks[:n]``: a
    key it does not own yet gets an edge, the session's newest key and the
    key's first owner. (The loop calls nothing for a key of no owner, the
    common case: a call a key costs more than its work.)"""
    if s < 0 or n <= 0:
        return
    if not S[s, ALIVE]:
        S[s, ALIVE] = 1
        S[s, SH] = S[s, ST] = -1
        S[s, SN] = 0
        _s_append(s, S, c)
        c[NSESS] += 1
        if c[NSESS] > c[MAXS]:
            _forget_session(c[AH], R, S, E, ht, c)
    elif c[AT] != s:
        _s_unlink(s, S, c)
        _s_append(s, S, c)
    for j in range(n):
        k = ks[j]
        if R[k, UNTIL] < end:
            R[k, UNTIL] = end
        h = R[k, OH]
        r = -1 if h < 0 else _owns(s, k, R, E, ht)
        if r >= 0:
            continue
        c[EFREE] -= 1  # the new edge (s, k)
        e = E[c[EFREE], EF]
        c[NEDGE] += 1
        E[e, ES] = s
        E[e, EK] = k
        t = S[s, ST]
        E[e, ESP] = t
        E[e, ESN] = -1
        if t >= 0:
            E[t, ESN] = e
        else:
            S[s, SH] = e
        S[s, ST] = e
        S[s, SN] += 1
        E[e, EKP] = -1
        E[e, EKN] = h
        if h >= 0:
            E[h, EKP] = e
        R[k, OH] = e
        if r == -6:  # a key of more than four owners: its edges are in the hash
            _e_put(e, E, ht)
            E[e, EIN] = 1
        elif r == -5:  # its fifth owner: every edge of the key into the hash
            f = R[k, OH]
            while f >= 0:
                if not E[f, EIN]:
                    _e_put(f, E, ht)
                    E[f, EIN] = 1
                f = E[f, EKN]


@_jit
def _owns(s, k, R, E, ht):
    """Whether session ``s`` owns key ``k`` (1), else ``-1 - owners`` (owners
    of the key: 0 .. 4, or 5 for more). A walk of the key's first four owners
    (a fresh key has none; most have one or two); a key of more has every edge
    in the edge hash, which answers then: a key of at most four owners costs
    no probe of the hash (a cold cache line) and its edges are not in it."""
    e = R[k, OH]
    for i in range(4):
        if e < 0:
            return -1 - i
        if E[e, ES] == s:
            return 1
        e = E[e, EKN]
    if e < 0:
        return -5
    return 1 if _e_find(s, k, E, ht) >= 0 else -6


# ------------------------------------------------------------ the arrivals calendar
@_jit
def _q_compact(BL, qe, qb, c):
    for q in range(qb.shape[1]):
        e = qb[0, q]
        qb[0, q] = qb[1, q] = -1
        while e >= 0:
            nx = qe[e, 2]
            b = qe[e, 1]
            if BL[b, FL] & F_IN and BL[b, VER] == qe[e, 0]:
                qe[e, 2] = -1
                if qb[0, q] < 0:
                    qb[0, q] = e
                else:
                    qe[qb[1, q], 2] = e
                qb[1, q] = e
            else:
                qe[e, 2] = c[QFREE]
                c[QFREE] = e
            e = nx


# ------------------------------------------------------------ the evictor's order
PINK = 2**62  # a pinned block's heap key: PINK + release order (an unpinned one's: its release order)


@_jit
def _h_up(H, j):
    x0, x1, x2 = H[j, 0], H[j, 1], H[j, 2]
    while j > 0:
        p = (j - 1) >> 1
        if H[p, 0] <= x0:
            break
        H[j, 0], H[j, 1], H[j, 2] = H[p, 0], H[p, 1], H[p, 2]
        j = p
    H[j, 0], H[j, 1], H[j, 2] = x0, x1, x2


@_jit
def _h_down(H, j, n):
    x0, x1, x2 = H[j, 0], H[j, 1], H[j, 2]
    while True:
        m = 2 * j + 1
        if m >= n:
            break
        if m + 1 < n and H[m + 1, 0] < H[m, 0]:
            m += 1
        if H[m, 0] >= x0:
            break
        H[j, 0], H[j, 1], H[j, 2] = H[m, 0], H[m, 1], H[m, 2]
        j = m
    H[j, 0], H[j, 1], H[j, 2] = x0, x1, x2


@_jit
def _h_pop(H, n):
    """Drop the top entry; returns the new size."""
    n -= 1
    if n > 0:
        H[0, 0], H[0, 1], H[0, 2] = H[n, 0], H[n, 1], H[n, 2]
        _h_down(H, 0, n)
    return n


@_jit
def _h_compact(H, n, BL):
    """Keep the live entries and re-heapify; returns the new size."""
    m = 0
    for j in range(n):
        b = H[j, 1]
        if BL[b, FL] & F_IN and H[j, 2] == BL[b, HST]:
            H[m, 0], H[m, 1], H[m, 2] = H[j, 0], H[j, 1], H[j, 2]
            m += 1
    for j in range(m // 2 - 1, -1, -1):
        _h_down(H, j, m)
    return m


@_jit
def _l_unlink(b, BL):
    p, q = BL[b, LP], BL[b, LN]
    BL[p, LN] = q
    BL[q, LP] = p


@_jit
def _place_all(bs, m, pos, released, us, cap, BL, R, H, qe, qb, c):
    """Score blocks ``bs[:m]`` at arrival ``pos`` and (re-)place them, in
    order, as the simulator's ``_place`` (``released``: they are not free,
    each takes a new release order): a block whose key's ``until`` lies ahead
    has its expiry registered in the calendar and is pinned (within the cap);
    it goes onto the tail of its list (released or re-scored, pinned or not)
    if its release order is above the tail's (always so for a released
    block), else onto the heap; a free block of unchanged rank stays.

    The keys' ``until`` is read first into ``us[:m]`` (a pass of its own: the
    key rows fetched at once), and the loop makes no call on the common paths
    (a call a block costs more than its work, its array arguments passed
    field by field)."""
    none = R.shape[0] - 1  # the key None
    for j in range(m):
        k = BL[bs[j], KEY]
        us[j] = R[k if k >= 0 else none, UNTIL]
    w = qb.shape[1] - 1
    for j in range(m):
        b, u = bs[j], us[j]
        c[VERSION] += 1
        v = c[VERSION]
        f = BL[b, FL]
        was = (f & F_PIN) != 0
        pin = False
        if u > pos:  # the expiry into the calendar's bucket u (a free entry, else a new one; compacted when full)
            e = c[QFREE]
            if e < 0 and c[QTOP] == qe.shape[0]:
                _q_compact(BL, qe, qb, c)
                e = c[QFREE]
            if e >= 0:
                c[QFREE] = qe[e, 2]
            else:
                e = c[QTOP]
                c[QTOP] = e + 1
            qe[e, 0], qe[e, 1], qe[e, 2] = v, b, -1
            q = u & w
            if qb[0, q] < 0:
                qb[0, q] = e
            else:
                qe[qb[1, q], 2] = e
            qb[1, q] = e
            if c[NPIN] < cap or was:
                pin = True
            else:
                c[REFUSED] += 1
        BL[b, VER] = v
        if f & F_IN:
            if pin == was:  # same rank (pinned or not, its release order): stays where it is
                continue
            if BL[b, HST] < 0:  # (in a list; in the heap its entry goes stale)
                _l_unlink(b, BL)
            lst = 1
        else:
            f |= F_IN
            c[LRUN] += 1
            if released:
                c[ORDER] += 1
                BL[b, ORD] = c[ORDER]
            lst = 0
        if pin:  # (was not: its rank changed, or it was not free)
            f |= F_PIN
            c[NPIN] += 1
            lst += 2
        elif was:
            f &= ~F_PIN
            c[NPIN] -= 1
        BL[b, FL] = f
        z = BL.shape[0] - NLISTS + lst
        t = BL[z, LP]
        if t == z or BL[t, ORD] < BL[b, ORD]:
            BL[b, HST] = -1
            BL[t, LN] = b
            BL[b, LP] = t
            BL[b, LN] = z
            BL[z, LP] = b
            continue
        if c[HN] == H.shape[0]:
            c[HN] = _h_compact(H, c[HN], BL)
        c[HSEQ] += 1
        BL[b, HST] = c[HSEQ]
        n = c[HN]
        H[n, 0], H[n, 1], H[n, 2] = (PINK if pin else 0) + BL[b, ORD], b, c[HSEQ]
        c[HN] = n + 1
        _h_up(H, n)


@_jit
def _rescore_due(pos, cap, due, us, BL, R, H, qe, qb, c):
    """Re-score the free blocks whose score expired by ``pos`` in (expiry,
    version) order (one score call if any); the due buckets are emptied."""
    m = 0
    w = qb.shape[1] - 1
    hi = min(pos, c[QBASE] + w)
    for x in range(c[QBASE], hi + 1):
        q = x & w
        h = qb[0, q]
        if h < 0:
            continue
        e = h
        while True:
            b = qe[e, 1]
            if BL[b, FL] & F_IN and qe[e, 0] == BL[b, VER]:
                due[m] = b
                m += 1
            if qe[e, 2] < 0:
                break
            e = qe[e, 2]
        qe[e, 2] = c[QFREE]
        c[QFREE] = h
        qb[0, q] = qb[1, q] = -1
    if pos + 1 > c[QBASE]:
        c[QBASE] = pos + 1
    if m:
        c[HOOK_CALLS] += 1
        _place_all(due, m, pos, False, us, cap, BL, R, H, qe, qb, c)


@_jit
def _range(ids, nb):
    for j in range(ids.shape[0]):
        if ids[j] < 0 or ids[j] >= nb:
            return j
    return -1


@_jit
def _twice(ids, BL, c):
    c[EPOCH] += 1
    e = c[EPOCH]
    for j in range(ids.shape[0]):
        b = ids[j]
        if BL[b, MARK] == e:
            return j
        BL[b, MARK] = e
    return -1


# ------------------------------------------------------------ the events
@_jit
def arrived(pos, s, V, BL, R, S, E, HQ, qb, c):
    """``PolicyRuntime.arrived`` at arrival index ``pos`` of session ``s``
    (-1: none or unknown): the arrived hook (the session's keys protected to
    ``pos + ttl``, it becomes the most recently active), the expired scores
    re-scored, then the free blocks ``OWN`` of the session's keys
    (first-touch order) re-scored (``spfcore_rescore_keys``). Returns 0."""
    cap, due, H, qe = c[CAP], V[DUE], HQ[0], HQ[1]
    c[ARR] = pos
    c[HOOK_CALLS] += 2  # spfcore_request_arrived, spfcore_rescore_keys
    end = pos + c[TTL]
    live = s >= 0 and S[s, ALIVE] != 0
    if live:
        if c[AT] != s:
            _s_unlink(s, S, c)
            _s_append(s, S, c)
        e = S[s, SH]
        while e >= 0:
            R[E[e, EK], UNTIL] = end
            e = E[e, ESN]
    _rescore_due(pos, cap, due, V[KS], BL, R, H, qe, qb, c)
    if live:
        m = 0
        e = S[s, SH]
        while e >= 0:
            b = R[E[e, EK], OWN]
            if b >= 0 and BL[b, FL] & F_IN:
                due[m] = b
                m += 1
            e = E[e, ESN]
        if m:
            c[HOOK_CALLS] += 1
            _place_all(due, m, pos, False, V[KS], cap, BL, R, H, qe, qb, c)
    return 0


@_jit
def hit(ids, s, end, V, BL, R, S, E, ht, c):
    """``spfcore_blocks_hit`` of session ``s`` (-1: none): each hit block's key
    (the key None for a block with none) protected to ``end``, the session
    owning it. Returns 0, ``E_RANGE - j`` for ``ids[j]`` out of range, or
    ``E_EDGES`` (nothing applied)."""
    ks = V[KS]
    nb = BL.shape[0] - NLISTS
    j = _range(ids, nb)
    if j >= 0:
        return E_RANGE - j
    n = ids.shape[0]
    if s >= 0 and E.shape[0] - c[NEDGE] < n:
        return E_EDGES
    c[HOOK_CALLS] += 1
    if s < 0:
        return 0
    none = R.shape[0] - 1
    for j in range(n):
        k = BL[ids[j], KEY]
        ks[j] = k if k >= 0 else none
    _touch(s, ks, n, end, R, S, E, ht, c)
    return 0


@_jit
def stored(ids, w, s, end, V, BL, R, T, S, E, ht, c):
    """``spfcore_blocks_stored``: blocks ``ids`` cached with keys ``w`` (four
    words a row), in order: each key interned, held by its block, ``OWN`` the
    block (a key twice: the later block); then session ``s``'s touch (see
    :func:`hit`). Returns 0, ``-1 - j`` for ``ids[j]`` holding a key already or
    named twice, ``E_RANGE - j``, ``E_EDGES`` or ``E_FULL`` (nothing applied)."""
    ks, fk, mask = V[KS], V[FK], T.shape[0] - 1
    nb = BL.shape[0] - NLISTS
    j = _range(ids, nb)
    if j >= 0:
        return E_RANGE - j
    n = ids.shape[0]
    for j in range(n):
        if BL[ids[j], KEY] >= 0:
            return -1 - j
    j = _twice(ids, BL, c)
    if j >= 0:
        return -1 - j
    if c[NFREE] + R.shape[0] - 1 - c[NEXTID] < n:
        return E_FULL
    if s >= 0 and E.shape[0] - c[NEDGE] < n:
        return E_EDGES
    for j in range(n):
        i = _find(T, mask, R, w, j)
        if i >= 0:
            k = T[i, 1] - 1
        else:
            i = -1 - i
            if c[NFREE] > 0:
                c[NFREE] -= 1
                k = fk[c[NFREE]]
            else:
                k = c[NEXTID]
                c[NEXTID] += 1
            T[i, 0], T[i, 1] = w[j, 0], k + 1
            R[k, W0], R[k, W1], R[k, W2], R[k, W3] = w[j, 0], w[j, 1], w[j, 2], w[j, 3]
            R[k, UNTIL] = R[k, OH] = R[k, OWN] = -1
            R[k, NBLK] = 0
        b = ids[j]
        BL[b, KEY] = k
        R[k, NBLK] += 1
        R[k, OWN] = b
        ks[j] = k
    c[HOOK_CALLS] += 1
    _touch(s, ks, n, end, R, S, E, ht, c)
    return 0


@_jit
def touch(ids, BL, c):
    """Hit blocks that were free leave the order. Returns 0, or ``-1 - j``
    for ``ids[j]`` not a free cached block or named twice (nothing applied)."""
    nb = BL.shape[0] - NLISTS
    for j in range(ids.shape[0]):
        b = ids[j]
        if b < 0 or b >= nb or not BL[b, FL] & F_IN:
            return -1 - j
    j = _twice(ids, BL, c)
    if j >= 0:
        return -1 - j
    for j in range(ids.shape[0]):
        b = ids[j]
        if BL[b, HST] < 0:
            _l_unlink(b, BL)
        if BL[b, FL] & F_PIN:
            c[NPIN] -= 1
        BL[b, FL] = 0
    c[LRUN] -= ids.shape[0]
    return 0


@_jit
def release(cached, hashless, V, BL, R, HQ, qb, c):
    """``PolicyRuntime.release``: cached blocks scored at the clock (one score
    call), each with a new release order, in order; then hashless blocks onto
    the stack, ``hashless[0]`` on top. Returns 0, or ``-1 - j`` for
    ``cached[j]`` (``j < len(cached)``) or ``hashless[j - len(cached)]`` free
    already, named twice or out of range (nothing applied)."""
    cap, hs, H, qe = c[CAP], V[HS], HQ[0], HQ[1]
    nb = BL.shape[0] - NLISTS
    nc = cached.shape[0]
    for j in range(nc):
        b = cached[j]
        if b < 0 or b >= nb or BL[b, FL]:
            return -1 - j
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if b < 0 or b >= nb or BL[b, FL]:
            return -1 - nc - j
    j = _twice(cached, BL, c)
    if j >= 0:
        return -1 - j
    e = c[EPOCH]
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if BL[b, MARK] == e:
            return -1 - nc - j
        BL[b, MARK] = e
    _place_all(cached, nc, c[ARR], True, V[KS], cap, BL, R, H, qe, qb, c)
    if nc:
        c[HOOK_CALLS] += 1
    for j in range(hashless.shape[0] - 1, -1, -1):
        b = hashless[j]
        hs[c[HSN]] = b
        BL[b, FL] = F_HFREE
        c[HSN] += 1
    return 0


@_jit
def evict(n, V, BL, R, T, S, E, ht, HQ, qb, c):
    """``PolicyRuntime.evict(n)``: expired scores re-scored first when cached
    blocks are taken, then ``n`` victims into ``V[OUT, :n]``: the top hashless
    block, else the lowest ``(pinned, release order)`` of the lists' heads and
    the heap's top. A victim's key leaves ``OWN`` (if the victim owned
    it), the policy (``until`` and edges: one evicted-hook call if any) and
    its block; a key id no block holds is freed. Returns 0 or ``E_TOO_FEW``
    (nothing taken).

    In passes over the victims (their keys into ``V[KS]``, the key ids freed
    into ``V[DUE]``), each touching one kind of row: the order does not depend on the
    keys' state, and a pass's rows of different victims are fetched at once
    (a cold row each) where one victim's chain of rows would wait in turn."""
    out, due, ks, hs, fk = V[OUT], V[DUE], V[KS], V[HS], V[FK]
    cap, H, qe = c[CAP], HQ[0], HQ[1]
    if n > c[HSN] + c[LRUN]:
        return E_TOO_FEW
    c[EVICT_CALLS] += 1
    pos = c[ARR]
    if n > c[HSN] and c[QBASE] <= pos:
        _rescore_due(pos, cap, due, V[KS], BL, R, H, qe, qb, c)
    z0 = BL.shape[0] - NLISTS
    for j in range(n):  # the victims, their blocks
        if c[HSN] > 0:
            c[HSN] -= 1
            b = hs[c[HSN]]
        else:
            while c[HN] and not (BL[H[0, 1], FL] & F_IN and H[0, 2] == BL[H[0, 1], HST]):  # stale tops
                c[HN] = _h_pop(H, c[HN])
            b, key = -1, 0
            for i in range(NLISTS):
                h = BL[z0 + i, LN]
                if h != z0 + i:
                    x = BL[h, ORD] + (PINK if i >= 2 else 0)
                    if b < 0 or x < key:
                        b, key = h, x
            if c[HN] and (b < 0 or H[0, 0] < key):
                b = H[0, 1]
                c[HN] = _h_pop(H, c[HN])
            else:
                _l_unlink(b, BL)
            c[LRUN] -= 1
            if BL[b, FL] & F_PIN:
                c[NPIN] -= 1
        BL[b, FL] = 0
        out[j] = b
        ks[j] = BL[b, KEY]
        BL[b, KEY] = -1
    m = 0
    for j in range(n):  # their key rows
        k = ks[j]
        if k < 0:
            continue
        c[EVICTIONS] += 1
        if R[k, OWN] == out[j]:
            R[k, OWN] = -1
        R[k, NBLK] -= 1
        if R[k, NBLK] == 0:
            due[m] = k
            m += 1
    keyed = _evict_keys(ks, n, R, S, E, ht, c)  # their edges
    _unintern_all(due, m, T, R, fk, c)  # the key ids no block holds
    if keyed:
        c[HOOK_CALLS] += 1
    return 0


def key_ids(num_blocks: int) -> int:
    """Key ids a state holds (besides the key None's row): ``2 * num_blocks + 64``."""
    return 2 * num_blocks + 64


def session_ids(num_blocks: int) -> int:
    """Session ids a state holds: ``2 * num_blocks + 64`` (at most
    ``num_blocks + 1`` live in a touch; the caller reuses dead ones)."""
    return 2 * num_blocks + 64


def _edge_rows(n: int) -> np.ndarray:
    """``(n, 8)`` int32 edge rows, free (-1), starting on a 64-byte boundary (two a cache line)."""
    buf = np.full(n * 8 + 16, -1, np.int32)
    skip = (-buf.ctypes.data % 64) // 4
    return buf[skip:skip + n * 8].reshape(n, 8)


def _edge_hash(cap: int) -> np.ndarray:
    return np.full(1 << int(2 * cap - 1).bit_length(), -1, np.int64)


def new_state(num_blocks: int, ttl: int, pin_cap: int, max_sessions: int, edges: int | None = None,
              order_cap: int | None = None) -> dict:
    """A fresh state for ``num_blocks`` blocks, ``ttl_arrivals`` ``ttl``
    (``1 <= ttl < QMAX``), ``pin_cap`` and ``max_sessions`` (kept in ``c``):
    nothing free (the driver releases the free blocks first), no key, no
    session; room for ``edges`` edges (default ``4 * num_blocks + 1024``;
    :func:`grow_edges` adds more), and ``order_cap`` entries on the order heap
    and in the calendar each (default ``4 * num_blocks + 1024``; at least
    ``num_blocks + 2``: each holds at most one live entry a free block and is
    compacted when full; tests set it low).

    Returns:
        ``{name: array}`` of the kernels' arguments (names as there; ``HQ[2,
        cap, 4]``: the order heap and the calendar's entries).
    """
    if not 1 <= ttl < QMAX:
        raise ValueError(f"ttl_arrivals {ttl}: the calendar takes 1 .. {QMAX - 1}")
    i64 = np.int64
    nk = key_ids(num_blocks)
    ts = 1
    while ts < 2 * nk:
        ts *= 2
    BL = _rows(num_blocks + NLISTS, 8)
    BL[:, KEY] = BL[:, HST] = -1
    for z in range(num_blocks, num_blocks + NLISTS):
        BL[z, LN] = BL[z, LP] = z  # the lists: empty
    R = _rows(nk + 1, 8)
    R[nk, UNTIL] = R[nk, OH] = R[nk, OWN] = -1  # the key None
    ns = session_ids(num_blocks)
    S = _rows(ns, 8)
    S[:, SH] = S[:, ST] = S[:, SP] = S[:, SX] = -1
    ec = edges or 4 * num_blocks + 1024
    E = _edge_rows(ec)
    E[:, EIN] = 0
    E[:, EF] = np.arange(ec - 1, -1, -1)  # (edge 0 taken first)
    c = np.zeros(NCOUNTERS, i64)
    c[AH] = c[AT] = -1
    c[QFREE] = -1
    c[EFREE] = ec
    c[TTL], c[CAP], c[MAXS] = ttl, pin_cap, max_sessions
    w = 1 << int(ttl).bit_length()  # a power of two > ttl
    hc = order_cap or 4 * num_blocks + 1024
    if hc < num_blocks + 2:
        raise ValueError(f"order_cap {hc}: at least num_blocks + 2 = {num_blocks + 2}")
    HQ = _rows(2 * hc, 4).reshape(2, hc, 4)
    return {"BL": BL, "R": R, "T": np.zeros((ts, 2), i64), "S": S, "E": E, "ht": _edge_hash(ec),
            "V": np.zeros((5, nk), i64), "HQ": HQ, "qb": np.full((2, w), -1, i64), "c": c}


def grow_edges(st: dict) -> None:
    """Double the edges (the new ones on top of the free stack) and rebuild their hash."""
    E, c = st["E"], st["c"]
    old = E.shape[0]
    cap = 2 * old
    new = _edge_rows(cap)
    new[:old, :EF] = E[:, :EF]
    new[old:, EIN] = 0
    nf = int(c[EFREE])
    new[:nf, EF] = E[:nf, EF]
    new[nf:nf + old, EF] = np.arange(cap - 1, old - 1, -1)
    c[EFREE] = nf + old
    st["E"] = new
    st["ht"] = _edge_hash(cap)
    rehash(new, st["ht"])


def warm() -> None:
    """Compile every kernel (or load numba's on-disk cache) on a tiny state,
    with the argument types the runtime passes."""
    s = new_state(4, 2, 2, 4, 8)
    i64 = np.int64
    ids = np.array([1, 2], i64)
    w = np.frombuffer(np.arange(8, dtype=i64).tobytes(), i64).reshape(2, 4)
    V, BL, R, T, S, E, ht, HQ, qb, c = (s[x] for x in ("V", "BL", "R", "T", "S", "E", "ht", "HQ", "qb", "c"))
    arrived(0, 0, V, BL, R, S, E, HQ, qb, c)
    release(np.zeros(0, i64), ids, V, BL, R, HQ, qb, c)
    evict(2, V, BL, R, T, S, E, ht, HQ, qb, c)
    stored(ids, w, 0, 2, V, BL, R, T, S, E, ht, c)
    hit(ids, 0, 2, V, BL, R, S, E, ht, c)
    touch(np.zeros(0, i64), BL, c)
    rehash(E, ht)
