"""Simulator speed: block references per second, replaying the whole Mooncake
conversation trace (hash ids, 512 tokens per block) sequentially.

A block reference is one prompt block of one request (288,500 in the trace).
Each arm is replayed ``--repeat`` times on a cache of ``--num-blocks`` usable
blocks (default 9,139 = 5% of the trace's unique blocks), the arms interleaved
(one round runs every arm once); the best run counts (``M refs/s``), the
median is printed beside it (``median``, M refs/s) to show the noise, and the
first run's time (``first s``: for the first compiled replay of the process
(``lru``, ``belady_oracle``, ``frequency``) it includes loading numba and
interning the trace's keys, kept on the prepared workload for later runs;
``frequency``'s first run also loads its own kernel). Each time covers the whole ``simulate`` call: the policy's
construction and, for ``belady_oracle``, building its future index.
Reading the trace and precomputing keys (``spfcore.sim.prepare``, once per
workload) are timed separately. Targets: >= 3M refs/s for lru, >= 1M/s for
plugins. Prints figures; asserts nothing.

``--floors`` adds two policies that do nothing, to show what the runtime
itself costs a plugin (the floor under any Python policy's refs/s):
``floor-observe`` implements every observation hook (arrived, hit, stored,
finished, evicted) as a no-op (vLLM's order kept, the evictor's plain
queue); ``floor-score`` adds a score hook answering ``None`` (the scored
evictor's compiled heap, value 0 for every block: vLLM's order again).

    .venv/bin/python benchmarks/bench_sim.py [--arms lru,belady_oracle] [--floors] [--profile lru]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

import attrs

from spfcore import hookimpl, registry
from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import _cell, _no_gc, _run_sequential
from spfcore.workloads.traces import read_mooncake

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


class FloorObserve:
    """Every observation hook, doing nothing."""

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        pass

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        pass

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        pass

    @hookimpl
    def spfcore_request_finished(self, request, now):
        pass

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        pass


class FloorScore(FloorObserve):
    """... and a score hook answering None (vLLM's order through the scored evictor)."""

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return None


FLOORS = {"floor-observe": FloorObserve, "floor-score": FloorScore}


def simulate_floor(prep, arm: str, num_blocks: int) -> dict:
    """``simulate`` (sequential) of a floor policy, built without an entry point."""
    pm = registry.new_plugin_manager()
    pm.register(FLOORS[arm](), name=arm)
    rt = PolicyRuntime(pm, num_blocks, prep.block_size, policy_name=arm)
    rows: list = []
    with _no_gc():
        t = time.perf_counter()
        totals = _run_sequential(prep.plans, rt, num_blocks, prep.block_size, rows)
        wall = time.perf_counter() - t
    return _cell(arm, 0, "sequential", num_blocks, prep.block_size, totals, rt, wall, rows)


def run(prep, arm: str, num_blocks: int) -> dict:
    if arm in FLOORS:
        return simulate_floor(prep, arm, num_blocks)
    return simulate(prep, arm, num_blocks=num_blocks, block_size=512)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--arms", default=None, help="comma-separated; default: every installed ok policy")
    ap.add_argument("--floors", action="store_true", help="add the do-nothing policies floor-observe, floor-score")
    ap.add_argument("--num-blocks", type=int, default=9139, help="usable blocks (the null block is added)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", default=None, help="arm to run once under cProfile (top 15 by own time)")
    a = ap.parse_args()

    t = time.perf_counter()
    wl = read_mooncake(a.trace)
    t_read = time.perf_counter() - t
    t = time.perf_counter()
    prep = prepare(wl, 512)
    t_prep = time.perf_counter() - t
    refs = sum(len(v.block_keys) for v in prep.views)
    print(f"trace {a.trace.name}: {len(wl.requests)} requests, {refs} block refs; "
          f"read {t_read:.2f} s, prepare {t_prep:.2f} s")
    arms = a.arms.split(",") if a.arms else [p.name for p in registry.discover() if p.status == "ok"]
    arms += list(FLOORS) if a.floors else []
    print(f"{'arm':<24}{'best s':>9}{'cpu s':>9}{'M refs/s':>10}{'median':>9}{'first s':>9}{'hit rate':>10}"
          f"{'evictions':>11}{'hook s':>9}")
    wall: dict[str, list] = {arm: [] for arm in arms}
    cpu: dict[str, list] = {arm: [] for arm in arms}
    recs = {}
    for _ in range(a.repeat):  # interleaved: every arm once per round, so load changes hit all arms alike
        for arm in arms:
            t, c = time.perf_counter(), time.process_time()
            recs[arm] = run(prep, arm, a.num_blocks + 1)
            wall[arm].append(time.perf_counter() - t)
            cpu[arm].append(time.process_time() - c)
    for arm in arms:
        best, med, rec = min(wall[arm]), statistics.median(wall[arm]), recs[arm]
        print(f"{arm:<24}{best:>9.3f}{min(cpu[arm]):>9.3f}{refs / best / 1e6:>10.2f}{refs / med / 1e6:>9.2f}"
              f"{wall[arm][0]:>9.3f}{rec['block_hit_rate']:>10.4f}{rec['evictions']:>11}{rec['hook_seconds']:>9.3f}")
    if a.profile:
        prof = cProfile.Profile()
        prof.runcall(run, prep, a.profile, a.num_blocks + 1)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
