import os, sys, time
os.environ["SPFCORE_SIM_REPLAY"] = "python"
from spfcore import runtime
runtime._perf = time.process_time
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
arms = sys.argv[1].split(",")
for pt, nbk in ((512, 3561 * 512 // 8192 + 30), (8192, 3561)):
    wl = make("personas", seed=42, personas=16, prefix_tokens=pt, sessions=32, turns=4, query_tokens=128, output_tokens=32, order="round_robin")
    prep = prepare(wl, 16); n = len(wl.requests)
    refs = sum(len(v.block_keys) for v in prep.views) / n
    for arm in arms:
        best = None
        for _ in range(3):
            rec = simulate(prep, arm, num_blocks=nbk, block_size=16)
            t = (rec["policy_seconds"] / n * 1e6, rec["hook_seconds"] / n * 1e6)
            best = min(best or t, t)
        print(pt, f"blocks/req {refs:.0f}", arm, f"total {best[0]:.0f} hooks {best[1]:.0f} nonhook {best[0]-best[1]:.0f} us/req")
