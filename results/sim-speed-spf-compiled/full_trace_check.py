import os, time
from spfcore import runtime
from spfcore.sim import prepare, simulate, simulator
from spfcore.workloads.traces import read_mooncake
TIMING = ("hook_seconds", "evict_seconds", "policy_seconds", "wall_seconds")
wl = read_mooncake("/work/shared/traces/mooncake_conversation_trace.jsonl")
prep = prepare(wl, 512)
out = {}
for mode in ("auto", "python", "auto"):
    os.environ["SPFCORE_SIM_REPLAY"] = mode
    vict = []
    if mode == "python":
        ev = runtime.PolicyRuntime.evict
        def rec(self, n, now):
            ids = ev(self, n, now); vict.extend(ids); return ids
        runtime.PolicyRuntime.evict = rec
        t = time.process_time(); r = simulate(prep, "spf_expected_utility", num_blocks=9140, block_size=512); dt = time.process_time() - t
        runtime.PolicyRuntime.evict = ev
    else:
        orig = simulator._replay_compiled
        simulator._replay_compiled = lambda *a, **k: orig(*a, victims=vict, **k)
        t = time.process_time(); r = simulate(prep, "spf_expected_utility", num_blocks=9140, block_size=512); dt = time.process_time() - t
        simulator._replay_compiled = orig
    out.setdefault(mode, []).append(({k: v for k, v in r.items() if k not in TIMING}, vict))
    print(mode, f"{dt:.3f} s CPU", f"{r['block_refs']/dt/1e6:.2f} M refs/s", r["block_hit_rate"], r["evictions"], r["hook_calls"])
a = out["python"][0]; b = out["auto"][1]
print("identical cell:", a[0] == b[0], "identical victims:", a[1] == b[1], len(a[1]))
