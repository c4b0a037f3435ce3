"""cProfile one floors.py arm (lru, observe, score, score-keys) on the seed at
full scale (sequential, the event-by-event path); prints the top functions.

    python results/issue11-s20-floor/prof_floor.py ARM [--top 30] [--sort tottime]
"""
import argparse
import cProfile
import os
import pstats
import sys
import time

sys.argv, argv = sys.argv[:1] + ["--repeat", "1"], sys.argv[1:]
ap = argparse.ArgumentParser()
ap.add_argument("arm")
ap.add_argument("--top", type=int, default=30)
ap.add_argument("--sort", default="tottime")
a = ap.parse_args(argv)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import floors  # noqa: E402  (runs its 1-round measurement at import: warms numba)

pr = cProfile.Profile()
pr.enable()
s = floors.run(floors.prep, a.arm)
pr.disable()
print(a.arm, "policy ms/req", s / floors.n * 1e3)
pstats.Stats(pr).sort_stats(a.sort).print_stats(a.top)
