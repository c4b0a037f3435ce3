"""Seconds per sweep cell, as the scale grid runs them (issue 19's figure;
``scripts/gpu_sweep_scale.sh``): each cell through :func:`spfcore.sweep.run_cell`
on the trace's prepared, memory-mapped stream (made once in ``--folder``),
one after the other in this process.

Prints one line per cell: policy, cache size (blocks), ``seconds`` (the
whole cell), ``cpu`` (its CPU seconds: what a shared machine's other work
inflates least), ``replay`` (the simulator's ``wall_seconds``), the token hit
rate, the evictions, and a short SHA-256 of the cell's record less its
timings (the same on two trees: the same decisions' outcome). With
``--profile`` each cell also prints its top functions by own time.

For an A/B of two trees, run it with each tree's ``PYTHONPATH`` in turn
(interleaved rounds) on the same trace and folder. Prints figures; asserts
nothing.

    PYTHONPATH=<tree>:<its plugins> python benchmarks/bench_scale_cells.py TRACE \\
        --policies arc,s3fifo --num-blocks 11500,133000 [--folder /tmp/scale-bench] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import pstats
from pathlib import Path

from spfcore import sweep
from spfcore.workloads.traces import TraceError


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--policies", default="arc,s3fifo,frequency")
    ap.add_argument("--num-blocks", default="11500,59000,133000,300000")
    ap.add_argument("--folder", type=Path, default=Path("/tmp/spfcore-bench-scale"),
                    help="where the prepared stream is kept (made on the first run)")
    ap.add_argument("--profile", action="store_true", help="cProfile each cell (slower)")
    a = ap.parse_args()
    try:
        sizes = tuple({"blocks": int(n)} for n in a.num_blocks.split(","))
    except ValueError:
        ap.error(f"--num-blocks {a.num_blocks!r}: expected comma-separated ints, e.g. 11500,133000")
    try:  # a bad trace, size or folder: one usage error naming it (exit 2), not a traceback
        grid = sweep.Grid(sources=(sweep.Source(str(a.trace)),), seeds=(42,),
                          variants=tuple(sweep.Variant(p) for p in a.policies.split(",")),
                          sizes=sizes, ceilings=False)
        configs = [c.config() for c in grid.cells()]
        facts = sweep.cell_facts(a.folder, configs)
    except (sweep.SweepError, TraceError) as exc:
        ap.error(str(exc))
    failed = 0
    for c, f in zip(configs, facts):
        prof = cProfile.Profile() if a.profile else None
        if prof:
            prof.enable()
        rec = sweep.run_cell(c, f)
        if prof:
            prof.disable()
        cell = rec["cell"]
        if rec["status"] != "ok":
            print(c["policy"], c["size"], "ERROR", cell, flush=True)
            failed += 1
            continue
        same = {k: v for k, v in cell.items() if "second" not in k}
        digest = hashlib.sha256(json.dumps(same, sort_keys=True, default=str).encode()).hexdigest()[:12]
        print(f"{c['policy']:>10} {rec['num_blocks']:>7} seconds {rec['seconds']:7.2f} cpu {rec['cpu_seconds']:7.2f} "
              f"replay {cell.get('wall_seconds', float('nan')):7.2f} token_hit {cell['token_hit_rate']:.6f} "
              f"evictions {cell['evictions']} digest {digest}", flush=True)
        if prof:
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            print(s.getvalue(), flush=True)
    if failed:
        raise SystemExit(f"{failed} of {len(configs)} cell(s) failed (ERROR lines above)")


if __name__ == "__main__":
    main()
