"""The debug recorder of what a policy is shown (spfcore.sim.events)."""

from __future__ import annotations

import json

from spfcore.runtime import PolicyRuntime
from spfcore.sim import simulate
from spfcore.sim.events import EventLog, first_difference, record_events
from spfcore.workloads.generators import make


def test_the_recorder_keeps_each_runtimes_events_and_finds_where_two_part():
    wl = make("personas", seed=3, personas=2, prefix_tokens=64, sessions=4, turns=2, query_tokens=16,
              output_tokens=20, arrival="poisson", rate=20.0)
    kw = dict(block_size=16, mode="concurrent", max_running=2, token_budget=64)
    hit = PolicyRuntime.hit
    with record_events() as logs:
        simulate(wl, "lru", num_blocks=14, **kw)
        simulate(wl, "lru", num_blocks=14, **kw)
        simulate(wl, "lru", num_blocks=12, **kw)  # a smaller cache: another eviction sooner
    assert PolicyRuntime.hit is hit  # the patch is undone
    a, b, c = logs
    assert (a.policy, a.driver, a.requests()) == ("lru", "sim", 8)
    kinds = [e[0] for e in a.events]
    assert kinds[0] == "release" and len(a.events[0][3]) == 13  # the whole pool, hashless
    assert kinds.count("hit") == kinds.count("finished") == 8 and "evict" in kinds and "stored" in kinds
    # decode blocks are named by request and depth (the engine hashes its own output tokens)
    stored = [lab for e in a.events if e[0] == "stored" for lab in e[3]]
    assert ("decode", "s0-t0", 5) in stored
    assert first_difference(a, b) is None and first_difference(a, b, ids=True) is None
    d = first_difference(a, c)
    assert d is not None and d.startswith("first difference at event ")
    assert first_difference(a, c, ids=True).startswith("first difference at event 0 ")  # the pool itself
    back = EventLog.from_json(json.loads(json.dumps(a.to_json())))  # as benchmarks/sim_engine_events.py keeps it
    assert back.events == a.events and first_difference(back, a, ids=True) is None
