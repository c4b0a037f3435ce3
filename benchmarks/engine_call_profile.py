"""What the vLLM adapter asks of the policy runtime per request, next to what
the simulator (and so ``benchmarks/bench_policy_cost.py``) asks, and what each
stream costs when replayed into a fresh runtime on this CPU (issue 11, part 5:
why the engine's ``policy ms/req`` is about twice the benchmark's).

Step 1 (``record``, starts a real vLLM CPU engine on the embedded tiny model):
the seed's per-request shape (8192-token persona prefix, 128-token query, 32
output tokens, round robin; block size 32 on CPU) at a small scale, sequential
mode as the gate runs it; every :class:`~spfcore.runtime.PolicyRuntime` call
is recorded (:func:`spfcore.sim.replay.record_runtime_calls`), for the engine
and for the simulator on the same workload and cache, and pickled to ``OUT``.

Step 2 (``compare``, no engine): per arm and driver, calls per request of each
runtime method and their mean size (blocks), then both streams replayed
(:func:`spfcore.sim.replay.replay`, decisions checked) ``--repeat`` times,
interleaved: the runtime's ``policy_seconds`` and ``hook_seconds`` per
request (best, median, range). Prints figures; asserts nothing.

    python benchmarks/engine_call_profile.py record OUT.pkl [--arms ...] [--personas 4] [--num-blocks 800]
    python benchmarks/engine_call_profile.py compare OUT.pkl [--repeat 5] [--thrash-mb 32]
    python benchmarks/engine_call_profile.py touch - [--chain 128]   # the adapter's per-hit touch cost

On an H200 (the seed's model and block size; 16 requests, 4 arms):

    python benchmarks/engine_call_profile.py record OUT.pkl --model llama-3.2-3b --block-size 16 \
        --num-blocks 1601 && python benchmarks/bench_policy_cost.py --engine-events OUT.pkl --repeat 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import statistics
import time
from collections import Counter, defaultdict

ARMS = "lru,session_ttl,spf_expected_utility,belady_oracle"
SIZE_ARG = {"hit": 1, "stored": 1, "release": 0, "touch": 0, "evict": 0}  # the argument holding the blocks


def _workload(personas: int, sessions: int, turns: int, prefix: int, seed: int):
    from spfcore.workloads.generators import make

    return make("personas", seed=seed, personas=personas, prefix_tokens=prefix, sessions=sessions, turns=turns,
                query_tokens=128, output_tokens=32, order="round_robin")


@contextlib.contextmanager
def gc_probe():
    """Time Python's cyclic garbage collections while the block runs: all of
    them, and those that started inside a policy runtime call (a frame of
    spfcore/runtime.py, spfcore/evictor.py or a plugin's module on the stack),
    whose time the runtime's ``policy_seconds`` counts."""
    import gc
    import sys

    out = {"all_s": 0.0, "inside_s": 0.0, "inside": 0, "gens": Counter()}
    state = [0.0, False]
    marks = (f"spfcore{os.sep}runtime.py", f"spfcore{os.sep}evictor.py", f"plugins{os.sep}")

    def cb(phase, info):
        if phase == "start":
            f = sys._getframe(1)
            inside = False
            while f is not None:
                if any(m in f.f_code.co_filename for m in marks):
                    inside = True
                    break
                f = f.f_back
            state[0], state[1] = time.perf_counter(), inside
        else:
            dt = time.perf_counter() - state[0]
            out["all_s"] += dt
            if state[1]:
                out["inside_s"] += dt
                out["inside"] += 1
                out["gens"][info["generation"]] += 1

    gc.callbacks.append(cb)
    try:
        yield out
    finally:
        gc.callbacks.remove(cb)
        out["gens"] = dict(out["gens"])


def record(a) -> None:
    from spfcore.engine.runner import EngineSpec, open_engine
    from spfcore.sim import prepare, simulate
    from spfcore.sim.replay import record_runtime_calls
    from spfcore.sim.simulator import REPLAY_ENV

    arms = a.arms.split(",")
    wl = _workload(a.personas, a.sessions, a.turns, a.prefix_tokens, a.seed)
    spec = EngineSpec(model=a.model, block_size=a.block_size, num_blocks=a.num_blocks, max_model_len=12288,
                      max_num_seqs=8, dtype="float32" if a.model == "tiny" else "auto")
    out = {"arms": arms, "block_size": a.block_size, "num_blocks": a.num_blocks, "requests": len(wl.requests),
           "streams": {}}
    sess = open_engine(spec, arms[0])
    sched = sess.scheduler
    try:
        for arm in arms:
            sess.use_policy(arm, vllm_order_queue=False)  # lru too: its runtime path (the runner's is vLLM's queue)
            with record_runtime_calls() as log, gc_probe() as gcs:
                mark(sched, log, sess)
                t = time.monotonic()
                cell = sess.run(wl, a.seed, "sequential")
                wall = time.monotonic() - t
            n = len(wl.requests)
            print(f"{arm}: Python GC inside runtime calls {gcs['inside_s'] / n * 1e3:.3f} ms/req "
                  f"({gcs['inside']} collections, by generation {gcs['gens']}); all GC {gcs['all_s'] / n * 1e3:.3f} ms/req")
            rt = sess.runtime
            out["streams"][(arm, "engine")] = log.of(rt)
            out.setdefault("cells", {})[arm] = {k: cell.get(k) for k in ("policy_seconds", "hook_seconds",
                                                                         "token_hit_rate", "num_requests")}
            print(f"{arm}: engine run {wall:.1f} s, policy {cell.get('policy_seconds', 0) / len(wl.requests) * 1e3:.3f}"
                  f" ms/req, hit rate {cell.get('token_hit_rate')}", flush=True)
    finally:
        sess.close()
    os.environ[REPLAY_ENV] = "python"  # the event-by-event path the engine drives, not a compiled replay
    prep = prepare(wl, a.block_size)
    for arm in arms:
        with record_runtime_calls() as log:
            simulate(prep, arm, num_blocks=a.num_blocks, block_size=a.block_size)
        key = [k for k, d in log.drivers.items() if d == "sim"][-1]
        out["streams"][(arm, "sim")] = log.events[key]
    with open(a.out, "wb") as f:
        pickle.dump(out, f)
    print(f"recorded {len(out['streams'])} streams to {a.out}")


STEP = "_step"  # a marker in a recorded engine stream: vLLM's scheduler step (schedule or update_from_output) began


def mark(sched, log, sess) -> None:
    """Put a :data:`STEP` marker into ``sess``'s recorded stream whenever
    vLLM's scheduler starts ``schedule`` or ``update_from_output`` (instance
    attributes; the engine's model step runs between them)."""
    for name in ("schedule", "update_from_output"):
        orig = getattr(type(sched), name)

        def wrapped(*args, _orig=orig, **kwargs):
            log.events.setdefault(id(sess.runtime), []).append((STEP, (), None))
            return _orig(sched, *args, **kwargs)

        setattr(sched, name, wrapped)


def profile(events, n: int) -> dict:
    """``{method: (calls per request, mean blocks per call or None)}``."""
    calls, blocks = Counter(), defaultdict(int)
    for name, args, result in events:
        if name == STEP:
            continue
        calls[name] += 1
        if name in SIZE_ARG:
            x = args[SIZE_ARG[name]]
            if name == "release":
                blocks[name] += len(args[0]) + len(args[1])
            elif name == "evict":
                blocks[name] += int(x)
            else:
                blocks[name] += len(x)
    return {m: (c / n, blocks[m] / c if m in SIZE_ARG else None) for m, c in sorted(calls.items())}


def timed_replay(events, arm: str, nb: int, bs: int, thrash=None) -> tuple:
    """Replay ``events`` into a fresh runtime of ``arm`` (decisions checked, as
    :func:`spfcore.sim.replay.replay`), calling ``thrash()`` untimed before
    every event; returns the runtime's ``(policy_seconds, hook_seconds,
    {method: seconds})``, the last timed by ``perf_counter`` around each call."""
    from spfcore.runtime import PolicyRuntime

    rt = PolicyRuntime.for_policy(arm, nb, bs, None, env={}, key_map=False)
    per = defaultdict(float)
    clock = time.perf_counter
    cold = False
    for name, args, result in events:
        if name == STEP:  # the engine's model step ran here: the runtime's data and code leave the caches
            cold = thrash is not None
            continue
        if cold:  # once before the step's first runtime call (steps without any call cost nothing here)
            thrash()
            cold = False
        fn = getattr(rt, name)
        t = clock()
        out = fn(*args)
        per[name] += clock() - t
        if name == "evict" and tuple(out) != tuple(result or ()):
            raise AssertionError(f"{arm}: replayed decision differs from the recorded one")
    return rt.policy_seconds, rt.hook_seconds, per


def make_thrash(mb: int):
    """A stand-in for an engine step between two runtime calls: writes ``mb``
    MiB of memory and runs some Python object churn (evicting the runtime's
    data and code from the CPU caches), untimed."""
    import numpy as np

    if not mb:
        return None
    buf = np.zeros(mb << 17, np.float64)
    junk = [object() for _ in range(2000)]

    def thrash():
        np.add(buf, 1.0, out=buf)
        d = {i: j for i, j in enumerate(junk)}
        sorted(d, key=id)

    return thrash


def compare(a) -> None:
    from spfcore import runtime
    if not a.wall_clock:
        runtime._perf = time.process_time
    with open(a.out, "rb") as f:
        doc = pickle.load(f)
    n, nb, bs = doc["requests"], doc["num_blocks"], doc["block_size"]
    arms = a.arms.split(",") if a.arms else doc["arms"]
    print(f"{n} requests, {nb} blocks of {bs} tokens")
    for arm in arms:
        for drv in ("engine", "sim"):
            p = profile(doc["streams"][(arm, drv)], n)
            print(f"  {arm:<22}{drv:<7}" + "  ".join(
                f"{m} {c:.2f}" + (f"x{s:.0f}" if s is not None else "") for m, (c, s) in p.items()))
    times = defaultdict(list)
    per = {}
    drvs = [(d, mb) for d in ("engine", "sim") for mb in sorted({0, a.thrash_mb})]
    for _ in range(a.repeat):
        for arm in arms:
            for drv, mb in drvs:
                ps, hs, m = timed_replay(doc["streams"][(arm, drv)], arm, nb, bs, make_thrash(mb))
                times[(arm, drv, mb)].append((ps / n * 1e3, hs / n * 1e3))
                per[(arm, drv, mb)] = m
    print(f"{'arm':<24}{'driver':<8}{'thrash MiB':>11}{'policy ms/req best':>20}{'median':>8}{'range':>16}"
          f"{'hooks best':>12}  per method (us/req, last round)")
    for arm in arms:
        for drv, mb in drvs:
            ps = [t[0] for t in times[(arm, drv, mb)]]
            hs = [t[1] for t in times[(arm, drv, mb)]]
            m = per[(arm, drv, mb)]
            print(f"{arm:<24}{drv:<8}{mb:>11}{min(ps):>20.3f}{statistics.median(ps):>8.3f}"
                  f"{f'{min(ps):.3f}-{max(ps):.3f}':>16}{min(hs):>12.3f}  "
                  + " ".join(f"{k} {v / n * 1e6:.0f}" for k, v in sorted(m.items())))


def touch_cost(a) -> None:
    """The adapter's cost of a hit chain leaving the free queue: vLLM's
    ``BlockPool.touch`` loop calling :meth:`PolicyFreeQueue.remove` per block
    with one ``runtime.touch`` each, against :meth:`PolicyFreeQueue.touch_many`
    (one ``runtime.touch`` per chain); chains of ``--chain`` cached free
    blocks, arms interleaved, ``--repeat`` rounds; us per chain."""
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    from spfcore.engine.vllm_adapter import PolicyFreeQueue
    from spfcore.runtime import PolicyRuntime
    from spfcore.views import RequestView

    arms = (a.arms or ARMS).split(",")
    nb, k, reps = a.num_blocks, a.chain, 200
    res = defaultdict(list)
    for _ in range(a.repeat):
        for arm in arms:
            for batched in (False, True):
                blocks = [KVCacheBlock(i) for i in range(nb)]
                rt = PolicyRuntime.for_policy(arm, nb, a.block_size, None, env={}, key_map=False)
                if rt.needs_future:
                    rt.set_future(())
                q = PolicyFreeQueue(blocks, rt)
                q.install_free(blocks[1:])
                spent = 0.0
                for r in range(reps):
                    chain = q.popleft_n(k)
                    keys = [("c", r, j) for j in range(k)]
                    ids = [b.block_id for b in chain]
                    rt.stored(RequestView(f"r{r}", None, r, float(r), k * a.block_size, tuple(keys)), ids, keys, 0,
                              None, a.block_size, float(r))
                    for b, key in zip(chain, keys):
                        b.reset_hash()
                        b.set_block_hash(key)
                    q.append_n(chain[::-1])

                    def pool_touch(bs):
                        for b in bs:
                            q.remove(b)

                    t = time.perf_counter()
                    if batched:
                        q.touch_many(pool_touch, chain)
                    else:
                        pool_touch(chain)
                    spent += time.perf_counter() - t
                    q.append_n(chain[::-1])
                res[(arm, batched)].append(spent / reps * 1e6)
    print(f"hit chains of {k} free cached blocks, {nb} blocks; us per chain (best, median, range over {a.repeat} rounds)")
    for arm in arms:
        for batched in (False, True):
            xs = res[(arm, batched)]
            print(f"  {arm:<24}{'touch_many' if batched else 'per block':<12}{min(xs):>9.1f}{statistics.median(xs):>9.1f}"
                  f"   {min(xs):.1f}-{max(xs):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("record", "compare", "touch"))
    ap.add_argument("out")
    ap.add_argument("--arms", default=None)
    ap.add_argument("--personas", type=int, default=4)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--prefix-tokens", type=int, default=8192)
    ap.add_argument("--block-size", type=int, default=32, help="32 on CPU; 16 on a GPU, as the seed")
    ap.add_argument("--model", default="tiny", help="tiny, llama-3.2-3b (GPU) or a checkpoint folder")
    ap.add_argument("--num-blocks", type=int, default=800)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--wall-clock", action="store_true")
    ap.add_argument("--chain", type=int, default=128, help="touch: blocks per hit chain")
    ap.add_argument("--thrash-mb", type=int, default=0,
                    help="also replay with MiB of memory written (and Python churn) before every event, untimed")
    a = ap.parse_args()
    if a.step == "record":
        a.arms = a.arms or ARMS
        record(a)
    elif a.step == "touch":
        touch_cost(a)
    else:
        compare(a)


if __name__ == "__main__":
    main()
