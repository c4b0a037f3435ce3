"""``spfcore gate``: run the survival gate (arms x seeds through vLLM, the
simulator on the same input), print the table and the verdict, write the
results JSON and plots."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import attrs
import click

from spfcore import gate, presets, registry, report
from spfcore.cli.options import Finite, RecordingCommand, cache_options, command_line, csv, seed_list, workload_options
from spfcore.fileio import hold_output_lock
from spfcore.run import pipeline, spec, store
from spfcore.sim.tiered import COST_MODELS


def _threshold_options(f):
    for a in reversed(attrs.fields(gate.GateThresholds)):
        f = click.option(f"--{a.name.replace('_', '-')}", a.name, type=int if a.name == "min_seeds" else Finite(),
                         default=None, show_default=str(a.default),
                         help=f"Gate threshold {a.name}.")(f)
    return f


@click.command("gate", cls=RecordingCommand)
@click.option("--preset", type=click.Choice(sorted(presets.PRESETS)), default="seed", show_default=True,
              help="seed: the SPF seed's configuration (GPU scale); quick: the same shape for a 2-core CPU.")
@click.option("--model", default=None, help="Model preset (tiny, llama-3.2-3b) or checkpoint folder.")
@click.option("--max-model-len", type=click.IntRange(min=1), default=None, help="Engine max_model_len, tokens.")
@click.option("--seeds", callback=seed_list, default=None, help="Comma-separated seeds [42,43,44].")
@click.option("--arms", callback=csv(str), default=None,
              help=f"Comma-separated arms [{','.join(presets.DEFAULT_ARMS)}].")
@click.option("--candidate", default=presets.SEED_ROLES.candidate, show_default=True, help="The arm on trial.")
@click.option("--baseline", default=presets.SEED_ROLES.baseline, show_default=True, help="The arm to beat by a margin.")
@click.option("--floor", "floor_", default=presets.SEED_ROLES.floor, show_default=True,
              help="The arm throughput must not fall below.")
@click.option("--oracle", default=presets.SEED_ROLES.oracle, show_default=True,
              help="The ceiling arm (harness check); 'none' (or an oracle not in --arms) skips the harness check.")
@click.option("--policy-opt", multiple=True, metavar="NAME.KEY=VALUE", help="A policy option (repeatable).")
@click.option("--mode", type=click.Choice(["sequential", "timed"]), default="sequential", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Results JSON [runs/gate-<preset>-<candidate>[-timed]/results.json]; plots beside it.")
@click.option("--fresh", is_flag=True, help="Discard finished cells of an earlier run at --output.")
@click.option("--no-sim", is_flag=True, help="Skip the simulator (no harness/headroom check).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--check", is_flag=True,
              help="Exit status 3 unless the verdict is SURVIVES or INCONCLUSIVE (for scripts and CI).")
@click.option("--budget", default="1", show_default=True, metavar="PASSES|SECONDSs",
              help="Repeats while the verdict is INCONCLUSIVE: most passes over the seeds (first included), "
                   "e.g. 3, or seconds from the start after which no pass starts, e.g. 900s.")
@click.option("--load", "loads", callback=csv(float), default=None, metavar="F,F,...",
              help="Load levels as fractions of the floor arm's capacity (e.g. 0.5,0.8): Poisson arrivals, "
                   "timed mode, one gate per level under <run folder>/load-<F>/ (the run folder: --output's folder "
                   "for results.json, else --output without .json); the verdict is --judge-load's.")
@click.option("--capacity", type=Finite(min=0, min_open=True), default=None, metavar="RPS",
              help="The floor arm's capacity, requests/s [measured: the workload all at once on the floor arm].")
@click.option("--capacity-only", is_flag=True,
              help="With --load: measure the floor arm's capacity (kept in <run folder>/capacity.json), print it "
                   "and stop (to give several runs one --capacity).")
@click.option("--judge-load", type=Finite(), default=None, metavar="F", help="The level the verdict judges [first of --load].")
@click.option("--ttft-slo-ms", type=Finite(min=0, min_open=True), default=None, metavar="MS",
              help="TTFT SLO for the goodput column of a --load run (requests within it per second).")
@click.option("--point-estimates", is_flag=True,
              help="Judge on point estimates (the seed's rule as written) instead of settled intervals: "
                   "no INCONCLUSIVE, no repeats.")
@click.option("--hook-budget-ms", type=Finite(min=0, min_open=True), default=None, metavar="MS",
              help="Most wall time of one hook call (engine and simulator); a call over it fails that arm's cell.")
@click.option("--merge-from", multiple=True, type=click.Path(exists=True), metavar="RUN",
              help="Another run of the same configuration (its results file or folder; repeatable), e.g. one seed "
                   "per GPU: its finished cells join this run's before any cell runs (with --load, level by level).")
@click.option("--time-limit", type=Finite(min=0), default=None, metavar="SECONDS",
              help="Start no engine cell after this many seconds; the verdict is then INCOMPLETE and the "
                   "same command later resumes (machines lent by the minute).")
@click.option("--cpu-ratio", type=Finite(min=0, min_open=True), default=None, metavar="R",
              help="Tiered arms: a CPU KV tier of R x the GPU cache's usable blocks behind the prefix cache, in the "
                   "engine (vLLM's offloading connector, the policy's tier hooks) and the simulator; sequential mode.")
@click.option("--tier-cost", type=click.Choice(COST_MODELS), default=None,
              help="Cost model of the simulator's tiered TTFT estimate [by --model].")
@workload_options
@cache_options(default_block_size=None, default_pressure=2.3)
@_threshold_options
@click.pass_context
def gate_command(ctx, preset, model, max_model_len, seeds, arms, candidate, baseline, floor_, oracle,
                 policy_opt, mode, output, fresh, no_sim, no_progress, check, budget, loads, capacity, judge_load,
                 ttft_slo_ms, capacity_only, point_estimates,
                 hook_budget_ms, time_limit, merge_from, cpu_ratio, tier_cost, workload_spec, cache_spec,
                 **thresholds):
    """Run the survival gate: every arm x seed through a real vLLM engine and
    the simulator, then judge the candidate (SURVIVES, FAILS, INVALID-HARNESS,
    NO-HEADROOM, INCOMPLETE or INCONCLUSIVE).

    SURVIVES and FAILS need every deciding criterion's 95% CI on one side of
    its threshold; otherwise the verdict is INCONCLUSIVE, naming the
    criterion, its interval and how many more passes would likely settle it,
    and the engine repeats every arm x seed (interleaved, same engine) until
    settled or --budget is spent.

    Exit status: 0 for SURVIVES, FAILS, INVALID-HARNESS, NO-HEADROOM and
    INCOMPLETE; 5 for INCONCLUSIVE (not settled: run again with a larger
    --budget); with --check, 3 for any verdict but SURVIVES and INCONCLUSIVE;
    else 4 when a cell failed (a policy fault: its arm's cells say status "error"
    with the policy, hook and message; the other arms ran); 2: a bad argument
    (checked before the output is locked; nothing written); 1: bad input found
    later (a trace, a model, an output held by another run); 130: interrupted."""
    p = presets.PRESETS[preset]
    # vLLM logs at INFO by default (and a harmless tokenizer warning per engine); keep the
    # verdict readable unless the user asked otherwise.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    passes, budget_s = _budget(budget)
    if oracle is not None and oracle.lower() in ("none", ""):
        oracle = None
    elif oracle is not None and arms is not None and oracle not in arms:
        click.echo(f"note: oracle {oracle} is not in --arms: the harness check is skipped", err=True)
        oracle = None
    # one default folder per preset, candidate and mode: a second candidate (other code) or a timed run does
    # not meet the first one's finished cells
    _check_load_options(loads, judge_load, capacity, capacity_only, ttft_slo_ms, workload_spec, cpu_ratio)
    if loads:
        mode = "timed"
    out = Path(output or f"runs/gate-{preset}-{candidate}{'' if mode == 'sequential' else '-' + mode}"
                         f"{'-load' if loads else ''}{f'-cpu{cpu_ratio:g}' if cpu_ratio else ''}/results.json")
    # the arguments first (usage errors, exit 2), then the lock: a bad argument is named even when
    # another run holds the output
    try:
        options = registry.parse_options(policy_opt)
    except registry.PolicyConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--policy-opt") from None
    ws = workload_spec
    flags = {**(p["workload_flags"] if ws.name == p["workload"] else {}), **ws.flags}
    engine = dict(p["engine"])
    if model is not None:
        engine["model"] = model
    if max_model_len is not None:
        engine["max_model_len"] = max_model_len
    thr = {k: v for k, v in thresholds.items() if v is not None}
    try:
        cfg = spec.GateConfig(
            workload=ws.name, workload_flags=flags, trace=ws.trace, limit=ws.limit,
            tokens_per_block=ws.tokens_per_block, arms=arms or presets.DEFAULT_ARMS,
            seeds=seeds or presets.DEFAULT_SEEDS, block_size=cache_spec.block_size or presets.block_size(p),
            cache_pressure=cache_spec.pressure, num_blocks=cache_spec.num_blocks, mode=mode, engine=engine,
            policy_options=options,
            roles=gate.Roles(candidate, baseline, floor_, oracle), thresholds=gate.GateThresholds(**thr),
            preset=preset, command=command_line(ctx),
            simulate=not no_sim, settle=not point_estimates, max_passes=passes, budget_s=budget_s,
            cpu_ratio=cpu_ratio, tier_cost=tier_cost)
    except (spec.GateConfigError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    try:  # an arm not installed or broken is skipped here: its cells say why
        registry.check_options(cfg.arms, cfg.policy_options)
    except registry.PolicyConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--policy-opt") from None
    _check_merge_from(merge_from, loads)
    hold_output_lock(out)  # one writer per results file (and its sidecar, plots), resume included
    if hook_budget_ms is not None:  # read by every PolicyRuntime.for_policy of this process (engine and simulator)
        from spfcore.runtime import BUDGET_ENV

        os.environ[BUDGET_ENV] = f"{hook_budget_ms:g}"
    try:
        if loads:
            doc = pipeline.run_load_gate(cfg, out, loads, capacity=capacity, judge_load=judge_load,
                                            ttft_slo_s=None if ttft_slo_ms is None else ttft_slo_ms / 1e3,
                                            fresh=fresh, progress=not no_progress, time_limit_s=time_limit,
                                            capacity_only=capacity_only, merge_from=merge_from)
            if capacity_only:
                click.echo(f"capacity {doc['capacity_rps']:.6g} req/s "
                           f"({'measured' if doc['capacity_measured'] else 'given'}; "
                           f"{store.run_folder(out) / 'capacity.json'})")
                return
        else:
            results = pipeline.run_gate(cfg, out, fresh=fresh, progress=not no_progress,
                                           time_limit_s=time_limit, merge_from=merge_from)
    except KeyboardInterrupt:
        click.echo(f"interrupted: finished cells are kept in {store.sidecar_path(out)}; "
                   "run the same command again to finish the rest", err=True)
        sys.exit(130)
    except OSError as exc:  # the results folder (or a trace) cannot be written or read
        where = f" ({exc.filename})" if exc.filename else ""
        ours = bool(exc.filename) and str(out).startswith(str(exc.filename))
        raise click.ClickException(f"{f'--output {out}: ' if ours else ''}{exc.strerror or exc}{where}") from None
    except store.MergeSourceError as exc:  # found before this run wrote anything (the lock's folder goes too)
        raise click.BadParameter(str(exc), param_hint="--merge-from") from None
    except spec.GateConfigError as exc:  # the run's checks before any cell (roles, model, sizes, levels): a usage error
        raise click.UsageError(str(exc)) from None
    except (store.GateResumeError, registry.PolicyConfigError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    console = report.make_console()
    if loads:
        reused = [(lv["load"], lv.get("run") or {}) for lv in doc["levels"]]
        if any(r.get("reused_cells") for _, r in reused):
            console.print("reused " + ", ".join(f"{r.get('reused_cells', 0)} of {r.get('cells', 0)} cells at load {f:g}"
                                                for f, r in reused)
                          + " (finished earlier; --fresh starts over)", markup=False)
        console.print(report.load_table(doc))
        v = doc["verdict"]
        console.print(f"verdict judged at load {doc['judged_load']:g} x capacity "
                      f"({doc['judged_load'] * doc['capacity_rps']:.3f} req/s); per level: "
                      + ", ".join(f"{lv['load']:g}: {lv['status']}" for lv in doc["levels"]), markup=False)
        console.print(report.verdict_table(v))
        for r in v.get("reasons", ()):
            console.print(f"  - {r}", markup=False)
        console.print(f"results: {out} (levels under {store.run_folder(out)}/load-*/)   "
                      f"plot: {out.parent / 'ttft_p95_vs_load.png'}",
                      markup=False)
        if check and v["status"] not in (gate.SURVIVES, gate.INCONCLUSIVE):
            sys.exit(3)
        if v["status"] == gate.INCONCLUSIVE:
            sys.exit(EXIT_INCONCLUSIVE)
        return
    run = results.get("run") or {}
    if run.get("reused_cells"):
        console.print(f"reused {run['reused_cells']} of {run['cells']} cells from {store.sidecar_path(out)} "
                      "(finished earlier; --fresh starts over)", markup=False)
    report.print_report(results, console)
    console.print(f"results: {out}   cells: {store.sidecar_path(out)}   "
                  f"plots: {out.parent / 'cache.png'}, {out.parent / 'ttft_cdf.png'}", markup=False)
    failed = [c for c in results["cells"] if c.get("error")]
    failed += [c for c in (results.get("sim") or {}).get("cells", []) if c.get("error")]
    left = len(cfg.arms) * len(cfg.seeds) - sum(1 for c in results["cells"] if not c.get("error"))
    for arm in dict.fromkeys(c["arm"] for c in failed):
        first = next(c for c in failed if c["arm"] == arm)
        console.print(f"arm {arm} failed: {report.error_text(first['error'])}", style="red", markup=False)
    if failed:
        console.print("a failed cell is tried again when the same command runs again (finished cells are kept): "
                      "fix the policy first, or leave its arm out with --arms", markup=False)
    elif left:
        console.print(f"{left} engine cell(s) not finished: run the same command again to run them "
                      "(finished cells are kept; --fresh starts over)", markup=False)
    status = results["verdict"]["status"]
    if check and status not in (gate.SURVIVES, gate.INCONCLUSIVE):
        sys.exit(3)
    if status == gate.INCONCLUSIVE:
        sys.exit(EXIT_INCONCLUSIVE)
    if failed:
        sys.exit(4)


def _check_load_options(loads, judge_load, capacity, capacity_only, ttft_slo_ms, workload_spec, cpu_ratio) -> None:
    """The ``--load`` options, before anything is locked or written (usage
    errors, exit status 2): levels finite and > 0, ``--judge-load`` one of
    them, a generated workload (not ``--trace``), no CPU tier; the options
    of a load run only with ``--load``.

    Raises:
        click.BadParameter: naming the option.
    """
    if not loads:
        for given, name in ((judge_load is not None, "--judge-load"), (capacity is not None, "--capacity"),
                            (capacity_only, "--capacity-only"), (ttft_slo_ms is not None, "--ttft-slo-ms")):
            if given:
                raise click.BadParameter("only with --load", param_hint=name)
        return
    bad = [x for x in loads if not (math.isfinite(x) and x > 0)]
    if bad:
        raise click.BadParameter(f"{bad[0]:g}: a load level is a fraction of the floor arm's capacity, "
                                 "a finite number > 0", param_hint="--load")
    if judge_load is not None and judge_load not in loads:
        raise click.BadParameter(f"{judge_load:g} is not one of --load {', '.join(f'{x:g}' for x in loads)}",
                                 param_hint="--judge-load")
    if workload_spec.trace is not None:
        raise click.BadParameter("load levels need a generated workload (a trace keeps its own arrival times; "
                                 "run it with --mode timed)", param_hint="--load")
    if cpu_ratio is not None:
        raise click.BadParameter("a CPU tier runs in sequential mode; --load runs timed", param_hint="--cpu-ratio")


def _check_merge_from(paths, loads) -> None:
    """Each ``--merge-from`` must be a gate run: a results file (or its
    folder) with its cells beside it (``results.cells.jsonl``); for a
    ``--load`` run, a load run with the cells of at least one of ``loads``.

    Raises:
        click.BadParameter: naming the path and the file that is missing.
    """
    for p in map(Path, paths):
        res = p / "results.json" if p.is_dir() else p
        want = [store.sidecar_path(store.level_path(res, x)) for x in loads] if loads else [store.sidecar_path(res)]
        if not any(w.is_file() for w in want):
            what = "a load run's levels" if loads else "a gate run"
            raise click.BadParameter(f"{p}: not {what} (no finished cells: {', '.join(map(str, want))} "
                                     f"{'is' if len(want) == 1 else 'are'} missing)", param_hint="--merge-from")


#: Exit status of a run whose verdict is INCONCLUSIVE (distinct from 3, --check's "not SURVIVES").
EXIT_INCONCLUSIVE = 5


def _budget(text: str) -> tuple[int, float | None]:
    """``--budget``: ``"3"`` -> (3 passes, no time limit); ``"900s"`` -> (1000
    passes, 900.0 seconds).

    Raises:
        click.BadParameter: anything else, or a value < 1.
    """
    t = text.strip().lower()
    try:
        if t.endswith("s"):
            sec = float(t[:-1])
            if not sec > 0:
                raise ValueError
            return 1000, sec
        n = int(t)
        if n < 1:
            raise ValueError
        return n, None
    except ValueError:
        raise click.BadParameter(f"{text!r}: give passes (an int >= 1, e.g. 3) or seconds (e.g. 900s)",
                                 param_hint="--budget") from None
