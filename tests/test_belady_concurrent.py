"""belady_oracle under continuous batching (issue 15): the future is every
request not yet served, those still waiting for their lookup included."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spfcore import registry
from spfcore.sim import simulate
from spfcore.workloads.model import Request, Workload

HAVE = {p.name for p in registry.discover() if p.status == "ok"}
ONLINE = [a for a in ("lru", "session_ttl", "frequency", "spf_expected_utility") if a in HAVE]
pytestmark = pytest.mark.skipif("belady_oracle" not in HAVE, reason="belady_oracle plugin not installed")


def tok(block: int, n: int = 16) -> tuple:
    """n tokens of one recognisable content block (16 tokens = one block)."""
    return tuple(range(100 * block + 3, 100 * block + 3 + n))


def rq(rid: str, blocks, t: float, *, out: int = 1, x: int = 0, extra: int = 1) -> Request:
    toks = sum((tok(b) for b in blocks), ()) + tuple(range(9000 + x, 9000 + x + extra))
    return Request(rid, t, toks, out, session_id=rid)


def queued_prefix_workload() -> Workload:
    """The issue's case: a (prefix Q, reused only at the very end), b (prefix P),
    a long request L, then q0-q3 needing P arrive while L runs and wait
    (max_running 1); Y fills the whole cache before z reuses Q, so keeping Q
    gains nothing."""
    reqs = [rq("a", [1], 0.0, x=1), rq("b", [3, 4], 1.0, x=2), rq("L", [5], 2.0, out=64, x=3)]
    reqs += [rq(f"q{i}", [3, 4], 2.05 + 0.01 * i, x=10 + i) for i in range(4)]
    reqs += [rq("Y", list(range(20, 26)), 40.0, x=50), rq("z", [1], 50.0, x=30)]
    return Workload("queued-prefix", {}, reqs)


def test_waiting_requests_are_in_the_oracles_future():
    # 7 usable blocks. While L decodes it needs one more block; P (2 blocks, b's) and Q (1 block, a's)
    # are free. q0-q3 have arrived and wait for P. The old oracle read P's next use as "never"
    # (q0-q3 arrived before the eviction), evicted P's tail and kept Q: q0 hit 16 tokens, 7 hit blocks
    # against lru's 8. Now q0-q3 count as P's future: Q goes, q0 hits both P blocks.
    kw = dict(num_blocks=8, block_size=16, mode="concurrent", max_running=1, token_budget=10_000)
    wl = queued_prefix_workload()
    lru, bel = simulate(wl, "lru", **kw), simulate(wl, "belady_oracle", **kw)
    assert [r["cached_tokens"] for r in lru["requests"]] == [0, 0, 0, 32, 32, 32, 32, 0, 0]
    assert [r["cached_tokens"] for r in bel["requests"]] == [0, 0, 0, 32, 32, 32, 32, 0, 0]
    assert bel["hit_blocks"] == lru["hit_blocks"] == 8


def test_sequential_order_unchanged_by_the_waiting_set():
    # nothing waits in sequential mode when blocks are scored: the classic order (hand-computed
    # in test_sim; here: the oracle beats lru on the same workload, as before the change)
    wl = queued_prefix_workload()
    kw = dict(num_blocks=8, block_size=16)
    bel, lru = simulate(wl, "belady_oracle", **kw), simulate(wl, "lru", **kw)
    assert bel["hit_blocks"] >= lru["hit_blocks"]


@st.composite
def small_concurrent_case(draw):
    """A tiny random trace for the concurrent simulator: 3 prefixes of 1-3
    blocks over 5 block contents (so prefixes share heads), 3-9 requests,
    some using a shortened prefix, bursty arrivals (0-200 ms apart), 1-30
    output tokens; a cache just above the largest request; 1-3 running."""
    prefixes = [draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)) for _ in range(3)]
    n = draw(st.integers(3, 9))
    reqs, t = [], 0.0
    for i in range(n):
        p = prefixes[draw(st.integers(0, 2))]
        p = p[: draw(st.integers(1, len(p)))]
        t += draw(st.sampled_from([0.0, 0.005, 0.02, 0.2]))
        reqs.append(rq(f"r{i}", p, t, out=draw(st.integers(1, 30)), x=50 * i, extra=draw(st.integers(1, 20))))
    need = max(-(-(r.num_prompt_tokens + r.output_tokens - 1) // 16) for r in reqs)
    kw = dict(num_blocks=need + 1 + draw(st.integers(0, 4)), block_size=16, mode="concurrent",
              max_running=draw(st.integers(1, 3)), token_budget=draw(st.sampled_from([32, 64, 10_000])))
    return Workload("tiny", {}, reqs), kw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=small_concurrent_case())
def test_no_online_arm_beats_the_oracle_in_the_concurrent_simulator(case):
    # Greedy Belady is not proven optimal here (chained hits, the last-token rule, continuous
    # batching); the bound is checked, not assumed. Before the waiting set, 30 of 400 such
    # random cases had an online arm ahead (e.g. lru 6 hit blocks vs 5); with it, 0 of 1,900.
    wl, kw = case
    bel = simulate(wl, "belady_oracle", **kw)["hit_blocks"]
    for arm in ONLINE:
        assert simulate(wl, arm, **kw)["hit_blocks"] <= bel, arm
