"""Click options shared by every command that takes a workload and a cache
size (``spfcore simulate``, ``spfcore gate``).

Usage::

    @click.command()
    @workload_options
    @cache_options
    def cmd(workload_spec: WorkloadSpec, cache_spec: CacheSpec, ...):
        wl = workload_spec.build(seed)          # a Workload, every flag in wl.params
        num_blocks = cache_spec.num_blocks_for(wl)

Options added by :func:`workload_options`: ``--workload NAME`` (a generator of
:data:`spfcore.workloads.generators.GENERATORS`, default ``personas``),
``--set KEY=VALUE`` (repeatable generator flag), ``--trace PATH`` (Mooncake or
spfcore JSONL, auto-detected; replaces ``--workload``), ``--limit N`` and
``--tokens-per-block T`` (traces). By :func:`cache_options`: ``--block-size``,
``--num-blocks`` and ``--cache-pressure`` (mutually exclusive).
"""

from __future__ import annotations

import functools
import shlex

import attrs

import click

from spfcore.workloads import generators
from spfcore.workloads.model import Workload
from spfcore.workloads.pressure import num_blocks_for_pressure
from spfcore.workloads.traces import TraceError, TraceStream, read_trace


def _flag_help() -> str:
    parts = []
    for name, g in generators.GENERATORS.items():
        flags = ", ".join(f"{f.name}={f.default}" for f in (*g.flags, *generators.COMMON_FLAGS))
        parts.append(f"{name}: {flags}")
    return "Generator flag KEY=VALUE (repeatable). Flags and defaults - " + "; ".join(parts)


@attrs.frozen
class WorkloadSpec:
    """What the user asked for: a generator with flags, or a trace.

    Attributes:
        name: Generator name (ignored when ``trace`` is set).
        flags: Generator flags as given (strings), validated.
        trace: Trace path or None.
        limit: Keep the first N trace requests.
        tokens_per_block: Materialize Mooncake hash ids to token blocks.
    """

    name: str = "personas"
    flags: dict = attrs.field(factory=dict)
    trace: str | None = None
    limit: int | None = None
    tokens_per_block: int | None = None

    def build(self, seed: int) -> Workload:
        """The workload for ``seed`` (traces: ``seed`` only seeds the id ->
        token map of materialized Mooncake traces).

        Raises:
            click.BadParameter: bad flag or malformed trace (message names
                the flag, or the file, line and field).
        """
        try:
            if self.trace is not None:
                return read_trace(self.trace, limit=self.limit, tokens_per_block=self.tokens_per_block, seed=seed)
            return generators.make(self.name, seed=seed, **self.flags)
        except TraceError as exc:
            raise click.BadParameter(str(exc), param_hint="--trace") from None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--workload/--set") from None

    def stream(self, seed: int) -> TraceStream:
        """The trace as a lazily read, re-iterable request stream (``seed`` as
        in :meth:`build`); lines are checked when a pass reaches them.

        Raises:
            ValueError: no ``--trace`` in this spec.
            click.BadParameter: an empty trace or one of neither format.
        """
        if self.trace is None:
            raise ValueError("stream() needs a trace (--trace)")
        try:
            return TraceStream(self.trace, limit=self.limit, tokens_per_block=self.tokens_per_block, seed=seed)
        except TraceError as exc:
            raise click.BadParameter(str(exc), param_hint="--trace") from None

    def describe(self) -> dict:
        """Every setting, defaults included (for results JSON)."""
        if self.trace is not None:
            return {"trace": self.trace, "limit": self.limit, "tokens_per_block": self.tokens_per_block}
        return {"workload": self.name, **generators.defaults(self.name), **self.flags}


def parse_sets(name: str, items) -> dict:
    """``["k=v", ...]`` -> ``{k: v}`` checked against generator ``name``'s
    flags (values converted to the flag's type).

    Raises:
        click.BadParameter: malformed item, unknown flag or bad value.
    """
    try:
        spec = generators.GENERATORS[name].all_flags()
    except KeyError:
        raise click.BadParameter(f"unknown generator {name!r} (available: {', '.join(generators.GENERATORS)})",
                                 param_hint="--workload") from None
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--set")
        if key not in spec:
            raise click.BadParameter(f"{name}: unknown flag {key!r} (allowed: {', '.join(spec)})", param_hint="--set")
        try:
            out[key] = spec[key].convert(value.strip())
        except ValueError as exc:
            raise click.BadParameter(f"{name}: {exc}", param_hint="--set") from None
    return out


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
        spec = WorkloadSpec(wl_name, parse_sets(wl_name, wl_sets), wl_trace, wl_limit, wl_tpb)
        return fn(*args, workload_spec=spec, **kw)

    return wrapper


@attrs.frozen
class CacheSpec:
    """Cache size: explicit ``num_blocks`` or a cache pressure, and the block size.

    ``num_blocks`` is vLLM's ``num_gpu_blocks`` including the null block.
    """

    block_size: int
    num_blocks: int | None = None
    pressure: float | None = None

    def num_blocks_for(self, workload: Workload) -> int:
        """Blocks for ``workload`` (from the pressure if no explicit size).

        Raises:
            click.BadParameter: the workload has no reuse at this block size.
        """
        if self.num_blocks is not None:
            return self.num_blocks
        try:
            return num_blocks_for_pressure(workload, self.pressure, self.block_size)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--cache-pressure") from None

    def describe(self) -> dict:
        """The settings, for results JSON."""
        return attrs.asdict(self)


def cache_options(default_block_size: int = 16, default_pressure: float = 2.3):
    """Decorator factory: add ``--block-size``, ``--num-blocks``,
    ``--cache-pressure`` and pass one ``cache_spec: CacheSpec`` argument."""

    def deco(fn):
        @click.option("--block-size", type=click.IntRange(min=1), default=default_block_size, show_default=True,
                      help="Tokens per KV block (hash-id Mooncake traces: 512).")
        @click.option("--num-blocks", type=click.IntRange(min=2), default=None,
                      help="Cache size in blocks, vLLM num_gpu_blocks (null block included).")
        @click.option("--cache-pressure", type=click.FloatRange(min=0, min_open=True), default=None,
                      help=f"Size the cache so reusable prefix tokens / capacity = X (default {default_pressure}).")
        @functools.wraps(fn)
        def wrapper(*args, block_size, num_blocks, cache_pressure, **kw):
            if num_blocks is not None and cache_pressure is not None:
                raise click.BadParameter("give --num-blocks or --cache-pressure, not both",
                                         param_hint="--num-blocks/--cache-pressure")
            if num_blocks is None and cache_pressure is None:
                cache_pressure = default_pressure
            return fn(*args, cache_spec=CacheSpec(block_size, num_blocks, cache_pressure), **kw)

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
