"""``spfcore simulate``: replay a workload or trace through the prefix-cache
simulator for several arms and seeds, next to the infinite-cache and Belady
ceilings."""

from __future__ import annotations

import json
import statistics

import click
from rich.table import Table

from spfcore import registry
from spfcore.fileio import hold_output_lock, write_atomic
from spfcore.report import error_cell, error_text, make_console
from spfcore.runtime import PolicyError
from spfcore.sim.cell import open_input
from spfcore.cli.options import (CacheSpec, Finite, RecordingCommand, WorkloadSpec, cache_options, command_line, seed_list,
                                 workload_options)
from spfcore.workloads.options import WorkloadOptionError
from spfcore.workloads.traces import TraceError

METRICS = ("token_hit_rate", "block_hit_rate", "prefill_tokens_recomputed", "evictions")
BELADY = "belady_oracle"
#: Version of the ``--json`` document (``schema_version``): fields are only added within a version.
SCHEMA_VERSION = 1
#: Exit status when an arm failed (its cell says why; the other arms ran and the JSON is written).
EXIT_ARM_FAILED = 4



def check_fits(inp, nb: int, cache_spec: CacheSpec) -> None:
    """Refuse a cache of ``nb`` blocks smaller than ``inp``'s largest request
    (an :class:`~spfcore.sim.cell.Input`) before any arm runs.

    Raises:
        click.BadParameter: on ``--num-blocks`` (or ``--cache-pressure``,
            which sized it), naming the request and the blocks it needs.
    """
    try:
        inp.check_fits(nb)
    except ValueError as exc:
        hint = "--num-blocks" if cache_spec.num_blocks is not None else "--cache-pressure"
        raise click.BadParameter(str(exc), param_hint=hint) from None


def _check_size(nb: int, most: int, seed, cache_spec: CacheSpec) -> None:
    if nb > most:
        hint = "--num-blocks" if cache_spec.num_blocks is not None else "--cache-pressure"
        raise click.BadParameter(f"{nb:,} blocks is more than this workload can ever fill (seed {seed}: "
                                 f"{most:,} blocks, the infinite cache); use at most that", param_hint=hint)


@click.command("simulate", cls=RecordingCommand)
@workload_options
@cache_options(default_block_size=None)
@click.option("--arms", default=None, help="Comma-separated policies (default: every installed ok policy).")
@click.option("--seeds", default="42", show_default=True, callback=seed_list, help="Comma-separated workload seeds.")
@click.option("--policy-opt", multiple=True, metavar="NAME.KEY=VALUE", help="A policy parameter (repeatable).")
@click.option("--mode", type=click.Choice(["sequential", "concurrent"]), default="sequential", show_default=True,
              help="sequential streams a --trace (bounded memory); concurrent holds the whole workload in memory.")
@click.option("--max-running", type=click.IntRange(min=1), default=16, show_default=True,
              help="Concurrent mode: most running requests.")
@click.option("--token-budget", type=click.IntRange(min=1), default=8192, show_default=True,
              help="Concurrent mode: tokens per step.")
@click.option("--per-request", is_flag=True,
              help="Keep each cell's per-request records in the JSON (memory then grows with the trace).")
@click.option("--no-ceilings", is_flag=True,
              help="Skip the infinite-cache and Belady ceilings (their memory grows with the trace).")
@click.option("--hook-budget-ms", type=Finite(min=0, min_open=True), default=None, metavar="MS",
              help="Most wall time of one hook call; a call over it fails that arm (default: no budget).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON here (atomically, once every cell ran) instead of printing a table.")
def simulate(workload_spec: WorkloadSpec, cache_spec: CacheSpec, arms, seeds, policy_opt, mode, max_running,
             token_budget, per_request, no_ceilings, hook_budget_ms, as_json, output) -> None:
    """Simulate vLLM's prefix cache under each arm (token hit rate, block hit
    rate, prefill tokens recomputed, evictions), with the infinite-cache and
    Belady ceilings of the same input (sequential replay).

    Block size defaults to 16, or 512 for Mooncake hash-id traces, or T for a
    Mooncake trace materialized with --tokens-per-block T. Cache size:
    --num-blocks N (vLLM num_gpu_blocks, null block included) or
    --cache-pressure X (default 2.3).

    Memory: a --trace in sequential mode is streamed (one pass to size and
    check it, one per arm), so memory is bounded by the cache and the policy's
    state, plus per-request records with --per-request, plus what grows by
    nature: --cache-pressure counts distinct block hashes (give --num-blocks
    instead), the infinite-cache ceiling holds every block and Belady's
    future index is linear in block references (skip both: --no-ceilings).
    Generated workloads and concurrent mode are held in memory. Each cell's
    wall_seconds is that arm's replay alone.

    Faults: a policy that raises, answers badly (wrong length or type, NaN,
    bad or duplicate indices), overruns --hook-budget-ms, or is asked for
    but not installed/broken fails its own arm only: its cell says
    status "error" with the policy, the hook and the message, the other
    arms run, the JSON is written, and the exit status is 4. A hook that
    never returns is interrupted at the budget by a SIGALRM timer (between
    bytecodes, in this main thread); without a budget nothing stops it.
    """
    try:
        options = registry.parse_options(policy_opt)
    except registry.PolicyConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--policy-opt") from None
    if arms:
        arm_list = [a.strip() for a in arms.split(",") if a.strip()]
        if len(set(arm_list)) != len(arm_list):
            raise click.BadParameter(f"{arms!r}: an arm is given twice", param_hint="--arms")
    else:  # every ok policy, and each one the allowlist names that cannot run (an error cell, not a silence)
        found = registry.discover()
        usable = {p.name for p in found if p.status == "ok"}
        arm_list = sorted(usable) + sorted((registry.allowlist() or set()) - usable)
        for p in found:
            if p.status != "ok" and p.name not in arm_list:
                click.echo(f"warning: policy {p.name!r} ({p.distribution}) skipped: {p.status}", err=True)
    try:  # bad values fail now, not after the other arms ran
        registry.check_options(arm_list, options)
    except registry.PolicyConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--policy-opt") from None
    hold_output_lock(output)  # one writer per --output, for the whole run (after the arguments are checked)

    cells, ceils, sizes, params = [], {}, {}, {}
    for seed in seeds:
        try:
            inp = open_input(workload_spec, seed, cache_spec.block_size, mode)
        except WorkloadOptionError as exc:
            raise click.BadParameter(str(exc), param_hint=exc.param_hint) from None
        except TraceError as exc:
            raise click.BadParameter(str(exc), param_hint="--trace") from None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--block-size") from None
        spec = CacheSpec(inp.block_size, cache_spec.num_blocks, cache_spec.pressure)
        nb = spec.num_blocks_for(inp.workload)
        _check_size(nb, inp.infinite_blocks, seed, cache_spec)
        params[seed] = inp.workload.params
        check_fits(inp, nb, cache_spec)  # refused before any arm runs
        sizes[seed] = nb
        for arm in arm_list:
            try:
                rec = inp.run(arm, num_blocks=nb, options=options.get(arm), seed=seed, mode=mode,
                              max_running=max_running, per_request=per_request,
                              token_budget=token_budget if mode == "concurrent" else None,
                              hook_budget_ms=hook_budget_ms)
            except (PolicyError, registry.PolicyConfigError) as exc:
                rec = error_cell(arm, seed, exc)
            except TraceError as exc:  # the trace changed since the scan
                raise click.BadParameter(str(exc), param_hint="--trace") from None
            except ValueError as exc:  # the input, checked before any arm ran: same for every arm
                raise click.ClickException(str(exc)) from None
            except Exception as exc:  # noqa: BLE001 - a plugin fault outside a hook call (e.g. a bad hint object)
                rec = error_cell(arm, seed, exc)
            cells.append(rec)
        if no_ceilings:
            continue
        try:
            bel = [c for c in cells if c["seed"] == seed and c["arm"] == BELADY and "error" not in c]
            ceils[seed] = inp.ceilings(nb, bel[0] if bel and mode == "sequential" else None)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None

    summary = _summary(arm_list, cells, None if no_ceilings else ceils)
    result = {"kind": "spfcore-simulate", "schema_version": SCHEMA_VERSION,
              "command": command_line(click.get_current_context()), "workload": workload_spec.describe(), "workload_params": params,
              "cache": {"block_size": spec.block_size, "num_blocks": sizes, "cache_pressure": cache_spec.pressure},
              "mode": mode, "seeds": seeds, "policy_options": options, "cells": cells}
    if not no_ceilings:
        result["ceilings"] = ceils
    result["summary"] = summary
    if output:
        # round trip through JSON so the file holds what --json would print (int seed keys become strings)
        try:
            write_atomic(output, json.dumps(result, indent=2, default=str) + "\n")
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise click.ClickException(f"--output {output}: cannot write: {exc.strerror or exc}{where}") from None
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str))
    elif not output:
        _table(result)
    failed = sorted({c["arm"] for c in cells if "error" in c})
    if failed:  # the table/JSON above names each error; the exit status says it too
        click.echo(f"error: arm(s) failed: {', '.join(failed)}", err=True)
        raise SystemExit(EXIT_ARM_FAILED)


def _mean(vals):
    return statistics.fmean(vals) if vals else None


def _summary(arms, cells, ceils) -> dict:
    """Per arm, each metric averaged over the seeds that ran; ceilings averaged too."""
    out = {}
    for arm in arms:
        ok = [c for c in cells if c["arm"] == arm and "error" not in c]
        errs = [c["error"] for c in cells if c["arm"] == arm and "error" in c]
        row = {m: _mean([c[m] for c in ok]) for m in METRICS}
        row["status"] = "error" if errs else "ok"
        row["error"] = errs[0] if errs else None
        out[arm] = row
    for name in ("infinite", "belady") if ceils is not None else ():
        ok = [c[name] for c in ceils.values() if "error" not in c[name]]
        row = {m: _mean([c[m] for c in ok]) for m in METRICS[:3]}
        errs = [c[name]["error"] for c in ceils.values() if "error" in c[name]]
        row["error"] = errs[0] if errs else None
        out[f"ceiling:{name}"] = row
    return out


def _table(result: dict) -> None:
    s = result["summary"]
    bel = (s.get("ceiling:belady") or {}).get("block_hit_rate")
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
            errors.append(f"{name}: {error_text(row['error'])}")
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
        con.print(e, style="red", markup=False)
