"""What a policy was shown, compared across drivers (spfcore.sim.events)."""

from __future__ import annotations

import json

from spfcore.sim import simulate
from spfcore.sim.events import events, first_difference, from_json
from spfcore.sim.replay import record_runtime_calls
from spfcore.workloads.generators import make


def test_events_name_blocks_by_first_store_and_first_difference_finds_where_two_streams_part():
    wl = make("personas", seed=3, personas=2, prefix_tokens=64, sessions=4, turns=2, query_tokens=16,
              output_tokens=20, arrival="poisson", rate=20.0)
    kw = dict(block_size=16, mode="concurrent", max_running=2, token_budget=64)
    with record_runtime_calls() as log:
        simulate(wl, "lru", num_blocks=14, **kw)
        simulate(wl, "lru", num_blocks=14, **kw)
        simulate(wl, "lru", num_blocks=12, **kw)  # a smaller cache: another eviction sooner
    assert set(log.drivers.values()) == {"sim"}
    a, b, c = (events(x) for x in log.events.values())
    kinds = [e[0] for e in a]
    assert a[0][0] == "release" and len(a[0][3]) == 13  # the whole pool, hashless
    assert kinds.count("arrived") == kinds.count("hit") == kinds.count("finished") == 8
    # blocks are named by the request and depth of their first store, not by hash (the engine's keys
    # are vLLM's block hashes, the simulator's chain_keys); an eviction names what the block held
    stored = [lab for e in a if e[0] == "stored" for lab in e[3]]
    assert ("decode", "s0-t0", 5) in stored and ("prompt", "s0-t0", 0) in stored
    assert len(stored) == len(set(stored))  # each name stored once: a later turn's prefix is a hit
    assert ("prompt", "s0-t1", 0) not in stored  # turn 1 shares turn 0's persona prefix
    evicted = [lab for e in a if e[0] == "evict" for lab in e[2] if lab is not None]
    assert evicted and set(evicted) <= set(stored)
    assert first_difference(a, b) is None and first_difference(a, b, ids=True) is None
    assert first_difference(a, c).startswith("first difference at event ")
    assert first_difference(a, c, ids=True).startswith("first difference at event 0 ")  # the pool itself
    back = from_json(json.loads(json.dumps(a)))  # as benchmarks/sim_engine_events.py keeps the engine's
    assert back == a and first_difference(back, a, ids=True) is None
    # a recording made when prompt blocks were labelled by their hash (results/sim-vs-engine-load/cpu-events)
    # reads back as labelled now
    hashes = {}

    def as_hash(lab):
        return hashes.setdefault(lab, 10**30 + len(hashes)) if lab is not None and lab[0] == "prompt" else lab

    def old_style(e):
        at = {"hit": 2, "evict": 2, "stored": 3, "release": 1}.get(e[0])
        return e if at is None else e[:at] + ([as_hash(x) for x in e[at]],) + e[at + 1:]

    old = json.loads(json.dumps([old_style(e) for e in a]))
    assert any(isinstance(x, int) for e in old if e[0] == "stored" for x in e[3])
    assert from_json(old) == a
