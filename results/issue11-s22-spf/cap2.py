import os, sys, time, copy, pickle
os.environ["SPFCORE_SIM_REPLAY"] = "python"
import numpy as np
from spfcore import runtime, evictor
from spfcore.evictor import Evictor
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
evictor._load_nb()
nb = evictor.nb
caps = []
orig_commit = Evictor.commit
def commit(self, plan):
    if plan is not None and plan[0] is not None:
        caps.append(copy.deepcopy((plan, self._all(), self.pin_cap)))
    return orig_commit(self, plan)
Evictor.commit = commit
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
simulate(prep, "spf_expected_utility", num_blocks=3561, block_size=16)
E = np.empty(0); EB = np.empty(0, np.bool_); EI = np.empty(0, np.int64)
def new(plan, st, cap):
    (now, arr, wk), cols, ids = plan
    v, et, ea, p = cols
    return nb.rescore(True, now, arr, wk, ids, np.asarray(v, np.float64), E, np.asarray(ea, np.float64), EB, cap, *st)
def newnowk(plan, st, cap):  # drain by chasing: pass no walked, drain first separately
    (now, arr, wk), cols, ids = plan
    v, et, ea, p = cols
    nb.drain(now, arr, *[st[k] for k in (0, 4, 5, 6, 7, 8, 9, 10)])
    return nb.rescore(False, now, arr, EI, ids, np.asarray(v, np.float64), E, np.asarray(ea, np.float64), EB, cap, *st)
def old(plan, st, cap):
    (now, arr, wk), cols, ids = plan
    v, et, ea, p = cols
    nb.drain(now, arr, *[st[k] for k in (0, 4, 5, 6, 7, 8, 9, 10)])
    return nb.place(ids, EI, np.asarray(v, np.float64), E, np.asarray(ea, np.float64), EB, EI, cap, *st)
res = {}
for name, fn in (("old", old), ("new", new), ("new-no-walked", newnowk)) * 2:
    tot = 0.0
    for c in caps[::2]:
        best = 1e9
        for r in range(3):
            a = copy.deepcopy(c)
            t = time.perf_counter(); fn(*a); best = min(best, time.perf_counter() - t)
        tot += best
    res[name] = min(res.get(name, 9e9), tot / len(caps[::2]) * 1e6)
print(len(caps), res)
# equality of resulting states
for c in caps[::10]:
    a = copy.deepcopy(c); b = copy.deepcopy(c)
    old(*a); new(*b)
    sa, sb = a[1], b[1]
    ok = all(np.array_equal(x, y) for k, (x, y) in enumerate(zip(sa, sb)) if k not in (2, 3, 8))  # heap/pool layout may differ
    print("state eq (besides heap/pool layout):", ok, end="; ")
print()
