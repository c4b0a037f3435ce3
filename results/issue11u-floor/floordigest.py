"""Victim-sequence digest of the floor arms (bench_sim.py --floors) and of lru through the Python loop,
on the whole Mooncake trace: compare two trees' outputs."""
import hashlib, json, os, sys
sys.path.insert(0, os.getcwd() + "/benchmarks")
import bench_sim as B
from spfcore import runtime
from spfcore.sim import prepare
from spfcore.workloads.traces import read_mooncake
prep = prepare(read_mooncake(B.TRACE), 512)
victims = []
real = runtime.PolicyRuntime.evict
def rec(self, n, now):
    ids = real(self, n, now)
    victims.extend(ids)
    return ids
runtime.PolicyRuntime.evict = rec
out = {}
os.environ["SPFCORE_SIM_REPLAY"] = "python"
for arm in sys.argv[2].split(","):
    victims.clear()
    r = B.run(prep, arm, 9140)
    out[arm] = {"victims": hashlib.sha256(json.dumps(victims).encode()).hexdigest(), "n": len(victims),
                "hits": r["hit_blocks"], "evictions": r["evictions"],
                "per_request": hashlib.sha256(json.dumps([q["cached_tokens"] for q in r["requests"]]).encode()).hexdigest()}
json.dump(out, open(sys.argv[1], "w"), indent=1, sort_keys=True)
print(out)
