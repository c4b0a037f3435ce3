"""The two-tier simulator (spfcore.sim.tiered): a hand-checked replay, the
zero-tier equivalence with the one-tier simulator, tier hooks of a
throw-away policy distribution, promotions from prefetch hints, bad answers."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spfcore.runtime import PolicyError
from spfcore.sim.simulator import simulate
from spfcore.sim.tiered import CostModel, CpuTier, cost_model, kv_bytes_per_token, simulate_tiered
from spfcore.workloads.generators import make
from spfcore.workloads.model import Request, Workload, block_keys

BS = 4
COST = CostModel(bytes_per_token=100, bandwidth=1000.0, latency_s=0.5, prefill_s_per_token=0.01, base_s=0.1)


def _req(i: int, prefix: int, last: int) -> Request:
    """Prompt = 8 tokens of prefix ``prefix`` (2 full blocks) + 1 token ``last``; 1 output token."""
    return Request(f"r{i}", 0.0, tuple(range(100 * prefix, 100 * prefix + 8)) + (last,), 1, session_id=f"s{i}")


def _wl(*prefixes) -> Workload:
    return Workload("hand", {}, [_req(i, p, 1000 + i) for i, p in enumerate(prefixes)])


def test_hand_checked_replay_lru():
    # GPU: 3 usable blocks (each request holds 3: 2 full + 1 partial); tier: 4 blocks; LRU ranks.
    # r0 A: miss; A0 A1 enter the tier (ranks 1, 2). r1 B: miss, evicts A from the GPU; B0 B1 enter
    # (3, 4); then r0's end re-ranks A tail first (A1 5, A0 6): vLLM signals a request's end in the next
    # request's first step, after its store. r2 A: GPU miss, tier hit on A0 A1 (8 tokens loaded), 1 token
    # recomputed; the step that loads re-ranks r1's B first (B1 7, B0 8). r3 C: miss; C0 C1 evict the
    # two lowest, A1 and A0 (r2's re-rank of A comes after this store and finds them gone). r4 B: GPU
    # miss (r2 reused B's GPU blocks), tier hit on B0 B1.
    rec = simulate_tiered(_wl(1, 2, 1, 3, 2), "lru", num_blocks=4, cpu_blocks=4, block_size=BS, cost=COST,
                          per_request=True)
    rows = rec["requests"]
    assert [r["gpu_hit_tokens"] for r in rows] == [0, 0, 0, 0, 0]
    assert [r["cpu_hit_tokens"] for r in rows] == [0, 0, 8, 0, 8]
    assert rec["cpu_hit_tokens"] == 16 and rec["miss_tokens"] == 45 - 16 and rec["gpu_hit_tokens"] == 0
    assert rec["tier_stored_blocks"] == 6 and rec["tier_evictions"] == 2 and rec["tier_store_skipped"] == 0
    assert rec["bytes_loaded"] == 16 * 100 and rec["bytes_stored"] == 6 * 4 * 100
    # TTFT: base + latency + 8 tokens x 100 B / 1000 B/s + 1 token x 0.01 s; misses: base + 9 x 0.01
    assert rows[2]["load_s"] == pytest.approx(0.5 + 0.8)
    assert rows[2]["ttft_est_s"] == pytest.approx(0.1 + 1.3 + 0.01)
    assert rows[0]["ttft_est_s"] == pytest.approx(0.1 + 0.09) and rows[0]["load_s"] == 0.0
    assert rec["ttft_mean_s"] == pytest.approx((3 * 0.19 + 2 * 1.41) / 5)


def test_a_tier_too_small_for_an_offer_skips_it_whole():
    rec = simulate_tiered(_wl(1, 2, 1), "lru", num_blocks=4, cpu_blocks=1, block_size=BS, cost=COST)
    assert rec["tier_stored_blocks"] == 0 and rec["tier_store_skipped"] == 6 and rec["cpu_hit_tokens"] == 0


def test_cpu_tier_evicts_lowest_rank_and_never_a_protected_key():
    t = CpuTier(3)
    assert t.store(["a", "b", "c"], [0, 1, 2], [None, "a", "b"], set())
    t.set_ranks(["c", "b", "a"])  # a is the most recent
    assert t.evict(1, {"c"}) == ["b"]
    assert t.evict(3, set()) is None and len(t) == 2  # not enough: nothing changes
    assert t.store(["d", "e"], [0, 1], [None, "d"], {"d", "e", "a"}) and "c" not in t and "a" in t
    t.set_ranks(["a", "d", "e"], [5.0, 1.0, 1.0])  # a value beats recency
    assert t.evict(1, set()) == ["d"]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 50), nb=st.integers(20, 60), arm=st.sampled_from(["lru", "frequency", "session_ttl"]))
def test_without_a_tier_the_gpu_side_is_the_one_tier_simulator(seed, nb, arm):
    wl = make("personas", seed=seed, personas=3, prefix_tokens=64, sessions=6, turns=2, query_tokens=8,
              output_tokens=3)
    one = simulate(wl, arm, num_blocks=nb, block_size=16)
    two = simulate_tiered(wl, arm, num_blocks=nb, cpu_blocks=0, block_size=16, per_request=True)
    assert [r["cached_tokens"] for r in one["requests"]] == [r["gpu_hit_tokens"] for r in two["requests"]]
    assert two["cpu_hit_tokens"] == 0 and two["evictions"] == one["evictions"]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 50), cpu=st.integers(0, 80))
def test_a_tier_never_loses_gpu_hits_under_lru_and_accounts_every_token(seed, cpu):
    wl = make("personas", seed=seed, personas=4, prefix_tokens=64, sessions=8, turns=2, query_tokens=8,
              output_tokens=2)
    one = simulate(wl, "lru", num_blocks=20, block_size=16)
    two = simulate_tiered(wl, "lru", num_blocks=20, cpu_blocks=cpu, block_size=16)
    assert two["gpu_hit_tokens"] == one["cached_tokens"]  # write-through: the GPU side is unchanged
    assert two["gpu_hit_tokens"] + two["cpu_hit_tokens"] + two["miss_tokens"] == two["prompt_tokens"]
    assert two["tier_evictions"] <= two["tier_stored_blocks"] and two["tier_stored_blocks"] - two["tier_evictions"] <= cpu


def test_cost_models_are_derived_from_the_model_configs():
    # 2 (K, V) x 2 layers x 4 kv heads x 32 head_dim x 2 bytes; Llama-3.2-3B: 2 x 28 x 8 x 128 x 2
    assert cost_model("tiny-cpu").bytes_per_token == 1024
    assert cost_model("h200-llama-3.2-3b").bytes_per_token == 114_688
    assert kv_bytes_per_token({"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8,
                               "torch_dtype": "float32"}) == 2 * 1 * 2 * 4 * 4
    with pytest.raises(ValueError, match="unknown cost model 'x'"):
        cost_model("x")
    with pytest.raises(ValueError, match="latency_s"):
        CostModel(1, 1.0, -1.0, 0.0, 0.0)


@pytest.fixture
def tierpol(tmp_path, monkeypatch):
    """A distribution ``tierpol``: ``tier_keep`` admits only depth-0 blocks to
    the tier (its ``answer`` option makes it answer badly) and hints, at
    arrival 2, the keys in its module's ``HINT`` list."""
    (tmp_path / "tierpol.py").write_text(textwrap.dedent('''
        import attrs
        from spfcore import Hint, hookimpl

        HINT = []
        SEEN = []

        @attrs.frozen
        class P:
            """answer: ok, short or nan."""
            answer: str = "ok"

        class TierKeep:
            """Keeps chain heads in the tier."""
            name = "tier_keep"
            capabilities = frozenset({"prefetch"})
            Params = P
            def __init__(self, params):
                self.params = params
                self.depth = {}

            @hookimpl
            def spfcore_request_arrived(self, request, now):
                for d, k in enumerate(request.block_keys):
                    self.depth[k] = d

            @hookimpl
            def spfcore_tier_admit(self, request, keys, now):
                if self.params.answer == "short":
                    return [True]
                return [self.depth[k] == 0 for k in keys]

            @hookimpl
            def spfcore_tier_score(self, request, keys, now):
                SEEN.append((request.arrival_index, list(keys)))
                return [float("nan")] * len(keys) if self.params.answer == "nan" else [0.0] * len(keys)

            @hookimpl
            def spfcore_prefetch_hints(self, request, now):
                if request.arrival_index == 2 and HINT:
                    return [Hint(tuple(HINT), 4)]
                return None
    '''))
    info = tmp_path / "tierpol-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tierpol\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[spfcore.policies]\ntier_keep = tierpol:TierKeep\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    mod = importlib.import_module("tierpol")
    yield mod
    mod.HINT.clear()
    mod.SEEN.clear()


def test_tier_admission_and_score_hooks_decide(tierpol):
    # Only A0 and B0 (depth 0) enter the tier; r2 (A again) loads A0 only and recomputes A1 + 1 token.
    rec = simulate_tiered(_wl(1, 2, 1), "tier_keep", num_blocks=4, cpu_blocks=4, block_size=BS, cost=COST,
                          per_request=True)
    assert [r["cpu_hit_tokens"] for r in rec["requests"]] == [0, 0, 4]
    assert rec["tier_stored_blocks"] == 2 and rec["tier_not_admitted"] == 3  # A1, B1, then A1 recomputed by r2
    wl = _wl(1, 2, 1)
    a0, b0 = block_keys(wl.requests[0], BS)[0], block_keys(wl.requests[1], BS)[0]
    assert tierpol.SEEN == [(0, [a0]), (1, [b0]), (2, [a0])]


@pytest.mark.parametrize("answer, hook", [("short", "spfcore_tier_admit"), ("nan", "spfcore_tier_score")])
def test_a_bad_tier_answer_is_a_policy_error_naming_the_hook(tierpol, answer, hook):
    with pytest.raises(PolicyError, match=hook) as exc:
        simulate_tiered(_wl(1, 2, 1), "tier_keep", options={"answer": answer}, num_blocks=4, cpu_blocks=4,
                        block_size=BS, cost=COST)
    assert exc.value.hook == hook and exc.value.policy == "tier_keep"


@pytest.mark.parametrize("c_tokens, used", [(5, 1), (9, 0)])
def test_a_hint_promotes_tier_blocks_ahead_of_the_request(tierpol, c_tokens, used):
    # GPU 3 usable blocks. r0 A, r1 B (A leaves the GPU; the tier keeps A0, B0). At r2's arrival (C) the
    # hint names A0 A1: A0 is promoted into the hashless free block and pinned (a chain head in the tier);
    # A1 is not in the tier. A 5-token C takes 2 blocks (B1's, B0's): A0 survives and r3 (A) hits it on
    # the GPU: used. A 9-token C takes 3: the pinned A0 goes too (nothing else is free): wasted, and r3
    # loads A0 from the tier instead.
    a = _req(0, 1, 1000)
    c = Request("r2", 0.0, tuple(range(300, 300 + c_tokens - 1)) + (1002,), 1, session_id="s2")
    wl = Workload("hand", {}, [a, _req(1, 2, 1001), c, _req(3, 1, 1003)])
    tierpol.HINT[:] = block_keys(a, BS)
    rec = simulate_tiered(wl, "tier_keep", num_blocks=4, cpu_blocks=4, block_size=BS, cost=COST,
                          per_request=True)
    assert rec["promoted_blocks"] == 1 and rec["promoted_used"] == used and rec["promoted_wasted"] == 1 - used
    assert rec["bytes_promoted"] == BS * 100
    assert [r["gpu_hit_tokens"] for r in rec["requests"]] == [0, 0, 0, 4 * used]
    assert [r["cpu_hit_tokens"] for r in rec["requests"]] == [0, 0, 0, 4 * (1 - used)]
    assert rec["hints_issued"] == 1 and rec["hints_used"] == used and rec["hints_wasted"] == 1 - used


def test_spf_seed_prefetch_hints_become_promotions():
    wl = make("personas", seed=42, prefix_tokens=512, query_tokens=32)
    rec = simulate_tiered(wl, "spf_expected_utility", options={"variant": "seed", "mode": "prefetch"},
                          num_blocks=222, cpu_blocks=700, block_size=16, cost="tiny-cpu")
    assert rec["hints_issued"] > 0 and rec["promoted_blocks"] > 0
    assert rec["promoted_used"] + rec["promoted_wasted"] == rec["promoted_blocks"]
    assert rec["promoted_used"] >= 0.9 * rec["promoted_blocks"]
    lru = simulate_tiered(wl, "lru", num_blocks=222, cpu_blocks=700, block_size=16, cost="tiny-cpu")
    assert rec["gpu_hit_tokens"] > lru["gpu_hit_tokens"]


def test_cli_prints_json_with_the_tier_sizes_and_fails_a_bad_arm_alone():
    import json

    from click.testing import CliRunner

    from spfcore.cli import main

    args = ["simulate-tiered", "--set", "personas=2", "--set", "prefix_tokens=64", "--set", "sessions=4",
            "--set", "turns=2", "--set", "query_tokens=8", "--block-size", "16", "--num-blocks", "8",
            "--cpu-ratio", "1.5", "--cost", "h200-llama-3.2-3b", "--latency-us", "0", "--json"]
    res = CliRunner().invoke(main, [*args, "--arms", "lru,nosuchpolicy"])
    assert res.exit_code == 4, res.output
    out = json.loads(res.output[: res.output.rindex("}") + 1])
    assert out["sizes"] == {"42": {"num_blocks": 8, "cpu_blocks": 10}}  # round(1.5 x 7 usable GPU blocks)
    assert out["cost"]["latency_s"] == 0 and out["cost"]["bytes_per_token"] == 114_688
    lru = out["summary"]["lru"]
    direct = simulate_tiered(make("personas", seed=42, personas=2, prefix_tokens=64, sessions=4, turns=2,
                                  query_tokens=8), "lru", num_blocks=8, cpu_blocks=10, block_size=16,
                             cost=CostModel(114_688, 50e9, 0.0, 9.9e-6, 0.016))
    assert lru["cpu_hit_rate"] == direct["cpu_hit_rate"] and lru["ttft_mean_s"] == pytest.approx(direct["ttft_mean_s"])
    assert out["summary"]["nosuchpolicy"]["error"]


@pytest.mark.engine
def test_engine_cpu_tier_agrees_with_the_simulator_per_request(tierpol):
    # vLLM's OffloadingConnector on the CPU build (spfcore's SpfOffloadingSpec: host-copy worker, CPU tier
    # ranked and admitted through spfcore's hooks), sequential: every request's GPU hit and CPU-tier load
    # equal the two-tier simulator's, for vLLM's LRU tier under three GPU orders and for a policy with
    # its own tier admission and tier score.
    from spfcore.engine.runner import EngineSpec, open_engine

    wl = make("personas", seed=43, personas=4, prefix_tokens=128, sessions=8, turns=3, query_tokens=40,
              output_tokens=4)
    nb, cpu = 16, 24
    with open_engine(EngineSpec(num_blocks=nb, cpu_blocks=cpu), "lru") as s:
        for arm in ("lru", "frequency", "spf_expected_utility", "tier_keep"):
            s.use_policy(arm)
            cell = s.run(wl, 43)
            sim = simulate_tiered(wl, arm, num_blocks=nb, cpu_blocks=cpu, block_size=32, per_request=True,
                                  promote=False)  # vLLM cannot load ahead of arrival
            for f in ("gpu_hit_tokens", "cpu_hit_tokens"):
                assert [r[f] for r in cell["requests"]] == [r[f] for r in sim["requests"]], (arm, f)
            assert cell["tier_stored_blocks"] == sim["tier_stored_blocks"], arm
            assert cell["tier_not_admitted"] == sim["tier_not_admitted"], arm
            assert cell["policy_faults"] == 0
            if arm == "lru":
                assert cell["cpu_hit_tokens"] == 2560 and cell["gpu_hit_tokens"] == 0
            if arm == "tier_keep":
                assert sim["tier_not_admitted"] > 0 and cell["cpu_hit_tokens"] > 0


@pytest.mark.engine
def test_engine_cpu_tier_loads_the_kv_pages_that_were_computed():
    # The host-copy worker moves real KV: a prompt computed, pushed off the GPU by two others, then
    # served again from the tier gets exactly the KV pages it had when computed; with the tier's host
    # buffer zeroed before the reload it does not (the check can fail). Output tokens cannot tell: the
    # random-weight model answers the same either way.
    from vllm import SamplingParams
    from vllm.distributed.kv_transfer import get_kv_transfer_group
    from vllm.v1.core.kv_cache_utils import get_block_hash
    from vllm.inputs import TokensPrompt

    from spfcore.engine.runner import EngineSpec, open_engine

    def req(p):
        return Request(f"r{p}", 0.0, tuple(range(100 + 300 * p, 300 + 300 * p)) + (7,), 4)

    a = req(1)
    sp = SamplingParams(max_tokens=4, min_tokens=4, ignore_eos=True, temperature=0.0)
    with open_engine(EngineSpec(num_blocks=14, cpu_blocks=32), "lru") as s:
        keys = s.scheduler.spf_prompt_keys(a.prompt_token_ids)  # the engine's keys: vLLM's block hashes
        assert len(keys) == 6
        worker = get_kv_transfer_group().connector_worker.spec.host_copy
        pool = s.scheduler.kv_cache_manager.block_pool

        def gpu_ids():  # vLLM's cached blocks: spfcore key (vLLM's block hash as an int) -> block id
            return {int.from_bytes(get_block_hash(b.block_hash), "big"): b.block_id
                    for b in pool.blocks if b.block_hash is not None}

        for zeroed in (False, True):
            s.run(Workload("kv", {}, [a]), 0)
            ids = [gpu_ids()[k] for k in keys]
            pages = [d[ids].clone() for d in worker.dev]
            for p in (2, 3):
                s.llm.generate([TokensPrompt(prompt_token_ids=list(req(p).prompt_token_ids))], sp, use_tqdm=False)
            assert not set(keys) & set(gpu_ids())  # A left the GPU
            if zeroed:
                for h in worker.host:
                    h.zero_()
            out = s.llm.generate([TokensPrompt(prompt_token_ids=list(a.prompt_token_ids))], sp, use_tqdm=False)
            assert out[0].num_cached_tokens == 192  # 6 full blocks loaded from the tier
            ids = [gpu_ids()[k] for k in keys]
            same = all(bool((d[ids] == x).all()) for d, x in zip(worker.dev, pages))
            assert same is not zeroed and all(bool(x.any()) for x in pages)


@pytest.mark.parametrize("ratio", ["nan", "inf"])
def test_cli_refuses_a_cpu_ratio_that_is_not_finite(ratio):
    from click.testing import CliRunner

    from spfcore.cli import main

    r = CliRunner().invoke(main, ["simulate-tiered", "--cpu-ratio", ratio])
    assert r.exit_code == 2 and "'--cpu-ratio': expected a finite number >= 0" in r.output


@pytest.mark.parametrize("command", ["simulate-tiered", "simulate"])
@pytest.mark.parametrize("size, hint", [(["--num-blocks", "2"], "--num-blocks"),
                                        (["--cache-pressure", "1"], "--cache-pressure")])
def test_cli_refuses_a_cache_too_small_for_a_request_as_a_usage_error(tmp_path, command, size, hint):
    from click.testing import CliRunner

    from spfcore.cli import main

    out = tmp_path / "o" / "r.json"
    r = CliRunner().invoke(main, [command, "--set", "personas=2", "--set", "prefix_tokens=64", "--set", "sessions=2",
                                  "--set", "turns=2", "--arms", "lru", *size, "-o", str(out)])
    assert r.exit_code == 2, r.output
    msg = " ".join(r.output.split())
    assert f"Invalid value for {hint}: request s0-t0 needs 14 blocks of 16 tokens but the cache has" in msg
    assert list(tmp_path.iterdir()) == []  # nothing written
