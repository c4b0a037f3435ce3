import os, sys, time, functools
from collections import defaultdict
os.environ["SPFCORE_SIM_REPLAY"] = "python"
from itertools import repeat
import numpy as np
from spfcore import runtime
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
import spfcore_spf_expected_utility.utility as U
from spfcore_spf_expected_utility.utility import _pick
clock = time.perf_counter
acc = defaultdict(float)
def _store(self, blocks, keys, n):
    t0 = clock()
    ids = blocks.ids
    depth = blocks.table.depth
    kinds = self._kinds(keys, n, int(depth[ids[0]]))
    t1 = clock(); acc["kinds"] += t1 - t0
    rec = self.rec
    slots = np.fromiter(map(rec.get, keys, repeat(-1)), np.int64, n) if n > 1 else \
        np.array([rec.get(keys[0], -1)], np.int64)
    t2 = clock(); acc["lookup"] += t2 - t1
    self._room_slots(n)
    p = self.params
    nb = U._load_nb()
    fin, new, dup, back, self._nfree = nb.store_records(
        slots, kinds, ids, depth, self.nd, p.depth_octaves, self.t, self.state,
        self.never, self.cls, self.epoch_of, self.epoch, self._decay_pow(self.epoch), self.last, self.count,
        self.first, self.hist, self._bucket_np, self.per_kind, p.max_count, p.gap_classes, p.gap_octaves,
        p.gap_mean, self._fs, self._nfree)
    t3 = clock(); acc["store_records"] += t3 - t2
    self.nghost -= back
    m = len(new)
    acc["n"] += n; acc["m"] += m
    if m:
        nk = keys if m == n else _pick(keys, new)
        sl = fin[new].tolist()
        t4 = clock(); acc["pick"] += t4 - t3
        b = len(rec)
        rec.update(zip(nk, sl))
        t5 = clock(); acc["rec.update"] += t5 - t4
        key_of = self.key_of
        for j, k in zip(sl, nk):
            key_of[j] = k
        acc["key_of"] += clock() - t5
        dup = dup or len(rec) - b != m
    if not dup:
        return fin
    acc["dup"] += 1
    got = np.fromiter(map(rec.__getitem__, keys), np.int64, n)
    self._gen[np.setdiff1d(fin, got)] += 1
    return got
U.UtilityPolicy._store = _store
orig = U.UtilityPolicy._map_stored
def ms(self, *a):
    t = clock(); orig(self, *a); acc["map_stored"] += clock() - t
U.UtilityPolicy._map_stored = ms
o2 = U.UtilityPolicy.spfcore_blocks_stored
@functools.wraps(o2)
def hs(self, *a, **k):
    t = clock(); o2(self, *a, **k); acc["hook"] += clock() - t
U.UtilityPolicy.spfcore_blocks_stored = hs
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16); n = len(wl.requests)
best = {}
for _ in range(5):
    acc.clear()
    simulate(prep, "spf_expected_utility", num_blocks=3561, block_size=16)
    for k, v in acc.items():
        best[k] = min(best.get(k, 9e9), v)
for k, v in best.items():
    print(f"{k:<16}{v/n*1e6:8.1f}" if k not in ("n", "m", "dup") else f"{k:<16}{v/n:8.1f}")
