"""`spfcore bench`: the versioned suite in the simulator, its quick form for CI."""

import json

import pytest
from click.testing import CliRunner

from spfcore import bench
from spfcore.cli import main
from spfcore.sim import simulate
from spfcore.workloads import generators
from spfcore.workloads.pressure import num_blocks_for_pressure


def test_the_suite_covers_every_shape_and_both_trace_sizes():
    for kind in ("full", "quick"):
        cases = bench.SUITE[kind]
        assert {c.workload for c in cases} == (set(generators.GENERATORS) - generators.HELD_OUT) | {"mooncake"}
        assert len({c.name for c in cases}) == len(cases)
    full = {c.name: c for c in bench.SUITE["full"]}
    assert (full["mooncake-1828"].num_blocks, full["mooncake-9140"].num_blocks) == (1828, 9140)
    assert full["seed"].workload == "personas" and full["seed"].flags == {} and full["seed"].pressure == 2.3


@pytest.mark.slow
def test_quick_bench_table_json_and_numbers(tmp_path):
    if bench.find_trace() is None:
        pytest.skip("Mooncake trace not present")
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(main, ["bench", "frequency", "--quick", "--json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(res.output)
    assert json.loads(out.read_text()) == result
    assert (result["kind"], result["suite_version"], result["quick"], result["contract"]) == \
        ("spfcore-bench", bench.SUITE_VERSION, True, "1.3")  # frequency declares contract 1.3 (tier hooks, keys-only)
    rows = {r["case"]: r for r in result["summary"]}
    assert list(rows) == [c.name for c in bench.SUITE["quick"]]
    cases = {c["case"]: c for c in result["cases"]}
    for name, r in rows.items():
        arms = cases[name]["arms"]
        assert set(arms) == {"frequency", "lru", "session_ttl", "spf_expected_utility", "belady_oracle"}
        assert all(a["status"] == "ok" for a in arms.values())
        others = {n: arms[n]["token_hit_rate"] for n in ("session_ttl", "spf_expected_utility")}
        assert r["best_other"] == max(others, key=others.get) and r["best_other_hit"] == max(others.values())
        assert (r["policy"], r["lru"], r["belady"]) == (arms["frequency"]["token_hit_rate"],
                                                       arms["lru"]["token_hit_rate"],
                                                       arms["belady_oracle"]["token_hit_rate"])
        assert r["belady"] >= r["lru"] and r["vs_lru_points"] == round(100 * (r["policy"] - r["lru"]), 2)
    # the bench's numbers are the simulator's: the seed case replayed directly
    seed = bench.SUITE["quick"][0]
    wl = generators.make("personas", seed=bench.SEED, **seed.flags)
    nb = num_blocks_for_pressure(wl, seed.pressure, seed.block_size)
    assert cases["seed"]["num_blocks"] == nb
    direct = simulate(wl, "frequency", num_blocks=nb, block_size=seed.block_size)
    assert rows["seed"]["policy"] == direct["token_hit_rate"]
    # the table form of the same run
    res = CliRunner().invoke(main, ["bench", "frequency", "--quick", "--case", "revisit"])
    assert res.exit_code == 0, res.output
    assert "suite v1, quick" in res.output and "revisit" in res.output
    assert f"{100 * rows['revisit']['policy']:.2f}%" in res.output


def test_a_missing_trace_skips_its_cases(monkeypatch, tmp_path):
    monkeypatch.setenv(bench.TRACE_ENV, str(tmp_path / "nowhere.jsonl"))
    res = CliRunner().invoke(main, ["bench", "lru", "--quick", "--case", "mooncake-400", "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["summary"]
    assert row == {"case": "mooncake-400", "skipped": f"Mooncake trace not found (give --trace or set {bench.TRACE_ENV})"}


@pytest.mark.parametrize("args, message", [
    (["no_such_policy"], "policy 'no_such_policy' is not installed"),
    (["frequency", "--policy-opt", "min_count=0"], "'min_count' must be >= 1"),
    (["frequency", "--case", "nope"], "unknown case(s) ['nope']"),
])
def test_bad_input_is_refused_before_any_replay(args, message):
    res = CliRunner().invoke(main, ["bench", *args])
    assert res.exit_code == 2 and message in res.output, res.output
