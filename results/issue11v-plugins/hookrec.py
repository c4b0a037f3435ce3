"""Record one policy's hook calls in a simulator run, replay them on a fresh
policy instance (this tree's code), timing each hook and hashing every answer.

  record: python hookrec.py record ARM OUT.pkl (--mooncake | --trace T --limit N) --num-blocks B
  replay: python hookrec.py replay ARM REC.pkl [--rounds 3]  -> per-hook seconds, answers digest
"""
import argparse
import gc
import hashlib
import pickle
import sys
import time

import numpy as np


class FakeBatch:
    __slots__ = ("keys", "ids")

    def __init__(self, keys, ids):
        self.keys, self.ids = keys, ids

    def __len__(self):
        return len(self.keys)


def record(a):
    from spfcore import runtime
    from spfcore.sim import prepare, simulate
    from spfcore.views import BlockBatch
    from spfcore.workloads.traces import read_mooncake
    events = []
    last = [None, None]

    def conv(x):
        if isinstance(x, BlockBatch):
            if last[0] is x:
                return last[1]
            f = FakeBatch(list(x.keys), np.array(x.ids))
            last[0], last[1] = x, f
            return f
        if isinstance(x, list):
            return list(x)
        return x
    orig_fire, orig_call = runtime.PolicyRuntime._fire, runtime.PolicyRuntime._call

    def fire(self, name, *args):
        events.append((name, tuple(conv(x) for x in args)))
        return orig_fire(self, name, *args)

    def call(self, name, expect_len, **kw):
        if name == "spfcore_cache_configured":
            events.append((name, (kw["num_blocks"], kw["block_size"])))
        return orig_call(self, name, expect_len, **kw)
    runtime.PolicyRuntime._fire, runtime.PolicyRuntime._call = fire, call
    if a.mooncake:
        wl = read_mooncake("/work/shared/traces/mooncake_conversation_trace.jsonl")
        bs = 512
    elif a.trace:
        wl = read_mooncake(a.trace, limit=a.limit)
        bs = 512
    elif a.gen:
        from spfcore.workloads.generators import make
        from spfcore.workloads.pressure import num_blocks_for_pressure
        wl = make(a.gen, seed=42)
        bs = 16
        a.num_blocks = num_blocks_for_pressure(wl, 2.3, bs)
    else:
        from spfcore.workloads.generators import make
        wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
                  output_tokens=32, order="round_robin")
        bs = 16
    prep = prepare(wl, bs)
    rec = simulate(prep, a.arm, num_blocks=a.num_blocks, block_size=bs)
    print(a.arm, "hit", rec["block_hit_rate"], "evictions", rec["evictions"], "events", len(events), file=sys.stderr)
    with open(a.out, "wb") as f:
        pickle.dump(events, f, protocol=5)


def canon(res):
    """Bytes of an answer, for the digest."""
    if res is None:
        return b"N"
    if isinstance(res, np.ndarray):
        return res.dtype.str.encode() + res.tobytes()
    if hasattr(res, "values") and hasattr(res, "pinned"):  # Scores
        out = b"S"
        for f in ("values", "expires_at", "expires_at_arrival", "pinned"):
            v = getattr(res, f)
            out += canon(v) if isinstance(v, np.ndarray) else repr(v).encode()
        return out
    if isinstance(res, (list, tuple)):
        return b"L" + repr(list(res)).encode()
    return repr(res).encode()


def norm_scores(res, n):
    """An answer as the evictor sees it: (values, exp_t, exp_a, pins) arrays."""
    from spfcore.runtime import score_arrays
    cols = score_arrays(res, n, "x")
    if cols is None:
        cols = (None, None, None, None)
    out = b""
    for c, d in zip(cols, (0.0, np.inf, 2**62, False)):
        if c is None:
            c = np.full(n, d)
        out += np.asarray(c, np.float64).tobytes()
    return out


def replay(a):
    from spfcore import registry
    with open(a.rec, "rb") as f:
        events = pickle.load(f)
    info = registry.get(a.arm)
    _, p0 = registry.plugin_manager(info, None)
    print("policy from", sys.modules[type(p0).__module__].__file__, file=sys.stderr)
    best = {}
    for r in range(a.rounds):
        pm, pol = registry.plugin_manager(info, None)
        cls = type(pol)
        pol = cls(pol.params)
        fns = {}
        t_by = {}
        h = hashlib.sha256()
        hn = hashlib.sha256()
        gc.disable()
        perf = time.perf_counter
        c0 = time.process_time()
        for name, args in events:
            fn = fns.get(name)
            if fn is None:
                fn = fns[name] = getattr(pol, name)
                t_by[name] = 0.0
            t = perf()
            res = fn(*args)
            t_by[name] += perf() - t
            if name in ("spfcore_score_blocks", "spfcore_admit_blocks", "spfcore_rescore_keys",
                        "spfcore_tier_admit", "spfcore_tier_score"):
                if a.digest:
                    h.update(name.encode() + canon(res))
                    if name == "spfcore_score_blocks":
                        hn.update(norm_scores(res, len(args[0])))
                    elif name == "spfcore_rescore_keys":
                        hn.update(repr(list(res or ())).encode())
                    else:
                        hn.update(canon(res))
        cpu = time.process_time() - c0
        best["cpu(all)"] = min(best.get("cpu(all)", 1e9), cpu)
        gc.enable()
        for k, v in t_by.items():
            best[k] = min(best.get(k, 1e9), v)
    tot = sum(v for k, v in best.items() if k != "cpu(all)")
    for k, v in sorted(best.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<28}{v:8.3f} s")
    print(f"  {'total':<28}{tot:8.3f} s   raw {h.hexdigest()[:16]}  evictor-view {hn.hexdigest()[:16]}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("record")
    r.add_argument("arm")
    r.add_argument("out")
    r.add_argument("--mooncake", action="store_true")
    r.add_argument("--trace")
    r.add_argument("--limit", type=int)
    r.add_argument("--gen")
    r.add_argument("--num-blocks", type=int, default=9140)
    p = sub.add_parser("replay")
    p.add_argument("arm")
    p.add_argument("rec")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--digest", type=int, default=1)
    a = ap.parse_args()
    record(a) if a.cmd == "record" else replay(a)
