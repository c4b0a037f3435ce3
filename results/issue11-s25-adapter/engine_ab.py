"""The adapter's time per request in the real engine: main's PolicyFreeQueue
(d6d012c, loaded from git) vs this tree's, interleaved on one engine (prints
figures; asserts nothing but equal decisions).

One CPU engine (the tiny model; bench_compiled.py's workload: the seed's shape
at 1/16 the prefix). Each run installs the arm afresh (``use_policy``) with
``vllm_adapter.PolicyFreeQueue`` swapped to one of the two classes (the
scheduler builds its queue from that name; the wrappers around vLLM are this
tree's in both), the order reversed every round. Per run: the cell's
``adapter_seconds`` and runtime time per request; at the end whether every
run's per-request cached tokens and evictions are the same.

    /work/main/.venv/bin/python results/issue11-s25-adapter/engine_ab.py --rounds 3 [--arm frequency] [--hooks]

On the H200 (the seed's full scale, as results/issue11-s24-compiled-frequency)::

    python3 results/issue11-s25-adapter/engine_ab.py --model llama-3.2-3b --block-size 16 --num-blocks 3561 \
        --prefix-tokens 8192 --query-tokens 128 --output-tokens 32 --sessions 16 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queue_cost import baseline_module  # noqa: E402

from spfcore.engine import vllm_adapter  # noqa: E402
from spfcore.engine.runner import EngineSpec, default_block_size, open_engine  # noqa: E402
from spfcore.workloads.generators import make  # noqa: E402
from spfcore.workloads.pressure import num_blocks_for_pressure  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arm", default="frequency")
    ap.add_argument("--hooks", action="store_true", help="the arm's hooks, not its compiled runtime")
    ap.add_argument("--model", default="tiny", help="preset name or checkpoint folder")
    ap.add_argument("--block-size", type=int, default=None, help="tokens per block (default 32 CPU / 16 GPU)")
    ap.add_argument("--num-blocks", type=int, default=None, help="cache blocks (default: pressure 2.3)")
    ap.add_argument("--prefix-tokens", type=int, default=512)
    ap.add_argument("--query-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=4)
    ap.add_argument("--sessions", type=int, default=16)
    args = ap.parse_args()
    wl = make("personas", seed=42, personas=16, prefix_tokens=args.prefix_tokens, sessions=args.sessions, turns=4,
              query_tokens=args.query_tokens, output_tokens=args.output_tokens, order="round_robin")
    bs = args.block_size or default_block_size()
    nb = args.num_blocks or num_blocks_for_pressure(wl, 2.3, bs)
    n = len(wl.requests)
    classes = {"base": baseline_module().PolicyFreeQueue, "new": vllm_adapter.PolicyFreeQueue}
    split = {}  # (class, queue method) -> adapter seconds inside it, kept rounds only
    keep = [False, 0]  # (keep this run's split, its round)

    def attribute(cls, name):
        orig = getattr(cls, name)

        def timed(self, *a, **kw):
            before = self.adapter_seconds
            try:
                return orig(self, *a, **kw)
            finally:
                if keep[0]:
                    key = (cls, name, keep[1])
                    split[key] = split.get(key, 0.0) + self.adapter_seconds - before
        setattr(cls, name, timed)
    for cls in classes.values():
        for name in ("popleft_n", "append_n", "prepend_n"):
            attribute(cls, name)
    rows = {k: [] for k in classes}
    seen = set()
    print(f"{n} requests, {nb} blocks of {bs} tokens, arm {args.arm} ({'hooks' if args.hooks else 'compiled'})")
    with open_engine(EngineSpec(model=args.model, block_size=bs, num_blocks=nb), args.arm) as s:
        for r in range(args.rounds + 1):
            for k in (list(classes) if r % 2 == 0 else list(classes)[::-1]):
                vllm_adapter.PolicyFreeQueue = classes[k]
                keep[0], keep[1] = r > 0, r
                try:
                    s.use_policy(args.arm, compiled=not args.hooks)
                    c = s.run(wl, seed=42)
                finally:
                    vllm_adapter.PolicyFreeQueue = classes["new"]
                if r == 0:
                    continue  # warm-up round, not kept
                a = c["adapter_seconds"] / n * 1e3
                rt = (c["policy_seconds"] - c["adapter_seconds"]) / n * 1e3
                rows[k].append((a, rt))
                seen.add((tuple(x["cached_tokens"] for x in c["requests"]), c["evictions"], c["served_by"]))
                print(f"round {r} {k}: adapter {a:.4f} ms/req, runtime {rt:.4f} ms/req, {c['evictions']} evictions, "
                      f"served by {c['served_by']}")
    for k, rs in rows.items():
        xs = [x[0] for x in rs]
        ys = [x[1] for x in rs]
        print(f"{k}: adapter {statistics.median(xs):.4f} [{min(xs):.4f}, {max(xs):.4f}] ms/req, "
              f"runtime {statistics.median(ys):.4f} [{min(ys):.4f}, {max(ys):.4f}]")
        per = {name: [split.get((classes[k], name, r), 0.0) / n * 1e3 for r in range(1, args.rounds + 1)]
               for name in ("popleft_n", "append_n", "prepend_n")}
        rest = [x - sum(per[name][i] for name in per) for i, x in enumerate(xs)]
        print(f"{k}: adapter ms/req by part, median of rounds: "
              + ", ".join(f"{a} {statistics.median(b):.4f}" for a, b in per.items())
              + f", the scheduler's wrappers {statistics.median(rest):.4f}")
        tot = [a + b for a, b in rs]
        print(f"{k}: adapter + runtime {statistics.median(tot):.4f} [{min(tot):.4f}, {max(tot):.4f}] ms/req")
    print("per round new/base adapter:", ", ".join(f"{b[0] / a[0]:.2f}" for a, b in zip(rows["base"], rows["new"])))
    print(f"every run's cached tokens, evictions and runtime kind identical: {len(seen) == 1}")


if __name__ == "__main__":
    main()
