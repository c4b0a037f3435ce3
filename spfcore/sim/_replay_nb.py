"""The sequential replay of the ``lru`` arm as one numba-compiled loop over
int arrays: the same model, the same decisions and the same counts as
:func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` whose policy implements no hook
(vLLM's own free-queue order), about 20x faster.

Imported by the simulator on the first compiled replay only (vLLM's CPU
build scans every loaded module when it starts and trips over llvmlite's
ffi if numba is loaded before that; see :mod:`spfcore.evictor`).

Block keys are interned to dense ids ``>= 0`` by the caller. State (owned
by :class:`spfcore.sim.simulator._LruState`, passed in on every call; ``nb``
= ``num_blocks``, ``K`` = key-id capacity):

* ``key_of[nb]``: the key id a block holds, -1 none (hashless or evicted).
* Per key id, the cached blocks holding it in insertion order, a doubly
  linked list (vLLM's ``BlockHashToBlockMap`` keeps duplicates; a lookup
  takes the earliest inserted): ``kh[K]`` head, ``kt[K]`` tail (-1: no
  block), ``dn[nb]`` / ``dp[nb]`` next / previous block of the same key.
* vLLM's free queue of cached blocks: a doubly linked list ``ln[nb]`` /
  ``lp[nb]`` with block 0 (the null block, never free) as its sentinel:
  ``ln[0]`` is the least recently released block (the next victim),
  ``lp[0]`` the most recent.
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
def _take(key_of, kh, kt, dn, dp, ln, lp, hs, c, victims):
    """One victim: the top hashless block, else the free queue's head; its
    key (if any) leaves the prefix cache."""
    if c[HSN] > 0:
        c[HSN] -= 1
        b = hs[c[HSN]]
    else:
        b = ln[0]
        q = ln[b]
        ln[0] = q
        lp[q] = 0
        c[LRUN] -= 1
    if key_of[b] >= 0:
        c[EVICTIONS] += 1
        _drop(b, key_of, kh, kt, dn, dp)
    if len(victims):
        victims[c[NVICT]] = b
        c[NVICT] += 1
    return b


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
def replay(fk, fk_off, n_look, dk, dk_off, n_prompt, n_total,
           key_of, kh, kt, dn, dp, ln, lp, hs, c, blocks, hits, victims):
    """Replay requests ``r = 0 .. len(n_prompt)-1`` in order.

    Request ``r``: full prompt block keys ``fk[fk_off[r]:fk_off[r+1]]``, of
    which the first ``n_look[r]`` may hit; decode keys
    ``dk[dk_off[r]:dk_off[r+1]]``; ``n_prompt[r]`` / ``n_total[r]`` blocks
    held after prefill / at the end. Writes ``hits[r]`` (hit blocks);
    appends every victim to ``victims`` unless it is empty. ``blocks``:
    scratch of at least ``max(n_total)`` entries.

    Returns:
        -1, or the index of a request that needs more blocks than are free
        (nothing of it replayed).
    """
    for r in range(len(n_prompt)):
        f0 = fk_off[r]
        nf = fk_off[r + 1] - f0
        # lookup: the longest cached chain (earliest inserted block per key)
        h = 0
        while h < n_look[r]:
            b = kh[fk[f0 + h]]
            if b < 0:
                break
            blocks[h] = b
            h += 1
        np_, nt = n_prompt[r], n_total[r]
        if nt > c[HSN] + c[LRUN]:  # needs nt - h blocks; h of the free ones are its hits
            return r
        for j in range(h):  # touch: hit blocks leave the free queue
            b = blocks[j]
            p, q = lp[b], ln[b]
            ln[p] = q
            lp[q] = p
            c[LRUN] -= 1
        c[EVICT_CALLS] += 1
        for j in range(h, np_):
            blocks[j] = _take(key_of, kh, kt, dn, dp, ln, lp, hs, c, victims)
        for j in range(h, nf):  # newly computed full prompt blocks
            _insert(blocks[j], fk[f0 + j], key_of, kh, kt, dn, dp)
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


def warm() -> None:
    """Call every kernel once on a tiny replay with the argument types the
    simulator uses: compiles them (or loads numba's on-disk cache) now."""
    nb, i64 = 8, np.int64
    key_of, dn, dp, ln, lp, hs = (np.full(nb, -1, i64) for _ in range(6))
    kh, kt = np.full(4, -1, i64), np.full(4, -1, i64)
    c = np.zeros(NCOUNTERS, i64)
    init(nb, ln, lp, hs, c)
    fk = np.array([0, 1, 0, 1, 2], i64)
    a = np.array
    replay(fk, a([0, 2, 5], i64), a([1, 2], i64), a([3], i64), a([0, 1, 1], i64), a([2, 3], i64),
           a([3, 3], i64), key_of, kh, kt, dn, dp, ln, lp, hs, c, np.empty(nb, i64), np.empty(2, i64),
           np.empty(8, i64))
