"""Policy faults on vLLM's allocation path fail open, and a failed arm leaves
the engine clean for the next arm (spfcore.engine.vllm_adapter, runner).

Unit tests drive :class:`PolicyFreeQueue` side by side with vLLM's own
``FreeKVCacheBlockQueue`` on the same operations. Engine tests (marked
``engine``) run one tiny-model engine: a policy that fails in each hook,
checked with :func:`check_block_pool` after every step, then ``lru`` on the
same engine, which must cache exactly what a fresh engine caches.
"""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest

pytest.importorskip("vllm")

from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock

from spfcore import hookimpl, registry
from spfcore.engine.runner import EngineSpec, open_engine
from spfcore.engine.vllm_adapter import PolicyFreeQueue, check_block_pool
from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView
from test_engine_adapter import BS, EXPECTED_LRU, NUM_BLOCKS, adapter_workload


class Crash(BaseException):
    """Not an Exception: escapes every fail-open handler (like Ctrl-C)."""


@attrs.frozen
class ExplodeParams:
    """When to fail.

    Args:
        hook: Hook that fails (full name, e.g. ``spfcore_score_blocks``); empty: never.
        after: Calls of that hook that succeed before it fails.
        mode: ``raise`` (RuntimeError), ``crash`` (:class:`Crash`), ``dup``
            (choose_victims answers duplicate indices), ``nan`` (NaN scores).
    """

    hook: str = ""
    after: int = 0
    mode: str = "raise"


class Explode:
    """Release order (scores None), failing in one hook on demand (tests)."""

    name = "explode"
    capabilities = frozenset({"scoring"})
    Params = ExplodeParams

    def __init__(self, params: ExplodeParams) -> None:
        self.params = params
        self.calls: dict[str, int] = {}

    def _fail(self, hook: str) -> bool:
        if hook != self.params.hook:
            return False
        n = self.calls[hook] = self.calls.get(hook, 0) + 1
        if n <= self.params.after:
            return False
        if self.params.mode == "crash":
            raise Crash(hook)
        if self.params.mode == "raise":
            raise RuntimeError(f"boom in {hook}")
        return True

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self._fail("spfcore_request_arrived")

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        self._fail("spfcore_blocks_hit")

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        self._fail("spfcore_blocks_stored")

    @hookimpl
    def spfcore_request_finished(self, request, now):
        self._fail("spfcore_request_finished")

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        self._fail("spfcore_blocks_evicted")

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        if self._fail("spfcore_score_blocks"):
            return np.full(len(blocks), math.nan)
        return None

    @hookimpl
    def spfcore_choose_victims(self, candidates, n, now):
        if self._fail("spfcore_choose_victims"):
            return [0] * n
        return None


def explode_runtime(num_blocks: int, block_size: int = 4, **params) -> PolicyRuntime:
    pm = registry.new_plugin_manager()
    pm.register(Explode(ExplodeParams(**params)), name="explode")
    return PolicyRuntime(pm, num_blocks, block_size, policy_name="explode")


# ----------------------------------------------------------------- unit tests


def _free_order(q) -> list[int]:
    return [b.block_id for b in q.get_all_free_blocks()]


@pytest.mark.parametrize("hook,mode,where", [
    ("spfcore_score_blocks", "raise", "release"),
    ("spfcore_score_blocks", "nan", "release"),
    ("spfcore_choose_victims", "raise", "evict"),
    ("spfcore_choose_victims", "dup", "evict"),
    ("spfcore_blocks_evicted", "raise", "evict"),
])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_queue_fails_open_into_vllms_own_order(hook, mode, where, seed):
    """Random allocations, hits and releases on the policy queue and on
    vLLM's own queue side by side (two pools of real KVCacheBlocks). The
    policy ranks by release order, so both queues agree before the fault; the
    fault at a random call changes nothing vLLM can see: same blocks handed
    out, same free list in the same order, same num_free_blocks."""
    n = 24
    rng = np.random.default_rng(seed)
    mine, theirs = [KVCacheBlock(i) for i in range(n)], [KVCacheBlock(i) for i in range(n)]
    rt = explode_runtime(n, hook=hook, after=int(rng.integers(0, 6)), mode=mode)
    q = PolicyFreeQueue(mine, rt)
    q.install_free(mine[1:])  # block 0: vLLM's null block
    ref = FreeKVCacheBlockQueue(theirs[1:])
    held: list[list[int]] = []  # per request: block ids, depth order
    key = 0
    for step in range(300):
        op = rng.integers(0, 3)
        if op == 0 and q.num_free_blocks:  # allocate and cache (hashes set as vLLM does)
            k = int(rng.integers(1, min(4, q.num_free_blocks) + 1))
            got, want = q.popleft_n(k), ref.popleft_n(k)
            assert [b.block_id for b in got] == [b.block_id for b in want], f"step {step}"
            ids = [b.block_id for b in got]
            for i in ids:
                mine[i].reset_hash(), theirs[i].reset_hash()
            keys = [("k", key + j) for j in range(k)]
            key += k
            if q.fallback is None:
                rt.stored(RequestView("r", None, 0, 0.0, 4 * k, tuple(keys)), ids, keys, 0, None, 4, 0.0)
            for i, kk in zip(ids, keys):
                mine[i].set_block_hash(kk), theirs[i].set_block_hash(kk)
            held.append(ids)
        elif op == 1 and held:  # a finished request: vLLM frees tail first
            ids = held.pop(int(rng.integers(0, len(held))))
            q.append_n([mine[i] for i in reversed(ids)])
            ref.append_n([theirs[i] for i in reversed(ids)])
        elif op == 2:  # a hit on a free cached block (vLLM touch)
            free = [i for i in _free_order(ref) if theirs[i].block_hash is not None]
            if free:
                i = free[int(rng.integers(0, len(free)))]
                q.remove(mine[i]), ref.remove(theirs[i])
                held.append([i])
        assert _free_order(q) == _free_order(ref), f"step {step}"
        assert q.num_free_blocks == ref.num_free_blocks
    assert q.fault is not None, "the fault never fired"
    # the runtime checks choose_victims' answer and names the hook
    assert q.fault["policy"] == "explode" and q.fault["where"] == where
    assert q.fault["hook"] == hook
    if mode == "raise":
        assert q.fault["error"] == f"PolicyError: policy 'explode' failed in hook {hook}: RuntimeError('boom in {hook}')"
    assert q.fail_open_allocations > 0 and q.fail_open_blocks >= q.fail_open_allocations
    with pytest.raises(RuntimeError):  # vLLM's own error for a block that is not free
        q.remove(mine[held[0][0]] if held else mine[0])


def test_fault_before_any_allocation_keeps_install_order():
    blocks = [KVCacheBlock(i) for i in range(6)]
    rt = explode_runtime(6, hook="spfcore_choose_victims")
    q = PolicyFreeQueue(blocks, rt)
    q.install_free(blocks[1:])
    assert [b.block_id for b in q.popleft_n(2)] == [1, 2]  # hashless: the policy is not asked
    rt.stored(RequestView("r", None, 0, 0.0, 5, ("h1",)), [1], ["h1"], 0, None, 4, 0.0)
    blocks[1].set_block_hash("h1")
    q.append_n([blocks[2], blocks[1]])  # 2 hashless goes to the tail, as in vLLM's append_n
    assert [b.block_id for b in q.popleft_n(5)] == [3, 4, 5, 2, 1]  # choose_victims raised: vLLM's order
    assert q.fault["where"] == "evict" and q.fail_open_allocations == 1 and q.num_free_blocks == 0


def test_remove_of_a_block_that_is_not_free_raises_and_loses_nothing():
    blocks = [KVCacheBlock(i) for i in range(6)]
    q = PolicyFreeQueue(blocks, PolicyRuntime.for_policy("lru", 6, 4))
    q.install_free(blocks[1:])
    q.remove(blocks[3])
    for bad in (KVCacheBlock(-1), KVCacheBlock(6), blocks[3]):  # vLLM's sentinel id, past the pool, taken
        with pytest.raises(RuntimeError, match=f"not free: block {bad.block_id}"):
            q.remove(bad)
    assert q.fault is None and q.num_free_blocks == 4
    assert [b.block_id for b in q.get_all_free_blocks()] == [1, 2, 4, 5]


# ----------------------------------------------------------------- engine tests


@pytest.fixture(scope="module")
def explode_dist(tmp_path_factory):
    """Publish :class:`Explode` as the installed policy ``explode``."""
    root = tmp_path_factory.mktemp("explode")
    info = root / "explode_policy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: explode-policy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[spfcore.policies]\nexplode = test_engine_faults:Explode\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root))
        assert registry.get("explode").cls is Explode
        yield


@pytest.fixture(scope="module")
def session(explode_dist):
    spec = EngineSpec(model="tiny", block_size=BS, num_blocks=NUM_BLOCKS, max_num_seqs=4, dtype="float32")
    s = open_engine(spec, "lru")
    engine = s.llm.llm_engine
    orig_step = engine.step
    s.steps_checked = 0

    def step():
        out = orig_step()
        check_block_pool(s.scheduler)
        s.steps_checked += 1
        return out

    engine.step = step
    yield s
    s.close()


def _lru_is_fresh(s):
    s.use_policy("lru")
    cell = s.run(adapter_workload(), seed=0)
    assert [r["cached_tokens"] for r in cell["requests"]] == EXPECTED_LRU  # a fresh engine's (test_engine_adapter)
    assert cell["policy_faults"] == 0 and cell["policy_fault"] is None and cell["fail_open_allocations"] == 0


@pytest.mark.engine
@pytest.mark.parametrize("hook,mode,after,where", [
    ("spfcore_score_blocks", "raise", 3, "release"),
    ("spfcore_score_blocks", "nan", 0, "release"),
    ("spfcore_choose_victims", "raise", 0, "evict"),
    ("spfcore_choose_victims", "dup", 1, "evict"),
    ("spfcore_blocks_evicted", "raise", 0, "evict"),
    ("spfcore_blocks_hit", "raise", 0, "hit"),
    ("spfcore_blocks_stored", "raise", 2, "stored"),
    ("spfcore_request_finished", "raise", 1, "finished"),
    ("spfcore_request_arrived", "raise", 4, "arrived"),
])
def test_policy_fault_fails_open_and_the_next_arm_is_clean(session, hook, mode, after, where):
    session.use_policy("explode", {"hook": hook, "after": str(after), "mode": mode})
    before = session.steps_checked
    cell = session.run(adapter_workload(), seed=0, keep_outputs=True)
    assert session.steps_checked > before  # the pool was checked after every step
    assert all(r["cached_tokens"] is not None and len(r["output_token_ids"]) == 8 for r in cell["requests"])
    assert cell["policy_faults"] == 1
    fault = cell["policy_fault"]
    assert (fault["policy"], fault["where"]) == ("explode", where)
    assert fault["hook"] == hook
    if where in ("release", "evict", "hit"):  # faults raised on the allocation path
        assert cell["fail_open_allocations"] > 0
    pool = session.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == NUM_BLOCKS - 1  # every request done, every block free
    _lru_is_fresh(session)


@pytest.mark.engine
def test_a_crash_mid_schedule_is_cleaned_up_for_the_next_arm(session):
    """A BaseException from a hook escapes vLLM's step half way through
    ``schedule()`` (fail open handles only Exceptions). The run re-raises it
    after aborting every request; the pool is consistent, fully free, and the
    next arm installs (reproducer 3: it used to fail with 'cannot install a
    policy while requests hold KV blocks') and caches what a fresh engine does."""
    session.use_policy("explode", {"hook": "spfcore_score_blocks", "after": "2", "mode": "crash"})
    with pytest.raises(Crash):
        session.run(adapter_workload(), seed=0)
    check_block_pool(session.scheduler)
    pool = session.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == NUM_BLOCKS - 1 and not session.scheduler.requests
    assert not session.llm.llm_engine.has_unfinished_requests()
    _lru_is_fresh(session)


@pytest.mark.engine
def test_reset_aborts_requests_left_in_the_engine(session):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    session.use_policy("lru")
    engine = session.llm.llm_engine
    sp = SamplingParams(max_tokens=8, min_tokens=8, ignore_eos=True, temperature=0.0)
    for r in adapter_workload().requests[:3]:
        engine.add_request(r.request_id, TokensPrompt(prompt_token_ids=list(r.prompt_token_ids)), sp)
    engine.step()
    pool = session.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() < NUM_BLOCKS - 1
    with pytest.raises(RuntimeError, match="cannot install a policy while requests hold KV blocks"):
        session.scheduler.spf_install(lambda: PolicyRuntime.for_policy("lru", NUM_BLOCKS, BS))
    assert session.reset() == 3
    check_block_pool(session.scheduler)
    assert pool.get_num_free_blocks() == NUM_BLOCKS - 1 and not engine.has_unfinished_requests()
    _lru_is_fresh(session)
