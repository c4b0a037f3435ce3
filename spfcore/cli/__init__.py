"""The ``spfcore`` command line: one module per command, shared options in
:mod:`spfcore.cli.options`. A command registers with one line in
:data:`COMMANDS` (``name: "module:attribute"``) and its module is imported
only when that command runs (``spfcore --help`` lists them all), following
click's lazily loaded subcommands (click docs, "Lazily Loading Subcommands").
"""

from __future__ import annotations

import importlib
import sys

import click

#: Every command, one line each: name -> "module:attribute" of its click command.
COMMANDS = {
    "list-policies": "spfcore.cli.policies:list_policies",
    "describe": "spfcore.cli.policies:describe",
    "results-page": "spfcore.cli.results_page:results_page",
    "make-trace": "spfcore.cli.make_trace:make_trace",
    "gate": "spfcore.cli.gate:gate_command",
    "simulate": "spfcore.sim.cli:simulate",
    "simulate-tiered": "spfcore.sim.tiered_cli:simulate_tiered_command",
    "bench": "spfcore.bench:bench_command",
    "new-policy": "spfcore.new_policy:new_policy_command",
    "serve": "spfcore.serve:serve",
    "sweep": "spfcore.sweep_cli:sweep_command",
    "sweep-report": "spfcore.sweep_cli:sweep_report_command",
}


class LazyGroup(click.Group):
    """A click group whose commands (:data:`COMMANDS`) are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands or name not in COMMANDS:
            return super().get_command(ctx, name)
        module, attr = COMMANDS[name].split(":")
        cmd = getattr(importlib.import_module(module), attr)
        if cmd.name != name:
            raise RuntimeError(f"COMMANDS[{name!r}] = {COMMANDS[name]!r} is the command {cmd.name!r}")
        self.add_command(cmd)
        return cmd


#: Commands that replay in the simulator: a bad ``SPFCORE_SIM_REPLAY`` is a usage error before they start.
REPLAYING = frozenset({"simulate", "sweep", "bench", "gate"})


@click.group(cls=LazyGroup)
@click.version_option(package_name="spfcore")
@click.pass_context
def main(ctx: click.Context) -> None:
    """spfcore: prefix-cache eviction policies as plugins, judged in a simulator
    and in a real vLLM engine."""
    if ctx.invoked_subcommand in REPLAYING:
        from spfcore.sim.simulator import replay_mode

        try:
            replay_mode()
        except ValueError as exc:
            raise click.UsageError(f"environment: {exc}", ctx) from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
