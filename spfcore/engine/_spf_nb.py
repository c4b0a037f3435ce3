"""The shipped ``spf_expected_utility`` arm (variant ``"utility"``, learned
hit density) as numba kernels per engine event, for
:class:`spfcore.engine.compiled.SpfKernelRuntime`: the same decisions as a
:class:`~spfcore.runtime.PolicyRuntime` driving
``spfcore_spf_expected_utility.ExpectedUtilityPolicy`` (its ``UtilityPolicy``
hooks and the scored evictor), one kernel call per runtime event.

The model is the simulator's compiled replay of the same class,
:mod:`spfcore.sim._replay_spf_nb` (tested there against the hooks, float for
float): its state (:func:`~spfcore.sim._replay_spf_nb.new_state`: the records
``sr``, per key id ``kr``, the histograms and index table, the evictor's
order, calendar and heaps) and its sub-kernels (``_build``, ``_expire``,
``_hit``, ``_stored``, ``_score``, ``_place``, ``_alloc``, ``_refresh``) are
called here as they are; this module adds what the engine needs around them:

* **Keys** are vLLM's 32-byte block hashes, interned to key ids in a table
  of :mod:`spfcore.engine._frequency_nb`'s form (``T[S, 2]``: first word,
  key id + 1; open addressing from the first word, backward-shift deletion;
  ``KW[K, 4]`` the hash's four words, every bit compared). ``live[k]``:
  whether id ``k`` names a hash now.
* **Key ids are reused** (memory bounded by what the state names): a sweep
  (:func:`sweep`, run by the caller when an intern finds no free id) frees
  every id the state no longer names, the simulator's
  :func:`~spfcore.sim._replay_spf_nb.keep_keys` condition (cached, with a
  record or a ghost record, the parent of a cached block) plus the latest
  arrival's prompt (its ``MARK``). The caller grows the arrays when a sweep
  frees too little, so at most about twice the named ids are held.
* **The pool** is vLLM's: blocks come free through :func:`release`
  (hashless ones onto a stack, ``hashless[0]`` on top: vLLM ``prepend_n``),
  leave it through :func:`evict` and :func:`touch`; ``hf[b]``: block ``b``
  is free and hashless.
* **Events come one at a time**; the request's prompt hashes arrive with
  :func:`arrived` (the arrival hook's seen prefix and the prompt's hash set
  are the request view's ``block_keys``).

Kernels return 0, a negative number ``-1 - j`` naming the ``j``-th block of
the call that breaks the event protocol (nothing applied), or a code below
(the caller grows state or raises; nothing applied).
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore import _evictor_nb as ev
from spfcore.engine._frequency_nb import NEXTID, NFREE, _find, _unintern
from spfcore.sim import _replay_spf_nb as rs
from spfcore.sim._replay_nb import EVICTIONS, HSN  # noqa: F401  (counter indices of ``c``, read by the runtime)
from spfcore.sim._replay_spf_nb import DUAL, HOOK_CALLS, KIND, MARK, NEXT_BUILD, NFREE as SLOTS_FREE, ORDER, \
    PERIOD, REC, ROOT_BLOCKS, STATE, T

#: Codes (positive: nothing applied): every key id is live (sweep or grow, then call again); fewer free
#: record slots than the event may take (grow them, then call again); fewer free blocks than asked
#: (:func:`evict`); release orders exhausted (:func:`renumber` them, then call again); a block the
#: runtime never heard stored (no key); an expiry structure or the ghost list lacked room (a bug).
NEED_KEYS, NEED_SLOTS, TOO_FEW, ORDERS, NO_KEY, BUG = range(1, 7)
#: Intern counters ``ic``: freed key ids on ``fk`` (``NFREE``), ids never used yet start at
#: ``NEXTID`` (both as :mod:`spfcore.engine._frequency_nb` names them), the event stamp (``STAMP``).
STAMP = 13
NIC = 16

#: The state arrays (:func:`~spfcore.sim._replay_spf_nb.new_state`'s names) each kernel below reads,
#: in its tuple's order (the runtime builds the tuples): every array of an argument is unboxed on
#: each call (about 0.45 us when the caches are cold), so a kernel that reads few takes only those;
#: :func:`arrived` takes them all (``rs._ARGS``).
HIT = ("key_of", "depth_of", "kh", "dn", "dp", "kr", "sr", "fs", "hist", "bucket", "ip", "pc", "ib", "bsc", "c")
TOUCH = ("ib", "ok", "cmb", "cmk", "cmo", "qe", "qb", "ec", "c")
STORED = ("key_of", "kh", "kt", "dn", "dp", "par_of", "depth_of", "kr", "sr", "bsc", "ib", "fs", "hist", "never", "pw",
          "bucket", "ip", "pc", "c")
EVICT = ("key_of", "kh", "kt", "dn", "dp", "hs", "par_of", "depth_of", "kr", "sr", "bsc", "bq", "fs", "q", "never", "vals",
         "offs", "bucket", "ip", "pc", "pf", "ib", "ok", "cmb", "cmk", "cmo", "tk", "ti", "ak", "ai", "qe", "qb", "ec", "c")
RELEASE = ("key_of", "par_of", "depth_of", "kh", "dn", "kr", "sr", "bsc", "bq", "vals", "offs", "bucket", "ip", "pc", "ib",
           "ok", "cmb", "cmk", "cmo", "tk", "ti", "ak", "ai", "qe", "qb", "ec", "hs", "c")

_jit = numba.njit(cache=True, nogil=True)


@_jit
def intern(w, kid, KW, T_, fk, ic, live, kr, kh, kt):
    """Key ids of the hashes ``w`` (``(n, 4)`` int64 words) into ``kid``:
    found, or new (a freed id first, else the next unused one; its rows reset:
    no record, no cached block, no prompt stamp). Returns False when every id
    is live (the ids found or made so far stay interned: harmless, they name
    nothing yet)."""
    mask = T_.shape[0] - 1
    for j in range(w.shape[0]):
        i = _find(T_, mask, KW, w, j)
        if i >= 0:
            kid[j] = T_[i, 1] - 1
            continue
        if ic[NFREE] > 0:
            ic[NFREE] -= 1
            k = fk[ic[NFREE]]
        elif ic[NEXTID] < KW.shape[0]:
            k = ic[NEXTID]
            ic[NEXTID] += 1
        else:
            return False
        s = -1 - i
        T_[s, 0] = w[j, 0]
        T_[s, 1] = k + 1
        for x in range(4):
            KW[k, x] = w[j, x]
        kr[k, REC] = -1
        kr[k, DUAL] = -1
        kr[k, MARK] = 0
        kh[k] = -1
        kt[k] = -1
        live[k] = 1
        kid[j] = k
    return True


@_jit
def sweep(KW, T_, fk, ic, live, kr, kh, key_of, par_of, t):
    """Free every live key id the state no longer names (not cached, no
    record, no ghost record, not the parent of a cached block, not in the
    prompt of the arrival ``t``); returns how many."""
    n = ic[NEXTID]
    keep = np.zeros(n, np.bool_)
    for k in range(n):
        if live[k] and (kh[k] >= 0 or kr[k, REC] >= 0 or kr[k, DUAL] >= 0 or kr[k, MARK] == t + 1):
            keep[k] = True
    for b in range(key_of.shape[0]):
        if key_of[b] >= 0 and par_of[b] >= 0:
            keep[par_of[b]] = True
    mask = T_.shape[0] - 1
    m = 0
    for k in range(n):
        if live[k] and not keep[k]:
            _unintern(k, T_, mask, KW, fk, ic)
            live[k] = 0
            m += 1
    return m


@_jit
def rehash(KW, T_, live, n):
    """``T_`` (zeroed, a power of two of rows) rebuilt from the live ids below ``n``."""
    mask = T_.shape[0] - 1
    for k in range(n):
        if live[k]:
            i = KW[k, 0] & mask
            while T_[i, 1] != 0:
                i = (i + 1) & mask
            T_[i, 0] = KW[k, 0]
            T_[i, 1] = k + 1


@_jit
def _twice(ids, mk, ic):
    """Stamp this event's blocks; the index of the first one named twice, or -1."""
    ic[STAMP] += 1
    e = ic[STAMP]
    for j in range(ids.shape[0]):
        b = ids[j]
        if mk[b] == e:
            return j
        mk[b] = e
    return -1


@_jit
def arrived(w, t, now, S, I):
    """``PolicyRuntime.arrived`` at arrival ``t`` of a request with prompt
    hashes ``w`` (``(n, 4)`` int64 words), interned first (``I``: the
    arguments of :func:`intern` after ``kid``): the arrival hook (a table
    rebuild when due, the request's kind from its seen prefix, the prompt's
    hashes stamped), then expired scores re-scored (one score call when any
    is due). Returns 0, :data:`NEED_KEYS` (nothing applied) or :data:`BUG`."""
    (ip, fp, bucket, lo_int, rep, lo_f, gap_prior, pw, key_of, kh, kt, dn, dp, hs, par_of, depth_of, kr, sr, bsc, bq, fs,
     q, hist, never, vals, offs, pc, pf, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec, c) = S
    pk = np.empty(w.shape[0], np.int64)
    if not intern(w, pk, *I):
        return NEED_KEYS
    c[HOOK_CALLS] += 1
    pc[T] = t
    if t >= pc[NEXT_BUILD]:
        rs._build(hist, never, vals, offs, gap_prior, rep, lo_f, lo_int, ip, fp, pc, pf)
        per = ip[PERIOD]
        w = 1 + t // 4
        pc[NEXT_BUILD] = t + (per if per < w else w)
    seen = 0
    rb = ip[ROOT_BLOCKS]
    for j in range(pk.shape[0]):
        if seen > rb or kr[pk[j], REC] < 0:
            break
        seen += 1
    pc[KIND] = 2 if seen > rb else 1
    for j in range(pk.shape[0]):
        kr[pk[j], MARK] = t + 1
    if rs._expire(now, float(t), key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, ip, ib, ok,
                  cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec, c) < -1:
        return BUG
    return 0


@_jit
def hit(ids, H, mk, ic):
    """``spfcore_blocks_hit`` of blocks ``ids`` (depth order): hashes without
    a resident record get one, the others are re-accessed; free copies of
    their hashes get the new score inputs. Returns 0, ``-1 - j`` (``ids[j]``
    named twice or outside the pool), :data:`NO_KEY` (a block with no hash here) or
    :data:`NEED_SLOTS`; nothing applied but 0. ``H``: the arrays :data:`HIT` names."""
    key_of, depth_of, kh, dn, dp, kr, sr, fs, hist, bucket, ip, pc, ib, bsc, c = H
    n = ids.shape[0]
    m = 0
    for j in range(n):
        if ids[j] < 0 or ids[j] >= key_of.shape[0]:
            return -1 - j
        k = key_of[ids[j]]
        if k < 0:
            return NO_KEY
        s = kr[k, REC]
        if not (s >= 0 and sr[s, STATE] == 1):
            m += 1
    j = _twice(ids, mk, ic)
    if j >= 0:
        return -1 - j
    if pc[SLOTS_FREE] < m + 1:
        return NEED_SLOTS
    c[HOOK_CALLS] += 1
    rs._hit(ids, n, pc[T], key_of, depth_of, kr, sr, fs, hist, bucket, ip, pc)
    rs._refresh(ids, 0, n, key_of, kh, dn, dp, kr, sr, ib, bsc)
    return 0


@_jit
def touch(ids, O, mk, ic):
    """Hit blocks that were free leave the order and the calendar. Returns 0
    or ``-1 - j`` (``ids[j]`` not a free cached block, named twice or
    outside the pool; nothing applied). ``O``: the arrays :data:`TOUCH` names."""
    ib, ok, cmb, cmk, cmo, qe, qb, ec, _ = O
    for j in range(ids.shape[0]):
        if ids[j] < 0 or ids[j] >= ib.shape[1] or not ib[ev.IN, ids[j]]:
            return -1 - j
    j = _twice(ids, mk, ic)
    if j >= 0:
        return -1 - j
    for j in range(ids.shape[0]):
        b = ids[j]
        ib[ev.IN, b] = 0
        ec[ev.LIVE] -= 1
        rs._o_remove(b, cmb, cmk, cmo, ok, ib)
        rs._c_unlink(b, qe, qb)
    return 0


@_jit
def stored(ids, w, has_parent, depth0, D, mk, I):
    """``PolicyRuntime.stored``: blocks ``ids`` cached with hashes ``w``
    (``(n, 4)`` int64 words; ``has_parent``: the first row is the first
    block's parent hash, else it has none), interned here (``I``: the
    arguments of :func:`intern` after ``kid``, its ``ic`` the event stamp's),
    at depths ``depth0 ..``; one stored call. ``D``: the arrays :data:`STORED`
    names. Returns 0, ``-1 - j`` (``ids[j]`` holds a hash already, named
    twice or outside the pool), :data:`NEED_SLOTS` or :data:`NEED_KEYS`;
    nothing applied but 0."""
    key_of, kh, kt, dn, dp, par_of, depth_of, kr, sr, bsc, ib, fs, hist, never, pw, bucket, ip, pc, c = D
    ic = I[3]
    n = ids.shape[0]
    for j in range(n):
        if ids[j] < 0 or ids[j] >= key_of.shape[0] or key_of[ids[j]] >= 0:
            return -1 - j
    j = _twice(ids, mk, ic)
    if j >= 0:
        return -1 - j
    if pc[SLOTS_FREE] < n + 1:
        return NEED_SLOTS
    kid = np.empty(w.shape[0], np.int64)
    if not intern(w, kid, *I):
        return NEED_KEYS
    parent = kid[0] if has_parent else -1
    rs._stored(ids, 0, n, depth0, parent, kid, 1 if has_parent else 0, pc[T], key_of, kh, kt, dn, dp, par_of, depth_of,
               kr, sr, bsc, ib, fs, hist, never, pw, bucket, ip, pc, c)
    return 0


@_jit
def release(cached, hashless, R, hf, mk, ic):
    """``PolicyRuntime.release``: cached blocks (release order) scored in one
    call and placed with new release orders; then hashless blocks onto the
    stack, ``hashless[0]`` on top. Returns 0, ``-1 - j`` for ``cached[j]``
    (``j < len(cached)``) or ``hashless[j - len(cached)]`` that is free
    already, named twice, outside the pool, or (hashless) holds a hash; :data:`NO_KEY` (a
    cached block with no hash here), :data:`ORDERS` or :data:`BUG`; nothing
    applied but 0 (and :data:`BUG`). ``R``: the arrays :data:`RELEASE` names."""
    (key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, ip, pc, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai,
     qe, qb, ec, hs, c) = R
    nc, nb = cached.shape[0], key_of.shape[0]
    for j in range(nc):
        b = cached[j]
        if b < 0 or b >= nb or ib[ev.IN, b] or hf[b]:
            return -1 - j
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if b < 0 or b >= nb or ib[ev.IN, b] or hf[b] or key_of[b] >= 0:
            return -1 - nc - j
    j = _twice(cached, mk, ic)
    if j >= 0:
        return -1 - j
    e = ic[STAMP]  # (the same stamp on the hashless blocks: a block in both lists is caught too)
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if mk[b] == e:
            return -1 - nc - j
        mk[b] = e
    for j in range(nc):
        if key_of[cached[j]] < 0:
            return NO_KEY
    if nc:
        if c[ORDER] + nc >= rs.MAX_ORDER:
            return ORDERS
        c[HOOK_CALLS] += 1
        x, y = rs._score(cached, False, key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, pc[T], ip,
                         c)
        o = c[ORDER]
        c[ORDER] = o + nc
        if not rs._place(cached, x, y, np.arange(o + 1, o + 1 + nc), ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb,
                         ec):
            return BUG
    for j in range(hashless.shape[0] - 1, -1, -1):
        b = hashless[j]
        hs[c[HSN]] = b
        hf[b] = 1
        c[HSN] += 1
    return 0


@_jit
def renumber(O):
    """Release orders from 1 again, the free cached blocks' order kept (only
    their relative order is read: ties of value), their chunks' minima anew:
    for :func:`release` when orders reach :data:`~spfcore.sim._replay_spf_nb.MAX_ORDER`
    (the order packs them below it). O(blocks log blocks). ``O``: the arrays
    :data:`TOUCH` names."""
    ib, ok, cmb, cmk, cmo, _, _, _, c = O
    free = np.flatnonzero(ib[ev.IN])
    rank = np.argsort(ib[ev.ORD][free])
    for r in range(rank.shape[0]):
        ib[ev.ORD, free[rank[r]]] = r + 1
    c[ORDER] = rank.shape[0]
    for ch in range(cmb.shape[0]):
        rs._o_scan(ch, cmb, cmk, cmo, ok, ib)


@_jit
def evict(n, out, now, E, hf):
    """``PolicyRuntime.evict(n)`` into ``out[:n]``: expired scores re-scored
    first when cached blocks are taken; hashless blocks first (the stack's
    top), then the lowest ``(value, release order)``; one evicted call with
    the cached victims' hashes (records to ghosts, the ghost list trimmed);
    the victims leave the prefix cache. Returns 0, :data:`TOO_FEW` (nothing
    applied) or :data:`BUG`. ``E``: the arrays :data:`EVICT` names."""
    (key_of, kh, kt, dn, dp, hs, par_of, depth_of, kr, sr, bsc, bq, fs, q, never, vals, offs, bucket, ip, pc, pf, ib, ok,
     cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec, c) = E
    if n > c[HSN] + ec[ev.LIVE]:
        return TOO_FEW
    if not rs._alloc(n, out, 0, now, pc[T], key_of, kh, kt, dn, dp, hs, par_of, depth_of, kr, sr, bsc, bq, fs, q, never,
                     vals, offs, bucket, ip, pc, pf, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec, c,
                     np.empty(0, np.int64)):
        return BUG
    for j in range(n):
        hf[out[j]] = 0
    return 0
