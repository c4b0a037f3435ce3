"""The vLLM adapter's own time per request, split by where it is spent, in a
real vLLM CPU engine (issue 11, part 5).

Runs the seed's request shape at a small scale (4 personas x 8192-token
prefixes, 8 sessions x 2 turns, 128-token queries, 32 output tokens; block
size 32, the CPU build's; 801 blocks) through the embedded tiny model,
sequential, ``--reps`` cells per arm. The adapter times its work in segments
(``t = _perf() ... adapter_seconds += _perf() - t``); this script replaces the
module's ``_perf`` with one that pairs each start with its end and books the
time to the function that started it. Prints, per arm, the adapter's total
(``adapter_seconds``) and the best cell's split, us per request. Prints
figures; asserts nothing.

    python results/issue11-s21-adapter/adapter_segments.py [--arms lru,spf_expected_utility] [--reps 3]
"""
import argparse
import sys
import time
from collections import defaultdict

import spfcore.engine.vllm_adapter as va
from spfcore.engine.runner import EngineSpec, open_engine
from spfcore.workloads.generators import make

ap = argparse.ArgumentParser()
ap.add_argument("--arms", default="lru,spf_expected_utility")
ap.add_argument("--reps", type=int, default=3)
a = ap.parse_args()
pc = time.perf_counter
acc, cnt, open_at = defaultdict(float), defaultdict(int), [None, 0.0]


def paired_perf():
    t = pc()
    if open_at[0] is None:
        open_at[0], open_at[1] = sys._getframe(1).f_code.co_name, t
    else:
        acc[open_at[0]] += t - open_at[1]
        cnt[open_at[0]] += 1
        open_at[0] = None
    return t


wl = make("personas", seed=42, personas=4, prefix_tokens=8192, sessions=8, turns=2, query_tokens=128,
          output_tokens=32, order="round_robin")
n = len(wl.requests)
with open_engine(EngineSpec(block_size=32, num_blocks=801, max_model_len=8192 + 512), "lru") as s:
    for arm in a.arms.split(","):
        best = None
        for _ in range(a.reps):
            s.use_policy(arm)
            acc.clear(), cnt.clear()
            open_at[0] = None
            va._perf = paired_perf
            try:
                cell = s.run(wl, 42)
            finally:
                va._perf = pc
            total = cell["adapter_seconds"] / n
            if best is None or total < best[0]:
                best = (total, dict(acc), dict(cnt))
        total, parts, calls = best
        split = "  ".join(f"{k} {parts[k] / n * 1e6:.1f}" for k in sorted(parts, key=parts.get, reverse=True))
        print(f"{arm:22s} adapter {total * 1e3:.3f} ms/req (best of {a.reps}); us/req: {split}", flush=True)
