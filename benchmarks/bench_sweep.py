"""Wall time of one ``spfcore sweep`` grid with 1 worker, N local worker
processes and a local Ray cluster of N CPUs, and a check that all three give
the same cells; optionally an extrapolation to a bigger grid.

The trace: a synthetic Mooncake-format trace written by ``spfcore make-trace``
(seed 0, ``--requests`` requests; its write time and size in bytes are
printed), or ``--trace PATH``. Cache sizes: ``--sizes`` fractions of the
trace's distinct blocks, log-spaced 1%..50%.

The grid (``--subset``):

- ``full``: every policy x every size + Belady at each size + the
  infinite-cache cell (the issue's figure: 6 policies x 8 sizes = 57 cells).
- ``diagonal``: a representative subset for a machine too small for the full
  grid: each policy once, policy ``i`` at size ``i`` spread over the sizes
  (so sizes small and large are both timed), Belady at the middle size, and
  the infinite-cache cell.

Each executor runs the same cells (the input checked once first, as
``spfcore sweep`` does; nothing reused between runs); the executors' order
rotates by one each repetition, so a slow spell of a shared machine does not
fall on one of them alone. Prints per run: wall s, cells, cells/s, block
references replayed per second, the 1-minute load average before and after
(a shared machine's other work shows there), and the speed-up over 1 worker
(median of the repetitions); per cell of the 1-worker run: the replay's wall
time and the opening of the input in the cell (the prepared stream, one
keyed pass that also gives the scan and the distinct blocks, is made once per
run by the driver, as ``spfcore sweep`` does, and counted in the run's wall
time, not in a cell's; the cells map it).

``--extrapolate-requests N`` then prints an EXTRAPOLATION (not a
measurement) of the full grid at N requests: each policy's measured replay
time x ``--sizes`` (times are taken as size-independent: the diagonal
measures each policy at one size only) x N / requests (replay time is
linear in the block references replayed; check it with one cell at N), plus
the input's opening x N / requests once; for W workers the
cells are placed longest first on W workers (the ideal, no overhead), then
divided by the parallel efficiency the subset measured (measured speed-up /
ideal speed-up of the subset's cells).

    .venv/bin/python benchmarks/bench_sweep.py                      # 5,000 requests, 3 fast policies, 8 sizes
    # the issue's scale figure, measured as a subset on a small machine and extrapolated:
    .venv/bin/python benchmarks/bench_sweep.py --requests 20000 --subset diagonal \\
        --policies lru,session_ttl,frequency,spf_expected_utility,s3fifo,arc --extrapolate-requests 1000000
    # the full figure, measured (hours on one core; the grid has 57 cells):
    .venv/bin/python benchmarks/bench_sweep.py --requests 1000000 --workers 8 \\
        --policies lru,session_ttl,frequency,spf_expected_utility,s3fifo,arc

Ray's start-up (``ray.init``, a few seconds) is outside the timed part; its
worker processes start inside it (as they would for a real first sweep).
"""

from __future__ import annotations

import argparse
import heapq
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _key(rec: dict) -> tuple:
    """What must be equal across executors: status, size and the cell less its timings."""
    c = {k: v for k, v in rec["cell"].items() if not k.endswith("_seconds")}
    return rec["status"], rec["num_blocks"], c


def _cells(grid_mod, src, policies: list[str], fracs: list[float], subset: str) -> list:
    sweep = grid_mod
    sizes = [{"fraction": f} for f in fracs]
    if subset == "full":
        return sweep.Grid((src,), (0,), tuple(sweep.Variant(p) for p in policies), tuple(sizes)).cells()
    out = []
    for i, p in enumerate(policies):  # policy i at size i, spread over the sizes
        j = round(i * (len(sizes) - 1) / max(1, len(policies) - 1))
        out += sweep.Grid((src,), (0,), (sweep.Variant(p),), (sizes[j],), ceilings=False).cells()
    # the infinite-cache cell and Belady at the middle size
    out += sweep.Grid((src,), (0,), (sweep.Variant(sweep.BELADY),), (sizes[len(sizes) // 2],)).cells()
    return out


def _lpt(times: list[float], workers: int) -> float:
    """Makespan of ``times`` placed longest first on ``workers`` (Graham's LPT list scheduling)."""
    loads = [0.0] * workers
    for t in sorted(times, reverse=True):
        heapq.heapreplace(loads, loads[0] + t)
    return max(loads)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--trace", default=None, help="an existing trace (default: spfcore make-trace --requests)")
    ap.add_argument("--policies", default="lru,session_ttl,frequency")
    ap.add_argument("--sizes", type=int, default=8, help="cache sizes, log-spaced fractions 1%%..50%%")
    ap.add_argument("--subset", choices=("full", "diagonal"), default="full")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--extrapolate-requests", type=int, default=None, metavar="N")
    a = ap.parse_args(argv)

    from spfcore import sweep

    tmp = Path(tempfile.mkdtemp(prefix="bench_sweep."))
    if a.trace is None:
        trace = tmp / "trace.jsonl"
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "spfcore.cli", "make-trace", str(trace), "--requests",
                        str(a.requests), "--seed", "0"], check=True, stdout=subprocess.DEVNULL)
        made = f"written by spfcore make-trace in {time.perf_counter() - t:.1f} s"
    else:
        trace, made = Path(a.trace), "given"
        with open(trace, "rb") as f:
            a.requests = sum(1 for line in f if line.strip())
    print(f"trace: {trace}: {a.requests:,} requests, {trace.stat().st_size:,} bytes, {made}")
    lo, hi = 0.01, 0.5
    fracs = [round(lo * (hi / lo) ** (i / max(1, a.sizes - 1)), 4) for i in range(a.sizes)]
    src = sweep.Source(trace=str(trace))
    policies = a.policies.split(",")
    cells = _cells(sweep, src, policies, fracs, a.subset)
    check_grid = sweep.Grid((src,), (0,), (sweep.Variant(policies[0]),), ({"fraction": fracs[0]},))
    configs = [c.config() for c in cells]
    print(f"grid ({a.subset}): {len(cells)} cells: " + ", ".join(
        f"{c.policy}@{sweep.size_label(c.size)}" for c in cells) if a.subset == "diagonal" else
        f"grid (full): {a.policies} + belady_oracle x {a.sizes} sizes ({', '.join(f'{f:g}' for f in fracs)} of "
        f"the distinct blocks) + infinite = {len(cells)} cells")
    print(f"machine: {os.cpu_count()} CPUs; code: this tree's spfcore ({Path(sweep.__file__).parent})")
    execs = [("1 worker", dict(workers=1)), (f"{a.workers} local workers", dict(workers=a.workers))]
    if not a.no_ray:
        import ray

        t = time.perf_counter()
        ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False)
        print(f"ray.init (local, {a.workers} CPUs): {time.perf_counter() - t:.1f} s (not timed below)")
        execs.append((f"Ray local, {a.workers} CPUs", dict(ray_address="auto")))
    walls: dict[str, list] = {name: [] for name, _ in execs}
    ref = refs_total = one = None
    one_facts_s = 0.0
    for rep in range(a.reps):
        order = execs[rep % len(execs):] + execs[:rep % len(execs)]
        for name, kw in order:
            sweep._open.cache_clear()  # no input opened by an earlier run
            load0 = os.getloadavg()[0]
            t0 = time.perf_counter()
            sweep.check_inputs(check_grid)
            tf = time.perf_counter()
            with tempfile.TemporaryDirectory() as facts_dir:  # as run_sweep: the trace prepared once, mapped by cells
                facts = sweep.cell_facts(facts_dir, configs)
                facts_s = time.perf_counter() - tf
                if kw.get("workers", 1) > 1 or "ray_address" in kw:
                    sweep._open.cache_clear()
                sweep._open_known.cache_clear()
                recs = {r["key"]: r for r in sweep.execute(configs, facts=facts, **kw)}
                wall = time.perf_counter() - t0
            load = f"load avg {load0:.1f} -> {os.getloadavg()[0]:.1f}"
            got = {k: _key(r) for k, r in recs.items()}
            failed = sum(r["status"] != "ok" for r in recs.values())
            if ref is None:
                ref = got
                refs_total = sum(r["cell"].get("block_refs", 0) for r in recs.values())
            if name == "1 worker" and one is None:
                one, one_facts_s = recs, facts_s
            same = got == ref
            walls[name].append(wall)
            print(f"rep {rep} {name:>22}: {wall:8.1f} s (of which the driver's prepared stream "
                  f"{facts_s:.1f} s)  {len(recs)} cells ({failed} failed)  "
                  f"{len(recs) / wall:6.3f} cells/s  {refs_total / wall:>10,.0f} block refs/s  "
                  f"{load}  cells identical to the first run: {same}", flush=True)
            if not same:
                print("MISMATCH", file=sys.stderr)
                return 1
    base = statistics.median(walls[execs[0][0]])
    print("\nmedian wall time (s) and speed-up over 1 worker:")
    for name, ws in walls.items():
        m = statistics.median(ws)
        print(f"  {name:>22}: {m:8.1f} s  x{base / m:.2f}  (runs: {', '.join(f'{w:.1f}' for w in ws)})")
    print(f"block references replayed per grid: {refs_total:,}")
    replay: dict[str, list] = {}
    cpu: dict[str, list] = {}
    opening = opening_cpu = 0.0
    print("\nper cell, 1-worker run (replay = the simulator's loop; open = the prepared stream, made once; "
          "CPU = this process's CPU time, which the machine's other work does not inflate):")
    for r in sorted(one.values(), key=lambda r: -r["cell"].get("wall_seconds", 0)):
        c = r["config"]
        w = r["cell"].get("wall_seconds", r["seconds"])
        share = w / r["seconds"] if r["seconds"] else 1.0  # the replay's share of the cell, for its CPU time
        opening = max(opening, r["seconds"] - w + one_facts_s)  # the cell's own opening + the driver's passes
        opening_cpu = max(opening_cpu, r["cpu_seconds"] * (1 - share) + one_facts_s)
        replay.setdefault(c["policy"], []).append(w)
        cpu.setdefault(c["policy"], []).append(r["cpu_seconds"] * share)
        print(f"  {c['policy']:>22} @ {sweep.size_label(c['size']):>6} ({r['num_blocks'] or 0:>9,} blocks): replay "
              f"{w:7.1f} s wall, {r['cpu_seconds'] * share:7.1f} s CPU; whole cell {r['seconds']:7.1f} s; "
              f"block hit rate {r['cell'].get('block_hit_rate')}")
    if a.extrapolate_requests:
        k = a.extrapolate_requests / a.requests

        def grid_times(per: dict) -> list:
            m = {p: statistics.mean(v) * k for p, v in per.items()}
            return [m[p] for p in policies for _ in fracs] + [m[sweep.BELADY] for _ in fracs] + [m[sweep.INFINITE]]

        full, full_cpu = grid_times(replay), grid_times(cpu)
        print(f"\nEXTRAPOLATION, not a measurement: the full grid ({len(policies)} policies x {a.sizes} sizes + "
              f"Belady x {a.sizes} + infinite = {len(full)} cells) at {a.extrapolate_requests:,} requests "
              f"(x{k:g} the measured trace), replay times size-independent and linear in requests.")
        print(f"  (a) wall time on this machine as loaded during the run above:")
        one_w = sum(full) + opening * k
        print(f"  {'1 worker':>22}: {one_w:10,.0f} s ({one_w / 3600:.1f} h)")
        sub = [r["cell"].get("wall_seconds", r["seconds"]) for r in one.values()]
        for name, ws in walls.items():
            if name == "1 worker":
                continue
            ideal_sub = sum(sub) / _lpt(sub, a.workers)
            eff = (base / statistics.median(ws)) / ideal_sub
            est = (_lpt(full, a.workers) + opening * k) / eff
            print(f"  {name:>22}: {est:10,.0f} s ({est / 3600:.1f} h)  (ideal {a.workers}-worker placement "
                  f"{_lpt(full, a.workers):,.0f} s, / the subset's parallel efficiency {eff:.2f})")
        print("  (b) on idle cores (from CPU time; W workers: the cells placed longest first, no overhead: a "
              "lower bound):")
        for w in sorted({1, a.workers, 8}):
            est = _lpt(full_cpu, w) + opening_cpu * k
            print(f"  {w:>14} worker(s): {est:10,.0f} s ({est / 3600:.1f} h)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
