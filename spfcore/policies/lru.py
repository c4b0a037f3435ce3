"""The ``lru`` arm: vLLM's own prefix-cache order."""

from __future__ import annotations

import attrs


@attrs.frozen
class LRUParams:
    """LRU has no parameters."""


class LRUPolicy:
    """vLLM's order: the least recently released block is evicted first; a
    finished request's blocks are released tail first (deepest block first).

    It implements no decision hook: the evictor's default order *is* vLLM's
    free queue order (O(1) per operation), which makes this arm the floor
    every other arm is compared to.
    """

    name = "lru"
    contract = "1.0"  # the spfcore contract version this policy is written for
    capabilities = frozenset()
    Params = LRUParams

    def __init__(self, params: LRUParams | None = None) -> None:
        self.params = params or LRUParams()
