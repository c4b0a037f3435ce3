"""spf_expected_utility's runtime events on the seed's full-scale workload,
hooks vs the compiled engine runtime (SpfKernelRuntime), warm and with 64
MiB written before each request (cold caches, as the model's work between
engine steps leaves them; results/gpu-h200-engine-calls-75ab649). CPU time
per request, interleaved rounds. Modelled on
results/issue11-s24-compiled-frequency/stream_cost.py.

1. Records every PolicyRuntime call of the simulator's reference loop
   (SPFCORE_SIM_REPLAY=python) over ``spf_expected_utility`` (default params:
   variant ``utility``; 16 personas x 8,192 tokens, 32 sessions x 4 turns,
   block size 16, 3,561 blocks), each key (stored keys, parents, the views'
   prompt keys) given a 32-byte sha256 "vLLM block hash".
2. Replays it into a fresh hook runtime (keys as ``vllm_keys`` makes them:
   the stores' and the arrivals' conversions timed, as the adapter makes
   them for the hooks) and into ``SpfKernelRuntime`` (the hashes); asserts
   the victims of every allocation are equal; prints ms/request.

    /work/main/.venv/bin/python results/issue11-s25-spf/stream_cost.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

os.environ["SPFCORE_SIM_REPLAY"] = "python"
import attrs  # noqa: E402
import numpy as np  # noqa: E402

from spfcore.engine.compiled import SpfKernelRuntime  # noqa: E402
from spfcore.runtime import PolicyRuntime  # noqa: E402
from spfcore.sim import prepare, simulate  # noqa: E402
from spfcore.sim._replay_spf_nb import params_of  # noqa: E402
from spfcore.workloads.generators import make  # noqa: E402

EVENTS = ("arrived", "hit", "touch", "evict", "stored", "finished", "release")
NB, BS = 3561, 16
ARM = "spf_expected_utility"


def _h(k) -> bytes:
    return hashlib.sha256(repr(k).encode()).digest()


def record():
    wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
              output_tokens=32, order="round_robin")
    log, orig = [], {e: getattr(PolicyRuntime, e) for e in EVENTS}
    views = {}

    def view(v):
        if id(v) not in views:
            views[id(v)] = (v, attrs.evolve(v, block_keys=tuple(map(_h, v.block_keys))))
        return views[id(v)][1]

    def wrap(name):
        f = orig[name]

        def w(self, *args):
            a = [list(x) if isinstance(x, (list, tuple, np.ndarray)) else x for x in args]
            if name in ("arrived", "hit", "stored", "finished"):
                a[0] = view(a[0])
            if name == "stored":
                a[2] = [_h(k) for k in a[2]]
                a[4] = None if a[4] is None else _h(a[4])
            r = f(self, *args)
            log.append((name, a, list(r) if name == "evict" else None))
            return r
        return w
    for e in EVENTS:
        setattr(PolicyRuntime, e, wrap(e))
    try:
        simulate(prepare(wl, BS), ARM, num_blocks=NB, block_size=BS)
    finally:
        for e in EVENTS:
            setattr(PolicyRuntime, e, orig[e])
    return log, len(wl.requests)


def run(log, rt, hashes, buf):
    """Seconds of CPU time in the events (the 64 MiB writes not counted), and the victims."""
    spent, out, iv = 0.0, [], {}
    for name, a, _ in log:
        if name == "arrived" and buf is not None:
            buf += 1
        t = time.process_time()
        if not hashes:
            a = list(a)
            if name == "arrived":
                v = a[0]
                iv[v.request_id] = attrs.evolve(v, block_keys=tuple(map(int.from_bytes, v.block_keys)))  # vllm_keys
            if name in ("arrived", "hit", "stored", "finished"):
                a[0] = iv[a[0].request_id]
            if name == "stored":
                a[2] = list(map(int.from_bytes, a[2]))  # vllm_keys
                a[4] = None if a[4] is None else int.from_bytes(a[4])
        r = getattr(rt, name)(*a)
        spent += time.process_time() - t
        if name == "evict":
            out.append(r)
    return spent, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    rounds = ap.parse_args().rounds
    log, n = record()
    want = [r for name, _, r in log if name == "evict"]
    buf = np.zeros(64 << 17, np.int64)
    res = {(k, c): [] for k in ("hooks", "compiled") for c in ("warm", "cold")}
    for i in range(rounds):
        for cold in (False, True):
            for kind in (("hooks", "compiled") if i % 2 == 0 else ("compiled", "hooks")):
                base = PolicyRuntime.for_policy(ARM, NB, BS, None, key_map=False)
                if kind == "hooks":
                    rt = base
                else:
                    pol, pin = params_of(base)
                    rt = SpfKernelRuntime(NB, BS, policy=pol, pin_cap=pin)
                dt, victims = run(log, rt, kind == "compiled", buf if cold else None)
                assert victims == want, kind
                res[kind, "cold" if cold else "warm"].append(dt / n * 1e3)
    print(f"{n} requests, {len(log)} runtime calls, {len(want)} allocations, "
          f"{sum(map(len, want))} victims: victims equal in every run")
    for c in ("warm", "cold"):
        for k in ("hooks", "compiled"):
            xs = res[k, c]
            print(f"{c:4s} {k:8s}: {np.median(xs):.3f} ms/req (min {min(xs):.3f}, max {max(xs):.3f})")
        r = [b / a for a, b in zip(res["hooks", c], res["compiled", c])]
        print(f"{c:4s} compiled / hooks per round: {', '.join(f'{x:.2f}' for x in r)}")


if __name__ == "__main__":
    main()
