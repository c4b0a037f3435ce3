"""cProfile one arm of benchmarks/bench_policy_cost.py's workload (the seed at
full scale, sequential, the event-by-event path), printing the top functions
by total time (tottime) and cumulative time.

    python results/issue11w-hotpath/profile_arm.py ARM [--top 30]
"""
import argparse
import cProfile
import os
import pstats

from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.workloads.generators import make

ap = argparse.ArgumentParser()
ap.add_argument("arm")
ap.add_argument("--top", type=int, default=30)
ap.add_argument("--sort", default="tottime")
a = ap.parse_args()
os.environ[REPLAY_ENV] = "python"
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4,
          query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
simulate(prep, a.arm, num_blocks=3561, block_size=16)  # warm (numba, imports)
pr = cProfile.Profile()
pr.enable()
rec = simulate(prep, a.arm, num_blocks=3561, block_size=16)
pr.disable()
print(a.arm, "policy ms/req", rec["policy_seconds"] / len(wl.requests) * 1e3)
pstats.Stats(pr).sort_stats(a.sort).print_stats(a.top)
