"""The ``belady_oracle`` arm: Belady's MIN order over prefix-cache blocks (the ceiling).

Belady (1966), "A study of replacement algorithms for a virtual-storage
computer": evicting the item whose next use lies furthest in the future
minimises misses for a single cache. Here the item is a KV block keyed by its
block hash, and "next use" is the arrival index of the next request whose
prompt contains that block hash.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

import attrs
import numpy as np

from spfcore import NEVER_ARRIVAL, Scores, hookimpl

#: Next use of a block hash that no future request contains, in arrivals.
NEVER = 2**36
#: Multiplier that packs (next use, depth) into one exactly representable float:
#: NEVER * DEPTH_SLOTS + depth < 2**53.
DEPTH_SLOTS = 2**16


@attrs.frozen
class BeladyParams:
    """Belady has no parameters: its order is fixed by the future request stream."""


class BeladyOraclePolicy:
    """Evict the block whose next use is furthest in the future.

    The runner hands the whole request stream to :meth:`spfcore_future_requests`
    before the first arrival; the policy builds, per block hash, the sorted
    arrival indices of the requests whose prompt contains it. The current
    position is the ``arrival_index`` of the latest
    :meth:`spfcore_request_arrived`; the next use of a block is the first arrival
    index strictly after it (``bisect``, O(log m) per block).

    Score value = ``-(next_use * 2**16 + min(depth, 2**16 - 1))``: blocks never
    used again go first (``next_use = 2**36``), then the furthest next use;
    on equal next use the deeper block goes first (evicting a chain's tail
    never breaks the chain for the blocks before it). The score expires at
    arrival ``next_use + 1``: a block whose predicted use passed without a hit
    (e.g. its ancestor was evicted, so the lookup stopped early) is re-scored
    with its following use instead of staying protected forever.

    Decisions depend on arrival indices only, so the simulator and the engine
    evict the same blocks in sequential mode. Without a future stream the
    runtime refuses to run this policy (capability ``needs-future``).
    """

    name = "belady_oracle"
    contract = "1.0"  # the spfcore contract version this policy is written for
    capabilities = frozenset({"needs-future", "scoring"})
    Params = BeladyParams

    def __init__(self, params: BeladyParams | None = None) -> None:
        self.params = params or BeladyParams()
        self.uses: dict[object, list[int]] = {}
        self.position = -1

    @hookimpl
    def spfcore_future_requests(self, requests):
        uses: defaultdict[object, list[int]] = defaultdict(list)
        for r in requests:
            for k in dict.fromkeys(r.block_keys):  # once per request, arrival order => sorted
                uses[k].append(r.arrival_index)
        self.uses = dict(uses)
        self.position = -1

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self.position = request.arrival_index

    def next_use(self, key) -> int:
        """Arrival index of the next request after the current position whose
        prompt holds block hash ``key``; :data:`NEVER` if none."""
        arr = self.uses.get(key)
        if not arr:
            return NEVER
        j = bisect.bisect_right(arr, self.position)
        return arr[j] if j < len(arr) else NEVER

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        uses, pos, bisect_right = self.uses, self.position, bisect.bisect_right
        nu = []
        for k in blocks.keys:
            arr = uses.get(k)
            if arr:
                j = bisect_right(arr, pos)
                nu.append(arr[j] if j < len(arr) else NEVER)
            else:
                nu.append(NEVER)
        nu = np.array(nu, dtype=np.int64)
        values = -(nu * DEPTH_SLOTS + np.minimum(blocks.depth, DEPTH_SLOTS - 1)).astype(np.float64)
        return Scores(values, expires_at_arrival=np.where(nu < NEVER, nu + 1, NEVER_ARRIVAL))


__all__ = ["BeladyOraclePolicy", "BeladyParams", "NEVER", "DEPTH_SLOTS"]
