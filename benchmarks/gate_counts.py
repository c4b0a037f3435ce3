"""Count the work a 5-arm x 3-seed gate does outside the engine: simulator
runs (per arm), workload preparations (keys and views computed: calls of
``spfcore.sim.simulator.prepare`` on a raw workload, not the no-op on a
prepared one) and policy discoveries (``spfcore.registry`` scans of the
installed entry points that validate the plugins).

The gate is the ``quick`` preset's workload (16 personas x 512 tokens, 32
sessions x 4 turns, block size 32, pressure 2.3), the default arms, seeds
42, 43, 44, run through :func:`spfcore.gate_runner.run_gate` (or its
successor) with the engine cells left out (``engine_cells`` runs nothing:
the verdict is INCOMPLETE), so the counts are the simulator side and the
orchestration's own; the engine adds one policy construction per cell.

Run (prints one line of figures):

    python benchmarks/gate_counts.py
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    import spfcore.sim as sim_pkg
    from spfcore import registry
    from spfcore.sim import simulator

    counts = collections.Counter()
    sims = collections.Counter()

    # discovery: count the scans that validate plugins (the work, cached or not)
    orig_info = registry._info_from
    orig_discover = registry.discover

    def discover(*a, **k):
        counts["discover_calls"] += 1
        return orig_discover(*a, **k)

    def info_from(*a, **k):
        counts["plugin_validations"] += 1
        return orig_info(*a, **k)

    orig_prepare = simulator.prepare

    def prepare(workload, block_size):
        if not isinstance(workload, simulator.Prepared):
            counts["prepares"] += 1
        return orig_prepare(workload, block_size)

    orig_simulate = simulator.simulate

    def simulate(workload, arm, **kw):
        sims[arm] += 1
        return orig_simulate(workload, arm, **kw)

    registry._info_from, registry.discover = info_from, discover
    simulator.prepare, simulator.simulate, sim_pkg.simulate, sim_pkg.prepare = prepare, simulate, simulate, prepare

    try:
        from spfcore.run.spec import GateConfig  # after issue 12
        from spfcore.run.pipeline import run_gate
    except ImportError:
        from spfcore.gate_runner import GateConfig, run_gate

    flags = {"personas": 16, "prefix_tokens": 512, "sessions": 32, "turns": 4, "query_tokens": 32,
             "output_tokens": 4, "order": "round_robin"}
    arms = ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle")
    cfg = GateConfig(workload="personas", workload_flags=flags, arms=arms, seeds=(42, 43, 44), block_size=32,
                     cache_pressure=2.3, settle=True)
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        res = run_gate(cfg, Path(d) / "results.json", progress=False, plots=False,
                       engine_cells=lambda *a, **k: None)
        wall = time.perf_counter() - t
    out = {"arms": len(arms), "seeds": 3, "simulations": sum(sims.values()), "simulations_by_arm": dict(sims),
           **counts, "wall_s": round(wall, 2), "verdict": res["verdict"]["status"]}
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
