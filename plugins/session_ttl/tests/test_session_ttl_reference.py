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
    touched = pol.touched if hasattr(pol, "touched") else lambda s: list(pol.session_keys[s])
    return (dict(pol.until), [(s, touched(s)) for s in pol.session_keys],
            {k: set(v) for k, v in pol.key_sessions.items()})


@pytest.mark.parametrize("seed", range(6))
def test_same_victims_and_state_as_the_per_key_form(seed, few):
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


class _Recompute(MiniCache):
    """A MiniCache whose lookup may stop short of what is cached (a request that
    recomputes cached blocks, as concurrent prefills do in vLLM): the same hash
    is then cached in two blocks."""

    def serve_cut(self, keys, session, cut: int) -> list:
        rt, bs = self.rt, self.block_size
        req = self.view(keys, session)
        hit_ids: list[int] = []
        for k in keys[:min(cut, (req.num_prompt_tokens - 1) // bs)]:
            i = rt.block_of(k)
            if i is None or i in hit_ids:
                break
            hit_ids.append(i)
        need = len(keys) - len(hit_ids) + 1
        if need > rt.num_free - len(hit_ids):
            return None
        gone = self._serve(req, keys, hit_ids, need)
        self.next_index += 1
        return gone


@pytest.fixture(params=[0, 8], ids=["numpy", "few"])
def few(request, monkeypatch):
    """Batches from one block on go through the numpy paths (0), or only beyond 8 (the default)."""
    import spfcore_session_ttl

    monkeypatch.setattr(spfcore_session_ttl, "_FEW", request.param)
    return request.param


@pytest.mark.parametrize("seed, small", [(s, False) for s in range(8)] + [(8, True), (9, True)])
def test_hashes_cached_in_two_blocks_decide_as_per_key(seed, small, few):
    """A hash stored again while another block holds it (and twice in one
    store) shares its ``until`` and owners, as per hash: evicting either copy
    drops them, the other copy is unprotected until touched again. ``small``:
    the policy told of a pool of 2 blocks grows its arrays as block ids come."""
    rng = random.Random(seed)
    num_blocks = 10
    new, ref = SessionTTLPolicy(SessionTTLParams(ttl_arrivals=3)), Reference(3)
    caches = []
    for pol, ko in ((new, True), (ref, False)):
        pm = new_plugin_manager()
        pm.register(pol, name="session_ttl")
        caches.append(_Recompute(PolicyRuntime(pm, num_blocks, 4, policy_name="session_ttl", keys_only=ko), 0))
    if small:
        new.spfcore_cache_configured(num_blocks=2, block_size=4)
        new.max_sessions = num_blocks
    dups = displaced = spares = 0
    nspare = len(new._spare)
    for r in range(400):
        s = rng.choice([None, "a", "b", "c", "d"])
        keys = [f"k{rng.randint(0, 12)}" for _ in range(rng.randint(1, 4))]
        cut = rng.choice([0, 1, 9, 9])
        got = [c.serve_cut(keys, s, cut) for c in caches]
        assert got[0] == got[1], r
        assert _state(new) == _state(ref), r
        held = [caches[0].rt.key_of(i) for i in range(num_blocks)]
        dups += len([k for k in held if k is not None]) > len({k for k in held if k is not None})
        displaced += new._displaced > 0
        spares += len(new._spare) < nspare
    # the run did cache hashes twice, so blocks shared a slot, and gave blocks spare slots
    assert dups > 20 and displaced > 20 and spares > 0
    assert new._n == (16 if small else num_blocks)  # 2 -> 4 -> 8 -> 16


class _Batch:
    """The two columns a keys-only policy reads, for calling hooks directly."""

    def __init__(self, ids, keys):
        self.ids, self.keys = np.array(ids, np.int64), list(keys)

    def __len__(self):
        return len(self.keys)


def test_spare_slots_survive_the_pool_growing(few):
    """A block displaced to a spare slot keeps its hash's state when block ids
    beyond the configured pool arrive (the spare slots move up)."""
    pol = SessionTTLPolicy(SessionTTLParams(ttl_arrivals=5))
    pol.spfcore_cache_configured(num_blocks=4, block_size=4)
    req = lambda i, s: type("R", (), {"session_id": s, "arrival_index": i})()  # noqa: E731
    pol.spfcore_blocks_stored(req(0, "s"), _Batch([1], ["a"]), 0.0)
    pol.spfcore_blocks_stored(req(0, "s"), _Batch([2], ["a"]), 0.0)  # "a" twice: block 2 shares slot 1
    pol.spfcore_blocks_evicted(["a"], 0.0)  # one copy gone: until and owners dropped, the slot stays
    pol.spfcore_blocks_stored(req(1, "t"), _Batch([1], ["b"]), 0.0)  # block 1's own slot is held: a spare
    assert pol._displaced == 2 and pol.slot["b"] >= 4
    pol.spfcore_blocks_stored(req(2, "u"), _Batch([9], ["c"]), 0.0)  # an id beyond the pool: arrays grow
    assert pol._n == 10 and pol.slot["b"] >= 10 and pol.slot["a"] == 1
    assert pol.until == {"b": 6.0, "c": 7.0} and pol.key_sessions == {"b": ("t",), "c": ("u",)}
    pol.spfcore_request_arrived(req(3, "t"), 0.0)
    assert pol.spfcore_rescore_keys(req(3, "t"), 0.0) == ["b"] and pol.until["b"] == 8.0
    s = pol.spfcore_score_blocks(_Batch([1, 2, 9], ["b", "a", "c"]), 0.0)
    assert s.pinned.tolist() == [True, False, True] and s.expires_at_arrival.tolist()[::2] == [8, 7]
    pol.spfcore_blocks_evicted(["a", "b"], 0.0)
    assert sorted(pol.slot) == ["c"] and list(pol.session_keys) == ["u"]
