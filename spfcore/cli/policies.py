"""``spfcore list-policies`` and ``spfcore describe``: the installed policies."""

from __future__ import annotations

import json
import re
import textwrap

import click
from rich.table import Table

from spfcore import registry
from spfcore.report import make_console

@click.command("list-policies")
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


@click.command()
@click.argument("name")
def describe(name: str) -> None:
    """Print one policy's parameters (type, default, meaning from its Params
    docstring's ``Attributes:`` section) and docstring."""
    try:
        info = registry.get(name)
    except registry.PolicyConfigError as exc:
        if name not in registry.by_name():  # a name not installed (or not allowed): a usage error, exit 2
            raise click.BadParameter(str(exc), param_hint="NAME") from None
        raise click.ClickException(str(exc)) from None  # installed but broken: exit 1
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
