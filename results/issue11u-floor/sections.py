"""Per-event CPU split of a floor arm: each PolicyRuntime event and Evictor method wrapped with a timer."""
import sys, time, collections
sys.path.insert(0, sys.argv[1] + "/benchmarks")  # argv: TREE ARM [ROUNDS]
import bench_sim as B
from spfcore.sim import prepare
from spfcore.workloads.traces import read_mooncake
from spfcore import runtime as R, evictor as E
prep = prepare(read_mooncake(B.TRACE), 512)
arm = sys.argv[2]
B.run(prep, arm, 9140)
acc = collections.Counter(); cnt = collections.Counter()
pc = time.perf_counter
def wrap(cls, name, tag):
    f = getattr(cls, name)
    def w(*a, **k):
        t = pc()
        try:
            return f(*a, **k)
        finally:
            acc[tag] += pc() - t; cnt[tag] += 1
    setattr(cls, name, w)
for n in ("arrived", "hit", "touch", "evict", "stored", "finished", "release"):
    wrap(R.PolicyRuntime, n, "rt." + n)
for n in ("pop", "push_cached", "push_hashless", "remove", "remove_many", "plan_expired", "commit", "_place"):
    wrap(E.Evictor, n, "ev." + n)
best = None
for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
    acc.clear(); cnt.clear()
    t = pc(); B.run(prep, arm, 9140); tot = pc() - t
    if best is None or tot < best[0]:
        best = (tot, dict(acc), dict(cnt))
tot, acc, cnt = best
nreq = 12031
print(f"{arm}: total {tot:.3f} s = {tot/nreq*1e6:.1f} us/request (timers included)")
rt = sum(v for k, v in acc.items() if k.startswith("rt."))
print(f"  sim loop own (total - rt events): {(tot-rt)/nreq*1e6:.1f} us/req")
for k in sorted(acc, key=acc.get, reverse=True):
    print(f"  {k:<18}{acc[k]/nreq*1e6:7.2f} us/req  {cnt[k]:>7} calls  {acc[k]/cnt[k]*1e6:6.2f} us/call")
