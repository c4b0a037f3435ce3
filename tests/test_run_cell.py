"""The stored cell (spfcore.run.cell): one cattrs converter reads and writes
the sidecar line, typed (the error a CellError), the JSON unchanged; and the
typed record the drivers build (SimRecord, EngineRecord, TieredRecord)."""

import json

import pytest

from spfcore.run.cell import (MEAN_FIELDS, TIER_FIELDS, CellError, CellFormatError, CellRecord, EngineTierRecord,
                              SimRecord, StoredCell, TieredRecord, error_cell, error_of, error_text, record_fields)
from spfcore.run.store import Store, sidecar_path
from spfcore.runtime import PolicyError
from spfcore.sim.simulator import simulate
from spfcore.sim.tiered import simulate_tiered
from spfcore.workloads.generators import make

OK = {"arm": "lru", "seed": 3, "status": "ok", "token_hit_rate": 0.25, "requests": [{"ttft_s": 0.5}]}


def test_the_line_is_the_version_1_line():
    # what the hand-written to_json of schema version 1 wrote, byte for byte
    assert json.dumps(StoredCell("sim", "lru", 3, OK).to_json()) == json.dumps(
        {"kind": "sim", "arm": "lru", "seed": 3, "cell": OK})
    assert StoredCell("engine", "lru", 3, OK, 2).to_json() == {"kind": "engine", "arm": "lru", "seed": 3, "cell": OK,
                                                               "repeat": 2}
    for c in (StoredCell("sim", "lru", 3, OK), StoredCell("ceilings", "*", 0, {"seed": 0}, 1)):
        assert StoredCell.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert StoredCell.from_json({"kind": "sim", "arm": "lru", "seed": 3, "cell": OK, "repeat": None}).repeat == 0


@pytest.mark.parametrize("line, words", [
    ({"kind": "sim", "arm": "lru", "cell": {}}, "field 'seed' missing"),
    ({"kind": "sim", "arm": "lru", "seed": "3", "cell": {}}, "'seed' must be <class 'int'>"),
    ({"kind": "gpu", "arm": "lru", "seed": 3, "cell": {}}, "'kind' must be in"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": []}, "'record' must be <class 'dict'>"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": {}, "repeat": -1}, "'repeat' must be >= 0"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": {"error": {"policy": "x"}}}, "field 'cell.error': field 'hook'"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": {"error": ["boom"]}}, "field 'cell.error': expected"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": {"error": {"policy": 1, "hook": None, "message": "m"}}},
     "field 'cell.error': 'policy' must be"),
    (["sim"], "expected a JSON object, got list"),
])
def test_a_bad_line_names_the_field(line, words):
    with pytest.raises(CellFormatError) as err:
        StoredCell.from_json(line)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_error_is_typed():
    exc = PolicyError("policy 'p' failed in hook spfcore_score_blocks: boom", policy="p", hook="spfcore_score_blocks")
    cell = error_cell("p", 1, RuntimeError("wrapped").with_traceback(None))
    assert cell["error"] == {"policy": "p", "hook": None, "message": "RuntimeError: wrapped"}
    try:
        raise RuntimeError("engine died") from exc
    except RuntimeError as outer:
        err = error_of(outer, "p")
    assert err == {"policy": "p", "hook": "spfcore_score_blocks", "message": str(exc)}
    c = StoredCell("engine", "p", 1, {"arm": "p", "seed": 1, "status": "error", "error": err})
    assert c.failed and c.error == CellError("p", "spfcore_score_blocks", str(exc))
    assert error_text(c.error) == error_text(err) == str(exc)  # the message names the hook already
    assert CellError("p", "spfcore_blocks_hit", "boom").text() == "boom [hook spfcore_blocks_hit]"
    old = StoredCell.from_json({"kind": "sim", "arm": "p", "seed": 1, "cell": {"error": "ValueError: old file"}})
    assert old.error == CellError(None, None, "ValueError: old file") and old.failed
    assert not StoredCell("sim", "p", 1, OK).failed and StoredCell("sim", "p", 1, OK).error is None


def test_the_store_reads_back_what_it_wrote(tmp_path):
    path = sidecar_path(tmp_path / "results.json")
    s = Store(path, {"f": 1}, fresh=False)
    s.put("sim", "lru", 3, OK)
    s.put("engine", "p", 3, error_cell("p", 3, ValueError("bad")))
    s.put("engine", "lru", 3, OK, 1)
    lines = path.read_text().splitlines()
    assert json.loads(lines[1]) == {"kind": "sim", "arm": "lru", "seed": 3, "cell": OK}
    again = Store(path, {"f": 1}, fresh=False)
    assert again.done == s.done == {("sim", "lru", 3): OK, ("engine", "lru", 3, 1): OK}
    assert list(again.failed) == [("engine", "p", 3)]


# ------------------------------------------------------------------ the typed record a driver builds


def _wl():
    return make("personas", seed=1, personas=3, prefix_tokens=64, sessions=6, turns=2, query_tokens=8,
                output_tokens=3)


def _sim(**kw) -> dict:
    return simulate(_wl(), "lru", num_blocks=20, block_size=16, **kw)


def test_a_driver_record_is_its_class_exactly():
    """Each driver's dict rebuilds into its class and back unchanged: no field
    outside the class, none lost, optional fields left out when absent."""
    seq = _sim()
    assert SimRecord(**seq).to_json() == seq and list(seq) == list(record_fields(SimRecord))[:len(seq)]
    assert "max_running" not in seq and seq["requests"]  # sequential: no scheduler limits; rows kept
    conc = _sim(mode="concurrent", max_running=2, token_budget=64)
    assert SimRecord(**conc).to_json() == conc
    assert (conc["max_running"], conc["token_budget"], conc["step_overhead_s"]) == (2, 64, 0.01)
    tier = simulate_tiered(_wl(), "lru", num_blocks=20, cpu_blocks=8, block_size=16)
    assert TieredRecord(**tier).to_json() == tier and "requests" not in tier
    assert tier["gpu_hit_tokens"] + tier["cpu_hit_tokens"] + tier["miss_tokens"] == tier["prompt_tokens"]
    assert tier["mode"] == "tiered" and tier["status"] == "ok"


def test_a_record_with_a_missing_or_misspelled_field_fails_naming_it():
    good = _sim()
    bad = {k: v for k, v in good.items() if k != "prefill_tokens_recomputed"}
    with pytest.raises(TypeError, match="prefill_tokens_recomputed"):
        SimRecord(**bad)
    with pytest.raises(TypeError, match="token_hit_rat"):
        SimRecord(**{**bad, "prefill_tokens_recomputed": 0, "token_hit_rat": 0.5})


@pytest.mark.parametrize("field, value, words", [
    ("evictions", -1, "field 'evictions': expected a count"),
    ("prefill_tokens_recomputed", -16, "field 'prefill_tokens_recomputed': expected a count"),
    ("num_requests", 3.0, "field 'num_requests': expected a count"),
    ("hints_issued", True, "field 'hints_issued': expected a count"),
    ("token_hit_rate", 1.5, "field 'token_hit_rate': expected a rate in [0, 1]"),
    ("block_hit_rate", float("nan"), "field 'block_hit_rate': expected a rate"),
    ("wall_seconds", -0.1, "field 'wall_seconds': expected a number >= 0"),
    ("arm", None, "field 'arm': expected a string"),
    ("requests", {"r": 1}, "field 'requests': expected a list of request rows or null"),
])
def test_a_bad_value_fails_at_build_time_naming_the_field(field, value, words):
    with pytest.raises(CellFormatError) as exc:
        SimRecord(**{**_sim(), field: value})
    assert words in str(exc.value)


def test_an_engine_record_takes_nan_for_a_latency_without_samples():
    """No request finished: its percentiles are NaN (kept), a negative one fails."""
    base = {k: v for k, v in _sim().items() if k in record_fields(CellRecord)}
    nan = float("nan")
    rec = EngineTierRecord(**base, workload="w", max_num_seqs=4, max_num_batched_tokens=256, policy_faults=0,
                           policy_fault=None, fail_open_allocations=0, fail_open_blocks=0, queue_p50_s=nan,
                           queue_p95_s=nan, preemptions=0, ttft_p50_s=nan, ttft_p95_s=nan, ttft_p99_s=nan,
                           ttft_mean_s=nan, e2e_p50_s=nan, e2e_p95_s=nan, throughput_rps=0.0, wall_s=0.5,
                           requests=[], cpu_blocks=8, cpu_hit_tokens=0, gpu_hit_tokens=0, tier_stored_blocks=None,
                           tier_not_admitted=None).to_json()
    assert rec["tier_stored_blocks"] is None and "steps" not in rec and rec["ttft_p95_s"] != rec["ttft_p95_s"]
    with pytest.raises(CellFormatError, match="field 'ttft_p95_s'"):
        EngineTierRecord(**{**rec, "ttft_p95_s": -1.0})


def test_summary_field_lists_come_from_the_classes():
    # the hand-kept lists they replace (report/results.py MEAN_FIELDS, run/cell.py TIER_FIELDS), as sets
    assert set(MEAN_FIELDS) == {
        "num_requests", "prompt_tokens", "cached_tokens", "token_hit_rate", "prefill_tokens_recomputed",
        "evictions", "hook_seconds", "hook_calls", "policy_seconds", "evict_seconds", "evict_calls",
        "hints_issued", "hints_used", "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "ttft_mean_s", "e2e_p50_s",
        "e2e_p95_s", "throughput_rps", "wall_s", "queue_p50_s", "queue_p95_s", "preemptions"}
    assert set(TIER_FIELDS) == {"cpu_blocks", "gpu_hit_tokens", "cpu_hit_tokens", "tier_stored_blocks",
                                "tier_not_admitted", "load_s_mean", "recompute_s_mean", "promoted_blocks",
                                "promoted_used", "promoted_wasted"}
    assert len(set(MEAN_FIELDS)) == len(MEAN_FIELDS) and len(set(TIER_FIELDS)) == len(TIER_FIELDS)
