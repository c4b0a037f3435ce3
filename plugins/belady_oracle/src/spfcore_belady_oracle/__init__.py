"""The ``belady_oracle`` arm: Belady's MIN order over prefix-cache blocks (the ceiling).

Belady (1966), "A study of replacement algorithms for a virtual-storage
computer": evicting the item whose next use lies furthest in the future
minimises misses for a single cache. Here the item is a KV block keyed by its
block hash, and "next use" is the arrival index of the next request whose
prompt contains that block hash and that has not been served yet: a request
not yet arrived, or one that arrived and waits for its prefix-cache lookup
(concurrent mode, continuous batching: requests queue behind running ones).
"""

from __future__ import annotations

from array import array
from itertools import repeat

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
    :meth:`spfcore_request_arrived`. The future is every request not yet
    *served*: those after the position, and those that arrived but whose
    lookup (:meth:`spfcore_blocks_hit`, called once per lookup, hit or not)
    has not happened yet. The next use of a block is the smallest arrival
    index among the waiting requests that hold its hash, else the first
    arrival index strictly after the position (one ``searchsorted`` per
    batch over every future use, O(log m) per block, no per-block Python). In sequential mode nothing waits when blocks are scored, so this
    is the classic order; under continuous batching, without the waiting
    requests, a prefix needed by requests queued behind a long one read as
    "never used again" and was evicted first (issue 15). A preempted request
    looks its prefix up again; no hook tells the policy of a preemption, so
    that second lookup is not in its future (a known gap).

    Score value = ``-(next_use * 2**16 + min(depth, 2**16 - 1))``: blocks never
    used again go first (``next_use = 2**36``), then the furthest next use;
    on equal next use the deeper block goes first (evicting a chain's tail
    never breaks the chain for the blocks before it). The score expires at
    arrival ``next_use + 1``: a block whose predicted use passed without a hit
    (e.g. its ancestor was evicted, so the lookup stopped early) is re-scored
    with its following use instead of staying protected forever. A score
    whose next use is a waiting request also expires at ``now`` (seconds): its
    lookup comes without an arrival, so the block is re-scored before the
    next victims are chosen.

    Decisions depend on arrival indices only, so the simulator and the engine
    evict the same blocks in sequential mode. Without a future stream the
    runtime refuses to run this policy (capability ``needs-future``).
    """

    name = "belady_oracle"
    contract = "1.4"  # the spfcore contract version this policy is written for (1.4: chain-only)
    # chain-only: the hooks read blocks.keys and blocks.depth alone, so the runtime writes no other column
    capabilities = frozenset({"needs-future", "scoring", "chain-only"})
    Params = BeladyParams

    def __init__(self, params: BeladyParams | None = None) -> None:
        self.params = params or BeladyParams()
        # The future index: block hash -> dense id, and every (id, arrival index) use as one
        # sorted int64 ``id * span + arrival`` (grouped by id, arrivals ascending): the next
        # use of a batch is one ``searchsorted``. 8 bytes per use plus the hash map.
        self._kid: dict[object, int] = {}
        self._uses = np.zeros(0, np.int64)
        self._span = 1
        self.position = -1
        #: Requests arrived but not yet looked up: request id -> (arrival index, block hashes).
        self.waiting: dict[object, tuple[int, tuple]] = {}
        self._wait_first: dict | None = {}  # block hash -> earliest waiting arrival holding it (None: rebuild)

    @hookimpl
    def spfcore_future_requests(self, requests):
        kid: dict[object, int] = {}
        ids, arrivals = array("q"), array("q")
        setdefault = kid.setdefault
        for r in requests:
            i = r.arrival_index
            ks = dict.fromkeys(r.block_keys)  # once per request
            ids.extend([setdefault(k, len(kid)) for k in ks])
            arrivals.extend(repeat(i, len(ks)))
        a = np.frombuffer(arrivals, np.int64)
        self._span = span = int(a.max()) + 2 if len(a) else 1
        self._uses = np.sort(np.frombuffer(ids, np.int64) * span + a)
        self._kid = kid
        self.position = -1
        self.waiting, self._wait_first = {}, {}

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self.position = request.arrival_index
        self.waiting[request.request_id] = (request.arrival_index, request.block_keys)
        self._wait_first = None

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        if self.waiting.pop(request.request_id, None) is not None:  # else a repeated lookup (a preempted
            self._wait_first = None                                   # request's): already served once

    def _waiting_first(self) -> dict:
        """Block hash -> the earliest arrival index among the waiting requests
        that hold it, rebuilt after the waiting set changed (C-speed dict
        updates, latest arrival first so the earliest writes last)."""
        d = self._wait_first
        if d is None:
            d = {}
            for i, keys in sorted(self.waiting.values(), key=lambda w: w[0], reverse=True):
                d.update(dict.fromkeys(keys, i))
            self._wait_first = d
        return d

    def next_use(self, key) -> int:
        """Arrival index of the next use of block hash ``key``: the earliest
        waiting request that holds it, else the first request after the
        current position; :data:`NEVER` if none."""
        i = self._waiting_first().get(key)
        if i is not None:
            return i
        return int(self._next_uses([key])[0])

    def _next_uses(self, keys) -> np.ndarray:
        """First arrival index strictly after the position of each hash
        (:data:`NEVER` if none), int64: one ``searchsorted`` over the index."""
        span, uses = self._span, self._uses
        kid = np.fromiter(map(self._kid.get, keys, repeat(-1)), np.int64, len(keys))
        pos = min(self.position, span - 2)  # past the last arrival: nothing after it
        x = np.searchsorted(uses, kid * span + pos, side="right")
        hit = np.minimum(x, len(uses) - 1)
        found = (kid >= 0) & (x < len(uses))
        if len(uses):
            found &= uses[hit] // span == kid
        return np.where(found, uses[hit] % span if len(uses) else 0, NEVER)

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        keys = blocks.keys
        wait = self._waiting_first() if self.waiting else None
        waiting = list(map(wait.get, keys)) if wait else None  # earliest waiting arrival, or None
        nu = self._next_uses(keys)
        if waiting is not None and waiting.count(None) != len(waiting):
            w = np.array([-1 if x is None else x for x in waiting], np.int64)
            nu = np.where(w >= 0, w, nu)
        values = -(nu * DEPTH_SLOTS + np.minimum(blocks.depth, DEPTH_SLOTS - 1)).astype(np.float64)
        exp_a = np.where(nu < NEVER, nu + 1, NEVER_ARRIVAL)
        if waiting is None or waiting.count(None) == len(waiting):
            return Scores(values, expires_at_arrival=exp_a)
        exp_t = np.where(np.fromiter((w is not None for w in waiting), bool, len(waiting)), float(now), np.inf)
        return Scores(values, expires_at=exp_t, expires_at_arrival=exp_a)


__all__ = ["BeladyOraclePolicy", "BeladyParams", "NEVER", "DEPTH_SLOTS"]
