"""Summarize ab_interleaved.log: per arm and tree, the per-round figures'
best, median and range (cost: ms/req, CPU time; sim: M block refs/s from
wall time and from CPU time, 288,500 refs).

    python summarize.py ab_interleaved.log
"""
import statistics
import sys
from collections import defaultdict

REFS = 288_500
vals: dict = defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 6 or f[0] != "round":
        continue
    tree, kind, arm = f[2], f[3], f[4]
    if kind == "cost":
        vals[("cost ms/req", arm, tree)].append(float(f[5]))
    else:
        vals[("sim M refs/s (wall)", arm, tree)].append(float(f[7]))
        vals[("sim M refs/s (cpu)", arm, tree)].append(REFS / float(f[6]) / 1e6)
trees = sorted({k[2] for k in vals})
for what in ("cost ms/req", "sim M refs/s (wall)", "sim M refs/s (cpu)"):
    print(f"\n{what}: best / median [min, max] over {max(len(v) for v in vals.values())} rounds")
    for arm in dict.fromkeys(k[1] for k in vals if k[0] == what):
        cells = []
        for t in trees:
            v = vals.get((what, arm, t))
            if v:
                best = min(v) if what.startswith("cost") else max(v)
                cells.append(f"{t}: {best:.3f} / {statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]")
        print(f"  {arm:<22}" + "   ".join(cells))

# paired: branch / main within each round (the two processes ran back to back)
rounds: dict = defaultdict(dict)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 6 or f[0] != "round":
        continue
    x = float(f[5]) if f[3] == "cost" else REFS / float(f[6]) / 1e6
    rounds[(f[3], f[4])].setdefault(f[1], {})[f[2]] = x
if len(trees) == 2:
    a = next((t for t in trees if "base" in t or t == "main"), trees[0])  # the baseline tree
    b = next(t for t in trees if t != a)
    print(f"\npaired ratio {b}/{a} per round (cost: ms/req, lower is better; sim: cpu refs/s, higher is better)")
    for (kind, arm), per in rounds.items():
        r = sorted(v[b] / v[a] for v in per.values() if a in v and b in v)
        print(f"  {kind:<5}{arm:<22} median {statistics.median(r):.3f}  [{r[0]:.3f}, {r[-1]:.3f}]  n={len(r)}")
