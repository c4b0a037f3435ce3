"""Click options shared by the commands: the workload and cache options
(``spfcore simulate``, ``spfcore gate``), comma-separated lists and seeds,
and the recorded command line.

Usage::

    @click.command()
    @workload_options
    @cache_options()
    def cmd(workload_spec: WorkloadSpec, cache_spec: CacheSpec, ...):
        wl = workload_spec.build(seed)          # a Workload, every flag in wl.params
        num_blocks = cache_spec.num_blocks_for(wl)

Options added by :func:`workload_options`: ``--workload NAME`` (a generator of
:data:`spfcore.workloads.generators.GENERATORS`, default ``personas``),
``--set KEY=VALUE`` (repeatable generator flag), ``--trace PATH`` (Mooncake or
spfcore JSONL, auto-detected; replaces ``--workload``), ``--limit N`` and
``--tokens-per-block T`` (traces). By :func:`cache_options`: ``--block-size``,
``--num-blocks`` and ``--cache-pressure`` (mutually exclusive). A
:class:`~spfcore.workloads.options.WorkloadOptionError` raised in the command
is shown as click's usage error on its option.
"""

from __future__ import annotations

import functools
import math
import shlex

import click

from spfcore.workloads import generators
from spfcore.workloads import options as _spec
from spfcore.workloads.options import CacheSpec, WorkloadOptionError, WorkloadSpec

__all__ = ["CacheSpec", "Finite", "RecordingCommand", "WorkloadSpec", "cache_options", "command_line", "csv",
           "parse_sets", "seed_list", "workload_options"]


def _usage_errors(fn):
    """Run ``fn``, turning a :class:`WorkloadOptionError` into click's usage error on its option."""

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        try:
            return fn(*args, **kw)
        except WorkloadOptionError as exc:
            raise click.BadParameter(str(exc), param_hint=exc.param_hint) from None

    return wrapper


class Finite(click.FloatRange):
    """``click.FloatRange`` that also refuses NaN and infinities (``FloatRange``
    lets ``nan`` through: every comparison with it is false), so ``--x nan``
    is a usage error naming the option instead of a value that fails later,
    after the output is locked, or silently. ``Finite()`` alone: any finite float."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if self.min is None and self.max is None:
            self.name = "float"  # help: FLOAT, not FLOAT RANGE

    def _describe_range(self) -> str:
        return "finite" if self.min is None and self.max is None else super()._describe_range()

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            bounds = [f"{'>' if self.min_open else '>='} {self.min:g}" if self.min is not None else "",
                      f"{'<' if self.max_open else '<='} {self.max:g}" if self.max is not None else ""]
            self.fail(f"expected a finite number {' and '.join(b for b in bounds if b)}".rstrip()
                      + f", got {value!r}", param, ctx)
        return rv


#: :func:`spfcore.workloads.options.parse_sets`, raising click's usage error.
parse_sets = _usage_errors(_spec.parse_sets)


def csv(kind):
    """A click callback: ``"a,b"`` -> ``(kind("a"), kind("b"))`` (None stays None).

    Raises:
        click.BadParameter: a value ``kind`` rejects, a value given twice, a negative seed.
    """

    def conv(ctx, param, value):
        if value is None:
            return None
        items = [v.strip() for v in value.split(",") if v.strip()]
        try:
            out = tuple(kind(v) for v in items)
        except ValueError:
            raise click.BadParameter(f"expected comma-separated {kind.__name__}s, got {value!r}") from None
        if len(set(out)) != len(out):
            raise click.BadParameter(f"{value!r}: a value is given twice")
        if not out:
            raise click.BadParameter(f"{value!r}: give at least one value")
        return out

    return conv


def seed_list(ctx, param, value: str | None) -> list[int] | None:
    """A click callback for ``--seeds``: ``"42,43"`` -> ``[42, 43]`` (None stays None).

    Raises:
        click.BadParameter: not ints, none, a negative one, or one given twice (it
            would count twice in the means).
    """
    if value is None:
        return None
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated ints, e.g. 42,43,44") from None
    if not out or any(s < 0 for s in out):
        raise click.BadParameter(f"{value!r}: need at least one seed >= 0")
    if len(set(out)) != len(out):
        raise click.BadParameter(f"{value!r}: a seed given twice would count twice in the means")
    return out


def _flag_help() -> str:
    parts = []
    for name, g in generators.GENERATORS.items():
        flags = ", ".join(f"{f.name}={f.default}" for f in (*g.flags, *generators.COMMON_FLAGS))
        parts.append(f"{name}: {flags}")
    return "Generator flag KEY=VALUE (repeatable). Flags and defaults - " + "; ".join(parts)


def workload_options(fn):
    """Decorator: add the workload options to a click command and pass one
    ``workload_spec: WorkloadSpec`` argument instead of them."""

    @click.option("--workload", "wl_name", default="personas", show_default=True,
                  type=click.Choice(sorted(generators.GENERATORS)), help="Workload generator.")
    @click.option("--set", "wl_sets", multiple=True, metavar="KEY=VALUE", help=_flag_help())
    @click.option("--trace", "wl_trace", type=click.Path(exists=True, dir_okay=False), default=None,
                  help="Replay a trace (Mooncake FAST'25 or spfcore JSONL, auto-detected) instead of a generator.")
    @click.option("--limit", "wl_limit", type=click.IntRange(min=1), default=None, help="Trace: first N requests.")
    @click.option("--tokens-per-block", "wl_tpb", type=click.IntRange(min=1), default=None,
                  help="Mooncake: materialize each hash id to this many token ids (lengths scaled by T/512); "
                       "default keeps hash ids (block size 512).")
    @functools.wraps(fn)
    def wrapper(*args, wl_name, wl_sets, wl_trace, wl_limit, wl_tpb, **kw):
        if wl_trace is None and (wl_limit is not None or wl_tpb is not None):
            raise click.BadParameter("only with --trace", param_hint="--limit/--tokens-per-block")
        if wl_trace is not None and wl_sets:
            raise click.BadParameter("generator flags do not apply to --trace", param_hint="--set")
        if wl_trace is not None and click.get_current_context().get_parameter_source("wl_name") in (
                click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT):
            raise click.BadParameter("give a generator or a trace, not both", param_hint="--workload/--trace")
        spec = WorkloadSpec(wl_name, parse_sets(wl_name, wl_sets), wl_trace, wl_limit, wl_tpb)
        return _usage_errors(fn)(*args, workload_spec=spec, **kw)

    return wrapper


def cache_options(default_block_size: int = 16, default_pressure: float = 2.3):
    """Decorator factory: add ``--block-size``, ``--num-blocks``,
    ``--cache-pressure`` and pass one ``cache_spec: CacheSpec`` argument."""

    def deco(fn):
        @click.option("--block-size", type=click.IntRange(min=1), default=default_block_size, show_default=True,
                      help="Tokens per KV block (hash-id Mooncake traces: 512).")
        @click.option("--num-blocks", type=click.IntRange(min=2), default=None,
                      help="Cache size in blocks, vLLM num_gpu_blocks (null block included).")
        @click.option("--cache-pressure", type=Finite(min=0, min_open=True), default=None,
                      help=f"Size the cache so reusable prefix tokens / capacity = X (default {default_pressure}).")
        @functools.wraps(fn)
        def wrapper(*args, block_size, num_blocks, cache_pressure, **kw):
            if num_blocks is not None and cache_pressure is not None:
                raise click.BadParameter("give --num-blocks or --cache-pressure, not both",
                                         param_hint="--num-blocks/--cache-pressure")
            if num_blocks is None and cache_pressure is None:
                cache_pressure = default_pressure
            return _usage_errors(fn)(*args, cache_spec=CacheSpec(block_size, num_blocks, cache_pressure), **kw)

        return wrapper

    return deco


class RecordingCommand(click.Command):
    """A click command that keeps its raw arguments, so results can record
    the exact command line that reproduces them (see :func:`command_line`)."""

    def parse_args(self, ctx, args):
        ctx.meta["spfcore_raw_args"] = list(args)
        return super().parse_args(ctx, args)


def command_line(ctx: click.Context) -> str:
    """``spfcore <command> <args>`` as typed, shell-quoted."""
    return shlex.join(["spfcore", ctx.info_name or "", *ctx.meta.get("spfcore_raw_args", [])])
