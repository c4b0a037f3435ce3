"""spfcore ms per request in the real CPU engine (tiny model) at the seed's
full-scale shape (8,192-token prefixes, 128-token queries, 32 output tokens,
32 sessions x 4 turns): block size 32 (the CPU attention backend takes
multiples of 32) and 1,781 blocks (the same cache in tokens as 3,561 blocks
of 16). One engine, one warm-up run, then each arm per round (plugin arms on
their compiled runtime): policy = adapter + runtime, throughput, evictions.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv/bin/python results/issue11-s26-runtimes/engine_cost.py \
        lru,frequency,session_ttl,belady_oracle,spf_expected_utility 1
"""
import sys, time
from spfcore.engine.runner import EngineSpec, open_engine
from spfcore.workloads.generators import make
arms = sys.argv[1].split(","); rounds = int(sys.argv[2])
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
          output_tokens=32, order="round_robin")
n = len(wl.requests)
spec = EngineSpec(model="tiny", block_size=32, num_blocks=1781)
with open_engine(spec, arms[0]) as s:
    t = time.time(); s.run(wl, seed=42); print("warm-up", time.time() - t, flush=True)
    for r in range(rounds):
        for arm in arms:
            s.use_policy(arm, compiled=arm != "lru")
            c = s.run(wl, seed=42)
            a = c["adapter_seconds"]
            print(f"{arm:22s} {c['served_by']:10s} policy {c['policy_seconds']/n*1e3:.3f} adapter {a/n*1e3:.3f} "
                  f"runtime {(c['policy_seconds']-a)/n*1e3:.3f} ms/req rps {c['throughput_rps']:.2f} ev {c['evictions']}", flush=True)
