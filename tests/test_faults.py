"""Faults of a plugin end its own arm only (issue 13): through the real CLI
(``spfcore simulate``), the real simulator and the gate's orchestration, with
faulty policies published by a throw-away distribution's entry points."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from spfcore import registry
from spfcore.cli import main
from spfcore.runtime import PolicyError, PolicyRuntime

# 2 personas x 64 tokens, 6 sessions x 3 turns at block size 16 on 8 blocks:
# every arm evicts, so scoring, admission and victim choice are all called
ARGS = ["simulate", "--set", "personas=2", "--set", "prefix_tokens=64", "--set", "sessions=6", "--set", "turns=3",
        "--set", "query_tokens=16", "--set", "output_tokens=2", "--block-size", "16", "--num-blocks", "8",
        "--seeds", "1,2", "--no-ceilings", "--json"]
TIMING = ("hook_seconds", "policy_seconds", "evict_seconds", "wall_seconds")


@pytest.fixture
def faulty_dist(tmp_path, monkeypatch):
    """A distribution ``faultypol`` with ``faulty`` (its ``fault`` option picks
    the fault), ``no_params`` (never sets ``self.params``), ``bad_defaults``
    (``Params()`` fails) and ``missing`` (its module does not exist)."""
    (tmp_path / "faultypol.py").write_text(textwrap.dedent('''
        import time
        import attrs
        import numpy as np
        from spfcore import hookimpl

        @attrs.frozen
        class P:
            """fault: what goes wrong."""
            fault: str = "none"

        class Faulty:
            """Goes wrong on demand."""
            name = "faulty"
            capabilities = frozenset({"scoring", "admission"})
            Params = P
            def __init__(self, params):
                self.params = params
                if params.fault == "init":
                    raise RuntimeError("cannot start")

            @hookimpl
            def spfcore_score_blocks(self, blocks, now):
                f, n = self.params.fault, len(blocks)
                if f == "raises":
                    raise ValueError("boom")
                if f == "wrong_length":
                    return np.zeros(n + 1)
                if f == "nan":
                    return np.full(n, np.nan)
                if f == "wrong_type":
                    return ["high"] * n
                if f == "scalar":
                    return 3.5
                if f == "slow":
                    time.sleep(0.05)
                if f == "hangs":
                    t = time.monotonic()
                    while time.monotonic() - t < 60:  # interrupted by the budget, else "took 60000 ms"
                        pass
                return -blocks.depth.astype(float)

            @hookimpl
            def spfcore_admit_blocks(self, blocks, now):
                if self.params.fault == "admit_type":
                    return ["yes"] * len(blocks)
                return None

            @hookimpl
            def spfcore_choose_victims(self, candidates, n, now):
                f = self.params.fault
                if f == "duplicates":
                    return [0] * n
                if f == "out_of_range":
                    return list(range(n - 1)) + [len(candidates) + 5]
                if f == "choose_type":
                    return 3.5
                return None

        class NoParams:
            """Forgets to keep its params."""
            name = "no_params"
            capabilities = frozenset()
            Params = P
            def __init__(self, params):
                pass

        @attrs.frozen
        class Q:
            """x: required, no default."""
            x: int

        class BadDefaults:
            """Its Params cannot be built with defaults."""
            name = "bad_defaults"
            capabilities = frozenset()
            Params = Q
            def __init__(self, params):
                self.params = params
    '''))
    info = tmp_path / "faultypol-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faultypol\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[spfcore.policies]\nfaulty = faultypol:Faulty\nno_params = faultypol:NoParams\n"
        "bad_defaults = faultypol:BadDefaults\nmissing = faultypol_missing:Policy\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _sim(*extra, env=None):
    res = CliRunner().invoke(main, [*ARGS, *extra], env=env)
    return res, json.loads(res.stdout)


def _strip(cell):
    return {k: v for k, v in cell.items() if k not in TIMING}


@pytest.fixture(scope="module")
def clean():
    """lru and frequency cells of a run without the faulty arm."""
    res = CliRunner().invoke(main, [*ARGS, "--arms", "lru,frequency"])
    assert res.exit_code == 0, res.output
    return {(c["arm"], c["seed"]): _strip(c) for c in json.loads(res.stdout)["cells"]}


@pytest.mark.parametrize("fault,hook,message", [
    ("raises", "spfcore_score_blocks", "failed in hook spfcore_score_blocks: ValueError('boom')"),
    ("wrong_length", "spfcore_score_blocks", "returned an array of shape"),
    ("nan", "spfcore_score_blocks", "nan at position 0: a score must be a real number (not NaN)"),
    ("wrong_type", "spfcore_score_blocks", "'high' at position 0: a score must be a real number"),
    ("scalar", "spfcore_score_blocks", "hook spfcore_score_blocks returned 3.5: "),
    ("admit_type", "spfcore_admit_blocks", "'yes' at position 0: admission answers are bools"),
    ("duplicates", "spfcore_choose_victims", "returned [0, 0, 0]: need 3 distinct int indices"),
    ("out_of_range", "spfcore_choose_victims", "distinct int indices <"),
    ("choose_type", "spfcore_choose_victims", "3.5: need a sequence of"),
    ("init", "__init__", "failed in hook __init__: RuntimeError('cannot start')"),
])
def test_a_faulty_arm_fails_alone(faulty_dist, clean, fault, hook, message):
    res, d = _simulate_with_fault(fault)
    assert res.exit_code == 4, res.output
    assert "error: arm(s) failed: faulty" in res.stderr
    cells = {(c["arm"], c["seed"]): c for c in d["cells"]}
    for seed in (1, 2):
        bad = cells["faulty", seed]
        assert bad["status"] == "error" and set(bad["error"]) == {"policy", "hook", "message"}
        assert bad["error"]["policy"] == "faulty" and bad["error"]["hook"] == hook
        assert message in bad["error"]["message"], bad["error"]["message"]
        for arm in ("lru", "frequency"):  # the other arms ran, with the numbers of a clean run
            assert cells[arm, seed]["status"] == "ok"
            assert _strip(cells[arm, seed]) == clean[arm, seed]
    assert d["summary"]["faulty"]["status"] == "error" and d["summary"]["faulty"]["token_hit_rate"] is None
    assert d["summary"]["lru"]["status"] == "ok"


def _simulate_with_fault(fault):
    return _sim("--arms", "lru,faulty,frequency", "--policy-opt", f"faulty.fault={fault}")


def test_the_issue_reproducer_duplicate_victims_shows_a_table(faulty_dist):
    args = [a for a in ARGS if a != "--json"]
    res = CliRunner().invoke(main, [*args, "--arms", "lru,faulty,frequency", "--policy-opt", "faulty.fault=duplicates"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 4
    table = res.stdout
    assert "lru" in table and "frequency" in table and "error" in table
    assert "policy 'faulty': hook spfcore_choose_victims returned [0, 0" in " ".join(table.split())


def test_the_healthy_faulty_policy_runs(faulty_dist):
    res, d = _sim("--arms", "faulty")
    assert res.exit_code == 0, res.output
    assert d["cells"][0]["status"] == "ok" and d["cells"][0]["evictions"] > 0


def test_budget_exceeded_and_a_hook_that_never_returns(faulty_dist, clean):
    # 'slow' sleeps 50 ms in its score hook; the budget leaves the other hooks 25 ms (a 5 ms budget was passed
    # by spfcore_cache_configured itself on a loaded 2-core machine)
    res, d = _sim("--arms", "lru,faulty", "--policy-opt", "faulty.fault=slow", "--hook-budget-ms", "25")
    assert res.exit_code == 4
    err = next(c for c in d["cells"] if c["arm"] == "faulty")["error"]
    assert err["hook"] == "spfcore_score_blocks"
    assert "ms, over its budget of 25 ms" in err["message"]
    assert _strip(next(c for c in d["cells"] if c["arm"] == "lru" and c["seed"] == 1)) == clean["lru", 1]
    # CliRunner runs in the main thread: the SIGALRM timer interrupts the loop
    res, d = _sim("--arms", "faulty,lru", "--policy-opt", "faulty.fault=hangs", "--hook-budget-ms", "200")
    assert res.exit_code == 4
    err = d["cells"][0]["error"]
    assert err["hook"] == "spfcore_score_blocks" and "interrupted after" in err["message"], err
    assert "over its budget of 200 ms" in err["message"]
    assert d["cells"][1]["status"] == "ok"


def test_a_policy_asked_for_but_not_importable_is_an_error_cell(faulty_dist, clean):
    res, d = _sim("--arms", "lru,missing")
    assert res.exit_code == 4
    cells = {(c["arm"], c["seed"]): c for c in d["cells"]}
    assert cells["missing", 1]["error"] == {
        "policy": "missing", "hook": None,
        "message": "PolicyConfigError: policy 'missing' cannot be used: error: ModuleNotFoundError: "
                   "No module named 'faultypol_missing'"}
    assert _strip(cells["lru", 2]) == clean["lru", 2]
    # named by the allowlist (no --arms): an error cell too, never silently dropped
    res, d = _sim(env={"SPFCORE_POLICIES": "lru,missing,nosuch"})
    assert res.exit_code == 4
    assert sorted({c["arm"] for c in d["cells"]}) == ["lru", "missing", "nosuch"]
    assert "not installed or not allowed" in next(c for c in d["cells"] if c["arm"] == "nosuch")["error"]["message"]
    # not asked for: skipped, with a word on stderr
    res = CliRunner().invoke(main, [*ARGS], env={"SPFCORE_DISABLE_POLICIES": "belady_oracle,spf_expected_utility"})
    assert "warning: policy 'missing' (faultypol) skipped: error: ModuleNotFoundError" in res.stderr


def test_discovery_refuses_what_the_runtime_needs(faulty_dist):
    infos = {p.name: p for p in registry.discover({})}
    assert infos["faulty"].status == "ok"
    assert infos["no_params"].status == ("error: TypeError: policy instance has no attribute 'params' after "
                                         "construction (set self.params = params in __init__)")
    assert infos["bad_defaults"].status.startswith("error: TypeError: Params() cannot be built with its defaults")
    res = CliRunner().invoke(main, ["list-policies", "--json"])
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows["no_params"]["status"].startswith("error: TypeError: policy instance has no attribute 'params'")
    # asked for anyway: an error cell naming the reason, no traceback
    res, d = _sim("--arms", "no_params,lru")
    assert res.exit_code == 4 and res.exception is None or isinstance(res.exception, SystemExit)
    assert "has no attribute 'params'" in d["cells"][0]["error"]["message"]
    assert d["cells"][1]["status"] == "ok"


def test_policy_error_names_policy_and_hook_in_the_runtime():
    rt = PolicyRuntime.for_policy("lru", 8, 4, hook_budget_ms=1000)
    assert rt.hook_budget_s == 1.0
    with pytest.raises(registry.PolicyConfigError, match="hook budget -1 ms: must be > 0"):
        PolicyRuntime.for_policy("lru", 8, 4, hook_budget_ms=-1)
    with pytest.raises(registry.PolicyConfigError, match=r"SPFCORE_HOOK_BUDGET_MS='x': expected milliseconds"):
        PolicyRuntime.for_policy("lru", 8, 4, env={"SPFCORE_HOOK_BUDGET_MS": "x"})
    assert PolicyRuntime.for_policy("lru", 8, 4, env={"SPFCORE_HOOK_BUDGET_MS": "250"}).hook_budget_s == 0.25
    e = PolicyError("m", policy="p", hook="h")
    assert e.to_json() == {"policy": "p", "hook": "h", "message": "m"}


def test_choose_victims_fault_leaves_the_evictor_untouched(faulty_dist):
    """A bad victim choice is refused before the evictor acts: the same blocks
    are free, in the same order, and a valid allocation works afterwards."""
    rt = PolicyRuntime.for_policy("faulty", 10, 4, {"fault": "duplicates"})
    rt.release([], list(range(1, 10)), 0.0)
    ids = rt.evict(4, 0.0)  # hashless blocks: no choice needed
    rt.stored(_req(), ids, ["k0", "k1", "k2", "k3"], 0, None, 16, 1.0)
    rt.release(ids[::-1], [], 2.0)
    before = (list(rt.evictor._hashless), dict(rt.by_key), rt.evictions, len(rt.evictor))
    with pytest.raises(PolicyError, match=r"policy 'faulty': hook spfcore_choose_victims returned \[0, 0, 0\]"):
        rt.evict(8, 3.0)
    assert (list(rt.evictor._hashless), dict(rt.by_key), rt.evictions, len(rt.evictor)) == before


def _req():
    from spfcore.views import RequestView

    return RequestView(request_id="r", session_id="s", arrival_index=0, arrival_time=0.0,
                       num_prompt_tokens=17, block_keys=("k0", "k1", "k2", "k3"))


@pytest.mark.engine
def test_gate_with_a_candidate_that_raises_runs_every_other_cell(faulty_dist, tmp_path):
    """Issue 13, reproducer 3, through the real (CPU) vLLM engine: the candidate
    raises in its score hook; its cells fail with the policy, hook and message,
    every other arm's engine cells still run (a failed run restarts the
    engine), the verdict is INCOMPLETE naming the arm, the exit status is 4, and
    running the same command again (the advice) keeps the finished cells and
    fails only the faulty arm's again."""
    pytest.importorskip("vllm")
    out = tmp_path / "gate" / "results.json"
    args = ["gate", "--preset", "quick", "--arms", "lru,faulty,session_ttl,belady_oracle", "--candidate", "faulty",
            "--policy-opt", "faulty.fault=raises", "--seeds", "1,2,3",
            "--set", "personas=4", "--set", "prefix_tokens=256", "--set", "sessions=4",
            "--set", "turns=2", "--set", "query_tokens=32", "--set", "output_tokens=2",
            "--output", str(out), "--no-progress", "--no-sim"]
    for attempt in (1, 2):
        res = CliRunner().invoke(main, args, catch_exceptions=False, env={"COLUMNS": "200"})
        assert res.exit_code == 4, res.output
        r = json.loads(out.read_text())
        bad = [c for c in r["cells"] if c["status"] == "error"]
        assert [(c["arm"], c["seed"]) for c in bad] == [("faulty", 1), ("faulty", 2), ("faulty", 3)], bad
        for c in bad:
            assert c["error"]["policy"] == "faulty" and c["error"]["hook"] == "spfcore_score_blocks"
            assert "ValueError('boom')" in c["error"]["message"]
        ok = [c for c in r["cells"] if c["arm"] != "faulty"]
        assert len(ok) == 9 and all(c["status"] == "ok" and c["num_requests"] == 8 for c in ok)
        v = r["verdict"]
        assert v["status"] == "INCOMPLETE"
        assert v["reasons"][0].startswith("arm faulty seed ") and "spfcore_score_blocks" in v["reasons"][0]
        assert "arm faulty failed: policy 'faulty' failed in hook spfcore_score_blocks" in res.output


def test_the_budget_from_the_environment_reaches_every_runtime(faulty_dist, monkeypatch):
    """``spfcore gate --hook-budget-ms`` sets SPFCORE_HOOK_BUDGET_MS; every
    PolicyRuntime.for_policy of the process (the simulator's, the engine
    adapter's) reads it."""
    from spfcore.run.pipeline import default_sim
    from spfcore.workloads.generators import make

    wl = make("personas", seed=1, personas=2, prefix_tokens=64, sessions=2, turns=2, query_tokens=16, output_tokens=2)
    assert default_sim(wl, "faulty", num_blocks=8, block_size=16, options={"fault": "slow"})["status"] == "ok"
    monkeypatch.setenv("SPFCORE_HOOK_BUDGET_MS", "5")
    with pytest.raises(PolicyError, match=r"policy 'faulty': hook spfcore_score_blocks (took|interrupted after) .* ms, over its budget "
                                          r"of 5 ms") as e:
        default_sim(wl, "faulty", num_blocks=8, block_size=16, options={"fault": "slow"})
    assert (e.value.policy, e.value.hook) == ("faulty", "spfcore_score_blocks")
    assert default_sim(wl, "lru", num_blocks=8, block_size=16)["status"] == "ok"


def test_sys_exit_in_a_hook_or_constructor_is_that_policys_fault():
    """A plugin calling sys.exit() fails its own arm (or is listed broken);
    it never ends the run with a misleading exit status."""
    import sys

    import attrs

    from spfcore import Hint, hookimpl
    from spfcore.registry import new_plugin_manager
    from spfcore.runtime import PolicyError, PolicyRuntime
    from spfcore.testing import MiniCache

    class Exits:
        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            sys.exit(0)

    pm = new_plugin_manager()
    pm.register(Exits(), name="t")
    c = MiniCache(PolicyRuntime(pm, 8, 4, policy_name="t"), 0)
    with pytest.raises(PolicyError, match=r"policy 't' failed in hook spfcore_score_blocks: SystemExit\(0\)") as e:
        c.serve(["a0", "a1"])
    assert e.value.hook == "spfcore_score_blocks"

    class BadHints:
        @hookimpl
        def spfcore_prefetch_hints(self, request, now):
            return [Hint(("k", [1]), request.arrival_index + 2)]

        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            return None

    pm = new_plugin_manager()
    pm.register(BadHints(), name="h")
    rt = PolicyRuntime(pm, 8, 4, policy_name="h")
    c = MiniCache(rt, 0)
    before = rt.snapshot()
    with pytest.raises(PolicyError, match="unhashable") as e:
        c.serve(["a0"])
    assert e.value.hook == "spfcore_prefetch_hints" and rt.snapshot() == before

    @attrs.frozen
    class P:
        """No parameters."""

    class InitExits:
        name, capabilities, Params = "initexit", frozenset(), P

        def __init__(self, params):
            sys.exit(7)

    from spfcore import registry

    with pytest.raises(TypeError, match=r"cannot be built with default Params: SystemExit\(7\)"):
        registry._validate(InitExits)  # discovery lists this reason instead of exiting


def test_a_budget_timer_inside_a_numba_call_is_a_timeout():
    """The budget's timer rings inside a compiled (numba) call that returns an
    array: numba's dispatcher turns the timer's HookTimeout into a
    SystemError ("returned a result with an exception set") on returning a
    tuple; the runtime still reports the budget, not the SystemError."""
    import numba
    import numpy as np

    from spfcore import hookimpl

    @numba.njit(cache=False)
    def spin(a):  # ~0.25 s on a 2-core development machine
        s = 0.0
        for i in range(100_000_000):
            s += np.sqrt(i)
        return a * s, a + s

    spin(np.ones(1))

    class Slow:
        @hookimpl
        def spfcore_tier_score(self, request, keys, now):
            return spin(np.ones(len(keys)))[0]

    pm = registry.new_plugin_manager()
    pm.register(Slow(), name="slow")
    rt = PolicyRuntime(pm, 8, 16, policy_name="slow", hook_budget_s=0.01)
    with pytest.raises(PolicyError, match=r"hook spfcore_tier_score interrupted after .* ms, over its budget of 10 ms"):
        rt.call_hook("spfcore_tier_score", request=None, keys=[1, 2], now=0.0)
