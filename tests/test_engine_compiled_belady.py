"""The compiled ``belady_oracle`` engine runtime decides as its hooks do.

Stream tests: the simulator's reference loop (``SPFCORE_SIM_REPLAY=python``,
sequential and concurrent mode: requests waiting for their lookup) drives a
``PolicyRuntime`` over ``belady_oracle``; every runtime call is recorded
(the future stream too) and replayed into a fresh hook runtime (keys as
``vllm_keys`` makes them of 32-byte hashes) and into
:class:`BeladyKernelRuntime` (the hashes themselves; arrivals' views without
keys, as the engine gives a compiled runtime): every allocation's victims,
the counters, the free set and every key's next use must agree. A
differential fuzz runs random pool-consistent streams with arbitrary
waiting sets; the engine test runs the real vLLM CPU engine with both and
with the simulator.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random

import attrs
import numpy as np
import pytest

from spfcore.engine.compiled import BeladyKernelRuntime, compiled_runtime
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.views import RequestView
from spfcore.workloads.generators import make

EVENTS = ("set_future", "arrived", "hit", "touch", "evict", "stored", "finished", "release")
BS = 16
ARM = "belady_oracle"


@functools.lru_cache(maxsize=None)
def _hash(k) -> bytes:
    """A vLLM-like 32-byte block hash of a simulator key."""
    return hashlib.sha256(repr(k).encode()).digest()


def record(monkeypatch, workload, num_blocks, **kw):
    """Every runtime call of the simulator's reference loop over ``belady_oracle``
    as ``(event, args)``: block keys (stored, future and arrival views) as 32-byte hashes."""
    monkeypatch.setenv(REPLAY_ENV, "python")
    log = []

    def view(v):
        return attrs.evolve(v, block_keys=tuple(_hash(k) for k in v.block_keys))
    for name in EVENTS:
        orig = getattr(PolicyRuntime, name)

        def wrap(self, *args, _f=orig, _n=name):
            if _n == "set_future":
                args = (list(args[0]),)
                log.append((_n, [[view(v) for v in args[0]]]))
                return _f(self, *args)
            a = [list(x) if isinstance(x, (list, tuple, np.ndarray)) else x for x in args]
            if _n == "stored":
                a[2] = [_hash(k) for k in a[2]]
            if _n in ("arrived", "hit", "stored", "finished"):
                a[0] = view(a[0])
            log.append((_n, a))
            return _f(self, *args)
        monkeypatch.setattr(PolicyRuntime, name, functools.wraps(orig)(wrap))
    rec = simulate(prepare(workload, BS), ARM, num_blocks=num_blocks, block_size=BS, **kw)
    monkeypatch.undo()
    return log, rec


def as_ints(v: RequestView, cut=None) -> RequestView:
    return attrs.evolve(v, block_keys=tuple(int.from_bytes(h[:cut]) for h in v.block_keys))


def replay(log, rt, raw: bool, cut=None) -> list:
    """Feed ``log`` to ``rt`` (``raw``: the compiled runtime, given hashes and
    keyless arrival views; else ints, ``vllm_keys``; ``cut``: hashes cut to that
    many bytes); the victims of each allocation."""
    out = []
    for name, a in log:
        a = list(a)
        if name == "set_future":
            a[0] = [as_ints(v, cut) for v in a[0]]
        elif name == "stored":
            a[2] = [h[:cut] for h in a[2]] if raw else [int.from_bytes(h[:cut]) for h in a[2]]
        if name in ("arrived", "hit", "stored", "finished"):
            a[0] = attrs.evolve(a[0], block_keys=()) if raw else as_ints(a[0], cut)
        r = getattr(rt, name)(*a)
        if name == "evict":
            out.append(r)
    return out


def runtimes(nb):
    hooks = PolicyRuntime.for_policy(ARM, nb, BS, None, key_map=False)
    comp = compiled_runtime(PolicyRuntime.for_policy(ARM, nb, BS, None, key_map=False))
    assert isinstance(comp, BeladyKernelRuntime)
    return hooks, comp


def check_same(hooks, comp, keys):
    sa, sb = hooks.stats(), comp.stats()
    for k in ("evictions", "evict_calls", "hook_calls"):
        assert sa[k] == sb[k], k
    assert sorted(hooks.free_ids()) == sorted(comp.free_ids()) and hooks.num_free == comp.num_free
    pol = next(iter(hooks.pm.get_plugins()))
    for k in keys:  # the policy's end state: every future key's next use, the waiting ones' too
        assert pol.next_use(k) == comp.next_use(k), k
    assert sorted(pol.waiting) == sorted(comp._waiting)


PERSONAS = dict(seed=42, personas=4, prefix_tokens=2048, sessions=8, turns=4)
CASES = [  # (workload, num_blocks, simulate's options): hits and misses, tight caches, waiting requests
    (("personas", PERSONAS), 600, {}),
    (("personas", PERSONAS), 300, {}),
    (("zipf", dict(seed=1, personas=8, prefix_tokens=1024)), 300, {}),
    (("multiturn", dict(seed=3)), 120, {}),
    (("personas", PERSONAS), 450, dict(mode="concurrent", max_running=4, token_budget=1024)),
    (("zipf", dict(seed=1, personas=8, prefix_tokens=1024)), 300, dict(mode="concurrent", max_running=8)),
    (("multiturn", dict(seed=3)), 200, dict(mode="concurrent", max_running=6, token_budget=512)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][0]}-{c[1]}-{c[2].get('mode', 'seq')}")
def test_compiled_belady_takes_the_hooks_victims(monkeypatch, case):
    (kind, kw), nb, opts = case
    log, rec = record(monkeypatch, make(kind, **kw), nb, **opts)
    hooks, comp = runtimes(nb)
    small = BeladyKernelRuntime(nb, BS, cap=2 * nb + 1)  # the order's and expiries' compactions, often
    va, vb = replay(log, hooks, raw=False), replay(log, comp, raw=True)
    assert len(va) == sum(1 for n, _ in log if n == "evict") > 10
    assert va == vb == replay(log, small, raw=True)  # every allocation: the same victims, in the same order
    assert hooks.evictions == comp.evictions == rec["evictions"] > 0
    keys = {int.from_bytes(h) for v in log[0][1][0] for h in v.block_keys}
    check_same(hooks, comp, keys)
    # concurrent mode reached the waiting requests' expiries: re-score rounds (hook calls beyond the arrivals,
    # lookups, releases); sequential ones have none here (an ancestor's next use is never later than its chain's)
    plain = 2 + sum(1 for n, a in log if n in ("arrived", "hit") or (n == "release" and a[0]))
    assert comp.hook_calls - plain > (50 if opts.get("mode") == "concurrent" else -1)


def test_xxhash_length_hashes_decide_as_the_hooks(monkeypatch):
    # vLLM's xxhash algorithms give 16-byte block hashes: read as the same big-endian ints as vllm_keys makes
    log, _ = record(monkeypatch, make("zipf", seed=1, personas=8, prefix_tokens=1024), 300, mode="concurrent",
                    max_running=8)
    hooks, comp = runtimes(300)
    va, vb = replay(log, hooks, raw=False, cut=16), replay(log, comp, raw=True, cut=16)
    assert va == vb and hooks.evictions == comp.evictions > 0 and comp._hash_bytes == 16
    check_same(hooks, comp, {int.from_bytes(h[:16]) for v in log[0][1][0] for h in v.block_keys})


def _h(i: int) -> bytes:
    return _hash(("k", i))


def _view(rid, i, keys=()):
    return RequestView(rid, None, i, float(i), BS * max(len(keys), 1), tuple(keys))


def test_protocol_breaks_raise_and_apply_nothing():
    from spfcore.engine._belady_nb import EPOCH, MARK

    rt = compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None, key_map=False))
    with pytest.raises(PolicyError, match="needs the future request stream"):
        rt.arrived(_view("a", 0), 0.0)
    fut = [_view("a", 0, [int.from_bytes(_h(1)), int.from_bytes(_h(2))]), _view("b", 1, [int.from_bytes(_h(1))])]
    rt.set_future(fut)
    with pytest.raises(PolicyError, match="once per runtime"):
        rt.set_future(fut)
    rt.release([], [1, 2, 3, 4, 5, 6, 7], 0.0)
    rt.arrived(_view("a", 0), 0.0)
    rt.hit(_view("a", 0), [], 0.0)
    assert rt.evict(3, 0.0) == [1, 2, 3] and rt.num_free == 4
    rt.stored(_view("a", 0), [1, 2], [_h(1), _h(2)], 0, None, BS, 0.0)

    def state():  # every array but the per-call stamps (scratch: no decision reads them)
        out = {k: v.copy() for k, v in rt.s.items() if isinstance(v, np.ndarray)}
        out["BL"][:, MARK] = 0
        out["c"][EPOCH] = 0
        return out
    before = state()

    def unchanged():
        now = state()
        return all(np.array_equal(before[k], now[k]) for k in before)

    with pytest.raises(PolicyError, match="released block 4: free already"):
        rt.release([1], [4], 0.0)
    with pytest.raises(PolicyError, match="released block 3: free already, or named twice"):
        rt.release([3, 3], [], 0.0)
    with pytest.raises(PolicyError, match="released block 3: free already, or named twice"):
        rt.release([3], [3], 0.0)
    with pytest.raises(PolicyError, match="stored block 2: holds a block hash already"):
        rt.stored(_view("a", 0), [3, 2], [_h(3), _h(9)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="stored block 3: holds a block hash already, or named twice"):
        rt.stored(_view("a", 0), [3, 3], [_h(3), _h(9)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="need one length of 8, 16, 24 or 32 bytes"):
        rt.stored(_view("a", 0), [3], [b"short"], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match=r"outside the future \(0..1\) or already waiting"):
        rt.arrived(_view("c", 2), 1.0)
    with pytest.raises(PolicyError, match="outside the future"):
        rt.arrived(_view("c", -1), 1.0)
    with pytest.raises(KeyError):
        rt.touch([1])  # held, not free
    with pytest.raises(ValueError, match="asked for 5, 4 free"):
        rt.evict(5, 0.0)
    with pytest.raises(ValueError, match="negative"):
        rt.evict(-1, 0.0)
    assert unchanged()
    rt.arrived(_view("b", 1), 1.0)
    with pytest.raises(PolicyError, match="already waiting"):
        rt.arrived(_view("b2", 1), 1.0)  # arrival index 1 waits
    assert rt.next_use(int.from_bytes(_h(1))) == 1 and rt.next_use(int.from_bytes(_h(2))) == 2**36
    rt.release([2, 1], [], 1.0)  # h(1): waiting request 1 (-(1 * 2**16)), h(2): never used again
    assert rt.evict(5, 1.0) == [4, 5, 6, 7, 2]  # hashless first (4 on top), then h(2): never used again
    rt.hit(_view("b", 1), [], 1.0)
    assert rt.next_use(int.from_bytes(_h(1))) == 2**36 and rt.evict(1, 2.0) == [1]
    assert rt.evictions == 2
    with pytest.raises(PolicyError, match="once per runtime, before any block is stored"):
        BeladyKernelRuntime.set_future(rt, fut)


def test_future_keys_that_are_not_hash_ints_are_refused():
    rt = compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None, key_map=False))
    with pytest.raises(PolicyError, match="future request stream"):
        rt.set_future([_view("a", 0, [2**256])])
    rt = compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None, key_map=False))
    with pytest.raises(PolicyError, match="future request stream"):
        rt.set_future([_view("a", 0, [("a", 1)])])
    rt = compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None, key_map=False))
    with pytest.raises(PolicyError, match="two requests"):
        rt.set_future([_view("a", 0, [1]), _view("b", 0, [2])])


def _both(ops, nb=10):
    """Run ``ops`` (``(event, args)``) on the hook runtime (stored hashes as
    ints) and the compiled one (views without keys, as the engine hands it):
    their answers and stats."""
    out = []
    for raw, rt in zip((False, True), runtimes(nb)):
        ans = []
        for name, args in ops:
            a = list(args)
            if name == "stored" and not raw:
                a[2] = [int.from_bytes(h) for h in a[2]]
            if name in ("arrived", "hit", "stored", "finished") and raw:
                a[0] = attrs.evolve(a[0], block_keys=())
            ans.append(getattr(rt, name)(*a))
        out.append((ans, rt.stats()))
    return out


def test_blocks_the_runtime_never_heard_stored_score_as_the_hooks_none_key():
    # After a prefix-cache reset with requests in flight vLLM caches blocks without a stored event: the hooks
    # score the key None (id 0: never used again) at the block's depth column; so does the compiled runtime.
    k1 = int.from_bytes(_h(1))
    fut = [_view("a", 0, [k1]), _view("b", 1, [k1])]
    ops = [("set_future", (fut,)), ("release", ([], list(range(1, 10)), 0.0)), ("arrived", (fut[0], 0.0)),
           ("hit", (fut[0], [], 0.0)), ("evict", (4, 0.0)),
           ("stored", (fut[0], [1], [_h(1)], 0, None, BS, 0.0)),
           ("release", ([1, 2, 3], [4], 0.0)),  # 2 and 3: cached in vLLM, unknown here
           ("evict", (9, 0.0))]
    (a, sa), (b, sb) = _both(ops)
    assert a == b and a[-1][-3:] == [2, 3, 1]  # the unknown two first (never, depth 0; release order), then h(1)
    assert sa["evictions"] == sb["evictions"] == 1 and sa["hook_calls"] == sb["hook_calls"]


# ------------------------------------------------------------ differential fuzz
FBS = 4


def fuzz(seed, steps=300):
    """A random pool-consistent stream (lookups that stop at the first miss,
    recomputed duplicates, chunked stores, decode blocks, hashless blocks,
    shared blocks, both release splits, allocations of 0 blocks; arrivals
    out of order now and then, requests waiting across many events, some
    never looked up; a clock that goes back now and then; hashes of 32, 16
    or 8 bytes, some equal in all but their last 8; the order's and
    expiries' compactions) into the hooks and the compiled runtime; every
    answer, the free set after every step, the next uses and counters at
    the end must agree."""
    rng = random.Random(seed)
    nb = rng.randint(3, 40)
    hooks = PolicyRuntime.for_policy(ARM, nb, FBS, None, key_map=False)
    comp = BeladyKernelRuntime(nb, FBS, cap=rng.choice([None, 2 * nb + 1, 2 * nb + 1, 3 * nb + 5]))
    cut = rng.choice([None, None, 16, 8])
    mode = rng.choice(["rand", "rand", "collide24", "collide8"])

    def mkhash():  # (collide: hashes whose first 24 bytes, or first 8 from a tiny set, are equal)
        h = rng.randbytes(32)
        if mode == "collide24":
            h = b"\x07" * 24 + h[24:]
        elif mode == "collide8":
            h = rng.choice([b"\0" * 8, b"\xff" * 8]) + h[8:]
        return h[-cut:] if cut else h
    chains = [[mkhash() for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 6))]
    extra = [mkhash() for _ in range(4)]  # hashes no future request holds
    nreq = rng.randint(5, 60)
    plan = []
    for i in range(nreq):
        c = rng.choice(chains)
        plan.append(c[:rng.randint(1, len(c))])
    fut = [RequestView(f"r{i}", None, i, float(i), len(p) * FBS, tuple(int.from_bytes(h) for h in p))
           for i, p in enumerate(plan)]
    allkeys = {int.from_bytes(h) for c in chains + [extra] for h in c}

    def both(name, *args):
        ra = rb = ea = eb = None
        ah = list(args)
        if name == "stored":
            ah[2] = [int.from_bytes(k) for k in ah[2]]
        try:
            ra = getattr(hooks, name)(*ah)
        except Exception as e:  # noqa: BLE001
            ea = e
        bargs = list(args)
        if name in ("arrived", "hit"):
            bargs[0] = attrs.evolve(bargs[0], block_keys=())
        try:
            rb = getattr(comp, name)(*bargs)
        except Exception as e:  # noqa: BLE001
            eb = e
        if (ea is None) != (eb is None) or ra != rb:
            raise AssertionError(f"seed {seed} nb {nb}: {name}{args!r:.300}: hooks {ra!r:.200}/{ea!r} vs "
                                 f"compiled {rb!r:.200}/{eb!r}")
        return ra

    both("set_future", fut)
    ref = [0] * nb
    bhash = [None] * nb
    hmap = {}
    both("release", [], list(range(nb)), 0.0)
    order = list(range(nreq))
    for _ in range(rng.randint(0, 3)):  # a few arrivals out of order (the position goes back)
        i, j = rng.randrange(nreq), rng.randrange(nreq)
        order[i], order[j] = order[j], order[i]
    waiting = []  # (view, chain) arrived, not looked up
    running = []  # [view, blocks, partial]
    t = 0.0
    for step in range(steps):
        t += rng.choice([0.0, 0.5, 1.0, 1.0, -0.75])  # (a clock going back now and then: arrival expiries decide)
        r = rng.random()
        if r < 0.3 and order:  # an arrival: waits for its lookup
            i = order.pop(0)
            view = fut[i]
            both("arrived", view, t)
            if rng.random() < 0.1:
                continue  # never looked up (aborted)
            waiting.append((view, plan[i]))
        elif r < 0.55 and waiting:  # a lookup + allocation of a waiting request (any of them)
            view, chain = waiting.pop(rng.randrange(len(waiting)))
            L = len(chain)
            partial = rng.random() < 0.5
            hits = []
            for h in chain:
                bl = hmap.get(h)
                if not bl:
                    break
                hits.append(bl[0])
            n_new = L - len(hits) + partial
            need = n_new + sum(1 for b in hits if ref[b] == 0)
            if need > sum(1 for x in ref if x == 0):
                both("hit", view, [], t)
                both("finished", view, t)
                continue
            free_hits = [b for b in hits if ref[b] == 0]
            if free_hits:
                both("touch", free_hits)
            for b in hits:
                ref[b] += 1
            both("hit", view, hits, t)
            victims = both("evict", n_new, t) if n_new or rng.random() < 0.3 else []
            for b in victims:
                h = bhash[b]
                if h is not None:
                    hmap[h].remove(b)
                    if not hmap[h]:
                        del hmap[h]
                    bhash[b] = None
                ref[b] = 1
            blocks = hits + victims
            full = victims[: L - len(hits)]
            ks = chain[len(hits):]
            cut2 = rng.randint(0, len(full)) if full else 0
            if rng.random() < 0.1:  # (now and then another hash than the prompt's at its depth)
                ks = [k if rng.random() < 0.7 else mkhash() for k in ks]
            for ids, kk, first in ((full[:cut2], ks[:cut2], len(hits)), (full[cut2:], ks[cut2:], len(hits) + cut2)):
                if ids:
                    for b, h in zip(ids, kk):
                        bhash[b] = h
                        hmap.setdefault(h, []).append(b)
                    both("stored", view, list(ids), list(kk), first, None, FBS, t)
            running.append([view, blocks, partial])
        elif r < 0.7 and running:  # decode: the partial block fills, or a new one
            ent = rng.choice(running)
            view, blocks, partial = ent
            if partial and bhash[blocks[-1]] is None:
                b = blocks[-1]
                h = rng.choice(extra) if rng.random() < 0.5 else rng.choice(rng.choice(chains))
                bhash[b] = h
                hmap.setdefault(h, []).append(b)
                both("stored", view, [b], [h], len(blocks) - 1, None, FBS, t)
                ent[2] = False
            elif sum(1 for x in ref if x == 0) >= 1:
                (v,) = both("evict", 1, t)
                h = bhash[v]
                if h is not None:
                    hmap[h].remove(v)
                    if not hmap[h]:
                        del hmap[h]
                    bhash[v] = None
                ref[v] = 1
                blocks.append(v)
                ent[2] = True
        elif running:  # finish (or preempt): free deepest first
            view, blocks, _ = running.pop(rng.randrange(len(running)))
            both("finished", view, t)
            freed = []
            for b in reversed(blocks):
                ref[b] -= 1
                if ref[b] == 0:
                    freed.append(b)
            cached = [b for b in freed if bhash[b] is not None]
            hashless = [b for b in freed if bhash[b] is None]
            if rng.random() < 0.5:
                both("release", cached, hashless, t)
            else:
                if cached:
                    both("release", cached, (), t)
                if hashless:
                    both("release", (), hashless, t)
        if hooks.num_free != comp.num_free or sorted(hooks.free_ids()) != sorted(comp.free_ids()):
            raise AssertionError(f"seed {seed}: free sets differ at step {step}")
    pol = next(iter(hooks.pm.get_plugins()))
    for k in allkeys:
        assert pol.next_use(k) == comp.next_use(k), (seed, k)
    sa, sb = hooks.stats(), comp.stats()
    for k in ("evictions", "evict_calls", "hook_calls"):
        if sa[k] != sb[k]:
            raise AssertionError(f"seed {seed}: {k} {sa[k]} vs {sb[k]}")
    return sa["evictions"]


SEEDS = int(os.environ.get("SPFCORE_FUZZ_SEEDS", "300"))


@pytest.mark.parametrize("chunk", range(3))
def test_compiled_belady_equals_the_hooks_on_random_pool_streams(chunk):
    evicted = sum(fuzz(s) for s in range(chunk, SEEDS, 3))
    assert evicted > 0


# ------------------------------------------------------------ the engine
def test_only_the_shipped_class_is_compiled():
    assert isinstance(compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None)), BeladyKernelRuntime)
    assert compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None, hook_budget_ms=5.0)) is None


@pytest.mark.engine
def test_engine_belady_compiled_equals_hooks_and_simulator():
    pytest.importorskip("vllm")
    from spfcore.engine.runner import EngineSpec, open_engine

    wl = make("personas", seed=0, personas=3, prefix_tokens=512, sessions=6, turns=3, query_tokens=32, output_tokens=8)
    nb = 40  # 39 usable blocks of 32 tokens: three 16-block prefixes do not fit
    sim = simulate(prepare(wl, 32), ARM, num_blocks=nb, block_size=32)
    spec = EngineSpec(model="tiny", block_size=32, num_blocks=nb, max_num_seqs=4, dtype="float32")
    with open_engine(spec, ARM) as s:
        comp = s.run(wl, seed=0, keep_outputs=True)
        assert isinstance(s.runtime, BeladyKernelRuntime)
        s.use_policy(ARM, compiled=False)
        hooks = s.run(wl, seed=0, keep_outputs=True)
        assert isinstance(s.runtime, PolicyRuntime)
        # timed mode, every request arriving at 0 s: 4 run at once, the others wait for their lookup
        th = s.run(wl, seed=0, mode="timed")
        s.use_policy(ARM)
        tc = s.run(wl, seed=0, mode="timed")
        assert isinstance(s.runtime, BeladyKernelRuntime)
    assert [r["cached_tokens"] for r in tc["requests"]] == [r["cached_tokens"] for r in th["requests"]]
    assert tc["evictions"] == th["evictions"] > 0 and tc["hook_calls"] == th["hook_calls"]
    assert tc["policy_faults"] == th["policy_faults"] == 0 and max(r["queue_s"] for r in tc["requests"]) > 0
    assert (comp["served_by"], hooks["served_by"]) == ("compiled", "hooks")
    cached = [r["cached_tokens"] for r in comp["requests"]]
    assert cached == [r["cached_tokens"] for r in hooks["requests"]] == [r["cached_tokens"] for r in sim["requests"]]
    assert sum(cached) > 0 and cached.count(0) >= 3  # hits, and the first request of each prefix misses
    assert comp["evictions"] == hooks["evictions"] == sim["evictions"] > 0
    assert comp["evict_calls"] == hooks["evict_calls"] and comp["hook_calls"] == hooks["hook_calls"]
    assert [r["output_token_ids"] for r in comp["requests"]] == [r["output_token_ids"] for r in hooks["requests"]]
    assert comp["policy_faults"] == hooks["policy_faults"] == 0
    assert comp["hook_seconds"] == 0.0 < comp["policy_seconds"]


def test_equal_values_across_runs_follow_the_release_order():
    # Two blocks re-scored in one round to the same value (never used again, depth 0) make one run of the order;
    # a third block of that value, released between them, waits in another run. Once the first run's head is
    # hit, the lowest (value, release order) is the third block, not the first run's next entry.
    ka, kb, kc = (int.from_bytes(_h(i)) for i in "abc")
    fut = [_view("r0", 0, [ka]), _view("r1", 1, [kb]), _view("r2", 2, [kc])]
    v0, v1, v2 = fut
    ops = [("set_future", (fut,)), ("release", ([], list(range(1, 10)), 0.0)),
           ("arrived", (v0, 0.0)), ("arrived", (v1, 0.0)), ("evict", (3, 0.0)),
           ("stored", (v0, [1], [_h("a")], 0, None, BS, 0.0)), ("stored", (v0, [2], [_h("x")], 0, None, BS, 0.0)),
           ("stored", (v1, [3], [_h("b")], 0, None, BS, 0.0)),
           ("release", ([1], [], 0.0)), ("release", ([2], [], 0.0)), ("release", ([3], [], 0.0)),
           ("hit", (v0, [], 0.0)), ("hit", (v1, [], 0.0)), ("arrived", (v2, 1.0)),  # blocks 1 and 3 re-scored
           ("touch", ([1],)), ("evict", (7, 1.0))]
    (a, sa), (b, sb) = _both(ops)
    assert a == b and a[-1] == [4, 5, 6, 7, 8, 9, 2] and sa["hook_calls"] == sb["hook_calls"]


# ------------------------------------------------------------ review (helper rbel)
def _started(nb=8):
    """A compiled runtime with a future of one request (arrival 0, looked up), blocks ``0 .. nb-2`` free."""
    rt = compiled_runtime(PolicyRuntime.for_policy(ARM, nb, BS, None, key_map=False))
    rt.set_future([_view("a", 0, [int.from_bytes(_h(1))])])
    rt.release([], list(range(nb - 1)), 0.0)
    rt.arrived(_view("a", 0), 0.0)
    rt.hit(_view("a", 0), [], 0.0)
    return rt


def test_block_ids_outside_the_pool_are_refused_with_nothing_applied():
    # The kernels index the block rows without bounds checks: an id outside 0 .. num_blocks-1 read and wrote
    # past the rows (release of hashless block 8 of 8 "freed" it; of -1, block 7, which is held). Refused instead.
    from spfcore.engine._belady_nb import EPOCH, MARK

    rt = _started()

    def state():
        out = {k: v.copy() for k, v in rt.s.items() if isinstance(v, np.ndarray)}
        out["BL"][:, MARK] = 0
        out["c"][EPOCH] = 0
        return out
    before = state()
    for bad in (8, -1, 1000):
        with pytest.raises(PolicyError, match=f"released block {bad}: .*outside the pool"):
            rt.release([], [bad], 0.0)
        with pytest.raises(PolicyError, match=f"released block {bad}: .*outside the pool"):
            rt.release([bad], [], 0.0)
        with pytest.raises(PolicyError, match=f"released block {bad}: .*outside the pool"):
            rt.release([7], [bad], 0.0)  # (7: held, its cached release alone would be taken)
        with pytest.raises(PolicyError, match=f"stored block {bad}: .*outside the pool"):
            rt.stored(_view("a", 0), [7, bad], [_h(1), _h(2)], 0, None, BS, 0.0)
        with pytest.raises(KeyError):
            rt.touch([bad])
    now = state()
    assert all(np.array_equal(before[k], now[k]) for k in before)
    assert rt.num_free == 7 and sorted(rt.free_ids()) == list(range(7))


def test_is_free_outside_the_pool_answers_false_as_the_runtime():
    hooks = PolicyRuntime.for_policy(ARM, 8, BS, None, key_map=False)
    hooks.release([], list(range(8)), 0.0)
    rt = compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None, key_map=False))
    rt.release([], list(range(8)), 0.0)
    for b in (-1, 8, 100, 0, 7):
        assert rt.is_free(b) == hooks.is_free(b), b


def test_a_refused_store_does_not_fix_the_hash_length():
    # "Nothing applied": the first store, refused (a block named twice), left the runtime's hash length at its
    # 16 bytes, so the next (valid) store of 32-byte hashes was refused too.
    rt = _started()
    rt.evict(3, 0.0)
    with pytest.raises(PolicyError, match="named twice"):
        rt.stored(_view("a", 0), [1, 1], [_h(1)[:16], _h(2)[:16]], 0, None, BS, 0.0)
    assert rt._hash_bytes == 0
    rt.stored(_view("a", 0), [1], [_h(1)], 0, None, BS, 0.0)
    assert rt._hash_bytes == 32


def test_warm_compiles_the_store_of_short_hashes_too():
    # 16-byte (xxhash) hashes reached the store kernel zero-padded by np.pad: a writable array, a signature
    # warm() did not compile, so the engine's first such store compiled it in the hot path (~0.4 s). The kernel
    # takes the hashes' bytes now, padded ones too: one signature, compiled by warm().
    from spfcore.engine import _belady_nb as nb

    rt = _started()
    rt.evict(3, 0.0)
    rt.stored(_view("a", 0), [1], [_h(1)[:16]], 0, None, BS, 0.0)
    assert len(nb.stored.signatures) == 1
