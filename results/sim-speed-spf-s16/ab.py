"""A/B the spf kernel: python /tmp/ab.py ROUNDS file_a.py file_b.py ..."""
import importlib.util, sys, time, statistics
sys.path.insert(0, '/work/main/benchmarks')
from bench_sim import TRACE, run
from spfcore.sim import prepare, simulator
from spfcore.workloads.traces import read_mooncake
prep = prepare(read_mooncake(TRACE), 512)
mods = []
for i, f in enumerate(sys.argv[2:]):
    spec = importlib.util.spec_from_file_location("spfcore.sim._ab_" + f.rsplit("/",1)[-1][:-3], f)
    m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; spec.loader.exec_module(m)
    m.warm(); mods.append((f, m))
    def wrap(m=m, orig=m.run):
        def timed(*a, **k):
            t = time.process_time(); r = orig(*a, **k); m._kt += time.process_time() - t; return r
        m._kt = 0.0
        m.run = timed
    wrap()
simulator._load_kernels("spf")
ref = None
times = {f: [] for f, _ in mods}
kt = {f: [] for f, _ in mods}
for r in range(int(sys.argv[1])):
    for f, m in mods:
        simulator._spf_nb = m
        m._kt = 0.0
        t = time.process_time(); rec = run(prep, "spf_expected_utility", 9140); times[f].append(time.process_time() - t); kt[f].append(m._kt)
        key = (rec["evictions"], rec["block_hit_rate"], rec.get("hit_tokens"))
        assert ref is None or key == ref, (f, key, ref)
        ref = key
for f, ts in times.items():
    k = kt[f]
    print(f"{f:30s} total min {min(ts):.3f} med {statistics.median(ts):.3f} | kernel min {min(k):.3f} med {statistics.median(k):.3f} | M refs/s(min total) {288500/min(ts)/1e6:.2f}")
