"""The README's table from drive.sh logs: per (cut, policy, blocks) the CPU seconds of each tree
(best, range, runs), the best-to-best ratio and the paired ratios (base / branch of the same round),
and whether every digest agrees. Usage: python table.py LOG..."""
import collections, re, statistics, sys

pat = re.compile(r"round (\d+) \S+ load (\S+) (wt|base) (\S+)\s+(\S+)\s+(\d+) seconds\s+\S+ cpu\s+(\S+) .*evictions (\d+) digest (\w+)")
cells = collections.defaultdict(lambda: {"wt": {}, "base": {}, "ev": None, "dig": set()})
for f in sys.argv[1:]:
    for line in open(f):
        m = pat.search(line)
        if not m:
            continue
        rnd, load, tree, cut, pol, nb, cpu, ev, dig = m.groups()
        if tree == "wt" and f.split("/")[-1].startswith("ab-r1") and pol != "s3fifo":
            continue  # ab-r1* logs: the branch at dcf596c, whose ARC parked too (S3-FIFO's code is 219aab1's)
        c = cells[(cut, pol, int(nb))]
        c[tree][(f, rnd)] = float(cpu)
        c["ev"] = int(ev)
        c["dig"].add(dig)
print("| cell | evictions | baseline CPU s: best (range, runs) | branch CPU s: best (range, runs) | ratio best/best | paired ratios | digests equal |")
print("|---|---:|---|---|---:|---|---|")
for (cut, pol, nb), c in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][2], int(kv[0][0][3:-1]))):
    def show(d):
        v = sorted(d.values())
        if not v:
            return "-"
        return f"{v[0]:.1f} (n=1)" if len(v) == 1 else f"{v[0]:.1f} ({v[0]:.1f}-{v[-1]:.1f}, n={len(v)})"
    b, w = c["base"], c["wt"]
    ratio = f"{min(b.values()) / min(w.values()):.2f}x" if b and w else "-"
    paired = ", ".join(f"{b[k] / w[k]:.2f}" for k in sorted(b) if k in w)
    eq = ("yes" if len(c["dig"]) == 1 else "NO") if b and w else "-"
    print(f"| {pol} {nb:,} {cut} | {c['ev']:,} | {show(b)} | {show(w)} | {ratio} | {paired or '-'} | {eq} |")
