"""The survival gate's arithmetic on hand-built cells (no engine)."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from spfcore import gate, report
from spfcore.gate import GateThresholds, bootstrap_ci
from spfcore.presets import SEED_ROLES

SEEDS = (42, 43, 44)
ARMS = ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle")


def cell(arm, seed, *, p95=1.0, prefill=1000, thr=1.0, hit=0.0, issued=0, used=0, **extra):
    return {"arm": arm, "seed": seed, "ttft_p95_s": p95, "prefill_tokens_recomputed": prefill,
            "throughput_rps": thr, "token_hit_rate": hit, "hints_issued": issued,
            "hints_used": used, **extra}


def evaluate(cells, **kw):
    """The rule with the seed's roles unless a test gives others."""
    return gate.evaluate(cells, **{"roles": SEED_ROLES, **kw})


def grid(**per_arm):
    """Cells for every arm and seed; ``per_arm[arm]`` overrides fields (a
    value may be a tuple: one per seed)."""
    out = []
    for arm in ARMS:
        for i, s in enumerate(SEEDS):
            kw = {k: (v[i] if isinstance(v, tuple) else v) for k, v in per_arm.get(arm, {}).items()}
            out.append(cell(arm, s, **kw))
    return out


def sim(belady=0.34, lru=0.04):
    return {"cells": [{"arm": "lru", "seed": s, "token_hit_rate": lru} for s in SEEDS],
            "ceilings": [{"seed": s, "belady": {"token_hit_rate": belady},
                          "infinite": {"token_hit_rate": 0.5}} for s in SEEDS]}


# the engine's oracle gains 0.15 = half of the simulated 0.30 unless a test says otherwise
ORACLE_OK = {"belady_oracle": {"hit": 0.19}, "lru": {"hit": 0.04}}


def run(**per_arm):
    return evaluate(grid(**{**ORACLE_OK, **per_arm}), sim=sim(), seeds=SEEDS, resamples=200)


def test_prefill_reduction_exactly_at_threshold_survives():
    v = run(spf_expected_utility={"prefill": 900})
    c = v.criterion("prefill_reduction")
    assert c.value == pytest.approx(0.10) and c.passed is True
    assert v.criterion("ttft_p95_improvement").value == 0.0
    assert v.status == gate.SURVIVES, v.reasons


def test_prefill_reduction_just_below_threshold_fails():
    v = run(spf_expected_utility={"prefill": 901})
    assert v.criterion("prefill_reduction").value == pytest.approx(0.099)
    assert v.criterion("prefill_reduction").passed is False
    assert v.status == gate.FAILS
    assert any("neither" in r for r in v.reasons)


def test_ttft_p95_improvement_edges():
    assert run(spf_expected_utility={"p95": 0.95}).status == gate.SURVIVES
    v = run(spf_expected_utility={"p95": 0.951})
    assert v.criterion("ttft_p95_improvement").value == pytest.approx(0.049)
    assert v.status == gate.FAILS


def test_seed_values_are_averaged_before_the_delta():
    # per seed 20%, 0%, 10% reduction: the means 900 vs 1000 give exactly 10%
    v = run(spf_expected_utility={"prefill": (800, 1000, 900)})
    assert v.criterion("prefill_reduction").value == pytest.approx(0.10)
    assert v.status == gate.SURVIVES
    # p95: means 0.95 vs (1.1, 0.9, 1.0) -> 1 - 0.95 / 1.0
    v = run(spf_expected_utility={"p95": (0.9, 1.0, 0.95)}, session_ttl={"p95": (1.1, 0.9, 1.0)})
    assert v.criterion("ttft_p95_improvement").value == pytest.approx(0.05)
    assert v.criterion("ttft_p95_improvement").passed is True


def test_throughput_regression_is_strict_and_against_the_floor():
    v = run(spf_expected_utility={"prefill": 500, "thr": 0.99})
    c = v.criterion("throughput_regression")
    assert c.value == pytest.approx(0.01) and c.passed is False and c.op == "<"
    assert v.status == gate.FAILS
    v = run(spf_expected_utility={"prefill": 500, "thr": 0.991})
    assert v.criterion("throughput_regression").value == pytest.approx(0.009)
    assert v.status == gate.SURVIVES
    # a slow baseline does not matter: the floor is lru
    v = run(spf_expected_utility={"prefill": 500, "thr": 0.991}, session_ttl={"thr": 0.5})
    assert v.status == gate.SURVIVES


def test_wasted_hints():
    assert gate.wasted_share({"hints_issued": 0, "hints_used": 0}) == 0.0
    assert gate.wasted_share({"hints_issued": 8, "hints_used": 6}) == 0.25
    v = run(spf_expected_utility={"prefill": 500, "issued": 10, "used": 9})
    c = v.criterion("wasted_hints")
    assert c.value == pytest.approx(0.10) and c.passed is False
    assert v.status == gate.FAILS
    # per seed 0, 0.1, 0.05 (issued 0 counts as 0 wasted) -> mean 0.05
    v = run(spf_expected_utility={"prefill": 500, "issued": (0, 10, 20), "used": (0, 9, 19)})
    assert v.criterion("wasted_hints").value == pytest.approx(0.05)
    assert v.status == gate.SURVIVES


def test_invalid_harness_when_engine_oracle_gains_less_than_half_the_simulated_gap():
    # simulated gap 0.30, engine oracle 0.18 - 0.04 = 0.14 < 0.15
    v = run(spf_expected_utility={"prefill": 500}, belady_oracle={"hit": 0.18})
    h = v.criterion("harness")
    assert h.value == pytest.approx(0.14) and h.threshold == pytest.approx(0.15)
    assert h.passed is False
    assert v.status == gate.INVALID_HARNESS
    # exactly half passes
    assert run(spf_expected_utility={"prefill": 500}).status == gate.SURVIVES


def test_harness_not_applied_below_five_points():
    cells = grid(spf_expected_utility={"prefill": 500})  # engine oracle gains nothing
    v = evaluate(cells, sim=sim(belady=0.0849, lru=0.04), seeds=SEEDS, resamples=50)
    assert v.criterion("harness").passed is None
    assert v.criterion("headroom").value == pytest.approx(0.0449)
    assert v.status == gate.SURVIVES
    v = evaluate(cells, sim=sim(belady=0.09, lru=0.04), seeds=SEEDS, resamples=50)
    assert v.status == gate.INVALID_HARNESS


def test_no_headroom_within_one_point():
    cells = grid(spf_expected_utility={"prefill": 500})
    v = evaluate(cells, sim=sim(belady=0.05, lru=0.04), seeds=SEEDS, resamples=50)
    assert v.criterion("headroom").value == pytest.approx(0.01)
    assert v.criterion("headroom").passed is False
    assert v.status == gate.NO_HEADROOM
    v = evaluate(cells, sim=sim(belady=0.0502, lru=0.04), seeds=SEEDS, resamples=50)
    assert v.status == gate.SURVIVES


def test_incomplete_missing_seed_missing_arm_and_failure():
    cells = [c for c in grid(spf_expected_utility={"prefill": 500}, **ORACLE_OK) if c["seed"] != 44]
    v = evaluate(cells, sim=sim(), seeds=SEEDS, resamples=50)
    assert v.status == gate.INCOMPLETE
    assert v.seeds == (42, 43)
    assert any("seed(s) 44" in r for r in v.reasons)
    # the criteria are still computed on the seeds there are
    assert v.criterion("prefill_reduction").value == pytest.approx(0.5)

    cells = [c for c in grid(**ORACLE_OK) if c["arm"] != "belady_oracle"]
    v = evaluate(cells, sim=sim(), seeds=SEEDS, resamples=50)
    assert v.status == gate.INCOMPLETE and any("belady_oracle" in r for r in v.reasons)

    # a failed arm the verdict does not read (frequency is no role) is listed, not INCOMPLETE
    cells = grid(spf_expected_utility={"prefill": 500}, **ORACLE_OK)
    cells[6] = {"arm": "frequency", "seed": 42, "error": "PolicyError: boom"}
    assert cells[7]["arm"] == "frequency"
    v = evaluate(cells, sim=sim(), seeds=SEEDS, resamples=50)
    assert v.status == gate.SURVIVES
    assert v.reasons == ("arm frequency seed 42 failed: PolicyError: boom "
                         "(not a role arm: the verdict does not depend on it)",)
    # a failed role arm (the candidate): INCOMPLETE, naming the arm, the hook and the message
    cells = grid(spf_expected_utility={"prefill": 500}, **ORACLE_OK)
    i = next(i for i, c in enumerate(cells) if c["arm"] == "spf_expected_utility" and c["seed"] == 43)
    cells[i] = {"arm": "spf_expected_utility", "seed": 43, "status": "error",
                "error": {"policy": "spf_expected_utility", "hook": "spfcore_score_blocks", "message": "boom"}}
    v = evaluate(cells, sim=sim(), seeds=SEEDS, resamples=50)
    assert v.status == gate.INCOMPLETE
    assert v.reasons[0] == "arm spf_expected_utility seed 43 failed: boom [hook spfcore_score_blocks]"
    assert report.error_text({"policy": "p", "hook": "h", "message": "hook h raised"}) == "hook h raised"


def test_min_seeds_and_roles_are_configurable():
    cells = [c for c in grid(spf_expected_utility={"prefill": 500}, **ORACLE_OK) if c["seed"] == 42]
    assert evaluate(cells, sim=sim(), resamples=50).status == gate.INCOMPLETE
    v = evaluate(cells, sim=sim(), thresholds=GateThresholds(min_seeds=1), resamples=50)
    assert v.status == gate.SURVIVES
    # frequency as candidate: equal to session_ttl -> fails
    v = evaluate(cells, sim=sim(), roles=attrs.evolve(SEED_ROLES, candidate="frequency"),
                 thresholds=GateThresholds(min_seeds=1), resamples=50)
    assert v.status == gate.FAILS


def test_without_simulator_the_checks_are_skipped():
    v = evaluate(grid(spf_expected_utility={"prefill": 500}), seeds=SEEDS, resamples=50)
    assert v.criterion("harness").passed is None and "skipped" in v.criterion("harness").note
    assert v.status == gate.SURVIVES


# ------------------------------------------------------------------ bootstrap


def test_bootstrap_of_constant_data_is_a_point():
    ci = bootstrap_ci(lambda d: d[0][..., 0].mean(-1), [np.full((5, 1), 3.0)], resamples=100)
    assert (ci.low, ci.high, ci.resamples, ci.level) == (3.0, 3.0, 100, 0.95)


def test_bootstrap_errors():
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci(lambda d: d[0], [np.zeros((0, 1))])
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_ci(lambda d: d[0], [np.zeros((2, 1))], resamples=0)


def _request_cells():
    """Cells with per-request records; every summary field derived from them."""
    rng = np.random.default_rng(7)
    cells = []
    hit_share = {"lru": 0.0, "session_ttl": 0.1, "frequency": 0.1, "spf_expected_utility": 0.35,
                 "belady_oracle": 0.4}
    for arm in ARMS:
        for s in SEEDS:
            reqs = []
            for i in range(40):
                prompt = 1024
                cached = int(prompt * hit_share[arm] * rng.uniform(0, 2)) // 32 * 32
                ttft = 0.01 + 0.3 * (prompt - cached) / prompt + rng.uniform(0, 0.02)
                reqs.append({"request_id": f"r{i}", "prompt_tokens": prompt, "cached_tokens": cached,
                             "ttft_s": ttft, "e2e_s": ttft + 0.2})
            p, h = sum(r["prompt_tokens"] for r in reqs), sum(r["cached_tokens"] for r in reqs)
            cells.append({"arm": arm, "seed": s, "requests": reqs, "token_hit_rate": h / p,
                          "prefill_tokens_recomputed": p - h,
                          "ttft_p95_s": float(np.percentile([r["ttft_s"] for r in reqs], 95)),
                          "throughput_rps": len(reqs) / sum(r["e2e_s"] for r in reqs),
                          "hints_issued": 10, "hints_used": 9 if s != 43 else 10})
    return cells


def test_request_bootstrap_contains_the_estimate_and_is_deterministic():
    cells = _request_cells()
    s = {"cells": [{"arm": "lru", "seed": x, "token_hit_rate": 0.0} for x in SEEDS],
         "ceilings": [{"seed": x, "belady": {"token_hit_rate": 0.4}} for x in SEEDS]}
    v1 = evaluate(cells, sim=s, seeds=SEEDS)
    v2 = evaluate(cells, sim=s, seeds=SEEDS)
    assert v1 == v2
    for name in ("ttft_p95_improvement", "prefill_reduction", "throughput_regression", "harness"):
        c = v1.criterion(name)
        assert c.ci.method == "paired-requests", name
        assert c.ci.resamples == 2000
        assert c.ci.low <= c.value <= c.ci.high, (name, c)
        assert c.ci.low < c.ci.high, name
    w = v1.criterion("wasted_hints")
    assert w.value == pytest.approx(0.2 / 3)
    assert w.ci.low <= w.value <= w.ci.high and w.ci.method == "seeds"
    # another RNG seed draws other resamples
    v3 = evaluate(cells, sim=s, seeds=SEEDS, ci_seed=1)
    assert v3.criterion("prefill_reduction").ci != v1.criterion("prefill_reduction").ci
    assert v3.criterion("prefill_reduction").value == v1.criterion("prefill_reduction").value


def test_seed_bootstrap_without_request_records():
    v = run(spf_expected_utility={"prefill": (800, 1000, 900)})
    c = v.criterion("prefill_reduction")
    assert c.ci.method == "paired-seeds"
    # resampling 3 seeds: the extremes are all-800 (0.2) and all-1000 (0.0)
    assert 0.0 <= c.ci.low <= c.value <= c.ci.high <= 0.2


def test_verdict_json_lists_every_criterion():
    d = run(spf_expected_utility={"prefill": 900}).to_json()
    assert d["status"] == "SURVIVES"
    assert [c["name"] for c in d["criteria"]] == ["ttft_p95_improvement", "prefill_reduction",
                                                  "throughput_regression", "wasted_hints",
                                                  "headroom", "harness"]
    assert d["thresholds"]["prefill_reduction"] == 0.10 and d["roles"]["floor"] == "lru"
    assert set(d["criteria"][1]) == {"name", "value", "threshold", "op", "passed", "ci", "note"}


def test_a_verdict_on_a_straddling_interval_carries_a_note():
    # throughput per seed 1.2, 0.9, 0.9 vs lru 1.0: mean regression 0.0 < 0.01 passes, but
    # resampling seeds reaches 0.1 (all 0.9) and -0.2 (all 1.2): the interval contains 0.01
    v = run(spf_expected_utility={"prefill": 500, "thr": (1.2, 0.9, 0.9)})
    c = v.criterion("throughput_regression")
    assert c.passed is True and c.ci.low < 0.01 < c.ci.high
    assert v.status == gate.SURVIVES
    notes = [r for r in v.reasons if r.startswith("note: throughput_regression")]
    assert len(notes) == 1 and "contains the threshold 0.01" in notes[0]
    # a clear result carries no note
    v = run(spf_expected_utility={"prefill": 500})
    assert not [r for r in v.reasons if r.startswith("note:")]
