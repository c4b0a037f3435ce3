"""session_ttl: active sessions' blocks survive, re-pinned on arrival, LRU
again after the TTL, pins beyond the cap refused."""

import pytest

from spfcore.registry import PolicyConfigError
from spfcore.testing import MiniCache

# Pool 6 blocks, cap 0.5 * 6 = 3 pinned; every request also holds one hashless
# block. Release orders: x0=1, b0=2, n0=3, a0=4, c1=5, c0=6, d1=7, d0=8.
#   arrival 0  A [x0]        x0 pinned until 3
#   arrival 1  B [b0]        b0 pinned until 4
#   arrival 2  -  [n0]       no session: n0 unprotected
#   arrival 3  A [a0]        x0's pin expires, A arrives -> x0 re-pinned until 6
#   arrival 4  C [c0, c1]    b0 expired; victim b0 (LRU would take x0)
#   arrival 5  D [d0, d1]    c1 pinned, c0 refused (cap); victims n0, c0
#   arrival 6  E [e0,e1,e2]  x0, a0 expired -> LRU: x0, a0, d1 (c1 pinned till 7)
SCRIPT = [("A", ["x0"]), ("B", ["b0"]), (None, ["n0"]), ("A", ["a0"]),
          ("C", ["c0", "c1"]), ("D", ["d0", "d1"]), ("E", ["e0", "e1", "e2"])]


def run(policy, options):
    c = MiniCache(policy, 6, options=options)
    return [c.serve(keys, s) for s, keys in SCRIPT], c


def test_protection_rearm_expiry_and_cap():
    got, c = run("session_ttl", {"ttl_arrivals": "3"})
    assert got == [[], [], [], [], ["b0"], ["n0", "c0"], ["x0", "a0", "d1"]]
    # Refused pins: c0 (x0, a0, c1 hold the cap), d1 and d0 (same), then at
    # arrival 6 x0 and a0 expire, e2 and e1 join c1 and e0 is refused.
    assert c.rt.evictor.num_pinned == 3
    assert c.rt.stats()["pins_refused"] == 4


def test_lru_on_the_same_script():
    got, _ = run("lru", None)
    assert got[4] == ["x0"] and got[5] == ["b0", "n0"] and got[6] == ["a0", "c1", "c0"]


def test_ttl_in_seconds_matches_arrivals_on_a_unit_clock():
    # MiniCache's clock is now = arrival index (seconds).
    assert run("session_ttl", {"ttl_seconds": "3"})[0] == run("session_ttl", {"ttl_arrivals": "3"})[0]


def test_zero_pin_cap_is_plain_lru():
    assert run("session_ttl", {"ttl_arrivals": "3", "pin_cap_fraction": "0"})[0] == run("lru", None)[0]


@pytest.mark.parametrize("opt, msg", [
    ({"ttl": "3"}, "unknown parameter 'ttl' (allowed: ttl_arrivals, ttl_seconds, pin_cap_fraction)"),
    ({"ttl_arrivals": "0"}, "'ttl_arrivals' must be >= 1"),
    ({"ttl_arrivals": "x"}, "bad value 'x' for 'ttl_arrivals' (must be a int)"),
    ({"pin_cap_fraction": "1.5"}, "'pin_cap_fraction' must be <= 1"),
    ({"ttl_seconds": "-1"}, "'ttl_seconds' must be > 0"),
    ({"ttl_seconds": "inf"}, "'ttl_seconds' must be finite: inf"),  # was a hook fault (a pin without expiry)
])
def test_bad_options_name_policy_and_key(opt, msg):
    with pytest.raises(PolicyConfigError) as e:
        MiniCache("session_ttl", 6, options=opt)
    assert str(e.value).startswith("policy 'session_ttl': ") and msg in str(e.value)
    assert "\n" not in str(e.value)


def test_state_is_bounded_by_the_cache_not_by_sessions_seen():
    """Sessions whose blocks were all evicted leave nothing behind (a long run
    with ever-new sessions grew session_keys by one dict per session)."""
    c = MiniCache("session_ttl", 6, options={"ttl_arrivals": "2"})
    for s in range(40):
        c.serve([f"s{s}a", f"s{s}b"], f"sess{s}")
        c.serve([], f"miss{s}")  # a request with no full block: its lookup hits nothing
    pol = next(iter(c.rt.pm.get_plugins()))
    cached = c.cached()
    assert set(pol.session_keys) == {f"sess{s}" for s in range(40) if f"s{s}a" in cached or f"s{s}b" in cached}
    assert len(pol.session_keys) <= 3 and set(pol.until) <= cached


def test_sessions_beyond_the_pool_size_are_forgotten_least_recently_active_first():
    """A shared prefix that stays cached is touched by every session: at most
    num_blocks sessions are remembered (it grew with every session ever seen)."""
    c = MiniCache("session_ttl", 6, options={"ttl_arrivals": "2"})
    for s in range(20):
        c.serve(["sys0"], f"sess{s}")  # the same cached block, hit by each new session
    pol = next(iter(c.rt.pm.get_plugins()))
    assert list(pol.session_keys) == [f"sess{s}" for s in range(14, 20)]  # 6 = num_blocks, most recent last
    assert pol.key_sessions["sys0"] == tuple(f"sess{s}" for s in range(14, 20))  # first-touch order


# --- state keyed by hash, not by block id (session 22's review: a per-block-id layout broke these) ---

from spfcore import hookimpl  # noqa: E402
from spfcore.registry import new_plugin_manager  # noqa: E402
from spfcore.runtime import PolicyError, PolicyRuntime  # noqa: E402
from spfcore.views import BlockBatch, BlockView, RequestView  # noqa: E402
from spfcore_session_ttl import SessionTTLParams, SessionTTLPolicy  # noqa: E402


class _Faulty:
    """A second plugin whose hook raises once when armed (pluggy calls it after session_ttl)."""

    armed = False

    def _fire(self):
        if self.armed:
            self.armed = False
            raise RuntimeError("injected")


class _FailsInEviction(_Faulty):
    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        self._fire()


class _FailsInStore(_Faulty):
    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        self._fire()


def _with_faulty(faulty, num_blocks):
    f = faulty()
    pol = SessionTTLPolicy(SessionTTLParams(ttl_arrivals=10, pin_cap_fraction=1.0))
    pm = new_plugin_manager()
    pm.register(f, name="faulty")  # registered first: called after session_ttl
    pm.register(pol, name="session_ttl")
    return f, pol, PolicyRuntime(pm, num_blocks, 4, policy_name="session_ttl", keys_only=True)


def test_an_undone_eviction_leaves_no_protection_to_the_blocks_next_hash():
    f, pol, rt = _with_faulty(_FailsInEviction, 4)
    rt.release([], list(range(4)), 0.0)
    served = [0]

    def serve(keys, s, fail=False):
        i = served[0]
        served[0] += 1
        req = RequestView(f"r{i}", s, i, float(i), len(keys) * 4 + 1, tuple(keys))
        rt.arrived(req, float(i))
        hit = []
        for k in keys:
            b = rt.block_of(k)
            if b is None:
                break
            hit.append(b)
        rt.touch(hit)
        rt.hit(req, hit, float(i))
        key_of = [rt.key_of(b) for b in range(4)]
        f.armed = fail
        try:
            new = rt.evict(len(keys) - len(hit) + 1, float(i))
        except PolicyError:
            rt.release(hit[::-1], [], float(i))
            return None
        full, hashless = new[:len(keys) - len(hit)], new[len(keys) - len(hit):]
        if full:
            rt.stored(req, full, keys[len(hit):], len(hit), None, 4, float(i))
        rt.finished(req, float(i))
        rt.release((hit + full)[::-1], hashless, float(i))
        return [key_of[b] for b in new if key_of[b] is not None]

    assert serve(["k"], None) == []
    assert serve(["m1", "m2", "m3"], None, fail=True) is None  # k's eviction undone: k stays cached
    assert serve(["k"], "s") == []  # session s hits k: k protected
    assert serve(["m1", "m2"], None) == []
    assert serve(["n1", "n2", "n3"], None) == ["m2", "m1", "k"]  # k (pinned) goes last, evicted for real
    assert pol.until == {} and list(pol.session_keys) == []  # nothing of k or s is left
    assert [serve([k], None) for k in ("p1", "p2", "p3")] == [["n3"], ["n2"], ["n1"]]
    assert rt.num_pinned == 0  # no fresh hash inherited k's protection
    assert serve(["q1", "q2"], None) == ["p1", "p2"]  # plain LRU


def test_a_store_put_back_by_minicache_leaves_no_protection_behind():
    f, pol, rt = _with_faulty(_FailsInStore, 4)
    c = MiniCache(rt, 0)
    assert c.serve(["k"], None) == []
    f.armed = True
    with pytest.raises(PolicyError, match="injected"):
        c.serve(["m1", "m2", "m3", "m4"], "s", extra_tokens=0)  # evicts k; put back after the fault
    assert sorted(c.cached()) == ["k"]
    assert c.serve(["k"], None) == [] and rt.num_pinned == 0  # k is not protected by the failed store
    assert c.serve(["y"], None) == []
    assert c.serve(["x1", "x2"], None) == ["k"]  # LRU: k before y


def test_hand_made_batches_are_scored_by_hash():
    """``BlockBatch.of`` numbers every batch 0..n-1 (docs/writing-policies.md section 9): the
    answers must follow the hashes, not the ids."""
    def batch(*keys):
        return BlockBatch.of([BlockView(k, 0, None, 16, None, "r", 1, 0.0, 0.0) for k in keys])

    p = SessionTTLPolicy(SessionTTLParams(ttl_arrivals=5))
    p.spfcore_cache_configured(num_blocks=8, block_size=16)
    r0 = RequestView("r0", "s", 0, 0.0, 17, ("a",))
    r1 = RequestView("r1", None, 1, 1.0, 17, ("b",))
    p.spfcore_request_arrived(r0, 0.0)
    p.spfcore_blocks_stored(r0, batch("a"), 0.0)  # session s: a protected until arrival 5
    p.spfcore_request_arrived(r1, 1.0)
    p.spfcore_blocks_stored(r1, batch("b"), 1.0)  # no session: b unprotected
    assert p.spfcore_score_blocks(batch("a", "b"), 1.0).pinned.tolist() == [True, False]
    assert p.spfcore_score_blocks(batch("b", "a"), 1.0).pinned.tolist() == [False, True]
