"""Stateful fuzz of the policy-ordered free queue inside vLLM's own block pool
(issue 13, item 5).

A hypothesis ``RuleBasedStateMachine`` drives a real ``vllm.v1.core.block_pool.
BlockPool`` (real ``KVCacheBlock`` objects, real ref counting and hash map)
whose ``free_block_queue`` is :class:`spfcore.engine.vllm_adapter.PolicyFreeQueue`
over a :class:`PolicyRuntime`, swapped in as ``PolicyScheduler`` does. Rules
are vLLM's own paths (``get_new_blocks`` -> ``popleft_n``, ``touch`` ->
``remove``, ``free_blocks`` -> ``prepend_n``/``append_n``, with the adapter's
runtime events around them) and the queue's interface called directly
(``popleft``, ``append``, ``append_n``, ``prepend_n``, failing ``popleft_n``
and ``remove``). After every step vLLM's invariants are checked.

Every shipped policy runs; ``belady_oracle`` gets the run's future: the
requests are drawn up front and handed to ``set_future``, then arrive in that
order. ``SPFCORE_FUZZ_EXAMPLES`` sets the sequences per policy (default 25;
``benchmarks/fuzz_free_queue.py`` runs >= 10,000 in all).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

pytest.importorskip("vllm.v1.core.block_pool")
from vllm.v1.core.block_pool import BlockPool  # noqa: E402
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id  # noqa: E402

from spfcore import registry  # noqa: E402
from spfcore.engine.vllm_adapter import PolicyFreeQueue  # noqa: E402
from spfcore.runtime import PolicyRuntime  # noqa: E402
from spfcore.views import RequestView  # noqa: E402

POLICIES = ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle")
BS = 4  # tokens per block
EXAMPLES = int(os.environ.get("SPFCORE_FUZZ_EXAMPLES", "25"))
STEPS = int(os.environ.get("SPFCORE_FUZZ_STEPS", "40"))
PLAN = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6), st.booleans()), min_size=1, max_size=30)


def _key(chain: int, depth: int) -> int:
    return (chain + 1) * 1000 + depth


def _vhash(key: int):
    return make_block_hash_with_group_id(BlockHash(key.to_bytes(8, "big")), 0)


class FreeQueueMachine(RuleBasedStateMachine):
    """One policy's queue in a vLLM BlockPool; see the module docstring."""

    policy = "lru"
    sequences = 0  # started sequences, for the benchmark's count
    info = None  # the policy's registry entry, looked up once

    def __init__(self) -> None:
        super().__init__()
        self.pool = None

    @initialize(num=st.integers(4, 24), plan=PLAN)
    def setup(self, num, plan):
        type(self).sequences += 1
        self.t = 0.0
        self.pool = pool = BlockPool(num, enable_caching=True, hash_block_size=BS)
        if type(self).info is None:  # discovery (entry points) once per policy, not per sequence
            type(self).info = registry.get(self.policy)
        info = type(self).info
        pm, inst = registry.plugin_manager(info, None)  # as PolicyRuntime.for_policy
        self.runtime = PolicyRuntime(pm, num, BS, policy_name=self.policy,
                                     needs_future="needs-future" in info.capabilities,
                                     pin_cap_fraction=getattr(inst.params, "pin_cap_fraction", 0.5))
        self.queue = PolicyFreeQueue(pool.blocks, self.runtime, self.clock)
        self.queue.install_free(pool.free_block_queue.get_all_free_blocks())  # as PolicyScheduler._spf_new_runtime
        pool.free_block_queue = self.queue
        self.plan = [RequestView(f"r{i}", f"s{c}", i, float(i), L * BS + part, tuple(_key(c, d) for d in range(L)))
                     for i, (c, L, part) in enumerate(plan)]
        self.partial = [part for _, _, part in plan]
        self.runtime.set_future(iter(self.plan))  # the oracle's future; ignored by the others
        self.next = 0
        self.running: list[tuple[RequestView, list]] = []  # request, its blocks in depth order
        self.raw: list = []  # blocks taken through the queue's interface directly (ref 1)

    def clock(self) -> float:
        return self.t

    def _free_ids(self) -> list[int]:
        return [b.block_id for b in self.queue.get_all_free_blocks()]

    def _snapshot(self):
        ev = self.runtime.evictor
        return (self._free_ids(), self.queue.num_free_blocks, len(ev), ev.num_pinned,
                [(b.ref_cnt, b.block_hash) for b in self.pool.blocks], dict(self.runtime.by_key))

    def _check_pop(self, before_free: set, before_hashless: set, popped: list) -> None:
        ids = [b.block_id for b in popped]
        assert len(set(ids)) == len(ids), f"a block handed out twice: {ids}"
        assert set(ids) <= before_free, f"handed out blocks that were not free: {set(ids) - before_free}"
        hashless = sum(1 for i in ids if i in before_hashless)
        assert hashless == min(len(ids), len(before_hashless)), \
            f"{hashless} hashless blocks reused of {len(before_hashless)} free, for {len(ids)} blocks"

    def _pop_state(self):
        free = self.queue.get_all_free_blocks()
        return {b.block_id for b in free}, {b.block_id for b in free if b.block_hash is None}

    # ------------------------------------------------------------ vLLM paths
    @precondition(lambda self: self.pool is not None and self.next < len(self.plan))
    @rule()
    def arrive_and_allocate(self):
        """add_request + allocate_slots: arrival, lookup, touch (remove), hit,
        get_new_blocks (popleft_n -> evict), cache_full_blocks (stored)."""
        pool, rt = self.pool, self.runtime
        view, partial = self.plan[self.next], self.partial[self.next]
        self.next += 1
        self.t += 1.0
        rt.arrived(view, self.t)
        hits = []
        for k in view.block_keys:
            got = pool.get_cached_block(BlockHash(k.to_bytes(8, "big")), [0])
            if got is None:
                break
            hits.append(got[0])
        n_new = len(view.block_keys) + partial - len(hits)
        if n_new + sum(1 for b in hits if b.ref_cnt == 0) > pool.get_num_free_blocks():
            rt.finished(view, self.t)  # does not fit now: dropped (vLLM would keep it waiting)
            return
        pool.touch(hits)
        rt.hit(view, [b.block_id for b in hits], self.t)
        before = self._pop_state()
        new = pool.get_new_blocks(n_new)
        assert all(b.block_hash is None and b.ref_cnt == 1 for b in new)
        self._check_pop(*before, new)
        ids, keys, first = [], [], len(hits)
        for d, b in enumerate(new[:len(view.block_keys) - len(hits)], start=len(hits)):
            pool._insert_block_hash(_vhash(view.block_keys[d]), b, None)
            ids.append(b.block_id)
            keys.append(view.block_keys[d])
        if ids:
            rt.stored(view, ids, keys, first, view.block_keys[first - 1] if first else None, BS, self.t)
        self.running.append((view, hits + new))

    @precondition(lambda self: self.pool is not None and self.running)
    @rule(data=st.data())
    def finish(self, data):
        """KVCacheManager.free: finished, then free_blocks(reversed) -> prepend_n / append_n."""
        view, blocks = self.running.pop(data.draw(st.integers(0, len(self.running) - 1), label="request"))
        self.t += 1.0
        self.runtime.finished(view, self.t)
        self.pool.free_blocks(reversed(blocks))

    # ------------------------------------------------------- queue interface
    @precondition(lambda self: self.pool is not None and self.queue.num_free_blocks > 0)
    @rule()
    def popleft(self):
        before = self._pop_state()
        b = self.queue.popleft()
        self._check_pop(*before, [b])
        self.pool._maybe_evict_cached_block(b)  # what get_new_blocks does with a victim
        assert b.ref_cnt == 0
        b.ref_cnt += 1
        self.raw.append(b)

    @precondition(lambda self: self.pool is not None and self.raw)
    @rule(data=st.data(), how=st.sampled_from(["append", "append_n", "prepend_n"]))
    def give_back(self, data, how):
        k = data.draw(st.integers(1, len(self.raw)), label="blocks")
        blocks, self.raw = self.raw[:k], self.raw[k:]
        for b in blocks:
            b.ref_cnt -= 1
        self.t += 1.0
        if how == "append":
            for b in blocks:
                self.queue.append(b)
        elif how == "append_n":
            self.queue.append_n(blocks)
        else:  # prepend_n takes hashless blocks (free_blocks' LIFO group); raw blocks have no hash
            assert all(b.block_hash is None for b in blocks)
            self.queue.prepend_n(blocks)

    @precondition(lambda self: self.pool is not None)
    @rule(extra=st.integers(1, 3))
    def popleft_n_too_many_changes_nothing(self, extra):
        before = self._snapshot()
        with pytest.raises(ValueError):
            self.queue.popleft_n(self.queue.num_free_blocks + extra)
        assert self._snapshot() == before

    @precondition(lambda self: self.pool is not None)
    @rule(data=st.data())
    def remove_taken_block_changes_nothing(self, data):
        taken = [b for b in self.pool.blocks if b.ref_cnt > 0 and not b.is_null]
        if not taken:
            return
        b = data.draw(st.sampled_from(taken), label="taken block")
        before = self._snapshot()
        with pytest.raises(RuntimeError):
            self.queue.remove(b)
        assert self._snapshot() == before

    # ------------------------------------------------------------ invariants
    @invariant()
    def vllm_invariants(self):
        if self.pool is None:
            return
        pool, queue, rt = self.pool, self.queue, self.runtime
        ids = self._free_ids()
        free = set(ids)
        assert len(ids) == len(free), "a block is free twice"
        assert queue.num_free_blocks == len(free) == len(rt.evictor) == pool.get_num_free_blocks()
        refs = {}
        for _, blocks in self.running:
            for b in blocks:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
        for b in self.raw:
            refs[b.block_id] = refs.get(b.block_id, 0) + 1
        assert not pool.null_block.block_id in free and pool.null_block.is_null
        for b in pool.blocks:
            if b.is_null:
                continue
            assert b.ref_cnt == refs.get(b.block_id, 0), f"block {b.block_id}: ref_cnt {b.ref_cnt}"
            assert (b.ref_cnt == 0) == (b.block_id in free), f"block {b.block_id}: free and taken, or neither"
            if b.block_hash is not None:
                assert pool.cached_block_hash_to_block.contain(b.block_hash, b.block_id)
            # the runtime knows a block's key exactly while vLLM has its hash
            assert (rt.table.key[b.block_id] is None) == (b.block_hash is None), f"block {b.block_id}"
        for key, val in pool.cached_block_hash_to_block._cache.items():
            for b in (val.values() if isinstance(val, dict) else [val]):
                assert b.block_hash == key, f"hash map entry {key!r} -> block {b.block_id} of another hash"


def _machine(policy: str):
    return type(f"FreeQueue_{policy}", (FreeQueueMachine,), {"policy": policy, "sequences": 0, "info": None})


FUZZ_SETTINGS = dict(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                     suppress_health_check=list(HealthCheck))

for _p in POLICIES:
    _cls = _machine(_p)
    _cls.TestCase.settings = settings(**FUZZ_SETTINGS)
    globals()[f"TestFreeQueue_{_p}"] = _cls.TestCase
del _p, _cls
