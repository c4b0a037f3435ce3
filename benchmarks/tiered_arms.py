"""Tiered arms: the seed workload with a CPU tier behind the GPU prefix cache,
per arm, in vLLM's engine (KV offloading connector, spfcore's
``SpfOffloadingSpec``) and in the two-tier simulator (prints figures and
writes JSON; asserts nothing).

Per (seed, arm): prompt tokens hit on the GPU, loaded from the CPU tier,
recomputed; TTFT mean and p95 measured by the engine (vLLM's own
first-token latency) beside the simulator's estimate (``--cost``);
whether the engine's per-request GPU and CPU hits equal the simulator's
(``agree``); and, for arms issuing prefetch hints, the simulator with
promotion (hints load tier blocks ahead of the request, which vLLM's
interfaces cannot do) beside the engine-comparable run without it.
Arms of one seed run interleaved on one engine (``use_policy``), the arm
order rotated by the seed's index.

Usage::

    .venv/bin/python benchmarks/tiered_arms.py --preset quick --seeds 42          # CPU, tiny model
    .venv/bin/python benchmarks/tiered_arms.py --preset seed --model llama-3.2-3b \\
        --seeds 42,43,44 --cost h200-llama-3.2-3b -o tiered-h200.json             # H200
"""

from __future__ import annotations

import json
import statistics
import time

import click
from rich.table import Table

from spfcore.engine.runner import EngineSpec, default_block_size, open_engine
from spfcore.report import make_console
from spfcore.sim.tiered import COST_MODELS, simulate_tiered
from spfcore.workloads.generators import make
from spfcore.workloads.pressure import num_blocks_for_pressure

PRESETS = {  # spfcore gate's presets (spfcore/gate_cli.py), the workload part
    "quick": {"personas": 16, "prefix_tokens": 512, "sessions": 32, "turns": 4, "query_tokens": 32,
              "output_tokens": 4, "order": "round_robin"},
    "seed": {"personas": 16, "prefix_tokens": 8192, "sessions": 32, "turns": 4, "query_tokens": 128,
             "output_tokens": 32, "order": "round_robin"},
}
ARMS = "lru,session_ttl,frequency,spf_expected_utility,spf_seed,belady_oracle"
#: Arm names of this script that are a policy with options.
VARIANTS = {"spf_seed": ("spf_expected_utility", {"variant": "seed", "mode": "prefetch"})}


@click.command()
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default="quick", show_default=True)
@click.option("--model", default="tiny", show_default=True, help="Preset name or checkpoint folder.")
@click.option("--block-size", type=int, default=None, help="Tokens per block (default 32 CPU / 16 GPU).")
@click.option("--pressure", type=float, default=2.3, show_default=True, help="GPU cache pressure.")
@click.option("--cpu-ratio", type=float, default=2.0, show_default=True,
              help="CPU tier size as a multiple of the GPU cache's usable blocks.")
@click.option("--seeds", default="42", show_default=True)
@click.option("--arms", default=ARMS, show_default=True, help=f"Policies; {', '.join(VARIANTS)}: see VARIANTS.")
@click.option("--cost", "cost_name", type=click.Choice(COST_MODELS), default="tiny-cpu", show_default=True)
@click.option("--max-model-len", type=int, default=None)
@click.option("--output", "-o", default=None, help="Write every cell as JSON here.")
def main(preset, model, block_size, pressure, cpu_ratio, seeds, arms, cost_name, max_model_len, output) -> None:
    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    seed_list = [int(s) for s in seeds.split(",")]
    cells = []
    t0 = time.monotonic()
    for si, seed in enumerate(seed_list):
        wl = make("personas", seed=seed, **PRESETS[preset])
        bs = block_size or default_block_size()
        nb = num_blocks_for_pressure(wl, pressure, bs)
        cpu = int(round(cpu_ratio * (nb - 1)))
        order = arm_list[si % len(arm_list):] + arm_list[: si % len(arm_list)]
        spec = EngineSpec(model=model, block_size=bs, num_blocks=nb, cpu_blocks=cpu, max_model_len=max_model_len)
        first = VARIANTS.get(order[0], (order[0], {}))
        with open_engine(spec, first[0], first[1]) as s:
            for arm in order:
                pol, opts = VARIANTS.get(arm, (arm, {}))
                s.use_policy(pol, opts)
                eng = s.run(wl, seed)
                sim = simulate_tiered(wl, pol, options=opts, num_blocks=nb, cpu_blocks=cpu, block_size=bs,
                                      cost=cost_name, seed=seed, per_request=True, promote=False)
                pro = simulate_tiered(wl, pol, options=opts, num_blocks=nb, cpu_blocks=cpu, block_size=bs,
                                      cost=cost_name, seed=seed, promote=True)
                agree = all([r[f] for r in eng["requests"]] == [r[f] for r in sim["requests"]]
                            for f in ("gpu_hit_tokens", "cpu_hit_tokens"))
                sim.pop("requests")
                cells.append({"seed": seed, "arm": arm, "num_blocks": nb, "cpu_blocks": cpu, "agree": agree,
                              "engine": eng, "sim": sim, "sim_promote": pro})
                click.echo(f"seed {seed} {arm}: done ({time.monotonic() - t0:.0f} s)", err=True)
    t = Table(title=f"tiered arms ({preset}, {model}, pressure {pressure}, CPU tier {cpu_ratio}x GPU; "
                    f"means over seeds {seeds})")
    for c in ("arm", "GPU hit", "CPU hit", "recomputed", "loaded", "TTFT ms", "p95 ms", "sim TTFT ms",
              "agree", "promoted u/w", "sim+prom GPU hit", "sim+prom TTFT ms"):
        t.add_column(c, justify="left" if c == "arm" else "right")
    for arm in arm_list:
        cs = [c for c in cells if c["arm"] == arm]
        e = {k: statistics.fmean(c["engine"][k] for c in cs) for k in
             ("gpu_hit_tokens", "cpu_hit_tokens", "prompt_tokens", "prefill_tokens_recomputed", "ttft_mean_s",
              "ttft_p95_s")}
        p = {k: statistics.fmean(c["sim_promote"][k] for c in cs) for k in
             ("gpu_hit_rate", "ttft_mean_s", "promoted_used", "promoted_wasted")}
        t.add_row(arm, f"{e['gpu_hit_tokens'] / e['prompt_tokens']:.4f}",
                  f"{e['cpu_hit_tokens'] / e['prompt_tokens']:.4f}", f"{e['prefill_tokens_recomputed']:,.0f}",
                  f"{e['cpu_hit_tokens']:,.0f}", f"{e['ttft_mean_s'] * 1e3:.1f}", f"{e['ttft_p95_s'] * 1e3:.1f}",
                  f"{statistics.fmean(c['sim']['ttft_mean_s'] for c in cs) * 1e3:.1f}",
                  "yes" if all(c["agree"] for c in cs) else "NO",
                  f"{p['promoted_used']:.0f}/{p['promoted_wasted']:.0f}", f"{p['gpu_hit_rate']:.4f}",
                  f"{p['ttft_mean_s'] * 1e3:.1f}")
    make_console().print(t)
    if output:
        with open(output, "w") as f:
            json.dump({"preset": preset, "model": model, "pressure": pressure, "cpu_ratio": cpu_ratio,
                       "cost": cost_name, "cells": cells}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
