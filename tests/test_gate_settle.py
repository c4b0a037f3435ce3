"""Settled verdicts, repeats and a missing oracle (issue 15), on hand-built
cells and the deterministic stand-in engine of test_gate_runner (no vLLM)."""

from __future__ import annotations

import json
import math

import attrs

import pytest

from spfcore import gate
from spfcore.gate import CI, Criterion, repeats_to_settle
from spfcore.presets import SEED_ROLES
from spfcore.cli.gate import _budget
from tests.test_gate import ORACLE_OK, SEEDS, evaluate, grid, sim
from spfcore.run.spec import GateConfigError
from tests.test_gate_runner import config, run


def settled(**per_arm):
    return evaluate(grid(**{**ORACLE_OK, **per_arm}), sim=sim(), seeds=SEEDS, resamples=400, settle=True)


def test_an_interval_across_the_threshold_is_inconclusive_and_says_how_many_more_passes():
    # per seed 20%, 0%, 10% reduction: the point estimate is exactly 10% (SURVIVES on points),
    # but resampling the 3 seeds gives [0, 0.2], across the 10% line; the p95 TTFT criterion is
    # settled as failed ([0, 0], < 5%), so prefill decides
    point = evaluate(grid(**{**ORACLE_OK, "spf_expected_utility": {"prefill": (800, 1000, 900)}}), sim=sim(),
                     seeds=SEEDS, resamples=400)
    assert point.status == gate.SURVIVES
    v = settled(spf_expected_utility={"prefill": (800, 1000, 900)})
    assert v.status == gate.INCONCLUSIVE and v.settled and v.passes == 1
    c = v.criterion("prefill_reduction")
    assert c.ci.low < 0.10 < c.ci.high
    (line,) = [r for r in v.reasons if r.startswith("prefill_reduction")]
    assert "contains the threshold >= 0.1" in line and "sits on the threshold" in line  # value is exactly 0.10


def test_settled_intervals_give_survives_and_fails():
    assert settled(spf_expected_utility={"prefill": 500}).status == gate.SURVIVES
    v = settled(spf_expected_utility={"prefill": 500, "thr": 0.9})
    assert v.status == gate.FAILS and any(r.startswith("throughput_regression +0.1000") for r in v.reasons)
    # the OR needs one settled pass: p95 settled, prefill open -> SURVIVES
    v = settled(spf_expected_utility={"p95": 0.5, "prefill": (800, 1000, 900)})
    assert v.status == gate.SURVIVES


def test_repeats_to_settle_follows_the_square_root_law():
    c = Criterion("x", 0.12, 0.10, ">=", True, CI(0.07, 0.17, 0.95, 100, "paired-requests"))
    # half-width 0.05, margin 0.02: n must grow by (0.05 / 0.02)^2 = 6.25 -> ceil(2 * 6.25) - 2 = 11
    assert repeats_to_settle(c, 2) == 11
    assert repeats_to_settle(Criterion("x", 0.10, 0.10, ">=", True, c.ci), 1) is None
    assert repeats_to_settle(Criterion("x", 0.12, 0.10, ">=", True, None), 1) is None


def test_repeat_cells_are_units_of_their_seed():
    cells = grid(**{**ORACLE_OK, "spf_expected_utility": {"prefill": 500}})
    cells += [{**c, "repeat": 1} for c in cells]
    v = evaluate(cells, sim=sim(), seeds=SEEDS, resamples=200, settle=True)
    assert v.status == gate.SURVIVES and v.passes == 2 and v.seeds == SEEDS
    # a repeat alone does not make up for a missing first pass of a seed
    no42 = [c for c in cells if not (c["seed"] == 42 and c["arm"] == "lru" and not c.get("repeat"))]
    v = evaluate(no42, sim=sim(), seeds=SEEDS, resamples=200, settle=True)
    assert v.status == gate.INCOMPLETE and any("lru has no result for seed(s) 42" in r for r in v.reasons)


def test_a_missing_oracle_skips_the_harness_check_and_says_so():
    cells = [c for c in grid(spf_expected_utility={"prefill": 500}) if c["arm"] != "belady_oracle"]
    v = evaluate(cells, sim=sim(), roles=attrs.evolve(SEED_ROLES, oracle=None), seeds=SEEDS, resamples=200)
    assert v.status == gate.SURVIVES
    h = v.criterion("harness")
    assert h.value is None and h.passed is None and "no oracle arm" in h.note
    assert "note: harness check skipped: no oracle arm in the run" in v.reasons
    assert v.criterion("headroom").passed is True  # the simulator's Belady ceiling still gives headroom


def test_policy_cost_is_shown_apart_from_throughput():
    cells = grid(**{**ORACLE_OK, "spf_expected_utility": {"prefill": 500, "thr": 0.95}})
    for c in cells:  # 24 requests; spf spends 2.4 ms in spfcore per run, lru 0.24 ms; lru: 1 s per request
        c.update(num_requests=24, policy_seconds=0.0024 if c["arm"] == "spf_expected_utility" else 0.00024)
    v = evaluate(cells, sim=sim(), seeds=SEEDS, resamples=200)
    (pc,) = v.info
    assert pc.name == "policy_cost" and pc.passed is None
    assert pc.value == pytest.approx((0.0001 - 0.00001) / 1.0)  # 0.009%: the 5% regression is not the policy's
    assert v.criterion("throughput_regression").value == pytest.approx(0.05)
    assert v.to_json()["info"][0]["name"] == "policy_cost"


def test_budget_option():
    assert _budget("3") == (3, None) and _budget(" 900s") == (1000, 900.0)
    import click

    for bad in ("0", "x", "-5s", "0s"):
        with pytest.raises(click.BadParameter, match="--budget|passes"):
            _budget(bad)


def test_gate_repeats_interleaved_passes_until_settled(tmp_path):
    # the stand-in engine: spf's prefill reduction vs session_ttl is 0.125 per seed, but within a seed
    # requests are t0 (no hit for anyone) or t1, so one pass's request-level interval crosses 0.10
    log = []
    one = run(config(settle=True), tmp_path / "a.json", log)
    v = one["verdict"]
    assert v["status"] == "INCONCLUSIVE" and v["passes"] == 1
    assert any(r.startswith("prefill_reduction +0.1250") and "more pass(es)" in r for r in v["reasons"])
    log = []
    res = run(config(settle=True, max_passes=12), tmp_path / "b.json", log)
    v = res["verdict"]
    runs = [x for x in log if x[0] not in ("sim", "use_policy")]
    passes = res["run"]["passes"]
    assert v["status"] == "SURVIVES" and 1 < passes < 12 and v["passes"] == passes
    assert len(runs) == 1 + 12 * passes  # warm-up once: one engine for every pass
    assert [c.get("repeat", 0) for c in res["cells"]] == [p for p in range(passes) for _ in range(12)]
    # pass 1 rotates the arm order one further than pass 0
    assert runs[13:17] == [("session_ttl", 1), ("spf_expected_utility", 1), ("belady_oracle", 1), ("lru", 1)]
    # the same command again reuses every cell and runs nothing
    log2 = []
    again = run(config(settle=True, max_passes=12), tmp_path / "b.json", log2)
    assert [x for x in log2 if x[0] != "use_policy"] == []
    assert again["run"]["reused_cells"] == again["run"]["cells"] == 12 + 3 + 12 * passes
    assert again["verdict"]["status"] == "SURVIVES"


def test_a_run_without_the_oracle_arm(tmp_path):
    arms = ("lru", "session_ttl", "spf_expected_utility")
    res = run(config(arms=arms, roles=attrs.evolve(SEED_ROLES, oracle=None)), tmp_path / "r.json", [])
    v = res["verdict"]
    assert v["status"] == "SURVIVES" and v["roles"]["oracle"] is None
    assert "skipped: no oracle arm" in v["criteria"][5]["note"]


def test_load_levels_scale_poisson_arrivals_by_the_measured_capacity(tmp_path):
    from spfcore.run.pipeline import run_load_gate
    from tests.test_gate_runner import ceilings_fn, factory, sim_fn

    log, opened = [], []
    out = tmp_path / "load" / "results.json"
    doc = run_load_gate(config(), out, (0.5, 0.8), ttft_slo_s=0.09, engine_factory=factory(log, opened=opened),
                        sim_fn=sim_fn(log), ceilings_fn=ceilings_fn, progress=False, plots=True)
    # capacity: the stand-in lru run of seed 1's 8 requests, no hits: 8 / (8 * 0.2 s) = 5 req/s
    assert doc["capacity_rps"] == pytest.approx(5.0) and doc["capacity_measured"]
    assert [lv["rate_rps"] for lv in doc["levels"]] == [2.5, 4.0]
    assert doc["judged_load"] == 0.5 and doc["verdict"]["load"] == 0.5
    # each level is a timed gate on a Poisson workload at its rate
    lv = json.loads((tmp_path / "load" / "load-0.8" / "results.json").read_text())
    assert lv["config"]["mode"] == "timed"
    assert lv["config"]["workload_flags"]["arrival"] == "poisson" and lv["config"]["workload_flags"]["rate"] == 4.0
    arr = [r["arrival_s"] for r in lv["cells"][0]["requests"]]
    assert arr == sorted(arr) and arr[-1] > 0
    # goodput under a 90 ms SLO: spf's turn-1 requests (TTFT 0.1 - 0.032 s) meet it, its turn-0 (0.1 s) do not
    s = doc["levels"][0]["summary"]
    assert s["lru"]["goodput_rps"] == 0.0 and s["spf_expected_utility"]["goodput_rps"] > 0
    assert (tmp_path / "load" / "ttft_p95_vs_load.png").exists()
    # the capacity is measured once: a second call reads capacity.json and reuses every cell
    log2 = []
    doc2 = run_load_gate(config(), out, (0.5, 0.8), engine_factory=factory(log2), sim_fn=sim_fn(log2),
                         ceilings_fn=ceilings_fn, progress=False, plots=False)
    assert doc2["capacity_rps"] == doc["capacity_rps"] and [x for x in log2 if x[0] != "use_policy"] == []
    with pytest.raises(GateConfigError, match="judge_load"):
        run_load_gate(config(), out, (0.5,), capacity=3.0, judge_load=0.8)


def test_load_table_lists_every_level_and_arm(tmp_path):
    from rich.console import Console

    from spfcore import report
    from spfcore.run.pipeline import run_load_gate
    from tests.test_gate_runner import ceilings_fn, factory, sim_fn

    doc = run_load_gate(config(), tmp_path / "r.json", (0.5, 1.0), capacity=4.0, engine_factory=factory([]),
                        sim_fn=sim_fn([]), ceilings_fn=ceilings_fn, progress=False, plots=False)
    assert not doc["capacity_measured"] and [lv["rate_rps"] for lv in doc["levels"]] == [2.0, 4.0]
    s = doc["levels"][1]["summary"]["spf_expected_utility"]
    assert s["sim_token_hit_rate"] == pytest.approx(0.4)  # the stand-in simulator: share 0.5 x 0.8
    con = Console(width=250, record=True)
    con.print(report.load_table(doc))
    text = con.export_text()
    assert "capacity 4.000 req/s (given)" in text and "0.5 *" in text and "40.00%" in text
    assert text.count("belady_oracle") == 2


def test_cli_says_how_many_cells_it_reused_and_names_its_folder_by_candidate(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from spfcore.cli import main

    monkeypatch.chdir(tmp_path)
    small = ["gate", "--preset", "quick", "--set", "personas=2", "--set", "prefix_tokens=256", "--set", "sessions=2",
             "--set", "turns=2", "--set", "query_tokens=8", "--set", "output_tokens=2", "--num-blocks", "40",
             "--time-limit", "0", "--no-progress"]
    r = CliRunner().invoke(main, small)
    assert r.exit_code == 0 and "INCOMPLETE" in r.output and "reused" not in r.output
    out = tmp_path / "runs" / "gate-quick-spf_expected_utility" / "results.json"
    assert out.exists()
    r = CliRunner().invoke(main, small)  # the simulator's 3 ceilings + 5 arms x 3 seeds come from the sidecar
    assert r.exit_code == 0 and "reused 18 of 33 cells" in r.output
    # another candidate: its own folder, no "another configuration" clash
    r = CliRunner().invoke(main, [*small, "--candidate", "frequency"])
    assert r.exit_code == 0 and (tmp_path / "runs" / "gate-quick-frequency" / "results.json").exists()
    r = CliRunner().invoke(main, [*small, "--budget", "0"])
    assert r.exit_code == 2 and "--budget" in r.output


def test_cli_says_how_many_cells_it_reused_per_load_level(tmp_path):
    from click.testing import CliRunner

    from spfcore.cli import main

    small = ["gate", "--preset", "quick", "--set", "personas=2", "--set", "prefix_tokens=256", "--set", "sessions=2",
             "--set", "turns=2", "--set", "query_tokens=8", "--set", "output_tokens=2", "--num-blocks", "40",
             "--load", "0.5,0.8", "--capacity", "4", "--time-limit", "0", "--no-progress",
             "--output", str(tmp_path / "r" / "results.json")]
    r = CliRunner().invoke(main, small)
    assert r.exit_code == 0 and "reused" not in r.output, r.output
    r = CliRunner().invoke(main, small)  # no engine cell ran (time limit 0): the 3 ceilings per level are reused
    assert r.exit_code == 0 and "reused 3 of 33 cells at load 0.5, 3 of 33 cells at load 0.8" in r.output, r.output


def test_ttft_cdf_title_names_workload_load_and_seeds():
    from spfcore import report

    cells = [{"arm": "lru", "seed": s} for s in (43, 42)]
    seq = {"config": {"workload_label": "personas: 16 personas", "mode": "sequential"}, "cells": cells}
    assert report.ttft_title(seq) == "TTFT CDF: personas: 16 personas; load: one request at a time; seeds 42, 43"
    timed = {"config": {"workload_label": "w", "mode": "timed",
                        "workload_flags": {"arrival": "poisson", "rate": 3.15}}, "cells": cells}
    assert "load: poisson arrivals at 3.15 req/s" in report.ttft_title(timed)


def test_t_quantiles():
    from spfcore.gate import t975, units_t_interval

    assert t975(2) == 4.303 and t975(30) == 2.042
    assert t975(40) == pytest.approx(2.021, abs=1e-3) and t975(120) == pytest.approx(1.980, abs=1e-3)
    lo, hi = units_t_interval([0.2, 0.0, 0.1])  # mean 0.1, sd 0.1, n 3: 0.1 +- 4.303 * 0.1 / sqrt(3)
    assert (lo, hi) == (pytest.approx(0.1 - 0.248434, abs=1e-6), pytest.approx(0.1 + 0.248434, abs=1e-6))
    assert units_t_interval([0.3]) == (float("-inf"), float("inf"))


def test_a_run_wide_shift_the_request_bootstrap_misses_keeps_the_verdict_open():
    # every request of a seed moves by the same factor (a slow or fast spell of the machine for the whole
    # cell): spf's TTFT is x0.5, x0.9, x1.2 of session_ttl's in seeds 42-44. Resampling requests within a
    # seed cannot see that; the per-seed deltas 0.5, 0.1, -0.2 can.
    import numpy as np

    base_t = np.linspace(0.1, 0.3, 20)
    cells = []
    for arm in ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle"):
        for s, f in zip(SEEDS, (0.5, 0.9, 1.2)):
            t = base_t * (f if arm == "spf_expected_utility" else 1.0)
            reqs = [{"request_id": f"r{i}", "ttft_s": float(x), "e2e_s": float(x) + 0.1, "prompt_tokens": 100,
                     "cached_tokens": 0} for i, x in enumerate(t)]
            cells.append({"arm": arm, "seed": s, "ttft_p95_s": float(np.percentile(t, 95)),
                          "prefill_tokens_recomputed": 2000, "throughput_rps": 1.0,
                          "token_hit_rate": {"belady_oracle": 0.19, "lru": 0.04}.get(arm, 0.0),
                          "hints_issued": 0, "hints_used": 0, "requests": reqs})
    point = evaluate(cells, sim=sim(), seeds=SEEDS, resamples=400)
    c = point.criterion("ttft_p95_improvement")
    assert c.value == pytest.approx(1 - (0.5 + 0.9 + 1.2) / 3) and c.ci.low > 0.05  # the bootstrap alone: settled
    v = evaluate(cells, sim=sim(), seeds=SEEDS, resamples=400, settle=True)
    c = v.criterion("ttft_p95_improvement")
    assert v.status == gate.INCONCLUSIVE and c.ci.method == "paired-requests + units-t"
    assert c.ci.low < -0.5 and c.ci.high > 0.8


def test_a_time_limit_covers_every_level(tmp_path):
    from spfcore.run.pipeline import run_load_gate
    from tests.test_gate_runner import ceilings_fn, factory, sim_fn

    log = []
    doc = run_load_gate(config(), tmp_path / "r.json", (0.5, 0.8), capacity=4.0, engine_factory=factory(log),
                        sim_fn=sim_fn(log), ceilings_fn=ceilings_fn, progress=False, plots=False, time_limit_s=0)
    assert [lv["status"] for lv in doc["levels"]] == ["INCOMPLETE", "INCOMPLETE"]
    assert [x for x in log if x[0] != "sim"] == []  # no engine cell at either level


def test_settled_mode_judges_throughput_by_the_policys_own_cost():
    # the engine's throughput swings by tens of percent per seed (a shared machine): its interval
    # straddles 1% and would need many passes; the policy's own seconds per request decide instead
    def cells(spf_policy_s):
        out = grid(**{**ORACLE_OK, "spf_expected_utility": {"prefill": 500, "thr": (1.3, 0.7, 1.05)}})
        for c in out:  # 24 requests per run; lru spends 0.24 ms per run in spfcore
            c.update(num_requests=24, policy_seconds=spf_policy_s if c["arm"] == "spf_expected_utility" else 0.00024)
        return out

    point = evaluate(cells(0.0024), sim=sim(), seeds=SEEDS, resamples=400)
    assert point.criterion("throughput_regression").ci.low < 0.01 < point.criterion("throughput_regression").ci.high
    v = evaluate(cells(0.0024), sim=sim(), seeds=SEEDS, resamples=400, settle=True)
    (pc,) = v.info
    # (0.1 - 0.01) ms per request over lru's 1 s per request: 0.009%, its interval well below 1%
    assert pc.value == pytest.approx(0.00009) and pc.passed is True and pc.ci.high < 0.01
    assert "decides throughput" in pc.note
    assert v.status == gate.SURVIVES
    # 12 ms per request of its own: 1.2% of lru's wall time per request -> FAILS, named as policy_cost
    v = evaluate(cells(0.288), sim=sim(), seeds=SEEDS, resamples=400, settle=True)
    assert v.status == gate.FAILS and v.info[0].value == pytest.approx(0.01199)
    assert any(r.startswith("policy_cost +0.0120 is not < 0.01") for r in v.reasons)
    # without policy seconds in the cells the engine's throughput is judged, as before
    assert settled(spf_expected_utility={"prefill": 500, "thr": (1.3, 0.7, 1.05)}).status == gate.INCONCLUSIVE


def test_no_hint_issued_settles_the_wasted_hints_criterion_at_zero():
    # a candidate that issues no hints wastes none: the share is exact, not an estimate, so one
    # seed settles it (a units-t interval of one value was [0, 1] and held the verdict open)
    one = [c for c in grid(**{**ORACLE_OK, "spf_expected_utility": {"prefill": 500}}) if c["seed"] == SEEDS[0]]
    v = evaluate(one, sim=sim(), seeds=SEEDS[:1], resamples=200, settle=True,
                 thresholds=gate.GateThresholds(min_seeds=1))
    c = v.criterion("wasted_hints")
    assert (c.value, c.ci.low, c.ci.high, c.ci.method) == (0.0, 0.0, 0.0, "none issued")
    assert not any(r.startswith("wasted_hints") for r in v.reasons)
    # one seed leaves the t-intervals of the other criteria unbounded: a verdict on their point
    # estimates would not be settled, so it is INCONCLUSIVE and names them
    assert v.status == gate.INCONCLUSIVE and math.isinf(v.criterion("prefill_reduction").ci.low)
    assert any(r.startswith("prefill_reduction +0.5000") and "more seeds or passes" in r for r in v.reasons)
    # hints issued in one seed of three: resampled as before (an interval, not the exact zero)
    v = settled(spf_expected_utility={"prefill": 500, "issued": (0, 10, 20), "used": (0, 9, 19)})
    c = v.criterion("wasted_hints")
    assert c.ci.method == "seeds + units-t" and c.ci.low == 0.0 and c.ci.high > 0.05
