import attrs
from spfcore import hookimpl

@attrs.frozen
class P:
    """max_depth: admit blocks shallower than this; order: lru or mru."""
    max_depth: int = 16
    order: str = "mru"

class TierMRU:
    """Tier demo: admit shared-prefix depths only; evict the most recently used first (scan resistance)."""
    name = "tier_mru"
    capabilities = frozenset()
    Params = P
    def __init__(self, params):
        self.params = params
        self.depth = {}
    @hookimpl
    def spfcore_request_arrived(self, request, now):
        for d, k in enumerate(request.block_keys):
            self.depth[k] = d
    @hookimpl
    def spfcore_tier_admit(self, request, keys, now):
        return [self.depth.get(k, 0) < self.params.max_depth for k in keys]
    @hookimpl
    def spfcore_tier_score(self, request, keys, now):
        v = -float(request.arrival_index) if self.params.order == "mru" else float(request.arrival_index)
        return [v] * len(keys)
