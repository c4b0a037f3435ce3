"""``spfcore results-page``: a markdown page of results files."""

from __future__ import annotations

from pathlib import Path

import click

@click.command("results-page")
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
