"""Dump a simulator-only 5x3 gate (quick workload, sequential and timed) as sorted JSON
(cells without timings, ceilings, criteria), to compare two trees byte for byte:

    PYTHONPATH=<tree>:<its plugins> python benchmarks/gate_sim_digest.py out-<tree>.json; cmp out-a.json out-b.json
"""
import argparse
import json
import tempfile
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("out", type=Path, help="the JSON file to write")
a = ap.parse_args()

try:
    from spfcore.run.pipeline import run_gate
    from spfcore.run.spec import GateConfig
except ImportError:  # a tree before issue 12
    from spfcore.gate_runner import GateConfig, run_gate
flags = {"personas": 16, "prefix_tokens": 512, "sessions": 32, "turns": 4, "query_tokens": 32, "output_tokens": 4, "order": "round_robin"}
arms = ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle")
out = {}
for mode in ("sequential", "timed"):
    cfg = GateConfig(workload="personas", workload_flags=flags, arms=arms, seeds=(42, 43, 44), block_size=32, cache_pressure=2.3, settle=True, mode=mode)
    with tempfile.TemporaryDirectory() as d:
        res = run_gate(cfg, Path(d) / "results.json", progress=False, plots=False, engine_cells=lambda *a, **k: None)
    sim = res["sim"]
    cells = sorted(({k: v for k, v in c.items() if "second" not in k and k not in ("wall_s",)} for c in sim["cells"]), key=lambda c: (c["arm"], c["seed"]))
    out[mode] = {"cells": cells, "ceilings": sorted(sim["ceilings"], key=lambda c: c["seed"]), "verdict": res["verdict"]["criteria"]}
a.out.write_text(json.dumps(out, sort_keys=True, default=str))
