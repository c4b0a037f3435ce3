"""The shipped ``frequency`` arm's engine events as numba kernels over int
arrays, for :class:`spfcore.engine.compiled.FrequencyKernelRuntime`: the
same decisions as a :class:`~spfcore.runtime.PolicyRuntime` driving
``spfcore_frequency.FrequencyPolicy`` (its hooks and the scored evictor's
order), one kernel call per runtime event instead of Python hooks over
dicts of 256-bit keys.

The policy's model is :mod:`spfcore.sim._replay_freq_nb`'s (the simulator's
compiled replay of the same class), and so are its helpers: the store of a
key (``_stored``), the ghost list (``_g_unlink``, ``_g_append``) and the
order heap (:mod:`spfcore.sim._replay_nb`'s ``_o_up``, ``_o_pop``,
``_compact``). What the engine adds is that vLLM owns the pool and the
prefix-cache map, so the kernels keep only the policy's state and the
eviction order, and that keys are vLLM's block hashes, interned here:

* **Key table**: vLLM's 32-byte block hash as four int64 words, interned to a
  dense key id by an open-addressing table ``T[S]`` (key id, -1 empty; ``S`` a
  power of two at least twice the key ids; linear probing from the first
  word, which sha256 makes uniform; backward-shift deletion, no tombstones),
  the words of key id ``k`` in ``kw[k]``. Every 256 bits are compared:
  exactly the keys ``int.from_bytes`` gives the hook path.
* **Key ids** are reused: id ``k`` is freed (its table slot deleted, pushed on
  the stack ``fk``) once no cached block holds it (``nblk[k] == 0``), it has
  no count (``cnt[k] == 0``) and no ghost count (``gv[k] == 0``). So at most
  ``2 * num_blocks + ghost_cap + 64`` ids are live: the cached blocks' keys,
  the ghost list (bounded after each allocation) and one allocation's
  victims before the trim.
* **Per block** (``nb = num_blocks``): ``key_of[nb]`` (key id, -1 hashless
  or held without one), ``inn[nb]`` (free and cached: in the order heap),
  ``hfree[nb]`` (free and hashless: on the stack ``hs``), ``ordr[nb]``
  (release order, the live heap entry's version).
* ``c``: int64 counters, :mod:`spfcore.sim._replay_freq_nb`'s indices and
  ``NFREE`` (free key ids on ``fk``).

Kernels return 0, or a negative number naming the block that breaks the
event protocol (the caller raises; nothing of the event is applied). numba's
on-disk cache keys a kernel by its own file: after editing the helpers in
``spfcore/sim/_replay_freq_nb.py`` or ``_replay_nb.py``, touch this file.
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.sim._replay_freq_nb import (GHEAD, GN, GTAIL, HN, HOOK_CALLS, NCOUNTERS_F, ORDER, TIER1, _g_append,
                                         _g_unlink, _stored)
from spfcore.sim._replay_nb import EVICT_CALLS, EVICTIONS, HSN, LRUN, _compact, _o_pop, _o_up

#: Counter index beyond :mod:`spfcore.sim._replay_freq_nb`'s: free key ids on the stack ``fk``.
NFREE = NCOUNTERS_F
NCOUNTERS = NCOUNTERS_F + 1

#: :func:`evict`'s answer when fewer than ``n`` blocks are free.
E_TOO_FEW = -1

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _find(T, mask, kw, w, j):
    """Slot of the key in row ``j`` of ``w`` (four int64 words): ``>= 0`` where
    ``T`` holds it, else ``-1 - slot`` of the empty slot it would take."""
    w0, w1, w2, w3 = w[j, 0], w[j, 1], w[j, 2], w[j, 3]
    i = w0 & mask
    while True:
        k = T[i]
        if k < 0:
            return -1 - i
        if kw[k, 0] == w0 and kw[k, 1] == w1 and kw[k, 2] == w2 and kw[k, 3] == w3:
            return i
        i = (i + 1) & mask


@_jit
def _unintern(k, T, mask, kw, fk, c):
    """Key id ``k`` leaves the table (backward-shift deletion) and goes back
    on the free stack."""
    i = kw[k, 0] & mask
    while T[i] != k:
        i = (i + 1) & mask
    T[i] = -1
    j = i
    while True:
        j = (j + 1) & mask
        q = T[j]
        if q < 0:
            break
        home = kw[q, 0] & mask
        if (j > i and (home <= i or home > j)) or (j < i and home <= i and home > j):
            T[i] = q
            T[j] = -1
            i = j
    fk[c[NFREE]] = k
    c[NFREE] += 1


@_jit
def _maybe_free(k, nblk, cnt, gv, T, mask, kw, fk, c):
    if nblk[k] == 0 and cnt[k] == 0 and gv[k] == 0:
        _unintern(k, T, mask, kw, fk, c)


@_jit
def touch(ids, inn, c):
    """Hit blocks that were free leave the order (ref count 0 -> 1).
    Returns 0, or ``-1 - j`` for ``ids[j]`` not a free cached block (nothing
    applied)."""
    for j in range(ids.shape[0]):
        if not inn[ids[j]]:
            return -1 - j
    for j in range(ids.shape[0]):
        inn[ids[j]] = 0
    c[LRUN] -= ids.shape[0]
    return 0


@_jit
def hit(ids, key_of, cnt, c):
    """``spfcore_blocks_hit``: +1 to each hit block's key (a key whose count
    left with an evicted duplicate starts again at 1). Returns 0, or ``-1 - j``
    for hit block ``ids[j]`` holding no key (nothing applied)."""
    for j in range(ids.shape[0]):
        if key_of[ids[j]] < 0:
            return -1 - j
    for j in range(ids.shape[0]):
        cnt[key_of[ids[j]]] += 1
    c[HOOK_CALLS] += 1
    return 0


@_jit
def stored(ids, w, key_of, nblk, kw, T, mask, fk, cnt, gv, gn, gp, c):
    """``spfcore_blocks_stored``: blocks ``ids`` cached with keys ``w`` (one
    row of four words each), in order: each key interned (a new key id from
    ``fk``), then its count + 1, or 1 + its ghost count (it leaves the ghost
    list). Returns 0, or ``-1 - j`` for block ``ids[j]`` holding a key
    already (nothing applied)."""
    for j in range(ids.shape[0]):
        if key_of[ids[j]] >= 0:
            return -1 - j
    for j in range(ids.shape[0]):
        i = _find(T, mask, kw, w, j)
        if i >= 0:
            k = T[i]
        else:
            c[NFREE] -= 1
            k = fk[c[NFREE]]
            T[-1 - i] = k
            kw[k, 0], kw[k, 1], kw[k, 2], kw[k, 3] = w[j, 0], w[j, 1], w[j, 2], w[j, 3]
            cnt[k] = gv[k] = nblk[k] = 0
        key_of[ids[j]] = k
        nblk[k] += 1
        _stored(k, cnt, gv, gn, gp, c)
    if ids.shape[0]:
        c[HOOK_CALLS] += 1
    return 0


@_jit
def evict(n, out, key_of, nblk, hs, hfree, inn, ordr, cnt, gv, gn, gp, ghost_cap, ov, oo, ob, ox,
          kw, T, mask, fk, c):
    """``PolicyRuntime.evict(n)``: ``n`` victims into ``out[:n]``, the top
    hashless block first, then the lowest live heap entry (``(tier * 2**62 +
    count, release order)``); each cached victim's key leaves ``count`` for
    the ghost list (its first victim in the call; a duplicate's later victim
    finds it gone) and its block; after a call with a cached victim the
    ghost list is trimmed to ``ghost_cap`` (one ``spfcore_blocks_evicted``
    call). Key ids left with nothing are freed. Returns 0, or
    ``E_TOO_FEW`` (nothing taken)."""
    if n > c[HSN] + c[LRUN]:
        return E_TOO_FEW
    c[EVICT_CALLS] += 1
    cached = False
    for j in range(n):
        if c[HSN] > 0:
            c[HSN] -= 1
            b = hs[c[HSN]]
            hfree[b] = 0
        else:
            while True:
                b, x = ob[0], ox[0]
                c[HN] = _o_pop(ov, oo, ob, ox, c[HN])
                if inn[b] and x == ordr[b]:
                    break
            inn[b] = 0
            c[LRUN] -= 1
        out[j] = b
        k = key_of[b]
        if k < 0:
            continue
        key_of[b] = -1
        nblk[k] -= 1
        cached = True
        c[EVICTIONS] += 1
        v = cnt[k]
        if v > 0:
            cnt[k] = 0
            if ghost_cap > 0:
                if gv[k] > 0:
                    _g_unlink(k, gn, gp, c)
                else:
                    c[GN] += 1
                _g_append(k, gn, gp, c)
                gv[k] = v
        _maybe_free(k, nblk, cnt, gv, T, mask, kw, fk, c)
    if cached:
        c[HOOK_CALLS] += 1
        while c[GN] > ghost_cap:  # the least recently evicted leave
            k = c[GHEAD]
            _g_unlink(k, gn, gp, c)
            gv[k] = 0
            c[GN] -= 1
            _maybe_free(k, nblk, cnt, gv, T, mask, kw, fk, c)
    return 0


@_jit
def release(cached, hashless, key_of, hs, hfree, inn, ordr, cnt, min_count, ov, oo, ob, ox, c):
    """``PolicyRuntime.release``: cached blocks (release order) admitted and
    scored by their key's count (1 if it has none; ``spfcore_admit_blocks``
    and ``spfcore_score_blocks``), each into the heap with a new release
    order; then hashless blocks onto the stack, ``hashless[0]`` on top.
    Returns 0, or ``-1 - j`` for ``cached[j]`` (``j < len(cached)``) or
    ``hashless[j - len(cached)]`` that is free already or (cached) holds no
    key: nothing applied."""
    nc = cached.shape[0]
    for j in range(nc):
        b = cached[j]
        if inn[b] or hfree[b] or key_of[b] < 0:
            return -1 - j
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if inn[b] or hfree[b]:
            return -1 - nc - j
    for j in range(nc):
        b = cached[j]
        v = cnt[key_of[b]]
        if v <= 0:
            v = 1
        c[ORDER] += 1
        o = c[ORDER]
        ordr[b] = o
        if c[HN] == ov.shape[0]:
            c[HN] = _compact(ov, oo, ob, ox, c[HN], inn, ordr)
        m = c[HN]
        ov[m], oo[m], ob[m], ox[m] = (v + TIER1 if v >= min_count else v), o, b, o
        c[HN] = m + 1
        _o_up(ov, oo, ob, ox, m)
        inn[b] = 1
        c[LRUN] += 1
    if nc:
        c[HOOK_CALLS] += 2
    for j in range(hashless.shape[0] - 1, -1, -1):
        b = hashless[j]
        hs[c[HSN]] = b
        hfree[b] = 1
        c[HSN] += 1
    return 0


def new_state(num_blocks: int, min_count: int, ghost_cap: int) -> dict:
    """A fresh state for ``num_blocks`` blocks: nothing free (the driver
    releases the free blocks first), no key, an empty ghost list.

    Returns:
        ``{name: array}`` of the kernels' arguments (names as there),
        ``min_count`` and ``ghost_cap`` as ints, ``mask`` the table's
        (``S - 1``).
    """
    i64, i32 = np.int64, np.int32
    nk = 2 * num_blocks + ghost_cap + 64
    s = 1
    while s < 2 * nk:
        s *= 2
    cap = 2 * num_blocks + 1024
    c = np.zeros(NCOUNTERS, i64)
    c[GHEAD] = c[GTAIL] = -1
    c[NFREE] = nk
    return {"key_of": np.full(num_blocks, -1, i64), "nblk": np.zeros(nk, i64), "kw": np.zeros((nk, 4), i64),
            "T": np.full(s, -1, i64), "mask": s - 1, "fk": np.arange(nk - 1, -1, -1, dtype=i64),
            "cnt": np.zeros(nk, i64), "gv": np.zeros(nk, i64), "gn": np.full(nk, -1, i32), "gp": np.full(nk, -1, i32),
            "hs": np.zeros(num_blocks, i64), "hfree": np.zeros(num_blocks, np.uint8),
            "inn": np.zeros(num_blocks, i64), "ordr": np.zeros(num_blocks, i64),
            "ov": np.zeros(cap, i64), "oo": np.zeros(cap, i64), "ob": np.zeros(cap, i64), "ox": np.zeros(cap, i64),
            "out": np.zeros(num_blocks, i64), "c": c, "min_count": min_count, "ghost_cap": ghost_cap}


def warm() -> None:
    """Compile every kernel (or load numba's on-disk cache) on a tiny state."""
    s = new_state(4, 2, 4)
    i64 = np.int64
    ids = np.array([1, 2], i64)
    w = np.frombuffer(np.arange(8, dtype=i64).tobytes(), i64).reshape(2, 4)  # read-only, as the hashes come
    release(np.zeros(0, i64), ids, s["key_of"], s["hs"], s["hfree"], s["inn"], s["ordr"], s["cnt"], 2,
            s["ov"], s["oo"], s["ob"], s["ox"], s["c"])
    evict(2, s["out"], s["key_of"], s["nblk"], s["hs"], s["hfree"], s["inn"], s["ordr"], s["cnt"], s["gv"], s["gn"],
          s["gp"], 4, s["ov"], s["oo"], s["ob"], s["ox"], s["kw"], s["T"], s["mask"], s["fk"], s["c"])
    stored(ids, w, s["key_of"], s["nblk"], s["kw"], s["T"], s["mask"], s["fk"], s["cnt"], s["gv"], s["gn"], s["gp"],
           s["c"])
    hit(ids, s["key_of"], s["cnt"], s["c"])
    touch(np.zeros(0, i64), s["inn"], s["c"])
