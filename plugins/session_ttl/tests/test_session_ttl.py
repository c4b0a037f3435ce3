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
    # owner groups of sessions gone are collected: the table stays within twice the slots
    assert len(pol._groups) <= 2 * len(pol._grp) + 1 and set(pol.key_sessions) <= cached


def test_sessions_beyond_the_pool_size_are_forgotten_least_recently_active_first():
    """A shared prefix that stays cached is touched by every session: at most
    num_blocks sessions are remembered (it grew with every session ever seen)."""
    c = MiniCache("session_ttl", 6, options={"ttl_arrivals": "2"})
    for s in range(20):
        c.serve(["sys0"], f"sess{s}")  # the same cached block, hit by each new session
    pol = next(iter(c.rt.pm.get_plugins()))
    assert list(pol.session_keys) == [f"sess{s}" for s in range(14, 20)]  # 6 = num_blocks, most recent last
    assert pol.key_sessions["sys0"] == tuple(f"sess{s}" for s in range(14, 20))  # first-touch order
