"""``spfcore simulate-tiered``: the two-tier simulator (:mod:`spfcore.sim.tiered`)
for several arms and seeds: GPU / CPU-tier / miss token shares, estimated
TTFT split into load and recompute, hints and promotions, bytes moved."""

from __future__ import annotations

import json
import statistics

import attrs
import click
from rich.table import Table

from spfcore import registry
from spfcore.fileio import hold_output_lock, write_atomic
from spfcore.report import error_cell, error_text, make_console
from spfcore.runtime import PolicyError
from spfcore.sim.cell import open_input
from spfcore.cli.options import (CacheSpec, Finite, RecordingCommand, WorkloadSpec, cache_options, command_line,
                                 seed_list, workload_options)
from spfcore.sim.cli import EXIT_ARM_FAILED, check_fits
from spfcore.sim.tiered import COST_MODELS, cost_model, simulate_tiered
from spfcore.workloads.options import WorkloadOptionError
from spfcore.workloads.traces import TraceError

#: Per-arm means over seeds shown in the table and the summary.
METRICS = ("gpu_hit_rate", "cpu_hit_rate", "token_hit_rate", "prefill_tokens_recomputed", "tokens_loaded",
           "ttft_mean_s", "ttft_p95_s", "load_s_mean", "recompute_s_mean", "hints_issued", "hints_used",
           "hints_wasted", "promoted_blocks", "promoted_used", "promoted_wasted", "bytes_stored", "bytes_loaded",
           "bytes_promoted", "tier_evictions")


@click.command("simulate-tiered", cls=RecordingCommand)
@workload_options
@cache_options(default_block_size=None)
@click.option("--cpu-blocks", type=click.IntRange(min=0), default=None,
              help="CPU tier size, blocks (default: --cpu-ratio x the GPU's usable blocks).")
@click.option("--cpu-ratio", type=Finite(min=0), default=2.0, show_default=True,
              help="CPU tier size as a multiple of the GPU cache's usable blocks (when --cpu-blocks is not given).")
@click.option("--cost", "cost_name", type=click.Choice(COST_MODELS), default="tiny-cpu", show_default=True,
              help="Transfer and recompute cost model (spfcore.sim.tiered.cost_model states its sources).")
@click.option("--bandwidth-gbs", type=Finite(min=0, min_open=True), default=None,
              help="Override the model's tier-to-GPU bandwidth, GB/s (1e9 bytes).")
@click.option("--latency-us", type=Finite(min=0), default=None, help="Override the per-transfer latency, us.")
@click.option("--prefill-us-per-token", type=Finite(min=0), default=None,
              help="Override the prefill cost per recomputed token, us.")
@click.option("--promote/--no-promote", default=True, show_default=True,
              help="Prefetch hints promote tier blocks ahead of the request (--no-promote: as vLLM's engine, "
                   "which cannot load before arrival).")
@click.option("--arms", default="lru", show_default=True, help="Comma-separated policies.")
@click.option("--seeds", default="42", show_default=True, callback=seed_list, help="Comma-separated workload seeds.")
@click.option("--policy-opt", multiple=True, metavar="NAME.KEY=VALUE", help="A policy parameter (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON here (atomically, once every cell ran) instead of printing a table.")
def simulate_tiered_command(workload_spec: WorkloadSpec, cache_spec: CacheSpec, cpu_blocks, cpu_ratio, cost_name,
                            bandwidth_gbs, latency_us, prefill_us_per_token, promote, arms, seeds, policy_opt,
                            as_json, output) -> None:
    """Simulate the GPU prefix cache with a slower CPU tier behind it, as
    vLLM's KV offloading connector builds it (write-through of computed prompt
    blocks; tier hits loaded instead of recomputed; prefetch hints promote
    tier blocks ahead of the request). Sequential replay.

    Per arm: prompt tokens hit on the GPU, loaded from the tier, recomputed;
    estimated TTFT (base + load + recompute, from --cost) mean and p95;
    hints issued / used / wasted; promoted blocks used / wasted; bytes
    stored to, loaded from and promoted from the tier. A policy steers the
    tier through spfcore_tier_admit and spfcore_tier_score (default: vLLM's
    LRU tier). Faults fail their own arm (exit status 4), as in simulate.
    """
    if cpu_blocks is not None and click.get_current_context().get_parameter_source("cpu_ratio") in (
            click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT):
        raise click.BadParameter("give --cpu-blocks or --cpu-ratio, not both", param_hint="--cpu-blocks/--cpu-ratio")
    try:
        options = registry.parse_options(policy_opt)
    except registry.PolicyConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--policy-opt") from None
    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    if not arm_list or len(set(arm_list)) != len(arm_list):
        raise click.BadParameter(f"{arms!r}: need distinct arms", param_hint="--arms")
    try:  # bad values fail now, not after the other arms ran
        registry.check_options(arm_list, options)
    except registry.PolicyConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--policy-opt") from None
    cost = cost_model(cost_name)
    over = {k: v for k, v in (("bandwidth", bandwidth_gbs and bandwidth_gbs * 1e9),
                              ("latency_s", latency_us is not None and latency_us * 1e-6),
                              ("prefill_s_per_token", prefill_us_per_token is not None
                               and prefill_us_per_token * 1e-6)) if v is not None and v is not False}
    if over:
        try:
            cost = attrs.evolve(cost, **over, source=cost.source + f"; overridden: {sorted(over)}")
        except ValueError as exc:
            raise click.UsageError(f"--bandwidth-gbs/--latency-us/--prefill-us-per-token: {exc}") from None
    hold_output_lock(output)  # after the arguments are checked: a bad one is named, not a held output
    cells, sizes = [], {}
    for seed in seeds:
        try:
            inp = open_input(workload_spec, seed, cache_spec.block_size, "sequential")
        except WorkloadOptionError as exc:
            raise click.BadParameter(str(exc), param_hint=exc.param_hint) from None
        except TraceError as exc:
            raise click.BadParameter(str(exc), param_hint="--trace") from None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--block-size") from None
        spec = CacheSpec(inp.block_size, cache_spec.num_blocks, cache_spec.pressure)
        nb = spec.num_blocks_for(inp.workload)
        check_fits(inp, nb, cache_spec)  # a usage error on --num-blocks / --cache-pressure, before any arm runs
        cpu = cpu_blocks if cpu_blocks is not None else int(round(cpu_ratio * (nb - 1)))
        sizes[seed] = {"num_blocks": nb, "cpu_blocks": cpu}
        for arm in arm_list:
            try:
                rec = simulate_tiered(inp.source, arm, num_blocks=nb, cpu_blocks=cpu, block_size=inp.block_size,
                                      cost=cost, options=options.get(arm), seed=seed, promote=promote)
            except (PolicyError, registry.PolicyConfigError) as exc:
                rec = error_cell(arm, seed, exc)
            except TraceError as exc:
                raise click.BadParameter(str(exc), param_hint="--trace") from None
            except ValueError as exc:
                raise click.ClickException(str(exc)) from None
            cells.append(rec)
    summary = {}
    for arm in arm_list:
        ok = [c for c in cells if c["arm"] == arm and "error" not in c]
        errs = [c["error"] for c in cells if c["arm"] == arm and "error" in c]
        summary[arm] = {m: statistics.fmean(c[m] for c in ok) if ok else None for m in METRICS}
        summary[arm]["error"] = errs[0] if errs else None
    result = {"kind": "spfcore-simulate-tiered", "command": command_line(click.get_current_context()),
              "workload": workload_spec.describe(), "block_size": inp.block_size, "sizes": sizes,
              "cost": attrs.asdict(cost), "promote": promote, "seeds": seeds, "policy_options": options, "cells": cells,
              "summary": summary}
    if output:
        try:
            write_atomic(output, json.dumps(result, indent=2, default=str) + "\n")
        except OSError as exc:
            raise click.ClickException(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str))
    elif not output:
        _table(result)
    failed = sorted({c["arm"] for c in cells if "error" in c})
    if failed:
        click.echo(f"error: arm(s) failed: {', '.join(failed)}", err=True)
        raise SystemExit(EXIT_ARM_FAILED)


def _table(result: dict) -> None:
    sz = next(iter(result["sizes"].values()))
    t = Table(title=f"spfcore simulate-tiered (seeds {','.join(map(str, result['seeds']))})",
              caption=f"GPU {sz['num_blocks']} blocks, CPU tier {sz['cpu_blocks']} blocks of "
                      f"{result['block_size']} tokens; cost: {result['cost']['source']}")
    cols = ("arm", "GPU hit", "CPU hit", "recomputed", "loaded", "TTFT ms", "p95 ms", "load ms", "recomp ms",
            "hints i/u/w", "promoted u/w", "MB st/ld/pr")
    for col in cols:
        t.add_column(col, justify="left" if col == "arm" else "right", no_wrap=True)
    errors = []
    for arm, r in result["summary"].items():
        if r["error"]:
            errors.append(f"{arm}: {error_text(r['error'])}")
            t.add_row(arm, "[red]error[/red]", *[""] * (len(cols) - 2))
            continue
        t.add_row(arm, f"{r['gpu_hit_rate']:.4f}", f"{r['cpu_hit_rate']:.4f}",
                  f"{r['prefill_tokens_recomputed']:,.0f}", f"{r['tokens_loaded']:,.0f}",
                  f"{r['ttft_mean_s'] * 1e3:.2f}", f"{r['ttft_p95_s'] * 1e3:.2f}", f"{r['load_s_mean'] * 1e3:.3f}",
                  f"{r['recompute_s_mean'] * 1e3:.2f}",
                  f"{r['hints_issued']:.0f}/{r['hints_used']:.0f}/{r['hints_wasted']:.0f}",
                  f"{r['promoted_used']:.0f}/{r['promoted_wasted']:.0f}",
                  f"{r['bytes_stored'] / 1e6:.1f}/{r['bytes_loaded'] / 1e6:.1f}/{r['bytes_promoted'] / 1e6:.1f}")
    con = make_console()
    con.print(t)
    for e in errors:
        con.print(e, style="red", markup=False)
