"""Wall time of one ``spfcore sweep`` grid with 1 worker, N local worker
processes and a local Ray cluster of N CPUs, and a check that all three give
the same cells.

The grid: a synthetic Mooncake-format trace (``spfcore make-trace``, seed 0,
``--requests`` requests, streamed), ``--policies`` x ``--sizes`` cache sizes
(fractions of the trace's distinct blocks, log-spaced 1%..50%) + Belady at
each size + the infinite-cache cell. Each executor runs the whole grid into
a fresh folder (nothing reused); the executors' order rotates by one each
repetition, so a slow spell of a shared machine does not fall on one of them
alone. Prints per run: wall s, cells, cells/s, block references replayed per
second, the 1-minute load average before and after (a shared machine's other
work shows there), and the speed-up over 1 worker (median of the repetitions).

    .venv/bin/python benchmarks/bench_sweep.py                      # 5,000 requests, 3 fast policies, 8 sizes
    .venv/bin/python benchmarks/bench_sweep.py --requests 1000000 --workers 8 \\
        --policies lru,session_ttl,frequency,spf_expected_utility   # the issue's scale, on a bigger machine

Ray's start-up (``ray.init``, a few seconds) is outside the timed part; its
worker processes start inside it (as they would for a real first sweep).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _cells(folder: Path) -> dict:
    out = {}
    for p in (folder / "cells").glob("*.json"):
        r = json.loads(p.read_text())
        c = {k: v for k, v in r["cell"].items() if not k.endswith("_seconds")}
        out[r["key"]] = (r["status"], r["num_blocks"], c)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--policies", default="lru,session_ttl,frequency")
    ap.add_argument("--sizes", type=int, default=8, help="cache sizes, log-spaced fractions 1%%..50%%")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--no-ray", action="store_true")
    a = ap.parse_args(argv)

    from spfcore import sweep
    from spfcore.workloads.synth import write_synthetic

    tmp = Path(tempfile.mkdtemp(prefix="bench_sweep."))
    trace = tmp / "trace.jsonl"
    t = time.perf_counter()
    write_synthetic(trace, a.requests, 0)
    print(f"trace: {a.requests:,} requests, {trace.stat().st_size / 1e6:.1f} MB, written in "
          f"{time.perf_counter() - t:.1f} s")
    lo, hi = 0.01, 0.5
    fracs = [round(lo * (hi / lo) ** (i / max(1, a.sizes - 1)), 4) for i in range(a.sizes)]
    grid = sweep.Grid((sweep.Source(trace=str(trace)),), (0,),
                      tuple(sweep.Variant(p) for p in a.policies.split(",")),
                      tuple({"fraction": f} for f in fracs))
    n = len(grid.cells())
    print(f"grid: {a.policies} + belady_oracle x {a.sizes} sizes ({', '.join(f'{f:g}' for f in fracs)} of the "
          f"distinct blocks) + infinite = {n} cells; machine: {os.cpu_count()} CPUs")
    execs = [("1 worker", dict(workers=1)), (f"{a.workers} local workers", dict(workers=a.workers))]
    if not a.no_ray:
        import ray

        t = time.perf_counter()
        ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False)
        print(f"ray.init (local, {a.workers} CPUs): {time.perf_counter() - t:.1f} s (not timed below)")
        execs.append((f"Ray local, {a.workers} CPUs", dict(ray_address="auto")))
    walls: dict[str, list] = {name: [] for name, _ in execs}
    ref = None
    refs_total = None
    for rep in range(a.reps):
        order = execs[rep % len(execs):] + execs[:rep % len(execs)]
        for name, kw in order:
            folder = tmp / f"{name.replace(' ', '_').replace(',', '')}-{rep}"
            load0 = os.getloadavg()[0]
            out = sweep.run_sweep(grid, folder, **kw)
            load = f"load avg {load0:.1f} -> {os.getloadavg()[0]:.1f}"
            cells = _cells(folder)
            if ref is None:
                ref = cells
                refs_total = sum(c[2].get("block_refs", 0) for c in cells.values())
            same = cells == ref
            walls[name].append(out.seconds)
            print(f"rep {rep} {name:>22}: {out.seconds:8.1f} s  {out.ran} cells ({out.failed} failed)  "
                  f"{out.ran / out.seconds:6.2f} cells/s  {refs_total / out.seconds:>10,.0f} block refs/s  "
                  f"{load}  cells identical to the first run: {same}")
            if not same:
                print("MISMATCH", file=sys.stderr)
                return 1
    base = statistics.median(walls[execs[0][0]])
    print("\nmedian wall time (s) and speed-up over 1 worker:")
    for name, ws in walls.items():
        m = statistics.median(ws)
        print(f"  {name:>22}: {m:8.1f} s  x{base / m:.2f}  (runs: {', '.join(f'{w:.1f}' for w in ws)})")
    print(f"block references replayed per grid: {refs_total:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
