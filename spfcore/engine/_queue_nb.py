"""The vLLM adapter's free-queue mirror as numba kernels, for
:class:`spfcore.engine.vllm_adapter.PolicyFreeQueue`: one call per queue
operation over two arrays indexed by block id, instead of a Python item
write per block.

* ``fv`` uint8 ``[num_blocks]``: 1 while the block is free (the policy in
  charge), else 0 (a numpy view of the queue's ``bytearray``, which
  :meth:`~spfcore.engine.vllm_adapter.PolicyFreeQueue.remove` writes one
  item at a time).
* ``order`` int64 ``[num_blocks]``: a free block's place in the order vLLM's
  own ``FreeKVCacheBlockQueue`` would hold it (release stamps; prepended
  blocks count down from -1, appended ones up).

Between engine steps the model's work leaves the CPU caches cold, so the
cost that matters is the call count and the lines touched: each kernel is
one call over the ids, ``fv`` is 1 byte a block (3.5 KB for the seed's
pool).
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


@_jit
def take(fv, ids):
    """An allocation's victims ``ids`` (int64 ``[n]``) leave the free set.

    Returns 0, or ``-1 - j`` when ``ids[j]`` is out of ``[0, len(fv))``,
    not free, or named earlier in ``ids``; then nothing is applied (the
    flags cleared before ``j`` are set again: each was free).
    """
    nb = fv.shape[0]
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < 0 or i >= nb or fv[i] == 0:
            for k in range(j):
                fv[ids[k]] = 1
            return -1 - j
        fv[i] = 0
    return 0


@_jit
def put(fv, order, ids, first):
    """Blocks ``ids`` (int64 ``[n]``; ``~id`` for a hashless block, which is
    turned into its id in place) become free with release stamps ``first``,
    ``first + 1``, ... in ``ids`` order. Returns the number of hashless
    (negative) entries. Ids must be of the pool (the caller's blocks are)."""
    hashless = 0
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < 0:
            i = ~i
            ids[j] = i
            hashless += 1
        fv[i] = 1
        order[i] = first + j
    return hashless


def warm() -> None:
    """Compile both kernels (or load numba's on-disk cache) with the
    argument types the queue passes."""
    fv = np.zeros(4, np.uint8)
    order = np.zeros(4, np.int64)
    put(fv, order, np.array([1, ~2], np.int64), 0)
    take(fv, np.array([1, 2], np.int64))
