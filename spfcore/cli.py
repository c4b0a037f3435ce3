"""The ``spfcore`` command line."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import attrs
import click
from rich.table import Table

from spfcore import registry
from spfcore.report import make_console
from spfcore.workloads import synth


@click.group()
@click.version_option(package_name="spfcore")
def main() -> None:
    """spfcore: prefix-cache eviction policies as plugins, judged in a simulator
    and in a real vLLM engine."""


@main.command("list-policies")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def list_policies(as_json: bool) -> None:
    """Show the installed policies (entry-point group spfcore.policies).

    --json gives per policy: name, distribution, version, contract (the
    contract version it declares; null: undeclared), summary, homepage,
    entry_point, status, hooks, capabilities, parameters, doc."""
    infos = registry.discover()
    if as_json:
        click.echo(json.dumps([p.to_json() for p in infos], indent=2, default=str))
        return
    t = Table(title="spfcore policies")
    for col in ("name", "distribution", "version", "contract", "capabilities", "status"):
        t.add_column(col)
    for p in infos:
        t.add_row(p.name, p.distribution, p.version, p.contract or "-", ", ".join(p.capabilities) or "-",
                  p.status if p.status == "ok" else f"[red]{p.status}[/red]")
    make_console().print(t)


def _plain_rst(text: str) -> str:
    """Docstring markup for a terminal: ``x`` -> x, :mod:`~a.b` -> a.b."""
    return re.sub(r"``([^`]+)``", r"\1", re.sub(r":\w+:`~?([^`]+)`", r"\1", text))


@main.command()
@click.argument("name")
def describe(name: str) -> None:
    """Print one policy's parameters (type, default, meaning from its Params
    docstring's ``Attributes:`` section) and docstring."""
    try:
        info = registry.get(name)
    except registry.PolicyConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{info.name}  ({info.distribution} {info.version}, {info.entry_point})")
    click.echo(f"capabilities: {', '.join(info.capabilities) or '-'}")
    click.echo(f"hooks: {', '.join(info.hooks) or '- (vLLM order)'}")
    click.echo("parameters:")
    if not info.parameters:
        click.echo("  (none)")
    for p in info.parameters:
        click.echo(f"  {p['name']}: {p['type']} = {p['default']!r}")
        if p.get("doc"):
            click.echo(textwrap.fill(_plain_rst(p["doc"]), width=88, initial_indent=" " * 6, subsequent_indent=" " * 6))
    click.echo("")
    click.echo(_plain_rst(info.doc))


@main.command("results-page")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--title", default="spfcore results", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write here (atomically).")
@click.option("--include", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A text file (benchmark output, commands run) to append verbatim (repeatable).")
def results_page(files, title, output, include) -> None:
    """Render a markdown page from `spfcore simulate --json` outputs and gate
    results files (e.g. docs/results.md); plots beside gate results are linked."""
    from spfcore import report

    try:
        text = report.results_page(files, title=title, include=include,
                                   page_dir=Path(output).parent if output else Path.cwd())
    except report.ResultsError as exc:
        raise click.ClickException(str(exc)) from None
    if output:
        try:
            report.write_atomic(output, text)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise click.ClickException(f"--output {output}: cannot write: {exc.strerror or exc}{where}") from None
    else:
        click.echo(text, nl=False)


#: make-trace's defaults: the trace shape's own (spfcore.workloads.synth.TraceShape), never restated.
_SHAPE = {f.name: f.default for f in attrs.fields(synth.TraceShape)}


@main.command("make-trace")
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--requests", "-n", type=click.IntRange(min=0), required=True, help="Requests to write.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed (same seed and shape: same bytes).")
@click.option("--sessions", type=click.IntRange(min=1), default=_SHAPE["sessions"], show_default=True,
              help="Conversations open at once.")
@click.option("--mean-turns", type=click.FloatRange(min=1), default=_SHAPE["mean_turns"], show_default=True,
              help="Mean turns per conversation.")
@click.option("--system-prompts", type=click.IntRange(min=1), default=_SHAPE["system_prompts"], show_default=True,
              help="Distinct system prompts (Zipf popularity).")
@click.option("--zipf-alpha", type=click.FloatRange(min=0), default=_SHAPE["zipf_alpha"], show_default=True,
              help="Zipf exponent of system-prompt popularity.")
@click.option("--output-tokens", type=click.FloatRange(min=1), default=_SHAPE["output_tokens"], show_default=True,
              help="Median answer length, tokens.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=_SHAPE["rate"], show_default=True,
              help="Mean arrivals per second (Poisson).")
def make_trace(output, requests, seed, sessions, mean_turns, system_prompts, zipf_alpha, output_tokens,
               rate) -> None:
    """Write a synthetic Mooncake-format JSONL trace shaped like the
    conversation trace (sessions with growing shared prefixes, Zipf-popular
    system prompts, Poisson timestamps) to OUTPUT, streamed and atomically:
    memory does not grow with --requests (10M requests are fine)."""
    try:
        shape = synth.TraceShape(sessions=sessions, mean_turns=mean_turns, system_prompts=system_prompts,
                                 zipf_alpha=zipf_alpha, output_tokens=output_tokens, rate=rate)
        synth.write_synthetic(output, requests, seed, shape)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise click.ClickException(f"{output}: cannot write: {exc.strerror or exc}{where}") from None
    click.echo(f"wrote {requests:,} requests to {output}", err=True)


# Commands of other areas register here (one line each).
from spfcore.bench import bench_command  # noqa: E402
from spfcore.gate_cli import gate_command  # noqa: E402
from spfcore.new_policy import new_policy_command  # noqa: E402
from spfcore.serve import serve  # noqa: E402
from spfcore.sim.cli import simulate  # noqa: E402
from spfcore.sim.tiered_cli import simulate_tiered_command  # noqa: E402
from spfcore.sweep_cli import sweep_command, sweep_report_command  # noqa: E402

main.add_command(gate_command)
main.add_command(simulate)
main.add_command(simulate_tiered_command)
main.add_command(bench_command)
main.add_command(new_policy_command)
main.add_command(serve)
main.add_command(sweep_command)
main.add_command(sweep_report_command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
