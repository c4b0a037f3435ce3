"""One run pipeline (issue 12): each seed prepared once, the Belady ceiling
taken from the belady_oracle arm, discovery once per process, a load run's
levels inside its run folder, --merge-from, role names checked up front,
intervals clipped to a criterion's range, wall time kept across calls.

The simulator and registry are the real ones; the engine is the
deterministic stand-in of test_gate_runner (no vLLM)."""

from __future__ import annotations

import json

import attrs
import pytest
from click.testing import CliRunner

from spfcore import gate, registry
from spfcore.presets import SEED_ROLES
from spfcore.run import pipeline, provenance, spec, store
from spfcore.run.pipeline import run_gate, run_load_gate
from spfcore.run.spec import GateConfigError
from spfcore.sim import simulator
from tests.test_gate import ORACLE_OK, SEEDS, evaluate, grid, sim
from tests.test_gate_runner import ceilings_fn, config, factory, sim_fn


def test_each_seed_is_prepared_once_and_belady_runs_once_per_seed(tmp_path, monkeypatch):
    """The real simulator: 3 seeds x 4 arms prepare 3 workloads (not one per
    arm, preflight and ceiling) and run belady_oracle 3 times (its arm cell
    is the Belady ceiling), with the ceiling equal to a separate run's."""
    raw, runs = [], []
    prepare, simulate = simulator.prepare, simulator.simulate

    def counting_prepare(w, bs):
        if not isinstance(w, simulator.Prepared):
            raw.append(w.params.get("seed"))
        return prepare(w, bs)

    def counting_simulate(w, arm, **kw):
        runs.append(arm)
        return simulate(w, arm, **kw)

    monkeypatch.setattr(simulator, "prepare", counting_prepare)
    monkeypatch.setattr(simulator, "simulate", counting_simulate)
    import spfcore.sim as sim_pkg

    monkeypatch.setattr(sim_pkg, "simulate", counting_simulate)
    res = run_gate(config(), tmp_path / "r.json", engine_factory=factory([]), progress=False, plots=False)
    assert sorted(raw) == [1, 2, 3]
    assert runs.count("belady_oracle") == 3 and runs.count("lru") == 6  # lru: arm + infinite cache
    for c in res["sim"]["ceilings"]:
        wl = spec.load_workload(config(), c["seed"])
        ref = simulate(wl, "belady_oracle", num_blocks=res["config"]["num_blocks"], block_size=16, env={})
        assert c["belady"] == {k: ref[k] for k in c["belady"]}


def test_discovery_validates_each_plugin_once_per_process(monkeypatch):
    calls = []
    info_from = registry._info_from
    monkeypatch.setattr(registry, "_info_from", lambda *a, **k: calls.append(a[0].name) or info_from(*a, **k))
    registry.refresh()
    first = registry.discover({})
    n = len(calls)
    assert n == len(first) > 0
    for _ in range(5):
        assert registry.discover({}) == first
    assert len(calls) == n  # cached
    # the allow list still applies on every call
    assert [p.name for p in registry.discover({"SPFCORE_POLICIES": "lru"})] == ["lru"]
    registry.refresh()
    registry.discover({})
    assert len(calls) == 2 * n


def test_load_levels_go_inside_the_run_folder_of_a_named_output(tmp_path):
    out = tmp_path / "out" / "h200.json"
    doc = run_load_gate(config(), out, (0.5,), capacity=4.0, engine_factory=factory([]), sim_fn=sim_fn([]),
                        ceilings_fn=ceilings_fn, progress=False, plots=False)
    assert doc["levels"][0]["results"] == str(tmp_path / "out" / "h200" / "load-0.5" / "results.json")
    assert (tmp_path / "out" / "h200" / "load-0.5" / "results.cells.jsonl").exists()
    assert not (tmp_path / "out" / "load-0.5").exists() and out.exists()
    assert store.run_folder(tmp_path / "x" / "results.json") == tmp_path / "x"


def test_merge_from_joins_other_runs_cells_and_runs_only_the_rest(tmp_path):
    a, b = tmp_path / "a" / "results.json", tmp_path / "b" / "results.json"
    run_gate(config(seeds=(1,), thresholds=gate.GateThresholds(min_seeds=1)), a, engine_factory=factory([]),
             sim_fn=sim_fn([]), ceilings_fn=ceilings_fn, progress=False, plots=False)
    run_gate(config(seeds=(2,), thresholds=gate.GateThresholds(min_seeds=1)), b, engine_factory=factory([]),
             sim_fn=sim_fn([]), ceilings_fn=ceilings_fn, progress=False, plots=False)
    log = []
    res = run_gate(config(), tmp_path / "all" / "results.json", engine_factory=factory(log), sim_fn=sim_fn(log),
                   ceilings_fn=ceilings_fn, progress=False, plots=False, merge_from=[a.parent, b])
    assert {x[2] for x in log if x[0] == "sim"} == {3} and {x[1] for x in log if x[0] in config().arms} == {3}
    assert res["run"]["reused_cells"] == 2 * (4 + 1 + 4)  # seeds 1, 2: sim arms, ceilings, engine arms
    ref = run_gate(config(), tmp_path / "ref" / "results.json", engine_factory=factory([]), sim_fn=sim_fn([]),
                   ceilings_fn=ceilings_fn, progress=False, plots=False)
    strip = lambda r: json.loads(json.dumps({k: r[k] for k in ("cells", "sim", "summary", "verdict")}))  # noqa: E731
    assert strip(res) == strip(ref)
    # another configuration cannot be merged; a folder without cells is refused
    with pytest.raises(store.GateResumeError, match="differs in: num_blocks"):
        run_gate(config(num_blocks=12), tmp_path / "c" / "results.json", engine_factory=factory([]),
                 sim_fn=sim_fn([]), ceilings_fn=ceilings_fn, progress=False, plots=False, merge_from=[a])
    with pytest.raises(GateConfigError, match="no finished cells"):
        run_gate(config(), tmp_path / "d" / "results.json", engine_factory=factory([]), sim_fn=sim_fn([]),
                 ceilings_fn=ceilings_fn, progress=False, plots=False, merge_from=[tmp_path])


def test_merge_from_a_load_run_merges_level_by_level(tmp_path):
    kw = dict(capacity=4.0, engine_factory=factory([]), sim_fn=sim_fn([]), ceilings_fn=ceilings_fn,
              progress=False, plots=False)
    one = dict(thresholds=gate.GateThresholds(min_seeds=1))
    run_load_gate(config(seeds=(1,), **one), tmp_path / "s1-05" / "results.json", (0.5,), **kw)
    run_load_gate(config(seeds=(2, 3), **one), tmp_path / "s23-05" / "results.json", (0.5,), **kw)
    run_load_gate(config(seeds=(1, 2, 3), **one), tmp_path / "all-08" / "results.json", (0.8,), **kw)
    log = []
    doc = run_load_gate(config(), tmp_path / "seed" / "results.json", (0.5, 0.8),
                        **{**kw, "engine_factory": factory(log), "sim_fn": sim_fn(log)},
                        merge_from=[tmp_path / "s1-05", tmp_path / "s23-05", tmp_path / "all-08"])
    assert log == [] and [lv["status"] for lv in doc["levels"]] == ["SURVIVES", "SURVIVES"]
    with pytest.raises(GateConfigError, match="no finished cells of any level"):
        run_load_gate(config(), tmp_path / "x" / "results.json", (0.3,), **kw, merge_from=[tmp_path / "s1-05"])


def test_a_misspelt_role_arm_fails_before_any_cell_runs(tmp_path):
    log = []
    arms = ("lru", "session_ttl", "spf_expected_utilty", "belady_oracle")
    cfg = config(arms=arms, roles=attrs.evolve(SEED_ROLES, candidate="spf_expected_utilty"))
    with pytest.raises(GateConfigError, match=r"candidate=spf_expected_utilty \(did you mean spf_expected_utility\?\)"):
        run_gate(cfg, tmp_path / "r.json", engine_factory=factory(log), sim_fn=sim_fn(log), ceilings_fn=ceilings_fn,
                 progress=False, plots=False)
    assert log == [] and not (tmp_path / "r.cells.jsonl").exists()
    # misspelt only in --candidate (the arms as installed): the same suggestion, not "roles need these arms"
    cfg = config(arms=("lru", "session_ttl", "spf_expected_utility", "belady_oracle"),
                 roles=attrs.evolve(SEED_ROLES, candidate="spf_expected_utilty"))
    with pytest.raises(GateConfigError, match=r"candidate=spf_expected_utilty \(did you mean spf_expected_utility\?\)"):
        run_gate(cfg, tmp_path / "r2.json", engine_factory=factory(log), sim_fn=sim_fn(log), ceilings_fn=ceilings_fn,
                 progress=False, plots=False)
    assert log == []


def test_the_settled_interval_stays_within_the_criterion_range():
    # per-seed p95 improvements 0.9, 0, 0.9: the units' t-interval alone reaches +1.89, above 1 - 0/p95 = 1
    v = evaluate(grid(**{**ORACLE_OK, "spf_expected_utility": {"p95": (0.1, 1.0, 0.1)}}), sim=sim(), seeds=SEEDS,
                 resamples=400, settle=True)
    c = v.criterion("ttft_p95_improvement")
    assert c.value == pytest.approx(0.6) and "units-t" in c.ci.method
    assert c.ci.high == 1.0 and c.ci.low < 0
    v = evaluate(grid(**{**ORACLE_OK, "spf_expected_utility": {"issued": 10, "used": (10, 0, 10)}}), sim=sim(),
                 seeds=SEEDS, resamples=400, settle=True)
    c = v.criterion("wasted_hints")
    assert c.ci.low == 0.0 and c.ci.high <= 1.0


def test_gate_cli_merge_from_option(tmp_path, monkeypatch):
    """--merge-from reaches run_gate (the engine stand-in: nothing is left to run)."""
    from spfcore.cli import main

    seen = {}

    def fake_run_gate(cfg, out, **kw):
        seen.update(kw)
        raise GateConfigError("stop here")

    monkeypatch.setattr(pipeline, "run_gate", fake_run_gate)
    (tmp_path / "a").mkdir()
    out = ["--output", str(tmp_path / "o" / "results.json")]
    # not a run folder: a usage error naming the path and what is missing, before anything runs or is written
    res = CliRunner().invoke(main, ["gate", "--preset", "quick", "--no-progress", "--merge-from", str(tmp_path / "a"),
                                    *out])
    assert res.exit_code == 2 and not seen and not (tmp_path / "o").exists()
    msg = " ".join(res.output.split())
    assert f"Invalid value for --merge-from: {tmp_path / 'a'}: not a gate run" in msg
    assert str(tmp_path / "a" / "results.cells.jsonl") in msg
    (tmp_path / "a" / "results.cells.jsonl").write_text("")
    res = CliRunner().invoke(main, ["gate", "--preset", "quick", "--no-progress", "--merge-from", str(tmp_path / "a"),
                                    *out])
    assert res.exit_code == 2 and "stop here" in res.output  # GateConfigError: a usage error
    assert [str(p) for p in seen["merge_from"]] == [str(tmp_path / "a")]
    # a load run needs one of its levels' cells
    seen.clear()
    res = CliRunner().invoke(main, ["gate", "--preset", "quick", "--no-progress", "--merge-from", str(tmp_path / "a"),
                                    "--load", "0.5", "--capacity", "2", *out])
    assert res.exit_code == 2 and "not a load run's levels" in res.output and not seen


def test_device_name_follows_cuda_visible_devices(tmp_path, monkeypatch):
    """One-GPU jobs of a 2-GPU host and their merge (CUDA_VISIBLE_DEVICES=0) name one device, so their
    fingerprints agree (an nvidia-smi on PATH that lists two GPUs)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200'\necho 'NVIDIA H200'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert provenance.device_name() == "2x NVIDIA H200"
    for vis in ("0", "1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", vis)
        assert provenance.device_name() == "NVIDIA H200"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert provenance.device_name() == "2x NVIDIA H200"


def test_sequential_sims_chunk_prefills_by_the_engines_limit(tmp_path):
    """Prompts longer than any default ``max_num_batched_tokens``
    (:data:`pipeline.SHORTEST_DEFAULT_BUDGET`) may be chunked by the engine:
    the simulator's cells wait for the first engine cell's limit and replay
    with it (``token_budget``, recorded in the cell); with no engine cell
    giving one they run at the end, each prompt in one step, and say so."""
    from tests.test_gate_runner import FLAGS, Session

    flags = {**FLAGS, "prefix_tokens": 320}  # 328-token prompts

    def limited(log, limit):
        def make(arm, options, *, num_blocks, block_size, engine):
            s = Session(log, arm)
            run = s.run
            s.run = lambda *a, **k: {**run(*a, **k), **({"max_num_batched_tokens": limit} if limit else {})}
            return s
        return make

    def sims(log):
        def sim(w, arm, **kw):
            log.append(("sim", arm, kw.get("token_budget")))
            return pipeline.default_sim(w, arm, **kw)
        return sim

    for limit in (128, None):
        log = []
        res = run_gate(config(workload_flags=flags, seeds=(1,)), tmp_path / f"r{limit}.json",
                       engine_factory=limited(log, limit), sim_fn=sims(log), progress=False, plots=False)
        first = next(i for i, x in enumerate(log) if x[0] == "sim")
        assert first >= 2  # after the warm-up and the first engine cell
        assert {x for x in log[first:] if x[0] == "sim"} == {("sim", a, limit) for a in config().arms}
        for c in res["sim"]["cells"]:
            assert c.get("token_budget") == limit
            assert ("token_budget_note" in c) == (limit is None)
