"""The vLLM adapter's free-queue mirror as numba kernels, for
:class:`spfcore.engine.vllm_adapter.PolicyFreeQueue`: one call per queue
operation over two arrays indexed by block id, instead of a Python item
write per block.

* ``order`` int64 ``[num_blocks]``: a free block's place in the order vLLM's
  own ``FreeKVCacheBlockQueue`` would hold it (release stamps; prepended
  blocks count down from -1, appended ones up), :data:`NOT_FREE` for a block
  that is not free (a numpy view of the queue's ``array.array``, which
  :meth:`~spfcore.engine.vllm_adapter.PolicyFreeQueue.remove` and calls of
  fewer than ``BULK_BLOCKS`` blocks write one item at a time).

Between engine steps the model's work leaves the CPU caches cold, so the
cost that matters is the call count and the memory touched: each kernel is
one call over the ids, into the one array.
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)
#: The stamp of a block that is not free (int64's least value; stamps never reach it).
NOT_FREE = -(2**63)


@_jit
def take(order, ids, old):
    """An allocation's victims ``ids`` (int64 ``[n]``) leave the free set
    (their stamps become :data:`NOT_FREE`; ``old``, int64 ``[>= n]``, is
    scratch).

    Returns 0, or ``-1 - j`` when ``ids[j]`` is out of ``[0, len(order))``,
    not free, or named earlier in ``ids``; then nothing is applied (the
    stamps cleared before ``j`` are put back).
    """
    nb = order.shape[0]
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < 0 or i >= nb or order[i] == NOT_FREE:
            for k in range(j):
                order[ids[k]] = old[k]
            return -1 - j
        old[j] = order[i]
        order[i] = NOT_FREE
    return 0


@_jit
def put(order, ids, first):
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
        order[i] = first + j
    return hashless


def warm() -> None:
    """Compile both kernels (or load numba's on-disk cache) with the
    argument types the queue passes."""
    order = np.full(4, NOT_FREE, np.int64)
    put(order, np.array([1, ~2], np.int64), 0)
    take(order, np.array([1, 2], np.int64), np.empty(4, np.int64))
