"""``spfcore sweep`` and ``spfcore sweep-report``: the command line of
:mod:`spfcore.sweep`."""

from __future__ import annotations

import os
import sys

import click

from spfcore import registry, sweep
from spfcore.report import make_console
from spfcore.workloads import generators
from spfcore.cli.options import Finite, RecordingCommand, command_line, parse_sets, seed_list

#: Exit status when a cell failed (its file and the table say why; the other cells ran).
EXIT_CELL_FAILED = 4
#: Exit status when an interrupt (Ctrl-C, SIGTERM) stopped the sweep; the finished cells are kept (rerun resumes).
EXIT_INTERRUPTED = 130


def _list(ctx, param, value, conv, what: str):
    if value is None:
        return ()
    out = []
    for v in value.split(","):
        v = v.strip()
        if not v:
            continue
        try:
            out.append(conv(v))
        except ValueError:
            raise click.BadParameter(f"{v!r}: expected {what}") from None
    if len(set(out)) != len(out):
        raise click.BadParameter(f"{value!r}: a value is given twice")
    return tuple(out)


def _blocks(ctx, param, value):
    out = _list(ctx, param, value, int, "comma-separated block counts, e.g. 64,128,256")
    bad = [b for b in out if b < 2]
    if bad:
        raise click.BadParameter(f"{bad[0]}: a cache needs >= 2 blocks (the null block + 1)")
    return out


def _fractions(ctx, param, value):
    out = _list(ctx, param, value, float, "comma-separated fractions, e.g. 0.05,0.1,0.2")
    bad = [f for f in out if not 0 < f <= 1]
    if bad:
        raise click.BadParameter(f"{bad[0]}: a fraction of the input's distinct blocks must be in (0, 1]")
    return out


@click.command("sweep", cls=RecordingCommand)
@click.option("--out", "-o", "folder", type=click.Path(file_okay=False), required=True,
              help="Results folder: one JSON per cell, sweep.json, summary.json, mrc.png.")
@click.option("--policies", required=True, help="Comma-separated policies (each a line of the curves).")
@click.option("--num-blocks", "blocks", callback=_blocks, default=None,
              help="Cache sizes in blocks, vLLM num_gpu_blocks (null block included), comma-separated.")
@click.option("--fractions", callback=_fractions, default=None,
              help="Cache sizes as fractions of the input's distinct blocks, comma-separated (a keyed pass "
                   "per input and seed; memory: one key per distinct block).")
@click.option("--trace", "traces", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A trace to replay, streamed (repeatable; Mooncake or spfcore JSONL).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Traces: first N requests.")
@click.option("--tokens-per-block", type=click.IntRange(min=1), default=None,
              help="Mooncake traces: materialize each hash id to T tokens (default: hash ids, block size 512).")
@click.option("--workload", "workloads", multiple=True, type=click.Choice(sorted(generators.GENERATORS)),
              help="A generated workload (repeatable).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Generator flag for every --workload (repeatable).")
@click.option("--seeds", default="42", show_default=True, callback=seed_list, help="Comma-separated seeds.")
@click.option("--policy-opt", multiple=True, metavar="NAME.KEY=V1[,V2...]",
              help="Policy parameter values (repeatable); each value is its own line of the curves "
                   "(several keys of one policy: every combination).")
@click.option("--block-size", type=click.IntRange(min=1), default=None,
              help="Tokens per block (default: 512 for hash-id traces, T with --tokens-per-block, else 16).")
@click.option("--no-ceilings", is_flag=True, help="Skip the Belady cells and the infinite-cache cell.")
@click.option("--hook-budget-ms", type=Finite(min=0, min_open=True), default=None, metavar="MS",
              help="Most wall time of one hook call; a call over it fails that cell.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Local worker processes (1: this process). With --ray-address local: the local Ray's CPUs.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Run each cell as a Ray task: 'auto' (the cluster this machine belongs to), 'local' (start "
                   "a local Ray), or an address (host:6379, ray://host:10001). Needs spfcore[ray].")
def sweep_command(folder, policies, blocks, fractions, traces, limit, tokens_per_block, workloads, sets, seeds,
                  policy_opt, block_size, no_ceilings, hook_budget_ms, workers, ray_address) -> None:
    """Run a grid of independent simulator cells - inputs x seeds x policy
    variants x cache sizes, plus Belady at every size and one infinite-cache
    cell per input and seed - and write the merged table and miss-ratio
    curves (OUT/mrc.png).

    Each cell is a sequential replay (as spfcore simulate; traces streamed)
    written to OUT/cells/<key>.json as soon as it finishes, the key a digest
    of the cell's full configuration and of the code. A second run reuses
    every finished cell (resume; the same grid again runs nothing). Failed
    cells are recorded and run again next time; exit status 4 if any failed.
    """
    if not blocks and not fractions:
        raise click.BadParameter("give at least one cache size", param_hint="--num-blocks/--fractions")
    if not traces and not workloads:
        raise click.BadParameter("give at least one input", param_hint="--trace/--workload")
    if (limit or tokens_per_block) and not traces:
        raise click.BadParameter("only with --trace", param_hint="--limit/--tokens-per-block")
    if sets and not workloads:
        raise click.BadParameter("generator flags need a --workload", param_hint="--set")
    if len(set(workloads)) != len(workloads):
        raise click.BadParameter(f"{', '.join(workloads)}: a workload is given twice (one --set applies to every "
                                 "--workload)", param_hint="--workload")
    real = [os.path.realpath(t) for t in traces]
    if len(set(real)) != len(real):
        raise click.BadParameter(f"{', '.join(traces)}: a trace is given twice", param_hint="--trace")
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names or len(set(names)) != len(names):
        raise click.BadParameter(f"{policies!r}: need distinct policy names", param_hint="--policies")
    try:
        grid_opts = sweep.parse_option_grid(policy_opt)
        vs = sweep.variants(names, grid_opts)
    except sweep.SweepError as exc:
        raise click.BadParameter(str(exc).removeprefix("field '--policy-opt': "), param_hint="--policy-opt") from None
    for v in vs:  # bad values fail now, not in every cell
        try:
            registry.make_params(registry.get(v.policy), v.options)
        except registry.PolicyConfigError as exc:
            hint = "--policy-opt" if v.options and "not installed" not in str(exc) else "--policies"
            raise click.BadParameter(str(exc), param_hint=hint) from None
    sources = [sweep.Source(trace=t, limit=limit, tokens_per_block=tokens_per_block) for t in traces]
    sources += [sweep.Source(workload=w, flags=parse_sets(w, sets)) for w in workloads]
    sizes = [{"blocks": b} for b in blocks] + [{"fraction": f} for f in fractions]
    try:
        grid = sweep.Grid(tuple(sources), tuple(seeds), tuple(vs), tuple(sizes), block_size=block_size,
                          hook_budget_ms=hook_budget_ms, ceilings=not no_ceilings)
    except sweep.SweepError as exc:
        raise click.ClickException(str(exc)) from None

    from tqdm import tqdm

    con = make_console()
    bar = None

    def progress(rec):
        if bar is not None:
            bar.update()
            if rec["status"] != "ok":
                bar.write(f"cell {rec['key']} ({rec['config']['policy']}, {sweep.size_label(rec['config']['size'])}, "
                          f"seed {rec['config']['seed']}) failed: {rec['cell']['error']['message']}", file=sys.stderr)

    where = "this process"
    if ray_address is not None:
        try:
            where = sweep.ray_connect(ray_address, workers)
        except sweep.SweepError as exc:
            raise click.BadParameter(str(exc).removeprefix("field '--ray-address': "),
                                     param_hint="--ray-address") from None
    elif workers > 1:
        where = f"{workers} local worker processes"
    import signal

    def _term(signum, frame):  # a killed call (SIGTERM) stops like Ctrl-C: finished cells kept, the rest counted
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, _term)
    try:
        n = len(grid.cells())
        bar = tqdm(total=n, desc="sweep", unit="cell", file=sys.stderr, dynamic_ncols=True,
                   disable=None)
        out = sweep.run_sweep(grid, folder, workers=workers, ray_address=ray_address,
                              command=command_line(click.get_current_context()), on_cell=progress)
    except KeyboardInterrupt:  # before any cell ran (e.g. while the trace was scanned): nothing of a cell written
        click.echo("sweep: interrupted before the cells ran; run the same command again", err=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except sweep.InputError as exc:  # found before any cell ran; nothing written
        raise click.BadParameter(str(exc), param_hint=exc.param) from None
    except sweep.SweepError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:  # OutputInUseError is a RuntimeError: below
        where_ = f" ({exc.filename})" if exc.filename else ""
        raise click.ClickException(f"--out {folder}: cannot write: {exc.strerror or exc}{where_}") from None
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if bar is not None:
            bar.close()
    click.echo(f"sweep: {out.total} cells: {out.reused} reused from {folder}, {out.ran} run on {where} "
               f"({out.failed} failed) in {out.seconds:.1f} s", err=True)
    if out.interrupted:
        click.echo(f"sweep: interrupted: {out.interrupted} cell(s) not finished (in flight or not started; "
                   "nothing of them written): run the same command again to do them", err=True)
        _report(folder, con)
        raise SystemExit(EXIT_INTERRUPTED)
    _report(folder, con)
    if out.failed:
        raise SystemExit(EXIT_CELL_FAILED)


def _report(folder, con) -> None:
    try:
        rows, missing = sweep.render(folder)
    except sweep.SweepError as exc:
        raise click.ClickException(str(exc)) from None
    con.print(sweep.table(rows, title=f"spfcore sweep: {folder}"))
    for r in rows:
        for e in r["errors"]:
            con.print(f"{r['source']} {r['variant']} {r['size_label']}: {e}", style="red", markup=False)
    if missing:
        con.print(f"{len(missing)} cell(s) of this sweep not run yet", style="yellow")
    click.echo(f"wrote {folder}/summary.json" + (f", {folder}/mrc.png" if any(r['miss_ratio'] is not None
                                                                             for r in rows) else ""), err=True)


@click.command("sweep-report")
@click.argument("folder", type=click.Path(file_okay=False, exists=True))
def sweep_report_command(folder) -> None:
    """Render the table, summary.json and mrc.png of an existing sweep folder
    (cells not run yet are counted, not invented)."""
    _report(folder, make_console())
