"""Record the simulator's runtime calls on bench_policy_cost.py's default
workload (the seed at full scale: 128 requests x ~520 blocks, block size 16,
3,561 blocks, sequential) per arm, in the pickle format of
``benchmarks/engine_call_profile.py record`` (the simulator's stream stored
under both drivers, ``engine`` with a step marker before every arrival, hit,
release and the first call after them), so ``bench_policy_cost.py
--engine-events FILE --thrash-mb M`` replays it; or break one arm's replay
down per runtime method (``--per-method``, CPU time, best of ``--repeat``).

    python results/issue11w-hotpath/sim_stream.py record OUT.pkl [--arms ...]
    python results/issue11w-hotpath/sim_stream.py per-method OUT.pkl [--arms ...] [--repeat 7] [--profile]
"""
import argparse
import os
import pickle
import sys
import time
from collections import defaultdict

from spfcore.sim import prepare, simulate
from spfcore.sim.replay import record_runtime_calls
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.workloads.generators import make

ARMS = "lru,session_ttl,frequency,spf_expected_utility,belady_oracle"
STEP = "_step"


def record(a):
    os.environ[REPLAY_ENV] = "python"
    wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4,
              query_tokens=128, output_tokens=32, order="round_robin")
    prep = prepare(wl, 16)
    out = {"arms": a.arms.split(","), "block_size": 16, "num_blocks": 3561, "requests": len(wl.requests),
           "streams": {}}
    for arm in out["arms"]:
        with record_runtime_calls() as log:
            simulate(prep, arm, num_blocks=3561, block_size=16)
        key = [k for k, d in log.drivers.items() if d == "sim"][-1]
        ev = log.events[key]
        out["streams"][(arm, "sim")] = ev
        eng = []
        for e in ev:  # a scheduler step boundary where the engine would run the model
            if e[0] in ("arrived", "hit", "release", "evict", "stored"):
                eng.append((STEP, (), None))
            eng.append(e)
        out["streams"][(arm, "engine")] = eng
    with open(a.out, "wb") as f:
        pickle.dump(out, f)
    print(f"recorded {len(out['streams'])} streams to {a.out}")


def per_method(a):
    from spfcore import runtime
    from spfcore.runtime import PolicyRuntime

    runtime._perf = time.process_time
    hooks = defaultdict(float)
    if a.hooks:  # time each hook call by name (process_time around PolicyRuntime._fire)
        fire = PolicyRuntime._fire

        def timed_fire(self, name, *args, _f=fire):
            t = time.process_time()
            try:
                return _f(self, name, *args)
            finally:
                hooks[name] += time.process_time() - t
        PolicyRuntime._fire = timed_fire
    with open(a.out, "rb") as f:
        doc = pickle.load(f)
    n, nb, bs = doc["requests"], doc["num_blocks"], doc["block_size"]
    for arm in a.arms.split(","):
        ev = [e for e in doc["streams"][(arm, "sim")] if e[0] != STEP]
        best = None
        for _ in range(a.repeat):
            hooks.clear()
            rt = PolicyRuntime.for_policy(arm, nb, bs, None, env={})
            per = defaultdict(float)
            clock = time.process_time
            prof = None
            if a.profile and _ == a.repeat - 1:
                import cProfile
                prof = cProfile.Profile()
                prof.enable()
            for name, args, result in ev:
                fn = getattr(rt, name)
                t = clock()
                fn(*args)
                per[name] += clock() - t
            if prof is not None:
                prof.disable()
            tot = rt.policy_seconds
            if best is None or tot < best[0]:
                best = (tot, dict(per), rt.hook_seconds, dict(hooks))
        tot, per, hs, hk = best
        print(f"{arm:<22} policy {tot / n * 1e3:.3f} ms/req, hooks {hs / n * 1e3:.3f}; "
              + " ".join(f"{k} {v / n * 1e6:.0f}" for k, v in sorted(per.items())) + " (us/req)")
        if hk:
            print("    hooks (us/req):", " ".join(f"{k.replace('spfcore_', '')} {v / n * 1e6:.0f}" for k, v in sorted(hk.items())))
        if prof is not None:
            import pstats
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)


ap = argparse.ArgumentParser()
ap.add_argument("step", choices=("record", "per-method"))
ap.add_argument("out")
ap.add_argument("--arms", default=ARMS)
ap.add_argument("--repeat", type=int, default=7)
ap.add_argument("--profile", action="store_true")
ap.add_argument("--hooks", action="store_true", help="time each hook by name")
a = ap.parse_args()
record(a) if a.step == "record" else per_method(a)
