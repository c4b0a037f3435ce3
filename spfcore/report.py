"""Results of a gate run: the versioned JSON file, the terminal table, PNG
plots and markdown pages.

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

import contextlib

import datetime as _dt
import json
import math
import os
import textwrap
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from spfcore.runtime import PolicyError

from spfcore.fileio import write_atomic

SCHEMA_VERSION = 1


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
            return {"policy": e.policy or arm, "hook": e.hook, "message": str(e).splitlines()[0]}
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    msg = str(exc).splitlines()[0] if str(exc) else ""
    return {"policy": arm, "hook": None, "message": f"{type(exc).__name__}: {msg}".rstrip(": ")}


def error_cell(arm: str, seed, exc: BaseException) -> dict:
    """The cell of an arm x seed that failed with ``exc``: ``{"arm", "seed",
    "status": "error", "error": error_of(exc, arm)}``."""
    return {"arm": arm, "seed": seed, "status": "error", "error": error_of(exc, arm)}


def error_text(err) -> str:
    """One line for a cell's ``error`` (a dict of :func:`error_of`, or the
    plain string of files written before it)."""
    if isinstance(err, Mapping):
        where = f" [hook {err['hook']}]" if err.get("hook") and err["hook"] not in err.get("message", "") else ""
        return f"{err.get('message', '')}{where}"
    return str(err)



def _savefig_atomic(fig, path: Path) -> None:
    """Save a matplotlib figure as PNG to ``path`` through a temporary file in
    the same folder and ``os.replace``: a killed run leaves the old picture or
    none, never half of one."""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, dpi=110, format="png")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def make_console() -> Console:
    """A rich Console for tables: the terminal's width, or 200 columns when
    output is piped or captured (so tables are not cut to 80 columns)."""
    console = Console()
    return console if console.is_terminal else Console(width=200)

#: Per-cell numeric fields averaged over seeds in a summary.
MEAN_FIELDS = ("num_requests", "prompt_tokens", "cached_tokens", "token_hit_rate",
               "prefill_tokens_recomputed", "evictions", "hook_seconds", "hook_calls", "policy_seconds",
               "evict_seconds", "evict_calls", "hints_issued", "hints_used",
               "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "ttft_mean_s", "e2e_p50_s", "e2e_p95_s",
               "throughput_rps", "wall_s", "queue_p50_s", "queue_p95_s", "preemptions")


class ResultsError(ValueError):
    """A results file that cannot be read: the message names the file and field."""


# ------------------------------------------------------------------ summary


def _mean(xs: Sequence[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def summarize(cells: Iterable[Mapping]) -> dict[str, dict]:
    """Per arm, the means over seeds of every field in :data:`MEAN_FIELDS`
    present in the cells, plus:

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
    from spfcore.gate import wasted_share

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
        for f in MEAN_FIELDS:
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


# ------------------------------------------------------------------ JSON I/O


def _default(o):
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
    return json.dumps(results, indent=1, default=_default, allow_nan=True) + "\n"


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


# ------------------------------------------------------------------ table


def _f(x, fmt: str, scale: float = 1.0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x * scale, fmt)


#: (column header, summary field, format, scale)
COLUMNS = (("hit", "token_hit_rate", ".2%", 1), ("prefill recomputed", "prefill_tokens_recomputed", ",.0f", 1),
           ("TTFT p50 ms", "ttft_p50_s", ".1f", 1e3), ("p95 ms", "ttft_p95_s", ".1f", 1e3),
           ("p99 ms", "ttft_p99_s", ".1f", 1e3), ("mean ms", "ttft_mean_s", ".1f", 1e3),
           ("hit/miss mean ms", None, "", 1), ("e2e p95 ms", "e2e_p95_s", ".1f", 1e3),
           ("rps", "throughput_rps", ".3f", 1), ("evict µs/alloc", "evict_us_per_alloc", ".1f", 1),
           ("hooks ms/req", "hook_ms_per_request", ".2f", 1),
           ("policy ms/req", "policy_ms_per_request", ".2f", 1), ("hints used/issued", None, "", 1))


def _row(s: Mapping) -> list[str]:
    row = []
    for _, field, fmt, scale in COLUMNS:
        if field is not None:
            row.append(_f(s.get(field), fmt, scale))
        elif _ == "hit/miss mean ms":
            row.append(f"{_f(s.get('ttft_mean_hit_s'), '.1f', 1e3)}/{_f(s.get('ttft_mean_miss_s'), '.1f', 1e3)}")
        else:
            row.append(f"{_f(s.get('hints_used'), '.0f')}/{_f(s.get('hints_issued'), '.0f')}")
    return row


def engine_summary(results: Mapping) -> dict[str, dict]:
    """Per-arm engine summary of a gate results mapping, recomputed from its
    cells with :func:`summarize` (so a file written by an older spfcore shows
    every current field); the stored ``summary`` when there are no cells."""
    return summarize(results["cells"]) if results.get("cells") else dict(results.get("summary", {}))


def table(results: Mapping) -> Table:
    """A rich table: one row per engine arm (seed means), then the simulator's
    arms and its Belady and infinite-cache ceilings (token hit rate, prefill).
    Engine rows are summarized from the cells (:func:`summarize`), so a file
    written by an older spfcore shows every current column."""
    cfg = results.get("config", {})
    t = Table(title=f"spfcore gate: {cfg.get('workload_label', '')}".strip(), show_lines=False)
    t.add_column("arm")
    t.add_column("seeds", justify="right")
    for head, *_ in COLUMNS:
        t.add_column(head, justify="right")
    for arm, s in engine_summary(results).items():
        if not s.get("seeds") and s.get("errors"):
            t.add_row(arm, "0", f"[red]failed: {s['errors'][0]}[/red]", *[""] * (len(COLUMNS) - 1))
            continue
        name = arm if not s.get("errors") else f"{arm} [red](errors)[/red]"
        t.add_row(name, str(len(s.get("seeds", []))), *_row(s))
    sim = results.get("sim") or {}
    if sim.get("summary"):
        t.add_section()
        for arm, s in sim["summary"].items():
            t.add_row(f"sim:{arm}", str(len(s.get("seeds", []))), _f(s.get("token_hit_rate"), ".2%"),
                      _f(s.get("prefill_tokens_recomputed"), ",.0f"), *[""] * (len(COLUMNS) - 2))
        for kind, s in sim.get("ceilings_summary", {}).items():
            t.add_row(f"sim:{kind}", "", _f(s.get("token_hit_rate"), ".2%"),
                      _f(s.get("prefill_tokens_recomputed"), ",.0f"), *[""] * (len(COLUMNS) - 2))
    return t


def verdict_table(verdict: Mapping) -> Table:
    """A rich table of the verdict: one row per criterion (value, threshold, CI, pass)."""
    color = {"SURVIVES": "green", "FAILS": "red"}.get(verdict["status"], "yellow")
    how = ""
    if verdict.get("settled"):
        how = f" (95% CIs on one side of each threshold; {verdict.get('passes', 1)} pass(es) per seed)"
    t = Table(title=f"verdict: [{color}]{verdict['status']}[/{color}]{how}")
    for col in ("criterion", "value", "threshold", "95% CI", "pass", "what"):
        t.add_column(col)
    for c in verdict["criteria"]:
        ci = c.get("ci")
        ci_s = f"[{ci['low']:+.4f}, {ci['high']:+.4f}] ({ci['method']})" if ci else "-"
        p = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "-"}[c["passed"]]
        t.add_row(c["name"], _f(c["value"], "+.4f"), f"{c['op']} {c['threshold']:.4g}", ci_s, p, c["note"])
    if verdict.get("info"):
        t.add_section()
        for c in verdict["info"]:  # shown beside the rule, not in it
            t.add_row(c["name"], _f(c["value"], "+.4f"), f"({c['op']} {c['threshold']:.4g})", "-", "info", c["note"])
    return t


def print_report(results: Mapping, console: Console | None = None) -> None:
    """Print the arms table, the verdict table and the verdict's reasons."""
    console = console or make_console()
    console.print(table(results))
    v = results.get("verdict")
    if v:
        console.print(verdict_table(v))
        console.print("  rule: SURVIVES iff (ttft_p95_improvement OR prefill_reduction) AND throughput_regression "
                      "AND wasted_hints pass, with >= min_seeds seeds; headroom and harness must pass first",
                      markup=False)
        for r in v.get("reasons", ()):
            console.print(f"  - {r}", markup=False)


# ------------------------------------------------------------------ plots


def ttft_title(results: Mapping) -> str:
    """The title of ``ttft_cdf.png``: the workload label, the load (one
    request at a time, or the arrival process and its rate, req/s) and the
    seeds of the cells."""
    cfg = results.get("config", {})
    seeds = sorted({c.get("seed") for c in results.get("cells", ()) if c.get("seed") is not None})
    flags = cfg.get("workload_flags") or {}
    if cfg.get("mode") != "timed":
        level = "one request at a time"
    elif flags.get("arrival") in ("poisson", "rate"):
        level = f"{flags['arrival']} arrivals at {float(flags.get('rate', 0)):.4g} req/s"
    else:
        level = "the workload's arrival times"
    return (f"TTFT CDF: {cfg.get('workload_label', cfg.get('workload', ''))}; load: {level}; "
            f"seeds {', '.join(map(str, seeds))}")


def plot_results(results: Mapping, outdir: str | os.PathLike) -> list[Path]:
    """Write PNG plots beside the results (matplotlib, Agg backend):

    * ``cache.png``: per arm, prefill tokens recomputed and token hit rate
      (engine seed means, simulator beside them) with the simulator's Belady
      ceiling and infinite cache marked as horizontal lines;
    * ``ttft_cdf.png``: the TTFT CDF per arm (requests of every seed and
      repeat pooled) on a log time axis (TTFTs of hits and misses differ by
      orders of magnitude), titled with the workload, the load level and
      the seeds, when the cells carry per-request TTFTs.

    Returns:
        Paths written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    eng = results.get("summary", {}) or {}
    sim = results.get("sim") or {}
    sim_sum, ceil = sim.get("summary", {}) or {}, sim.get("ceilings_summary", {}) or {}
    arms = list(dict.fromkeys([*eng, *sim_sum]))
    if arms:
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(arms) + 4), 4.5))
        x = np.arange(len(arms))
        for ax, field, label, scale in ((axes[0], "prefill_tokens_recomputed", "prefill tokens recomputed", 1),
                                        (axes[1], "token_hit_rate", "token hit rate (%)", 100)):
            def vals(src):
                return [np.nan if (src.get(a, {}).get(field) is None) else src[a][field] * scale for a in arms]
            ax.bar(x - 0.2, vals(eng), 0.4, label="engine (seed mean)")
            ax.bar(x + 0.2, vals(sim_sum), 0.4, label="simulator", alpha=0.6)
            for kind, style in (("belady", "--"), ("infinite", ":")):
                if ceil.get(kind, {}).get(field) is not None:
                    ax.axhline(ceil[kind][field] * scale, color="k", linestyle=style, label=f"{kind} (sim)")
            ax.set_xticks(x, arms, rotation=20, ha="right")
            ax.set_ylabel(label)
            ax.legend(fontsize=8)
        fig.suptitle(textwrap.fill(results.get("config", {}).get("workload_label", "spfcore gate"), 110),
                     fontsize=9)
        fig.tight_layout()
        p = outdir / "cache.png"
        _savefig_atomic(fig, p)
        plt.close(fig)
        paths.append(p)
    ttfts: dict[str, list] = {}
    for c in results.get("cells", ()):
        for r in c.get("requests") or ():
            if r.get("ttft_s") is not None:
                ttfts.setdefault(c["arm"], []).append(r["ttft_s"])
    if ttfts:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for arm, v in ttfts.items():
            v = np.sort(np.asarray(v)) * 1e3
            ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=arm)
        ax.set_xscale("log")
        ax.set_xlabel("TTFT (ms, log scale)")
        ax.set_ylabel("share of requests")
        ax.set_title(textwrap.fill(ttft_title(results), 90), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = outdir / "ttft_cdf.png"
        _savefig_atomic(fig, p)
        plt.close(fig)
        paths.append(p)
    return paths


def load_table(doc: Mapping) -> Table:
    """A rich table of a load-level run (:func:`spfcore.gate_runner.run_load_gate`):
    one row per level and arm."""
    slo = doc.get("ttft_slo_s")
    t = Table(title=f"spfcore gate under load: capacity {doc['capacity_rps']:.3f} req/s "
                    f"({'measured on ' + doc['config']['roles']['floor'] if doc.get('capacity_measured') else 'given'}),"
                    f" Poisson arrivals")
    cols = [("load", None), ("req/s", None), ("arm", None), ("TTFT p50 ms", "ttft_p50_s"), ("p95 ms", "ttft_p95_s"),
            ("p99 ms", "ttft_p99_s"), ("queue p95 ms", "queue_p95_s"), ("e2e p95 ms", "e2e_p95_s"),
            ("prefill recomputed", "prefill_tokens_recomputed"), ("hit", "token_hit_rate"),
            ("sim hit", "sim_token_hit_rate"), ("preempt", "preemptions")]
    if slo is not None:
        cols.append((f"goodput@{slo * 1e3:g}ms req/s", "goodput_rps"))
    for head, _ in cols:
        t.add_column(head, justify="right")
    for lv in doc["levels"]:
        t.add_section()
        for arm, s in lv["summary"].items():
            row = [f"{lv['load']:g}" + (" *" if lv["load"] == doc.get("judged_load") else ""),
                   f"{lv['rate_rps']:.3f}", arm]
            for head, f in cols[3:]:
                v = s.get(f)
                if f.endswith("_s"):
                    row.append(_f(v, ".1f", 1e3))
                elif f in ("token_hit_rate", "sim_token_hit_rate"):
                    row.append(_f(v, ".2%"))
                elif f == "goodput_rps":
                    row.append(_f(v, ".3f"))
                else:
                    row.append(_f(v, ",.0f"))
            t.add_row(*row)
    return t


def plot_load(doc: Mapping, outdir: str | os.PathLike) -> Path | None:
    """``ttft_p95_vs_load.png``: p95 TTFT (ms, seed means) against offered
    load (requests/s), one line per arm, the judged level marked. Returns the
    path, or None with no level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = doc.get("levels") or []
    if not levels:
        return None
    arms = list(dict.fromkeys(a for lv in levels for a in lv["summary"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm in arms:
        pts = [(lv["rate_rps"], lv["summary"][arm]["ttft_p95_s"] * 1e3) for lv in levels
               if (lv["summary"].get(arm) or {}).get("ttft_p95_s") is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=arm)
    j = doc.get("judged_load")
    if j is not None:
        ax.axvline(j * doc["capacity_rps"], color="k", linestyle=":", label=f"judged: {j:g} x capacity")
    ax.set_xlabel(f"offered load (requests/s; capacity {doc['capacity_rps']:.3g})")
    ax.set_ylabel("p95 TTFT (ms)")
    ys = [y for line in ax.get_lines() for y in line.get_ydata()]
    if ys and min(ys) > 0 and max(ys) / min(ys) > 10:  # near capacity p95 grows by orders of magnitude
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    seeds = ", ".join(map(str, doc.get("config", {}).get("seeds", ())))
    ax.set_title(f"p95 TTFT vs offered load, Poisson arrivals; seeds {seeds}", fontsize=9)
    fig.tight_layout()
    outdir = Path(outdir)
    p = outdir / "ttft_p95_vs_load.png"
    _savefig_atomic(fig, p)
    plt.close(fig)
    return p


# ------------------------------------------------------------------ markdown


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(paths: Sequence[str | os.PathLike], *, title: str = "spfcore gate results",
             page_dir: str | os.PathLike | None = None) -> str:
    """A markdown page for one or more results files (for ``docs/results.md``
    or ``results/gpu-h200/README.md``): per file, the exact command that
    reproduces it, the setup, the arms table, the simulator's ceilings and the
    verdict with every criterion. With ``page_dir`` (the folder the page will
    live in), the plots found beside each results file are linked from it.

    Raises:
        ResultsError: a file that :func:`read_results` rejects.
    """
    out = [f"# {title}", ""]
    for path in paths:
        r = read_results(path)
        cfg = r["config"]
        v = r["verdict"] or {}
        out += [f"## {cfg.get('workload_label') or Path(path).parent.name}", "",
                f"Results file: `{path}` (spfcore {r.get('spfcore_version')}, {r.get('created')}).", "",
                "Reproduce:", "", "```bash", cfg.get("command") or "(command not recorded)", "```", ""]
        setup = {k: cfg.get(k) for k in ("num_blocks", "block_size", "cache_pressure", "mode", "seeds", "arms")}
        eng = cfg.get("engine") or {}
        setup["model"] = eng.get("model")
        ver = cfg.get("versions") or {}
        out += ["Setup: " + ", ".join(f"{k} = {v_}" for k, v_ in setup.items() if v_ is not None)
                + ("; " + ", ".join(f"{k} {v_}" for k, v_ in ver.items()) if ver else "") + ".", ""]
        heads = ["arm", "seeds"] + [h for h, *_ in COLUMNS]
        rows = [[a, str(len(s.get("seeds", [])))] + _row(s) for a, s in engine_summary(r).items()]
        out += [_md_table(heads, rows), ""]
        sim = r.get("sim") or {}
        if sim.get("summary"):
            srows = [[f"sim:{a}", _f(s.get("token_hit_rate"), ".2%"), _f(s.get("prefill_tokens_recomputed"), ",.0f")]
                     for a, s in sim["summary"].items()]
            srows += [[f"sim:{k}", _f(s.get("token_hit_rate"), ".2%"), _f(s.get("prefill_tokens_recomputed"), ",.0f")]
                      for k, s in sim.get("ceilings_summary", {}).items()]
            out += ["Simulator (same input, seed means):", "",
                    _md_table(["arm", "token hit rate", "prefill recomputed"], srows), ""]
        if v:
            out += [f"**Verdict: {v['status']}**", ""]
            crow = []
            for c in v["criteria"]:
                ci = c.get("ci")
                crow.append([c["name"], _f(c["value"], "+.4f"), f"{c['op']} {c['threshold']:.4g}",
                             f"[{ci['low']:+.4f}, {ci['high']:+.4f}]" if ci else "-",
                             {True: "yes", False: "no", None: "-"}[c["passed"]], c["note"]])
            out += [_md_table(["criterion", "value", "threshold", "95% CI", "pass", "what"], crow), ""]
            out += [f"- {x}" for x in v.get("reasons", ())] + ([""] if v.get("reasons") else [])
        if page_dir is not None:
            for png in ("cache.png", "ttft_cdf.png"):
                f = Path(path).parent / png
                if f.exists():
                    out += [f"![{png}]({os.path.relpath(f, page_dir)})", ""]
    return "\n".join(out).rstrip() + "\n"


def _sim_section(runs: Sequence[tuple[str, Mapping]]) -> list[str]:
    """Arms x workloads tables from ``spfcore simulate --json`` outputs."""
    order = ["lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle"]
    arms: list[str] = []
    for _, r in runs:
        arms += [a for a in r["summary"] if not a.startswith("ceiling:") and a not in arms]
    arms.sort(key=lambda a: (order.index(a) if a in order else len(order), a))
    cols = arms + (["ceiling:belady"] if "belady_oracle" not in arms else []) + ["ceiling:infinite"]
    heads = ["workload"] + [c.replace("ceiling:", "") + (" (ceiling)" if c.startswith("ceiling:") else "") for c in cols]
    out = []
    for metric, fmt, label in (("token_hit_rate", ".2%", "Token hit rate (higher is better)"),
                               ("prefill_tokens_recomputed", ",.0f", "Prefill tokens recomputed (lower is better)"),
                               ("block_hit_rate", ".4f", "Block hit rate (higher is better)")):
        rows = []
        for name, r in runs:
            row = [name]
            for c in cols:
                cell = r["summary"].get(c) or {}
                row.append("error" if cell.get("error") else _f(cell.get(metric), fmt))
            rows.append(row)
        out += [f"{label}; seed means:", "", _md_table(heads, rows), ""]
    out += ["Commands (each prints the JSON these rows come from):", ""]
    for name, r in runs:
        cache = r.get("cache", {})
        out += [f"- {name}: `{r.get('command', '(not recorded)')}` (block size {cache.get('block_size')}, "
                f"num_blocks {cache.get('num_blocks')}, seeds {r.get('seeds')})"]
    return out + [""]


def results_page(paths: Sequence[str | os.PathLike], *, title: str = "spfcore results",
                 include: Sequence[str | os.PathLike] = (), page_dir: str | os.PathLike | None = None) -> str:
    """One markdown page from ``spfcore simulate --json`` outputs (arms x
    workloads tables with the Belady and infinite-cache ceilings) and
    ``spfcore gate`` results files (one section per gate run, see
    :func:`markdown`; plots linked relative to ``page_dir`` when given). Every
    table names the command that reproduces it. Each ``include`` file (e.g. a
    benchmark's printed figures, the commands that ran it) follows verbatim in
    a code block under its file name; a ``.md`` file follows as markdown, as is.

    Raises:
        ResultsError: a file that is neither kind, or a bad gate results file.
    """
    sims, gates = [], []
    for p in dict.fromkeys(paths):  # a file named twice gets one section
        try:
            data = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ResultsError(f"{p}: {exc}") from None
        if isinstance(data, dict) and data.get("kind") == "spfcore-simulate":
            sims.append((Path(p).stem.removeprefix("sim-"), data))
        elif isinstance(data, dict) and "schema_version" in data:
            gates.append(p)
        else:
            raise ResultsError(f"{p}: neither a `spfcore simulate --json` output nor a gate results file")
    out = [f"# {title}", "", "Generated by `spfcore results-page`; do not edit by hand.", ""]
    if sims:
        out += ["## Simulator: arms x workloads", ""] + _sim_section(sims)
    if gates:
        body = markdown(gates, title="", page_dir=page_dir).splitlines()
        out += ["## Survival gate on the engine", ""] + [ln.replace("## ", "### ", 1) if ln.startswith("## ") else ln
                                                         for ln in body if ln != "# "]
    for p in include:
        try:
            text = Path(p).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ResultsError(f"{p}: {exc}") from None
        if Path(p).suffix == ".md":  # a markdown section (e.g. benchmarks/arms_table.py's tables), as is
            out += ([""] if out[-1] else []) + [text.rstrip("\n"), ""]
            continue
        out += ([""] if out[-1] else []) + [f"## {Path(p).name}", "", "```text", text.rstrip("\n"), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spfcore.report [--title T] RESULTS.json ...``: print the
    markdown page of the given results files (e.g. ``> docs/results.md``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m spfcore.report", description=main.__doc__)
    ap.add_argument("results", nargs="+", help="results JSON files")
    ap.add_argument("--title", default="spfcore gate results")
    a = ap.parse_args(argv)
    try:
        print(markdown(a.results, title=a.title), end="")
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
