"""Per runtime method split of floors.py's arms (CPU time of each
PolicyRuntime event, us/request, best of --repeat), and the evictor's share.

    python results/issue11-s20-floor/split_floor.py [--repeat 5] [--arms lru,observe,score,score-keys]
"""
import os
import sys
import time
from collections import defaultdict

argv = sys.argv[1:]
sys.argv = sys.argv[:1] + ["--repeat", "1"]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import floors  # noqa: E402
from spfcore.evictor import Evictor  # noqa: E402
from spfcore.runtime import PolicyRuntime  # noqa: E402

rep = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 5
arms = argv[argv.index("--arms") + 1].split(",") if "--arms" in argv else ["lru", *floors.FLOORS]
acc = defaultdict(float)
clock = time.process_time


def wrap(cls, name, tag):
    f = getattr(cls, name)

    def g(self, *a, **k):
        t = clock()
        try:
            return f(self, *a, **k)
        finally:
            acc[tag] += clock() - t
    setattr(cls, name, g)


for m in ("arrived", "hit", "touch", "stored", "evict", "finished", "release"):
    wrap(PolicyRuntime, m, m)
for m in ("pop", "push_cached", "remove_many"):
    wrap(Evictor, m, "ev." + m)
best = {}
for _ in range(rep):
    for arm in arms:
        acc.clear()
        tot = floors.run(floors.prep, arm)
        row = dict(acc, total=tot)
        if arm not in best or tot < best[arm]["total"]:
            best[arm] = row
cols = ["total", "arrived", "hit", "touch", "stored", "evict", "ev.pop", "finished", "release", "ev.push_cached"]
print(f"{'us/req':<12}" + "".join(f"{c:>15}" for c in cols))
for arm in arms:
    print(f"{arm:<12}" + "".join(f"{best[arm].get(c, 0) / floors.n * 1e6:>15.1f}" for c in cols))
