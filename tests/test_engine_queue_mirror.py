"""PolicyFreeQueue's mirror of vLLM's order and its victim check
(spfcore.engine.vllm_adapter, spfcore.engine._queue_nb), for the hooks and
for a compiled runtime that takes id arrays.

The queue keeps, besides the runtime, which blocks are free and the order
vLLM's own ``FreeKVCacheBlockQueue`` would hold them in (flags and release
stamps written a call at a time). Random streams drive it side by side with
a vLLM queue that takes out the same victims: the free list, its order and
the free count must agree after every operation (with the mirror written
by the numba kernels, by Python loops, or both by call size), the runtime must hold
exactly the free blocks, and after a fault vLLM's order serves. Victims
that are not ``n`` distinct free blocks of the pool fail open with nothing
applied.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

pytest.importorskip("vllm")

from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock

from spfcore.engine.compiled import compiled_runtime
from spfcore.engine import vllm_adapter
from spfcore.engine.vllm_adapter import PolicyFreeQueue
from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView

BS = 4


@pytest.fixture(params=[1, 3, 10**9], ids=["kernel", "mixed", "loops"], autouse=True)
def bulk(request, monkeypatch):
    """Every test runs with the mirror written by the kernels for calls of
    any size, of 3 blocks or more, and never (Python loops)."""
    monkeypatch.setattr(vllm_adapter, "BULK_BLOCKS", request.param)
    return request.param


def _runtime(kind: str, n: int):
    rt = PolicyRuntime.for_policy("frequency", n, BS, key_map=False)
    if kind == "compiled":
        rt = compiled_runtime(rt)
        assert rt is not None and rt.id_arrays
    return rt


def _order(q) -> list[int]:
    return [b.block_id for b in q.get_all_free_blocks()]


def _hash(k: int) -> bytes:
    return hashlib.sha256(str(k).encode()).digest()


class _Pair:
    """The policy queue over one pool and vLLM's queue over another, driven
    as vLLM's block pool drives its queue."""

    def __init__(self, kind: str, n: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.mine, self.theirs = [KVCacheBlock(i) for i in range(n)], [KVCacheBlock(i) for i in range(n)]
        self.mine[0].is_null = self.theirs[0].is_null = True  # vLLM's null block, never free
        self.rt = _runtime(kind, n)
        self.q = PolicyFreeQueue(self.mine, self.rt)
        self.q.install_free(self.mine[1:])
        self.ref = FreeKVCacheBlockQueue(self.theirs[1:])
        self.held: list[list[int]] = []  # per request: its blocks, depth order
        self.key = 0
        self.wants_hashes = getattr(self.rt, "wants_block_hashes", False)

    def allocate(self, k: int) -> list[int]:
        got = self.q.popleft_n(k)
        ids = [b.block_id for b in got]
        assert len(set(ids)) == k and all(self.theirs[i].ref_cnt == 0 for i in ids)
        if self.q.fault is None:  # vLLM's queue hands out the same blocks: out of its order
            for i in ids:
                self.ref.remove(self.theirs[i])
        else:
            assert ids == [b.block_id for b in self.ref.popleft_n(k)]  # failed open: vLLM's order itself
        for i in ids:
            for bl in (self.mine, self.theirs):
                bl[i].reset_hash()
                bl[i].ref_cnt = 1
        # cache all, all but the last (a partial last block), or none (aborted before its first step)
        full = (ids, ids[:-1], [])[int(self.rng.integers(0, 3))]
        keys = [self.key + j for j in range(len(full))]
        self.key += len(full)
        if full and self.q.fallback is None:
            view = RequestView("r", None, 0, 0.0, BS * len(ids), ())
            ks = [_hash(x) for x in keys] if self.wants_hashes else [int.from_bytes(_hash(x)) for x in keys]
            self.rt.stored(view, full, ks, 0, None, BS, 0.0)
        for i, x in zip(full, keys):
            self.mine[i].set_block_hash(_hash(x))
            self.theirs[i].set_block_hash(_hash(x))
        self.held.append(ids)
        return ids

    def free(self, j: int, mixed: bool) -> None:
        """A finished request: vLLM's free_blocks (tail first; hashless
        prepended, cached appended), or one mixed append_n (as older vLLMs
        and tests hand it)."""
        ids = self.held.pop(j)[::-1]
        for i in ids:
            self.mine[i].ref_cnt = self.theirs[i].ref_cnt = 0
        for q, bl in ((self.q, self.mine), (self.ref, self.theirs)):
            blocks = [bl[i] for i in ids]
            if mixed:
                q.append_n(blocks)
            else:
                q.prepend_n([b for b in blocks if b.block_hash is None])
                q.append_n([b for b in blocks if b.block_hash is not None])

    def hit(self) -> None:
        """A hit on free cached blocks (vLLM's touch: one remove each)."""
        free = [i for i in _order(self.ref) if self.theirs[i].block_hash is not None]
        if not free:
            return
        pick = [int(i) for i in self.rng.choice(free, size=min(len(free), int(self.rng.integers(1, 4))),
                                                replace=False)]

        def touch(blocks):
            for b in blocks:
                if b.ref_cnt == 0 and not b.is_null:
                    self.q.remove(b)
                b.ref_cnt += 1
        self.q.touch_many(touch, [self.mine[i] for i in pick])
        for i in pick:
            self.ref.remove(self.theirs[i])
            self.theirs[i].ref_cnt += 1
        self.held.append(pick)

    def check(self, step) -> None:
        assert _order(self.q) == _order(self.ref), f"step {step}"
        assert self.q.num_free_blocks == self.ref.num_free_blocks == len(_order(self.ref)), f"step {step}"
        if self.q.fallback is None:
            assert sorted(self.rt.free_ids()) == sorted(_order(self.ref)), f"step {step}"
            assert self.rt.num_free == self.ref.num_free_blocks


@pytest.mark.parametrize("kind", ["hooks", "compiled"])
@pytest.mark.parametrize("seed", range(4))
def test_mirror_is_vllms_order_and_fails_open_into_it(kind, seed):
    """300 random allocations (cached and partial blocks), frees (split as
    vLLM's free_blocks does, or mixed in one append_n) and hits; then the
    runtime breaks and the rest is served in vLLM's order, the same blocks
    as vLLM's own queue hands out."""
    p = _Pair(kind, 40, seed)
    rng = p.rng
    fault_at = int(rng.integers(150, 250))
    for step in range(300):
        if step == fault_at:
            def broken(n, now):
                raise RuntimeError("runtime broke")
            p.rt.evict = broken
        op = rng.integers(0, 4)
        if op == 0 and p.q.num_free_blocks:
            p.allocate(int(rng.integers(1, min(6, p.q.num_free_blocks) + 1)))
        elif op in (1, 2) and p.held:
            p.free(int(rng.integers(0, len(p.held))), mixed=op == 2)
        elif op == 3:
            p.hit()
        p.check(step)
    assert p.q.fault is not None and p.q.fault["where"] == "evict", "the fault never fired"
    assert p.q.fault["error"] == "RuntimeError: runtime broke"
    assert p.q.fail_open_allocations > 0


class _Liar:
    """A runtime whose ``evict`` answers ``answer(real victims)``; every
    other event goes to the real one."""

    def __init__(self, rt, answer) -> None:
        self.rt, self.answer = rt, answer
        self.policy_name = "liar"

    def evict(self, n, now):
        return self.answer(self.rt.evict(n, now))

    def __getattr__(self, name):
        return getattr(self.rt, name)


_CHECKED = "RuntimeError: runtime.evict(4) returned"


@pytest.mark.parametrize("kind", ["hooks", "compiled"])
@pytest.mark.parametrize("why,answer,error", [
    ("named twice", lambda v: v[:-1] + v[:1], _CHECKED),
    ("named twice, last", lambda v: v[:1] + v[:-1], _CHECKED),
    ("not free", lambda v: v[:-1] + [5], _CHECKED),  # block 5: held by the first request
    ("negative", lambda v: v[:-1] + [-1], _CHECKED),
    ("past the pool", lambda v: v[:-1] + [40], "IndexError: list index out of range"),
    ("too few", lambda v: v[:-1], _CHECKED),
    ("too many", lambda v: v + [v[0] + 1], _CHECKED),
    ("not ints", lambda v: v[:-1] + [float(v[-1])], "TypeError: list indices must be integers"),
    ("null block", lambda v: v[:-1] + [0], _CHECKED),
])
def test_bad_victims_fail_open_with_nothing_applied(kind, why, answer, error):
    """Victims that are not n distinct free blocks of the pool: the
    allocation is served in vLLM's order from the state before it (the
    flags the check cleared are set again), and the run stays consistent."""
    p = _Pair(kind, 40, 0)
    first = p.allocate(8)  # blocks 1-8 held (5 among them)
    assert 5 in first
    for _ in range(3):
        p.allocate(6)
    p.free(1, mixed=False)
    p.free(1, mixed=True)
    p.check("before")
    before = _order(p.ref)
    p.q.runtime = _Liar(p.rt, answer)
    got = p.allocate(4)
    assert p.q.fault is not None and p.q.fault["where"] == "evict", why
    assert p.q.fault["error"].startswith(error), p.q.fault["error"]
    assert got == before[:4]  # vLLM's order, from the mirror as it was before the allocation
    assert p.q.fail_open_allocations == 1 and p.q.fail_open_blocks == 4
    for step in range(40):  # the fallback keeps serving in vLLM's order
        if step % 3 == 0 and p.held:
            p.free(0, mixed=step % 2 == 0)
        elif p.q.num_free_blocks:
            p.allocate(min(3, p.q.num_free_blocks))
        p.check(step)


def test_remove_checks_the_flag_and_loses_nothing():
    """remove() of a block that is not free raises vLLM's RuntimeError and
    changes nothing; of a free cached one (a hit), clears exactly its flag
    and the runtime lets it go."""
    p = _Pair("compiled", 12, 0)
    while not any(p.mine[i].block_hash is not None for i in _order(p.q)):
        p.allocate(3)
        p.allocate(2)
        p.free(0, mixed=False)
    held = p.held[0]
    order = _order(p.q)
    for bad in (KVCacheBlock(-1), KVCacheBlock(12), p.mine[held[0]], p.mine[0]):
        with pytest.raises(RuntimeError, match="not free"):
            p.q.remove(bad)
    assert _order(p.q) == order and p.q.num_free_blocks == len(order)
    cached = [i for i in order if p.mine[i].block_hash is not None]
    p.q.remove(p.mine[cached[0]])
    p.ref.remove(p.theirs[cached[0]])
    assert p.q.fault is None
    assert _order(p.q) == [i for i in order if i != cached[0]]
    p.check("after")
