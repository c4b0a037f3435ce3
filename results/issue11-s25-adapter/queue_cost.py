"""The adapter's queue work alone (PolicyFreeQueue) over the seed's full-scale
event stream, cold-cache, per operation: the baseline adapter (main's d6d012c,
loaded from git) and this tree's, interleaved in one process.

1. Records every PolicyRuntime call of the simulator's reference loop
   (SPFCORE_SIM_REPLAY=python) over ``frequency`` (16 personas x 8,192 tokens,
   32 sessions x 4 turns, block size 16, 3,561 blocks), each key given a
   32-byte sha256 "vLLM block hash".
2. Replays it as vLLM's block pool would drive the queue, on real
   ``KVCacheBlock`` objects: ``touch`` -> ``BlockPool.touch`` (through
   :meth:`PolicyFreeQueue.touch_many`, one ``remove`` per free block), ``hit``
   -> the allocate_slots wrapper's id list and ``runtime.hit``, ``evict`` ->
   ``popleft_n`` (then vLLM's hash reset and ref count), ``stored`` -> the
   blocks' hashes set (vLLM) and the cache_full_blocks wrapper's id list and
   ``runtime.stored``, ``release`` -> ``BlockPool.free_blocks`` (ref counts,
   hashless ``prepend_n``, cached ``append_n``). The runtime is the compiled
   frequency runtime (or the hooks, ``--hooks``).
3. Per operation kind: wall time of the adapter's part (the call's
   ``perf_counter`` time less the runtime's ``policy_seconds`` in it), us per
   request; with 64 MiB written before each request (cold) and without (warm).
   Asserts the victims of every allocation equal the simulator's.

    /work/main/.venv/bin/python results/issue11-s25-adapter/queue_cost.py [--rounds 5] [--hooks]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
import types

os.environ["SPFCORE_SIM_REPLAY"] = "python"
import numpy as np  # noqa: E402
from vllm.v1.core.kv_cache_utils import KVCacheBlock  # noqa: E402

from spfcore.engine import vllm_adapter  # noqa: E402
from spfcore.engine.compiled import compiled_runtime  # noqa: E402
from spfcore.runtime import PolicyRuntime  # noqa: E402
from spfcore.sim import prepare, simulate  # noqa: E402
from spfcore.workloads.generators import make  # noqa: E402

EVENTS = ("arrived", "hit", "touch", "evict", "stored", "finished", "release")
NB, BS = 3561, 16
BASE = "d6d012c"
_perf = time.perf_counter


def record():
    wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
              output_tokens=32, order="round_robin")
    log, orig = [], {e: getattr(PolicyRuntime, e) for e in EVENTS}

    def wrap(name):
        f = orig[name]

        def w(self, *args):
            a = [list(x) if isinstance(x, (list, tuple, np.ndarray)) else x for x in args]
            if name == "stored":
                a[2] = [hashlib.sha256(repr(k).encode()).digest() for k in a[2]]
            r = f(self, *args)
            log.append((name, a, list(r) if name == "evict" else None))
            return r
        return w
    for e in EVENTS:
        setattr(PolicyRuntime, e, wrap(e))
    try:
        simulate(prepare(wl, BS), "frequency", num_blocks=NB, block_size=BS)
    finally:
        for e in EVENTS:
            setattr(PolicyRuntime, e, orig[e])
    return log, len(wl.requests)


def baseline_module():
    """main's adapter (``BASE``) as a module of its own."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = subprocess.run(["git", "-C", root, "show", f"{BASE}:spfcore/engine/vllm_adapter.py"],
                         check=True, capture_output=True, text=True).stdout
    mod = types.ModuleType("vllm_adapter_base")
    mod.__file__ = "vllm_adapter_base.py"
    sys.modules[mod.__name__] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def pool_touch(q, blocks):  # vLLM's BlockPool.touch
    for b in blocks:
        if b.ref_cnt == 0 and not b.is_null:
            q.remove(b)
        b.ref_cnt += 1


def run(log, mod, hooks, buf):
    """Per op kind: adapter seconds (a call's time less the runtime's), and the victims."""
    base = PolicyRuntime.for_policy("frequency", NB, BS, None, key_map=False)
    rt = base if hooks else compiled_runtime(base)
    blocks = [KVCacheBlock(i) for i in range(NB)]
    q = mod.PolicyFreeQueue(blocks, rt)
    blocks[0].is_null = True  # vLLM's null block, never free (the simulator's pool leaves it out too)
    assert log[0][0] == "release" and log[0][1][1] == list(range(1, NB)), log[0][0]
    q.install_free(blocks[1:])  # the stream's step 0
    spent = dict.fromkeys(("touch", "hit", "evict", "stored", "release", "arrived", "finished"), 0.0)
    out = []
    view = None
    for name, a, _ in log[1:]:
        if name == "arrived":
            if buf is not None:
                buf += 1
            view = a[0]
            rt.arrived(*a)
            continue
        if name == "touch":
            tb = [blocks[i] for i in a[0]]
            p0, t = rt.policy_seconds, _perf()
            q.touch_many(pool_touch, q, tb)
        elif name == "hit":
            hb = [blocks[i] for i in a[1]]  # computed.blocks[0]
            p0, t = rt.policy_seconds, _perf()
            rt.hit(view, [b.block_id for b in hb], a[2])  # the allocate_slots wrapper's id list
        elif name == "evict":
            p0, t = rt.policy_seconds, _perf()
            got = q.popleft_n(a[0])
            dt = _perf() - t - (rt.policy_seconds - p0)
            out.append([b.block_id for b in got])
            for b in got:  # vLLM: _maybe_evict_cached_block, ref_cnt
                b._block_hash = None
                b.ref_cnt += 1
        elif name == "stored":
            _, ids, keys, first, parent, bs, now = a
            sb = [blocks[i] for i in ids]
            for b, k in zip(sb, keys):  # vLLM's cache_full_blocks
                b._block_hash = k
            p0, t = rt.policy_seconds, _perf()
            ids2 = [b.block_id for b in sb]  # the cache_full_blocks wrapper's list
            rt.stored(view, ids2, keys if rt.wants_block_hashes else list(map(int.from_bytes, keys)), first,
                      parent, bs, now)
        elif name == "release":
            cached, hashless = a[0], a[1]
            bl = [blocks[i] for i in cached]
            hl = [blocks[i] for i in hashless]
            for b in bl:  # vLLM's free_blocks: ref counts, then the two lists
                b.ref_cnt -= 1
            for b in hl:
                b.ref_cnt -= 1
            p0, t = rt.policy_seconds, _perf()
            q.prepend_n(hl)
            q.append_n(bl)
        elif name == "finished":
            p0, t = rt.policy_seconds, _perf()
            rt.finished(*a)
        if name != "evict":
            dt = _perf() - t - (rt.policy_seconds - p0)
        spent[name] += dt
    spent["runtime"] = rt.policy_seconds
    return spent, out, q


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hooks", action="store_true")
    ap.add_argument("--only-new", action="store_true")
    ap.add_argument("--arrays", choices=("on", "off", "class"), default="class",
                    help="FrequencyKernelRuntime.id_arrays: on, off, or as the class says")
    args = ap.parse_args()
    if args.arrays != "class":
        from spfcore.engine.compiled import FrequencyKernelRuntime
        FrequencyKernelRuntime.id_arrays = args.arrays == "on"
    log, n = record()
    want = [r for name, _, r in log if name == "evict"]
    counts = {}
    for name, a, _ in log:
        counts[name] = counts.get(name, 0) + 1
    print(f"{n} requests, {len(log)} runtime calls: {counts}")
    mods = {"new": vllm_adapter} if args.only_new else {"base": baseline_module(), "new": vllm_adapter}
    buf = np.zeros(64 << 17, np.int64)
    res = {}
    for i in range(args.rounds):
        for cold in (False, True):
            order = list(mods) if i % 2 == 0 else list(mods)[::-1]
            for k in order:
                spent, victims, q = run(log, mods[k], args.hooks, buf if cold else None)
                assert victims == want, k
                res.setdefault((k, cold), []).append(spent)
    print(f"runtime: {'hooks' if args.hooks else 'compiled'}; victims equal the simulator's in every run")
    for cold in (False, True):
        print(f"--- {'cold (64 MiB written before each request)' if cold else 'warm'}: adapter us/request, "
              "median [min, max] of rounds")
        for k in mods:
            rs = res[k, cold]
            tot = [(sum(r.values()) - r["runtime"]) / n * 1e6 for r in rs]
            both = [sum(r.values()) / n * 1e6 for r in rs]
            parts = []
            for op in ("touch", "hit", "evict", "stored", "release"):
                xs = [r[op] / n * 1e6 for r in rs]
                parts.append(f"{op} {np.median(xs):.1f}")
            print(f"{k:5s} total {np.median(tot):6.1f} [{min(tot):.1f}, {max(tot):.1f}]: {', '.join(parts)}; "
                  f"with the runtime's events {np.median(both):.1f} [{min(both):.1f}, {max(both):.1f}]")


if __name__ == "__main__":
    main()
