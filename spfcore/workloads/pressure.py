"""Cache pressure: how much reusable prefix a workload has per cache slot.

Cache pressure = reusable prefix tokens / KV-cache capacity in tokens
(docs/design.md §4). Reusable prefix tokens = ``block_size`` x the number of
distinct block hashes that occur in the prompts of at least two requests
(only full blocks; a request counts once per block hash). At pressure 1 every
reusable block fits; at 2.3 (the SPF seed run) 1/2.3 of them do.

``num_blocks`` here is vLLM's ``num_gpu_blocks`` *including* the null block
(``num_gpu_blocks_override``): usable capacity is ``num_blocks - 1``, in the
simulator exactly as in the engine.
"""

from __future__ import annotations

import math
from collections import Counter

from spfcore.workloads.model import Workload, block_keys


def reusable_prefix_tokens(workload: Workload, block_size: int) -> int:
    """``block_size`` x number of distinct block hashes occurring in >= 2
    requests' prompts, in tokens.

    Raises:
        ValueError: bad ``block_size``, or a request whose keys cannot be
            computed at this block size (see :func:`spfcore.workloads.block_keys`).
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    seen: Counter = Counter()
    for r in workload.requests:
        seen.update(set(block_keys(r, block_size)))
    return block_size * sum(1 for c in seen.values() if c >= 2)


def num_blocks_for_pressure(workload: Workload, pressure: float, block_size: int) -> int:
    """Cache size (vLLM ``num_gpu_blocks``, null block included) that gives
    ``pressure``: ``floor(reusable_prefix_tokens / (pressure * block_size))``.

    Example: the SPF seed workload (16 personas x 8192 tokens) at block size
    16 and pressure 2.3 gives floor(131072 / 36.8) = 3561.

    Raises:
        ValueError: ``pressure <= 0``, a workload without reuse, or a result
            below 2 blocks (the null block plus one usable block).
    """
    if not pressure > 0:
        raise ValueError(f"cache pressure must be > 0, got {pressure}")
    reusable = reusable_prefix_tokens(workload, block_size)
    if reusable == 0:
        raise ValueError(f"workload {workload.name!r} has no reusable prefix at block size {block_size}: "
                         "cache pressure is undefined; give --num-blocks instead")
    n = math.floor(reusable / (pressure * block_size))
    if n < 2:
        raise ValueError(f"cache pressure {pressure} leaves {n} blocks for workload {workload.name!r} "
                         f"({reusable} reusable tokens at block size {block_size}); need >= 2")
    return n
