"""Tiered arms in the gate (issue 18, part 3): ``GateConfig.cpu_ratio`` gives
the engine a CPU tier (``EngineSpec.cpu_blocks``) and the simulator its
two-tier model, through the one run pipeline; the cells carry the tier
fields, the summary averages them, the report shows them.

The simulator is the real one; the engine is test_gate_runner's
deterministic stand-in (the real engine: the ``engine`` test at the end)."""

from __future__ import annotations

import attrs
import pytest
from click.testing import CliRunner

from spfcore import gate
from spfcore.report import make_console
from spfcore.report.tables import print_report, tier_table
from spfcore.run.cell import tier_agreement
from spfcore.run.pipeline import run_gate
from spfcore.run.spec import GateConfigError
from spfcore.sim.tiered import simulate_tiered
from tests.test_gate_runner import config, factory


def test_a_cpu_ratio_reaches_the_engine_and_the_two_tier_simulator(tmp_path):
    opened = []

    def make(arm, options, *, num_blocks, block_size, engine):
        opened.append(dict(engine))
        return factory([])(arm, options, num_blocks=num_blocks, block_size=block_size, engine=engine)

    cfg = config(cpu_ratio=1.5, thresholds=gate.GateThresholds(min_seeds=1), seeds=(1,))
    res = run_gate(cfg, tmp_path / "r.json", engine_factory=make, progress=False, plots=False)
    nb = res["config"]["num_blocks"]
    cpu = round(1.5 * (nb - 1))
    assert res["config"]["cpu_blocks"] == cpu and res["config"]["tier_cost"] == "tiny-cpu"
    assert opened == [{"cpu_blocks": cpu}]
    wl = __import__("spfcore.run.spec", fromlist=["x"]).load_workload(cfg, 1)
    for c in res["sim"]["cells"]:
        ref = simulate_tiered(wl, c["arm"], num_blocks=nb, cpu_blocks=cpu, block_size=16, promote=False)
        assert c["mode"] == "tiered" and c["promote"] is False
        for f in ("gpu_hit_tokens", "cpu_hit_tokens", "prefill_tokens_recomputed", "tier_stored_blocks"):
            assert c[f] == ref[f], (c["arm"], f)
    s = res["sim"]["summary"]["lru"]
    assert s["cpu_blocks"] == cpu and s["cpu_hit_tokens"] == res["sim"]["cells"][0]["cpu_hit_tokens"]
    # the Belady ceiling is belady_oracle's tiered cell (the harness compares like with like)
    bel = next(c for c in res["sim"]["cells"] if c["arm"] == "belady_oracle")
    assert res["sim"]["ceilings"][0]["belady"]["token_hit_rate"] == bel["token_hit_rate"]
    assert "CPU tier" in res["config"]["workload_label"]


def test_the_tier_is_part_of_the_fingerprint(tmp_path):
    kw = dict(engine_factory=factory([]), progress=False, plots=False)
    cfg = config(cpu_ratio=2.0, thresholds=gate.GateThresholds(min_seeds=1), seeds=(1,), simulate=False)
    run_gate(cfg, tmp_path / "r.json", **kw)
    from spfcore.run.store import GateResumeError

    with pytest.raises(GateResumeError):
        run_gate(attrs.evolve(cfg, cpu_ratio=3.0), tmp_path / "r.json", **kw)
    with pytest.raises(GateResumeError):
        run_gate(attrs.evolve(cfg, cpu_ratio=None), tmp_path / "r.json", **kw)


@pytest.mark.parametrize("kw, match", [({"cpu_ratio": 0.0}, "cpu_ratio"), ({"cpu_ratio": float("nan")}, "cpu_ratio"),
                                       ({"cpu_ratio": 2.0, "mode": "timed"}, "sequential"),
                                       ({"cpu_ratio": 2.0, "tier_cost": "x"}, "unknown cost model")])
def test_bad_tier_settings_are_refused_naming_the_field(kw, match):
    with pytest.raises(GateConfigError, match=match):
        config(**kw)


def test_tier_agreement_and_the_tier_table():
    row = {"gpu_hit_tokens": 0, "cpu_hit_tokens": 32}
    assert tier_agreement({"requests": [row]}, {"requests": [dict(row)]}) is True
    assert tier_agreement({"requests": [row]}, {"requests": [{**row, "cpu_hit_tokens": 0}]}) is False
    assert tier_agreement({"requests": [{"cached_tokens": 3}]}, {"requests": [row]}) is None
    eng = {"arm": "lru", "seed": 1, "status": "ok", "prompt_tokens": 64, "cpu_hit_tokens": 32, "gpu_hit_tokens": 0,
           "prefill_tokens_recomputed": 32, "ttft_mean_s": 0.02, "ttft_p95_s": 0.03, "requests": [row]}
    sim = {**eng, "ttft_mean_s": 0.01, "sim_promote": {"prefill_tokens_recomputed": 0, "promoted_used": 1,
                                                       "promoted_wasted": 0}}
    res = {"config": {"cpu_blocks": 10, "cpu_ratio": 2.0, "tier_cost": "tiny-cpu"}, "cells": [eng],
           "sim": {"cells": [sim], "summary": {"lru": sim}}}
    con = make_console()
    with con.capture() as cap:
        con.print(tier_table(res))
    line = next(x for x in cap.get().splitlines() if x.startswith("│ lru"))
    assert [x.strip() for x in line.split("│")[1:-1]] == ["lru", "1", "0", "32", "32", "20.0", "30.0", "32", "32",
                                                          "10.0", "1/1", "0", "1/0"]
    assert tier_table({"config": {}}) is None


def test_gate_cli_cpu_ratio_option(tmp_path, monkeypatch):
    from spfcore.cli import main
    from spfcore.run import pipeline

    seen = {}

    def fake(cfg, out, **kw):
        seen["cfg"] = cfg
        raise GateConfigError("stop")

    monkeypatch.setattr(pipeline, "run_gate", fake)
    res = CliRunner().invoke(main, ["gate", "--preset", "quick", "--cpu-ratio", "2", "--tier-cost",
                                    "h200-llama-3.2-3b", "--output", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and "stop" in res.output  # GateConfigError: a usage error
    assert seen["cfg"].cpu_ratio == 2.0 and seen["cfg"].tier_cost == "h200-llama-3.2-3b"
    res = CliRunner().invoke(main, ["gate", "--preset", "quick", "--cpu-ratio", "2", "--mode", "timed",
                                    "--output", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and "sequential" in res.output  # a usage error, named before the lock


def test_without_the_oracle_arm_the_ceiling_is_a_tiered_belady_run(tmp_path):
    cfg = config(cpu_ratio=2.0, arms=("lru", "session_ttl", "spf_expected_utility"), seeds=(2,),
                 roles=gate.Roles("spf_expected_utility", "lru", "lru", None),
                 policy_options={"spf_expected_utility": {"variant": "seed", "mode": "prefetch"}},
                 thresholds=gate.GateThresholds(min_seeds=1))
    res = run_gate(cfg, tmp_path / "r.json", engine_factory=factory([]), progress=False, plots=False)
    nb, cpu = res["config"]["num_blocks"], res["config"]["cpu_blocks"]
    wl = __import__("spfcore.run.spec", fromlist=["x"]).load_workload(cfg, 2)
    bel = simulate_tiered(wl, "belady_oracle", num_blocks=nb, cpu_blocks=cpu, block_size=16, promote=False)
    assert res["sim"]["ceilings"][0]["belady"]["token_hit_rate"] == bel["token_hit_rate"]
    spf = next(c for c in res["sim"]["cells"] if c["arm"] == "spf_expected_utility")
    assert spf["hints_issued"] > 0  # the seed variant hints: the promoted run is kept beside it
    pro = simulate_tiered(wl, "spf_expected_utility", options={"variant": "seed", "mode": "prefetch"},
                          num_blocks=nb, cpu_blocks=cpu, block_size=16, promote=True)
    assert spf["sim_promote"]["promoted_blocks"] == pro["promoted_blocks"]
    assert spf["sim_promote"]["gpu_hit_tokens"] == pro["gpu_hit_tokens"]
    assert "sim_promote" not in next(c for c in res["sim"]["cells"] if c["arm"] == "lru")


@pytest.mark.engine
def test_tiered_gate_on_the_real_engine_agrees_with_the_simulator(tmp_path):
    # vLLM's CPU build with the offloading connector (tier of 24 blocks behind 16 GPU blocks), the real
    # simulator, the gate's own pipeline: every request's GPU hit and tier load agree for vLLM's LRU tier
    # and for frequency's tier hooks (test_tiered.py's workload: lru loads 2,560 tokens from the tier).
    from spfcore.run.spec import GateConfig

    cfg = GateConfig(workload="personas", workload_flags={"personas": 4, "prefix_tokens": 128, "sessions": 8,
                                                          "turns": 3, "query_tokens": 40, "output_tokens": 4},
                     arms=("lru", "frequency"), seeds=(43,), block_size=32, num_blocks=16, cpu_ratio=1.6,
                     engine={"model": "tiny"}, roles=gate.Roles("frequency", "lru", "lru", None),
                     thresholds=gate.GateThresholds(min_seeds=1), command="test")
    res = run_gate(cfg, tmp_path / "r.json", progress=False, plots=False)
    assert res["config"]["cpu_blocks"] == 24
    sims = {c["arm"]: c for c in res["sim"]["cells"]}
    for c in res["cells"]:
        assert c["status"] == "ok" and c["cpu_blocks"] == 24 and c["policy_faults"] == 0
        assert tier_agreement(c, sims[c["arm"]]) is True, c["arm"]
        assert c["tier_stored_blocks"] == sims[c["arm"]]["tier_stored_blocks"]
    eng = {c["arm"]: c for c in res["cells"]}
    assert eng["lru"]["cpu_hit_tokens"] == 2560 and eng["frequency"]["tier_not_admitted"] > 0
    assert res["summary"]["lru"]["cpu_hit_tokens"] == 2560
