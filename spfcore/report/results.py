"""Results of a gate run: the versioned JSON document, its summaries and file I/O.

Results JSON, ``schema_version`` 1::

    {
      "schema_version": 1,
      "spfcore_version": "0.1.0",
      "created": "2026-...Z",                 # UTC, ISO 8601
      "config": {...},                        # everything that made the run: workload
                                              # (every flag) or trace, engine spec, arms,
                                              # seeds, cache size, thresholds, roles,
                                              # versions, and "command" (the command line)
      "cells": [cell, ...],                   # engine: one per arm and seed, with
                                              # "requests" (per-request records);
                                              # every cell has "status": "ok" | "error";
                                              # a failed one is {"arm", "seed", "status",
                                              # "error": {"policy", "hook", "message"}}
      "sim": {"cells": [...], "ceilings": [{"seed", "infinite": {...}, "belady": {...}}],
              "summary": {arm: means}, "ceilings_summary": {"infinite": means, "belady": means}},
      "summary": {arm: means},                # engine, means over seeds (see summarize)
      "verdict": {...},                       # spfcore.gate.Verdict.to_json()
      "run": {"cells", "reused_cells", "passes",           # this call (gate runs)
              "wall_s", "call_wall_s"}                      # seconds: every call on the sidecar, this one
    }

Cell field names are those of ``spfcore simulate``: ``token_hit_rate``,
``prefill_tokens_recomputed`` (tokens), ``ttft_p95_s`` (seconds), ...
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from spfcore.fileio import write_atomic
from spfcore.run.cell import MEAN_FIELDS, TIER_FIELDS, error_text, wasted_share

SCHEMA_VERSION = 1




class ResultsError(ValueError):
    """A results file that cannot be read: the message names the file and field."""




def _mean(xs: Sequence[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def summarize(cells: Iterable[Mapping]) -> dict[str, dict]:
    """Per arm, the means over seeds of every field in :data:`MEAN_FIELDS`
    and :data:`spfcore.run.cell.TIER_FIELDS` present in the cells, plus:

    * ``seeds``: seeds averaged (failed cells excluded), ``errors``: failures;
    * ``evict_us_per_alloc``: ``evict_seconds / evict_calls`` in microseconds,
      the policy's cost on the allocation path (hooks included), seed mean;
    * ``hook_us_per_call``: ``hook_seconds / hook_calls`` in microseconds;
    * ``hook_ms_per_request``: ``hook_seconds / num_requests`` in milliseconds,
      the policy's hook time per request;
    * ``policy_ms_per_request``: ``policy_seconds / num_requests`` in
      milliseconds: all of spfcore's time per request (hooks, evictor
      bookkeeping, re-scoring; compare with ``1000 / throughput_rps``, the
      wall time per request: it bounds what the policy can cost throughput);
    * ``wasted_hints``: ``1 - hints_used / hints_issued`` (0 if none), seed mean;
    * ``ttft_mean_hit_s`` / ``ttft_mean_miss_s``: mean TTFT (s) of requests
      with / without cached tokens, pooled over seeds (p95 TTFT cannot move
      while fewer than 5% of requests miss, so the per-class means are shown).

    Args:
        cells: Cell records (engine or simulator).

    Returns:
        ``{arm: {field: value}}`` in first-seen arm order.
    """
    by_arm: dict[str, list] = {}
    errors: dict[str, list] = {}
    for c in cells:
        if c.get("error"):
            errors.setdefault(c["arm"], []).append(f"seed {c.get('seed')}: {error_text(c['error'])}")
            by_arm.setdefault(c["arm"], [])
        else:
            by_arm.setdefault(c["arm"], []).append(c)
    out = {}
    for arm, cs in by_arm.items():
        s: dict = {"seeds": [c.get("seed") for c in cs], "errors": errors.get(arm, [])}
        for f in MEAN_FIELDS + TIER_FIELDS:
            if any(f in c for c in cs):
                s[f] = _mean([c.get(f) for c in cs])
        s["evict_us_per_alloc"] = _mean([1e6 * c["evict_seconds"] / c["evict_calls"] for c in cs
                                         if c.get("evict_calls")])
        s["hook_us_per_call"] = _mean([1e6 * c["hook_seconds"] / c["hook_calls"] for c in cs
                                       if c.get("hook_calls")])
        s["hook_ms_per_request"] = _mean([1e3 * c["hook_seconds"] / c["num_requests"] for c in cs
                                          if c.get("num_requests") and c.get("hook_seconds") is not None])
        s["policy_ms_per_request"] = _mean([1e3 * c["policy_seconds"] / c["num_requests"] for c in cs
                                            if c.get("num_requests") and c.get("policy_seconds") is not None])
        s["wasted_hints"] = _mean([wasted_share(c) for c in cs])
        reqs = [r for c in cs for r in c.get("requests") or () if r.get("ttft_s") is not None]
        s["ttft_mean_hit_s"] = _mean([r["ttft_s"] for r in reqs if r.get("cached_tokens")])
        s["ttft_mean_miss_s"] = _mean([r["ttft_s"] for r in reqs if not r.get("cached_tokens")])
        out[arm] = s
    return out


def _ceilings_summary(ceilings: Sequence[Mapping]) -> dict:
    out = {}
    for kind in ("infinite", "belady"):
        rows = [c[kind] for c in ceilings if (c.get(kind) or {}).get("token_hit_rate") is not None]
        if rows:
            out[kind] = {k: _mean([r.get(k) for r in rows]) for k in rows[0]
                         if isinstance(rows[0][k], (int, float))}
    return out


def build_results(config: Mapping, cells: Sequence[Mapping], sim: Mapping | None,
                  verdict: Mapping | None, *, created: str | None = None) -> dict:
    """Assemble a schema-1 results document (see the module docstring).

    Args:
        config: The whole run configuration (JSON-serialisable).
        cells: Engine cells.
        sim: ``{"cells": [...], "ceilings": [...]}`` or None.
        verdict: :meth:`spfcore.gate.Verdict.to_json` or None.
        created: Timestamp; default now (UTC).
    """
    import spfcore

    sim_out = None
    if sim is not None:
        sim_out = {"cells": list(sim.get("cells", ())), "ceilings": list(sim.get("ceilings", ())),
                   "summary": summarize(sim.get("cells", ())),
                   "ceilings_summary": _ceilings_summary(sim.get("ceilings", ()))}
    return {"schema_version": SCHEMA_VERSION, "spfcore_version": spfcore.__version__,
            "created": created or _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "config": dict(config), "cells": list(cells), "sim": sim_out,
            "summary": summarize(cells), "verdict": verdict}




def json_default(o):
    """``json.dumps``' ``default``: numpy scalars, sets, tuples and paths as JSON values."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def dumps(results: Mapping) -> str:
    """``results`` as JSON text (numpy scalars, tuples and paths converted).

    Raises:
        TypeError: a value that has no JSON form.
    """
    return json.dumps(results, indent=1, default=json_default, allow_nan=True) + "\n"


def write_results(path: str | os.PathLike, results: Mapping) -> Path:
    """Serialise and write ``results`` atomically (:func:`write_atomic`).

    The JSON text is built before the file is opened, so a value that cannot be
    serialised raises ``TypeError`` and leaves no file.
    """
    return write_atomic(path, dumps(results))


def read_results(path: str | os.PathLike) -> dict:
    """Read and check a results file.

    Raises:
        ResultsError: unreadable JSON (with line and column), a missing field,
            or a ``schema_version`` other than :data:`SCHEMA_VERSION`.
    """
    path = Path(path)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(d, dict):
        raise ResultsError(f"{path}: top level must be an object, got {type(d).__name__}")
    for field in ("schema_version", "config", "cells", "summary", "verdict"):
        if field not in d:
            raise ResultsError(f"{path}: field {field!r} missing")
    if d["schema_version"] != SCHEMA_VERSION:
        raise ResultsError(f"{path}: field 'schema_version' is {d['schema_version']!r}; "
                           f"this spfcore reads {SCHEMA_VERSION}")
    return d
