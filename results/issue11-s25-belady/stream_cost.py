"""belady_oracle's runtime events on the seed's full-scale workload, hooks vs
the compiled engine runtime (BeladyKernelRuntime), warm and with 64 MiB
written before each request (cold caches, as the model's work between engine
steps leaves them; results/gpu-h200-engine-calls-75ab649). CPU time per
request, interleaved rounds, median [min, max].

1. Records every PolicyRuntime call of the simulator's reference loop
   (SPFCORE_SIM_REPLAY=python) over ``belady_oracle`` (16 personas x 8,192
   tokens, 32 sessions x 4 turns, block size 16, 3,561 blocks; sequential,
   or ``--concurrent``: the simulator's continuous batching, requests
   waiting for their lookup), each key given a 32-byte sha256 "vLLM block
   hash", the future stream too.
2. Replays it into a fresh hook runtime (keys as ``vllm_keys`` makes them:
   the stored hashes' and the arriving views' conversion timed, as the
   adapter does it for the hooks) and into ``BeladyKernelRuntime`` (the
   hashes; arriving views without keys, as the adapter gives a compiled
   runtime); asserts the victims of every allocation are equal; prints
   ms/request. ``set_future`` (once per run) is timed apart.

    /work/main/.venv/bin/python results/issue11-s25-belady/stream_cost.py [--rounds 5] [--concurrent]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

os.environ["SPFCORE_SIM_REPLAY"] = "python"
import attrs  # noqa: E402
import numpy as np  # noqa: E402

from spfcore.engine.compiled import compiled_runtime  # noqa: E402
from spfcore.runtime import PolicyRuntime  # noqa: E402
from spfcore.sim import prepare, simulate  # noqa: E402
from spfcore.workloads.generators import make  # noqa: E402

EVENTS = ("set_future", "arrived", "hit", "touch", "evict", "stored", "finished", "release")
NB, BS, ARM = 3561, 16, "belady_oracle"


def _h(k) -> bytes:
    return hashlib.sha256(repr(k).encode()).digest()


def record(concurrent: bool):
    wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
              output_tokens=32, order="round_robin")
    log, orig = [], {e: getattr(PolicyRuntime, e) for e in EVENTS}
    memo: dict = {}

    def hv(v):  # the view with hashes for keys (one object per view)
        if id(v) not in memo:
            memo[id(v)] = (v, attrs.evolve(v, block_keys=tuple(_h(k) for k in v.block_keys)))
        return memo[id(v)][1]

    def wrap(name):
        f = orig[name]

        def w(self, *args):
            if name == "set_future":
                args = (list(args[0]),)
                log.append((name, [[hv(v) for v in args[0]]], None))
                return f(self, *args)
            a = [list(x) if isinstance(x, (list, tuple, np.ndarray)) else x for x in args]
            if name == "stored":
                a[2] = [_h(k) for k in a[2]]
            if name in ("arrived", "hit", "stored", "finished"):
                a[0] = hv(a[0])
            r = f(self, *args)
            log.append((name, a, list(r) if name == "evict" else None))
            return r
        return w
    for e in EVENTS:
        setattr(PolicyRuntime, e, wrap(e))
    try:
        kw = dict(mode="concurrent", max_running=16) if concurrent else {}
        simulate(prepare(wl, BS), ARM, num_blocks=NB, block_size=BS, **kw)
    finally:
        for e in EVENTS:
            setattr(PolicyRuntime, e, orig[e])
    return log, len(wl.requests)


def ints(v):
    return attrs.evolve(v, block_keys=tuple(map(int.from_bytes, v.block_keys)))


def calls(log, hashes):
    """Each event's arguments as the adapter hands them to this runtime, made
    before the timed replay: the compiled runtime's views without keys; the
    hooks' stored hashes and arriving views' keys are left for :func:`run` to
    convert (timed: the adapter's ``vllm_keys``)."""
    memo: dict = {}
    out = []
    for name, a, _ in log:
        a = list(a)
        if name == "set_future":
            a[0] = [ints(v) for v in a[0]]
        elif name in ("arrived", "hit", "stored", "finished") and hashes:
            v = a[0]
            a[0] = memo.setdefault(id(v), (v, attrs.evolve(v, block_keys=())))[1]
        out.append((name, a))
    return out


def run(calls, rt, hashes, buf):
    """Seconds of CPU time in the events (the 64 MiB writes not counted), set_future's, and the victims."""
    spent, fut, out = 0.0, 0.0, []
    for name, a in calls:
        if name == "arrived" and buf is not None:
            buf += 1
        t = time.process_time()
        if name == "set_future":
            rt.set_future(*a)
            fut += time.process_time() - t
            continue
        if not hashes:
            if name == "stored":
                a = list(a)
                a[2] = list(map(int.from_bytes, a[2]))  # vllm_keys
            elif name == "arrived":
                a = [ints(a[0]), a[1]]  # the adapter's vllm_keys of the request's block hashes
        r = getattr(rt, name)(*a)
        spent += time.process_time() - t
        if name == "evict":
            out.append(r)
    return spent, fut, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrent", action="store_true")
    args = ap.parse_args()
    log, n = record(args.concurrent)
    want = [r for name, _, r in log if name == "evict"]
    buf = np.zeros(64 << 17, np.int64)
    res = {(k, c): [] for k in ("hooks", "compiled") for c in ("warm", "cold")}
    futs = {"hooks": [], "compiled": []}
    made = {k: calls(log, k == "compiled") for k in futs}
    for i in range(args.rounds):
        for cold in (False, True):
            for kind in (("hooks", "compiled") if i % 2 == 0 else ("compiled", "hooks")):
                base = PolicyRuntime.for_policy(ARM, NB, BS, None, key_map=False)
                rt = base if kind == "hooks" else compiled_runtime(base)
                dt, ft, victims = run(made[kind], rt, kind == "compiled", buf if cold else None)
                assert victims == want, kind
                res[kind, "cold" if cold else "warm"].append(dt / n * 1e3)
                futs[kind].append(ft * 1e3)
    mode = "concurrent (max_running 16)" if args.concurrent else "sequential"
    print(f"{mode}: {n} requests, {len(log)} runtime calls, {len(want)} allocations: victims equal in every run")
    for c in ("warm", "cold"):
        for k in ("hooks", "compiled"):
            xs = res[k, c]
            print(f"{c:4s} {k:8s}: {np.median(xs):.3f} ms/req [{min(xs):.3f}, {max(xs):.3f}]")
        r = [b / a for a, b in zip(res["hooks", c], res["compiled", c])]
        print(f"{c:4s} compiled / hooks per round: {', '.join(f'{x:.2f}' for x in r)}")
    for k, xs in futs.items():
        print(f"set_future {k:8s}: {np.median(xs):.1f} ms a run [{min(xs):.1f}, {max(xs):.1f}]")


if __name__ == "__main__":
    main()
