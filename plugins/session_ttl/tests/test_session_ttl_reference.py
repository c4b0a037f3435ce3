"""session_ttl's owner bookkeeping (owner tuples shared per touch, hashes
computed once per touch, whole sessions dropped at once) decides and keeps
state exactly as the plain per-key form it replaced (sets of owners, one
dict operation per key), including shared prefixes, sessions forgotten
beyond the pool size and duplicates."""

import math
import random
from collections import OrderedDict

import numpy as np
import pytest

from spfcore import NEVER_ARRIVAL, Scores, hookimpl
from spfcore.registry import new_plugin_manager
from spfcore.runtime import PolicyRuntime
from spfcore.testing import MiniCache
from spfcore_session_ttl import SessionTTLParams, SessionTTLPolicy


class Reference:
    """The plain form: per key its ``until`` and a set of owning sessions."""

    def __init__(self, ttl: int) -> None:
        self.ttl, self.arrival, self.max_sessions = ttl, 0, 1 << 20
        self.until: dict = {}
        self.session_keys: OrderedDict = OrderedDict()
        self.key_sessions: dict = {}
        self.arrival_keys: list = []
        self.forgotten = 0  # sessions forgotten beyond max_sessions

    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        self.max_sessions = max(1, num_blocks)

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self.arrival, self.arrival_keys = request.arrival_index, []
        keys = self.session_keys.get(request.session_id) if request.session_id is not None else None
        if keys:
            self.session_keys.move_to_end(request.session_id)
            for k in keys:
                self.until[k] = request.arrival_index + self.ttl
            self.arrival_keys = list(keys)

    @hookimpl
    def spfcore_rescore_keys(self, request, now):
        return self.arrival_keys

    def _touch(self, request, blocks):
        sid = request.session_id
        if sid is None or not len(blocks):
            return
        mine = self.session_keys.get(sid)
        if mine is None:
            mine = self.session_keys[sid] = {}
            if len(self.session_keys) > self.max_sessions:
                old, old_keys = self.session_keys.popitem(last=False)
                self.forgotten += 1
                for k in old_keys:
                    owners = self.key_sessions.get(k)
                    if owners is not None:
                        owners.discard(old)
                        if not owners:
                            del self.key_sessions[k]
        else:
            self.session_keys.move_to_end(sid)
        end = request.arrival_index + self.ttl
        for k in blocks.keys:
            self.until[k] = max(self.until.get(k, -1), end)
            mine[k] = None
            self.key_sessions.setdefault(k, set()).add(sid)

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        self._touch(request, blocks)

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        self._touch(request, blocks)

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        for k in keys:
            self.until.pop(k, None)
            for s in self.key_sessions.pop(k, ()):
                mine = self.session_keys.get(s)
                if mine is not None:
                    mine.pop(k, None)
                    if not mine:
                        del self.session_keys[s]

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        u = np.array([self.until.get(k, -math.inf) for k in blocks.keys], np.float64)
        pinned = u > self.arrival
        if not pinned.any():
            return Scores(0.0)
        return Scores(0.0, expires_at_arrival=np.where(pinned, u, NEVER_ARRIVAL).astype(np.int64), pinned=pinned)


def _cache(policy, num_blocks: int, keys_only: bool) -> MiniCache:
    pm = new_plugin_manager()
    pm.register(policy, name="session_ttl")
    return MiniCache(PolicyRuntime(pm, num_blocks, 4, policy_name="session_ttl", keys_only=keys_only), 0)


def _state(pol) -> tuple:
    return (dict(pol.until), [(s, list(ks)) for s, ks in pol.session_keys.items()],
            {k: set(v) for k, v in pol.key_sessions.items()})


@pytest.mark.parametrize("seed", range(6))
def test_same_victims_and_state_as_the_per_key_form(seed):
    rng = random.Random(seed)
    num_blocks = 12  # so at most 12 sessions are remembered: 20 sessions sharing "sys" blocks forget some
    new, ref = SessionTTLPolicy(SessionTTLParams(ttl_arrivals=3)), Reference(3)
    caches = [_cache(new, num_blocks, True), _cache(ref, num_blocks, False)]
    history: dict = {}
    evicted_shared = 0
    for r in range(300):
        s = rng.choice([None] + [f"s{j}" for j in range(20)])
        prefix = [f"sys{j}" for j in range(rng.randint(0, 3))]  # shared by every session
        own = history.setdefault(s, [])
        if rng.random() < 0.7:  # a new turn extends the session's own chain
            own.append(f"{s}-{r}")
        keys = prefix + own[-rng.randint(1, 4):]
        got = [c.serve(keys, s) for c in caches]
        assert got[0] == got[1], r
        assert _state(new) == _state(ref), r
        evicted_shared += any(k.startswith("sys") for k in got[0])
    assert caches[0].hits == caches[1].hits and sum(caches[0].hits) > 0
    assert ref.forgotten and evicted_shared  # the run did forget sessions and evict shared blocks
