"""A cell: one arm x seed (x pass) of a run, as the simulator and the engine
record it, and what every part of the pipeline reads from one.

A cell record is a dict of the fields the drivers write, defined once here
as attrs classes: :class:`CellRecord` (both drivers: ``num_requests``,
``token_hit_rate``, ``prefill_tokens_recomputed`` (tokens), the runtime's
counters, ...), :class:`SimRecord` (``spfcore.sim.simulate``),
:class:`EngineRecord` / :class:`EngineTierRecord`
(``spfcore.engine.runner.EngineSession.run``) and :class:`TieredRecord`
(``spfcore.sim.tiered.simulate_tiered``). Each driver builds its class (a
missing, unknown or ill-typed field fails there, named) and returns it
unstructured (:data:`record_converter`); readers read the dict. The run
pipeline adds ``status`` (``"ok"`` or ``"error"``) to an engine record and,
for a further pass, ``repeat``; the summary's field lists
(:data:`MEAN_FIELDS`, :data:`TIER_FIELDS`) come from the classes. A failed
cell is :func:`error_cell`; its ``error`` is a :class:`CellError`. :class:`StoredCell` is how the store
(:mod:`spfcore.run.store`) keeps one, typed and versioned; it is read and
written by one cattrs converter (:data:`converter`), the JSON line unchanged
since version 1: ``{"kind", "arm", "seed", "cell", "repeat" (only when > 0)}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral, Real

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from spfcore.runtime import PolicyError

#: Version of the stored cell line (:class:`StoredCell`); a store of another version is refused.
CELL_SCHEMA_VERSION = 1
#: Kinds of cells: a simulator arm, the simulator's ceilings of a seed, an engine arm.
KINDS = ("sim", "ceilings", "engine")


class CellFormatError(ValueError):
    """A stored cell line that cannot be read: the message names the field."""


_opt_str = attrs.validators.optional(attrs.validators.instance_of(str))


@attrs.frozen
class CellError:
    """Why a cell failed (a cell record's ``error``).

    Attributes:
        policy: The policy at fault (the arm when no hook named one), or None.
        hook: The hook that failed, or None (a fault outside any hook: not
            installed, engine start, a cache too small, ...).
        message: One line.
    """

    policy: str | None = attrs.field(validator=_opt_str)
    hook: str | None = attrs.field(validator=_opt_str)
    message: str = attrs.field(validator=attrs.validators.instance_of(str))

    @classmethod
    def of(cls, raw) -> CellError | None:
        """A record's ``error`` typed: ``None`` (no error), a mapping
        ``{"policy", "hook", "message"}``, or the plain string that files
        written before the mapping hold (policy and hook then None).

        Raises:
            CellFormatError: anything else (names the field).
        """
        if raw is None or raw == "":
            return None
        if isinstance(raw, str):
            return cls(None, None, raw)
        if not isinstance(raw, Mapping):
            raise CellFormatError(f"field 'cell.error': expected {{policy, hook, message}}, got {raw!r:.80}")
        try:
            return converter.structure(raw, cls)
        except (KeyError, TypeError, ValueError) as exc:
            raise CellFormatError(f"field 'cell.error': {_why(exc)}") from None

    def text(self) -> str:
        """One line: the message, then ``[hook NAME]`` unless the message names it."""
        where = f" [hook {self.hook}]" if self.hook and self.hook not in self.message else ""
        return f"{self.message}{where}"


def _why(exc: BaseException) -> str:
    """An attrs validator's or cattrs' error as one line (attrs puts the text in ``args[0]``)."""
    if isinstance(exc, KeyError):
        return f"field {exc.args[0]!r} missing"
    msg = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    return msg.splitlines()[0]


@attrs.frozen
class StoredCell:
    """One finished (or failed) cell as the store keeps it.

    Attributes:
        kind: One of :data:`KINDS`.
        arm: Policy name (``"*"`` for ceilings).
        seed: Workload seed (int >= 0).
        record: The cell record (see the module doc).
        repeat: Pass over the seeds (0: the first).
    """

    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    arm: str = attrs.field(validator=attrs.validators.instance_of(str))
    seed: int = attrs.field(validator=attrs.validators.instance_of(int))
    record: dict = attrs.field(validator=attrs.validators.instance_of(dict))
    repeat: int = attrs.field(default=0, validator=[attrs.validators.instance_of(int), attrs.validators.ge(0)])

    @property
    def key(self) -> tuple:
        """``(kind, arm, seed)``, plus ``repeat`` for a further pass."""
        return (self.kind, self.arm, self.seed) + ((self.repeat,) if self.repeat else ())

    @property
    def error(self) -> CellError | None:
        """The record's ``error``, typed (:meth:`CellError.of`); None for a finished cell."""
        return CellError.of(self.record.get("error"))

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_json(self) -> dict:
        """The stored line (:data:`converter`): ``{"kind", "arm", "seed", "cell", "repeat"}``, ``repeat`` only when > 0."""
        return converter.unstructure(self)

    @classmethod
    def from_json(cls, d: Mapping) -> StoredCell:
        """Read a stored line (:data:`converter`; ``repeat`` absent or null: 0).

        Raises:
            CellFormatError: a missing or ill-typed field, the cell's ``error`` included (named).
        """
        if not isinstance(d, Mapping):
            raise CellFormatError(f"expected a JSON object, got {type(d).__name__}")
        if d.get("repeat", 0) is None:
            d = {k: v for k, v in d.items() if k != "repeat"}
        try:
            c = converter.structure(d, cls)
        except (KeyError, TypeError, ValueError) as exc:
            raise CellFormatError(_why(exc)) from None
        c.error  # noqa: B018 - a malformed error fails here, naming the field, not later in a report
        return c


#: The converter of stored cells: fields checked by the classes' attrs
#: validators (no coercion: ``"3"`` is not a seed), the record stored as ``cell``,
#: ``repeat`` left out when 0.
converter = cattrs.Converter(detailed_validation=False)
for _t in (int, str, dict):
    converter.register_structure_hook(_t, lambda v, _: v)
converter.register_structure_hook(StoredCell, make_dict_structure_fn(StoredCell, converter,
                                                                     record=override(rename="cell")))
converter.register_unstructure_hook(StoredCell, make_dict_unstructure_fn(
    StoredCell, converter, record=override(rename="cell"), repeat=override(omit_if_default=True)))


def error_of(exc: BaseException, arm: str | None = None) -> dict:
    """A failed cell's ``error``: ``{"policy", "hook", "message"}``.

    The first :class:`~spfcore.runtime.PolicyError` in ``exc``'s chain
    (``__cause__``/``__context__``, e.g. one the engine wrapped) gives the
    policy and the hook; otherwise ``policy`` is ``arm`` and ``hook`` None
    (a fault outside any hook: not installed, engine start, ...). ``message``
    is one line.
    """
    e: BaseException | None = exc
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, PolicyError):
            return converter.unstructure(CellError(e.policy or arm, e.hook, str(e).splitlines()[0]))
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    msg = str(exc).splitlines()[0] if str(exc) else ""
    return converter.unstructure(CellError(arm, None, f"{type(exc).__name__}: {msg}".rstrip(": ")))


def error_cell(arm: str, seed, exc: BaseException) -> dict:
    """The cell of an arm x seed that failed with ``exc``: ``{"arm", "seed",
    "status": "error", "error": error_of(exc, arm)}``."""
    return {"arm": arm, "seed": seed, "status": "error", "error": error_of(exc, arm)}


def error_text(err) -> str:
    """One line for a cell's ``error`` (a dict of :func:`error_of`, or the
    plain string of files written before it)."""
    if isinstance(err, CellError):
        return err.text()
    if isinstance(err, Mapping):
        where = f" [hook {err['hook']}]" if err.get("hook") and err["hook"] not in err.get("message", "") else ""
        return f"{err.get('message', '')}{where}"
    return str(err)



# ------------------------------------------------------------------ the record a driver builds

def _fail(a, v, want: str):
    raise CellFormatError(f"cell record field {a.name!r}: expected {want}, got {v!r:.80}")


def _count(inst, a, v) -> None:
    """A count (int >= 0; numpy integers too)."""
    if isinstance(v, bool) or not isinstance(v, Integral) or v < 0:
        _fail(a, v, "a count (int >= 0)")


def _opt_count(inst, a, v) -> None:
    if v is not None:
        _count(inst, a, v)


def _rate(inst, a, v) -> None:
    """A share in [0, 1]."""
    if isinstance(v, bool) or not isinstance(v, Real) or not 0.0 <= v <= 1.0:
        _fail(a, v, "a rate in [0, 1]")


def _nonneg(inst, a, v) -> None:
    """Seconds or another non-negative quantity, or NaN where a driver has no
    sample (e.g. no request finished)."""
    if isinstance(v, bool) or not isinstance(v, Real) or v < 0:
        _fail(a, v, "a number >= 0 (or NaN)")


def _opt_nonneg(inst, a, v) -> None:
    if v is not None:
        _nonneg(inst, a, v)


def _of(t, want: str):
    def check(inst, a, v) -> None:
        if not isinstance(v, t):
            _fail(a, v, want)
    return check


def _opt_of(t, want: str):
    return _of((t, type(None)), f"{want} or null")


_str = _of(str, "a string")
#: Field metadata: averaged over seeds in a run's summary (:func:`spfcore.report.results.summarize`).
_MEAN = {"mean": True}
#: Field metadata: a field of a run with a CPU tier (see :data:`TIER_FIELDS`).
_TIER = {"tier": True}


@attrs.frozen(kw_only=True)
class CellRecord:
    """The measurement record of one cell, the fields both drivers write
    (:class:`SimRecord` for :func:`spfcore.sim.simulator.simulate`,
    :class:`EngineRecord` for :meth:`spfcore.engine.runner.EngineSession.run`).

    A driver builds its record as one of these classes and returns
    ``converter.unstructure(record)``, the plain dict readers (gate, reports,
    store) use; a missing, unknown or ill-typed field fails there, naming it
    (``TypeError`` from attrs for a missing or unknown field,
    :class:`CellFormatError` for a bad value).

    Attributes:
        arm: Policy name (``"vllm"`` for stock vLLM).
        seed: Workload seed.
        mode: ``sequential``, ``concurrent`` (simulator), ``timed`` (engine).
        num_blocks: Cache size, blocks (vLLM ``num_gpu_blocks``, null block included).
        block_size: Tokens per block.
        num_requests: Requests replayed.
        prompt_tokens: Prompt tokens, all requests.
        cached_tokens: Prompt tokens served from the prefix cache.
        token_hit_rate: ``cached_tokens / prompt_tokens`` (0 with no prompt).
        prefill_tokens_recomputed: ``prompt_tokens - cached_tokens``.
        hook_seconds, hook_calls, policy_seconds, evictions, evict_seconds,
        evict_calls, hints_issued, hints_used, pins_refused: The runtime's
            counters (:meth:`spfcore.runtime.PolicyRuntime.stats`; seconds and
            counts); stock vLLM has no runtime: ``evictions`` None, the rest 0.
            In the engine an arm served by vLLM's own queue (``lru``:
            :meth:`~spfcore.engine.vllm_adapter.PolicyFreeQueue.serve_vllm_order`)
            keeps ``evictions`` and ``evict_calls`` only; its runtime's
            seconds are 0 and its spfcore time is ``adapter_seconds``.
    """

    arm: str = attrs.field(validator=_str)
    seed: int = attrs.field(validator=_count)
    mode: str = attrs.field(validator=_str)
    num_blocks: int = attrs.field(validator=_count)
    block_size: int = attrs.field(validator=_count)
    num_requests: int = attrs.field(validator=_count, metadata=_MEAN)
    prompt_tokens: int = attrs.field(validator=_count, metadata=_MEAN)
    cached_tokens: int = attrs.field(validator=_count, metadata=_MEAN)
    token_hit_rate: float = attrs.field(validator=_rate, metadata=_MEAN)
    prefill_tokens_recomputed: int = attrs.field(validator=_count, metadata=_MEAN)
    hook_seconds: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    hook_calls: int = attrs.field(validator=_count, metadata=_MEAN)
    policy_seconds: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    evictions: int | None = attrs.field(validator=_opt_count, metadata=_MEAN)
    evict_seconds: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    evict_calls: int = attrs.field(validator=_count, metadata=_MEAN)
    hints_issued: int = attrs.field(validator=_count, metadata=_MEAN)
    hints_used: int = attrs.field(validator=_count, metadata=_MEAN)
    pins_refused: int = attrs.field(validator=_count)

    def to_json(self) -> dict:
        """The record as the drivers return it (:data:`record_converter`): a
        plain dict, optional fields left out when absent (None)."""
        return record_converter.unstructure(self)


@attrs.frozen(kw_only=True)
class SimRecord(CellRecord):
    """The simulator's record (:func:`spfcore.sim.simulator.simulate`,
    :func:`~spfcore.sim.simulator.simulate_stream`).

    Attributes:
        status: ``"ok"`` (a failed arm is :func:`error_cell`).
        block_refs: Prompt block references; ``hit_blocks`` of them hit.
        block_hit_rate: ``hit_blocks / block_refs`` (0 with none).
        wall_seconds: The replay's wall time, seconds.
        requests: Per-request rows, or None (left out).
        max_running, token_budget, step_overhead_s, per_token_s: Concurrent
            mode's scheduler limits and step costs (seconds); None (left out)
            in sequential mode, but ``token_budget`` when the replay chunked
            prefills by it (tokens per prefill step).
    """

    status: str = attrs.field(default="ok", validator=_str)
    block_refs: int = attrs.field(validator=_count)
    hit_blocks: int = attrs.field(validator=_count)
    block_hit_rate: float = attrs.field(validator=_rate)
    wall_seconds: float = attrs.field(validator=_nonneg)
    requests: list | None = attrs.field(default=None, validator=_opt_of(list, "a list of request rows"))
    max_running: int | None = attrs.field(default=None, validator=_opt_count)
    token_budget: int | None = attrs.field(default=None, validator=_opt_count)
    step_overhead_s: float | None = attrs.field(default=None, validator=_opt_nonneg)
    per_token_s: float | None = attrs.field(default=None, validator=_opt_nonneg)


@attrs.frozen(kw_only=True)
class EngineRecord(CellRecord):
    """The engine's record (:meth:`spfcore.engine.runner.EngineSession.run`;
    the run pipeline adds ``status``). Times in seconds; a percentile with no
    sample is NaN.

    Attributes:
        workload: The workload's name.
        max_num_seqs, max_num_batched_tokens: vLLM's scheduler limits.
        policy_faults: 1 when the adapter failed open after a policy fault, else 0;
        policy_fault: that fault (``{"policy", "hook", "error", "where"}``) or None.
        fail_open_allocations, fail_open_blocks: Allocations (blocks) served in vLLM's order after it.
        queue_p50_s, queue_p95_s: Queueing delay (scheduled - queued).
        preemptions: Preemptions, all requests.
        adapter_seconds: The adapter's own work, seconds (:attr:`spfcore.engine.vllm_adapter.PolicyFreeQueue.adapter_seconds`),
            already included in ``policy_seconds``, which is all of spfcore's time in the engine: the runtime's
            events plus this; 0 for stock vLLM. None (left out) in records written before it was measured.
        served_by: What decided the eviction order: ``"hooks"`` (the policy's hooks through a
            :class:`~spfcore.runtime.PolicyRuntime`), ``"compiled"`` (a compiled runtime standing in for the
            shipped policy, same decisions: :mod:`spfcore.engine.compiled`), ``"vllm-queue"`` (vLLM's own free
            queue: an arm whose order is vLLM's, ``lru``) or ``"stock"``. None (left out) in older records.
        ttft_p50_s, ttft_p95_s, ttft_p99_s, ttft_mean_s, e2e_p50_s, e2e_p95_s: Latencies.
        throughput_rps: Finished requests / ``wall_s`` (requests per second).
        wall_s: The run's wall time.
        requests: Per-request rows.
        num_steps, steps: Timed mode: ``engine.step()`` calls and their log
            (``{"start_s", "dur_s", "tokens"}``); None (left out) otherwise.
    """

    workload: str = attrs.field(validator=_str)
    max_num_seqs: int = attrs.field(validator=_count)
    max_num_batched_tokens: int = attrs.field(validator=_count)
    policy_faults: int = attrs.field(validator=_count)
    policy_fault: dict | None = attrs.field(validator=_opt_of(dict, "a fault mapping"))
    fail_open_allocations: int = attrs.field(validator=_count)
    fail_open_blocks: int = attrs.field(validator=_count)
    queue_p50_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    queue_p95_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    preemptions: int = attrs.field(validator=_count, metadata=_MEAN)
    adapter_seconds: float | None = attrs.field(default=None, validator=_opt_nonneg)
    served_by: str | None = attrs.field(default=None, validator=_opt_of(str, "a string"))
    ttft_p50_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    ttft_p95_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    ttft_p99_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    ttft_mean_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    e2e_p50_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    e2e_p95_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    throughput_rps: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    wall_s: float = attrs.field(validator=_nonneg, metadata=_MEAN)
    requests: list = attrs.field(validator=_of(list, "a list of request rows"))
    num_steps: int | None = attrs.field(default=None, validator=_opt_count)
    steps: dict | None = attrs.field(default=None, validator=_opt_of(dict, "a step log mapping"))


@attrs.frozen(kw_only=True, slots=False)  # a mixin: slotted, it would clash with the records' slots
class TierCounts:
    """The fields of a run with a CPU tier, engine and simulator alike
    (mixed into :class:`EngineTierRecord` and :class:`TieredRecord`); tokens
    are prompt tokens, counts per cell. ``prefill_tokens_recomputed`` is
    prompt - GPU hit - CPU hit in both.

    Attributes:
        cpu_blocks: Tier size, blocks.
        cpu_hit_tokens: Loaded from the tier instead of recomputed.
        gpu_hit_tokens: Hit in the GPU prefix cache.
        tier_stored_blocks: Blocks copied to the tier (engine: None without an offload manager).
        tier_not_admitted: Offered blocks refused by ``spfcore_tier_admit`` (engine: None without one).
    """

    cpu_blocks: int = attrs.field(validator=_count, metadata=_TIER)
    cpu_hit_tokens: int = attrs.field(validator=_count, metadata=_TIER)
    gpu_hit_tokens: int = attrs.field(validator=_count, metadata=_TIER)
    tier_stored_blocks: int | None = attrs.field(validator=_opt_count, metadata=_TIER)
    tier_not_admitted: int | None = attrs.field(validator=_opt_count, metadata=_TIER)


@attrs.frozen(kw_only=True)
class EngineTierRecord(TierCounts, EngineRecord):
    """The engine's record of a run with a CPU tier (``EngineSpec.cpu_blocks``):
    :class:`EngineRecord`'s fields, then :class:`TierCounts`' (``gpu_hit_tokens``
    = cached - loaded)."""


@attrs.frozen(kw_only=True)
class TieredRecord(TierCounts, CellRecord):
    """The two-tier simulator's record (:func:`spfcore.sim.tiered.simulate_tiered`,
    ``mode`` ``"tiered"``): :class:`CellRecord`'s and :class:`TierCounts`'
    fields, then these. Tokens are prompt tokens; times are the cost model's
    estimates, seconds.

    Attributes:
        status: ``"ok"`` (a failed arm is :func:`error_cell`).
        miss_tokens: Recomputed (= ``prefill_tokens_recomputed``).
        gpu_hit_rate, cpu_hit_rate: ``gpu_hit_tokens`` and ``cpu_hit_tokens`` / prompt tokens.
        block_hit_rate: Hit blocks of both tiers / block references.
        tokens_loaded: ``cpu_hit_tokens``.
        bytes_loaded, bytes_stored, bytes_promoted: Tier traffic, bytes.
        tier_store_skipped, tier_evictions: Blocks not stored (already there), evicted from the tier.
        promoted_blocks, promoted_used, promoted_wasted: Tier blocks loaded ahead of
            their request on a hint, of them used and not.
        hints_wasted: ``hints_issued - hints_used``.
        ttft_mean_s, ttft_p50_s, ttft_p95_s, load_s_mean, recompute_s_mean: Estimated
            TTFT and its split into tier load and recompute.
        promote: Whether hinted tier blocks were promoted ahead of the request.
        cost: The cost model's fields.
        wall_seconds: The replay's wall time.
        requests: Per-request rows, or None (left out).
    """

    status: str = attrs.field(default="ok", validator=_str)
    miss_tokens: int = attrs.field(validator=_count)
    gpu_hit_rate: float = attrs.field(validator=_rate)
    cpu_hit_rate: float = attrs.field(validator=_rate)
    block_hit_rate: float = attrs.field(validator=_rate)
    tokens_loaded: int = attrs.field(validator=_count)
    bytes_loaded: float = attrs.field(validator=_nonneg)
    bytes_stored: float = attrs.field(validator=_nonneg)
    bytes_promoted: float = attrs.field(validator=_nonneg)
    tier_store_skipped: int = attrs.field(validator=_count)
    tier_evictions: int = attrs.field(validator=_count)
    promoted_blocks: int = attrs.field(validator=_count, metadata=_TIER)
    promoted_used: int = attrs.field(validator=_count, metadata=_TIER)
    promoted_wasted: int = attrs.field(validator=_count, metadata=_TIER)
    hints_wasted: int = attrs.field(validator=_count)
    ttft_mean_s: float = attrs.field(validator=_nonneg)
    ttft_p50_s: float = attrs.field(validator=_nonneg)
    ttft_p95_s: float = attrs.field(validator=_nonneg)
    load_s_mean: float = attrs.field(validator=_nonneg, metadata=_TIER)
    recompute_s_mean: float = attrs.field(validator=_nonneg, metadata=_TIER)
    promote: bool = attrs.field(validator=_of(bool, "true or false"))
    cost: dict = attrs.field(validator=_of(dict, "the cost model's fields"))
    wall_seconds: float = attrs.field(validator=_nonneg)
    requests: list | None = attrs.field(default=None, validator=_opt_of(list, "a list of request rows"))


def record_fields(cls: type, flag: str | None = None) -> tuple[str, ...]:
    """Names of ``cls``' fields (an attrs record class above), in order; with
    ``flag``, only those whose metadata sets it (``"mean"``, ``"tier"``)."""
    return tuple(f.name for f in attrs.fields(cls) if flag is None or f.metadata.get(flag))


#: The converter of cell records: fields in class order, values as built (lists
#: and dicts not copied: per-request rows can be long), a field whose default is
#: None left out when None.
record_converter = cattrs.Converter()
for _t in (list, dict):
    record_converter.register_unstructure_hook(_t, lambda v: v)
for _cls in (SimRecord, EngineRecord, EngineTierRecord, TieredRecord):
    record_converter.register_unstructure_hook(_cls, make_dict_unstructure_fn(
        _cls, record_converter, **{f.name: override(omit_if_default=True)
                                   for f in attrs.fields(_cls) if f.default is None}))

#: Fields of an engine cell averaged over seeds in a run's summary (the simulator's are a subset).
MEAN_FIELDS = record_fields(EngineRecord, "mean")


def wasted_share(cell: Mapping) -> float:
    """``1 - hints_used / hints_issued`` of one cell; 0 when no hint was issued."""
    issued = cell.get("hints_issued") or 0
    return 0.0 if issued == 0 else 1.0 - (cell.get("hints_used") or 0) / issued


#: Fields of a cell of a run with a CPU tier (``GateConfig.cpu_ratio``) averaged in a run's summary:
#: :class:`TierCounts` (engine and simulator alike), then the two-tier simulator's estimated TTFT split
#: and promotion counters (:class:`TieredRecord`). The simulator's cell also has ``sim_promote``
#: (:func:`spfcore.run.pipeline.tiered_sim`).
TIER_FIELDS = record_fields(TieredRecord, "tier")


def tier_agreement(engine: Mapping, sim: Mapping) -> bool | None:
    """Whether every request's GPU hit and CPU-tier load in the engine cell
    equal the simulator's (``requests`` rows, same order, fields
    ``gpu_hit_tokens`` and ``cpu_hit_tokens``); ``None`` when either cell
    lacks per-request tier rows (no tier, a failed cell)."""
    er, sr = engine.get("requests") or (), sim.get("requests") or ()
    if not er or len(er) != len(sr) or any("cpu_hit_tokens" not in r for r in (*er, *sr)):
        return None
    return all(a["gpu_hit_tokens"] == b["gpu_hit_tokens"] and a["cpu_hit_tokens"] == b["cpu_hit_tokens"]
               for a, b in zip(er, sr))
