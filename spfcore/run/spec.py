"""The run spec: what a gate run is (workload, cache, arms, seeds, mode,
engine, options, roles, thresholds, budget), checked once, and its input per seed."""

from __future__ import annotations

import math
from pathlib import Path

import attrs

from spfcore import presets
from spfcore.gate import GateThresholds, Roles
from spfcore.workloads.model import Workload

class GateConfigError(ValueError):
    """A gate configuration that cannot run (the message names the field)."""


def _tuple(x):
    return tuple(x)


@attrs.frozen
class GateConfig:
    """Everything that defines a gate run.

    Attributes:
        workload: Generator name (:data:`spfcore.workloads.generators.GENERATORS`);
            ignored when ``trace`` is given.
        workload_flags: Generator flags (defaults filled in by the generator).
        trace: Path of a Mooncake or spfcore JSONL trace, or None.
        limit: Trace requests to keep (the first ``limit``), or None for all.
        tokens_per_block: Tokens each Mooncake hash id becomes (the engine
            needs tokens), or None.
        arms: Policy names, each an installed ``spfcore.policies`` entry point.
        seeds: Deterministic seeds (ints >= 0).
        block_size: Tokens per KV block.
        cache_pressure: Reusable prefix tokens / cache capacity (used when
            ``num_blocks`` is None).
        num_blocks: Cache size in blocks (null block included), or None.
        mode: ``sequential`` (one request at a time) or ``timed`` (arrival times).
        engine: Engine spec fields other than block size and cache size
            (``model``, ``max_model_len``, ...), passed to the engine factory.
        policy_options: ``{arm: {key: value}}`` string options
            (:func:`spfcore.registry.parse_options`).
        roles, thresholds: Gate roles and thresholds.
        preset: Preset name, for labels.
        command: The command line that reproduces the run.
        simulate: Run the simulator (ceilings, per-arm results) too.
        settle: Judge on intervals (:func:`spfcore.gate.evaluate` ``settle``):
            SURVIVES / FAILS only when every deciding criterion's CI is on one
            side of its threshold, else ``INCONCLUSIVE``.
        max_passes: Most passes over the seeds (the first included): while
            the verdict is ``INCONCLUSIVE`` and the budget lasts, the engine
            runs every arm x seed again (interleaved, cells with ``repeat``).
        budget_s: Start no further pass after this many seconds from the
            call (None: no time budget; ``max_passes`` still applies).
        cpu_ratio: A slower KV tier (CPU memory) behind the GPU prefix cache
            of ``cpu_ratio`` x the GPU's usable blocks (:meth:`cpu_blocks_for`),
            in the engine (vLLM's KV offloading connector driven by spfcore,
            ``EngineSpec.cpu_blocks``) and in the simulator
            (:func:`spfcore.sim.tiered.simulate_tiered`); ``None``: no tier.
            Sequential mode only (the two-tier simulator replays one request
            at a time).
        tier_cost: Cost model of the tiered simulator's TTFT estimate
            (:func:`spfcore.sim.tiered.cost_model`); ``None``: by the engine's
            model (``h200-llama-3.2-3b`` for ``llama-3.2-3b``, else ``tiny-cpu``).
    """

    workload: str = "personas"
    workload_flags: dict = attrs.field(factory=dict)
    trace: str | None = None
    limit: int | None = None
    tokens_per_block: int | None = None
    arms: tuple = attrs.field(default=presets.DEFAULT_ARMS, converter=_tuple)
    seeds: tuple = attrs.field(default=presets.DEFAULT_SEEDS, converter=_tuple)
    block_size: int = 16
    cache_pressure: float | None = 2.3
    num_blocks: int | None = None
    mode: str = "sequential"
    engine: dict = attrs.field(factory=dict)
    policy_options: dict = attrs.field(factory=dict)
    roles: Roles = presets.SEED_ROLES
    thresholds: GateThresholds = GateThresholds()
    preset: str | None = None
    command: str | None = None
    simulate: bool = True
    settle: bool = False
    max_passes: int = attrs.field(default=1, converter=int)
    budget_s: float | None = None
    cpu_ratio: float | None = None
    tier_cost: str | None = None

    def __attrs_post_init__(self):
        if not self.arms:
            raise GateConfigError("field 'arms': at least one arm is required")
        if len(set(self.arms)) != len(self.arms):
            raise GateConfigError(f"field 'arms': duplicate arm in {list(self.arms)}")
        if not self.seeds or any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise GateConfigError(f"field 'seeds': need ints >= 0, got {list(self.seeds)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise GateConfigError(f"field 'seeds': duplicate seed in {list(self.seeds)}")
        if self.block_size < 1:
            raise GateConfigError(f"field 'block_size': must be >= 1, got {self.block_size}")
        if self.num_blocks is None and (self.cache_pressure is None or not self.cache_pressure > 0):
            raise GateConfigError("field 'cache_pressure': must be > 0 when num_blocks is not given")
        if self.num_blocks is not None and self.num_blocks < 2:
            raise GateConfigError(f"field 'num_blocks': must be >= 2, got {self.num_blocks}")
        if self.max_passes < 1:
            raise GateConfigError(f"field 'max_passes' (--budget): must be >= 1, got {self.max_passes}")
        if self.budget_s is not None and not self.budget_s > 0:
            raise GateConfigError(f"field 'budget_s' (--budget): must be > 0 seconds, got {self.budget_s}")
        if self.mode not in ("sequential", "timed"):
            raise GateConfigError(f"field 'mode': must be 'sequential' or 'timed', got {self.mode!r}")
        if self.cpu_ratio is not None:
            if not (isinstance(self.cpu_ratio, (int, float)) and math.isfinite(self.cpu_ratio)
                    and self.cpu_ratio > 0):
                raise GateConfigError(f"field 'cpu_ratio' (--cpu-ratio): must be a finite number > 0, "
                                      f"got {self.cpu_ratio!r}")
            if self.mode != "sequential":
                raise GateConfigError("field 'cpu_ratio' (--cpu-ratio): a CPU tier needs mode 'sequential' "
                                      f"(the two-tier simulator replays one request at a time), got {self.mode!r}")
            from spfcore.sim.tiered import COST_MODELS

            if self.tier_cost is not None and self.tier_cost not in COST_MODELS:
                raise GateConfigError(f"field 'tier_cost': unknown cost model {self.tier_cost!r}; "
                                      f"known: {', '.join(COST_MODELS)}")
        unknown = set(self.policy_options) - set(self.arms)
        if unknown:
            raise GateConfigError(f"field 'policy_options': options for arm(s) not in the run: {sorted(unknown)}")

    def cpu_blocks_for(self, num_blocks: int) -> int | None:
        """The CPU tier's size, blocks: ``round(cpu_ratio x (num_blocks - 1))``
        (the GPU's usable blocks: the null block excluded); ``None`` without a tier."""
        return None if self.cpu_ratio is None else int(round(self.cpu_ratio * (num_blocks - 1)))

    def tier_cost_name(self) -> str:
        """The tiered simulator's cost model name (``tier_cost``, or by the engine's model)."""
        if self.tier_cost is not None:
            return self.tier_cost
        return "h200-llama-3.2-3b" if dict(self.engine).get("model") == "llama-3.2-3b" else "tiny-cpu"

    def to_json(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["arms"], d["seeds"] = list(self.arms), list(self.seeds)
        d["roles"], d["thresholds"] = self.roles.to_json(), self.thresholds.to_json()
        return d




def load_workload(config: GateConfig, seed: int) -> Workload:
    """The run's input for ``seed``: the generator's workload or the trace.

    Raises:
        ValueError: bad generator flag; ``spfcore.workloads.traces.TraceError``
            for a malformed trace.
    """
    if config.trace:
        from spfcore.workloads.traces import read_trace

        return read_trace(config.trace, limit=config.limit, tokens_per_block=config.tokens_per_block, seed=seed)
    from spfcore.workloads.generators import make

    return make(config.workload, seed=seed, **config.workload_flags)


def workload_label(config: GateConfig, workload: Workload, num_blocks: int) -> str:
    """One line naming the input and cache, e.g. ``personas 16x8192 ...``."""
    p = workload.params
    if config.trace:
        src = f"{Path(config.trace).name} (first {config.limit or 'all'} requests"
        src += f", {config.tokens_per_block} tokens per hash id)" if config.tokens_per_block else ")"
    elif "personas" in p and "prefix_tokens" in p:
        src = (f"{workload.name}: {p['personas']} personas x {p['prefix_tokens']} tokens, "
               f"{p.get('sessions')} sessions x {p.get('turns')} turns, {p.get('query_tokens')}-token queries, "
               f"{p.get('output_tokens')} output tokens, {p.get('order', '')}".rstrip(", "))
    else:
        src = f"{workload.name}: " + ", ".join(f"{k}={v}" for k, v in p.items() if k not in ("generator", "seed"))
    size = f"{num_blocks} blocks of {config.block_size} tokens"
    if config.num_blocks is None:
        size += f" (pressure {config.cache_pressure:g})"
    return f"{src}; {size}; {config.mode}"
