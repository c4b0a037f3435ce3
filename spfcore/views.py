"""Read-only views and value types exchanged between the core and policies.

Policies never see vLLM objects: the simulator and the vLLM adapter both
describe blocks and requests with these frozen attrs classes.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import attrs


@attrs.frozen(slots=True)
class BlockView:
    """One full KV-cache block, as a policy sees it.

    Attributes:
        key: The block hash: identifies the block's tokens *and* all of its
            ancestors (a chained hash, see :func:`spfcore.keys.chain_keys`).
            Equal keys mean an identical prefix up to and including this block.
        depth: 0-based position of the block in its chain (block 0 holds
            tokens ``[0, block_size)``).
        parent: Key of the block at ``depth - 1``; ``None`` for depth 0.
        num_tokens: Tokens held by the block (the block size).
        session_id: Session of the request that stored the block, or ``None``.
        request_id: Request that stored (computed) the block.
        access_count: Times the block was stored or hit (>= 1).
        last_access: ``now`` (seconds) of the last store or hit.
        stored_at: ``now`` (seconds) when the block was stored.
    """

    key: Hashable
    depth: int
    parent: Hashable | None
    num_tokens: int
    session_id: str | None
    request_id: str
    access_count: int
    last_access: float
    stored_at: float


@attrs.frozen(slots=True)
class RequestView:
    """One request, as a policy sees it.

    Attributes:
        request_id: Unique id within a run.
        session_id: Conversation/session id, or ``None`` if the workload has none.
        arrival_index: 0-based position in the run's arrival order; the
            deterministic clock that the simulator and the engine share.
        arrival_time: Arrival time, seconds (engine: monotonic clock; sim:
            the trace's virtual clock).
        num_prompt_tokens: Prompt length, tokens.
        block_keys: Block hashes of the prompt's *full* blocks, in chain
            order (length ``num_prompt_tokens // block_size``).
        prefix_group: Workload label of the shared prefix (e.g. persona id),
            or ``None``. Informational; policies must not need it.
    """

    request_id: str
    session_id: str | None
    arrival_index: int
    arrival_time: float
    num_prompt_tokens: int
    block_keys: tuple = ()
    prefix_group: str | None = None


@attrs.frozen(slots=True)
class Score:
    """A retention priority with optional expiry and pin.

    The evictor evicts the lowest ``(tier, value)`` first; tiers, lowest
    first: hashless blocks, blocks the policy did not admit, ordinary blocks,
    pinned blocks. Ties go to the block released first (vLLM's LRU order).

    Attributes:
        value: Retention priority; lower is evicted sooner. Unitless float.
        expires_at: ``now`` (seconds) after which the block is re-scored
            (``math.inf``: never).
        expires_at_arrival: Arrival index at (or after) which the block is
            re-scored (``2**62``: never). Use this clock when the simulator
            and the engine must make identical decisions.
        pinned: Ask to protect the block ahead of every unpinned block until
            it expires. The evictor refuses pins beyond its cap (a share of the
            pool) and evicts pinned blocks only when nothing else is left, so a
            policy can never wedge the pool. A pin must carry an expiry.
    """

    value: float
    expires_at: float = math.inf
    expires_at_arrival: int = 2**62
    pinned: bool = False

    def __attrs_post_init__(self) -> None:
        """Raises ValueError for a pin without an expiry (it could hold its block forever)."""
        if self.pinned and self.expires_at == math.inf and self.expires_at_arrival >= 2**62:
            raise ValueError("Score(pinned=True) needs an expiry (expires_at or expires_at_arrival)")


@attrs.frozen(slots=True)
class Hint:
    """A prefetch hint: blocks a policy predicts a coming request will hit.

    Attributes:
        keys: Block hashes to protect (resident, free blocks are pinned) or to
            promote (not resident: counted, nothing to do without a slower tier).
        expires_at_arrival: Arrival index after which the protection lapses.
    """

    keys: tuple
    expires_at_arrival: int
