"""Bad arguments are usage errors (exit status 2) naming the option, found
before anything is locked or written, never a traceback, a later exit 1, or
a run that goes ahead on a value that cannot mean anything (NaN, infinity)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from spfcore.cli import main
from spfcore.workloads import synth

SMALL = ["--set", "prefix_tokens=64", "--set", "query_tokens=8"]


def invoke(args):
    res = CliRunner().invoke(main, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    return res


@pytest.mark.parametrize("args, option", [
    (["gate", "--preset", "quick", "--cpu-ratio", "nan"], "--cpu-ratio"),
    (["gate", "--preset", "quick", "--cpu-ratio", "inf"], "--cpu-ratio"),
    (["gate", "--preset", "quick", "--hook-budget-ms", "nan"], "--hook-budget-ms"),
    (["gate", "--preset", "quick", "--time-limit", "nan"], "--time-limit"),
    (["gate", "--preset", "quick", "--throughput-regression", "nan"], "--throughput-regression"),
    (["gate", "--preset", "quick", "--cache-pressure", "nan"], "--cache-pressure"),
    (["gate", "--preset", "quick", "--load", "0.5", "--capacity", "nan"], "--capacity"),
    (["gate", "--preset", "quick", "--load", "0.5", "--capacity", "inf"], "--capacity"),
    (["gate", "--preset", "quick", "--load", "0.5", "--ttft-slo-ms", "nan"], "--ttft-slo-ms"),
    (["gate", "--preset", "quick", "--load", "0"], "--load"),
    (["gate", "--preset", "quick", "--load", "-1"], "--load"),
    (["gate", "--preset", "quick", "--load", "nan"], "--load"),
    (["gate", "--preset", "quick", "--load", "inf"], "--load"),
    (["gate", "--preset", "quick", "--load", "0.5", "--judge-load", "0.8"], "--judge-load"),
    (["gate", "--preset", "quick", "--load", "0.5", "--judge-load", "nan"], "--judge-load"),
    (["gate", "--preset", "quick", "--load", "0.5", "--cpu-ratio", "2"], "--cpu-ratio"),
    (["gate", "--preset", "quick", "--capacity", "3"], "--capacity"),  # only with --load
    (["gate", "--preset", "quick", "--judge-load", "0.5"], "--judge-load"),
    (["gate", "--preset", "quick", "--capacity-only"], "--capacity-only"),
    (["simulate", *SMALL, "--hook-budget-ms", "nan"], "--hook-budget-ms"),
    (["simulate-tiered", *SMALL, "--bandwidth-gbs", "nan"], "--bandwidth-gbs"),
    (["simulate-tiered", *SMALL, "--bandwidth-gbs", "inf"], "--bandwidth-gbs"),
    (["simulate-tiered", *SMALL, "--latency-us", "nan"], "--latency-us"),
    (["simulate-tiered", *SMALL, "--prefill-us-per-token", "inf"], "--prefill-us-per-token"),
    (["simulate-tiered", *SMALL, "--cpu-ratio", "nan"], "--cpu-ratio"),
    (["sweep", "--policies", "lru", "--fractions", "0.5", "--workload", "zipf", "--hook-budget-ms", "nan"],
     "--hook-budget-ms"),
    (["sweep", "--policies", "lru", "--fractions", "0.5", "--workload", "zipf", "--workload", "zipf"], "--workload"),
    (["make-trace", "--requests", "3", "--output-tokens", "inf"], "--output-tokens"),
    (["make-trace", "--requests", "3", "--zipf-alpha", "nan"], "--zipf-alpha"),
    (["make-trace", "--requests", "3", "--mean-turns", "inf"], "--mean-turns"),
    (["make-trace", "--requests", "0"], "--requests"),  # an empty trace that simulate would refuse
])
def test_a_bad_value_is_a_usage_error_naming_its_option_and_nothing_is_written(args, option, tmp_path):
    out = tmp_path / "out"
    where = {"gate": ["--output", str(out / "results.json")], "simulate": ["-o", str(out / "r.json")],
             "simulate-tiered": ["-o", str(out / "r.json")], "sweep": ["-o", str(out)],
             "make-trace": [str(out / "t.jsonl")]}[args[0]]
    res = invoke([*args, *where])
    assert res.exit_code == 2, res.output
    assert option in res.output, res.output
    assert list(tmp_path.iterdir()) == []


def test_a_trace_given_twice_to_sweep_is_a_usage_error(tmp_path):
    trace = tmp_path / "t.jsonl"
    synth.write_synthetic(trace, 5, 0, synth.TraceShape())
    res = invoke(["sweep", "-o", str(tmp_path / "out"), "--policies", "lru", "--fractions", "0.5",
                  "--trace", str(trace), "--trace", str(tmp_path / "." / "t.jsonl")])
    assert res.exit_code == 2 and "--trace" in res.output and "given twice" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_load_levels_on_a_trace_are_a_usage_error(tmp_path):
    trace = tmp_path / "t.jsonl"
    synth.write_synthetic(trace, 5, 0, synth.TraceShape())
    res = invoke(["gate", "--preset", "quick", "--trace", str(trace), "--load", "0.5",
                  "--output", str(tmp_path / "out" / "results.json")])
    assert res.exit_code == 2 and "--load" in res.output and "generated workload" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_the_trace_shape_refuses_non_finite_values():
    for kw in ({"zipf_alpha": float("nan")}, {"output_tokens": float("inf")}, {"rate": float("inf")},
               {"mean_turns": float("inf")}):
        with pytest.raises(ValueError, match=f"{next(iter(kw))} must be .* and finite"):
            synth.TraceShape(**kw)


def test_merge_from_a_run_of_another_configuration_is_a_usage_error_and_writes_nothing(tmp_path):
    """The source's cells are checked before this run's sidecar exists: exit status 2 naming
    --merge-from, and the output folder (created for the lock) is gone again."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.cells.jsonl").write_text(json.dumps({"sidecar": 1, "fingerprint": {"workload": "zipf"}})
                                               + "\n")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "results.cells.jsonl").write_text("not json\n")
    for src, words in ((other, "another configuration"), (garbage, "not valid JSON; not a sidecar")):
        out = tmp_path / f"out-{src.name}" / "results.json"
        res = invoke(["gate", "--preset", "quick", "--arms", "lru,session_ttl", "--candidate", "session_ttl",
                      "--baseline", "lru", "--oracle", "none", "--seeds", "42", "--no-progress",
                      "--merge-from", str(src), "--output", str(out)])
        assert res.exit_code == 2, res.output
        assert "--merge-from" in res.output and words in " ".join(res.output.split()), res.output
        assert "use --fresh" not in res.output  # --fresh discards this run's cells, not the source's
        assert not out.parent.exists()


def test_help_of_an_unbounded_finite_option():
    out = " ".join(CliRunner().invoke(main, ["gate", "--help"], terminal_width=200).output.split())
    assert "--judge-load F The level the verdict judges [first of --load]. [finite]" in out
    assert "--throughput-regression FLOAT Gate threshold" in out and "None" not in out
