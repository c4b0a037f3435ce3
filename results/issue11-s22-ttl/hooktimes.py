"""Per-hook CPU time of session_ttl on bench_policy_cost's workload (python replay), us/request, best of N."""
import os, sys, time
os.environ["SPFCORE_SIM_REPLAY"] = "python"
from spfcore import runtime
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
import spfcore_session_ttl as m

runtime._perf = time.process_time
acc = {}
def wrap(name):
    f = getattr(m.SessionTTLPolicy, name)
    import functools
    @functools.wraps(f)
    def g(self, *a, **k):
        t0 = time.process_time()
        try:
            return f(self, *a, **k)
        finally:
            acc[name] = acc.get(name, 0.0) + time.process_time() - t0
    g.__name__ = f.__name__
    for attr in dir(f):
        if attr.startswith("spfcore_impl"):
            setattr(g, attr, getattr(f, attr))
    setattr(m.SessionTTLPolicy, name, g)
names = ["spfcore_request_arrived", "spfcore_rescore_keys", "spfcore_blocks_hit", "spfcore_blocks_stored",
         "spfcore_blocks_evicted", "spfcore_score_blocks"]
if "--wrap" in sys.argv:
    for nm in names: wrap(nm)
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4,
          query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
n = len(wl.requests)
best = {}
tot = []
for r in range(int(os.environ.get("R", 5))):
    acc.clear()
    rec = simulate(prep, "session_ttl", num_blocks=3561, block_size=16)
    tot.append(rec["policy_seconds"] / n * 1e6)
    for k, v in acc.items():
        best[k] = min(best.get(k, 1e9), v / n * 1e6)
print("policy us/req best", round(min(tot), 1), "hooks us/req", round(rec["hook_seconds"] / n * 1e6, 1))
for k in names:
    if k in best: print(f"{k:30s} {best[k]:8.1f}")
