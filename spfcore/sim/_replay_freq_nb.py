"""The sequential replay of the shipped ``frequency`` arm as one
numba-compiled loop over int arrays: the same model, the same decisions and
the same counts as :func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with ``spfcore_frequency.FrequencyPolicy``
(its hooks and the scored evictor's order, :mod:`spfcore.evictor`).

What it reproduces (the plugin, ``plugins/frequency``, and the runtime):

* **Counts** per key id, ``cnt[K]`` (0: the key is not in the plugin's
  ``count``): a hit adds 1 per hit block (``Counter.update``; a key absent
  from ``count``, whose duplicate block was evicted, starts again at 1); a
  store adds 1 to a counted key, else sets ``1 + ghost count`` and takes the
  key off the ghost list (one key at a time, in the batch's order, which is
  what the plugin's bulk paths amount to for a key twice in a batch).
* **Ghost list**: the plugin's insertion-ordered ``dict`` of evicted keys as
  a doubly linked list over key ids, ``gn[K]`` / ``gp[K]`` (int32; -1: end),
  head ``c[GHEAD]`` (least recently evicted), tail ``c[GTAIL]``, length
  ``c[GN]``, value ``gv[K]`` (0: not listed; ghost counts are >= 1). An
  evicted key leaves ``count`` (its first victim in an allocation; a
  duplicate's later victim finds it gone and leaves nothing) and, with room
  for ghosts (``ghost_cap = ghost_factor * num_blocks`` > 0), goes to the
  newest end with its count (re-eviction moves it there). After the
  allocation's victims (one ``spfcore_blocks_evicted`` call) the oldest
  entries leave until at most ``ghost_cap`` remain.
* **Order** (the scored evictor, :mod:`spfcore.evictor`): hashless free
  blocks first, most recently released on top (the stack ``hs``); then free
  cached blocks by ``(tier, value, release order)``, lowest first: tier 0
  (count < ``min_count``: not admitted) before tier 1, value = the count at
  release (fixed: a hit takes the block out of the order), release order one
  per cached block released, a finished request's deepest block first. One
  binary min-heap with lazy deletion over ``(ov, oo, ob, ox)`` (key ``tier *
  2**62 + count``, release order, block, release order again as the
  version): an entry is live iff its block is free (``inn``) and the entry's
  order is the block's (``ordr``). The key is total, so the victims are the
  evictor's. Counts must stay below ``2**62`` (they grow by at most one per
  block event).
* **Counters** (the runtime's): evictions and allocation calls as
  :mod:`spfcore.sim._replay_nb`, and hook calls: one ``spfcore_blocks_hit``
  per request (even with no hit), one ``spfcore_blocks_stored`` per store
  (the prompt's new full blocks if any, then each decode block), one
  ``spfcore_blocks_evicted`` per allocation that takes a cached block, and
  ``spfcore_admit_blocks`` + ``spfcore_score_blocks`` per release of cached
  blocks. ``spfcore_cache_configured`` is counted by the runtime's
  construction.

The pool (``key_of``, ``kh``/``kt``, ``dn``/``dp``, ``hs``) and its helpers
are :mod:`spfcore.sim._replay_nb`'s, and so are the heap helpers
(``_o_up``, ``_o_pop``, ``_compact``). numba's on-disk cache keys a kernel
by its own file only: after editing those helpers in ``_replay_nb.py``,
touch this file (or clear its ``__pycache__``) so its kernel is compiled
again.
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.sim._replay_nb import (EVICT_CALLS, HSN, LRUN, _compact, _insert, _lookup, _o_pop, _o_up, _retire,
                                    init, warm_trace)

#: More counter indices (frequency; after ``_replay_nb``'s first five): hook
#: calls, order-heap entries, release orders handed out, ghost entries,
#: ghost head and tail key ids (-1: empty), and the block a lookup found
#: twice (see :func:`replay_frequency`).
HOOK_CALLS, HN, ORDER, GN, GHEAD, GTAIL, TWICE = range(5, 12)
NCOUNTERS_F = 12
TIER1 = 2**62  # heap key of an admitted block: TIER1 + count (a non-admitted one: its count)

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _g_unlink(k, gn, gp, c):
    """Key id ``k`` leaves the ghost list (its value and ``c[GN]`` are the caller's)."""
    p, q = gp[k], gn[k]
    if p >= 0:
        gn[p] = q
    else:
        c[GHEAD] = q
    if q >= 0:
        gp[q] = p
    else:
        c[GTAIL] = p


@_jit
def _g_append(k, gn, gp, c):
    """Key id ``k`` (not listed) goes to the ghost list's newest end."""
    t = c[GTAIL]
    gp[k] = t
    gn[k] = -1
    if t >= 0:
        gn[t] = k
    else:
        c[GHEAD] = k
    c[GTAIL] = k


@_jit
def _stored(k, cnt, gv, gn, gp, c):
    """The plugin's store of key id ``k``: its count + 1, or 1 + its ghost
    count (the ghost entry leaves)."""
    if cnt[k] > 0:
        cnt[k] += 1
        return
    g = gv[k]
    if g > 0:
        _g_unlink(k, gn, gp, c)
        gv[k] = 0
        c[GN] -= 1
    cnt[k] = g + 1


@_jit
def _alloc_f(n, blocks, at, key_of, kh, kt, dn, dp, hs, inn, ordr, cnt, gv, gn, gp, ghost_cap,
             ov, oo, ob, ox, c, victims):
    """``PolicyRuntime.evict(n)``: ``n`` victims into ``blocks[at:]``, the
    top hashless block first, then the lowest live heap entry; each cached
    victim's key leaves ``count`` for the ghost list (one evicted-hook call
    per allocation with a cached victim), then the ghost list is trimmed."""
    c[EVICT_CALLS] += 1
    cached = False
    for j in range(n):
        if c[HSN] > 0:
            c[HSN] -= 1
            b = hs[c[HSN]]
        else:
            while True:
                b, x = ob[0], ox[0]
                c[HN] = _o_pop(ov, oo, ob, ox, c[HN])
                if inn[b] and x == ordr[b]:
                    break
            inn[b] = 0
            c[LRUN] -= 1
        k = key_of[b]
        if k >= 0:
            cached = True
            v = cnt[k]
            if v > 0:  # (a duplicate's second victim: the count left with the first)
                cnt[k] = 0
                if ghost_cap > 0:
                    if gv[k] > 0:
                        _g_unlink(k, gn, gp, c)
                    else:
                        c[GN] += 1
                    _g_append(k, gn, gp, c)
                    gv[k] = v
        blocks[at + j] = _retire(b, key_of, kh, kt, dn, dp, c, victims)
    if cached:
        c[HOOK_CALLS] += 1
        while c[GN] > ghost_cap:  # the least recently evicted leave
            k = c[GHEAD]
            _g_unlink(k, gn, gp, c)
            gv[k] = 0
            c[GN] -= 1


@_jit
def replay_frequency(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, min_count, ghost_cap,
                     key_of, kh, kt, dn, dp, hs, inn, ordr, cnt, gv, gn, gp, ov, oo, ob, ox, c,
                     blocks, hits, victims):
    """:func:`spfcore.sim._replay_nb.replay` for ``frequency``
    (``min_count`` >= 1, ``ghost_cap`` = ``ghost_factor * num_blocks`` >= 0
    entries): replay requests ``r = 0 .. len(n_prompt)-1`` in order (the
    request arrays as there; per-block state ``inn``, ``ordr`` int64
    ``[num_blocks]``; per key id ``cnt``, ``gv`` int64 and ``gn``, ``gp``
    int32 ``[K]``; the heap arrays ``ov, oo, ob, ox`` int64, more than
    ``num_blocks`` entries each; ``c``: ``NCOUNTERS_F`` int64 counters).
    Writes ``hits[r]``; appends every victim to ``victims`` unless it is
    empty; ``blocks``: scratch of at least ``max(n_total)`` entries.

    Returns:
        -1; or ``r >= 0``, the index of a request that needs more blocks
        than are free (nothing of it replayed); or ``-2 - r``: request
        ``r``'s lookup found block ``c[TWICE]`` twice (a prompt whose block
        keys repeat: the reference loop's ``touch`` raises ``KeyError`` there,
        after the hit hook; the state is left as then).
    """
    for r in range(len(n_prompt)):
        f0 = bk_off[r]
        nf = nf_[r]
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        np_, nt = n_prompt[r], n_total[r]
        if nt > c[HSN] + c[LRUN]:
            return r
        c[HOOK_CALLS] += 1  # spfcore_blocks_hit (every request)
        for j in range(h):  # +1 per hit block
            cnt[bk[f0 + j]] += 1
        for j in range(h):  # touch: it leaves the order
            b = blocks[j]
            if not inn[b]:
                c[TWICE] = b
                return -2 - r
            inn[b] = 0
            c[LRUN] -= 1
        _alloc_f(np_ - h, blocks, h, key_of, kh, kt, dn, dp, hs, inn, ordr, cnt, gv, gn, gp, ghost_cap,
                 ov, oo, ob, ox, c, victims)
        if nf > h:
            c[HOOK_CALLS] += 1  # spfcore_blocks_stored (the new full prompt blocks)
        for j in range(h, nf):
            k = bk[f0 + j]
            _insert(blocks[j], k, key_of, kh, kt, dn, dp)
            _stored(k, cnt, gv, gn, gp, c)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            done, nf_all = nf, nf + nd
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    k = dk[d0 + done - nf]
                    _insert(blocks[done], k, key_of, kh, kt, dn, dp)
                    c[HOOK_CALLS] += 1  # spfcore_blocks_stored (one decode block)
                    _stored(k, cnt, gv, gn, gp, c)
                    done += 1
                if j < nt:
                    _alloc_f(1, blocks, nb_, key_of, kh, kt, dn, dp, hs, inn, ordr, cnt, gv, gn, gp, ghost_cap,
                             ov, oo, ob, ox, c, victims)
                    nb_ += 1
        # release, tail first: cached blocks admitted and scored by their count now (one admit and one
        # score call), each with a new release order; hashless ones on top of the stack
        cached = 0
        for j in range(nb_ - 1, -1, -1):
            b = blocks[j]
            k = key_of[b]
            if k >= 0:
                cached += 1
                c[ORDER] += 1
                o = c[ORDER]
                ordr[b] = o
                v = cnt[k] if cnt[k] > 0 else 1
                if c[HN] == len(ov):
                    c[HN] = _compact(ov, oo, ob, ox, c[HN], inn, ordr)
                n = c[HN]
                ov[n], oo[n], ob[n], ox[n] = (v + TIER1 if v >= min_count else v), o, b, o
                c[HN] = n + 1
                _o_up(ov, oo, ob, ox, n)
                inn[b] = 1
                c[LRUN] += 1
        if cached:
            c[HOOK_CALLS] += 2
        for j in range(nb_):
            b = blocks[j]
            if key_of[b] < 0:
                hs[c[HSN]] = b
                c[HSN] += 1
        hits[r] = h
    return -1


def state(num_blocks: int, nkeys: int) -> tuple:
    """A fresh pool and policy state for :func:`replay_frequency` of
    ``num_blocks`` blocks (null block included) and ``nkeys`` key ids:
    ``(key_of, kh, kt, dn, dp, hs, inn, ordr, cnt, gv, gn, gp, ov, oo, ob,
    ox, c)``; every usable block hashless and free (``_replay_nb.init``),
    empty ghost list and heap (``2 * num_blocks + 1024`` entries)."""
    i64, i32 = np.int64, np.int32
    key_of, dn, dp = (np.full(num_blocks, -1, i64) for _ in range(3))
    hs, inn, ordr = (np.zeros(num_blocks, i64) for _ in range(3))
    kh, kt, gn, gp = (np.full(nkeys, -1, i32) for _ in range(4))
    cnt, gv = np.zeros(nkeys, i64), np.zeros(nkeys, i64)
    cap = 2 * num_blocks + 1024
    heap = tuple(np.zeros(cap, i64) for _ in range(4))
    c = np.zeros(NCOUNTERS_F, i64)
    c[GHEAD] = c[GTAIL] = -1
    init(num_blocks, np.zeros(num_blocks, i64), np.zeros(num_blocks, i64), hs, c)
    return (key_of, kh, kt, dn, dp, hs, inn, ordr, cnt, gv, gn, gp, *heap, c)


def warm() -> None:
    """Call the kernel once on a tiny replay with the argument types the
    simulator uses: compiles it (or loads numba's on-disk cache) now."""
    i64 = np.int64
    trace, _ = warm_trace()
    nb = 8
    replay_frequency(*trace, 2, 8, *state(nb, 4), np.empty(nb, i64), np.empty(2, i64), np.empty(8, i64))
