"""spf's runtime segments on the seed's full-scale workload (bench_policy_cost.py's, CPU time, best of
--repeat per segment): us/request in PolicyRuntime.arrived / stored / evict / release / hit and in all."""
import os, sys, time
os.environ["SPFCORE_SIM_REPLAY"] = "python"
from spfcore import runtime
from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
clock = time.process_time
runtime._perf = clock
acc = {}
def wrap(name):
    f = getattr(PolicyRuntime, name)
    def g(self, *a, **k):
        t = clock()
        try:
            return f(self, *a, **k)
        finally:
            acc[name] = acc.get(name, 0.0) + clock() - t
    setattr(PolicyRuntime, name, g)
for m in ("arrived", "stored", "evict", "release", "hit"):
    wrap(m)
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
          output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
n = len(wl.requests)
best = {}
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    acc.clear()
    rec = simulate(prep, "spf_expected_utility", num_blocks=3561, block_size=16)
    acc["total"] = rec["policy_seconds"]
    acc["hooks"] = rec["hook_seconds"]
    for k, v in acc.items():
        best[k] = min(best.get(k, 9e9), v)
print(" ".join(f"{k}={best[k] / n * 1e6:.1f}" for k in ("arrived", "stored", "evict", "release", "hit", "hooks", "total")))
