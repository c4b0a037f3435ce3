"""Per-cell cost of a sweep cell on a streamed trace, with and without the
prepared stream (:mod:`spfcore.sim.prepared`), interleaved A/B.

A: the cell given its trace's facts but no prepared stream (``spfcore
sweep`` before the stream: every cell reads and keys the trace itself).
B: the cell given the facts and the prepared stream (what ``spfcore sweep``
does now: the cell memory-maps ``OUT/inputs/<key>.stream``).

Each cell runs in a fresh process (as a worker's first cell), the two arms
alternating (A B, then B A, ...) so a slow spell of a shared machine does not
fall on one arm alone. Per cell it prints ``seconds`` (the whole cell),
``cpu_seconds``, ``wall_seconds`` (the replay loop; for A that includes
reading and keying the trace, which is interleaved with it), the process's
peak RSS (``VmHWM``: mapped file pages the process touched count in it,
though they are the page cache's, shared by every worker; not ``ru_maxrss``,
which Linux carries over from the forking parent) and its file-backed
RSS at the end (``RssFile``: shared libraries and the mapped stream), and its
peak private memory (``RssAnon``, sampled every 20 ms: what a worker adds to
the host's memory). Per policy: the mean and a 95% t-interval of B - A over the
pairs. The stream's preparation (once per sweep folder) is timed separately.
Cells A and B are checked identical (timings aside).

    .venv/bin/python benchmarks/bench_prepared_stream.py --trace T.jsonl --num-blocks 26000 \\
        --policies lru,belady_oracle,session_ttl --reps 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, threading
from spfcore import sweep

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return 0.0

peak = [status("RssAnon:")]
stop = threading.Event()

def sample():  # the process's private (anonymous) memory, every 20 ms; the replays release the GIL or yield it
    while not stop.wait(0.02):
        peak[0] = max(peak[0], status("RssAnon:"))

th = threading.Thread(target=sample, daemon=True)
th.start()
cfg, facts = json.loads(sys.argv[1]), json.loads(sys.argv[2])
r = sweep.run_cell(cfg, facts)
stop.set()
th.join()
peak[0] = max(peak[0], status("RssAnon:"))
print(json.dumps({"rec": r, "maxrss_mb": status("VmHWM:"),
                  "rss_file_mb": status("RssFile:"), "anon_peak_mb": peak[0]}))
"""


def _strip(rec: dict) -> dict:
    from spfcore import sweep

    rec = {k: v for k, v in rec.items() if k not in ("host", "pid", "seconds", "cpu_seconds")}
    rec["cell"] = {k: v for k, v in rec["cell"].items() if k not in sweep.TIMING_FIELDS}
    return rec


def _ci(xs: list[float]) -> str:
    m = statistics.mean(xs)
    if len(xs) < 2:
        return f"{m:+.2f} (one pair)"
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36}.get(len(xs), 2.0)
    h = t * statistics.stdev(xs) / len(xs) ** 0.5
    return f"{m:+.2f} [{m - h:+.2f}, {m + h:+.2f}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--num-blocks", type=int, default=26000)
    ap.add_argument("--policies", default="lru,belady_oracle,session_ttl")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--folder", default=None, help="sweep folder for OUT/inputs (default: a temporary one)")
    a = ap.parse_args(argv)

    from spfcore import sweep

    folder = Path(a.folder or tempfile.mkdtemp(prefix="bench_prepared."))
    src = sweep.Source(trace=a.trace)
    ident = sweep._ident_json(src.identity())
    t = time.perf_counter()
    facts = sweep.input_facts(folder, ident, 0, None)
    prep_s = time.perf_counter() - t
    size = sum(p.stat().st_size for p in Path(facts["stream"]).iterdir())
    print(f"trace {a.trace}: {facts['num_requests']:,} requests; prepared stream made (or verified) in "
          f"{prep_s:.1f} s, {size / 2**20:.0f} MiB on disk")
    plain = {k: v for k, v in facts.items() if k != "stream"}
    out: dict = {}
    for rep in range(a.reps):
        for pol in a.policies.split(","):
            (cell,) = sweep.Grid((src,), (0,), (sweep.Variant(pol),), ({"blocks": a.num_blocks},),
                                 ceilings=False).cells()
            arms = [("A", plain), ("B", facts)]
            if rep % 2:
                arms.reverse()
            got = {}
            for arm, f in arms:
                res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cell.config()), json.dumps(f)],
                                     capture_output=True, text=True, check=True)
                got[arm] = json.loads(res.stdout)
                r = got[arm]["rec"]
                assert r["status"] == "ok", r["cell"]
                print(f"rep {rep} {pol:>14} {arm}: cell {r['seconds']:7.2f} s, CPU {r['cpu_seconds']:7.2f} s, "
                      f"replay {r['cell']['wall_seconds']:7.2f} s, peak RSS {got[arm]['maxrss_mb']:6.0f} MiB "
                      f"(file-backed at end {got[arm]['rss_file_mb']:5.0f}), peak private (anonymous) "
                      f"{got[arm]['anon_peak_mb']:6.0f} MiB", flush=True)
            if _strip(got["A"]["rec"]) != _strip(got["B"]["rec"]):
                print(f"MISMATCH {pol}", file=sys.stderr)
                return 1
            out.setdefault(pol, []).append(got)
    print("\nB - A per policy, mean [95% t-interval] over the pairs (negative: the prepared stream is cheaper):")
    for pol, pairs in out.items():
        def d(key, f=lambda g: g["rec"]):
            return [f(p["B"])[key] - f(p["A"])[key] for p in pairs]
        a_cell = statistics.mean(p["A"]["rec"]["seconds"] for p in pairs)
        b_cell = statistics.mean(p["B"]["rec"]["seconds"] for p in pairs)
        print(f"  {pol:>14}: cell s {_ci(d('seconds'))} (A {a_cell:.2f}, B {b_cell:.2f}, x{a_cell / b_cell:.1f}); "
              f"CPU s {_ci(d('cpu_seconds'))}; peak RSS MiB {_ci(d('maxrss_mb', lambda g: g))}; "
              f"peak private MiB {_ci(d('anon_peak_mb', lambda g: g))}")
    print("records identical A vs B (timings aside): yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
