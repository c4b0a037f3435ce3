"""``spfcore make-trace``: a synthetic Mooncake-format trace."""

from __future__ import annotations

import attrs
import click

from spfcore.cli.options import Finite
from spfcore.workloads import synth

_SHAPE = {f.name: f.default for f in attrs.fields(synth.TraceShape)}


@click.command("make-trace")
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--requests", "-n", type=click.IntRange(min=1), required=True, help="Requests to write.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed (same seed and shape: same bytes).")
@click.option("--sessions", type=click.IntRange(min=1), default=_SHAPE["sessions"], show_default=True,
              help="Conversations open at once.")
@click.option("--mean-turns", type=Finite(min=1), default=_SHAPE["mean_turns"], show_default=True,
              help="Mean turns per conversation.")
@click.option("--system-prompts", type=click.IntRange(min=1), default=_SHAPE["system_prompts"], show_default=True,
              help="Distinct system prompts (Zipf popularity).")
@click.option("--zipf-alpha", type=Finite(min=0), default=_SHAPE["zipf_alpha"], show_default=True,
              help="Zipf exponent of system-prompt popularity.")
@click.option("--output-tokens", type=Finite(min=1), default=_SHAPE["output_tokens"], show_default=True,
              help="Median answer length, tokens.")
@click.option("--rate", type=Finite(min=0, min_open=True), default=_SHAPE["rate"], show_default=True,
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
