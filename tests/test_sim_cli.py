"""``spfcore simulate`` end to end (click runner, real simulator)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from spfcore.cli import main

ARGS = ["simulate", "--set", "personas=2", "--set", "prefix_tokens=64", "--set", "sessions=4", "--set", "turns=2",
        "--set", "query_tokens=16", "--num-blocks", "30", "--seeds", "1,2"]


def test_json_records_every_flag_and_reports_failing_arm():
    res = CliRunner().invoke(main, [*ARGS, "--arms", "lru,nope", "--json"])
    assert res.exit_code == 4, res.output  # a requested arm failed: the JSON says why, the status says so
    assert "arm(s) failed: nope" in res.stderr
    d = json.loads(res.stdout)
    assert d["workload"]["personas"] == 2 and d["workload"]["output_tokens"] == 32  # defaults echoed too
    assert d["workload_params"]["1"]["seed"] == 1 and d["workload_params"]["2"]["query_tokens"] == 16
    assert d["cache"]["num_blocks"] == {"1": 30, "2": 30}
    cells = {(c["arm"], c["seed"]): c for c in d["cells"]}
    assert cells["nope", 1]["status"] == "error" and cells["lru", 1]["status"] == "ok"
    assert cells["nope", 1]["error"]["policy"] == "nope" and cells["nope", 1]["error"]["hook"] is None
    assert "not installed" in cells["nope", 1]["error"]["message"]
    # 4 sessions x 2 turns, prompts of 64 + 16 tokens; sessions s and s+2 share persona s mod 2 (4 blocks)
    lru = cells["lru", 1]
    assert lru["prompt_tokens"] == 8 * 80 and "requests" not in lru
    assert d["summary"]["ceiling:infinite"]["token_hit_rate"] == 6 * 64 / 640  # all but the 2 first uses hit


def test_table_and_bad_flag():
    ok = CliRunner().invoke(main, [*ARGS, "--arms", "lru"])
    assert ok.exit_code == 0 and "ceiling:infinite" in ok.output
    bad = CliRunner().invoke(main, ["simulate", "--set", "sesions=3"])
    assert bad.exit_code == 2 and "unknown flag 'sesions'" in bad.output
    both = CliRunner().invoke(main, ["simulate", "--num-blocks", "9", "--cache-pressure", "2"])
    assert both.exit_code == 2 and "not both" in both.output


def test_results_page_from_simulate_json(tmp_path):
    """`spfcore results-page` turns `simulate --json` into arms x workloads tables
    whose cells are the JSON's seed means, with the reproducing command."""
    args = ["simulate", "--workload", "personas", "--set", "personas=2", "--set", "prefix_tokens=64",
            "--set", "sessions=4", "--set", "turns=2", "--set", "query_tokens=16", "--set", "output_tokens=2",
            "--block-size", "16", "--num-blocks", "12", "--arms", "lru,belady_oracle", "--seeds", "1,2", "--json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["kind"] == "spfcore-simulate" and data["command"].startswith("spfcore ")
    assert data["schema_version"] == 1
    f = tmp_path / "sim-tiny.json"
    f.write_text(res.output)
    out = tmp_path / "page.md"
    res = CliRunner().invoke(main, ["results-page", str(f), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    lru = data["summary"]["lru"]["token_hit_rate"]
    bel = data["summary"]["belady_oracle"]["token_hit_rate"]
    inf = data["summary"]["ceiling:infinite"]["token_hit_rate"]
    assert f"| tiny | {lru:.2%} | {bel:.2%} | {inf:.2%} |" in page
    assert data["command"] in page
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    res = CliRunner().invoke(main, ["results-page", str(bad)])
    assert res.exit_code != 0 and "neither" in res.output


def test_every_arm_decides_the_same_under_any_pythonhashseed():
    """Decisions must not follow set iteration order (str/bytes hashes are salted
    per process): the seed workload shuffled, where session_ttl's pin cap binds
    (~40,000 refused pins), in three processes with different PYTHONHASHSEED, through
    the plugins' hooks (``SPFCORE_SIM_REPLAY=python``: the compiled replays of lru,
    session_ttl, frequency and belady_oracle use no salted hash), and once more with
    the compiled replays, which must decide the same."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "spfcore.cli", "simulate", "--workload", "personas", "--set", "order=shuffled",
           "--seeds", "42", "--json"]
    runs = []
    for hs, mode in (("1", "python"), ("2", "python"), ("3", "python"), ("4", "auto")):
        out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                             env=dict(os.environ, PYTHONHASHSEED=hs, SPFCORE_SIM_REPLAY=mode))
        cells = json.loads(out.stdout)["cells"]
        runs.append({c["arm"]: (c["prefill_tokens_recomputed"], c["evictions"], c["pins_refused"]) for c in cells})
    assert runs[0]["session_ttl"][2] > 10_000  # the cap binds, so the re-pin order matters
    assert set(runs[0]) >= {"lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle"}
    assert runs[1] == runs[0] and runs[2] == runs[0] and runs[3] == runs[0]


def test_materialized_mooncake_trace_defaults_to_its_tokens_per_block(tmp_path):
    """--tokens-per-block T without --block-size simulates blocks of T tokens
    (one hash id, one block), as the gate does; --block-size still wins."""
    trace = tmp_path / "mc.jsonl"
    rows = [{"timestamp": 10 * i, "input_length": 1024, "output_length": 4, "hash_ids": [0, 1]} for i in range(3)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["simulate", "--trace", str(trace), "--tokens-per-block", "32", "--num-blocks", "6", "--arms", "lru",
            "--json"]
    d = json.loads(CliRunner().invoke(main, base).stdout)
    assert d["cache"]["block_size"] == 32
    lru = d["cells"][0]
    # a prompt of exactly 2 blocks hits at most 1 (its last token is recomputed): 32 tokens, twice
    assert lru["prompt_tokens"] == 3 * 64 and lru["cached_tokens"] == 2 * 32
    d16 = json.loads(CliRunner().invoke(main, [*base, "--block-size", "16"]).stdout)
    assert d16["cache"]["block_size"] == 16 and d16["cells"][0]["cached_tokens"] == 2 * 48


def test_a_cache_larger_than_the_workload_can_fill_is_refused():
    res = CliRunner().invoke(main, [*ARGS[:-4], "--num-blocks", "100000000", "--seeds", "1"])
    assert res.exit_code == 2
    assert "Invalid value for --num-blocks: 100,000,000 blocks is more than this workload can ever fill" in res.output
    res = CliRunner().invoke(main, [*ARGS[:-4], "--cache-pressure", "1e-9", "--seeds", "1"])
    assert res.exit_code == 2 and "Invalid value for --cache-pressure" in res.output


def test_a_bad_policy_option_fails_before_any_arm_runs():
    res = CliRunner().invoke(main, [*ARGS, "--arms", "lru,frequency", "--policy-opt", "frequency.min_count=0",
                                    "--json"])
    assert res.exit_code == 2 and res.stdout == ""
    assert "policy 'frequency': 'min_count' must be >= 1: 0" in res.output


def test_a_seed_or_arm_given_twice_is_refused():
    res = CliRunner().invoke(main, [*ARGS[:-2], "--seeds", "1,1"])
    assert res.exit_code == 2 and "'1,1': a seed given twice would count twice in the means" in res.output
    res = CliRunner().invoke(main, [*ARGS, "--arms", "lru,lru"])
    assert res.exit_code == 2 and "'lru,lru': an arm is given twice" in res.output
    # the gate parses --seeds with the same callback (one parser: spfcore.cli.options.seed_list)
    res = CliRunner().invoke(main, ["gate", "--preset", "quick", "--seeds", "42,43,42"])
    assert res.exit_code == 2 and "'42,43,42': a seed given twice would count twice in the means" in res.output
    res = CliRunner().invoke(main, ["gate", "--preset", "quick", "--arms", "lru,lru"])
    assert res.exit_code == 2 and "'lru,lru': a value is given twice" in res.output
