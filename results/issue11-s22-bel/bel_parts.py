import time, numpy as np, os
from itertools import count, repeat
from spfcore.sim import prepare
from spfcore.workloads.generators import make
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
views = prep.views
print(type(views[0].block_keys), len(views))
import spfcore_belady_oracle as B
def t(f, r=20):
    best = 1e9
    for _ in range(r):
        s = time.perf_counter(); f(); best = min(best, time.perf_counter() - s)
    return best * 1e3
p = B.BeladyOraclePolicy()
print("future_requests ms", t(lambda: p.spfcore_future_requests(views)))
keys = []
for r in views: keys.extend(r.block_keys)
print("uses", len(keys), "distinct", len(p._kid))
def f1():
    kid = {}
    return np.fromiter(map(kid.setdefault, keys, count()), np.int64, len(keys))
print("setdefault pass", t(f1))
kid = {}
first = np.fromiter(map(kid.setdefault, keys, count()), np.int64, len(keys))
print("cumsum", t(lambda: np.cumsum(first == np.arange(len(first)), dtype=np.int32)[first]))
print("dict zip", t(lambda: dict(zip(kid, range(1, len(kid) + 1)))))
ids = np.cumsum(first == np.arange(len(first)), dtype=np.int32)[first]
print("argsort stable", t(lambda: np.argsort(ids, kind="stable")))
def ext():
    keys = []; e = keys.extend
    for r in views: e(r.block_keys)
print("extend", t(ext))
print("shared objs", views[0].block_keys[0] is views[16].block_keys[0], views[0].block_keys[0] == views[16].block_keys[0], views[0].block_keys[0].bit_length() if isinstance(views[0].block_keys[0], int) else type(views[0].block_keys[0]))
print("hash pass", t(lambda: np.fromiter(map(hash, keys), np.int64, len(keys))))
h = np.fromiter(map(hash, keys), np.int64, len(keys))
print("unique inv", t(lambda: np.unique(h, return_index=True, return_inverse=True)))
print("fromkeys", t(lambda: dict.fromkeys(keys)))
from operator import itemgetter
u, fi, inv = np.unique(h, return_index=True, return_inverse=True)
print("gather rep", t(lambda: itemgetter(*fi[inv].tolist())(keys)))
rep = list(itemgetter(*fi[inv].tolist())(keys))
print("list eq", t(lambda: rep == keys))
import copy
keys2 = [int(str(k)) for k in keys]  # distinct objects
print("setdefault distinct objs", t(lambda: np.fromiter(map({}.setdefault, keys2, count()), np.int64, len(keys2))))
rep2 = [keys2[i] for i in fi[inv].tolist()]
print("list eq distinct", t(lambda: rep2 == keys2))
print("hash distinct", t(lambda: np.fromiter(map(hash, keys2), np.int64, len(keys2))))
