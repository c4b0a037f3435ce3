import time, numpy as np, os
from itertools import repeat
from spfcore import runtime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.workloads.generators import make
from spfcore.views import BlockBatch, gather
import spfcore_belady_oracle as B
os.environ[REPLAY_ENV] = "python"
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
# capture score batches
cap = []
orig = B.BeladyOraclePolicy.spfcore_score_blocks
def g(self, blocks, now):
    cap.append((self, blocks._table, blocks.ids.copy(), now))
    return orig(self, blocks, now)
for a in dir(orig):
    if a.startswith("spfcore"): setattr(g, a, getattr(orig, a))
B.BeladyOraclePolicy.spfcore_score_blocks = g
# snapshot table keys at the time: simpler: re-run score on the final state w/ keys snapshot
snap = []
def g2(self, blocks, now):
    snap.append(list(blocks.keys)); return orig(self, blocks, now)
for a in dir(orig):
    if a.startswith("spfcore"): setattr(g2, a, getattr(orig, a))
B.BeladyOraclePolicy.spfcore_score_blocks = g2
simulate(prep, "belady_oracle", num_blocks=3561, block_size=16)
p = B.BeladyOraclePolicy(); p.spfcore_future_requests(prep.views)
keys = snap[60]; n = len(keys)
ids_arr = np.arange(n, dtype=np.int64)
def t(f, r=2000):
    best = 1e9
    for _ in range(r):
        s = time.perf_counter(); f(); best = min(best, time.perf_counter() - s)
    return best * 1e6
tbl_key = keys + [None]
print("n", n)
print("gather keys", t(lambda: gather(tbl_key, list(range(n)))))
print("_ids", t(lambda: p._ids(keys)))
kid = p._kid
print("fromiter dict.get", t(lambda: np.fromiter(map(kid.get, keys, repeat(0)), np.intp, n)))
depth = np.arange(n)[::-1].copy()
class Bk: pass
b = Bk(); b.keys = keys; b.depth = depth
print("score full", t(lambda: orig(p, b, 0.0)))
ids = p._ids(keys)
def rest():
    nu = p._next[ids]
    never = nu == p._never
    nu = nu.astype(np.int64)
    exp_a = nu + 1
    exp_a[never] = 2**40
    nu[never] = B.NEVER
    nu *= B.DEPTH_SLOTS
    nu += np.minimum(depth, B.DEPTH_SLOTS - 1)
    values = np.negative(nu, dtype=np.float64)
print("numpy rest", t(rest))
print("depth min", t(lambda: np.minimum(depth, B.DEPTH_SLOTS - 1)))
nu0 = p._next[ids]
print("gather next", t(lambda: p._next[ids]))
print("astype", t(lambda: nu0.astype(np.int64)))
print("eq", t(lambda: nu0 == p._never))
