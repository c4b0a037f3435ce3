import re, glob, collections
rows = collections.defaultdict(list)
dig = {}
ev = {}
for f in sorted(glob.glob(__import__('os').path.join(__import__('os').path.dirname(__file__) or '.', 'ab-*.log'))):
    for line in open(f):
        m = re.search(r'(wt|main) (cut\w+)\.jsonl\s+(\w+)\s+(\d+) seconds\s+([\d.]+) cpu\s+([\d.]+) .*evictions (\d+) digest (\w+)', line)
        if not m: continue
        tree, tr, pol, nb, sec, cpu, e, d = m.groups()
        rows[(pol, int(nb), tr, tree)].append(float(cpu))
        dig.setdefault((pol, int(nb), tr), set()).add(d)
        ev[(pol, int(nb), tr)] = int(e)
def fmt(v):
    if not v: return 'not run'
    return f"{min(v):.1f} ({min(v):.1f}-{max(v):.1f}, n={len(v)})" if len(v) > 1 else f"{v[0]:.1f} (n=1)"
print("| cell | evictions | main CPU s: best (range, runs) | branch CPU s: best (range, runs) | digests equal |")
print("|---|---:|---|---|---|")
keys = sorted({k[:3] for k in rows}, key=lambda k: (k[0], k[1], int(k[2][3:-1])))
for pol, nb, tr in keys:
    print(f"| {pol} {nb:,} {tr} | {ev[(pol,nb,tr)]:,} | {fmt(rows[(pol,nb,tr,'main')])} | {fmt(rows[(pol,nb,tr,'wt')])} | {('yes' if len(dig[(pol,nb,tr)])==1 else 'NO') if rows[(pol,nb,tr,'main')] and rows[(pol,nb,tr,'wt')] else '-'} |")
print()
print("| cell | evictions x | main growth (best) | branch growth (best) |")
print("|---|---:|---:|---:|")
for pol, nb in sorted({(k[0], k[1]) for k in keys}):
    a, b = (pol, nb, 'cut50k'), (pol, nb, 'cut150k')
    c = (pol, nb, 'cut100k')
    if a in ev and b in ev:
        g = lambda t: (f"x{min(rows[b+(t,)])/min(rows[a+(t,)]):.1f}" if rows[a+(t,)] and rows[b+(t,)] else '-')
        print(f"| {pol} {nb:,} | x{ev[b]/ev[a]:.2f} | {g('main')} | {g('wt')} |")
