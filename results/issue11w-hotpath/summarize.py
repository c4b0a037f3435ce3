"""Summarize ab_cost.log / ab_engine.log: per kind, arm and tree the round
figures' best / median [min, max] (ms/req, CPU time), then the paired ratio
branch/baseline within each round (the two processes ran back to back),
median [min, max]. The baseline tree is the one whose name contains "base".

    python summarize.py ab_cost.log [ab_engine.log ...]
"""
import statistics
import sys
from collections import defaultdict

vals: dict = defaultdict(list)
rounds: dict = defaultdict(dict)
for path in sys.argv[1:]:
    for line in open(path):
        f = line.split()
        if len(f) < 6 or f[0] != "round":
            continue
        r, tree, kind, arm, x = f[1], f[2], f[3], f[4], float(f[5])
        vals[(kind, arm, tree)].append(x)
        rounds[(kind, arm)].setdefault((path, r), {})[tree] = x
trees = sorted({k[2] for k in vals})
base = next(t for t in trees if "base" in t)
branch = next(t for t in trees if t != base)
print(f"ms/req (CPU time): best / median [min, max]; paired {branch}/{base} per round: median [min, max]")
print(f"{'kind':<10}{'arm':<22}{base:>30}{branch:>30}{'paired':>26}")
for (kind, arm), per in rounds.items():
    cells = []
    for t in (base, branch):
        v = vals[(kind, arm, t)]
        cells.append(f"{min(v):.3f} / {statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]")
    r = sorted(v[branch] / v[base] for v in per.values() if base in v and branch in v)
    print(f"{kind:<10}{arm:<22}{cells[0]:>30}{cells[1]:>30}"
          f"{f'{statistics.median(r):.3f} [{r[0]:.3f}, {r[-1]:.3f}] n={len(r)}':>26}")
