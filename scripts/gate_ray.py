"""The gate with its engine cells on Ray actors, one engine per GPU
(:mod:`spfcore.engine.ray_cells`), against the same gate with one engine in
this process: wall time of the engine part, and the verdicts.

For a machine with G GPUs (measure on 2)::

    python scripts/gate_ray.py --gpus 2 --model llama-3.2-3b --out runs/gate-ray

runs ``--preset`` (default ``quick``: the seed's shape with 16x shorter
prompts) with ``--seeds`` (default 42,43,44,45: two per GPU, and enough for a verdict) twice into fresh folders, the Ray
run first then the serial one (``--order serial,ray`` swaps them), and prints
the engine part's wall time of each and the speed-up. A local Ray of G GPUs is
started here (``--address`` to join a cluster instead). Each run resumes from
its folder when started again (``--time-limit`` for machines lent by the
minute).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--model", default=None, help="Model preset or folder (default: the preset's).")
    ap.add_argument("--seeds", default="42,43,44,45")
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the local Ray (0: CPU actors, for a dry run)")
    ap.add_argument("--address", default="local")
    ap.add_argument("--order", default="ray,serial")
    ap.add_argument("--out", default="runs/gate-ray")
    ap.add_argument("--time-limit", type=float, default=None)
    a = ap.parse_args(argv)

    from spfcore import presets
    from spfcore.engine.ray_cells import RayEngineCells
    from spfcore.run import pipeline, spec
    from spfcore.sweep import ray_connect

    p = presets.PRESETS[a.preset]
    engine = dict(p["engine"], **({"model": a.model} if a.model else {}))
    cfg = spec.GateConfig(workload=p["workload"], workload_flags=p["workload_flags"],
                                 seeds=tuple(int(s) for s in a.seeds.split(",")), block_size=presets.block_size(p),
                                 cache_pressure=p["cache_pressure"], engine=engine, roles=presets.SEED_ROLES,
                                 preset=a.preset, command=" ".join(sys.argv))
    if "ray" in a.order:
        print(ray_connect(a.address, None) if a.address != "local" else _local(a.gpus))
    walls = {}
    for kind in a.order.split(","):
        t = {}

        def timed(*args, _inner=(RayEngineCells(a.address, num_gpus=1 if a.gpus else 0) if kind == "ray"
                                 else pipeline.run_engine_cells), **kw):
            t0 = time.monotonic()
            try:
                return _inner(*args, **kw)
            finally:
                t["engine_s"] = time.monotonic() - t0

        out = Path(a.out) / kind / "results.json"
        t0 = time.monotonic()
        res = pipeline.run_gate(cfg, out, engine_cells=timed, time_limit_s=a.time_limit)
        walls[kind] = t.get("engine_s")
        where = sorted({json.dumps(c.get("runner")) for c in res["cells"]})
        print(f"{kind}: verdict {res['verdict']['status']}, engine part {walls[kind]:.1f} s, whole gate "
              f"{time.monotonic() - t0:.1f} s, {len(res['cells'])} engine cells, runners {where}")
    if {"ray", "serial"} <= set(walls):
        print(f"engine part: serial {walls['serial']:.1f} s, Ray ({a.gpus} GPUs) {walls['ray']:.1f} s, "
              f"speed-up x{walls['serial'] / walls['ray']:.2f}")
    return 0


def _local(gpus: int) -> str:
    import ray

    ray.init(num_gpus=gpus, num_cpus=None if gpus else 2, include_dashboard=False, log_to_driver=False)
    return f"local Ray: {ray.cluster_resources()}"


if __name__ == "__main__":
    sys.exit(main())
