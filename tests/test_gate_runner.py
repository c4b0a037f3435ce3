"""Gate orchestration: resume, failures, config mismatch, cache sizing.

The engine is injected (a deterministic stand-in computing cells from the
workload), so these tests need no vLLM; the workloads, cache sizing, gate and
report are the real ones.
"""

from __future__ import annotations

import json

import pytest

from spfcore import presets
from spfcore.run import pipeline, provenance, store
from spfcore.run.pipeline import run_gate
from spfcore.run.spec import GateConfig, GateConfigError
from spfcore.run.store import GateResumeError

ARMS = ("lru", "session_ttl", "spf_expected_utility", "belady_oracle")
# a small personas workload: 2 personas x 64 tokens, 4 sessions x 2 turns, 8-token queries
FLAGS = {"personas": 2, "prefix_tokens": 64, "sessions": 4, "turns": 2, "query_tokens": 8, "output_tokens": 2}
# hit share of each arm in the stand-in engine
SHARE = {"lru": 0.0, "session_ttl": 0.25, "spf_expected_utility": 0.5, "belady_oracle": 0.75}


def config(**kw):
    base = dict(workload="personas", workload_flags=FLAGS, arms=ARMS, seeds=(1, 2, 3), block_size=16,
                cache_pressure=1.0, command="spfcore gate --test")
    return GateConfig(**{**base, **kw})


class Session:
    """Deterministic stand-in for EngineSession: request i of the workload hits
    ``SHARE[arm]`` of its prompt (rounded down to blocks) from turn 1 on."""

    def __init__(self, log, arm, fail=None):
        self.log, self.arm, self.fail = log, arm, fail or {}
        self.closed = False

    def run(self, workload, seed, mode):
        self.log.append((self.arm, seed))
        exc = self.fail.get((self.arm, seed))
        if exc is not None:
            raise exc
        reqs = []
        for r in workload.requests:
            hit = 0 if r.request_id.endswith("-t0") else int(r.num_prompt_tokens * SHARE[self.arm]) // 16 * 16
            reqs.append({"request_id": r.request_id, "session_id": r.session_id, "prefix_group": r.prefix_group,
                         "arrival_s": r.arrival_s, "prompt_tokens": r.num_prompt_tokens, "cached_tokens": hit,
                         "ttft_s": 0.1 - hit / 1000, "e2e_s": 0.2 - hit / 1000})
        p, h = sum(x["prompt_tokens"] for x in reqs), sum(x["cached_tokens"] for x in reqs)
        return {"num_requests": len(reqs), "prompt_tokens": p, "cached_tokens": h, "token_hit_rate": h / p,
                "prefill_tokens_recomputed": p - h, "ttft_p95_s": max(x["ttft_s"] for x in reqs),
                "throughput_rps": len(reqs) / sum(x["e2e_s"] for x in reqs), "hints_issued": 0,
                "hints_used": 0, "evictions": 0, "evict_seconds": 0.0, "evict_calls": 1, "requests": reqs}

    def use_policy(self, arm, options=None):
        self.log.append(("use_policy", arm, options))
        exc = self.fail.get((arm, "use_policy"))
        if exc is not None:
            raise exc
        self.arm = arm

    def close(self):
        self.closed = True


def factory(log, fail=None, opened=None):
    def make(arm, options, *, num_blocks, block_size, engine):
        s = Session(log, arm, fail)
        if opened is not None:
            opened.append((arm, num_blocks, block_size, options))
        return s
    return make


def sim_fn(log):
    def sim(workload, arm, *, num_blocks, block_size, options=None, mode="sequential", seed=0):
        log.append(("sim", arm, seed))
        return {"token_hit_rate": SHARE[arm] * 0.8, "prefill_tokens_recomputed": 100}
    return sim


def ceilings_fn(workload, *, num_blocks, block_size):
    return {"infinite": {"token_hit_rate": 0.9}, "belady": {"token_hit_rate": 0.6}}


def run(cfg, out, log, **kw):
    return run_gate(cfg, out, engine_factory=kw.pop("engine_factory", factory(log)), sim_fn=sim_fn(log),
                    ceilings_fn=ceilings_fn, progress=False, plots=kw.pop("plots", False), **kw)


def test_full_run_sizes_the_cache_by_pressure_and_judges(tmp_path):
    log, opened = [], []
    res = run(config(), tmp_path / "r.json", log, engine_factory=factory(log, opened=opened))
    # reusable prefix: 2 personas x 64 tokens = 8 blocks of 16 shared by >= 2 requests;
    # pressure 1 -> floor(128 / (1 * 16)) = 8 blocks
    assert res["config"]["num_blocks"] == 8
    assert opened == [("lru", 8, 16, None)]  # one engine serves every arm (use_policy switches)
    # interleaved: per seed every arm, the order rotated by one per seed
    runs = [x for x in log if x[0] not in ("sim", "use_policy")]
    assert runs == [("lru", 1),  # the unrecorded warm-up run, then the cells
                    ("lru", 1), ("session_ttl", 1), ("spf_expected_utility", 1), ("belady_oracle", 1),
                    ("session_ttl", 2), ("spf_expected_utility", 2), ("belady_oracle", 2), ("lru", 2),
                    ("spf_expected_utility", 3), ("belady_oracle", 3), ("lru", 3), ("session_ttl", 3)]
    assert [(c["arm"], c["seed"]) for c in res["cells"]] == [(a, s) for a in ARMS for s in (1, 2, 3)]
    # stand-in: 72-token prompts; turn 1 hits floor(72 * share / 16) * 16 tokens:
    # spf 32, session_ttl 16, oracle 48. Prefill per seed: spf 4*72 + 4*40 = 448,
    # session_ttl 4*72 + 4*56 = 512 -> reduction 1 - 448/512 = 0.125
    v = res["verdict"]
    assert v["criteria"][1]["value"] == pytest.approx(0.125)
    # simulated gap 0.6 - 0 >= 5 points; engine oracle 4*48/576 = 1/3 >= 0.5 * 0.6
    assert v["criteria"][5]["value"] == pytest.approx(1 / 3) and v["criteria"][5]["passed"]
    assert v["status"] == "SURVIVES"
    assert res["config"]["command"] == "spfcore gate --test"
    assert res["config"]["workload_params"]["prefix_tokens"] == 64
    assert json.loads((tmp_path / "r.json").read_text())["verdict"]["status"] == "SURVIVES"


def test_resume_after_interrupt_gives_the_same_cells(tmp_path):
    ref_log = []
    ref = run(config(), tmp_path / "ref" / "r.json", ref_log)

    log = []
    out = tmp_path / "run" / "r.json"
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C in the last engine cell (session_ttl seed 3)
        run(config(), out, log, engine_factory=factory(log, fail={("session_ttl", 3): KeyboardInterrupt()}))
    assert not out.exists()
    lines = store.sidecar_path(out).read_text().splitlines()
    # header, ceilings, sim cells, 11 engine cells, the interrupted call's wall seconds
    assert len(lines) == 1 + 3 + 12 + 11 + 1 and "call_wall_s" in json.loads(lines[-1])

    log2 = []
    res = run(config(), out, log2)
    assert log2 == [("session_ttl", 3)] * 2  # warm-up + the only cell left
    # wall_s counts both calls (the interrupted one included), call_wall_s this one
    walls = [json.loads(x)["call_wall_s"] for x in store.sidecar_path(out).read_text().splitlines()
             if "call_wall_s" in x]
    assert len(walls) == 2 and res["run"]["wall_s"] == pytest.approx(sum(walls), abs=0.06)
    assert res["run"]["call_wall_s"] == pytest.approx(walls[1], abs=0.06)
    strip = lambda r: json.loads(json.dumps({k: r[k] for k in ("cells", "sim", "summary", "verdict")}))  # noqa: E731
    assert strip(res) == strip(ref)
    # a third run has nothing left to do
    log3 = []
    run(config(), out, log3)
    assert log3 == []


def test_policy_error_is_recorded_and_retried_on_resume(tmp_path):
    from spfcore.runtime import PolicyError

    log, out = [], tmp_path / "r.json"
    msg = "policy 'spf_expected_utility' failed in hook spfcore_score_blocks: ValueError('x')"
    err = PolicyError(msg, policy="spf_expected_utility", hook="spfcore_score_blocks")
    res = run(config(), out, log, engine_factory=factory(log, fail={("spf_expected_utility", 2): err}))
    bad = [c for c in res["cells"] if c.get("error")]
    assert bad == [{"arm": "spf_expected_utility", "seed": 2, "status": "error",
                    "error": {"policy": "spf_expected_utility", "hook": "spfcore_score_blocks", "message": msg}}]
    assert len(res["cells"]) == 12  # the run went on
    assert all(c["status"] == "ok" for c in res["cells"] if c not in bad)
    assert res["verdict"]["status"] == "INCOMPLETE"
    assert res["verdict"]["reasons"][0] == f"arm spf_expected_utility seed 2 failed: {msg}"
    assert res["summary"]["spf_expected_utility"]["seeds"] == [1, 3]

    log2 = []
    res = run(config(), out, log2)
    assert log2 == [("spf_expected_utility", 2)] * 2  # warm-up + the failed cell, retried
    assert res["verdict"]["status"] == "SURVIVES"


def test_an_arm_that_cannot_be_selected_fails_its_cells_only(tmp_path):
    log = []
    err = RuntimeError("bad policy\nlong traceback")
    res = run(config(), tmp_path / "r.json", log, engine_factory=factory(log, fail={("belady_oracle", "use_policy"): err}))
    assert [c["error"] for c in res["cells"] if c["arm"] == "belady_oracle"] == [
        {"policy": "belady_oracle", "hook": None, "message": "RuntimeError: bad policy"}] * 3
    assert all("error" not in c for c in res["cells"] if c["arm"] != "belady_oracle")
    assert res["verdict"]["status"] == "INCOMPLETE"


def test_engine_that_cannot_start_fails_every_cell(tmp_path):
    starts = []

    def make(arm, options, **kw):
        starts.append(arm)
        raise RuntimeError("engine start failed\nlong traceback")

    res = run(config(), tmp_path / "r.json", [], engine_factory=make)
    assert starts == ["lru"]  # tried once, not once per cell
    assert {c["error"]["message"] for c in res["cells"]} == {"RuntimeError: engine start failed"}
    assert len(res["cells"]) == 12 and res["verdict"]["status"] == "INCOMPLETE"


def test_config_mismatch_needs_a_new_output_or_fresh(tmp_path):
    log, out = [], tmp_path / "r.json"
    run(config(), out, log)
    with pytest.raises(GateResumeError, match=r"differs in: block_size, num_blocks\).*--output or --fresh"):
        run(config(block_size=32, num_blocks=9), out, [])
    # more seeds and other thresholds are no mismatch: only the new cells run
    log2 = []
    run(config(seeds=(1, 2, 3, 4)), out, log2)
    assert [x for x in log2 if x[0] not in ("sim", "use_policy")] == [("belady_oracle", 4)] + [(a, 4) for a in ARMS[3:] + ARMS[:3]]  # warm-up first
    log3 = []
    res = run(config(block_size=32, num_blocks=9), out, log3, fresh=True)
    assert len([x for x in log3 if x[0] not in ("sim", "use_policy")]) == 1 + 12 and res["config"]["num_blocks"] == 9


def test_policy_options_reach_the_engine_and_the_simulator(tmp_path):
    log, opened, seen = [], [], []

    def sim(workload, arm, *, options=None, **kw):
        seen.append((arm, options))
        return {"token_hit_rate": SHARE[arm]}

    run_gate(config(policy_options={"session_ttl": {"ttl_arrivals": "5"}}), tmp_path / "r.json",
             engine_factory=factory(log, opened=opened), sim_fn=sim, ceilings_fn=ceilings_fn, progress=False,
             plots=False)
    assert ("session_ttl", {"ttl_arrivals": "5"}) in seen and ("lru", None) in seen
    assert ("use_policy", "session_ttl", {"ttl_arrivals": "5"}) in log and ("use_policy", "lru", {}) in log


def test_bad_config_names_the_field():
    with pytest.raises(GateConfigError, match="field 'seeds'"):
        config(seeds=(1, 1))
    with pytest.raises(GateConfigError, match="field 'mode'"):
        config(mode="fast")
    with pytest.raises(GateConfigError, match="field 'policy_options'.*'frequency'"):
        config(policy_options={"frequency": {"a": "1"}})
    with pytest.raises(GateConfigError, match="field 'num_blocks'"):
        config(num_blocks=1)


def test_plots_are_written_beside_the_results(tmp_path):
    run(config(), tmp_path / "g" / "results.json", [], plots=True)
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == [
        "cache.png", "results.cells.jsonl", "results.json", "ttft_cdf.png"]


def test_cli_errors_exit_non_zero_with_a_clear_message(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from spfcore.cli import main

    monkeypatch.chdir(tmp_path)  # the default --output (runs/...) is relative: never the checkout's runs/

    r = CliRunner().invoke(main, ["gate", "--preset", "quick", "--seeds", "42,x"])
    assert r.exit_code == 2 and "comma-separated ints" in r.output
    r = CliRunner().invoke(main, ["gate", "--preset", "quick", "--policy-opt", "lru"])
    assert r.exit_code == 2 and "Invalid value for --policy-opt" in r.output and "expected NAME.KEY=VALUE" in r.output
    out = tmp_path / "results.json"
    store.sidecar_path(out).write_text(json.dumps({"sidecar": 1, "fingerprint": {"block_size": 16}}) + "\n")
    r = CliRunner().invoke(main, ["gate", "--preset", "quick", "--output", str(out), "--no-progress"])
    assert r.exit_code == 1
    assert "another configuration" in r.output and "use a new --output or --fresh" in r.output
    r = CliRunner().invoke(main, ["gate", "--preset", "quick", "--model", "nosuchmodel", "--output",
                                  str(tmp_path / "m" / "r.json"), "--no-progress"])
    assert r.exit_code == 2 and "field 'model': model 'nosuchmodel'" in r.output  # a usage error
    assert not (tmp_path / "m").exists()  # checked before anything runs or is written
    small = ["--set", "personas=2", "--set", "prefix_tokens=256", "--set", "sessions=2", "--set", "turns=2",
             "--set", "query_tokens=8", "--set", "output_tokens=2"]
    r = CliRunner().invoke(main, ["gate", "--preset", "quick", *small, "--num-blocks", "40", "--time-limit", "0", "--output",
                                  str(tmp_path / "t" / "r.json"), "--no-progress"])
    assert r.exit_code == 0 and "INCOMPLETE" in r.output
    assert "15 engine cell(s) not finished: run the same command again" in r.output
    r = CliRunner().invoke(main, ["gate", "--preset", "quick", *small, "--num-blocks", "40", "--time-limit", "0", "--output",
                                  str(tmp_path / "t" / "r.json"), "--no-progress", "--check"])
    assert r.exit_code == 3 and "INCOMPLETE" in r.output  # --check: any verdict but SURVIVES fails the script


# ------------------------------------------------------------------ real engine


@pytest.mark.engine
def test_spfcore_gate_end_to_end_through_vllm(tmp_path):
    """``spfcore gate`` on a tiny personas workload: every installed arm x 3
    seeds through the real (CPU) vLLM engine and the simulator."""
    from click.testing import CliRunner

    from spfcore import registry
    from spfcore.cli import main

    ok = {p.name for p in registry.discover() if p.status == "ok"}
    if not {"lru", "session_ttl", "belady_oracle"} <= ok:
        pytest.skip(f"needs lru, session_ttl and belady_oracle installed (have {sorted(ok)})")
    arms = [a for a in presets.DEFAULT_ARMS if a in ok]
    cand = "spf_expected_utility" if "spf_expected_utility" in ok else "frequency"
    out = tmp_path / "gate" / "results.json"
    args = ["gate", "--preset", "quick", "--arms", ",".join(arms), "--candidate", cand, "--seeds", "1,2,3",
            "--set", "personas=4", "--set", "prefix_tokens=256", "--set", "sessions=4",
            "--set", "turns=2", "--set", "query_tokens=32", "--set", "output_tokens=2",
            "--output", str(out), "--no-progress"]
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code in (0, 5), res.output  # 5: INCONCLUSIVE (an interval across its threshold)
    assert "verdict:" in res.output and str(out) in res.output
    r = json.loads(out.read_text())
    # reusable prefix 4 personas x 256 tokens = 32 blocks of 32; floor(1024 / (2.3 * 32)) = 13
    assert r["config"]["num_blocks"] == 13 and r["config"]["block_size"] == 32
    assert r["config"]["command"] == "spfcore gate " + " ".join(args[1:])
    assert [(c["arm"], c["seed"]) for c in r["cells"]] == [(a, s) for a in arms for s in (1, 2, 3)]
    assert not [c for c in r["cells"] if c.get("error")]
    for c in r["cells"]:
        assert c["num_requests"] == 8 and c["prompt_tokens"] == 8 * 288
        assert all(q["ttft_s"] > 0 and q["e2e_s"] >= q["ttft_s"] for q in c["requests"])
    # sequential mode: the engine's cached tokens per request equal the simulator's
    sim = {(c["arm"], c["seed"]): c for c in r["sim"]["cells"]}
    for c in r["cells"]:
        s = sim[(c["arm"], c["seed"])]
        assert [q["cached_tokens"] for q in c["requests"]] == [q["cached_tokens"] for q in s["requests"]], c["arm"]
    v = r["verdict"]
    assert v["status"] in ("SURVIVES", "FAILS", "INVALID-HARNESS", "NO-HEADROOM", "INCONCLUSIVE")
    assert (res.exit_code == 5) == (v["status"] == "INCONCLUSIVE") and v["settled"]
    assert v["seeds"] == [1, 2, 3] and v["roles"]["candidate"] == cand
    assert (out.parent / "cache.png").exists() and (out.parent / "ttft_cdf.png").exists()


def test_preflight_stops_before_any_engine_starts(tmp_path):
    starts = []

    def make(arm, options, **kw):
        starts.append(arm)
        return Session([], arm)

    def go(**kw):
        return run_gate(config(**kw), tmp_path / "r.json", engine_factory=make, sim_fn=sim_fn([]),
                        ceilings_fn=ceilings_fn, progress=False, plots=False)

    with pytest.raises(GateConfigError, match=r"field 'num_blocks'.*needs 5 blocks of 16 tokens but the cache has 2"):
        go(num_blocks=3)
    with pytest.raises(GateConfigError, match=r"field 'arms'.*candidate=spf_expected_utility"):
        go(arms=("lru", "session_ttl", "belady_oracle"))
    with pytest.raises(GateConfigError, match=r"frequency.*unknown parameter 'nosuch'"):
        go(arms=ARMS + ("frequency",), policy_options={"frequency": {"nosuch": "1"}})
    with pytest.raises(GateConfigError, match=r"field 'model': model 'nosuchmodel': not a preset"):
        go(engine={"model": "nosuchmodel"})
    assert starts == []
    assert not (tmp_path / "r.json").exists()


def test_time_limit_leaves_cells_for_a_later_call(tmp_path):
    out = tmp_path / "r.json"
    log = []
    res = run(config(), out, log, time_limit_s=0)  # simulator units run, no engine cell starts
    assert [x for x in log if x[0] != "sim"] == []
    assert res["verdict"]["status"] == "INCOMPLETE" and res["cells"] == []
    log2 = []
    res2 = run(config(), out, log2)  # the same command without a limit finishes the run
    assert [x for x in log2 if x[0] == "sim"] == []  # simulator cells came from the sidecar
    assert len([x for x in log2 if x[0] not in ("sim", "use_policy")]) == 1 + 12  # warm-up + every cell
    assert res2["verdict"]["status"] == "SURVIVES"


def test_warmup_is_the_first_quarter_of_the_workload():
    from spfcore.workloads.generators import make

    wl = make("personas", seed=1, **{**FLAGS, "sessions": 16, "turns": 4})
    w = pipeline.warmup_slice(wl)
    assert len(wl.requests) == 64 and w.requests == wl.requests[:16] and w.params == wl.params
    small = make("personas", seed=1, **FLAGS)  # 8 requests: at least 8 -> all of them
    assert pipeline.warmup_slice(small).requests == small.requests


def test_changed_policy_code_is_a_mismatch(tmp_path, monkeypatch):
    d = provenance.code_digest(ARMS)
    assert set(d) == {"spfcore", "spfcore_session_ttl", "spfcore_spf_expected_utility", "spfcore_belady_oracle"}
    assert all(len(v) == 16 for v in d.values()) and d == provenance.code_digest(ARMS)
    out = tmp_path / "r.json"
    run(config(), out, [])
    monkeypatch.setattr(pipeline, "code_digest", lambda arms: {**d, "spfcore_spf_expected_utility": "0" * 16})
    with pytest.raises(GateResumeError, match=r"differs in: code\)"):
        run(config(), out, [])


def test_gate_an_arm_not_installed_fails_its_cells_and_the_others_run(tmp_path):
    """The gate with an extra arm that is not installed: its sim and engine
    cells are error cells, the engine never sees it, the role arms decide the
    verdict (a non-role failure is listed, not INCOMPLETE)."""
    log = []
    res = run_gate(config(arms=ARMS + ("nosuch",)), tmp_path / "r.json", engine_factory=factory(log),
                   sim_fn=sim_fn([]), ceilings_fn=ceilings_fn, progress=False, plots=False)
    bad = [c for c in res["cells"] if c["arm"] == "nosuch"]
    assert [c["status"] for c in bad] == ["error"] * 3
    assert all("policy 'nosuch' is not installed" in c["error"]["message"] for c in bad)
    assert all(c["status"] == "ok" for c in res["cells"] if c["arm"] != "nosuch")
    assert not any("nosuch" in str(e) for e in log)
    assert res["verdict"]["status"] != "INCOMPLETE"
    assert any(r.startswith("arm nosuch seed 1 failed:") and "not a role arm" in r for r in res["verdict"]["reasons"])
