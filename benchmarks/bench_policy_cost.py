"""spfcore's time per request on the engine's hot path, measured without an
engine: the simulator drives the same :class:`~spfcore.runtime.PolicyRuntime`
events (arrival, hit, store, allocation, finish, release) as the vLLM adapter
does, so ``policy_seconds / num_requests`` of a sequential replay is the
runtime's part of the gate's ``policy ms/req`` column (hooks, evictor,
bookkeeping and ``touch``; the adapter's own block mapping is not in it), with
warm CPU caches and the simulator's event pattern (see ``--engine-events``).

Default workload: the seed's, at full scale (16 personas x 8192 tokens, 32
sessions x 4 turns, 128-token queries, 32 output tokens, round robin, block
size 16, 3,561 blocks = pressure 2.3): 128 requests of ~520 blocks each, the
scale of the H200 gate (target: <= 0.5 ms per request for every shipped arm,
issue 11). Timed by default with this process's CPU time (``--wall-clock``:
wall time, as the gate), so other processes' load does not inflate it. Arms interleaved, ``--repeat`` rounds; the best round per arm
counts and the median is printed beside it. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_policy_cost.py [--arms lru,session_ttl] [--repeat 5]

The simulator's event pattern is not the engine's: vLLM prefills in chunks
(``max_num_batched_tokens``: one ``evict`` + ``stored`` per chunk), frees a
request's hashless and cached blocks in two calls, and touches hit blocks one
by one; and between two scheduler steps the model runs, so the runtime starts
every step with cold CPU caches. ``--engine-events FILE`` replays instead the
runtime calls recorded in a real engine (``benchmarks/engine_call_profile.py
record FILE``, step boundaries marked) into a fresh runtime per arm, hot and,
with ``--thrash-mb M``, with M MiB of memory written at every engine step
(untimed): the CPU stand-in for the engine's cold caches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from spfcore import registry, runtime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.workloads.generators import make


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default=None, help="comma-separated; default: every installed ok policy")
    ap.add_argument("--prefix-tokens", type=int, default=8192)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--num-blocks", type=int, default=3561, help="null block included (the gate's 2.3x)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--wall-clock", action="store_true",
                    help="time with perf_counter (as the gate does) instead of this process's CPU time; "
                         "CPU time ignores other processes' load but adds ~0.3 us per timed call")
    ap.add_argument("--engine-events", default=None, metavar="FILE",
                    help="replay the engine streams recorded by benchmarks/engine_call_profile.py record FILE")
    ap.add_argument("--thrash-mb", type=int, default=32,
                    help="with --engine-events: MiB written at every engine step (0: hot only) [32]")
    a = ap.parse_args()
    if a.engine_events:
        import sys

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import engine_call_profile

        engine_call_profile.compare(argparse.Namespace(out=a.engine_events, arms=a.arms, repeat=a.repeat,
                                                       wall_clock=a.wall_clock, thrash_mb=a.thrash_mb))
        return
    # the engine drives the runtime event by event: measure that path, not the simulator's compiled
    # replay of hook-less arms, belady_oracle and session_ttl (spfcore/sim/_replay_nb.py, _replay_ttl_nb.py),
    # which the engine never runs
    os.environ[REPLAY_ENV] = "python"
    if not a.wall_clock:
        runtime._perf = time.process_time  # the runtime's clock for policy_seconds / hook_seconds

    wl = make("personas", seed=a.seed, personas=16, prefix_tokens=a.prefix_tokens, sessions=32, turns=4,
              query_tokens=128, output_tokens=32, order="round_robin")
    prep = prepare(wl, a.block_size)
    n = len(wl.requests)
    refs = sum(len(v.block_keys) for v in prep.views)
    print(f"personas seed {a.seed}: {n} requests, {refs} prompt block refs ({refs / n:.0f} per request), "
          f"block size {a.block_size}, {a.num_blocks} blocks")
    arms = a.arms.split(",") if a.arms else [p.name for p in registry.discover() if p.status == "ok"]
    per: dict[str, list] = {arm: [] for arm in arms}
    recs = {}
    for _ in range(a.repeat):  # interleaved rounds
        for arm in arms:
            rec = recs[arm] = simulate(prep, arm, num_blocks=a.num_blocks, block_size=a.block_size)
            per[arm].append(rec["policy_seconds"] / n)
    print(f"{'arm':<24}{'best ms/req':>12}{'median':>9}{'us/block':>10}{'hooks ms/req':>14}"
          f"{'evict us/alloc':>16}{'hit rate':>10}")
    for arm in arms:
        rec = recs[arm]
        best = min(per[arm])
        print(f"{arm:<24}{best * 1e3:>12.3f}{statistics.median(per[arm]) * 1e3:>9.3f}{best / (refs / n) * 1e6:>10.2f}"
              f"{rec['hook_seconds'] / n * 1e3:>14.3f}"
              f"{rec['evict_seconds'] / max(rec['evict_calls'], 1) * 1e6:>16.1f}{rec['token_hit_rate']:>10.4f}")


if __name__ == "__main__":
    main()
