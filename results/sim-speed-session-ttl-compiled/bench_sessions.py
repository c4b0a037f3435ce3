"""Simulator speed on workloads whose requests carry session ids (the Mooncake
trace has none): block references per second of ``simulate`` (sequential),
arms interleaved, best of ``--repeat`` (median beside it), first run's time.
Runs on any tree (it uses the public ``simulate`` only).

    PYTHONPATH=<tree>:<its plugins> python bench_sessions.py [--arms lru,session_ttl] [--repeat 3]

Workloads (block size 16, cache = distinct blocks / 2.3):
``personas``: 16 personas x 2,048-token prefixes, 512 sessions x 4 turns
(2,048 requests, ~290k block refs); ``multiturn``: 64 sessions x 8 turns,
history carried (each turn's prompt holds the session's earlier turns).
"""

from __future__ import annotations

import argparse
import statistics
import time

from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make

WORKLOADS = {
    "personas": dict(personas=16, prefix_tokens=2048, sessions=512, turns=4, query_tokens=128, output_tokens=32),
    "multiturn": dict(personas=8, prefix_tokens=1024, sessions=64, turns=8, query_tokens=128, output_tokens=64),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default="lru,session_ttl")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    arms = a.arms.split(",")
    print(f"{'workload':<11}{'arm':<14}{'refs':>9}{'blocks':>8}{'best s':>9}{'M refs/s':>10}{'median':>9}"
          f"{'first s':>9}{'hit rate':>10}{'evictions':>11}{'refused':>9}")
    for name, flags in WORKLOADS.items():
        wl = make(name, seed=42, **flags)
        prep = prepare(wl, 16)
        refs = sum(len(v.block_keys) for v in prep.views)
        nb = max(max(prep.blocks_needed) + 1, int(len({k for v in prep.views for k in v.block_keys}) / 2.3))
        wall: dict = {arm: [] for arm in arms}
        recs = {}
        for _ in range(a.repeat):
            for arm in arms:
                t = time.perf_counter()
                recs[arm] = simulate(prep, arm, num_blocks=nb, block_size=16)
                wall[arm].append(time.perf_counter() - t)
        for arm in arms:
            best, med, rec = min(wall[arm]), statistics.median(wall[arm]), recs[arm]
            print(f"{name:<11}{arm:<14}{refs:>9}{nb:>8}{best:>9.3f}{refs / best / 1e6:>10.2f}{refs / med / 1e6:>9.2f}"
                  f"{wall[arm][0]:>9.3f}{rec['block_hit_rate']:>10.4f}{rec['evictions']:>11}"
                  f"{rec['pins_refused']:>9}", flush=True)


if __name__ == "__main__":
    main()
