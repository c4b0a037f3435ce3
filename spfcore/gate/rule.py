"""The survival gate: the seed's rule, a harness check against the
simulator's Belady, a no-headroom check, and bootstrap confidence intervals.

The rule (docs/design.md §1, the SPF experiment's own gate), across at least
``min_seeds`` deterministic seeds with seed values averaged: the candidate
survives iff

    (p95 TTFT improvement vs baseline >= 5%  OR  prefill tokens recomputed
     reduction vs baseline >= 10%)
    AND throughput regression vs floor < 1%
    AND wasted hints < 10%

with roles candidate, baseline and floor (:class:`Roles`; the seed's:
``spf_expected_utility``, ``session_ttl``, ``lru``, :data:`spfcore.presets.SEED_ROLES`).

"Seed values averaged" is read literally: each arm's per-seed figure (p95
TTFT in seconds, prefill tokens recomputed, throughput in requests/s, wasted
hint share) is averaged over the seeds first; the relative delta is then
taken between the two averages, e.g.
``improvement = 1 - mean_s(p95_cand[s]) / mean_s(p95_base[s])``.

Added to the seed's rule:

* **Harness check.** Where the simulator's Belady ceiling beats the
  simulated floor by ``>= harness_min_headroom`` (5 points) of token hit rate,
  the engine's oracle arm must beat the engine's floor by at least
  ``harness_fraction`` (half) of that gap; otherwise the engine harness is not
  letting policies act (the seed's failure mode) and the verdict is
  ``INVALID-HARNESS``.
* **No headroom.** Where the simulator's Belady is within ``no_headroom``
  (1 point) of the simulated floor, no policy can win; verdict ``NO-HEADROOM``.
* **Bootstrap CIs** for every delta the rule uses (:func:`bootstrap_ci`).

* **Settled verdicts** (``evaluate(settle=True)``, the ``spfcore gate``
  default): SURVIVES / FAILS only when every deciding criterion's 95% CI lies
  wholly on one side of its threshold, else ``INCONCLUSIVE`` with the
  criterion, its interval and :func:`repeats_to_settle`'s estimate; the
  runner then adds interleaved passes (cells with ``repeat``) within its budget.
* **Policy cost** (``Verdict.info``): the candidate's own spfcore seconds per
  request against the floor's wall time per request, beside the throughput
  criterion (not part of the rule).
* **No oracle** (``Roles.oracle = None``): the harness check is skipped and
  the reasons say so.

Verdict precedence: ``INCOMPLETE`` (a role arm or seeds missing, or a role
arm failed, in the engine or the simulator; a failure of another arm is
listed in the reasons but decides nothing) > ``NO-HEADROOM`` > ``INVALID-HARNESS``
> ``INCONCLUSIVE`` (settled mode only) > ``SURVIVES`` / ``FAILS``.
The criteria are computed and listed whatever the verdict.

Threshold comparisons round value and threshold to 12 decimals first, so a delta that is
exactly on a threshold in decimal (e.g. ``1 - 0.95/1.0``) is judged as such.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs
import numpy as np

from spfcore.gate.bootstrap import BOOTSTRAP_LEVEL, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CI, bootstrap_ci, units_t_interval
from spfcore.run.cell import error_text, wasted_share

SURVIVES, FAILS = "SURVIVES", "FAILS"
INVALID_HARNESS, NO_HEADROOM, INCOMPLETE = "INVALID-HARNESS", "NO-HEADROOM", "INCOMPLETE"
INCONCLUSIVE = "INCONCLUSIVE"
VERDICTS = (SURVIVES, FAILS, INVALID_HARNESS, NO_HEADROOM, INCOMPLETE, INCONCLUSIVE)
#: The interval method of a wasted-hints share that is 0 by definition (no hint issued in any cell):
#: exact, so no resampled or t-interval widens it.
_EXACT_ZERO = "none issued"

#: The criteria of the seed's rule: (ttft OR prefill) AND throughput AND wasted hints.
RULE_CRITERIA = ("ttft_p95_improvement", "prefill_reduction", "throughput_regression", "wasted_hints")

#: The values each rule criterion can take: the relative drops ``1 - x / y`` of
#: non-negative figures are at most 1; a wasted share lies in [0, 1]. Intervals are clipped to them.
CRITERION_RANGE = {"ttft_p95_improvement": (-math.inf, 1.0), "prefill_reduction": (-math.inf, 1.0),
                   "throughput_regression": (-math.inf, 1.0), "wasted_hints": (0.0, 1.0)}

#: Bootstrap defaults: resamples, confidence level and the fixed RNG seed.
@attrs.frozen
class GateThresholds:
    """Thresholds of the survival gate. Shares are fractions (0.05 = 5%);
    token hit rate gaps are fractions of prompt tokens (0.05 = 5 points).

    Attributes:
        ttft_p95_improvement: Least relative p95 TTFT improvement of the
            candidate vs the baseline (>=).
        prefill_reduction: Least relative reduction of prefill tokens
            recomputed vs the baseline (>=).
        throughput_regression: Throughput regression vs the floor must stay
            below this (<).
        wasted_hints: Share of the candidate's prefetch hints never used must
            stay below this (<).
        min_seeds: Seeds every role arm needs, else ``INCOMPLETE``.
        harness_fraction: Share of the simulator's Belady-vs-floor gap the
            engine's oracle must reach.
        harness_min_headroom: Simulated Belady-vs-floor token hit rate gap from
            which the harness check applies.
        no_headroom: Simulated Belady-vs-floor gap at or below which the
            verdict is ``NO-HEADROOM``.
    """

    ttft_p95_improvement: float = attrs.field(default=0.05, converter=float)
    prefill_reduction: float = attrs.field(default=0.10, converter=float)
    throughput_regression: float = attrs.field(default=0.01, converter=float)
    wasted_hints: float = attrs.field(default=0.10, converter=float)
    min_seeds: int = attrs.field(default=3, converter=int, validator=attrs.validators.ge(1))
    harness_fraction: float = attrs.field(default=0.5, converter=float)
    harness_min_headroom: float = attrs.field(default=0.05, converter=float)
    no_headroom: float = attrs.field(default=0.01, converter=float)

    def to_json(self) -> dict:
        return attrs.asdict(self)


@attrs.frozen
class Roles:
    """Which arm plays which part in the rule (arm = policy name); the seed's
    are :data:`spfcore.presets.SEED_ROLES` (the rule names no policy).

    ``oracle`` may be ``None`` (a run without the ceiling arm, e.g. a timed run
    that leaves the slow oracle out): the harness check is then skipped and
    the verdict says so; the other roles are required.
    """

    candidate: str
    baseline: str
    floor: str
    oracle: str | None = None

    @property
    def arms(self) -> list[str]:
        """The role arms the verdict reads, in role order (no oracle when None)."""
        return [a for a in (self.candidate, self.baseline, self.floor, self.oracle) if a is not None]

    def to_json(self) -> dict:
        return attrs.asdict(self)


@attrs.frozen
class Criterion:
    """One line of the verdict.

    Attributes:
        name: Criterion id (``ttft_p95_improvement``, ``prefill_reduction``,
            ``throughput_regression``, ``wasted_hints``, ``headroom``,
            ``harness``).
        value: Measured value (fraction), or ``None`` when it could not be
            computed (missing data; see ``note``).
        threshold: The value compared against.
        op: ``">="``, ``"<"`` or ``">"``.
        passed: Whether ``value op threshold`` holds; ``None`` when not computed.
        ci: Bootstrap interval of ``value`` or ``None``.
        note: What was compared, in words.
    """

    name: str
    value: float | None
    threshold: float
    op: str
    passed: bool | None
    ci: CI | None = None
    note: str = ""

    def to_json(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["ci"] = self.ci.to_json() if self.ci else None
        return d


@attrs.frozen
class Verdict:
    """The gate's answer.

    Attributes:
        status: One of :data:`VERDICTS`.
        reasons: Why, one line each (failed criteria, missing arms, failures).
        criteria: Every criterion, in the rule's order.
        roles, thresholds: What the rule was evaluated with.
        seeds: Seeds used (those every role arm finished).
        info: Lines shown beside the rule, not in it (``policy_cost``: the
            candidate's own seconds per request against the floor's wall
            time per request).
        passes: Passes (repeats) per seed that every role arm finished.
        settled: Whether the verdict was judged on intervals (``settle``).
    """

    status: str
    reasons: tuple
    criteria: tuple
    roles: Roles
    thresholds: GateThresholds
    seeds: tuple
    info: tuple = ()
    passes: int = 1
    settled: bool = False

    def criterion(self, name: str) -> Criterion:
        """The criterion called ``name``.

        Raises:
            KeyError: no such criterion.
        """
        for c in self.criteria:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> dict:
        return {"status": self.status, "reasons": list(self.reasons),
                "rule": "(ttft_p95_improvement OR prefill_reduction) AND throughput_regression "
                        "AND wasted_hints; harness and headroom checked against the simulator",
                "criteria": [c.to_json() for c in self.criteria],
                "roles": self.roles.to_json(), "thresholds": self.thresholds.to_json(),
                "seeds": list(self.seeds), "info": [c.to_json() for c in self.info], "passes": self.passes,
                "settled": self.settled}


def _passes(value: float | None, op: str, threshold: float) -> bool | None:
    if value is None:
        return None
    v, threshold = round(value, 12), round(threshold, 12)
    return {">=": v >= threshold, "<": v < threshold, ">": v > threshold, "<=": v <= threshold}[op]




def _rel_drop(cand, base):
    """``1 - cand / base``, elementwise; NaN where base is 0."""
    cand, base = np.asarray(cand, dtype=float), np.asarray(base, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 - cand / base


def _by_arm_seed(cells: Iterable[Mapping]) -> tuple[dict, list]:
    """``({arm: {(seed, repeat): cell}}, failed cells)``; ``repeat`` is the
    cell's ``repeat`` field (0 when absent: the first pass)."""
    ok: dict[str, dict[tuple, Mapping]] = {}
    failed = []
    for c in cells:
        if c.get("error"):
            failed.append(c)
        else:
            ok.setdefault(c["arm"], {})[(int(c["seed"]), int(c.get("repeat") or 0))] = c
    return ok, failed


def _requests_aligned(cells_a: Sequence[Mapping], cells_b: Sequence[Mapping], field: str) -> list | None:
    """Per seed, an ``(n, 2)`` array of ``field`` of the same requests in arms a, b
    (matched by ``request_id``), or None if a cell lacks per-request records."""
    out = []
    for ca, cb in zip(cells_a, cells_b):
        ra, rb = ca.get("requests"), cb.get("requests")
        if not ra or not rb:
            return None
        b = {r["request_id"]: r for r in rb}
        try:
            rows = [(r[field], b[r["request_id"]][field]) for r in ra]
        except KeyError:
            return None
        if any(x is None or y is None for x, y in rows):
            return None
        out.append(np.asarray(rows, dtype=float))
    return out


def _seed_matrix(cells_a, cells_b, fn) -> list[np.ndarray]:
    """One stratum of seeds: rows (fn(cell_a), fn(cell_b))."""
    return [np.asarray([(fn(a), fn(b)) for a, b in zip(cells_a, cells_b)], dtype=float)]


def _ratio_of_means_stat(per_seed: Callable[[np.ndarray], np.ndarray]):
    """Statistic ``1 - mean_s(f(cand_s)) / mean_s(f(base_s))`` over per-seed strata."""

    def stat(drawn):
        c = np.mean([per_seed(d[..., 0]) for d in drawn], axis=0)
        b = np.mean([per_seed(d[..., 1]) for d in drawn], axis=0)
        return _rel_drop(c, b)

    return stat


def _seed_ratio_stat(drawn):
    d = drawn[0]
    return _rel_drop(d[..., 0].mean(axis=1), d[..., 1].mean(axis=1))




def evaluate(cells: Iterable[Mapping], *, roles: Roles, sim: Mapping | None = None,
             thresholds: GateThresholds = GateThresholds(), seeds: Sequence[int] | None = None,
             resamples: int = BOOTSTRAP_RESAMPLES, ci_seed: int = BOOTSTRAP_SEED,
             settle: bool = False) -> Verdict:
    """Judge the candidate from engine cells.

    Args:
        cells: Engine cell records (one per arm and seed): ``arm``, ``seed``,
            ``ttft_p95_s`` (s), ``prefill_tokens_recomputed`` (tokens),
            ``throughput_rps`` (requests/s), ``hints_issued``, ``hints_used``,
            ``token_hit_rate``, optional ``requests`` (per-request records with
            ``request_id``, ``prompt_tokens``, ``cached_tokens``, ``ttft_s``,
            ``e2e_s``) for request-level CIs, and ``error`` for a failed cell
            (``{"policy", "hook", "message"}``, or a str in older files); a
            failed role arm makes the verdict INCOMPLETE, its reason naming
            the arm, the seed, the hook and the message.
        sim: Simulator results for the same input: ``{"cells": [sim cells
            with arm, seed, token_hit_rate], "ceilings": [{"seed",
            "belady": {"token_hit_rate"}, ...}]}``; ``None`` skips the harness
            and headroom checks (noted in the verdict).
        roles: Arm names of candidate, baseline, floor and oracle.
        thresholds: :class:`GateThresholds`.
        seeds: Seeds the run was asked for (missing ones make it INCOMPLETE);
            default: every seed seen.
        resamples, ci_seed: Bootstrap resamples and RNG seed.
        settle: Judge by intervals, not point estimates (see below).

    Returns:
        :class:`Verdict`.

    Repeats: a cell may carry ``repeat`` (0, 1, ...: a further interleaved
    pass over the same seed, see :func:`spfcore.run.pipeline.run_gate`); each
    (seed, repeat) is one unit: "seed means" are means over units and each
    unit is one bootstrap stratum. ``min_seeds`` counts distinct seeds.

    Settled verdicts (``settle=True``): each rule criterion is *settled* when
    its 95% CI lies wholly on one side of its threshold (passed: the whole
    interval passes; failed: none of it does), else *open*. The rule is then
    evaluated in three-valued (Kleene) logic: SURVIVES when it holds whatever
    the open criteria turn out to be, FAILS when it fails whatever they turn
    out to be, else ``INCONCLUSIVE``, whose reasons name each open criterion
    that decides, its interval and :func:`repeats_to_settle`'s estimate. A
    criterion's interval there is the union of two: the paired bootstrap one
    described next (Efron & Tibshirani 1993, ch. 13: noise among the requests
    of a run) and the Student t-interval of its per-unit paired deltas
    (:func:`units_t_interval`: what moves whole runs, e.g. a slow spell of a
    shared machine or one seed's workload). With repeats the units are the
    (seed, repeat) pairs, run interleaved (every arm of a unit back to back,
    arm order rotated), so a slow spell hits every arm of a unit alike.

    CIs: request-paired where every cell used carries per-request records
    (requests resampled within each seed with the same indices for both arms:
    the arms served the identical request stream, so pairing removes the
    workload's own variation, and three seeds alone would give only 27
    distinct resamples). Requests of one session are correlated through the
    cache, so these intervals are on the narrow side. Throughput is resampled
    as ``throughput_rps * sum(e2e) / sum(e2e resampled)`` per seed (the
    request's service time stands in for its share of the wall time).
    Wasted hints have no per-request record and are seed-paired.
    """
    t = thresholds
    cells = list(cells)
    ok, failed = _by_arm_seed(cells)
    role_arms = roles.arms
    asked = sorted({int(s) for s in seeds} if seeds is not None else {int(c["seed"]) for c in cells})
    units = sorted({u for a in role_arms for u in ok.get(a, {}) if u[0] in asked})
    common_units = [u for u in units if all(u in ok.get(a, {}) for a in role_arms)]
    common = sorted({u[0] for u in common_units})
    reasons: list[str] = []
    notes: list[str] = []  # failures of arms the verdict does not read
    sim_failed = [c for c in (sim or {}).get("cells", ()) if c.get("error")]
    for where, c in [("", c) for c in failed] + [("simulator: ", c) for c in sim_failed]:
        line = f"{where}arm {c['arm']} seed {c['seed']} failed: {error_text(c['error'])}"
        if c["arm"] in role_arms:
            reasons.append(line)
        else:
            notes.append(f"{line} (not a role arm: the verdict does not depend on it)")
    for a in dict.fromkeys(role_arms):
        missing = [s for s in asked if (s, 0) not in ok.get(a, {})]
        if missing and not any(f["arm"] == a for f in failed):
            reasons.append(f"arm {a} has no result for seed(s) {', '.join(map(str, missing))}")
    if len(common) < t.min_seeds:
        reasons.append(f"{len(common)} seed(s) with every role arm, {t.min_seeds} required")
    incomplete = bool(reasons)
    reasons += notes

    def arm_cells(a):
        return [ok[a][u] for u in common_units]

    crit: list[Criterion] = []
    kw = dict(resamples=resamples, seed=ci_seed)
    have = bool(common)

    # 1. p95 TTFT improvement vs baseline
    val = ci = None
    if have:
        cand, base = arm_cells(roles.candidate), arm_cells(roles.baseline)
        if all(c.get("ttft_p95_s") is not None for c in cand + base):
            val = float(_rel_drop(np.mean([c["ttft_p95_s"] for c in cand]),
                                  np.mean([c["ttft_p95_s"] for c in base])))
            req = _requests_aligned(cand, base, "ttft_s")
            if req is not None:
                ci = bootstrap_ci(_ratio_of_means_stat(lambda x: np.percentile(x, 95, axis=-1)), req, **kw)
            else:
                ci = bootstrap_ci(_seed_ratio_stat,
                                  _seed_matrix(cand, base, lambda c: c["ttft_p95_s"]),
                                  method="paired-seeds", **kw)
    crit.append(Criterion("ttft_p95_improvement", val, t.ttft_p95_improvement, ">=",
                          _passes(val, ">=", t.ttft_p95_improvement), ci,
                          f"1 - p95 TTFT({roles.candidate}) / p95 TTFT({roles.baseline}), seed means"))

    # 2. prefill tokens recomputed reduction vs baseline
    val = ci = None
    if have:
        cand, base = arm_cells(roles.candidate), arm_cells(roles.baseline)
        val = float(_rel_drop(np.mean([c["prefill_tokens_recomputed"] for c in cand]),
                              np.mean([c["prefill_tokens_recomputed"] for c in base])))
        p = _requests_aligned(cand, base, "prompt_tokens")
        h = _requests_aligned(cand, base, "cached_tokens")
        if p is not None and h is not None:
            ci = bootstrap_ci(_ratio_of_means_stat(lambda x: x.sum(axis=-1)),
                              [pp - hh for pp, hh in zip(p, h)], **kw)
        else:
            ci = bootstrap_ci(_seed_ratio_stat,
                              _seed_matrix(cand, base, lambda c: c["prefill_tokens_recomputed"]),
                              method="paired-seeds", **kw)
    crit.append(Criterion("prefill_reduction", val, t.prefill_reduction, ">=",
                          _passes(val, ">=", t.prefill_reduction), ci,
                          f"1 - prefill recomputed({roles.candidate}) / ({roles.baseline}), seed means"))

    # 3. throughput regression vs floor
    val = ci = None
    if have:
        cand, floor = arm_cells(roles.candidate), arm_cells(roles.floor)
        if all(c.get("throughput_rps") for c in cand + floor):
            val = float(_rel_drop(np.mean([c["throughput_rps"] for c in cand]),
                                  np.mean([c["throughput_rps"] for c in floor])))
            e2e = _requests_aligned(cand, floor, "e2e_s")
            if e2e is not None and all(np.all(x.sum(axis=0) > 0) for x in e2e):
                # column 2, 3: the seed's measured throughput times the original e2e sum
                strata = []
                for x, c, f in zip(e2e, cand, floor):
                    k = np.array([c["throughput_rps"] * x[:, 0].sum(), f["throughput_rps"] * x[:, 1].sum()])
                    strata.append(np.column_stack([x, np.broadcast_to(k, x.shape)]))

                def thr_stat(drawn):
                    c = np.mean([d[..., 0, 2] / d[..., 0].sum(axis=-1) for d in drawn], axis=0)
                    f = np.mean([d[..., 0, 3] / d[..., 1].sum(axis=-1) for d in drawn], axis=0)
                    return _rel_drop(c, f)

                ci = bootstrap_ci(thr_stat, strata, **kw)
            else:
                ci = bootstrap_ci(_seed_ratio_stat,
                                  _seed_matrix(cand, floor, lambda c: c["throughput_rps"]),
                                  method="paired-seeds", **kw)
    crit.append(Criterion("throughput_regression", val, t.throughput_regression, "<",
                          _passes(val, "<", t.throughput_regression), ci,
                          f"1 - throughput({roles.candidate}) / throughput({roles.floor}), seed means"))

    # 4. wasted hints of the candidate
    val = ci = None
    if have:
        cand = arm_cells(roles.candidate)
        shares = [wasted_share(c) for c in cand]
        val = float(np.mean(shares))
        if not any(c.get("hints_issued") for c in cand):
            # no hint issued in any cell: the share is 0 by definition, not an estimate (nothing to
            # resample; a units-t interval of one seed would be [0, 1] and hold the verdict open)
            ci = CI(0.0, 0.0, BOOTSTRAP_LEVEL, 0, _EXACT_ZERO)
        else:
            ci = bootstrap_ci(lambda d: d[0][..., 0].mean(axis=-1), [np.asarray(shares)[:, None]],
                              method="seeds", **kw)
    crit.append(Criterion("wasted_hints", val, t.wasted_hints, "<", _passes(val, "<", t.wasted_hints), ci,
                          f"1 - hints_used / hints_issued of {roles.candidate} (0 if none issued), seed mean"))

    # 5. headroom and 6. harness, against the simulator
    sim_gap = None
    status_extra = None
    if sim is not None:
        sim_gap = _sim_gap(sim, roles.floor, common or asked)
    if sim_gap is None:
        note = "no simulator results" if sim is None else f"simulator lacks {roles.floor} or the Belady ceiling"
        crit.append(Criterion("headroom", None, t.no_headroom, ">", None, None, f"skipped: {note}"))
        crit.append(Criterion("harness", None, t.harness_fraction, ">=", None, None, f"skipped: {note}"))
    else:
        head_ok = _passes(sim_gap, ">", t.no_headroom)
        crit.append(Criterion("headroom", sim_gap, t.no_headroom, ">", head_ok, None,
                              f"simulator: Belady token hit rate - {roles.floor} token hit rate"))
        if not head_ok:
            status_extra = NO_HEADROOM
            reasons.append(f"simulated Belady is within {t.no_headroom:.0%} of {roles.floor} "
                           f"({sim_gap:+.4f} token hit rate): the workload offers no headroom")
        if roles.oracle is None:
            crit.append(Criterion("harness", None, t.harness_fraction, ">=", None, None,
                                  "skipped: no oracle arm in the run (--oracle none)"))
            reasons.append("note: harness check skipped: no oracle arm in the run")
        elif _passes(sim_gap, ">=", t.harness_min_headroom):
            need = t.harness_fraction * sim_gap
            val = ci = None
            if have:
                orc, floor = arm_cells(roles.oracle), arm_cells(roles.floor)
                val = float(np.mean([c["token_hit_rate"] for c in orc]) - np.mean([c["token_hit_rate"] for c in floor]))
                p = _requests_aligned(orc, floor, "prompt_tokens")
                h = _requests_aligned(orc, floor, "cached_tokens")
                if p is not None and h is not None:
                    strata = [np.column_stack([hh, pp]) for hh, pp in zip(h, p)]

                    def hit_stat(drawn):
                        o = np.mean([d[..., 0].sum(-1) / d[..., 2].sum(-1) for d in drawn], axis=0)
                        f = np.mean([d[..., 1].sum(-1) / d[..., 3].sum(-1) for d in drawn], axis=0)
                        return o - f

                    ci = bootstrap_ci(hit_stat, strata, **kw)
            ok_h = _passes(val, ">=", need)
            crit.append(Criterion("harness", val, need, ">=", ok_h, ci,
                                  f"engine: {roles.oracle} - {roles.floor} token hit rate, needs "
                                  f"{t.harness_fraction:g} x simulated gap {sim_gap:.4f}"))
            if ok_h is False and status_extra is None:
                status_extra = INVALID_HARNESS
                reasons.append(f"engine oracle gains {val:+.4f} token hit rate over {roles.floor}, "
                               f"less than {t.harness_fraction:g} x the simulator's {sim_gap:.4f}: "
                               "the engine harness does not let policies act")
        else:
            crit.append(Criterion("harness", None, t.harness_fraction, ">=", None, None,
                                  f"not applied: simulated gap {sim_gap:.4f} < {t.harness_min_headroom}"))

    info = (_policy_cost(arm_cells(roles.candidate) if have else [], arm_cells(roles.floor) if have else [],
                         roles, t),)
    if settle and have:
        crit = _with_unit_intervals(crit, arm_cells, roles)
    by = {c.name: c for c in crit}
    if settle and have and info[0].value is not None:
        # Settled mode judges throughput by the candidate's own cost per request: the engine's throughput
        # (still listed) needed 24 to ~100,000 more passes to settle < 1% on a shared machine
        # (results/cpu-quick-gate-x5), while the policy's seconds barely move with machine noise.
        pc = info[0]
        lo, hi = units_t_interval([(c["policy_seconds"] / c["num_requests"] - f["policy_seconds"] / f["num_requests"])
                                   * f["throughput_rps"] for c, f in zip(arm_cells(roles.candidate),
                                                                         arm_cells(roles.floor))])
        info = (attrs.evolve(pc, passed=_passes(pc.value, "<", pc.threshold), ci=CI(lo, hi, 0.95, 0, "units-t"),
                             note=pc.note.replace("informative, not in the rule", "decides throughput (settled)")),)
        by["throughput_regression"] = info[0]
    rule = bool((by["ttft_p95_improvement"].passed or by["prefill_reduction"].passed)
                and by["throughput_regression"].passed and by["wasted_hints"].passed)
    tri = {n: _settled(by[n]) if settle else by[n].passed for n in RULE_CRITERIA}
    either = _or(tri["ttft_p95_improvement"], tri["prefill_reduction"])
    rule3 = _and(either, tri["throughput_regression"], tri["wasted_hints"])
    if incomplete:
        status = INCOMPLETE
    elif status_extra is not None:
        status = status_extra
    elif settle and rule3 is None:
        status = INCONCLUSIVE
        open_ = ([n for n in ("ttft_p95_improvement", "prefill_reduction") if tri[n] is None] if either is None else [])
        open_ += [n for n in ("throughput_regression", "wasted_hints") if tri[n] is None]
        units = len(common_units) // max(1, len(common))  # passes (repeats) per seed
        for n in open_:
            c = by[n]
            more = repeats_to_settle(c, units)
            ci_s = f"[{c.ci.low:+.4f}, {c.ci.high:+.4f}]" if c.ci else "(no interval)"
            reasons.append(f"{c.name} {_f4(c.value)}: its {BOOTSTRAP_LEVEL:.0%} CI {ci_s} contains the threshold "
                           f"{c.op} {c.threshold:g}; "
                           + (f"about {more} more pass(es) over the {len(common)} seed(s) would likely settle it"
                              if more is not None else
                              "one unit gives no bounded interval: more seeds or passes (--budget) are needed"
                              if c.ci is not None and not (np.isfinite(c.ci.low) and np.isfinite(c.ci.high))
                              else "more repeats are unlikely to settle it (the estimate sits on the threshold)"))
    else:
        status = SURVIVES if (rule3 if settle else rule) else FAILS
        if status == FAILS:
            if not either:
                reasons.append("neither p95 TTFT improvement nor prefill reduction vs "
                               f"{roles.baseline} reaches its threshold")
            for n in ("throughput_regression", "wasted_hints"):
                if tri[n] is False:
                    reasons.append(f"{by[n].name} {_f4(by[n].value)} is not {by[n].op} {by[n].threshold}")
    if not incomplete and not settle:
        for c in crit:  # a verdict resting on a point estimate whose interval straddles the line
            if c.ci is not None and c.value is not None and c.ci.low < c.threshold < c.ci.high:
                reasons.append(f"note: {c.name} {c.value:+.4f} {'passes' if c.passed else 'fails'} on its point "
                               f"estimate, but its {c.ci.level:.0%} CI [{c.ci.low:+.4f}, {c.ci.high:+.4f}] "
                               f"contains the threshold {c.threshold}: more seeds or a quieter machine would "
                               "settle it")
    return Verdict(status, tuple(reasons), tuple(crit), roles, thresholds, tuple(common), info,
                   len(common_units) // max(1, len(common)), settle)


#: Two-sided 95% quantiles of Student's t, df = 1..30 (any statistics table, e.g. NIST/SEMATECH
#: e-Handbook of Statistical Methods, table 1.3.6.7.2); beyond 30, the Cornish-Fisher expansion.
def _with_unit_intervals(crit: list, arm_cells: Callable, roles: Roles) -> list:
    """Settled mode: widen each rule criterion's interval to cover also the
    t-interval of its per-unit deltas (:func:`units_t_interval`). The
    request-level bootstrap sees the noise among requests of one run; the
    unit interval sees what moves a whole run (a slow spell of a shared
    machine, one seed's workload), which the bootstrap misses: in a run
    where every arm hit 0% of tokens, p95 TTFT read 25% better for one arm
    at 0.8 x capacity and its request-level interval excluded 0."""
    cand, base, floor = arm_cells(roles.candidate), arm_cells(roles.baseline), arm_cells(roles.floor)

    def drops(a, b, f):
        return [float(_rel_drop(x[f], y[f])) if x.get(f) is not None and y.get(f) else None for x, y in zip(a, b)]

    per_unit = {"ttft_p95_improvement": drops(cand, base, "ttft_p95_s"),
                "prefill_reduction": drops(cand, base, "prefill_tokens_recomputed"),
                "throughput_regression": drops(cand, floor, "throughput_rps"),
                "wasted_hints": [wasted_share(c) for c in cand]}
    out = []
    for c in crit:
        if c.name in per_unit and c.ci is not None and c.value is not None and c.ci.method != _EXACT_ZERO:
            lo, hi = units_t_interval(per_unit[c.name])
            least, most = CRITERION_RANGE[c.name]  # a t-interval knows no bounds: +4.79 for 1 - p95/p95
            lo, hi = min(max(lo, least), most), max(min(hi, most), least)
            c = attrs.evolve(c, ci=attrs.evolve(c.ci, low=float(min(c.ci.low, lo)), high=float(max(c.ci.high, hi)),
                                                 method=f"{c.ci.method} + units-t"))
        out.append(c)
    return out


def _f4(x) -> str:
    return "n/a" if x is None else f"{x:+.4f}"


def _settled(c: Criterion) -> bool | None:
    """True / False when ``c``'s interval lies wholly on the passing / failing
    side of its threshold, None when it contains the threshold (or ``c`` has
    no value). A criterion without an interval is judged on its value; an
    interval with an infinite bound (one unit: a t-interval of one value) still
    settles on the side its finite bound and the threshold allow."""
    if c.value is None:
        return None
    if c.ci is None:
        return c.passed
    lo, hi = _passes(c.ci.low, c.op, c.threshold), _passes(c.ci.high, c.op, c.threshold)
    return lo if lo == hi else None


def _or(*xs):
    return True if any(x is True for x in xs) else (False if all(x is False for x in xs) else None)


def _and(*xs):
    return False if any(x is False for x in xs) else (True if all(x is True for x in xs) else None)


def repeats_to_settle(c: Criterion, passes: int) -> int | None:
    """Further passes over the seeds likely to move ``c``'s interval off its
    threshold: a CI's half-width ``h`` shrinks as ``1/sqrt(n)`` in the number of
    independent units ``n`` (the central limit theorem; Efron & Tibshirani
    1993, ch. 5), so the interval clears a threshold ``d = |value -
    threshold|`` away once ``n`` grows by ``(h / d)**2``. With ``passes``
    passes so far: ``ceil(passes * (h / d)**2) - passes`` (>= 1). None when
    ``d`` is 0 or ``c`` has no interval (no finite number of passes will do)."""
    if c.ci is None or c.value is None or not np.isfinite(c.ci.high - c.ci.low):
        return None
    d = abs(c.value - c.threshold)
    if d <= 1e-12:
        return None
    h = (c.ci.high - c.ci.low) / 2
    return max(1, int(np.ceil(passes * (h / d) ** 2)) - passes)


def _policy_cost(cand: Sequence[Mapping], floor: Sequence[Mapping], roles: Roles, t: GateThresholds) -> Criterion:
    """What the candidate's own code costs, apart from the engine's noise:
    ``(policy s/request of the candidate - of the floor) / (wall s/request of
    the floor)``, seed means, where policy seconds are the adapter's
    ``policy_seconds`` (hooks, evictor bookkeeping, re-scoring: CPU time spent
    in spfcore inside the engine step) and wall s/request is ``1 /
    throughput_rps``. This is the throughput regression the policy itself
    explains; it barely moves with machine load, unlike ``throughput_regression``.
    Shown beside the rule, not part of it (``passed`` is None)."""
    ok = cand and floor and all(c.get("policy_seconds") is not None and c.get("num_requests")
                                and c.get("throughput_rps") for c in [*cand, *floor])
    if not ok:
        return Criterion("policy_cost", None, t.throughput_regression, "<", None, None,
                         "not shown: cells lack policy_seconds")
    per = [np.mean([c["policy_seconds"] / c["num_requests"] for c in cs]) for cs in (cand, floor)]
    wall = np.mean([1.0 / c["throughput_rps"] for c in floor])
    val = float((per[0] - per[1]) / wall)
    return Criterion("policy_cost", val, t.throughput_regression, "<", None, None,
                     f"(policy s/req({roles.candidate}) - policy s/req({roles.floor})) / wall s/req({roles.floor}): "
                     f"{1e3 * per[0]:.3f} - {1e3 * per[1]:.3f} ms of {1e3 * wall:.2f} ms; informative, not in the rule")


def _sim_gap(sim: Mapping, floor: str, seeds: Sequence[int]) -> float | None:
    """Mean over seeds of (simulated Belady token hit rate - simulated floor's)."""
    floor_hit = {int(c["seed"]): c["token_hit_rate"] for c in sim.get("cells", ())
                 if c.get("arm") == floor and not c.get("error")}
    bel = {int(c["seed"]): c["belady"]["token_hit_rate"] for c in sim.get("ceilings", ())
           if (c.get("belady") or {}).get("token_hit_rate") is not None}
    use = [s for s in seeds if s in floor_hit and s in bel]
    if not use:
        return None
    return float(np.mean([bel[s] - floor_hit[s] for s in use]))
