"""summarize.py AB.LOG: per arm and tree best / median of the round figures
(each a best of 5 in-process), and the paired ratio branch/base per round,
median [min, max]."""
import statistics
import sys
from collections import defaultdict

fig = defaultdict(dict)  # (arm, tree) -> {round: best}
for line in open(sys.argv[1]):
    tree, r, arm, best, _med = line.split()
    fig[(arm, tree)][int(r)] = float(best)
arms = list(dict.fromkeys(a for a, _ in fig))
print(f"{'arm':<22}{'base best/median':>18}{'branch best/median':>20}{'paired branch/base median [min, max]':>40}  rounds")
for a in arms:
    b, n = fig[(a, "base")], fig[(a, "branch")]
    rs = sorted(set(b) & set(n))
    ratio = [n[r] / b[r] for r in rs]
    bb, nn = list(b.values()), list(n.values())
    print(f"{a:<22}{min(bb):>9.3f} / {statistics.median(bb):.3f}{min(nn):>11.3f} / {statistics.median(nn):.3f}"
          f"{statistics.median(ratio):>22.3f} [{min(ratio):.3f}, {max(ratio):.3f}]  {len(rs)}")
