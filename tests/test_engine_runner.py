"""The engine runner (spfcore.engine.runner): model presets, the cell record,
the headroom of the seed's workload shape on CPU, and exact agreement of the
engine with the simulator for every installed arm.

One engine (tiny model, PolicyScheduler) serves every arm of the module: arms
are swapped with ``EngineSession.use_policy`` (a prefix-cache reset and a
fresh PolicyRuntime), as the gate runner does between cells.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from spfcore import registry
from spfcore.engine.presets import MODELS_DIR, model_config, resolve_model
from spfcore.engine.runner import EngineSpec, open_engine
from spfcore.registry import PolicyConfigError
from spfcore.run.cell import EngineRecord
from spfcore.workloads.generators import make
from spfcore.workloads.pressure import num_blocks_for_pressure

BS = 32

# The SPF seed's shape scaled for CPU: 8 personas x 512-token prefix, 16
# sessions x 2 turns, 32-token queries, 4 output tokens, round robin.
SHAPE = dict(personas=8, prefix_tokens=512, sessions=16, turns=2, query_tokens=32, output_tokens=4,
             order="round_robin")


# ----------------------------------------------------------------- no engine


def test_resolve_model_presets_and_paths(tmp_path):
    path, fmt = resolve_model(None)
    assert (fmt, Path(path)) == ("dummy", MODELS_DIR / "tiny-llama")
    assert resolve_model("tiny") == (path, "dummy")
    assert resolve_model("llama-3.2-3b") == (str(MODELS_DIR / "llama-3.2-3b"), "dummy")
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == (str(tmp_path.resolve()), "auto")
    with pytest.raises(ValueError, match="not a preset"):
        resolve_model(str(tmp_path / "missing"))


def test_model_configs_match_the_documented_architectures():
    tiny = model_config("tiny")
    assert (tiny["num_hidden_layers"], tiny["hidden_size"], tiny["num_attention_heads"],
            tiny["vocab_size"]) == (2, 128, 4, 32000)
    assert tiny["max_position_embeddings"] >= 16384
    big = model_config("llama-3.2-3b")
    assert (big["hidden_size"], big["intermediate_size"], big["num_hidden_layers"],
            big["num_attention_heads"], big["num_key_value_heads"], big["head_dim"],
            big["vocab_size"]) == (3072, 8192, 28, 24, 8, 128, 128256)
    assert big["tie_word_embeddings"] is True and big["rope_theta"] == 500000.0
    assert big["rope_scaling"] == {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}
    assert big["max_position_embeddings"] == 131072 and big["torch_dtype"] == "bfloat16"
    for f in MODELS_DIR.glob("*/config.json"):
        json.loads(f.read_text())


def test_engine_spec_and_policy_errors_fail_before_the_engine_starts():
    with pytest.raises(ValueError, match="num_blocks must be >= 2"):
        EngineSpec(num_blocks=1)
    with pytest.raises(ValueError, match="block_size"):
        EngineSpec(block_size=0)
    with pytest.raises(PolicyConfigError, match="no_such_policy"):
        open_engine(EngineSpec(num_blocks=8), "no_such_policy")


# ----------------------------------------------------------------- engine


def installed_arms() -> list[str]:
    return [p.name for p in registry.discover() if p.status == "ok"]


@pytest.fixture(scope="module")
def workload():
    return make("personas", seed=42, **SHAPE)


@pytest.fixture(scope="module")
def num_blocks(workload):
    n = num_blocks_for_pressure(workload, 2.3, BS)
    # 8 personas x 16 blocks = 128 reusable blocks; floor(128 * 32 / (2.3 * 32)) = 55
    assert n == 55
    return n


@pytest.fixture(scope="module")
def cells(workload, num_blocks):
    """Engine cells by arm, computed on first use with one shared engine."""
    pytest.importorskip("vllm")
    session = open_engine(EngineSpec(model="tiny", block_size=BS, num_blocks=num_blocks, max_num_seqs=4,
                                     dtype="float32"), "lru")
    done: dict[str, dict] = {}

    def get(arm: str) -> dict:
        if arm not in done:
            session.use_policy(arm)
            done[arm] = session.run(workload, seed=42)
        return done[arm]

    yield get
    session.close()


@pytest.mark.engine
def test_cell_record(cells, workload, num_blocks):
    c = cells("lru")
    assert c["arm"] == "lru" and c["seed"] == 42 and c["mode"] == "sequential"
    assert c["num_requests"] == 32 and c["num_blocks"] == num_blocks and c["block_size"] == BS
    assert c["prompt_tokens"] == 32 * (512 + 32)
    assert c["prefill_tokens_recomputed"] == c["prompt_tokens"] - c["cached_tokens"]
    assert [r["request_id"] for r in c["requests"]] == [r.request_id for r in workload.requests]
    assert c["requests"][17]["session_id"] == "s1" and c["requests"][17]["prefix_group"] == "p1"
    for r in c["requests"]:
        assert 0 < r["ttft_s"] <= r["e2e_s"]
    assert c["ttft_p50_s"] <= c["ttft_p95_s"] <= c["ttft_p99_s"]
    assert c["throughput_rps"] == pytest.approx(32 / c["wall_s"])
    assert c["evict_calls"] > 0 and c["hook_calls"] >= 1 and not math.isnan(c["ttft_mean_s"])
    # queueing delay from vLLM's engine-core timestamps: one request at a time waits little, never preempted
    assert all(0 <= r["queue_s"] <= r["ttft_s"] for r in c["requests"])
    assert c["queue_p50_s"] <= c["queue_p95_s"] and c["preemptions"] == 0
    # the record is spfcore.run.cell.EngineRecord's fields exactly (no tier, sequential mode: no step log)
    assert EngineRecord(**c).to_json() == c and "steps" not in c and "cpu_blocks" not in c


@pytest.mark.engine
def test_headroom_lru_zero_oracle_saves_a_quarter(cells):
    """The seed's finding reproduced on CPU: LRU caches nothing (round robin
    over 8 personas at 2.3x pressure evicts each prefix before its reuse); a
    Belady order keeps part of the prefixes and saves >= 25% of prefill."""
    if "belady_oracle" not in installed_arms():
        pytest.skip("plugin belady_oracle is not installed (pip install -e plugins/belady_oracle)")
    lru, oracle = cells("lru"), cells("belady_oracle")
    assert lru["cached_tokens"] == 0
    assert lru["prefill_tokens_recomputed"] == lru["prompt_tokens"] == 17408
    saved = 1 - oracle["prefill_tokens_recomputed"] / lru["prefill_tokens_recomputed"]
    assert saved >= 0.25
    # the first round (requests 0..7) meets every persona cold
    assert all(r["cached_tokens"] == 0 for r in oracle["requests"][:8])


@pytest.mark.engine
@pytest.mark.parametrize("arm", installed_arms())
def test_engine_agrees_with_simulator(cells, workload, num_blocks, arm):
    sim = pytest.importorskip("spfcore.sim")
    engine = cells(arm)
    model = sim.simulate(workload, arm, num_blocks=num_blocks, block_size=BS, mode="sequential", seed=42)
    assert [r["cached_tokens"] for r in engine["requests"]] == [r["cached_tokens"] for r in model["requests"]]
    assert engine["evictions"] == model["evictions"]
