"""What a command asks for as input and cache, without any command-line
code: a workload (a generator with flags, or a trace) and a cache size.
Bad values raise :class:`WorkloadOptionError` (a ``ValueError`` naming the
option); the click options that build these are :mod:`spfcore.cli.options`.
"""

from __future__ import annotations

import attrs

from spfcore.workloads import generators
from spfcore.workloads.model import Workload
from spfcore.workloads.pressure import num_blocks_for_pressure
from spfcore.workloads.traces import TraceError, TraceStream, read_trace


class WorkloadOptionError(ValueError):
    """A bad workload or cache setting; ``param_hint`` names the option (e.g.
    ``--set``), the message the flag, or the file, line and field."""

    def __init__(self, message: str, param_hint: str):
        super().__init__(message)
        self.param_hint = param_hint


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
            WorkloadOptionError: bad flag or malformed trace (message names
                the flag, or the file, line and field).
        """
        try:
            if self.trace is not None:
                return read_trace(self.trace, limit=self.limit, tokens_per_block=self.tokens_per_block, seed=seed)
            return generators.make(self.name, seed=seed, **self.flags)
        except TraceError as exc:
            raise WorkloadOptionError(str(exc), "--trace") from None
        except ValueError as exc:
            raise WorkloadOptionError(str(exc), "--workload/--set") from None

    def stream(self, seed: int) -> TraceStream:
        """The trace as a lazily read, re-iterable request stream (``seed`` as
        in :meth:`build`); lines are checked when a pass reaches them.

        Raises:
            ValueError: no ``--trace`` in this spec.
            WorkloadOptionError: an empty trace or one of neither format.
        """
        if self.trace is None:
            raise ValueError("stream() needs a trace (--trace)")
        try:
            return TraceStream(self.trace, limit=self.limit, tokens_per_block=self.tokens_per_block, seed=seed)
        except TraceError as exc:
            raise WorkloadOptionError(str(exc), "--trace") from None

    def describe(self) -> dict:
        """Every setting, defaults included (for results JSON)."""
        if self.trace is not None:
            return {"trace": self.trace, "limit": self.limit, "tokens_per_block": self.tokens_per_block}
        return {"workload": self.name, **generators.defaults(self.name), **self.flags}


def parse_sets(name: str, items) -> dict:
    """``["k=v", ...]`` -> ``{k: v}`` checked against generator ``name``'s
    flags (values converted to the flag's type).

    Raises:
        WorkloadOptionError: malformed item, unknown flag or bad value.
    """
    try:
        spec = generators.GENERATORS[name].all_flags()
    except KeyError:
        raise WorkloadOptionError(f"unknown generator {name!r} (available: {', '.join(generators.GENERATORS)})",
                                 "--workload") from None
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise WorkloadOptionError(f"{item!r}: expected KEY=VALUE", "--set")
        if key not in spec:
            raise WorkloadOptionError(f"{name}: unknown flag {key!r} (allowed: {', '.join(spec)})", "--set")
        try:
            out[key] = spec[key].convert(value.strip())
        except ValueError as exc:
            raise WorkloadOptionError(f"{name}: {exc}", "--set") from None
    return out


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
            WorkloadOptionError: the workload has no reuse at this block size.
        """
        if self.num_blocks is not None:
            return self.num_blocks
        try:
            return num_blocks_for_pressure(workload, self.pressure, self.block_size)
        except ValueError as exc:
            raise WorkloadOptionError(str(exc), "--cache-pressure") from None

    def describe(self) -> dict:
        """The settings, for results JSON."""
        return attrs.asdict(self)
