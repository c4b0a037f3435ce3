"""Recording a driver's event stream and replaying it into a fresh runtime
(issue 15, part 4): the policy's decisions are identical."""

from __future__ import annotations

import pytest

from spfcore import registry
from spfcore.runtime import PolicyRuntime
from spfcore.sim import simulate
from spfcore.sim.replay import record_runtime_calls, replay
from spfcore.workloads.generators import make

OK = {p.name for p in registry.discover() if p.status == "ok"}
ARMS = [a for a in ("lru", "spf_expected_utility", "belady_oracle", "frequency") if a in OK]


def busy_workload():
    """Personas with Poisson arrivals fast enough that requests queue and batch."""
    return make("personas", seed=3, personas=4, prefix_tokens=96, sessions=8, turns=3, query_tokens=16,
                output_tokens=12, arrival="poisson", rate=10.0)


@pytest.mark.parametrize("arm", ARMS)
def test_replaying_the_simulators_concurrent_stream_gives_the_same_victims(arm):
    with record_runtime_calls() as log:
        rec = simulate(busy_workload(), arm, num_blocks=24, block_size=16, mode="concurrent", max_running=4,
                       token_budget=64)
    (events,) = log.events.values()
    out = replay(events, arm, num_blocks=24, block_size=16)
    assert out["mismatches"] == []
    assert out["evict_calls"] > 0 and out["victims"] >= rec["evictions"] > 0
    assert {e[0] for e in events} >= {"arrived", "hit", "stored", "finished", "release", "evict"}
    # the fresh runtime's timers over the replay (what the stream costs here): hooks are part of the events
    assert 0 < out["policy_seconds"] and 0 <= out["hook_seconds"]
    if arm == "spf_expected_utility":
        assert 0 < out["hook_seconds"] < out["policy_seconds"]


@pytest.mark.skipif("spf_expected_utility" not in OK, reason="spf_expected_utility not installed")
def test_the_comparison_can_fail():
    # the same stream replayed under another policy: other victims, found and listed
    with record_runtime_calls() as log:
        simulate(busy_workload(), "spf_expected_utility", num_blocks=24, block_size=16, mode="concurrent",
                 max_running=4, token_budget=64)
    (events,) = log.events.values()
    out = replay(events, "lru", num_blocks=24, block_size=16)
    assert out["mismatches"] and all(rec != got for _, rec, got in out["mismatches"])


def test_recording_restores_the_classes():
    before = PolicyRuntime.evict
    with record_runtime_calls():
        assert PolicyRuntime.evict is not before
    assert PolicyRuntime.evict is before


@pytest.mark.engine
@pytest.mark.parametrize("arm", [a for a in ("spf_expected_utility", "belady_oracle") if a in OK])
def test_engine_event_stream_replays_to_identical_decisions(arm):
    """The real (CPU) engine in timed mode: requests arrive while others run,
    vLLM schedules, batches and (cache permitting) preempts; replaying the
    runtime calls it made gives the same victims, allocation by allocation."""
    pytest.importorskip("vllm")
    from spfcore.engine.runner import EngineSpec, open_engine

    wl = make("personas", seed=5, personas=4, prefix_tokens=256, sessions=6, turns=2, query_tokens=16,
              output_tokens=8, arrival="poisson", rate=30.0)
    session = open_engine(EngineSpec(model="tiny", block_size=32, num_blocks=24, max_num_seqs=4, dtype="float32"), arm)
    try:
        with record_runtime_calls() as log:
            cell = session.run(wl, seed=5, mode="timed")
            rt = session.runtime
        events = log.of(rt)
    finally:
        session.close()
    out = replay(events, arm, num_blocks=24, block_size=32)
    assert out["evict_calls"] > 0 and out["mismatches"] == []
    assert cell["evictions"] > 0 and cell["num_requests"] == 12
    assert sum(1 for e in events if e[0] == "arrived") == 12
