"""Block hashes (keys) shared by the simulator and the vLLM adapter.

A key identifies a full block *and* every block before it, like vLLM's
chained block hash: ``key[i] = hash((key[i-1], content_i))`` with
``key[-1] = None``. Content is a tuple of token ids (engine, synthetic
workloads) or a trace's block id (Mooncake ``hash_ids``). Python's ``hash`` of
ints, ``None`` and tuples of them does not depend on PYTHONHASHSEED, so keys
are identical in every process.
"""

from __future__ import annotations

from collections.abc import Sequence


def chain_keys(token_ids: Sequence[int], block_size: int, parent: int | None = None) -> list[int]:
    """Keys of the full blocks of ``token_ids``.

    Args:
        token_ids: Prompt (or prompt + output) tokens.
        block_size: Tokens per block (> 0).
        parent: Key of the block before ``token_ids[0]``, ``None`` at depth 0.

    Returns:
        ``len(token_ids) // block_size`` ints, in chain order.

    Raises:
        ValueError: if ``block_size`` <= 0.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    keys: list[int] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start : start + block_size])))
        keys.append(parent)
    return keys


def chain_keys_from_ids(block_ids: Sequence[int], parent: int | None = None) -> list[int]:
    """Keys of a chain whose blocks are named by ids (Mooncake ``hash_ids``).

    Equal id sequences give equal keys; the same id after a different prefix
    gives a different key, as in vLLM.
    """
    keys: list[int] = []
    for b in block_ids:
        parent = hash((parent, b))
        keys.append(parent)
    return keys
