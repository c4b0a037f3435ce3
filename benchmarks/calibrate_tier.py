"""Calibrate the two-tier simulator's cost model (``spfcore.sim.tiered.CostModel``)
on this machine: prints figures and the ``CostModel(...)`` to use; asserts nothing.

1. Transfer: copies of ``--blocks`` KV blocks of the model's size (bytes per
   token from its config.json x block size) from host memory to the device
   (CUDA: pinned host -> GPU, ``torch.cuda.synchronize``; CPU build: host ->
   host ``index_copy_``, what ``HostCopyWorker`` does), ``--repeats`` times
   per size, for 1 block (the per-transfer latency) and ``--blocks`` blocks
   (the bandwidth: slope between the two). Median of the repeats.
2. Recompute: the engine's TTFT (vLLM's own first-token latency) of a cold
   prompt of ``--prompt-tokens`` tokens and of the same prompt fully cached
   but its last block, ``--repeats`` times each, interleaved:
   ``prefill_s_per_token = (cold - cached) / (tokens recomputed difference)``,
   ``base_s = cached``.

Usage::

    .venv/bin/python benchmarks/calibrate_tier.py                               # CPU, tiny model
    .venv/bin/python benchmarks/calibrate_tier.py --model llama-3.2-3b --prompt-tokens 8192   # H200
"""

from __future__ import annotations

import statistics
import time

import click

from spfcore.engine.presets import model_config
from spfcore.sim.tiered import kv_bytes_per_token


def _copy_seconds(nbytes: int, repeats: int) -> float:
    import torch

    if torch.cuda.is_available():
        src = torch.empty(nbytes, dtype=torch.int8).pin_memory()
        dst = torch.empty(nbytes, dtype=torch.int8, device="cuda")
        dst.copy_(src)  # warm-up, untimed
        out = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            out.append(time.perf_counter() - t)
        return statistics.median(out)
    src = torch.ones(nbytes, dtype=torch.int8)
    dst = torch.empty(nbytes, dtype=torch.int8)
    dst.copy_(src)  # first touch of dst's pages, untimed
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        dst.copy_(src)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


@click.command()
@click.option("--model", default="tiny", show_default=True)
@click.option("--block-size", type=int, default=None, help="Tokens per block (default 32 CPU / 16 GPU).")
@click.option("--blocks", type=int, default=512, show_default=True, help="Blocks in the large copy.")
@click.option("--prompt-tokens", type=int, default=4096, show_default=True)
@click.option("--repeats", type=int, default=5, show_default=True)
def main(model, block_size, blocks, prompt_tokens, repeats) -> None:
    from spfcore.engine.runner import EngineSpec, default_block_size, open_engine
    from spfcore.workloads.model import Request, Workload

    bs = block_size or default_block_size()
    bpt = kv_bytes_per_token(model_config(model))
    one, many = _copy_seconds(bpt * bs, repeats), _copy_seconds(bpt * bs * blocks, repeats)
    bw = (blocks - 1) * bpt * bs / max(many - one, 1e-12)
    click.echo(f"KV bytes/token {bpt:,}; block of {bs} tokens {bpt * bs:,} B")
    click.echo(f"copy 1 block: {one * 1e6:.1f} us; {blocks} blocks: {many * 1e3:.3f} ms; "
               f"bandwidth {bw / 1e9:.2f} GB/s (slope)")
    nb = 2 * (prompt_tokens // bs + 2) + 1
    vocab = int(model_config(model).get("vocab_size", 32000))
    cold, hot = [], []
    with open_engine(EngineSpec(model=model, block_size=bs, num_blocks=nb), "lru") as s:
        for i in range(repeats):
            toks = tuple((i * prompt_tokens + j) % (vocab - 20) + 10 for j in range(prompt_tokens))  # distinct per i
            wl = Workload("calibrate", {}, [Request(f"c{i}", 0.0, toks + (1,), 1),
                                            Request(f"h{i}", 0.0, toks + (2,), 1)])
            cell = s.run(wl, 0)
            c, h = cell["requests"]
            cold.append((c["ttft_s"], c["prompt_tokens"] - (c["cached_tokens"] or 0)))
            hot.append((h["ttft_s"], h["prompt_tokens"] - (h["cached_tokens"] or 0)))
    tc, nc = statistics.median(x[0] for x in cold), cold[0][1]
    th, nh = statistics.median(x[0] for x in hot), hot[0][1]
    per_tok = (tc - th) / max(nc - nh, 1)
    click.echo(f"TTFT cold ({nc} tokens computed): {tc * 1e3:.2f} ms; cached ({nh} computed): {th * 1e3:.2f} ms")
    click.echo(f"prefill {per_tok * 1e6:.2f} us/token, base {th * 1e3:.2f} ms")
    click.echo(f"CostModel(bytes_per_token={bpt}, bandwidth={bw:.4g}, latency_s={one:.3g}, "
               f"prefill_s_per_token={per_tok:.4g}, base_s={th:.4g}, source='benchmarks/calibrate_tier.py, "
               f"{model}, {time.strftime('%Y-%m-%d')}')")


if __name__ == "__main__":
    main()
