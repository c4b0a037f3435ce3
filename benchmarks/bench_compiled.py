"""spfcore's time per request in the engine: a compiled runtime vs the same
policy's hooks (prints figures; asserts nothing).

One engine, the arm's two runtimes alternating run by run (``use_policy(arm,
compiled=True|False)``, the order reversed every round), so drift of the
machine hits both alike. Per run: spfcore's time per request (the cell's
``policy_seconds``: the runtime's events and the adapter's own work), the
adapter's part, the runtime's part, throughput; at the end whether every
run's per-request cached tokens and eviction count are the same (and the
simulator's).

Usage (CPU, the tiny model; the seed's shape at 1/16 the prefix)::

    .venv/bin/python benchmarks/bench_compiled.py --rounds 3

On the H200 (the seed's full scale: 8,192-token prefixes, block size 16,
3,561 blocks)::

    python3 benchmarks/bench_compiled.py --model llama-3.2-3b --block-size 16 --num-blocks 3561 \\
        --prefix-tokens 8192 --query-tokens 128 --output-tokens 32 --sessions 16 --rounds 2
"""

from __future__ import annotations

import statistics

import click
from rich.markup import escape
from rich.table import Table

from spfcore.engine.runner import EngineSpec, default_block_size, open_engine
from spfcore.report import make_console
from spfcore.workloads.generators import make
from spfcore.workloads.pressure import num_blocks_for_pressure


@click.command()
@click.option("--arm", default="frequency", show_default=True, help="An arm with a compiled runtime.")
@click.option("--model", default="tiny", show_default=True, help="Preset name or checkpoint folder.")
@click.option("--block-size", type=int, default=None, help="Tokens per block (default 32 CPU / 16 GPU).")
@click.option("--num-blocks", type=int, default=None, help="Cache blocks (default: --pressure).")
@click.option("--pressure", type=float, default=2.3, show_default=True, help="Cache pressure.")
@click.option("--personas", type=int, default=16, show_default=True)
@click.option("--prefix-tokens", type=int, default=512, show_default=True)
@click.option("--sessions", type=int, default=16, show_default=True)
@click.option("--turns", type=int, default=4, show_default=True)
@click.option("--query-tokens", type=int, default=32, show_default=True)
@click.option("--output-tokens", type=int, default=4, show_default=True)
@click.option("--rounds", type=int, default=3, show_default=True, help="Rounds of (compiled, hooks) runs.")
@click.option("--seed", type=int, default=42, show_default=True)
def main(arm, model, block_size, num_blocks, pressure, personas, prefix_tokens, sessions, turns, query_tokens,
         output_tokens, rounds, seed):
    """Interleaved runs of ARM's compiled runtime and its hooks on one engine."""
    console = make_console()
    wl = make("personas", seed=seed, personas=personas, prefix_tokens=prefix_tokens, sessions=sessions,
              turns=turns, query_tokens=query_tokens, output_tokens=output_tokens, order="round_robin")
    block_size = block_size or default_block_size()
    nb = num_blocks or num_blocks_for_pressure(wl, pressure, block_size)
    spec = EngineSpec(model=model, block_size=block_size, num_blocks=nb)
    from spfcore.engine.compiled import compiled_runtime
    from spfcore.runtime import PolicyRuntime

    if compiled_runtime(PolicyRuntime.for_policy(arm, nb, block_size, None, key_map=False)) is None:
        raise click.BadParameter(f"{arm!r} has no compiled runtime (spfcore.engine.compiled.STANDINS): "
                                 "both runs would be its hooks", param_hint="--arm")
    n = len(wl.requests)
    console.print(f"workload: {n} requests, {personas} personas x {prefix_tokens} tokens, {query_tokens}-token "
                  f"queries, {output_tokens} output tokens; {nb} blocks of {block_size} tokens; arm {arm}")
    rows = {True: [], False: []}
    seen = set()
    with open_engine(spec, arm) as s:
        s.run(wl, seed=seed)  # warm-up, not kept (compiles, loads numba's cache, fills vLLM's own caches)
        for r in range(rounds):
            for compiled in ((True, False) if r % 2 == 0 else (False, True)):
                s.use_policy(arm, compiled=compiled)
                c = s.run(wl, seed=seed)
                adapter = c["adapter_seconds"]
                row = (c["policy_seconds"] / n * 1e3, adapter / n * 1e3, (c["policy_seconds"] - adapter) / n * 1e3,
                       c["throughput_rps"], c["served_by"])
                rows[compiled].append(row)
                seen.add((tuple(x["cached_tokens"] for x in c["requests"]), c["evictions"]))
                console.print(f"round {r + 1} {row[4]:8s}: spfcore {row[0]:.3f} ms/req (adapter {row[1]:.3f}, "
                              f"runtime {row[2]:.3f}), {row[3]:.3f} req/s, hit rate {c['token_hit_rate']:.4f}, "
                              f"{c['evictions']} evictions")
    from spfcore.sim import simulate

    sim = simulate(wl, arm, num_blocks=nb, block_size=block_size, seed=seed)
    seen_sim = (tuple(x["cached_tokens"] for x in sim["requests"]), sim["evictions"])
    t = Table(title=escape(f"{arm}: spfcore ms per request in the engine, {rounds} interleaved rounds "
                           "(median [min, max])"))
    for col in ("runtime", "spfcore ms/req", "adapter ms/req", "runtime ms/req", "req/s"):
        t.add_column(col)

    def cell(xs):
        return f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"

    for compiled in (True, False):
        rs = rows[compiled]
        t.add_row(rs[0][4], *(cell([x[i] for x in rs]) for i in range(4)))
    console.print(t)
    ratios = [a[0] / b[0] for a, b in zip(rows[True], rows[False])]
    console.print(f"spfcore time compiled / hooks per round: {', '.join(f'{x:.3f}' for x in ratios)}")
    console.print(f"every run's cached tokens and evictions identical: {len(seen) == 1}; "
                  f"equal to the simulator's: {seen == {seen_sim}}")


if __name__ == "__main__":
    main()
