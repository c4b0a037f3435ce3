"""The classic policies' shortcuts decide exactly as the long way (issues 11
and 19): :meth:`ClassicPolicy.walk` remembers the orders it found without an
evictable block (within one eviction call, and across calls for the classes
with ``memo_across_calls``); with that memory switched off (every walk scans
the whole order, as :meth:`ClassicPolicy.first_evictable` does) every policy
names the same victims and hits the same blocks."""

from __future__ import annotations

import pytest

from spfcore import runtime
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
from spfcore_classic._base import ClassicPolicy
from spfcore_classic._ring import Ring

POLICIES = ["arc", "gdsf", "lirs", "s3fifo", "sieve", "twoq"]


class TwoLists(ClassicPolicy):
    """Victims from list ``a`` while it has an evictable block, else from ``b``."""

    name = "two-lists"

    def configure(self, capacity):
        self.a, self.b = Ring(), Ring()

    def on_hits(self, ids):
        pass

    def on_miss(self, keys):
        pass

    def on_inserts(self, ids, keys, depths):
        pass

    def victim(self):
        for order in (self.a, self.b):
            i = self.walk(order)
            if i is not None:
                order.remove(i)
                return i
        raise AssertionError("no evictable block")


def test_walk_wakes_an_order_when_its_blocks_lose_their_last_child():
    p = TwoLists()
    p.key = {1: "p", 2: "c", 3: "x", 4: "y"}
    p.parent = {1: None, 2: "p", 3: None, 4: "x"}
    p.kids = {"p": 1, "x": 1}
    p.a.extend([1, 3])  # both wait on a child: p on 2, x on 4 (in use)
    p.b.extend([2])
    free = {1: None, 2: None, 3: None}
    # 1st victim: a has none (remembered), b gives 2; p loses its last child, so a is walked
    # again and gives 1 (a memory that missed the wake-up would answer "none" and fail)
    assert p.spfcore_evict_blocks(2, free, 0.0) == [2, 1]
    assert p._stuck == {}
    assert list(p.a) == [3]


def test_walk_remembers_only_within_one_call_by_default():
    p = TwoLists()
    p.key, p.parent, p.kids = {1: "p", 2: "q"}, {1: None, 2: None}, {}
    p.a.extend([1])
    p.b.extend([2])
    assert p.spfcore_evict_blocks(1, {2: None}, 0.0) == [2]  # 1 in use: a remembered as stuck
    p.b.append(2)
    p.key[2], p.parent[2] = "q", None
    assert p.spfcore_evict_blocks(1, {1: None, 2: None}, 0.0) == [1]  # 1 released: a is walked again


class TwoListsAcross(TwoLists):
    """:class:`TwoLists` whose blocks enter ``a`` only as ids of ``on_hits`` (MRU end):
    the memory may outlive a call."""

    memo_across_calls = True

    def on_hits(self, ids):
        for i in ids:
            if i in self.a:
                self.a.remove(i)
            self.a.append(i)


def _fresh(p, key, parent, kids):
    p.key, p.parent, p.kids = key, parent, kids


def test_walk_memory_across_calls_wakes_on_release_entry_and_lost_child():
    p = TwoListsAcross()
    _fresh(p, {1: "p", 2: "q", 3: "r", 4: "c"}, {1: None, 2: None, 3: None, 4: "r"}, {"r": 1})
    p.a.extend([1, 3])  # 1 in use, 3 waits on its child 4
    p.b.extend([2, 4])
    assert p.spfcore_evict_blocks(1, {2: None, 3: None}, 0.0) == [2]  # a remembered: 1 busy, "r" waited on
    memo = p._stuck[id(p.a)]
    assert memo[2] == {1} and memo[3] == {"r": [3]}
    # next call, nothing released: a is not walked again (b's 4 is in use, a answers from memory: no victim)
    with pytest.raises(AssertionError, match="no evictable"):
        p.spfcore_evict_blocks(1, {3: None}, 0.0)
    assert p._stuck[id(p.a)] is memo
    # 1 released: the recheck finds a free leaf in a, which is walked again and gives it
    assert p.spfcore_evict_blocks(1, {1: None, 3: None}, 0.0) == [1]
    # a block that enters a through a hit (in use) joins busy; once released and a leaf, a wakes
    _fresh(p, {3: "r", 4: "c", 5: "s"}, {3: None, 4: "r", 5: None}, {"r": 1})
    p.a.clear(), p.b.clear(), p._stuck.clear()
    p.a.extend([3])
    p.b.extend([4])
    p.spfcore_request_arrived(None, 0.0)
    with pytest.raises(AssertionError):
        p.spfcore_evict_blocks(1, {3: None}, 0.0)  # a: 3 waits on 4 (in use); b: 4 in use
    assert id(p.a) in p._stuck

    class Blocks:
        ids = __import__("numpy").array([5])

    p.spfcore_blocks_hit(type("R", (), {"block_keys": ["s"]})(), Blocks, 0.0)  # 5 enters a, in use
    assert 5 in p._stuck[id(p.a)][2]
    assert p.spfcore_evict_blocks(1, {3: None, 5: None}, 0.0) == [5]
    # a waited-on hash losing its last child wakes the order across calls too
    p.a.clear(), p.b.clear(), p._stuck.clear()
    _fresh(p, {3: "r", 4: "c"}, {3: None, 4: "r"}, {"r": 1})
    p.a.extend([3])
    p.b.extend([4])
    with pytest.raises(AssertionError):
        p.spfcore_evict_blocks(1, {3: None}, 0.0)
    assert p.spfcore_evict_blocks(2, {3: None, 4: None}, 0.0) == [4, 3]


def _replay(arm, prep, num_blocks, monkeypatch, memo: bool):
    victims: list[int] = []
    evict = runtime.PolicyRuntime.evict

    def recording(self, n, now):
        ids = evict(self, n, now)
        victims.extend(ids)
        return ids

    stuck = [0]
    walk = ClassicPolicy.walk

    def counting(self, order):  # count the walks answered from the memory
        m = self._stuck.get(id(order))
        before = m is not None and m[4] == self._calls and m[1] == len(order)  # answered without a recheck
        i = walk(self, order)
        stuck[0] += i is None and (before or (m is not None and self._stuck.get(id(order)) is m))
        return i

    with monkeypatch.context() as m:
        m.setenv("SPFCORE_SIM_REPLAY", "python")  # the hooks (an arm's compiled replay would stand in)
        m.setattr(runtime.PolicyRuntime, "evict", recording)
        m.setattr(ClassicPolicy, "walk", counting if memo else lambda self, o: self.first_evictable(o, self.evictable))
        rec = simulate(prep, arm, num_blocks=num_blocks, block_size=16)
    return rec["hit_blocks"], victims, stuck[0]


@pytest.mark.parametrize("policy", POLICIES)
def test_walk_memory_changes_no_decision(policy, monkeypatch):
    # long one-off prompts fill a queue with blocks in use (the case the memory is for),
    # among sessions and shared prefixes that leave blocks with cached children
    prep = prepare(make("mix", seed=3, chat_sessions=6, agent_sessions=4, rag_requests=20, oneoff_requests=12), 16)
    fast = _replay(policy, prep, 400, monkeypatch, memo=True)
    slow = _replay(policy, prep, 400, monkeypatch, memo=False)
    assert fast[1], "no eviction: the pool was not under pressure"
    assert fast[:2] == slow[:2]
    if policy in ("arc", "lirs", "s3fifo", "twoq"):  # the policies that walk queues: the memory was used
        assert fast[2] > 0


def _woken_setup():
    """``a`` holds blocks 1..8, each free with a child (c1..c8) in ``b``; only c7 and c2 are
    free, so ``a`` is remembered without an evictable block until c7, then c2, leave."""
    p = TwoLists()
    a = list(range(1, 9))
    kids_ = [f"c{j}" for j in a]
    _fresh(p, {**{j: f"h{j}" for j in a}, **{c: c for c in kids_}},
           {**{j: None for j in a}, **{c: f"h{c[1:]}" for c in kids_}}, {f"h{j}": 1 for j in a})
    p.a.extend(a)
    p.b.extend(["c7", "c2"] + [c for c in kids_ if c not in ("c7", "c2")])
    return p, {**dict.fromkeys(a), "c7": None, "c2": None}


def test_woken_blocks_give_the_walks_victim_and_rotation(monkeypatch):
    p, free = _woken_setup()
    # c7 leaves b: 7 wakes (6 blocks before it, 1 after: the ring is rotated to it);
    # then c2: 2 wakes (2 blocks before it in the rotated order)
    assert p.spfcore_evict_blocks(4, free, 0.0) == ["c7", 7, "c2", 2]
    assert list(p.a) == [3, 4, 5, 6, 8, 1]
    full, free = _woken_setup()
    with monkeypatch.context() as m:  # the same run walking every order from its eviction end
        m.setattr(ClassicPolicy, "walk", lambda self, o: self.first_evictable(o, self.evictable))
        assert full.spfcore_evict_blocks(4, free, 0.0) == ["c7", 7, "c2", 2]
    assert list(full.a) == list(p.a)


@pytest.mark.parametrize("policy", ["arc", "lirs", "s3fifo", "twoq"])
@pytest.mark.parametrize("seed,num_blocks", [(5, 400), (6, 550), (7, 800)])
def test_woken_walk_same_victims_as_full_scan_on_random_mixes(policy, seed, num_blocks, monkeypatch):
    # randomized mixes and pool sizes: the memory, with its woken blocks, names the victims and
    # hits the blocks a walk of the whole order does
    prep = prepare(make("mix", seed=seed, chat_sessions=5, agent_sessions=3, rag_requests=16, oneoff_requests=10), 16)
    woken = [0]
    found = ClassicPolicy._woken

    def counting(self, order, memo):  # count the victims given by woken blocks
        i = found(self, order, memo)
        woken[0] += i is not None
        return i

    monkeypatch.setattr(ClassicPolicy, "_woken", counting)
    fast = _replay(policy, prep, num_blocks, monkeypatch, memo=True)
    slow = _replay(policy, prep, num_blocks, monkeypatch, memo=False)
    assert fast[1], "no eviction: the pool was not under pressure"
    assert fast[:2] == slow[:2]
    if policy == "arc":  # ARC's T2 (parents of T1 blocks) wakes block by block
        assert woken[0] > 0


def _dup_workload(seed):
    """A small random workload of bit prompts at block size 1 or 2 that mostly repeat or extend
    earlier prompts (with their outputs), arriving together: under concurrent prefill the same
    hash is cached in two blocks (review 12's differential fuzz, trimmed)."""
    import random

    from spfcore.workloads.model import Request, Workload

    rng = random.Random(seed)
    pool, reqs = [], []
    for j in range(rng.randint(10, 40)):
        if pool and rng.random() < 0.85:
            base = rng.choice(pool)
            p = base[:rng.randint(0, len(base))] + [rng.randrange(2) for _ in range(rng.randint(0, 6))] or [0]
        else:
            p = [rng.randrange(2) for _ in range(rng.randint(1, 16))]
        o = rng.randint(1, 6)
        out = tuple(rng.randrange(2) for _ in range(o))
        pool.append(p + list(out))
        reqs.append(Request(f"r{j}", 0.0, tuple(p), o, output_token_ids=out))
    bs = rng.choice([1, 2])
    need = max(-(-(r.num_prompt_tokens + r.output_tokens) // bs) for r in reqs) + 1
    return Workload("dup", {}, reqs), bs, need + rng.randint(0, need)


@pytest.mark.parametrize("policy", POLICIES)
def test_walks_and_copies_decide_as_full_scans_on_concurrent_duplicate_hashes(policy, monkeypatch):
    # hashes cached in two blocks (the copies' fallback, _victim_among_copies) and blocks in use by
    # concurrent requests, with S3-FIFO's parking: the same victims and hits as scans of whole orders
    from spfcore_classic._ring import ParkingRing

    monkeypatch.setenv("SPFCORE_SIM_REPLAY", "python")
    copies, parks = [0], [0]
    among, take = ClassicPolicy._victim_among_copies, ParkingRing.take

    def counting_copies(self):
        copies[0] += 1
        return among(self)

    def counting_take(self, free, kids, key, parked):
        n = self.nact
        i = take(self, free, kids, key, parked)
        parks[0] += n - self.nact
        return i

    monkeypatch.setattr(ClassicPolicy, "_victim_among_copies", counting_copies)
    monkeypatch.setattr(ParkingRing, "take", counting_take)
    for seed in range(6):
        wl, bs, nb = _dup_workload(seed)
        runs = []
        for memo in (True, False):
            victims: list[int] = []
            evict = runtime.PolicyRuntime.evict

            def recording(self, n, now):
                ids = evict(self, n, now)
                victims.extend(ids)
                return ids

            with monkeypatch.context() as m:
                m.setattr(runtime.PolicyRuntime, "evict", recording)
                if not memo:
                    m.setattr(ClassicPolicy, "walk", lambda self, o: self.first_evictable(o, self.evictable))
                rec = simulate(wl, policy, num_blocks=nb, block_size=bs, mode="concurrent", max_running=4,
                               token_budget=8)
            runs.append((rec["hit_blocks"], victims))
        assert runs[0] == runs[1], seed
    assert copies[0] > 0  # the copies' path ran
    if policy == "s3fifo":
        assert parks[0] > 0
