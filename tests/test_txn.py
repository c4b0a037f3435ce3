"""Issue 13, deliverable 2: a failed call leaves state exactly as before, in
the evictor, the runtime, MiniCache and the simulator's block pool.

Faults are induced for real: a test plugin wraps one hook of a real policy
(shipped or a stateless test policy) and, at its ``at``-th call, raises or
answers garbage (NaN, wrong length, duplicate or out-of-range indices, wrong
types). Each test compares a full snapshot of the state before and after the
failed call, then checks the object keeps working (a clean twin that never
saw the failed call decides the same from there on).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spfcore import Hint, Score, Scores, hookimpl, registry
from spfcore.evictor import Evictor
from spfcore.registry import new_plugin_manager
from spfcore.runtime import PolicyRuntime
from spfcore.sim.simulator import _Cache, _run_concurrent, _run_sequential, prepare
from spfcore.testing import MiniCache
from spfcore.workloads.generators import make


class Injected(RuntimeError):
    """The fault a test plugin raises."""


# ------------------------------------------------------------------ faults
#: Garbage answers per hook (besides "raise", which every hook gets).
GARBAGE = {
    "spfcore_score_blocks": ("nan", "short", "nan_expiry", "str_expiry"),
    "spfcore_admit_blocks": ("short", "junk"),
    "spfcore_choose_victims": ("dup", "range", "short"),
    "spfcore_rescore_keys": ("junk",),
    "spfcore_prefetch_hints": ("junk",),
}
ARGS = {"spfcore_score_blocks": "blocks", "spfcore_admit_blocks": "blocks",
        "spfcore_choose_victims": "candidates"}


def fault(hook: str, at: int, mode: str):
    """A plugin wrapping ``hook`` of the policy registered beside it: the
    ``at``-th call (1-based) raises :class:`Injected` (``mode`` "raise") or
    returns garbage. ``plugin.fired`` tells whether it happened."""

    def garbage(res, blocks=None, n=None):
        k = len(blocks) if blocks is not None else 0
        return {
            "nan": lambda: np.full(k, math.nan), "short": lambda: [0.0] * (k - 1) if hook.endswith("score_blocks")
            else ([True] * (k - 1) if hook.endswith("admit_blocks") else list(range(n - 1))),
            "nan_expiry": lambda: Scores(np.zeros(k), expires_at=math.nan),
            "str_expiry": lambda: [Score(0.0, expires_at="soon")] * k,
            "junk": lambda: 42 if not hook.endswith("prefetch_hints") else [42],
            "dup": lambda: [0] * max(n, 2), "range": lambda: list(range(k - n + 1, k + 1)),
        }[mode]()

    class Fault:
        calls = 0
        fired = False

    def step(self, res, **kw):
        Fault.calls += 1
        if Fault.calls != at:
            return res
        Fault.fired = True
        if mode == "raise":
            raise Injected(f"{hook} call {at}")
        return garbage(res, **kw)

    if hook == "spfcore_choose_victims":
        def impl(self, candidates, n):
            res = yield
            return step(self, res, blocks=candidates, n=n)
    elif hook in ARGS:
        def impl(self, blocks):
            res = yield
            return step(self, res, blocks=blocks)
    else:
        def impl(self):
            res = yield
            return step(self, res)
    setattr(Fault, hook, hookimpl(wrapper=True)(impl))
    return Fault()


def modes(hook: str) -> tuple:
    return ("raise",) + GARBAGE.get(hook, ())


SHIPPED = [p for p in registry.discover() if p.status == "ok" and p.name != "lru"]
HOOKS = ("spfcore_request_arrived", "spfcore_blocks_hit", "spfcore_blocks_stored", "spfcore_request_finished",
         "spfcore_blocks_evicted", "spfcore_score_blocks", "spfcore_admit_blocks", "spfcore_choose_victims",
         "spfcore_rescore_keys", "spfcore_prefetch_hints")


def implemented(name: str, options: dict) -> list[str]:
    pm, _ = registry.plugin_manager(registry.get(name), options)
    return [h for h in HOOKS if getattr(pm.hook, h).get_hookimpls()]


#: Every shipped policy (each variant of spf_expected_utility).
POLICIES = [(p.name, ()) for p in SHIPPED]
if any(p.name == "spf_expected_utility" for p in SHIPPED):
    POLICIES.append(("spf_expected_utility", (("variant", "seed"),)))
#: (policy, options, hook, mode) for every hook every shipped policy implements.
CASES = [(n, o, h, m) for n, o in POLICIES for h in implemented(n, dict(o)) for m in modes(h)]
#: ... and for the stateless test policy :class:`Pure` (every hook, victim choice included).
PURE_SIM_CASES = [("pure", (), h, m) for h in HOOKS for m in modes(h)]


def faulty_runtime(name: str, options: tuple, num_blocks: int, block_size: int, hook: str, at: int, mode: str):
    if name == "pure":
        pm = new_plugin_manager()
        pm.register(Pure(), name="pure")
        f = fault(hook, at, mode)
        pm.register(f, name="fault")
        return PolicyRuntime(pm, num_blocks, block_size, policy_name="pure", pin_cap_fraction=0.25), f
    info = registry.get(name)
    pm, instance = registry.plugin_manager(info, dict(options))
    f = fault(hook, at, mode)
    pm.register(f, name="fault")
    rt = PolicyRuntime(pm, num_blocks, block_size, policy_name=name,
                       needs_future="needs-future" in info.capabilities,
                       pin_cap_fraction=getattr(instance.params, "pin_cap_fraction", 0.5))
    return rt, f


# ------------------------------------------------------------------ state
def cache_state(c: _Cache) -> tuple:
    return dict(c.first), {k: list(v) for k, v in c.dups.items()}, list(c.key_of), list(c.ref)


def check_pool(rt: PolicyRuntime, c: _Cache, num_blocks: int) -> None:
    """vLLM's invariants on the simulator's pool: every block but the null
    block is free (in the evictor) iff its ref count is 0; the driver's
    hashes equal the runtime's; the key maps point at blocks holding the key."""
    for b in range(1, num_blocks):
        assert (b in rt.evictor) == (c.ref[b] == 0), b
        assert c.key_of[b] == rt.table.key[b], b
    for k, b in c.first.items():
        assert c.key_of[b] == k
    for k, b in rt.by_key.items():
        assert rt.table.key[b] == k
    check_evictor(rt.evictor)


def check_evictor(ev: Evictor) -> None:
    """The evictor's own structure: every free cached block has exactly one
    live entry in the order heap, at its (heap tier, value, order); nothing
    else is live there; the counters match the per-block rows."""
    if ev._flat:
        assert not set(ev._lru) & set(ev._hashless)
        return
    from spfcore.evictor import HN, HST, IN, LIVE, NPIN, ORD, PIN, TIER
    ib, hv, hi, c = ev._ib, ev._hv, ev._hi, ev._c
    inn = set(np.flatnonzero(ib[IN]).tolist())
    seen = {}
    n = int(c[HN])
    for j in range(n):
        i = int(hi[j, 2])
        if ib[IN, i] and ib[HST, i] == hi[j, 3]:
            assert i not in seen
            seen[i] = (int(hi[j, 0]), float(hv[j]), int(hi[j, 1]))
    key = [(int(hi[j, 0]), float(hv[j]), int(hi[j, 1])) for j in range(n)]
    assert all(key[(j - 1) // 2] <= key[j] for j in range(1, n))  # the heap property, stale entries too
    assert seen.keys() == inn
    for i in inn:
        assert seen[i] == (2 if ib[PIN, i] else int(ib[TIER, i]), float(ev._val[i]), int(ib[ORD, i]))
    pinned = set(np.flatnonzero(ib[PIN]).tolist())
    assert pinned <= inn and not set(ev._hashless) & inn
    assert (int(c[LIVE]), int(c[NPIN])) == (len(inn), len(pinned))


# ------------------------------------------------------------------ evictor
def scorer(fail: dict):
    """Evictor callbacks, pure functions of (ids, now), that fail once at the
    call ``fail["at"]`` of kind ``fail["kind"]`` (mode ``fail["mode"]``)."""
    calls = {"n": 0}

    def due(kind):
        if kind != fail.get("kind"):
            return False
        calls["n"] += 1
        if calls["n"] == fail["at"]:
            fail["fired"] = True
            return True
        return False

    def score(ids, now):
        if due("score"):
            raise Injected("score")
        n = len(ids)
        return ([float((i * 7 + int(now)) % 4) for i in ids], None,
                [int(now) + 1 + i % 3 if i % 2 else 2**62 for i in ids], [i % 5 == 0 for i in ids]) if n else None

    def admit(ids, now):
        if due("admit"):
            raise Injected("admit")
        return [i % 3 != 0 for i in ids]

    def choose(ids, n, now):
        if due("choose"):
            m = fail["mode"]
            if m == "raise":
                raise Injected("choose")
            return {"dup": [0] * max(n, 2), "range": [len(ids)] * n, "short": list(range(n - 1)), "junk": 7}[m]
        return list(range(len(ids) - n, len(ids)))  # the highest ranked of the candidates

    return dict(score=score, admit=admit, choose=choose)


OPS = st.lists(st.tuples(st.sampled_from(["push", "hashless", "pop", "pop_unpop", "remove", "rescore",
                                          "expired", "pin"]),
                         st.integers(1, 5), st.integers(0, 2**16)), min_size=1, max_size=40)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, kind=st.sampled_from(["score", "admit", "choose"]), at=st.integers(1, 25),
       mode=st.sampled_from(["raise", "dup", "range", "short", "junk"]), fifo=st.booleans())
def test_evictor_failed_call_leaves_state_as_before(ops, kind, at, mode, fifo):
    nb = 16
    fail = {"kind": kind, "at": at, "mode": mode}
    main = Evictor(nb, **({} if fifo else scorer(fail)), pin_cap_fraction=0.25)
    twin = Evictor(nb, **({} if fifo else scorer({})), pin_cap_fraction=0.25)
    held = list(range(nb))  # blocks not in the evictor (the test's "in use")
    for t, (op, k, r) in enumerate(ops):
        now, arrival = float(t), t
        free = main.free_ids()
        before = main.snapshot()
        fired = fail.get("fired", False)

        def apply(ev):
            if op in ("push", "hashless"):
                ids = held[:k]
                return ev.push_cached(ids, now) if op == "push" else ev.push_hashless(ids)
            if op in ("pop", "pop_unpop"):
                got = ev.pop(min(k, len(ev)), now, arrival)
                if op == "pop_unpop":
                    ev.unpop(got)
                return got
            if op == "remove" and free:
                return ev.remove(free[r % len(free)])
            if op == "rescore":
                return ev.rescore([free[(r + j) % len(free)] for j in range(k)] if free else [], now)
            if op == "expired":
                return ev.rescore_expired(now, arrival)
            if op == "pin" and not ev.fifo and free:
                return ev.pin(free[r % len(free):][:k], arrival + k)

        try:
            got = apply(main)
        except (Injected, ValueError, TypeError):
            assert fail.get("fired") and not fired  # only the injected fault fails
            if kind == "choose" and op.startswith("pop"):
                # pop re-scores expired blocks first, committed once scored
                twin.rescore_expired(now, arrival)
            else:
                assert main.snapshot() == before
            assert main.snapshot() == twin.snapshot()
            check_evictor(main)
            continue
        assert apply(twin) == got
        if op == "pop":
            held += got
        elif op in ("push", "hashless"):
            del held[:k]
        elif op == "remove" and free:
            held.append(free[r % len(free)])
        if op == "pop_unpop":
            assert sorted(main.free_ids()) == sorted(free)
        assert main.snapshot() == twin.snapshot()
        check_evictor(main)


def test_unpop_puts_victims_back_exactly():
    ev = Evictor(8, **scorer({}))
    ev.push_hashless([6, 7])
    ev.push_cached([0, 1, 2, 3, 4, 5], 0.0)
    before = ev.snapshot()
    got = ev.pop(5, 0.0, 0)
    assert got[:2] == [6, 7] and len(set(got)) == 5
    ev.unpop(got)
    assert ev.snapshot() == before
    with pytest.raises(RuntimeError, match="last pop"):
        ev.unpop(got)
    assert ev.pop(5, 0.0, 0) == got


# ------------------------------------------------------------------ simulator pool + runtime
def replay_failing(name, options, hook, at, mode, concurrent):
    """Replay a small multi-turn workload with a fault in ``hook``; return
    (fault plugin, state before the failing runtime call, state after, rt, cache)."""
    nb, bs = 24, 16
    wl = make("multiturn", seed=3, personas=2, prefix_tokens=48, sessions=4, turns=3, query_tokens=20,
              output_tokens=20, arrival="rate", rate=4.0)
    prep = prepare(wl, bs)
    rt, f = faulty_runtime(name, options, nb, bs, hook, at, mode)
    if rt.needs_future:
        rt.set_future(prep.views)
    cache = _Cache(nb)
    last = {}
    for ev in ("arrived", "hit", "stored", "finished", "release", "evict"):
        def wrapped(*a, _real=getattr(rt, ev), _ev=ev, **kw):
            last["before"] = (_ev, rt.snapshot(), cache_state(cache))
            last["evictor"] = copy.deepcopy(rt.evictor) if _ev == "evict" else None  # hook callbacks shared
            last["args"] = a
            return _real(*a, **kw)
        setattr(rt, ev, wrapped)
    try:
        if concurrent:
            _run_concurrent(prep, rt, nb, prep.views, 4, 64, 0.01, 0.001, cache=cache)
        else:
            _run_sequential(prep.plans, rt, nb, bs, cache=cache)
    except Exception as exc:
        assert f.fired, exc
        before = last["before"]
        if before[0] == "evict" and hook in ("spfcore_choose_victims", "spfcore_blocks_evicted"):
            # Evictor.pop commits the re-score of expired blocks before it asks for victims, and so
            # before the victims are reported (the documented exception of PolicyRuntime.evict)
            twin = last["evictor"]
            twin.rescore_expired(last["args"][1], rt.arrival)  # evict(n, now)
            before[1]["evictor"] = twin.snapshot()
        return f, before, (rt.snapshot(), cache_state(cache)), rt, cache
    assert not f.fired
    return f, None, None, rt, cache


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES + PURE_SIM_CASES), at=st.integers(1, 80), concurrent=st.booleans())
def test_simulator_pool_and_runtime_unchanged_by_a_failed_call(case, at, concurrent):
    f, before, after, rt, cache = replay_failing(*case[:3], at, case[3], concurrent)
    if not f.fired:
        return
    ev, rt_before, cache_before = before
    assert after[1] == cache_before, f"pool changed by the failed {ev}"
    assert after[0] == rt_before, f"runtime changed by the failed {ev}"
    check_pool(rt, cache, 24)


def test_every_shipped_policy_hook_and_mode_is_exercised():
    """The property above draws from CASES; make sure each case can fire and
    restores (first call of the hook, sequential)."""
    fired = 0
    for name, options, hook, mode in CASES + PURE_SIM_CASES:
        f, before, after, rt, cache = replay_failing(name, options, hook, 3, mode, False)
        if f.fired:
            fired += 1
            assert after == before[1:], (name, hook, mode, before[0])
            check_pool(rt, cache, 24)
    assert fired >= (len(CASES) + len(PURE_SIM_CASES)) // 2


# ------------------------------------------------------------------ MiniCache
def test_minicache_too_large_request_changes_nothing():
    """Issue 13 reproducer: the refused request leaves every block free, hits unchanged."""
    c = MiniCache("lru", num_blocks=4)
    c.serve(["a"])
    before = c.rt.snapshot(), list(c.hits), list(c.evicted), c.next_index
    with pytest.raises(ValueError, match="cannot take 4 blocks: only 3 free"):
        c.serve(["a", "b", "c", "d"])
    assert (c.rt.snapshot(), c.hits, c.evicted, c.next_index) == before
    assert len(c.rt.evictor) == 4 and c.hits == [0]
    assert c.serve(["x", "y", "z"]) == ["a"]  # 3 full + 1 partial block: the whole pool
    assert c.hits == [0, 0] and len(c.rt.evictor) == 4


class Pure:
    """A stateless policy using every decision hook (scores with arrival
    expiries and pins, admission, victim choice, re-score keys, hints) and
    the observation hooks (no-ops), so faults can target each."""

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        return None

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        return None

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        return None

    @hookimpl
    def spfcore_request_finished(self, request, now):
        return None

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        return None

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [Score(float(hash(b.key) % 3), expires_at_arrival=int(now) + 1 + b.depth % 3,
                      pinned=b.depth == 0) for b in blocks]

    @hookimpl
    def spfcore_admit_blocks(self, blocks, now):
        return [b.depth < 3 for b in blocks]

    @hookimpl
    def spfcore_choose_victims(self, candidates, n, now):
        return list(range(len(candidates) - n, len(candidates)))

    @hookimpl
    def spfcore_rescore_keys(self, request, now):
        return request.block_keys[:1]

    @hookimpl
    def spfcore_prefetch_hints(self, request, now):
        return [Hint(request.block_keys[:2], request.arrival_index + 2)]


PURE_CASES = [(h, m) for h in HOOKS for m in modes(h)]


def pure_cache(hook=None, at=0, mode="raise"):
    pm = new_plugin_manager()
    pm.register(Pure(), name="pure")
    f = None
    if hook:
        f = fault(hook, at, mode)
        pm.register(f, name="fault")
    return MiniCache(PolicyRuntime(pm, 12, 4, policy_name="pure", pin_cap_fraction=0.25), 12), f


PROMPTS = st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 6)), min_size=1, max_size=25)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(PURE_CASES), at=st.integers(1, 40), prompts=PROMPTS)
def test_minicache_failed_serve_restores_everything_and_keeps_working(case, at, prompts):
    hook, mode = case
    main, f = pure_cache(hook, at, mode)
    twin, _ = pure_cache()
    for s, n in prompts:
        keys = [f"{s}{d}" for d in range(n)]
        before = main.rt.snapshot(), list(main.hits), list(main.evicted), main.next_index
        fired = f.fired
        try:
            got = main.serve(keys, s)
        except Exception as exc:
            assert f.fired and not fired, exc
            assert (main.rt.snapshot(), main.hits, main.evicted, main.next_index) == before
            check_evictor(main.rt.evictor)
            continue
        assert twin.serve(keys, s) == got
        assert main.rt.snapshot() == twin.rt.snapshot() and main.hits == twin.hits
