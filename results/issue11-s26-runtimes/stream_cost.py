"""Per-method cost of each compiled engine runtime on the seed's full-scale
event stream (16 personas x 8,192 tokens, 32 sessions x 4 turns, block size
16, 3,561 blocks; the simulator's PolicyRuntime calls recorded, each key a
32-byte sha256 standing in for a vLLM block hash), replayed into a fresh
compiled runtime per round: us per request per method (calls per request in
brackets), warm and cold (64 MiB written before each arrival). Asserts every
allocation's victims equal the hooks'. Prints figures; asserts no time.

    .venv/bin/python results/issue11-s26-runtimes/stream_cost.py frequency,session_ttl,belady_oracle,spf_expected_utility 3
"""
import os, sys, time, hashlib, collections, pickle
os.environ["SPFCORE_SIM_REPLAY"] = "python"
import attrs, numpy as np
from spfcore.engine.compiled import compiled_runtime
from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
EVENTS = ("set_future", "arrived", "hit", "touch", "evict", "stored", "finished", "release")
NB, BS = 3561, 16
def _h(k): return hashlib.sha256(repr(k).encode()).digest()
def record(arm):
    wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
              output_tokens=32, order="round_robin")
    log, orig, memo = [], {e: getattr(PolicyRuntime, e) for e in EVENTS}, {}
    def hv(v):
        if id(v) not in memo:
            memo[id(v)] = (v, attrs.evolve(v, block_keys=tuple(_h(k) for k in v.block_keys)))
        return memo[id(v)][1]
    def wrap(name):
        f = orig[name]
        def w(self, *args):
            if name == "set_future":
                log.append((name, [[hv(v) for v in args[0]]], None)); return f(self, *args)
            a = [list(x) if isinstance(x, (list, tuple, np.ndarray)) else x for x in args]
            if name == "stored":
                a[2] = [_h(k) for k in a[2]]; a[4] = None if a[4] is None else _h(a[4])
            if name in ("arrived", "hit", "stored", "finished"):
                a[0] = hv(a[0])
            r = f(self, *args); log.append((name, a, list(r) if name == "evict" else None)); return r
        return w
    for e in EVENTS: setattr(PolicyRuntime, e, wrap(e))
    try: simulate(prepare(wl, BS), arm, num_blocks=NB, block_size=BS)
    finally:
        for e in EVENTS: setattr(PolicyRuntime, e, orig[e])
    return log, len(wl.requests)
def ints(v): return attrs.evolve(v, block_keys=tuple(map(int.from_bytes, v.block_keys)))
def calls(log, keep_prompt):
    memo, out = {}, []
    for name, a, _ in log:
        a = list(a)
        if name == "set_future": a[0] = [ints(v) for v in a[0]]
        elif name in ("arrived", "hit", "stored", "finished") and not keep_prompt:
            v = a[0]; a[0] = memo.setdefault(id(v), (v, attrs.evolve(v, block_keys=())))[1]
        out.append((name, a))
    return out
def run(cl, rt, buf):
    t_by, n_by, out = collections.Counter(), collections.Counter(), []
    for name, a in cl:
        if name == "arrived" and buf is not None: buf += 1
        t = time.perf_counter()
        r = getattr(rt, name)(*a)
        t_by[name] += time.perf_counter() - t; n_by[name] += 1
        if name == "evict": out.append(r)
    return t_by, n_by, out
arms = sys.argv[1].split(",")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
buf = np.zeros(64 << 17, np.int64)
for arm in arms:
    log, n = record(arm)
    want = [r for name, _, r in log if name == "evict"]
    base0 = PolicyRuntime.for_policy(arm, NB, BS, None, key_map=False)
    keep = getattr(compiled_runtime(base0), "wants_prompt_hashes", False)
    cl = calls(log, keep)
    for cold in (False, True):
        tot = collections.defaultdict(list)
        for i in range(rounds):
            rt = compiled_runtime(PolicyRuntime.for_policy(arm, NB, BS, None, key_map=False))
            t_by, n_by, out = run(cl, rt, buf if cold else None)
            assert out == want
            for k in t_by: tot[k].append(t_by[k])
        line = " ".join(f"{k}={np.median(v)/n*1e6:.0f}us({n_by[k]/n:.1f})" for k, v in tot.items() if k != "set_future")
        allt = sum(np.median(v) for k, v in tot.items() if k != "set_future") / n * 1e6
        print(f"{arm:22s} {'cold' if cold else 'warm'} total {allt:.0f} us/req: {line}", flush=True)
