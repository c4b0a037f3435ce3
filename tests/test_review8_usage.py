"""Bad inputs found in review 8: usage errors (exit 2, nothing written, no
traceback) for a bad SPFCORE_SIM_REPLAY in the replaying commands and for
scripts/tier_check.py's and benchmarks/sim_engine_events.py's arguments; and a
compiled replay's wall_seconds without numba's load."""

from __future__ import annotations

import time

import pytest
from conftest import load_script
from click.testing import CliRunner

from spfcore.cli import main
from spfcore.sim import simulate, simulate_stream, simulator
from spfcore.workloads.generators import make





@pytest.mark.parametrize("args", [
    ["simulate", "--workload", "zipf", "--arms", "lru", "--num-blocks", "400", "-o", "{out}/s.json"],
    ["sweep", "-o", "{out}/sw", "--workload", "zipf", "--policies", "lru", "--num-blocks", "400"],
])
def test_bad_replay_env_is_a_usage_error_before_anything_is_written(tmp_path, args):
    args = [a.replace("{out}", str(tmp_path)) for a in args]
    res = CliRunner().invoke(main, args, env={"SPFCORE_SIM_REPLAY": "numba"})
    assert res.exit_code == 2, res.output
    assert "SPFCORE_SIM_REPLAY='numba': expected 'auto' or 'python'" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert list(tmp_path.iterdir()) == []


def test_bad_replay_env_does_not_stop_commands_that_do_not_replay():
    res = CliRunner().invoke(main, ["list-policies", "--json"], env={"SPFCORE_SIM_REPLAY": "numba"})
    assert res.exit_code == 0, res.output


def test_compiled_wall_seconds_leave_out_numbas_load(monkeypatch):
    real = simulator._load_nb

    def slow_load():  # a first load in a fresh process takes ~1 s (numba and the cached kernels)
        if not slow_load.done:
            slow_load.done = True
            time.sleep(1.0)
        return real()

    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    wl = make("mix", seed=1)
    for run in (lambda: simulate(wl, "lru", num_blocks=4000, block_size=16),
                lambda: simulate_stream(wl.requests, "lru", num_blocks=4000, block_size=16)):
        slow_load.done = False
        monkeypatch.setattr(simulator, "_load_nb", slow_load)
        cell = run()
        assert slow_load.done
        assert cell["wall_seconds"] < 1.0, cell["wall_seconds"]


@pytest.mark.parametrize("argv, msg", [
    (["--block-size", "0"], "argument --block-size: must be >= 1, got 0"),
    (["--block-size", "-5"], "argument --block-size: must be >= 1, got -5"),
    (["--model", "/nonexistent"], "argument --model: model '/nonexistent': not a preset"),
])
def test_tier_check_bad_arguments(capsys, argv, msg):
    tc = load_script("scripts/tier_check.py")
    with pytest.raises(SystemExit) as exc:
        tc.main(argv)
    assert exc.value.code == 2
    assert msg in capsys.readouterr().err


@pytest.mark.parametrize("argv, msg", [
    (["--replay"], "--replay: no recorded runs in"),
    (["--runs", "0"], "argument --runs: must be >= 1, got 0"),
    (["--arms", "lru,nosuch"], "argument --arms: policy 'nosuch' is not installed"),
])
def test_sim_engine_events_bad_arguments(tmp_path, capsys, argv, msg):
    se = load_script("benchmarks/sim_engine_events.py")
    with pytest.raises(SystemExit) as exc:
        se.main([str(tmp_path / "out"), *argv])
    assert exc.value.code == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["simulate", "simulate-tiered"])
def test_workload_and_trace_together_is_a_usage_error(tmp_path, command):
    """--workload with --trace ran the trace and silently dropped the generator."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}\n')
    out = tmp_path / "o.json"
    res = CliRunner().invoke(main, [command, "--workload", "zipf", "--trace", str(trace), "--arms", "lru",
                                    "--num-blocks", "4", "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert "--workload/--trace: give a generator or a trace, not both" in res.output
    assert not out.exists()
    res = CliRunner().invoke(main, [command, "--trace", str(trace), "--arms", "lru", "--num-blocks", "3",
                                    "-o", str(out)])  # the trace alone still runs
    assert res.exit_code == 0, res.output


def test_describe_an_unknown_policy_is_a_usage_error():
    res = CliRunner().invoke(main, ["describe", "nosuch"])
    assert res.exit_code == 2, res.output
    assert "Invalid value for NAME: policy 'nosuch' is not installed or not allowed" in res.output


def test_tiered_cpu_blocks_and_cpu_ratio_together_is_a_usage_error(tmp_path):
    """--cpu-ratio 4 --cpu-blocks 10 silently ran a tier of 10 blocks."""
    out = tmp_path / "o.json"
    base = ["simulate-tiered", "--set", "prefix_tokens=512", "--set", "query_tokens=32", "--arms", "lru", "-o", str(out)]
    res = CliRunner().invoke(main, [*base, "--cpu-ratio", "4", "--cpu-blocks", "10"])
    assert res.exit_code == 2, res.output
    assert "--cpu-blocks/--cpu-ratio: give --cpu-blocks or --cpu-ratio, not both" in res.output
    assert not out.exists()
    res = CliRunner().invoke(main, [*base, "--cpu-blocks", "10"])
    assert res.exit_code == 0, res.output


def test_verdict_table_shows_an_info_rows_interval():
    """policy_cost decides throughput in a settled verdict; its interval (the reason an
    INCONCLUSIVE names) was printed as "-" in the table."""
    from spfcore.report.tables import make_console, verdict_table

    v = {"status": "INCONCLUSIVE", "settled": True, "passes": 1, "criteria": [], "info": [
        {"name": "policy_cost", "value": 0.0042, "op": "<", "threshold": 0.01, "passed": True, "note": "n",
         "ci": {"low": -0.0404, "high": 0.1157, "method": "units-t"}}]}
    c = make_console()
    with c.capture() as cap:
        c.print(verdict_table(v))
    assert "[-0.0404, +0.1157] (units-t)" in cap.get()


def test_gate_role_arm_errors_are_usage_errors(tmp_path, monkeypatch):
    """A misspelt or missing role arm stopped the gate before any cell with exit 1."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "g" / "r.json"
    for extra in (["--arms", "lru,session_ttl,spf_expected_utilty,belady_oracle", "--candidate", "spf_expected_utilty"],
                  ["--candidate", "nosuch"]):
        res = CliRunner().invoke(main, ["gate", "--preset", "quick", *extra, "--output", str(out), "--no-progress"])
        assert res.exit_code == 2, res.output
        assert "field 'arms'" in res.output
        assert not (tmp_path / "g").exists()
