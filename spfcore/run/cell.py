"""A cell: one arm x seed (x pass) of a run, as the simulator and the engine
record it, and what every part of the pipeline reads from one.

A cell record is a dict of the fields the drivers write (``spfcore.sim.simulate``
and ``spfcore.engine.runner.EngineSession.run``: ``num_requests``,
``token_hit_rate``, ``prefill_tokens_recomputed`` (tokens), ``ttft_p95_s``
(seconds), ...) plus ``arm``, ``seed``, ``status`` (``"ok"`` or ``"error"``)
and, for a further pass, ``repeat``. A failed cell is :func:`error_cell`;
its ``error`` is a :class:`CellError`. :class:`StoredCell` is how the store
(:mod:`spfcore.run.store`) keeps one, typed and versioned; it is read and
written by one cattrs converter (:data:`converter`), the JSON line unchanged
since version 1: ``{"kind", "arm", "seed", "cell", "repeat" (only when > 0)}``.
"""

from __future__ import annotations

from collections.abc import Mapping

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



def wasted_share(cell: Mapping) -> float:
    """``1 - hints_used / hints_issued`` of one cell; 0 when no hint was issued."""
    issued = cell.get("hints_issued") or 0
    return 0.0 if issued == 0 else 1.0 - (cell.get("hints_used") or 0) / issued


#: Fields of a cell of a run with a CPU tier (``GateConfig.cpu_ratio``), engine and simulator alike
#: (tokens are prompt tokens, counts per cell): ``cpu_blocks`` (tier size, blocks), ``gpu_hit_tokens``
#: (hit in the GPU prefix cache), ``cpu_hit_tokens`` (loaded from the tier instead of recomputed),
#: ``tier_stored_blocks`` (blocks copied to the tier), ``tier_not_admitted`` (offered blocks refused by
#: ``spfcore_tier_admit``). ``prefill_tokens_recomputed`` is prompt - GPU hit - CPU hit in both.
#: The simulator's cell adds ``tokens_loaded`` (= ``cpu_hit_tokens``), the estimated TTFT split
#: ``load_s_mean`` / ``recompute_s_mean`` (seconds), ``promoted_blocks`` / ``promoted_used`` /
#: ``promoted_wasted`` and ``sim_promote`` (:func:`spfcore.run.pipeline.tiered_sim`).
TIER_FIELDS = ("cpu_blocks", "gpu_hit_tokens", "cpu_hit_tokens", "tier_stored_blocks", "tier_not_admitted",
               "load_s_mean", "recompute_s_mean", "promoted_blocks", "promoted_used", "promoted_wasted")


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
