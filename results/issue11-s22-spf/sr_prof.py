import os, sys, time, functools
from collections import defaultdict
os.environ["SPFCORE_SIM_REPLAY"] = "python"
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
import spfcore_spf_expected_utility.utility as U
U._load_nb()
acc = defaultdict(float); cnt = defaultdict(int)
for name in ("store_records", "map_stored", "evict_records", "score_ids", "hit_ids"):
    f = getattr(U._nb, name)
    def g(*a, _f=f, _n=name):
        t = time.perf_counter()
        try: return _f(*a)
        finally:
            k = _n + (".1" if len(a[0]) == 1 else ".n")
            acc[k] += time.perf_counter() - t; cnt[k] += 1; acc[k + ".blocks"] += len(a[0])
    setattr(U._nb, name, g)
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16); n = len(wl.requests)
best = {}
for _ in range(5):
    acc.clear(); cnt.clear()
    simulate(prep, "spf_expected_utility", num_blocks=3561, block_size=16)
    for k, v in acc.items(): best[k] = (min(best.get(k, (9e9,))[0], v), cnt[k])
for k, (v, c) in sorted(best.items()):
    if k.endswith(".blocks"): continue
    print(f"{k:<22}{v/max(c,1)*1e6:8.2f} us/call  calls/req {c/n:.2f}  blocks/call {best[k+'.blocks'][0]/max(c,1):.0f}")
