"""The compiled ``spf_expected_utility`` engine runtime (SpfKernelRuntime)
decides as the hooks do.

Stream tests: the simulator's reference loop (``SPFCORE_SIM_REPLAY=python``)
drives a ``PolicyRuntime`` over ``spf_expected_utility``; every runtime call
is recorded and replayed into a fresh hook runtime (keys, the views' prompt
keys and parents as ``vllm_keys`` makes them) and into
:class:`SpfKernelRuntime` (the 32-byte hashes themselves): every
allocation's victims, the counters, the free blocks' order values (bit for
bit) and the policy's end state (records, histograms, index table) must
agree. A differential fuzz drives both with random pool-consistent streams
(requests interleaved as in the engine).
"""

from __future__ import annotations

import functools
import hashlib
import os
import random

import attrs
import numpy as np
import pytest

from spfcore.engine import compiled
from spfcore.engine.compiled import SpfKernelRuntime, compiled_runtime
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.views import RequestView
from spfcore.workloads.generators import make

EVENTS = ("arrived", "hit", "touch", "evict", "stored", "finished", "release")
BS = 16
ARM = "spf_expected_utility"


def _hash(k) -> bytes:
    """A vLLM-like 32-byte block hash of a simulator key."""
    return hashlib.sha256(repr(k).encode()).digest()


def _int(h: bytes) -> int:
    return int.from_bytes(h)  # vllm_keys


def record(monkeypatch, workload, num_blocks, options):
    """Every runtime call of the simulator's reference loop over the arm, as
    ``(event, args)``, keys as the simulator makes them."""
    monkeypatch.setenv(REPLAY_ENV, "python")
    log = []
    for name in EVENTS:
        orig = getattr(PolicyRuntime, name)

        def wrap(self, *args, _f=orig, _n=name):
            log.append((_n, [list(x) if isinstance(x, (list, tuple, np.ndarray)) else x for x in args]))
            return _f(self, *args)
        monkeypatch.setattr(PolicyRuntime, name, functools.wraps(orig)(wrap))
    rec = simulate(prepare(workload, BS), ARM, num_blocks=num_blocks, block_size=BS, options=options)
    monkeypatch.undo()
    return log, rec


def hashed(log: list) -> list:
    """``log`` with every key (stored keys, parents, the views' prompt keys) a 32-byte hash."""
    views: dict = {}

    def view(v):
        got = views.get(id(v))
        if got is None:
            got = views[id(v)] = (v, attrs.evolve(v, block_keys=tuple(_hash(k) for k in v.block_keys)))
        return got[1]
    out = []
    for name, a in log:
        a = list(a)
        if name in ("arrived", "hit", "stored", "finished"):
            a[0] = view(a[0])
        if name == "stored":
            a[2] = [_hash(k) for k in a[2]]
            a[4] = None if a[4] is None else _hash(a[4])
        out.append((name, a))
    return out


def replay(log, rt, raw: bool) -> list:
    """Feed ``log`` (hashed) to ``rt``; the victims of each allocation. ``raw``
    False: the hashes as ints (the hook path's keys)."""
    out = []
    views: dict = {}
    for name, a in log:
        if not raw:
            a = list(a)
            if name in ("arrived", "hit", "stored", "finished"):
                v = a[0]
                if id(v) not in views:
                    views[id(v)] = (v, attrs.evolve(v, block_keys=tuple(map(_int, v.block_keys))))
                a[0] = views[id(v)][1]
            if name == "stored":
                a[2] = [_int(h) for h in a[2]]
                a[4] = None if a[4] is None else _int(a[4])
        r = getattr(rt, name)(*a)
        if name == "evict":
            out.append(r)
    return out


def okey(x: np.ndarray) -> np.ndarray:
    """``_replay_spf_nb._okey`` of each value (the order key: the IEEE bits, ordered)."""
    b = (np.asarray(x, np.float64) + 0.0).view(np.int64)
    return b ^ ((b >> 63) & 0x7FFFFFFFFFFFFFFF)


def kernel(opts=None, nb=64, key_ids=None) -> SpfKernelRuntime:
    from spfcore.sim._replay_spf_nb import params_of

    p = params_of(PolicyRuntime.for_policy(ARM, nb, BS, opts, key_map=False))
    return SpfKernelRuntime(nb, BS, policy=p[0], pin_cap=p[1], key_ids=key_ids)


def key_id(rt: SpfKernelRuntime, h: bytes) -> int:
    """The key id of hash ``h`` in ``rt``, -1 if not interned."""
    w = np.frombuffer(h, np.int64)
    live = np.flatnonzero(rt.live)
    hit = live[(rt.KW[live] == w).all(axis=1)]
    return int(hit[0]) if hit.size else -1


def compare(hooks: PolicyRuntime, comp: SpfKernelRuntime, hashes) -> None:
    """The end states agree: counters, free blocks, their order values (bit
    for bit), the policy's records, histograms and index table."""
    from spfcore.sim import _replay_spf_nb as rs

    sa, sb = hooks.stats(), comp.stats()
    for k in ("evictions", "evict_calls", "hook_calls", "hints_issued", "hints_used"):
        assert sa[k] == sb[k], k
    assert sorted(hooks.free_ids()) == sorted(comp.free_ids()) and hooks.num_free == comp.num_free
    ev = hooks.evictor
    free = np.flatnonzero(ev._in)
    assert np.array_equal(np.flatnonzero(comp.st["ib"][rs.ev.IN]), free)
    assert np.array_equal(okey(ev._val[free]), comp.st["ok"][free])  # the same floats, bit for bit
    pol = next(iter(hooks.pm.get_plugins())).impl
    st = comp.st
    assert np.array_equal(pol.hist, st["hist"]) and np.array_equal(pol.never, st["never"])
    assert np.array_equal(pol._vals, st["vals"]) and np.array_equal(pol._offs, st["offs"])
    assert pol.epoch == st["pc"][rs.EPOCH] and pol.nghost == st["pc"][rs.NGHOST]
    assert pol.theta == st["pf"][rs.THETA] and pol.theta_next == st["pf"][rs.THETA_NEXT]
    resident = 0
    for h in hashes:
        want = pol.record(_int(h))
        k = key_id(comp, h)
        got = None
        if k >= 0:
            s = st["kr"][k, rs.REC]
            if s >= 0 and st["sr"][s, rs.STATE] == 1:
                got = [int(st["sr"][s, c]) for c in (rs.LAST, rs.COUNT, rs.CLS, rs.FIRST)]
        assert got == want, h
        resident += want is not None
    assert resident > 0
    assert len(pol.ghost) == st["pc"][rs.NGHOST]


PERSONAS = dict(seed=42, personas=4, prefix_tokens=2048, sessions=8, turns=4)
ZIPF = dict(seed=1, personas=8, prefix_tokens=1024)
CASES = [  # (workload, num_blocks, options): hits and ghosts coming back, the ghost cap binding, short scores, ...
    (("personas", PERSONAS), 600, None),
    (("personas", PERSONAS), 450, {"ghost_factor": "0.25"}),
    (("zipf", ZIPF), 300, None),
    (("zipf", ZIPF), 300, {"max_ttl": "4", "period": "3", "root_blocks": "0"}),
    (("zipf", ZIPF), 200, {"gap_classes": "false", "depth_classes": "1", "chain_monotone": "false"}),
    (("multiturn", dict(seed=3)), 120, {"gap_mean": "false", "decay": "0.9", "ghost_factor": "1"}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][0]}-{c[1]}-{c[2]}")
def test_compiled_spf_takes_the_hooks_victims(monkeypatch, case):
    (kind, kw), nb, opts = case
    log, rec = record(monkeypatch, make(kind, **kw), nb, opts)
    log = hashed(log)
    hooks = PolicyRuntime.for_policy(ARM, nb, BS, opts, key_map=False)
    comp = compiled_runtime(PolicyRuntime.for_policy(ARM, nb, BS, opts, key_map=False))
    assert isinstance(comp, SpfKernelRuntime)
    va, vb = replay(log, hooks, raw=False), replay(log, comp, raw=True)
    assert len(va) == sum(1 for n, _ in log if n == "evict") > 10
    assert va == vb  # every allocation: the same victims, in the same order
    assert hooks.evictions == comp.evictions == rec["evictions"] > 0
    assert comp.stats()["hook_calls"] == rec["hook_calls"]
    hashes = {h for n, a in log if n == "stored" for h in a[2]}
    compare(hooks, comp, hashes)


def test_key_ids_are_reused_and_bounded(monkeypatch):
    # a long stream through a small pool: key ids freed by sweeps and reused; the arrays stay near what is named
    (kind, kw), nb, opts = ("zipf", ZIPF), 200, {"ghost_factor": "0.5"}
    log, _ = record(monkeypatch, make(kind, **kw), nb, opts)
    log = hashed(log)
    hooks = PolicyRuntime.for_policy(ARM, nb, BS, opts, key_map=False)
    comp = kernel(opts, nb, key_ids=600)
    start = len(comp.KW)
    comp._room_keys(0)  # (a sweep of nothing)
    grown = []
    orig = comp._room_keys

    def room(m):
        orig(m)
        grown.append(len(comp.KW))
    comp._room_keys = room
    assert replay(log, hooks, raw=False) == replay(log, comp, raw=True)
    hashes = {h for n, a in log if n == "stored" for h in a[2]}
    assert len(hashes) > 2 * start  # more hashes than ids: ids were reused
    assert len(grown) > 5 and max(grown) <= 2 * start  # sweeps; at most one doubling (cached, parents, ghosts)
    assert comp.ic[comp.nb.NEXTID] == len(comp.KW)  # every id used, the freed ones again
    compare(hooks, comp, hashes)


def test_protocol_breaks_raise_and_apply_nothing():
    rt = kernel(nb=8)
    v = RequestView("r", None, 0, 0.0, 3 * BS, tuple(_hash(i) for i in range(3)))
    rt.release([], [1, 2, 3, 4, 5, 6, 7], 0.0)
    rt.arrived(v, 0.0)
    assert rt.evict(3, 0.0) == [1, 2, 3] and rt.num_free == 4
    rt.stored(v, [1, 2], [_hash(0), _hash(1)], 0, None, BS, 0.0)

    def state():  # every array but the per-call stamps (scratch: no decision reads them)
        out = {k: v.copy() for k, v in rt.st.items() if isinstance(v, np.ndarray)}
        out.update(KW=rt.KW.copy(), T=rt.T.copy(), live=rt.live.copy(), hf=rt.hf.copy(), hooks=rt.hook_calls)
        return out
    before = state()

    def unchanged():
        now = state()
        return all(np.array_equal(before[k], now[k]) for k in before)

    with pytest.raises(PolicyError, match="released block 4: free already"):
        rt.release([1], [4], 0.0)
    with pytest.raises(PolicyError, match="released block 3: free already, named twice"):
        rt.release([3, 3], [], 0.0)
    with pytest.raises(PolicyError, match="released block 3: free already, named twice"):
        rt.release([3], [3], 0.0)
    with pytest.raises(PolicyError, match="released block 1: .*hashless with a hash"):
        rt.release([], [1], 0.0)
    with pytest.raises(PolicyError, match="never heard stored"):
        rt.release([3], [], 0.0)  # 3 holds no hash here
    with pytest.raises(PolicyError, match="never heard stored"):
        rt.hit(v, [3], 0.0)
    with pytest.raises(PolicyError, match="twice"):
        rt.hit(v, [1, 1], 0.0)
    with pytest.raises(PolicyError, match="stored block 2: holds a block hash already"):
        rt.stored(v, [3, 2], [_hash(2), _hash(9)], 2, _hash(1), BS, 0.0)
    with pytest.raises(PolicyError, match="stored block 3: holds a block hash already, or named twice"):
        rt.stored(v, [3, 3], [_hash(2), _hash(9)], 2, _hash(1), BS, 0.0)
    with pytest.raises(PolicyError, match="need one length of 8, 16, 24 or 32 bytes"):
        rt.stored(v, [3], [b"short"], 2, None, BS, 0.0)
    with pytest.raises(PolicyError, match="no block hashes in its view"):
        rt.arrived(RequestView("q", None, 1, 0.0, 2 * BS, ()), 0.0)
    with pytest.raises(KeyError):
        rt.touch([1])  # held, not free
    with pytest.raises(ValueError, match="asked for 5, 4 free"):
        rt.evict(5, 0.0)
    with pytest.raises(ValueError, match="negative"):
        rt.evict(-1, 0.0)
    for bad in (8, -1, 10**6):  # block ids outside the 8-block pool (numba checks no bounds): refused
        with pytest.raises(PolicyError, match=f"released block {bad}: .*outside the pool"):
            rt.release([], [bad], 0.0)
        with pytest.raises(PolicyError, match=f"released block {bad}: .*outside the pool"):
            rt.release([bad], [], 0.0)
        with pytest.raises(PolicyError, match=f"stored block {bad}: .*outside the pool"):
            rt.stored(v, [bad], [_hash(2)], 2, _hash(1), BS, 0.0)
        with pytest.raises(PolicyError, match=f"hit block {bad} .*outside the pool"):
            rt.hit(v, [1, bad], 0.0)
        with pytest.raises(KeyError):
            rt.touch([bad])
    live = rt.live.copy()
    rt._room_keys(0)  # a sweep frees what the failed calls interned and nothing named
    assert unchanged() or not np.array_equal(live, rt.live)
    before["KW"], before["T"], before["live"] = rt.KW.copy(), rt.T.copy(), rt.live.copy()
    assert unchanged()
    assert np.array_equal(rt.live[:3], [1, 1, 1])  # the prompt's (and stored) hashes are named
    rt.release([2, 1], [3], 0.0)
    assert rt.num_free == 7
    assert rt.evict(5, 0.0) == [3, 4, 5, 6, 7]  # hashless first, hashless[0] on top
    assert sorted(rt.evict(2, 0.0)) == [1, 2] and rt.evictions == 2


def test_hashes_of_mixed_lengths_are_refused_even_when_their_total_fits():
    # 32 + 16 + 48 bytes are 3 x 32 in all: the words would name two other hashes; refused, nothing applied
    rt = kernel(nb=8)
    rt.release([], list(range(1, 8)), 0.0)
    h = [_hash(i) for i in range(3)]
    rt.arrived(RequestView("r", None, 0, 0.0, 3 * BS, tuple(h)), 0.0)
    got = rt.evict(3, 0.0)
    odd = [h[0], h[1][:16], h[2] + h[1][16:]]
    with pytest.raises(PolicyError, match="need one length"):
        rt.stored(RequestView("r", None, 0, 0.0, 3 * BS, ()), got, odd, 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="need one length"):
        rt.arrived(RequestView("q", None, 1, 0.0, 3 * BS, tuple(odd)), 0.0)
    assert (rt.st["key_of"] < 0).all() and rt.hook_calls == 2  # (configured, the first arrival)


def test_the_builder_takes_the_utility_variant_only():
    assert isinstance(compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None)), SpfKernelRuntime)
    for opts in ({"variant": "seed"}, {"count_weight": "0.5"}):
        assert compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, opts)) is None
    assert compiled_runtime(PolicyRuntime.for_policy(ARM, 8, BS, None, hook_budget_ms=5.0)) is None


# ------------------------------------------------------------ differential fuzz
# (tests/test_engine_compiled_fuzz.py's model of vLLM's block pool, with the engine's interleaving: requests
# arrive, wait, are scheduled in random order; views carry their prompt hashes; stores name their parents)
def mkhash(rng, mode):
    if mode == "collide8":  # first 8 bytes from a tiny set: probing, W1..W3 compare
        return rng.choice([b"\0" * 8, b"\xff" * 8, b"\x01" + b"\0" * 7]) + rng.randbytes(24)
    return rng.randbytes(32)


FUZZ_OPTS = [None, {"ghost_factor": "0.5"}, {"ghost_factor": "0.1", "period": "2"}, {"max_ttl": "2"},
             {"root_blocks": "0", "depth_classes": "1"}, {"chain_monotone": "false", "gap_mean": "false"},
             {"gap_classes": "false", "decay": "0.8", "max_count": "3"}]


def fuzz(seed, steps=400, back=False, pool=(3, 40), chain=8, chains=6):
    """``back``: arrival indices repeat or go back at times (the hooks take any index). ``pool``: the range of
    pool sizes; ``chain``, ``chains``: the most blocks of a prompt chain, and chains (tests/
    test_engine_compiled_fuzz_ttl.py draws pools of several order chunks, allocations through the chunk heap)."""
    rng = random.Random(seed)
    fb = 4
    nb = rng.randint(*pool)
    opts = rng.choice(FUZZ_OPTS)
    mode = rng.choice(["rand", "collide8"])
    hooks = PolicyRuntime.for_policy(ARM, nb, fb, opts, key_map=False)
    from spfcore.sim._replay_spf_nb import params_of
    p = params_of(PolicyRuntime.for_policy(ARM, nb, fb, opts, key_map=False))
    kids = rng.choice([None, 1, 4, 16])  # few key ids: sweeps and growth
    comp = SpfKernelRuntime(nb, fb, policy=p[0], pin_cap=p[1], key_ids=kids)
    cfg = dict(nb=nb, opts=opts, mode=mode, key_ids=kids)
    iv: dict = {}

    def ints(a):
        a = list(a)
        if a and isinstance(a[0], RequestView):
            v = a[0]
            if v.request_id not in iv:
                iv[v.request_id] = attrs.evolve(v, block_keys=tuple(map(_int, v.block_keys)))
            a[0] = iv[v.request_id]
        return a

    def both(name, *args):
        ra = rb = ea = eb = None
        try:
            a = ints(args)
            if name == "stored":
                a[2] = [_int(k) for k in a[2]]
                a[4] = None if a[4] is None else _int(a[4])
            ra = getattr(hooks, name)(*a)
        except Exception as e:  # noqa
            ea = e
        try:
            rb = getattr(comp, name)(*args)
        except Exception as e:  # noqa
            eb = e
        if (ea is None) != (eb is None) or ra != rb:
            raise AssertionError(f"seed {seed} {cfg}: {name}{args!r:.300}: hooks {ra!r:.200}/{ea!r} vs compiled "
                                 f"{rb!r:.200}/{eb!r}")
        return ra

    ref = [0] * nb
    bhash = [None] * nb
    hmap = {}  # hash -> blocks holding it (insertion order, vLLM's first is returned)
    both("release", [], list(range(nb)), 0.0)
    chains = [[mkhash(rng, mode) for _ in range(rng.randint(1, chain))] for _ in range(rng.randint(1, chains))]
    waiting, running = [], []
    t = 0.0
    arrivals = 0

    def take(n):
        victims = both("evict", n, t)
        for b in victims:
            assert ref[b] == 0
            h = bhash[b]
            if h is not None:
                hmap[h].remove(b)
                if not hmap[h]:
                    del hmap[h]
                bhash[b] = None
            ref[b] = 1
        return victims
    for step in range(steps):
        t += 1.0
        r = rng.random()
        if r < 0.3 or not (waiting or running):  # an arrival: it waits to be scheduled
            c = rng.choice(chains)
            L = rng.randint(1, len(c))
            chain = c[:L]
            partial = rng.random() < 0.5
            idx = max(0, arrivals - rng.choice([0, 0, 0, 1, 3, 9])) if back else arrivals
            view = RequestView(f"r{arrivals}", rng.choice([None, "a", "b"]), idx, t, L * fb + partial, tuple(chain))
            arrivals += 1
            both("arrived", view, t)
            waiting.append((view, chain, partial))
        elif r < 0.6 and waiting:  # schedule one: lookup, touch, hit, allocate, store
            view, chain, partial = waiting.pop(rng.randrange(len(waiting)))
            L = len(chain)
            hits = []
            for h in chain:
                bl = hmap.get(h)
                if not bl:
                    break
                hits.append(bl[0])
            n_new = L - len(hits) + partial
            need = n_new + sum(1 for b in hits if ref[b] == 0)
            if need > sum(1 for x in ref if x == 0):
                both("finished", view, t)
                continue
            free_hits = [b for b in hits if ref[b] == 0]
            first_touch = rng.random() < 0.5
            if free_hits and first_touch:
                both("touch", free_hits)
            for b in hits:
                ref[b] += 1
            if hits or rng.random() < 0.5:
                both("hit", view, hits, t)
            if free_hits and not first_touch:
                both("touch", free_hits)
            victims = take(n_new) if n_new or rng.random() < 0.3 else []
            blocks = hits + victims
            full = victims[: L - len(hits)]
            ks = chain[len(hits):]
            cut = rng.randint(0, len(full)) if full else 0
            for part_ids, part_ks, first in ((full[:cut], ks[:cut], len(hits)), (full[cut:], ks[cut:], len(hits) + cut)):
                if part_ids:
                    for b, h in zip(part_ids, part_ks):
                        bhash[b] = h
                        hmap.setdefault(h, []).append(b)
                    both("stored", view, list(part_ids), list(part_ks), first, chain[first - 1] if first else None, fb, t)
            running.append([view, blocks, partial, list(chain)])
        elif r < 0.75 and running:  # decode: the partial block fills (stored alone), maybe a new one allocated
            ent = rng.choice(running)
            view, blocks, partial, keys = ent
            if partial and bhash[blocks[-1]] is None:
                b = blocks[-1]
                h = mkhash(rng, mode) if rng.random() < 0.8 else rng.choice(rng.choice(chains))  # rarely an existing hash
                bhash[b] = h
                hmap.setdefault(h, []).append(b)
                d = len(blocks) - 1
                both("stored", view, [b], [h], d, keys[d - 1] if d and d - 1 < len(keys) else None, fb, t)
                keys.append(h)
                ent[2] = False
            elif sum(1 for x in ref if x == 0) >= 1:
                blocks += take(1)
                ent[2] = True
        elif running:  # finish (or preempt): free deepest first
            view, blocks, _, _ = running.pop(rng.randrange(len(running)))
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
            else:  # as the adapter's append_n of cached then prepend_n of hashless
                if cached:
                    both("release", cached, (), t)
                if hashless:
                    both("release", (), hashless, t)
        if hooks.num_free != comp.num_free or sorted(hooks.free_ids()) != sorted(comp.free_ids()):
            raise AssertionError(f"seed {seed} {cfg}: free sets differ at step {step}")
    sa, sb = hooks.stats(), comp.stats()
    for k in ("evictions", "evict_calls", "hook_calls"):
        if sa[k] != sb[k]:
            raise AssertionError(f"seed {seed} {cfg}: {k} {sa[k]} vs {sb[k]}")
    free = np.flatnonzero(hooks.evictor._in)
    if not np.array_equal(okey(hooks.evictor._val[free]), comp.st["ok"][free]):
        raise AssertionError(f"seed {seed} {cfg}: the free blocks' values differ")
    return sa["evictions"]


SEEDS = int(os.environ.get("SPFCORE_FUZZ_SEEDS", "200"))


@pytest.mark.parametrize("chunk", range(2))
def test_compiled_spf_equals_the_hooks_on_random_pool_streams(chunk):
    evicted = sum(fuzz(s) for s in range(chunk, SEEDS, 2))
    assert evicted > 0  # (the streams evict: the comparison reached the order)


def test_a_store_reads_the_latest_prompt_when_arrival_indices_repeat():
    # the hooks' store reads the latest arrival's prompt (its hash set decides a block's kind); an earlier arrival
    # at the same index (or a later one, when indices go back) must not count: its prompt is not the latest
    from spfcore.sim import _replay_spf_nb as rs

    hooks = PolicyRuntime.for_policy(ARM, 16, BS, None, key_map=False)
    comp = kernel(nb=16)
    pol = next(iter(hooks.pm.get_plugins())).impl
    a = [_hash(("a", i)) for i in range(3)]
    b = [_hash(("b", i)) for i in range(3)]
    for rt in (hooks, comp):
        rt.release([], list(range(16)), 0.0)
    # index 0 twice, then 2 and back to 1; a's blocks stored after b's prompt arrived: decode blocks (kind 0)
    stream = [(0, a, None), (0, b, 0), (1, b, None), (2, a, None), (1, b, 1)]
    for j, (t, keys, store) in enumerate(stream):
        for rt, f in ((hooks, _int), (comp, bytes)):
            rt.arrived(RequestView(f"r{j}", None, t, 0.0, 3 * BS, tuple(map(f, keys))), 0.0)
            if store is not None:
                got = rt.evict(3 - store, 0.0)
                rt.stored(RequestView(f"s{j}", None, t, 0.0, 3 * BS, ()), got, [f(x) for x in a[store:]], store,
                          f(a[0]) if store else None, BS, 0.0)
    for h in a:
        k = key_id(comp, h)
        s = comp.st["kr"][k, rs.REC]
        assert [int(comp.st["sr"][s, c]) for c in (rs.LAST, rs.COUNT, rs.CLS, rs.FIRST)] == pol.record(_int(h))
    assert pol.record(_int(a[0])) == [0, 1, 0, 0]  # class 0: a decode block seen once, depth 0


def test_compiled_spf_equals_the_hooks_when_arrival_indices_go_back():
    evicted = sum(fuzz(s, steps=600, back=True) for s in range(4242, 4242 + SEEDS // 2))
    assert evicted > 0


def test_release_orders_are_renumbered_before_they_run_out(monkeypatch):
    # the order packs release orders below rs.MAX_ORDER (2**39; the hooks' int64 orders run on): a long-lived
    # runtime renumbers its free blocks' orders (their order kept) instead of refusing every release from then on
    from spfcore.sim import _replay_spf_nb as rs

    release, jumps = SpfKernelRuntime.release, [0, 0]

    def near_the_end(self, *a):  # now and then the orders jump close to the end (later ones stay later)
        jumps[0] += 1
        if jumps[0] % 7 == 0:
            self.c[rs.ORDER] = max(self.c[rs.ORDER], rs.MAX_ORDER - 40)
            jumps[1] += 1
        return release(self, *a)
    monkeypatch.setattr(SpfKernelRuntime, "release", near_the_end)
    evicted = sum(fuzz(s, steps=400) for s in range(16))
    assert evicted > 0 and jumps[1] > 100
    monkeypatch.undo()
    rt = kernel(nb=8)
    rt.release([], list(range(1, 8)), 0.0)
    rt.c[rs.ORDER] = rs.MAX_ORDER - 40
    for t in range(30):
        v = RequestView(f"r{t}", None, t, 0.0, 2 * BS, (_hash((t, 0)), _hash((t, 1))))
        rt.arrived(v, 0.0)
        got = rt.evict(2, 0.0)
        rt.stored(v, got, list(v.block_keys), 0, None, BS, 0.0)
        rt.release(got[::-1], [], 0.0)
    assert rt.c[rs.ORDER] < 64  # renumbered (the free blocks' orders from 1)


def test_a_sweep_keeps_the_parent_of_a_cached_block():
    # a cached block's parent hash may be named by nothing else (evicted, its ghost trimmed): its key id stays,
    # so the chain cap still finds the parent's hash when it is stored again (a reused id would name another)
    from spfcore.sim import _replay_spf_nb as rs

    rt = kernel({"ghost_factor": "0.1"}, nb=8)  # one ghost
    a, b, c, d = (_hash(x) for x in "abcd")
    rt.release([], list(range(1, 8)), 0.0)
    v = RequestView("v", None, 0, 0.0, 2 * BS, (a, b))
    rt.arrived(v, 0.0)
    assert rt.evict(2, 0.0) == [1, 2]
    rt.stored(v, [1, 2], [a, b], 0, None, BS, 0.0)
    rt.release([1], [], 0.0)  # a's block free, b's still held
    for t, (x, blk) in enumerate(((c, 3), (d, 4)), start=1):
        w = RequestView(f"w{t}", None, t, 0.0, BS, (x,))
        rt.arrived(w, 0.0)
        assert rt.evict(1, 0.0) == [blk]
        rt.stored(w, [blk], [x], 0, None, BS, 0.0)
        rt.release([blk], [], 0.0)
        got = rt.evict(5, 0.0)  # the hashless blocks, then a cached one: ghosts pass through the one place
        rt.release([], got, 0.0)
    k = key_id(rt, a)
    assert k >= 0 and rt.st["kr"][k, rs.REC] < 0 and rt.st["kr"][k, rs.DUAL] < 0  # a: no record, no ghost
    assert rt.st["key_of"][1] != k and rt.st["par_of"][2] == k  # not cached; b's parent
    rt.arrived(RequestView("x", None, 9, 0.0, 0, ()), 0.0)
    rt._room_keys(0)
    assert key_id(rt, a) == k  # kept


@pytest.mark.engine
def test_engine_spf_compiled_equals_hooks_and_simulator():
    pytest.importorskip("vllm")
    from spfcore.engine.runner import EngineSpec, open_engine

    wl = make("personas", seed=0, personas=3, prefix_tokens=512, sessions=6, turns=3, query_tokens=32, output_tokens=8)
    nb = 40  # 39 usable blocks of 32 tokens: three 16-block prefixes do not fit
    sim = simulate(prepare(wl, 32), ARM, num_blocks=nb, block_size=32)
    spec = EngineSpec(model="tiny", block_size=32, num_blocks=nb, max_num_seqs=4, dtype="float32")
    with open_engine(spec, ARM) as s:
        comp = s.run(wl, seed=0, keep_outputs=True)
        assert isinstance(s.runtime, SpfKernelRuntime)
        s.use_policy(ARM, compiled=False)
        hooks = s.run(wl, seed=0, keep_outputs=True)
        assert isinstance(s.runtime, PolicyRuntime)
    assert (comp["served_by"], hooks["served_by"]) == ("compiled", "hooks")
    cached = [r["cached_tokens"] for r in comp["requests"]]
    assert cached == [r["cached_tokens"] for r in hooks["requests"]] == [r["cached_tokens"] for r in sim["requests"]]
    assert sum(cached) > 0 and cached.count(0) >= 3  # hits, and the first request of each prefix misses
    assert comp["evictions"] == hooks["evictions"] == sim["evictions"] > 0
    assert comp["evict_calls"] == hooks["evict_calls"] and comp["hook_calls"] == hooks["hook_calls"]
    assert [r["output_token_ids"] for r in comp["requests"]] == [r["output_token_ids"] for r in hooks["requests"]]
    assert comp["policy_faults"] == hooks["policy_faults"] == 0
    assert comp["hook_seconds"] == 0.0 < comp["policy_seconds"]
