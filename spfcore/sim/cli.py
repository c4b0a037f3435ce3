"""``spfcore simulate``: replay a workload or trace through the prefix-cache
simulator for several arms and seeds, next to the infinite-cache and Belady
ceilings."""

from __future__ import annotations

import json
import statistics

import click
from rich.table import Table

from spfcore import registry
from spfcore.report import make_console
from spfcore.runtime import PolicyError
from spfcore.sim.simulator import ceilings, infinite_blocks, prepare, simulate as run_arm
from spfcore.workloads.options import (CacheSpec, RecordingCommand, WorkloadSpec, cache_options, command_line,
                                       workload_options)

METRICS = ("token_hit_rate", "block_hit_rate", "prefill_tokens_recomputed", "evictions")
BELADY = "belady_oracle"


def _ints(ctx, param, value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated ints, e.g. 42,43,44") from None
    if not out or any(s < 0 for s in out):
        raise click.BadParameter(f"{value!r}: need at least one seed >= 0")
    if len(set(out)) != len(out):
        raise click.BadParameter(f"{value!r}: a seed given twice would count twice in the means")
    return out


def _block_size(cache_spec: CacheSpec, wl) -> CacheSpec:
    """Without --block-size: hash-id traces (no token ids) run at their trace
    block size (512), a Mooncake trace materialized with --tokens-per-block T
    at T (one hash id, one block), everything else at 16."""
    if cache_spec.block_size is None:
        tpb = (wl.params or {}).get("tokens_per_block")
        if tpb:
            return CacheSpec(tpb, cache_spec.num_blocks, cache_spec.pressure)
        hashed = [r.hash_block_tokens for r in wl.requests if not r.prompt_token_ids]
        return CacheSpec(hashed[0] if hashed else 16, cache_spec.num_blocks, cache_spec.pressure)
    return cache_spec


@click.command("simulate", cls=RecordingCommand)
@workload_options
@cache_options(default_block_size=None)
@click.option("--arms", default=None, help="Comma-separated policies (default: every installed ok policy).")
@click.option("--seeds", default="42", show_default=True, callback=_ints, help="Comma-separated workload seeds.")
@click.option("--policy-opt", multiple=True, metavar="NAME.KEY=VALUE", help="A policy parameter (repeatable).")
@click.option("--mode", type=click.Choice(["sequential", "concurrent"]), default="sequential", show_default=True)
@click.option("--max-running", type=click.IntRange(min=1), default=16, show_default=True,
              help="Concurrent mode: most running requests.")
@click.option("--token-budget", type=click.IntRange(min=1), default=8192, show_default=True,
              help="Concurrent mode: tokens per step.")
@click.option("--per-request", is_flag=True, help="With --json: keep each cell's per-request records.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def simulate(workload_spec: WorkloadSpec, cache_spec: CacheSpec, arms, seeds, policy_opt, mode, max_running,
             token_budget, per_request, as_json) -> None:
    """Simulate vLLM's prefix cache under each arm (token hit rate, block hit
    rate, prefill tokens recomputed, evictions), with the infinite-cache and
    Belady ceilings of the same input (sequential replay).

    Block size defaults to 16, or 512 for Mooncake hash-id traces, or T for a
    Mooncake trace materialized with --tokens-per-block T. Cache size:
    --num-blocks N (vLLM num_gpu_blocks, null block included) or
    --cache-pressure X (default 2.3).
    """
    try:
        options = registry.parse_options(policy_opt)
    except registry.PolicyConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--policy-opt") from None
    if arms:
        arm_list = [a.strip() for a in arms.split(",") if a.strip()]
        if len(set(arm_list)) != len(arm_list):
            raise click.BadParameter(f"{arms!r}: an arm is given twice", param_hint="--arms")
    else:
        arm_list = [p.name for p in registry.discover() if p.status == "ok"]
    unknown_opts = set(options) - set(arm_list)
    if unknown_opts:
        raise click.BadParameter(f"options for arms not run: {sorted(unknown_opts)}", param_hint="--policy-opt")
    for arm, opts in options.items():  # bad values fail now, not after the other arms ran
        try:
            registry.make_params(registry.get(arm), opts)
        except registry.PolicyConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--policy-opt") from None

    cells, ceils, sizes, params = [], {}, {}, {}
    for seed in seeds:
        wl = workload_spec.build(seed)
        spec = _block_size(cache_spec, wl)
        try:
            prep = prepare(wl, spec.block_size)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--block-size") from None
        nb = spec.num_blocks_for(wl)
        most = infinite_blocks(prep, spec.block_size)
        if nb > most:
            hint = "--num-blocks" if cache_spec.num_blocks is not None else "--cache-pressure"
            raise click.BadParameter(f"{nb:,} blocks is more than this workload can ever fill (seed {seed}: "
                                     f"{most:,} blocks, the infinite cache); use at most that", param_hint=hint)
        sizes[seed], params[seed] = nb, wl.params
        kw = dict(num_blocks=nb, block_size=spec.block_size, mode=mode, max_running=max_running,
                  token_budget=token_budget, seed=seed)
        for arm in arm_list:
            try:
                rec = run_arm(prep, arm, options=options.get(arm), **kw)
            except (PolicyError, registry.PolicyConfigError) as exc:
                rec = {"arm": arm, "seed": seed, "error": str(exc)}
            except ValueError as exc:
                raise click.ClickException(str(exc)) from None
            if not per_request:
                rec.pop("requests", None)
            cells.append(rec)
        try:
            bel = [c for c in cells if c["seed"] == seed and c["arm"] == BELADY and "error" not in c]
            ceils[seed] = ceilings(prep, num_blocks=nb, block_size=spec.block_size,
                                   belady_record=bel[0] if bel and mode == "sequential" else None)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None

    summary = _summary(arm_list, cells, ceils)
    result = {"kind": "spfcore-simulate", "command": command_line(click.get_current_context()),
              "workload": workload_spec.describe(), "workload_params": params,
              "cache": {"block_size": spec.block_size, "num_blocks": sizes, "cache_pressure": cache_spec.pressure},
              "mode": mode, "seeds": seeds, "policy_options": options, "cells": cells,
              "ceilings": ceils, "summary": summary}
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str))
    else:
        _table(result)
    failed = sorted({c["arm"] for c in cells if "error" in c})
    if failed:  # the table/JSON above names each error; the exit status says it too
        click.echo(f"error: arm(s) failed: {', '.join(failed)}", err=True)
        raise SystemExit(1)


def _mean(vals):
    return statistics.fmean(vals) if vals else None


def _summary(arms, cells, ceils) -> dict:
    """Per arm, each metric averaged over the seeds that ran; ceilings averaged too."""
    out = {}
    for arm in arms:
        ok = [c for c in cells if c["arm"] == arm and "error" not in c]
        errs = [c["error"] for c in cells if c["arm"] == arm and "error" in c]
        row = {m: _mean([c[m] for c in ok]) for m in METRICS}
        row["error"] = errs[0] if errs else None
        out[arm] = row
    for name in ("infinite", "belady"):
        ok = [c[name] for c in ceils.values() if "error" not in c[name]]
        row = {m: _mean([c[m] for c in ok]) for m in METRICS[:3]}
        errs = [c[name]["error"] for c in ceils.values() if "error" in c[name]]
        row["error"] = errs[0] if errs else None
        out[f"ceiling:{name}"] = row
    return out


def _table(result: dict) -> None:
    s = result["summary"]
    bel = s["ceiling:belady"]["block_hit_rate"]
    wl = result["workload"]
    desc = ", ".join(f"{k}={v}" for k, v in wl.items())
    t = Table(title=f"spfcore simulate ({result['mode']}; seeds {','.join(map(str, result['seeds']))})",
              caption=f"workload: {desc}\ncache: block_size={result['cache']['block_size']}, "
                      f"num_blocks={result['cache']['num_blocks']}")
    for col in ("arm", "token hit", "block hit", "recomputed", "evictions", "to Belady"):
        t.add_column(col, justify="left" if col == "arm" else "right", no_wrap=True)
    errors = []
    for name, row in s.items():
        if row["error"]:
            errors.append(f"[red]{name}: {row['error']}[/red]")
        if row["token_hit_rate"] is None:
            t.add_row(name, "[red]error[/red]", "", "", "", "")
            continue
        ev = "-" if name.startswith("ceiling") else f"{row['evictions']:,.0f}"
        head = "-" if bel is None or name.startswith("ceiling") else f"{bel - row['block_hit_rate']:+.4f}"
        t.add_row(name, f"{row['token_hit_rate']:.4f}", f"{row['block_hit_rate']:.4f}",
                  f"{row['prefill_tokens_recomputed']:,.0f}", ev, head)
    con = make_console()
    con.print(t)
    for e in errors:
        con.print(e)
