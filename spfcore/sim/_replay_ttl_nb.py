"""The sequential replay of the ``session_ttl`` arm (arrivals mode) as one
numba-compiled loop over int arrays: the same model, the same decisions and
the same counts as :func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with the shipped
:class:`spfcore_session_ttl.SessionTTLPolicy` (``ttl_seconds = None``) and
the scored evictor (:mod:`spfcore.evictor`) it runs on.

Imported by the simulator on the first compiled ``session_ttl`` replay only
(see :mod:`spfcore.sim._replay_nb` for why numba is loaded late). The pool
(per-key block lists, hashless stack, victims, counters) is
:mod:`spfcore.sim._replay_nb`'s; this module adds the policy and the
evictor's order.

What is reproduced, in the Python loop's order:

* The policy: per key id ``until`` (arrival index at which its protection
  ends; -1: the policy holds no such hash), pushed to ``arrival +
  ttl_arrivals`` by a store or a hit of a request with a session, and by an
  arrival of a session owning it. Ownership is a relation of (session, key)
  edges: a session's keys in first-touch order, a key's owners; at most
  ``max_sessions`` live sessions (a new session beyond that forgets the least
  recently active one: its edges go, the keys' ``until`` stays); evicting a
  block drops its key's ``until`` and edges (also when a duplicate block still
  holds the hash, as the plugin does); a session left with no key is dropped.
* The runtime: at an arrival, the arrived hook, then the expired scores
  re-scored (one score call), then ``spfcore_rescore_keys`` (the session's
  keys, first-touch order) mapped through ``by_key`` (the block that stored a
  hash last; evicting that block unmaps it) to the free blocks, re-scored in
  one batch after the expired ones. ``by_key`` is per key id ``own``.
* The evictor: value 0 for every block, so the order is hashless blocks
  (most recently freed first), then unpinned blocks by release order, then
  pinned blocks by release order. A score pins a block iff ``until > arrival``
  (expiring at arrival ``until``); in each batch, in sequence, a pin is
  granted while fewer than ``pin_cap`` blocks are pinned or the block is
  pinned already, else refused (counted; the block keeps its place, its
  expiry stays registered, so it is re-scored at ``until``). Expired scores
  are re-scored in ``(expiry, version)`` order at each arrival and before a
  pop that takes cached blocks.

State (owned by :class:`spfcore.sim.simulator._CompiledReplay`, passed in on
every call; ``nb`` = ``num_blocks``, ``K`` / ``S`` = key-id / session-id
capacity, ``E`` = edge capacity, ``H`` = hash slots, a power of two >= 2E):

* ``bl`` int64 ``(BROWS, nb)``, per block: key id (-1: none), next / previous
  block of the same key, release order, score version, order-heap stamp (-1:
  no live entry), free (cached, in the order), pinned, next / previous block
  of the release queue, in it; row ``HS`` is the hashless stack.
* ``kk`` int64 ``(KROWS, K)``, per key id: first / last cached block
  (insertion order; a lookup takes the first), ``own``, ``until``, first /
  last owner edge.
* ``ss`` int64 ``(SROWS, S)``, per session id: first / last key edge, key
  count, previous / next session in activity order (least recent first), live.
* ``ee`` int64 ``(EROWS, E)``, per edge: session (-1: free), key, previous /
  next edge of the session, previous / next edge of the key. Free edges are
  chained through ``ESN`` from ``c[EFREE]``.
* ``ht`` int64 ``(H,)``: open-addressing (linear probing) hash of edges by
  (session, key), -1 empty; deletions shift back (no tombstones).
* The order: blocks released unpinned wait in the release queue, a doubly
  linked list in release order (block 0, never free, its sentinel: ``LN[0]``
  the oldest), O(1) a release, hit or victim (a trace without sessions never
  leaves it); the others (pinned, or unpinned after a pin lapsed, at their old
  release order) on the order heap ``ov, oo, ob, ox`` (pinned, release order,
  block, stamp), a binary min-heap with lazy deletion
  (:mod:`spfcore.sim._replay_nb`'s helpers). A victim is the older of the
  queue's head and the heap's top unless the top is pinned.
* Expiries, keyed by ``(expiry, version)``. Every expiry lies within a TTL
  of the clock (``arrival < until <= arrival + ttl_arrivals``), so with a TTL
  below :data:`QMAX` they wait in a calendar of ``W`` buckets (a power of two
  above the TTL), one per arrival, each a chain of entries in push order
  (version order): ``qe`` int64 ``(3, cap)`` (version, block, next entry; -1
  end), ``qb`` int64 ``(2, W)`` (first and last entry; -1 empty); an expiry
  round reads the due buckets in turn, no sort. Otherwise (``W`` = 0) on the
  expiry heap ``xv, xo, xb, xx`` (expiry, version, block, version). An entry
  is live iff its block is free and its version is the block's.
* ``c``: int64 counters (:mod:`spfcore.sim._replay_nb`'s, then those below).

Session ids and key ids are dense labels chosen by the caller; decisions do not
depend on their values, so the caller may renumber them between calls
(:func:`remap`).
"""

from __future__ import annotations

import numpy as np

from spfcore.sim._replay_nb import (EVICT_CALLS, EVICTIONS, HN, HOOK_CALLS, HSN, LRUN, NVICT, ORDER, VERSION, XN,
                                    _compact, _drop, _insert, _jit, _o_pop, _o_up, warm_trace)

#: Rows of ``bl`` (per block), ``kk`` (per key id), ``ss`` (per session id), ``ee`` (per edge).
KEY, DN, DP, ORD, VER, HST, IN, PIN, HS, LN, LP, INL = range(12)
BROWS = 12
KH, KT, OWN, UNTIL, OH, OT = range(6)
KROWS = 6
SH, ST, SN, SP, SX, ALIVE = range(6)
SROWS = 6
ES, EK, ESP, ESN, EKP, EKN = range(6)
EROWS = 6
#: More counter indices: pinned free blocks, pins refused, order-heap stamps
#: handed out, live sessions, first / last session in activity order, free-edge
#: chain head, live edges.
NPIN, REFUSED, HSEQ, NSESS, AH, AT, EFREE, NEDGE = range(10, 18)
#: (calendar) first arrival not drained yet, free-entry chain head, entries ever used.
QBASE, QFREE, QTOP = range(18, 21)
NCOUNTERS = 21
#: Most calendar buckets: a TTL below it keeps its expiries in the calendar, a longer one on the heap.
QMAX = 1 << 16


# ------------------------------------------------------------ (session, key) hash
@_jit
def _slot(s, k, mask):
    x = np.uint64(s) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(k)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    return np.int64(x & np.uint64(mask))


@_jit
def _find(s, k, ee, ht):
    """The edge (session ``s``, key ``k``), or -1."""
    mask = len(ht) - 1
    i = _slot(s, k, mask)
    while True:
        e = ht[i]
        if e < 0:
            return -1
        if ee[ES, e] == s and ee[EK, e] == k:
            return e
        i = (i + 1) & mask


@_jit
def _put(e, ee, ht):
    mask = len(ht) - 1
    i = _slot(ee[ES, e], ee[EK, e], mask)
    while ht[i] >= 0:
        i = (i + 1) & mask
    ht[i] = e


@_jit
def _unput(e, ee, ht):
    """Take edge ``e`` out of the hash (backward-shift deletion)."""
    mask = len(ht) - 1
    i = _slot(ee[ES, e], ee[EK, e], mask)
    while ht[i] != e:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        f = ht[j]
        if f < 0:
            break
        h = _slot(ee[ES, f], ee[EK, f], mask)
        # the entry at j may move to the hole at i iff its home slot h is not in (i, j] (cyclically)
        if (i <= j and (h <= i or h > j)) or (i > j and h <= i and h > j):
            ht[i] = f
            i = j
    ht[i] = -1


@_jit
def rehash(ee, ht):
    """Rebuild ``ht`` from the live edges (after :func:`remap` or growth)."""
    ht[:] = -1
    for e in range(ee.shape[1]):
        if ee[ES, e] >= 0:
            _put(e, ee, ht)


# ------------------------------------------------------------ sessions and edges
@_jit
def _s_unlink(s, ss, c):
    p, x = ss[SP, s], ss[SX, s]
    if p >= 0:
        ss[SX, p] = x
    else:
        c[AH] = x
    if x >= 0:
        ss[SP, x] = p
    else:
        c[AT] = p


@_jit
def _s_append(s, ss, c):
    t = c[AT]
    ss[SP, s] = t
    ss[SX, s] = -1
    if t >= 0:
        ss[SX, t] = s
    else:
        c[AH] = s
    c[AT] = s


@_jit
def _s_drop(s, ss, c):
    """Session ``s`` (no edge left) leaves the activity order."""
    _s_unlink(s, ss, c)
    ss[ALIVE, s] = 0
    ss[SH, s] = ss[ST, s] = -1
    ss[SN, s] = 0
    c[NSESS] -= 1


@_jit
def _e_free(e, ee, ht, c):
    _unput(e, ee, ht)
    ee[ES, e] = -1
    ee[ESN, e] = c[EFREE]
    c[EFREE] = e
    c[NEDGE] -= 1


@_jit
def _e_new(s, k, kk, ss, ee, ht, c):
    """Edge (``s``, ``k``) appended to the session's keys and the key's owners."""
    e = c[EFREE]
    c[EFREE] = ee[ESN, e]
    c[NEDGE] += 1
    ee[ES, e] = s
    ee[EK, e] = k
    t = ss[ST, s]
    ee[ESP, e] = t
    ee[ESN, e] = -1
    if t >= 0:
        ee[ESN, t] = e
    else:
        ss[SH, s] = e
    ss[ST, s] = e
    ss[SN, s] += 1
    t = kk[OT, k]
    ee[EKP, e] = t
    ee[EKN, e] = -1
    if t >= 0:
        ee[EKN, t] = e
    else:
        kk[OH, k] = e
    kk[OT, k] = e
    _put(e, ee, ht)


@_jit
def _forget_session(s, kk, ss, ee, ht, c):
    """The least recently active session beyond ``max_sessions``: its edges
    go (each key loses this owner), the keys' ``until`` stays."""
    e = ss[SH, s]
    while e >= 0:
        nx = ee[ESN, e]
        k = ee[EK, e]
        p, q = ee[EKP, e], ee[EKN, e]
        if p >= 0:
            ee[EKN, p] = q
        else:
            kk[OH, k] = q
        if q >= 0:
            ee[EKP, q] = p
        else:
            kk[OT, k] = p
        _e_free(e, ee, ht, c)
        e = nx
    _s_drop(s, ss, c)


@_jit
def _evict_key(k, kk, ss, ee, ht, c):
    """``spfcore_blocks_evicted`` for key ``k``: its ``until`` and edges go; a
    session left with no key is dropped."""
    kk[UNTIL, k] = -1
    e = kk[OH, k]
    while e >= 0:
        nx = ee[EKN, e]
        s = ee[ES, e]
        p, q = ee[ESP, e], ee[ESN, e]
        if p >= 0:
            ee[ESN, p] = q
        else:
            ss[SH, s] = q
        if q >= 0:
            ee[ESP, q] = p
        else:
            ss[ST, s] = p
        ss[SN, s] -= 1
        _e_free(e, ee, ht, c)
        if ss[SN, s] == 0:
            _s_drop(s, ss, c)
        e = nx
    kk[OH, k] = kk[OT, k] = -1


@_jit
def _touch(s, keys, a, b, end, maxs, kk, ss, ee, ht, c):
    """A store or hit of session ``s`` (-1: none) on keys ``keys[a:b]``."""
    if s < 0 or b <= a:
        return
    if not ss[ALIVE, s]:
        ss[ALIVE, s] = 1
        ss[SH, s] = ss[ST, s] = -1
        ss[SN, s] = 0
        _s_append(s, ss, c)
        c[NSESS] += 1
        if c[NSESS] > maxs:
            _forget_session(c[AH], kk, ss, ee, ht, c)
    elif c[AT] != s:
        _s_unlink(s, ss, c)
        _s_append(s, ss, c)
    for j in range(a, b):
        k = keys[j]
        if kk[UNTIL, k] < end:
            kk[UNTIL, k] = end
        if _find(s, k, ee, ht) < 0:
            _e_new(s, k, kk, ss, ee, ht, c)


# ------------------------------------------------------------ the arrivals calendar
@_jit
def _q_push(x, v, b, bl, qe, qb, c):
    """Append expiry entry ``(version v, block b)`` to the bucket of arrival
    ``x`` (``c[QBASE] <= x < c[QBASE] + W``: every expiry lies within a TTL of
    the clock). The pool full: the stale entries are unlinked first."""
    e = c[QFREE]
    if e < 0 and c[QTOP] == qe.shape[1]:
        _q_compact(bl, qe, qb, c)
        e = c[QFREE]
    if e >= 0:
        c[QFREE] = qe[2, e]
    else:
        e = c[QTOP]
        c[QTOP] = e + 1
    qe[0, e], qe[1, e], qe[2, e] = v, b, -1
    q = x & (qb.shape[1] - 1)
    if qb[0, q] < 0:
        qb[0, q] = e
    else:
        qe[2, qb[1, q]] = e
    qb[1, q] = e


@_jit
def _q_compact(bl, qe, qb, c):
    """Unlink the stale entries of every bucket (order kept) onto the free chain."""
    for q in range(qb.shape[1]):
        e = qb[0, q]
        qb[0, q] = qb[1, q] = -1
        while e >= 0:
            nx = qe[2, e]
            b = qe[1, e]
            if bl[IN, b] and bl[VER, b] == qe[0, e]:
                qe[2, e] = -1
                if qb[0, q] < 0:
                    qb[0, q] = e
                else:
                    qe[2, qb[1, q]] = e
                qb[1, q] = e
            else:
                qe[2, e] = c[QFREE]
                c[QFREE] = e
            e = nx


# ------------------------------------------------------------ the evictor's order
@_jit
def _l_unlink(b, bl):
    """Block ``b`` leaves the release queue."""
    p, q = bl[LP, b], bl[LN, b]
    bl[LN, p] = q
    bl[LP, q] = p
    bl[INL, b] = 0


@_jit
def _place(b, pos, order, cap, bl, kk, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c):
    """Score block ``b`` at arrival ``pos`` and (re-)place it (``Evictor._place``
    of one block: a new version, the expiry registered, the pin granted or
    refused, an entry at its rank unless it stays where it is); ``order``: its
    release order if it is not in the order yet."""
    u = kk[UNTIL, bl[KEY, b]]
    c[VERSION] += 1
    v = c[VERSION]
    want = u > pos
    pin = False
    if want:
        if qb.shape[1]:
            _q_push(u, v, b, bl, qe, qb, c)
        else:
            if c[XN] == len(xv):
                c[XN] = _compact(xv, xo, xb, xx, c[XN], bl[IN], bl[VER])
            n = c[XN]
            xv[n], xo[n], xb[n], xx[n] = u, v, b, v
            c[XN] = n + 1
            _o_up(xv, xo, xb, xx, n)
        if c[NPIN] < cap or bl[PIN, b]:
            pin = True
        else:
            c[REFUSED] += 1
    was = bl[PIN, b] != 0
    if bl[IN, b]:
        if not pin and not was:  # same rank: stays where it is
            bl[VER, b] = v
            return
    else:
        bl[IN, b] = 1
        c[LRUN] += 1
        bl[ORD, b] = order
    bl[VER, b] = v
    if pin:
        if not was:
            bl[PIN, b] = 1
            c[NPIN] += 1
    elif was:
        bl[PIN, b] = 0
        c[NPIN] -= 1
    elif not bl[INL, b]:  # released unpinned: the release queue's tail (release orders only grow)
        bl[HST, b] = -1  # no order-heap entry of it is live
        bl[INL, b] = 1
        t = bl[LP, 0]
        bl[LN, t] = b
        bl[LP, b] = t
        bl[LN, b] = 0
        bl[LP, 0] = b
        return
    if bl[INL, b]:  # pinned now: out of the release queue, onto the heap
        _l_unlink(b, bl)
    if c[HN] == len(ov):
        c[HN] = _compact(ov, oo, ob, ox, c[HN], bl[IN], bl[HST])
    c[HSEQ] += 1
    bl[HST, b] = c[HSEQ]
    n = c[HN]
    ov[n], oo[n], ob[n], ox[n] = 1 if pin else 0, bl[ORD, b], b, c[HSEQ]
    c[HN] = n + 1
    _o_up(ov, oo, ob, ox, n)


@_jit
def _rescore_due(pos, cap, due_buf, bl, kk, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c):
    """Re-score every free block whose score expired by ``pos``, in
    ``(expiry, version)`` order (one score call if any); every expiry entry
    due by ``pos`` is dropped."""
    m = 0
    if qb.shape[1]:
        w = qb.shape[1] - 1
        for x in range(c[QBASE], pos + 1):
            q = x & w
            h = qb[0, q]
            if h < 0:
                continue
            e = h
            while True:
                b = qe[1, e]
                if bl[IN, b] and qe[0, e] == bl[VER, b]:
                    due_buf[m] = b
                    m += 1
                if qe[2, e] < 0:
                    break
                e = qe[2, e]
            qe[2, e] = c[QFREE]  # the bucket's chain onto the free chain
            c[QFREE] = h
            qb[0, q] = qb[1, q] = -1
        if pos + 1 > c[QBASE]:
            c[QBASE] = pos + 1
    else:
        while c[XN] and xv[0] <= pos:
            b, x = xb[0], xx[0]
            c[XN] = _o_pop(xv, xo, xb, xx, c[XN])
            if bl[IN, b] and x == bl[VER, b]:
                due_buf[m] = b
                m += 1
    if m:
        c[HOOK_CALLS] += 1
        for j in range(m):
            _place(due_buf[j], pos, 0, cap, bl, kk, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c)


@_jit
def _alloc(n, pos, cap, blocks, at, due_buf, bl, kk, ss, ee, ht, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c, victims):
    """``PolicyRuntime.evict(n)``: expired scores re-scored first when cached
    blocks are taken, then ``n`` victims into ``blocks[at:]``; their keys leave
    the prefix cache, ``by_key`` and the policy (one evicted-hook call if any)."""
    c[EVICT_CALLS] += 1
    if n > c[HSN] and (c[QBASE] <= pos if qb.shape[1] else c[XN] and xv[0] <= pos):
        _rescore_due(pos, cap, due_buf, bl, kk, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c)
    keyed = False
    for j in range(n):
        if c[HSN] > 0:
            c[HSN] -= 1
            b = bl[HS, c[HSN]]
        else:
            while c[HN] and not (bl[IN, ob[0]] and ox[0] == bl[HST, ob[0]]):  # stale tops
                c[HN] = _o_pop(ov, oo, ob, ox, c[HN])
            b = bl[LN, 0]
            if b != 0 and (c[HN] == 0 or ov[0] != 0 or bl[ORD, b] < oo[0]):
                _l_unlink(b, bl)
            else:
                b = ob[0]
                c[HN] = _o_pop(ov, oo, ob, ox, c[HN])
            bl[IN, b] = 0
            c[LRUN] -= 1
            if bl[PIN, b]:
                bl[PIN, b] = 0
                c[NPIN] -= 1
        k = bl[KEY, b]
        if k >= 0:
            keyed = True
            c[EVICTIONS] += 1
            if kk[OWN, k] == b:
                kk[OWN, k] = -1
            _evict_key(k, kk, ss, ee, ht, c)
            _drop(b, bl[KEY], kk[KH], kk[KT], bl[DN], bl[DP])
        if len(victims):
            victims[c[NVICT]] = b
            c[NVICT] += 1
        blocks[at + j] = b
    if keyed:
        c[HOOK_CALLS] += 1


@_jit
def replay_ttl(start, first_arrival, bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, sid,
               ttl, cap, maxs, bl, kk, ss, ee, ht, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c,
               blocks, due_buf, hits, victims):
    """Replay requests ``r = start .. len(n_prompt)-1`` in order
    (:func:`spfcore.sim._replay_nb.replay`'s arrays, plus ``sid[r]``: request
    ``r``'s session id, -1 none; arrival index ``first_arrival + r``).

    Args:
        ttl: ``ttl_arrivals`` (>= 1). cap: the evictor's pin cap, blocks.
        maxs: the policy's ``max_sessions``.
        blocks: scratch of at least ``max(n_total)``; due_buf: scratch of ``num_blocks``.

    Returns:
        -1 (done); ``r >= 0``: request ``r`` needs more blocks than are free
        (nothing of it replayed); ``-2 - r``: fewer free edges than request
        ``r`` may add (nothing of it replayed: grow ``ee`` / ``ht`` and call
        again from ``r``).
    """
    for r in range(start, len(n_prompt)):
        pos = first_arrival + r
        f0 = bk_off[r]
        nf = nf_[r]
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        np_, nt = n_prompt[r], n_total[r]
        if nt > c[HSN] + c[LRUN]:
            return r
        if ee.shape[1] - c[NEDGE] < bk_off[r + 1] - f0 + nd:
            return -2 - r
        s = sid[r]
        end = pos + ttl
        # arrival: the arrived hook (the session's keys protected anew), expired scores, the re-pin
        c[HOOK_CALLS] += 2  # spfcore_request_arrived, spfcore_rescore_keys
        live = s >= 0 and ss[ALIVE, s] != 0
        if live:
            if c[AT] != s:
                _s_unlink(s, ss, c)
                _s_append(s, ss, c)
            e = ss[SH, s]
            while e >= 0:
                k = ee[EK, e]
                if kk[UNTIL, k] < end:
                    kk[UNTIL, k] = end
                e = ee[ESN, e]
        if c[QBASE] <= pos if qb.shape[1] else c[XN] and xv[0] <= pos:
            _rescore_due(pos, cap, due_buf, bl, kk, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c)
        if live:
            m = 0
            e = ss[SH, s]
            while e >= 0:
                b = kk[OWN, ee[EK, e]]
                if b >= 0 and bl[IN, b]:
                    due_buf[m] = b
                    m += 1
                e = ee[ESN, e]
            if m:
                c[HOOK_CALLS] += 1
                for j in range(m):
                    _place(due_buf[j], pos, 0, cap, bl, kk, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c)
        # lookup: the longest cached chain (earliest inserted block per key)
        h = 0
        while h < n_look[r]:
            b = kk[KH, bk[f0 + h]]
            if b < 0:
                break
            blocks[h] = b
            h += 1
        c[HOOK_CALLS] += 1  # spfcore_blocks_hit
        _touch(s, bk, f0, f0 + h, end, maxs, kk, ss, ee, ht, c)
        for j in range(h):  # hit blocks leave the free order
            b = blocks[j]
            if bl[INL, b]:
                _l_unlink(b, bl)
            bl[IN, b] = 0
            c[LRUN] -= 1
            if bl[PIN, b]:
                bl[PIN, b] = 0
                c[NPIN] -= 1
        _alloc(np_ - h, pos, cap, blocks, h, due_buf, bl, kk, ss, ee, ht, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c,
               victims)
        for j in range(h, nf):  # newly computed full prompt blocks; the later block owns a hash twice stored
            b = blocks[j]
            k = bk[f0 + j]
            _insert(b, k, bl[KEY], kk[KH], kk[KT], bl[DN], bl[DP])
            kk[OWN, k] = b
        if nf > h:
            c[HOOK_CALLS] += 1  # spfcore_blocks_stored
            _touch(s, bk, f0 + h, f0 + nf, end, maxs, kk, ss, ee, ht, c)
        nb_ = np_
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            done, nf_all = nf, nf + nd
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    b = blocks[done]
                    q = d0 + done - nf
                    k = dk[q]
                    _insert(b, k, bl[KEY], kk[KH], kk[KT], bl[DN], bl[DP])
                    kk[OWN, k] = b
                    c[HOOK_CALLS] += 1
                    _touch(s, dk, q, q + 1, end, maxs, kk, ss, ee, ht, c)
                    done += 1
                if j < nt:
                    _alloc(1, pos, cap, blocks, nb_, due_buf, bl, kk, ss, ee, ht, ov, oo, ob, ox, xv, xo, xb, xx,
                           qe, qb, c, victims)
                    nb_ += 1
        # release, tail first: cached blocks scored (one call) with new release orders; hashless on top
        cached = 0
        for j in range(nb_ - 1, -1, -1):
            b = blocks[j]
            if bl[KEY, b] >= 0:
                cached += 1
                c[ORDER] += 1
                _place(b, pos, c[ORDER], cap, bl, kk, ov, oo, ob, ox, xv, xo, xb, xx, qe, qb, c)
        if cached:
            c[HOOK_CALLS] += 1
        for j in range(nb_):
            b = blocks[j]
            if bl[KEY, b] < 0:
                bl[HS, c[HSN]] = b
                c[HSN] += 1
        hits[r] = h
    return -1


def new_state(num_blocks: int, ttl: int, nkeys: int, nsessions: int, nedges: int) -> dict:
    """A fresh pool (every usable block hashless and free, block 1 on top) and
    empty policy for ``num_blocks`` blocks and ``ttl_arrivals`` ``ttl``, room
    for ``nkeys`` key ids, ``nsessions`` session ids and ``nedges`` edges, as a
    dict of the arrays :func:`replay_ttl` takes (``bl, kk, ss, ee, ht``, the
    heaps ``heaps``: a list of 8, capacity ``4 * num_blocks + 1024``, the
    calendar ``qe, qb``: as many entries, ``W`` buckets or none, and ``c``)."""
    i64 = np.int64
    bl = np.zeros((BROWS, num_blocks), i64)
    bl[KEY], bl[DN], bl[DP], bl[HST] = -1, -1, -1, -1  # (the release queue: empty, block 0 its sentinel)
    c = np.zeros(NCOUNTERS, i64)
    n = num_blocks - 1
    bl[HS, :n] = np.arange(num_blocks - 1, 0, -1)
    c[HSN] = n
    c[AH] = c[AT] = -1
    st = {"bl": bl, "kk": np.full((KROWS, 0), -1, i64), "ss": np.full((SROWS, 0), -1, i64),
          "ee": np.full((EROWS, 0), -1, i64), "ht": np.full(1, -1, i64), "c": c,
          "heaps": [np.zeros(4 * num_blocks + 1024, i64) for _ in range(8)]}
    w = 1 << int(ttl).bit_length() if ttl + 1 <= QMAX else 0  # a power of two > ttl
    st["qb"] = np.full((2, w), -1, i64)
    st["qe"] = np.zeros((3, 4 * num_blocks + 1024 if w else 0), i64)
    c[QFREE] = -1
    c[EFREE] = -1
    grow(st, nkeys, nsessions, nedges)
    return st


def grow(st: dict, nkeys: int, nsessions: int, nedges: int) -> None:
    """Room for at least ``nkeys`` key ids, ``nsessions`` session ids and
    ``nedges`` edges (each capacity at least doubles when it grows; the hash is
    rebuilt when the edges grow)."""
    i64 = np.int64
    kk, ss, ee, c = st["kk"], st["ss"], st["ee"], st["c"]
    if nkeys > kk.shape[1]:
        new = np.full((KROWS, max(nkeys, 2 * kk.shape[1], 1024)), -1, i64)
        new[:, :kk.shape[1]] = kk
        st["kk"] = new
    if nsessions > ss.shape[1]:
        new = np.full((SROWS, max(nsessions, 2 * ss.shape[1], 256)), -1, i64)
        new[:, :ss.shape[1]] = ss
        new[ALIVE, ss.shape[1]:] = 0
        new[SN, ss.shape[1]:] = 0
        st["ss"] = new
    if nedges > ee.shape[1]:
        old = ee.shape[1]
        cap = max(nedges, 2 * old, 1024)
        new = np.full((EROWS, cap), -1, i64)
        new[:, :old] = ee
        new[ESN, old:cap - 1] = np.arange(old + 1, cap)  # the new edges chained in front of the free ones
        new[ESN, cap - 1] = c[EFREE]
        c[EFREE] = old
        st["ee"] = new
        st["ht"] = np.full(1 << int(2 * cap - 1).bit_length(), -1, i64)
        rehash(new, st["ht"])


def remap(st: dict, keep_keys: np.ndarray | None, keep_sessions: np.ndarray | None) -> tuple:
    """Renumber key ids and session ids densely: the key ids with
    ``keep_keys`` true (every key id that a block, ``own`` or an edge names
    must be kept) and the session ids with ``keep_sessions`` true (every live
    session must be kept) become ``0, 1, ...`` in id order; the others are
    forgotten. ``None``: that space unchanged. Returns ``(key remap,
    session remap)``: old id -> new id, -1 forgotten (``None`` where unchanged).
    O(capacity)."""
    i64 = np.int64
    bl, ee, c = st["bl"], st["ee"], st["c"]
    out = []
    for keep, arr_name in ((keep_keys, "kk"), (keep_sessions, "ss")):
        if keep is None:
            out.append(None)
            continue
        arr = st[arr_name]
        old = np.flatnonzero(keep[:arr.shape[1]])
        m = np.full(arr.shape[1], -1, i64)
        m[old] = np.arange(len(old))
        new = np.full_like(arr, -1)
        new[:, :len(old)] = arr[:, old]
        if arr_name == "ss":
            new[ALIVE, len(old):] = 0
            new[SN, len(old):] = 0
        st[arr_name] = new
        out.append(m)
    km, sm = out
    live = ee[ES] >= 0
    if km is not None:
        held = bl[KEY] >= 0
        bl[KEY, held] = km[bl[KEY, held]]
        ee[EK, live] = km[ee[EK, live]]
    if sm is not None:
        ss = st["ss"]
        for row in (SP, SX):
            v = ss[row]
            has = v >= 0
            v[has] = sm[v[has]]
        for j in (AH, AT):
            if c[j] >= 0:
                c[j] = sm[c[j]]
        ee[ES, live] = sm[ee[ES, live]]
    rehash(ee, st["ht"])
    return km, sm


def run(st: dict, flat: tuple, sid: np.ndarray, first_arrival: int, ttl: int, cap: int, maxs: int,
        hits: np.ndarray, victims: np.ndarray) -> int:
    """:func:`replay_ttl` of one chunk, growing the edges (and their hash) as it asks.

    Args:
        st: :func:`new_state`'s arrays, with room for every key id and session
            id of the chunk (:func:`grow`).
        flat: the chunk's 8 request arrays (:func:`spfcore.sim._replay_nb.replay`).
        sid: int64 ``(n,)``, each request's session id (-1: none).
        first_arrival: arrival index of the chunk's first request.
        ttl, cap, maxs: ``ttl_arrivals``, the pin cap (blocks), ``max_sessions``.
        hits: int64 ``(n,)``, written: hit blocks per request.
        victims: int64, every victim appended at ``st["c"][NVICT]`` (empty: none kept).

    Returns:
        -1, or the index of a request that needs more blocks than are free
        (the requests before it were replayed).
    """
    bl = st["bl"]
    blocks = np.empty(max(int(flat[7].max()) if len(flat[7]) else 1, 1), np.int64)
    due_buf = np.empty(bl.shape[1], np.int64)
    r = 0
    while True:
        r = replay_ttl(r, first_arrival, *flat, sid, ttl, cap, maxs, bl, st["kk"], st["ss"], st["ee"], st["ht"],
                       *st["heaps"], st["qe"], st["qb"], st["c"], blocks, due_buf, hits, victims)
        if r >= -1:
            return r
        r = -2 - r
        grow(st, 0, 0, 2 * st["ee"].shape[1])


def warm() -> None:
    """Call every kernel once on a tiny replay with the argument types the
    simulator uses: compiles them (or loads numba's on-disk cache) now."""
    i64 = np.int64
    flat, _ = warm_trace()
    sid = np.array([0, 0], i64)
    sid.flags.writeable = False  # read-only, as the simulator passes it
    for ttl in (2, QMAX):  # the calendar, the expiry heap
        st = new_state(8, ttl, 4, 1, 4)
        run(st, flat, sid, 0, ttl, 4, 8, np.empty(2, i64), np.empty(8, i64))
        remap(st, st["kk"][KH] >= 0, st["ss"][ALIVE] != 0)
