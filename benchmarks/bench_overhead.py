"""Hot-path cost of the vLLM adapter (prints figures; asserts nothing).

1. Wall-clock ratio of the ``lru`` arm driven through the adapter and the
   runtime (PolicyScheduler + PolicyFreeQueue, ``use_policy("lru",
   vllm_order_queue=False)``; the runner's own lru arm is served by vLLM's
   queue and reports no event) vs stock vLLM (no ``scheduler_cls``) on the same
   workload, runs interleaved A B A B ... (``--pairs`` pairs) on two engines
   held open at once, so drift of the machine hits both arms alike.
2. For every installed arm as the runner serves it (on the adapter engine;
   ``lru`` there is vLLM's own queue, so its runtime times read 0): the policy's time per
   allocation (``evict_seconds / evict_calls``: victim choice, hooks included)
   and per hook call (``hook_seconds / hook_calls``), and whether the engine's
   per-request cached tokens equal the simulator's (``spfcore.sim``).

Usage::

    .venv/bin/python benchmarks/bench_overhead.py --pairs 3
"""

from __future__ import annotations

import statistics

import click
from rich.table import Table

from spfcore import registry
from spfcore.report import make_console
from spfcore.engine.runner import EngineSpec, default_block_size, open_engine
from spfcore.workloads.generators import make
from spfcore.workloads.pressure import num_blocks_for_pressure


@click.command()
@click.option("--model", default="tiny", show_default=True, help="Preset name or checkpoint folder.")
@click.option("--block-size", type=int, default=None, help="Tokens per block (default 32 CPU / 16 GPU).")
@click.option("--pressure", type=float, default=2.3, show_default=True, help="Cache pressure.")
@click.option("--personas", type=int, default=8, show_default=True)
@click.option("--prefix-tokens", type=int, default=512, show_default=True)
@click.option("--sessions", type=int, default=16, show_default=True)
@click.option("--turns", type=int, default=2, show_default=True)
@click.option("--query-tokens", type=int, default=32, show_default=True)
@click.option("--output-tokens", type=int, default=4, show_default=True)
@click.option("--pairs", type=int, default=3, show_default=True, help="A/B pairs (stock, lru) to interleave.")
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--warmup/--no-warmup", default=True, show_default=True, help="One untimed run per engine first.")
@click.option("--arms", default=None, help="Comma-separated arms for the cost table (default: every installed arm).")
def main(model, block_size, pressure, personas, prefix_tokens, sessions, turns, query_tokens, output_tokens,
         pairs, seed, warmup, arms):
    """Wall-clock ratio lru-through-adapter / stock vLLM, and per-allocation policy cost per arm."""
    console = make_console()
    wl = make("personas", seed=seed, personas=personas, prefix_tokens=prefix_tokens, sessions=sessions,
              turns=turns, query_tokens=query_tokens, output_tokens=output_tokens, order="round_robin")
    block_size = block_size or default_block_size()
    nb = num_blocks_for_pressure(wl, pressure, block_size)
    spec = EngineSpec(model=model, block_size=block_size, num_blocks=nb, max_num_seqs=4)
    console.print(f"workload: {len(wl.requests)} requests, {personas} personas x {prefix_tokens} tokens, "
                  f"{query_tokens}-token queries, {output_tokens} output tokens; cache {nb} blocks "
                  f"({pressure}x pressure)")
    stock = open_engine(spec, None)
    lru = open_engine(spec, "lru")
    lru.use_policy("lru", vllm_order_queue=False)
    try:
        if warmup:  # not timed
            stock.run(wl, seed=seed)
            lru.run(wl, seed=seed)
        walls = {"stock": [], "lru": []}
        ttft = {"stock": [], "lru": []}
        cached = {"stock": set(), "lru": set()}
        for i in range(pairs):
            for name, sess in (("stock", stock), ("lru", lru)):
                cell = sess.run(wl, seed=seed)
                walls[name].append(cell["wall_s"])
                ttft[name].append(cell["ttft_mean_s"])
                cached[name].add(tuple(r["cached_tokens"] for r in cell["requests"]))
                console.print(f"pair {i + 1} {name:5s}: wall {cell['wall_s']:.3f} s, "
                              f"TTFT mean {cell['ttft_mean_s'] * 1e3:.1f} ms, hit {cell['token_hit_rate']:.3f}")
        ratios = [b / a for a, b in zip(walls["stock"], walls["lru"])]
        t = Table(title="lru through the adapter vs stock vLLM (interleaved A B)")
        for col in ("arm", "wall median (s)", "wall runs (s)", "TTFT mean median (ms)"):
            t.add_column(col)
        for name in ("stock", "lru"):
            t.add_row(name, f"{statistics.median(walls[name]):.3f}", ", ".join(f"{w:.3f}" for w in walls[name]),
                      f"{statistics.median(ttft[name]) * 1e3:.1f}")
        console.print(t)
        console.print(f"wall ratio lru/stock per pair: {', '.join(f'{r:.4f}' for r in ratios)}; "
                      f"median {statistics.median(ratios):.4f} "
                      f"({(statistics.median(ratios) - 1) * 100:+.2f}%)")
        console.print(f"per-request cached tokens identical in every run, stock == lru: "
                      f"{len(cached['stock'] | cached['lru']) == 1}")

        try:
            from spfcore.sim import simulate
        except ImportError:
            simulate = None
        t = Table(title="policy cost on the allocation path (adapter engine)")
        for col in ("arm", "hit rate", "evict calls", "us / allocation", "hook calls", "us / hook call",
                    "wall (s)", "== simulator"):
            t.add_column(col)
        names = arms.split(",") if arms else [p.name for p in registry.discover() if p.status == "ok"]
        for arm in names:
            lru.use_policy(arm)
            c = lru.run(wl, seed=seed)
            agree = "n/a"
            if simulate is not None:
                m = simulate(wl, arm, num_blocks=nb, block_size=block_size, seed=seed)
                agree = str([r["cached_tokens"] for r in c["requests"]] == [r["cached_tokens"] for r in m["requests"]])
            t.add_row(arm, f"{c['token_hit_rate']:.3f}", str(c["evict_calls"]),
                      f"{c['evict_seconds'] / max(c['evict_calls'], 1) * 1e6:.1f}", str(c["hook_calls"]),
                      f"{c['hook_seconds'] / max(c['hook_calls'], 1) * 1e6:.1f}", f"{c['wall_s']:.3f}", agree)
        console.print(t)
    finally:
        stock.close()
        lru.close()


if __name__ == "__main__":
    main()
