"""The vLLM adapter (spfcore.engine.vllm_adapter) against a real vLLM engine.

Unit tests drive PolicyFreeQueue with vLLM's own KVCacheBlock objects; engine
tests (marked ``engine``) start the tiny random-weight model on CPU three
times per module (stock vLLM; the lru arm as the runner serves it, on vLLM's
own queue; lru driven through the runtime and every adapter event) and check
the adapter's invariants at every engine step.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vllm")

from types import MethodType

from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import KVCacheBlock

from spfcore.engine.runner import EngineSpec, open_engine
from spfcore.engine.vllm_adapter import PolicyFreeQueue, arg_reader
from spfcore.keys import chain_keys
from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView
from spfcore.workloads.model import Request, Workload

BS = 32
NUM_BLOCKS = 24  # 23 usable: one request holds 11, so a second prefix pushes the first out


# ----------------------------------------------------------------- unit tests


def _queue(n: int = 6):
    blocks = [KVCacheBlock(i) for i in range(n)]
    rt = PolicyRuntime.for_policy("lru", n, 4)
    q = PolicyFreeQueue(blocks, rt)
    q.install_free(blocks[1:])  # block 0 is vLLM's null block
    return blocks, rt, q


def _store(rt, blocks, ids, keys):
    view = RequestView("r", None, 0, 0.0, 4 * len(ids) + 1, tuple(keys))
    rt.stored(view, ids, keys, 0, None, 4, 0.0)
    for i, k in zip(ids, keys):
        blocks[i].set_block_hash(("vllm-hash", k))


def test_queue_hands_out_hashless_blocks_before_cached_ones():
    blocks, rt, q = _queue()
    assert q.num_free_blocks == 5
    got = q.popleft_n(3)
    assert [b.block_id for b in got] == [1, 2, 3]  # fresh pool: id order, as vLLM's queue
    assert q.num_free_blocks == 2
    _store(rt, blocks, [1, 2], ["k0", "k1"])
    # vLLM frees a finished request tail first: [3 (partial, hashless), 2, 1]
    q.prepend_n([blocks[3]])
    q.append_n([blocks[2], blocks[1]])
    assert q.num_free_blocks == 5
    order = [b.block_id for b in q.popleft_n(5)]
    # hashless: 3 (prepended, reused first), then 4, 5 never used; cached: 2 then 1 (release order)
    assert order == [3, 4, 5, 2, 1]
    assert rt.evictions == 2 and rt.meta == {} and rt.by_key == {}
    assert q.num_free_blocks == 0


def test_queue_append_sends_blocks_without_hash_to_hashless():
    blocks, rt, q = _queue()
    q.popleft_n(2)
    _store(rt, blocks, [1], ["k0"])
    q.append_n([blocks[2], blocks[1]])  # 2 has no block hash (e.g. unpin of a partial block)
    assert [b.block_id for b in q.popleft_n(5)] == [2, 3, 4, 5, 1]


def test_queue_remove_touch_and_errors():
    blocks, rt, q = _queue()
    q.popleft_n(1)
    _store(rt, blocks, [1], ["k0"])
    q.append(blocks[1])
    q.remove(blocks[1])  # a prefix-cache hit takes it out
    assert q.num_free_blocks == 4 and 1 not in rt.evictor
    with pytest.raises(RuntimeError, match="block 1"):
        q.remove(blocks[1])
    with pytest.raises(ValueError, match="asked for 5, 4 free"):
        q.popleft_n(5)
    assert sorted(b.block_id for b in q.get_all_free_blocks()) == [2, 3, 4, 5]


def test_touch_many_tells_the_runtime_once_per_hit():
    from spfcore.sim.replay import record_runtime_calls

    blocks, rt, q = _queue()
    q.popleft_n(3)
    _store(rt, blocks, [1, 2, 3], ["k0", "k1", "k2"])
    q.append_n([blocks[3], blocks[2], blocks[1]])

    def pool_touch(chain):  # vLLM's BlockPool.touch: remove() per free block of the chain
        for b in chain:
            q.remove(b)
        return "done"

    with record_runtime_calls() as log:
        assert q.touch_many(pool_touch, [blocks[1], blocks[2]]) == "done"
    assert [(name, args) for name, args, _ in log.of(rt)] == [("touch", ((1, 2),))]
    assert q.num_free_blocks == 3 and 1 not in rt.evictor and 2 not in rt.evictor and 3 in rt.evictor
    # vLLM's error on a block that is not free: the blocks taken out before it still leave the runtime
    with pytest.raises(RuntimeError, match="block 1"):
        q.touch_many(pool_touch, [blocks[3], blocks[1]])
    assert 3 not in rt.evictor and q.num_free_blocks == 2 and q.fallback is None
    assert [b.block_id for b in q.popleft_n(2)] == [4, 5]  # hashless first; the policy's order unchanged
    assert sorted(b.block_id for b in q.get_all_free_blocks()) == []


def test_arg_reader_binds_allocate_slots_by_name():
    # vLLM's own signature (bound to a placeholder instance; only the signature is read)
    read = arg_reader(MethodType(KVCacheManager.allocate_slots, object()), "new_computed_blocks")
    blocks = object()
    assert read("req", 16, 32, blocks) is blocks  # positional (older schedulers)
    assert read("req", 16, num_new_computed_tokens=32, new_computed_blocks=blocks) is blocks  # keyword (0.32)
    assert read(request="req", num_new_tokens=16, new_computed_blocks=blocks) is blocks
    assert read("req", 16, num_lookahead_tokens=2) is None  # left out: vLLM's default, None
    assert read("req", 16, 32) is None
    assert read("req", new_computed_blocks=blocks) is blocks  # by keyword; vLLM rejects the missing argument

    def kw_only(request, *, num_new_tokens, new_computed_blocks=None):  # not plain parameters: bound
        return None

    slow = arg_reader(kw_only, "new_computed_blocks")
    assert slow("req", num_new_tokens=1, new_computed_blocks=blocks) is blocks
    assert slow("req", num_new_tokens=1) is None
    with pytest.raises(TypeError, match="num_new_tokens"):
        slow("req", new_computed_blocks=blocks)
    with pytest.raises(RuntimeError, match="has no parameter 'new_computed_blocks'"):
        arg_reader(MethodType(KVCacheManager.free, object()), "new_computed_blocks")


# ----------------------------------------------------------------- engine tests


def adapter_workload() -> Workload:
    """Prefixes A, B, C of 256 tokens (8 blocks); most prompts are a prefix +
    a 60-token query (316 tokens: 9 full blocks + 28 tokens); request r6 is
    exactly prefix A (256 tokens). 8 output tokens: the 10th block fills
    during decode (323 computed tokens), so decode blocks are stored too."""
    rng = np.random.default_rng(7)

    def tok(n):
        return tuple(int(x) for x in rng.integers(3, 32000, size=n))

    pre = {g: tok(256) for g in "ABC"}
    plan = ["A", "B", "A", "C", "B", "A", "A=", "C"]
    reqs = []
    for i, g in enumerate(plan):
        prompt = pre["A"] if g == "A=" else pre[g] + tok(60)
        reqs.append(Request(f"r{i}", 0.0, prompt, 8, session_id=f"s{i % 3}", prefix_group=g[0]))
    return Workload("adapter", {}, reqs)


# Per-request cached tokens of stock vLLM at 24 blocks of 32 tokens (LRU).
# r0, r1, r3 meet their prefix first: 0. r2 follows r0 (A) and r1 (B): the
# pool (23 blocks) held r0's 10 cached blocks + r1's, and r1 took hashless
# blocks first, so A's 8 blocks survive: 256. r6 is prefix A alone, 256 tokens
# = 8 blocks; vLLM caps a hit at prompt_len - 1 = 255 tokens -> 7 blocks = 224.
# r4, r5, r7 hit partial chains left by tail-first LRU eviction (the
# simulator's independent model gives the same list; stock vLLM is checked
# against it below).
EXPECTED_LRU = [0, 0, 256, 0, 64, 64, 224, 32]


class Checker:
    """Checks the adapter's invariants after every engine step and on every
    allocation (every policy queue the scheduler installs is wrapped), and
    that vLLM block hashes and spfcore keys map one to one."""

    def __init__(self, session):
        self.sched = session.scheduler
        self.steps = self.allocations = self.cached_victims = 0
        self.vhash_to_key: dict = {}
        self.key_to_vhash: dict = {}
        engine = session.llm.llm_engine
        orig_step, orig_new = engine.step, self.sched._spf_new_runtime

        def step():
            out = orig_step()
            self.check_pool()
            self.steps += 1
            return out

        def new_runtime(free_blocks):
            orig_new(free_blocks)
            self.wrap_queue(self.sched.spf_queue)

        engine.step = step
        self.sched._spf_new_runtime = new_runtime

    @property
    def pool(self):
        return self.sched.kv_cache_manager.block_pool

    def wrap_queue(self, q):
        orig = q.popleft_n

        def popleft_n(n):
            free_hashless = {b.block_id for b in q.get_all_free_blocks() if b.block_hash is None}
            out = orig(n)
            self.allocations += 1
            assert all(b.ref_cnt == 0 and not b.is_null for b in out), "a block in use was handed out"
            kinds = [b.block_hash is not None for b in out]
            assert kinds == sorted(kinds), "a cached block went before a hashless one"
            if any(kinds):
                self.cached_victims += sum(kinds)
                assert free_hashless <= {b.block_id for b in out}, "cached victim while hashless blocks were free"
            return out

        q.popleft_n = popleft_n

    def check_pool(self):
        pool = self.pool
        q = pool.free_block_queue
        assert isinstance(q, PolicyFreeQueue)
        rt = q.runtime
        held = set(rt.evictor.free_ids())
        actually_free = {b.block_id for b in pool.blocks if b.ref_cnt == 0 and not b.is_null}
        assert q.num_free_blocks == len(rt.evictor) == len(held) == pool.get_num_free_blocks()
        assert held == actually_free
        for b in pool.blocks:
            if b.block_hash is None:
                continue
            key = rt.meta[b.block_id].key
            assert self.vhash_to_key.setdefault(b.block_hash, key) == key
            assert self.key_to_vhash.setdefault(key, b.block_hash) == b.block_hash


@pytest.fixture(scope="module")
def spec():
    return EngineSpec(model="tiny", block_size=BS, num_blocks=NUM_BLOCKS, max_num_seqs=4, dtype="float32")


@pytest.fixture(scope="module")
def stock_cell(spec):
    with open_engine(spec, None) as s:
        return s.run(adapter_workload(), seed=0, keep_outputs=True)


def lru_through_runtime(s):
    """Drive ``s``'s lru arm through the runtime, every adapter event reported (``vllm_order_queue=False``),
    instead of vLLM's own queue: the order is the same (checked below), and the adapter's whole path runs."""
    s.use_policy("lru", vllm_order_queue=False)


@pytest.fixture(scope="module")
def native_lru_cell(spec, stock_cell):
    with open_engine(spec, "lru") as s:
        cell = s.run(adapter_workload(), seed=0, keep_outputs=True)
        q = s.scheduler.spf_queue
        return cell, q.vllm_order, type(q.fallback).__name__, q.fault, s.runtime.stats()


@pytest.fixture(scope="module")
def lru_session(spec, native_lru_cell):  # opened after the other engines are closed
    s = open_engine(spec, "lru")
    lru_through_runtime(s)
    checker = Checker(s)
    cell = s.run(adapter_workload(), seed=0, keep_outputs=True)
    yield s, checker, cell
    s.close()


@pytest.mark.engine
def test_stock_vllm_matches_expected_cached_tokens(stock_cell):
    assert [r["cached_tokens"] for r in stock_cell["requests"]] == EXPECTED_LRU
    assert stock_cell["evictions"] is None and stock_cell["hook_calls"] == 0


@pytest.mark.engine
def test_lru_through_adapter_equals_stock_vllm(lru_session, stock_cell):
    _, _, cell = lru_session
    assert [r["cached_tokens"] for r in cell["requests"]] == EXPECTED_LRU
    assert [r["output_token_ids"] for r in cell["requests"]] == [r["output_token_ids"] for r in stock_cell["requests"]]
    assert all(len(r["output_token_ids"]) == 8 for r in cell["requests"])
    assert cell["cached_tokens"] == sum(EXPECTED_LRU) == 640
    assert cell["prompt_tokens"] == 7 * 316 + 256
    assert cell["prefill_tokens_recomputed"] == cell["prompt_tokens"] - 640


@pytest.mark.engine
def test_lru_arm_is_served_by_vllms_own_queue(native_lru_cell, lru_session, stock_cell):
    # lru implements no hook: the runner's lru arm gets vLLM's FreeKVCacheBlockQueue and reports no runtime
    # event, with stock vLLM's cached tokens and outputs; its eviction count is the runtime-driven lru's
    cell, vllm_order, queue_type, fault, stats = native_lru_cell
    assert vllm_order is True and queue_type == "FreeKVCacheBlockQueue" and fault is None
    assert [r["cached_tokens"] for r in cell["requests"]] == EXPECTED_LRU
    assert [r["output_token_ids"] for r in cell["requests"]] == [r["output_token_ids"] for r in stock_cell["requests"]]
    through = lru_session[2]
    assert cell["evictions"] == through["evictions"] > 0 and cell["evict_calls"] == through["evict_calls"]
    assert stats["policy_seconds"] == 0.0 and stats["evict_seconds"] == 0.0  # the runtime ran no event
    assert cell["hook_calls"] == 1  # spfcore_cache_configured, once as the runtime is built (no impl)
    assert 0 < cell["policy_seconds"] == cell["adapter_seconds"]  # the eviction count and the label lookups
    assert cell["policy_faults"] == 0 and cell["fail_open_allocations"] == 0 and cell["fail_open_blocks"] == 0


@pytest.mark.engine
def test_invariants_hold_at_every_step(lru_session):
    _, checker, cell = lru_session
    # checked inside the run: after every step and in every allocation
    assert checker.steps >= 8 * 8  # >= one prefill + 7 decode steps per request
    assert checker.allocations >= 8
    assert checker.cached_victims == cell["evictions"] > 0
    # distinct cached blocks: prefixes A, B, C (3 x 8 blocks) + per 316-token
    # request its query block and its decode block (7 x 2); r6 (= A) adds none
    assert len(checker.vhash_to_key) == len(checker.key_to_vhash) == 3 * 8 + 7 * 2


@pytest.mark.engine
def test_keys_are_vllms_block_hashes(lru_session):
    # The adapter hashes nothing: a block's key is its vLLM block hash (all 32 bytes, big-endian), and
    # spf_prompt_keys (the future stream's keys) gives the same keys for a prompt before it is sent.
    s, _, _ = lru_session
    r0 = adapter_workload().requests[0]
    keys = s.scheduler.spf_prompt_keys(r0.prompt_token_ids)
    assert len(keys) == 9 and len(set(keys)) == 9
    assert set(keys).isdisjoint(chain_keys(r0.prompt_token_ids, BS))  # not the simulator's BLAKE2b chain
    s.run(Workload("one", {}, [r0]), seed=0)
    rt = s.runtime
    # lru reads no block column, so the runtime keeps keys only (PolicyRuntime.track)
    assert rt.track is False
    stored = {m.key for m in rt.meta.values()}
    assert len(stored) == len(rt.meta) == 10  # 9 prompt blocks + one decode block
    assert set(keys) <= stored
    (decode,) = stored - set(keys)
    pool = s.scheduler.kv_cache_manager.block_pool
    from vllm.v1.core.kv_cache_utils import get_block_hash

    vkeys = {int.from_bytes(get_block_hash(b.block_hash), "big") for b in pool.blocks if b.block_hash is not None}
    assert stored == vkeys  # every cached block's key is its vLLM hash, decode block included
    assert all(2 ** 200 < k < 2 ** 256 for k in stored)  # the whole sha256 digest, not a prefix of it


@pytest.mark.engine
def test_reset_prefix_cache_clears_hits_and_runtime(lru_session):
    s, _, _ = lru_session
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    r0 = adapter_workload().requests[0]
    prompt = TokensPrompt(prompt_token_ids=list(r0.prompt_token_ids))
    sp = SamplingParams(max_tokens=2, min_tokens=2, ignore_eos=True, temperature=0.0)
    s.llm.generate([prompt], sp, use_tqdm=False)
    assert s.llm.generate([prompt], sp, use_tqdm=False)[0].num_cached_tokens == 288  # 9 full blocks
    old = s.runtime
    assert s.llm.reset_prefix_cache() is True
    rt = s.runtime
    assert rt is not old and rt.meta == {} and rt.by_key == {}
    assert len(rt.evictor) == NUM_BLOCKS - 1 == s.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
    assert s.llm.generate([prompt], sp, use_tqdm=False)[0].num_cached_tokens == 0
    assert s.llm.generate([prompt], sp, use_tqdm=False)[0].num_cached_tokens == 288


@pytest.mark.engine
def test_timed_mode_keeps_invariants(lru_session):
    s, checker, _ = lru_session
    import attrs

    wl = adapter_workload()
    reqs = [attrs.evolve(r, arrival_s=0.05 * i) for i, r in enumerate(wl.requests)]
    checker.steps = 0
    cell = s.run(Workload("timed", {}, reqs), seed=0, mode="timed")
    assert cell["num_requests"] == 8 and checker.steps > 0
    # the step log: one entry per engine.step(), each step's tokens the scheduler's, starts in order
    log = cell["steps"]
    assert cell["num_steps"] == checker.steps == len(log["start_s"]) == len(log["dur_s"]) == len(log["tokens"])
    assert log["start_s"] == sorted(log["start_s"]) and min(log["dur_s"]) > 0
    computed = sum(r["prompt_tokens"] - r["cached_tokens"] + reqs[i].output_tokens - 1
                   for i, r in enumerate(cell["requests"]))
    if any(r.get("preemptions") for r in cell["requests"]):  # a preempted request may recompute (not if its
        assert sum(log["tokens"]) >= computed                   # blocks were still cached when it resumed)
    else:
        assert sum(log["tokens"]) == computed
    for r in cell["requests"]:
        assert 0 < r["ttft_s"] <= r["e2e_s"]
        assert 0 <= r["cached_tokens"] <= r["prompt_tokens"] - 1
    assert cell["ttft_p50_s"] <= cell["ttft_p95_s"] <= cell["ttft_p99_s"]
    assert cell["throughput_rps"] == pytest.approx(8 / cell["wall_s"])
