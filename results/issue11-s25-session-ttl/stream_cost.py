"""session_ttl's runtime events on the seed's full-scale workload, hooks vs the
compiled engine runtime, warm and with 64 MiB written before each request
(cold caches, as the model's work between engine steps leaves them;
results/gpu-h200-engine-calls-75ab649). CPU time per request, interleaved.

1. Records every PolicyRuntime call of the simulator's reference loop
   (SPFCORE_SIM_REPLAY=python) over ``session_ttl`` (16 personas x 8,192 tokens,
   32 sessions x 4 turns, block size 16, 3,561 blocks), each key given a
   32-byte sha256 "vLLM block hash".
2. Replays it into a fresh hook runtime (keys as ``vllm_keys`` makes them,
   the conversion timed) and into ``SessionTTLKernelRuntime`` (the hashes);
   asserts the victims of every allocation are equal; prints ms/request.

    /work/main/.venv/bin/python results/issue11-s25-session-ttl/stream_cost.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

os.environ["SPFCORE_SIM_REPLAY"] = "python"
import numpy as np  # noqa: E402

from spfcore.engine.compiled import compiled_runtime  # noqa: E402
from spfcore.runtime import PolicyRuntime  # noqa: E402
from spfcore.sim import prepare, simulate  # noqa: E402
from spfcore.workloads.generators import make  # noqa: E402

EVENTS = ("arrived", "hit", "touch", "evict", "stored", "finished", "release")
NB, BS = 3561, 16


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
        simulate(prepare(wl, BS), "session_ttl", num_blocks=NB, block_size=BS)
    finally:
        for e in EVENTS:
            setattr(PolicyRuntime, e, orig[e])
    return log, len(wl.requests)


def run(log, rt, hashes, buf):
    """Seconds of CPU time in the events (the 64 MiB writes not counted), and the victims."""
    spent, out = 0.0, []
    for name, a, _ in log:
        if name == "arrived" and buf is not None:
            buf += 1
        t = time.process_time()
        if name == "stored" and not hashes:
            a = list(a)
            a[2] = list(map(int.from_bytes, a[2]))  # vllm_keys
        r = getattr(rt, name)(*a)
        spent += time.process_time() - t
        if name == "evict":
            out.append(r)
    return spent, out


def per_event(log, rt, buf):
    """CPU seconds per event kind of one cold replay."""
    out = {}
    for name, a, _ in log:
        if name == "arrived":
            buf += 1
        t = time.process_time()
        getattr(rt, name)(*a)
        out[name] = out.get(name, 0.0) + time.process_time() - t
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    rounds = ap.parse_args().rounds
    log, n = record()
    want = [r for name, _, r in log if name == "evict"]
    buf = np.zeros(64 << 17, np.int64)
    res = {(k, c): [] for k in ("hooks", "compiled") for c in ("warm", "cold")}
    stats, ev = {}, {}
    for i in range(rounds):
        for cold in (False, True):
            for kind in (("hooks", "compiled") if i % 2 == 0 else ("compiled", "hooks")):
                base = PolicyRuntime.for_policy("session_ttl", NB, BS, None, key_map=False)
                rt = base if kind == "hooks" else compiled_runtime(base)
                dt, victims = run(log, rt, kind == "compiled", buf if cold else None)
                assert victims == want, kind
                st = rt.stats()
                stats.setdefault(kind, (st["evictions"], st["evict_calls"], st["hook_calls"], st["pins_refused"]))
                assert stats[kind] == stats.setdefault("hooks", stats[kind]), (kind, stats)
                if kind == "compiled" and cold:
                    for e, x in per_event(log, rt.__class__(NB, BS, ttl=rt.ttl, pin_cap=rt.pin_cap), buf).items():
                        ev.setdefault(e, []).append(x / n * 1e3)
                res[kind, "cold" if cold else "warm"].append(dt / n * 1e3)
    print(f"{n} requests, {len(log)} runtime calls, {len(want)} allocations: victims equal in every run")
    print("(evictions, evict_calls, hook_calls, pins_refused) equal:", stats["hooks"])
    print("compiled, cold, per event (ms/req, median):",
          ", ".join(f"{e} {np.median(x):.3f}" for e, x in sorted(ev.items(), key=lambda kv: -np.median(kv[1]))))
    for c in ("warm", "cold"):
        for k in ("hooks", "compiled"):
            xs = res[k, c]
            print(f"{c:4s} {k:8s}: {np.median(xs):.3f} ms/req (min {min(xs):.3f}, max {max(xs):.3f})")
        r = [b / a for a, b in zip(res["hooks", c], res["compiled", c])]
        print(f"{c:4s} compiled / hooks per round: {', '.join(f'{x:.2f}' for x in r)}")


if __name__ == "__main__":
    main()
