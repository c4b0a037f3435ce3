"""``spfcore bench NAME``: a standard, versioned simulator suite for one
policy, beside lru, the best other shipped policy and Belady: the numbers a
scorer's README quotes.

The suite (:data:`SUITE_VERSION`; a change of any case bumps it, so numbers
quoted with a version stay comparable):

* ``seed``: the SPF seed workload (``personas``, 16 personas of 8,192-token
  prefixes, 32 sessions x 4 turns, round robin), block size 16, cache
  pressure 2.3 (the gate's configuration, in the simulator);
* ``zipf``, ``bursty``, ``revisit``, ``multiturn``: every other generator
  shape (:mod:`spfcore.workloads.generators`) at its default flags, block
  size 16, cache pressure 2.3;
* ``mooncake-1828``, ``mooncake-9140``: the Mooncake conversation trace
  (hash ids, 512-token blocks) at 1,828 and 9,140 blocks.

``--quick`` is the same shapes at small sizes (shorter prompts, the first
1,000 trace requests at 400 and 2,000 blocks) for CI; its numbers are not
the suite's. Every case is a sequential replay through
:func:`spfcore.sim.simulate` (generators) or :func:`spfcore.sim.simulate_stream`
(the trace), seed 42.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
import click
from rich.table import Table

from spfcore import registry
from spfcore.fileio import hold_output_lock, write_atomic
from spfcore.report import error_cell, error_text, make_console
from spfcore.runtime import PolicyError
from spfcore.sim import prepare, simulate, simulate_stream
from spfcore.workloads import generators
from spfcore.workloads.pressure import num_blocks_for_pressure
from spfcore.workloads.traces import TraceError, TraceStream

#: Version of the suite's cases (bump on any change of a case).
SUITE_VERSION = "1"
#: The shipped policies a candidate is compared with (Belady is the ceiling).
SHIPPED = ("lru", "session_ttl", "frequency", "spf_expected_utility")
BELADY = "belady_oracle"
SEED = 42
TRACE_NAME = "mooncake_conversation_trace.jsonl"
#: Environment variable naming the Mooncake conversation trace.
TRACE_ENV = "SPFCORE_MOONCAKE_TRACE"
METRICS = ("token_hit_rate", "block_hit_rate", "prefill_tokens_recomputed", "evictions", "wall_seconds")


@attrs.frozen
class Case:
    """One case of the suite.

    Attributes:
        name: Case name (a column of the table, a key of the JSON).
        workload: Generator name, or ``"mooncake"`` for the trace.
        flags: Generator flags (over the defaults).
        block_size: Tokens per block.
        pressure: Cache pressure (generators), or ``None``.
        num_blocks: Cache size, blocks with the null block (trace), or ``None``.
        limit: First N trace requests, or ``None`` for all.
    """

    name: str
    workload: str
    flags: dict = attrs.field(factory=dict)
    block_size: int = 16
    pressure: float | None = 2.3
    num_blocks: int | None = None
    limit: int | None = None


_SHAPES = ("zipf", "bursty", "revisit", "multiturn")
_SHORT = {"personas": {"prefix_tokens": 512, "query_tokens": 32, "output_tokens": 4},
          "revisit": {"prefix_tokens": 512, "query_tokens": 32, "noise_tokens": 512, "output_tokens": 4},
          "multiturn": {"prefix_tokens": 256, "query_tokens": 32, "output_tokens": 4}}

#: The suite: ``{"full": [...], "quick": [...]}``.
SUITE = {
    "full": [Case("seed", "personas"), *(Case(s, s) for s in _SHAPES),
             Case("mooncake-1828", "mooncake", block_size=512, pressure=None, num_blocks=1828),
             Case("mooncake-9140", "mooncake", block_size=512, pressure=None, num_blocks=9140)],
    "quick": [Case("seed", "personas", _SHORT["personas"]),
              *(Case(s, s, _SHORT.get(s, _SHORT["personas"])) for s in _SHAPES),
              Case("mooncake-400", "mooncake", block_size=512, pressure=None, num_blocks=400, limit=1000),
              Case("mooncake-2000", "mooncake", block_size=512, pressure=None, num_blocks=2000, limit=1000)],
}


def find_trace() -> Path | None:
    """The Mooncake conversation trace: ``$SPFCORE_MOONCAKE_TRACE``, else
    ``../shared/traces/`` beside the working directory or beside the spfcore
    checkout; ``None`` if none exists."""
    env = os.environ.get(TRACE_ENV)
    if env:
        return Path(env)
    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        p = base.parent / "shared" / "traces" / TRACE_NAME
        if p.is_file():
            return p
    return None


def _arm(run, arm: str) -> dict:
    try:
        rec = run(arm)
    except (PolicyError, registry.PolicyConfigError) as exc:
        return error_cell(arm, SEED, exc)
    return {k: rec[k] for k in METRICS} | {"status": "ok"}


def run_case(case: Case, arms: list[str], options: dict, trace: Path | None) -> dict:
    """Replay ``case`` under every arm of ``arms``.

    Returns:
        ``{"case", "workload", "block_size", "num_blocks", "arms": {arm:
        {token_hit_rate, block_hit_rate, prefill_tokens_recomputed,
        evictions, wall_seconds, status} or an error cell}}``, or with
        ``"skipped": reason`` when the trace is missing.

    Raises:
        TraceError: a malformed trace line (file, line and field named).
    """
    out = {"case": case.name, "workload": case.workload, "block_size": case.block_size}
    if case.workload == "mooncake":
        if trace is None or not trace.is_file():
            return out | {"skipped": f"Mooncake trace not found (give --trace or set {TRACE_ENV})"}
        src = TraceStream(trace, limit=case.limit)
        nb = case.num_blocks
        out |= {"trace": str(trace), "limit": case.limit, "num_blocks": nb}

        def run(arm):
            return simulate_stream(src, arm, options=options.get(arm), num_blocks=nb, block_size=case.block_size,
                                   seed=SEED)
    else:
        wl = generators.make(case.workload, seed=SEED, **case.flags)
        prep = prepare(wl, case.block_size)
        nb = case.num_blocks or num_blocks_for_pressure(wl, case.pressure, case.block_size)
        out |= {"flags": wl.params, "cache_pressure": case.pressure, "num_blocks": nb}

        def run(arm):
            return simulate(prep, arm, options=options.get(arm), num_blocks=nb, block_size=case.block_size,
                            seed=SEED)
    out["arms"] = {arm: _arm(run, arm) for arm in arms}
    return out


def _hit(cell: dict | None):
    return cell.get("token_hit_rate") if cell and cell.get("status") == "ok" else None


def summarize(policy: str, cases: list[dict]) -> list[dict]:
    """Per case the table's row: the policy's token hit rate, lru's, the best
    other shipped policy's (name and rate; not the policy itself, not lru),
    Belady's, and the policy minus lru (points of token hit rate)."""
    rows = []
    for c in cases:
        if "skipped" in c:
            rows.append({"case": c["case"], "skipped": c["skipped"]})
            continue
        a = c["arms"]
        others = [(n, _hit(a.get(n))) for n in SHIPPED if n not in (policy, "lru") and _hit(a.get(n)) is not None]
        best = max(others, key=lambda t: t[1], default=(None, None))
        mine, lru = _hit(a.get(policy)), _hit(a.get("lru"))
        rows.append({"case": c["case"], "policy": mine, "lru": lru, "best_other": best[0], "best_other_hit": best[1],
                     "belady": _hit(a.get(BELADY)),
                     "vs_lru_points": None if mine is None or lru is None else round(100 * (mine - lru), 2),
                     "error": error_text(a[policy]["error"]) if a.get(policy, {}).get("status") == "error" else None})
    return rows


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _table(result: dict) -> None:
    t = Table(title=f"spfcore bench {result['policy']} (suite v{result['suite_version']}"
                    f"{', quick' if result['quick'] else ''}; token hit rate, simulator, seed {SEED})")
    for col in ("case", "blocks", result["policy"], "lru", "vs lru", "best other shipped", "belady"):
        t.add_column(col, justify="left" if col in ("case", "best other shipped") else "right", no_wrap=True)
    sizes = {c["case"]: c.get("num_blocks") for c in result["cases"]}
    for r in result["summary"]:
        if "skipped" in r:
            t.add_row(r["case"], "-", f"[yellow]skipped[/yellow]: {r['skipped']}", "", "", "", "")
            continue
        mine = "[red]error[/red]" if r["error"] else _pct(r["policy"])
        vs = "-" if r["vs_lru_points"] is None else f"{r['vs_lru_points']:+.2f} pt"
        best = "-" if r["best_other"] is None else f"{r['best_other']} {_pct(r['best_other_hit'])}"
        t.add_row(r["case"], f"{sizes[r['case']]:,}", mine, _pct(r["lru"]), vs, best, _pct(r["belady"]))
    con = make_console()
    con.print(t)
    for r in result["summary"]:
        if r.get("error"):
            con.print(f"{r['case']}: {r['error']}", style="red", markup=False)


@click.command("bench")
@click.argument("name")
@click.option("--quick", is_flag=True, help="Small sizes of the same shapes (CI); not the suite's numbers.")
@click.option("--case", "only", multiple=True, metavar="CASE", help="Run only this case (repeatable).")
@click.option("--trace", type=click.Path(dir_okay=False), default=None,
              help=f"The Mooncake conversation trace [${TRACE_ENV}, else ../shared/traces/{TRACE_NAME}].")
@click.option("--policy-opt", multiple=True, metavar="KEY=VALUE", help="A parameter of the policy (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON here (atomically, once every case ran).")
def bench_command(name, quick, only, trace, policy_opt, as_json, output) -> None:
    """Run the standard simulator suite (seed workload, every generator
    shape, the Mooncake conversation trace at 1,828 and 9,140 blocks) for
    policy NAME beside lru, the best other shipped policy and Belady.

    Prints token hit rates per case, as a table or (--json) as JSON. The
    full suite takes minutes on 2 cores (the trace dominates); --quick
    about a minute. Exit status 4 if an arm failed (its cell says why).
    """
    hold_output_lock(output)
    try:
        info = registry.get(name)
        opts = registry.parse_options(f"{name}.{o}" for o in policy_opt)
        registry.make_params(info, opts.get(name))
    except registry.PolicyConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME/--policy-opt") from None
    cases = SUITE["quick" if quick else "full"]
    if only:
        unknown = set(only) - {c.name for c in cases}
        if unknown:
            raise click.BadParameter(f"unknown case(s) {sorted(unknown)} (suite: {', '.join(c.name for c in cases)})",
                                     param_hint="--case")
        cases = [c for c in cases if c.name in only]
    trace_path = Path(trace) if trace else find_trace()
    arms = list(dict.fromkeys([name, *SHIPPED, BELADY]))
    results = []
    for case in cases:
        try:
            results.append(run_case(case, arms, opts, trace_path))
        except TraceError as exc:
            raise click.BadParameter(str(exc), param_hint="--trace") from None
    result = {"kind": "spfcore-bench", "suite_version": SUITE_VERSION, "quick": quick, "policy": name,
              "distribution": info.distribution, "version": info.version, "contract": info.contract,
              "policy_options": opts.get(name, {}), "seed": SEED, "cases": results,
              "summary": summarize(name, results)}
    text = json.dumps(result, indent=2, default=str) + "\n"
    if output:
        try:
            write_atomic(output, text)
        except OSError as exc:
            raise click.ClickException(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    if as_json:
        click.echo(text, nl=False)
    else:
        _table(result)
    failed = sorted({a for c in results for a, cell in c.get("arms", {}).items() if cell.get("status") == "error"})
    if failed:
        click.echo(f"error: arm(s) failed: {', '.join(failed)}", err=True)
        raise SystemExit(4)
