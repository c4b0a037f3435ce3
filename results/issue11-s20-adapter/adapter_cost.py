"""The vLLM adapter's own time per request in a real vLLM CPU engine (issue 11,
part 5: "all spfcore time per request (hooks, evictor, adapter)").

Runs the seed's request shape (8192-token persona prefixes, 128-token queries,
32 output tokens, round robin; block size 32, the CPU build's) at a small scale
through the embedded tiny model, sequential, for each arm given, ``--rounds``
times interleaved. Per cell it prints, in ms per request: the runtime's
events (``policy_seconds - adapter_seconds``), the adapter's own work
(``adapter_seconds``, PolicyFreeQueue.adapter_seconds), and what the key
computation the adapter did before session 20 would add: spfcore's BLAKE2b
chain of each prompt (``spfcore.keys.chain_keys``), timed in the same process
right after the cell on the same prompts. Prints figures; asserts nothing.

    python results/issue11-s20-adapter/adapter_cost.py [--arms lru,belady_oracle] [--rounds 3]
"""
import argparse
import statistics
import time

from spfcore.engine.runner import EngineSpec, open_engine
from spfcore.keys import chain_keys
from spfcore.workloads.generators import make

ap = argparse.ArgumentParser()
ap.add_argument("--arms", default="lru,frequency,belady_oracle")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--personas", type=int, default=4)
ap.add_argument("--num-blocks", type=int, default=801)
a = ap.parse_args()
wl = make("personas", seed=42, personas=a.personas, prefix_tokens=8192, sessions=2 * a.personas, turns=2,
          query_tokens=128, output_tokens=32, order="round_robin")
n = len(wl.requests)
rows = {arm: [] for arm in a.arms.split(",")}
with open_engine(EngineSpec(block_size=32, num_blocks=a.num_blocks, max_model_len=8192 + 512), "lru") as s:
    for r in range(a.rounds):
        for arm in rows:
            s.use_policy(arm)
            cell = s.run(wl, 42)
            t = time.perf_counter()
            for q in wl.requests:
                chain_keys(q.prompt_token_ids, 32)
            old = (time.perf_counter() - t) / n
            ad = cell["adapter_seconds"] / n
            rows[arm].append((cell["policy_seconds"] / n - ad, ad, old))
            print(f"round {r} {arm:22s} runtime {1e3 * rows[arm][-1][0]:.3f}  adapter {1e3 * ad:.3f}  "
                  f"BLAKE2b keys (before) {1e3 * old:.3f} ms/req  hit {cell['token_hit_rate']:.3f}", flush=True)
print(f"{n} requests x ~{sum(len(q.prompt_token_ids) for q in wl.requests) // n // 32} blocks, "
      f"{a.num_blocks} blocks of 32 tokens; median [min, max] over {a.rounds} rounds, ms/request:")
for arm, xs in rows.items():
    cols = []
    for j, name in enumerate(("runtime", "adapter", "BLAKE2b keys (before)")):
        v = [1e3 * x[j] for x in xs]
        cols.append(f"{name} {statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]")
    print(f"  {arm:22s} " + "   ".join(cols))
