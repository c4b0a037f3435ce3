# capture (state, args) of every arrival-commit place call, pickle
import os, sys, time, copy, pickle, functools
os.environ["SPFCORE_SIM_REPLAY"] = "python"
from spfcore import runtime, evictor
from spfcore.evictor import Evictor
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
evictor._load_nb()
nbm = evictor.nb
caps = []
orig_commit = Evictor.commit
state = {"in": False}
def commit(self, plan):
    state["in"] = True
    try:
        return orig_commit(self, plan)
    finally:
        state["in"] = False
Evictor.commit = commit
orig_place = nbm.place
def place(*a):
    if state["in"]:
        caps.append(copy.deepcopy(a))
    return orig_place(*a)
nbm.place = place
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
simulate(prep, "spf_expected_utility", num_blocks=3561, block_size=16)
print(len(caps), sum(len(c[0]) for c in caps)/len(caps))
pickle.dump(caps, open("/tmp/spf/caps.pkl", "wb"))
