"""The gate's engine cells on a real local Ray cluster: CPU actors, one real
vLLM engine (the embedded tiny model) each, one seed per actor."""

from __future__ import annotations

import json
import os

import pytest

import attrs

from spfcore.presets import SEED_ROLES
from spfcore.run.spec import GateConfig
from spfcore.run.pipeline import run_gate
from spfcore.run.store import sidecar_path

ARMS = ("lru", "session_ttl", "frequency", "belady_oracle")


@pytest.mark.engine
def test_gate_engine_cells_on_ray_actors(tmp_path):
    ray = pytest.importorskip("ray")
    from spfcore import registry
    from spfcore.engine.ray_cells import RayEngineCells

    ok = {p.name for p in registry.discover() if p.status == "ok"}
    if not set(ARMS) <= ok:
        pytest.skip(f"needs {ARMS} installed (have {sorted(ok)})")
    cfg = GateConfig(workload="personas", workload_flags={"personas": 4, "prefix_tokens": 256, "sessions": 4,
                                                          "turns": 2, "query_tokens": 32, "output_tokens": 2},
                     arms=ARMS, seeds=(1, 2, 3), block_size=32, cache_pressure=2.3, engine={"model": "tiny"},
                     roles=attrs.evolve(SEED_ROLES, candidate="frequency"))
    out = tmp_path / "r.json"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # a real local Ray cluster
    try:
        cells = RayEngineCells("auto", num_gpus=0, num_cpus=1, max_actors=2)  # CPU actors, one engine each
        res = run_gate(cfg, out, engine_cells=cells, progress=False, plots=False)
        lines = sidecar_path(out).read_text().splitlines()
        again = run_gate(cfg, out, engine_cells=cells, progress=False, plots=False)  # resume: nothing left to run
    finally:
        ray.shutdown()
    assert [(c["arm"], c["seed"]) for c in res["cells"]] == [(a, s) for a in ARMS for s in (1, 2, 3)]
    assert not [c for c in res["cells"] if c.get("error")], [c["error"] for c in res["cells"] if c.get("error")]
    pids = {c["runner"]["pid"] for c in res["cells"]}
    assert len(pids) == 2 and os.getpid() not in pids  # two actors (3 seeds), neither the driver
    for seed in (1, 2, 3):  # one seed, one engine: every arm of a seed measured in the same actor
        assert len({c["runner"]["pid"] for c in res["cells"] if c["seed"] == seed}) == 1
    sim = {(c["arm"], c["seed"]): c for c in res["sim"]["cells"]}
    for c in res["cells"]:  # sequential mode: the engine's cached tokens per request equal the simulator's
        assert c["num_requests"] == 8
        s = sim[c["arm"], c["seed"]]
        assert [q["cached_tokens"] for q in c["requests"]] == [q["cached_tokens"] for q in s["requests"]], c["arm"]
    assert res["verdict"]["status"] in ("SURVIVES", "FAILS", "INVALID-HARNESS", "NO-HEADROOM")
    assert sidecar_path(out).read_text().splitlines() == lines  # the second run reused every cell
    assert json.loads(json.dumps(again["verdict"])) == json.loads(json.dumps(res["verdict"]))


def test_actor_slots_never_exceed_what_the_cluster_can_place():
    """More actors than GPUs would stay pending and hang the gate (seen on 2 H200s with 4 seeds)."""
    from spfcore.engine.ray_cells import actor_slots
    from spfcore.sweep import SweepError

    assert actor_slots({"GPU": 2.0, "CPU": 32.0}, 1, 1, seeds=4, max_actors=None) == 2
    assert actor_slots({"GPU": 8.0, "CPU": 32.0}, 1, 1, seeds=3, max_actors=None) == 3
    assert actor_slots({"GPU": 8.0, "CPU": 32.0}, 2, 1, seeds=6, max_actors=None) == 4
    assert actor_slots({"GPU": 8.0, "CPU": 32.0}, 1, 1, seeds=6, max_actors=2) == 2
    assert actor_slots({"CPU": 2.0}, 0, 1, seeds=3, max_actors=None) == 2
    assert actor_slots({"CPU": 3.0}, 0, 2, seeds=3, max_actors=None) == 1
    with pytest.raises(SweepError, match="has 0 GPU"):
        actor_slots({"CPU": 16.0}, 1, 1, seeds=2, max_actors=None)
