"""The gate with its engine cells on Ray actors, one engine per GPU
(:mod:`spfcore.engine.ray_cells`), against the same gate with one engine in
this process: wall time of the engine part, and the verdicts.

For a machine with G GPUs (measure on 2)::

    python scripts/gate_ray.py --gpus 2 --model llama-3.2-3b --out runs/gate-ray

runs ``--preset`` (default ``quick``: the seed's shape with 16x shorter
prompts) with ``--seeds`` (default 42,43,44,45: two per GPU, and enough for a verdict) twice into fresh folders, the Ray
run first then the serial one (``--order serial,ray`` swaps them), and prints
the engine part's wall time of each and the speed-up. A local Ray of G GPUs is
started here (``--address`` to join a cluster instead) and shut down after
the Ray run, so the serial engine finds its GPU free. Each run resumes from
its folder when started again (``--time-limit`` for machines lent by the
minute). The speed-up is printed only when both runs finished the same
engine cells without an error (an error cell is quick and would flatter
either side: the first H200 tries counted them).

CPU dry run of this script (CPU actors, the embedded tiny model, a small
workload)::

    python scripts/gate_ray.py --gpus 0 --seeds 1,2 --set personas=4 --set prefix_tokens=256 --set sessions=4 \
        --set turns=2 --out /tmp/gate-ray-cpu
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
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a workload flag of the preset (e.g. for a CPU dry run)")
    a = ap.parse_args(argv)

    from spfcore import presets
    from spfcore.engine.ray_cells import RayEngineCells
    from spfcore.run import pipeline, spec
    from spfcore.sweep import ray_connect

    from spfcore.workloads.options import parse_sets

    p = presets.PRESETS[a.preset]
    engine = dict(p["engine"], **({"model": a.model} if a.model else {}))
    flags = {**p["workload_flags"], **parse_sets(p["workload"], a.sets)}
    cfg = spec.GateConfig(workload=p["workload"], workload_flags=flags,
                                 seeds=tuple(int(s) for s in a.seeds.split(",")), block_size=presets.block_size(p),
                                 cache_pressure=p["cache_pressure"], engine=engine, roles=presets.SEED_ROLES,
                                 preset=a.preset, command=" ".join(sys.argv))
    if "ray" in a.order:
        print(ray_connect(a.address, None) if a.address != "local" else _local(a.gpus))
    walls, done = {}, {}
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
        ok = {(c["arm"], c["seed"]) for c in res["cells"] if not c.get("error")}
        errors = [f"{c['arm']}/{c['seed']}: {str(c['error'])[:200]}" for c in res["cells"] if c.get("error")]
        done[kind] = (ok, errors)
        where = sorted({json.dumps(c.get("runner")) for c in res["cells"] if c.get("runner")})
        engine_s = "-" if walls[kind] is None else f"{walls[kind]:.1f} s"  # None: every cell reused
        cells_s = sum(c.get("wall_s") or 0 for c in res["cells"] if not c.get("error"))
        print(f"{kind}: verdict {res['verdict']['status']}, engine part {engine_s}, whole gate "
              f"{time.monotonic() - t0:.1f} s, engine cells {len(ok)} ok / {len(errors)} failed of "
              f"{len(cfg.arms) * len(cfg.seeds)} (their own wall time summed: {cells_s:.1f} s; the rest of the "
              f"engine part is engine starts and warm-ups), runners {where}", flush=True)
        for e in errors:
            print(f"  error cell {e}")
        if kind == "ray" and a.address == "local":
            import ray

            ray.shutdown()  # the actors' GPUs are free for the serial engine
    if {"ray", "serial"} <= set(walls):
        full = {(arm, s) for arm in cfg.arms for s in cfg.seeds}
        if all(done[k] == (full, []) for k in ("ray", "serial")) and None not in walls.values():
            one, many = ("1 GPU", f"{a.gpus} GPUs") if a.gpus else ("one CPU engine", "CPU actors")
            print(f"engine part, the same {len(full)} cells without error: serial ({one}) {walls['serial']:.1f} s, "
                  f"Ray ({many}) {walls['ray']:.1f} s, speed-up x{walls['serial'] / walls['ray']:.2f}")
        else:
            print("no figure: the two runs did not both finish every engine cell without error (see above)")
            return 1
    return 0


def _local(gpus: int) -> str:
    import ray

    ray.init(num_gpus=gpus, num_cpus=None if gpus else 2, include_dashboard=False, log_to_driver=False)
    return f"local Ray: {ray.cluster_resources()}"


if __name__ == "__main__":
    sys.exit(main())
