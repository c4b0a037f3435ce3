"""The compiled ``session_ttl`` engine runtime (SessionTTLKernelRuntime) decides as the hooks do.

Stream tests: the simulator's reference loop (``SPFCORE_SIM_REPLAY=python``)
drives a ``PolicyRuntime`` over ``session_ttl``; every runtime call is
recorded and replayed into a fresh hook runtime (keys as ``vllm_keys`` makes
them) and into the compiled runtime (the 32-byte hashes themselves): every
allocation's victims, the counters (refused pins included) and the policy's
end state (each hash's ``until``, each session's hashes in first-touch order,
the activity order) must agree. A differential fuzz drives both on random
pool-consistent streams with sessions (concurrent requests, duplicates, hits
on blocks others hold, a binding pin cap, a tiny ``max_sessions``); the engine
test runs the real vLLM CPU engine with both and with the simulator.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random

import numpy as np
import pytest

from spfcore.engine.compiled import SessionTTLKernelRuntime, compiled_runtime
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.views import RequestView
from spfcore.workloads.generators import make
from _compiled_pair import paired

EVENTS = ("arrived", "hit", "touch", "evict", "stored", "finished", "release")
BS = 16


def _hash(k) -> bytes:
    return hashlib.sha256(repr(k).encode()).digest()


def record(monkeypatch, workload, num_blocks, options):
    """Every runtime call of the simulator's reference loop over ``session_ttl``."""
    monkeypatch.setenv(REPLAY_ENV, "python")
    log = []
    for name in EVENTS:
        orig = getattr(PolicyRuntime, name)

        def wrap(self, *args, _f=orig, _n=name):
            a = [list(x) if isinstance(x, (list, tuple, np.ndarray)) else x for x in args]
            if _n == "stored":
                a[2] = [_hash(k) for k in a[2]]
            log.append((_n, a))
            return _f(self, *args)
        monkeypatch.setattr(PolicyRuntime, name, functools.wraps(orig)(wrap))
    rec = simulate(prepare(workload, BS), "session_ttl", num_blocks=num_blocks, block_size=BS, options=options)
    monkeypatch.undo()
    return log, rec


def replay(log, rt, raw: bool) -> list:
    out = []
    for name, a in log:
        if name == "stored" and not raw:
            a = list(a)
            a[2] = [int.from_bytes(h) for h in a[2]]
        r = getattr(rt, name)(*a)
        if name == "evict":
            out.append(r)
    return out


def kernel_policy(rt: SessionTTLKernelRuntime):
    """The compiled state as the plugin holds it: ({int key: until}, {session: [int keys]} in activity
    order). The key None's row maps to ``None``."""
    from spfcore.engine import _session_ttl_nb as nb
    s = rt.s
    R, S, E, c = s["R"], s["S"], s["E"], s["c"]
    none = R.shape[0] - 1

    def key(k):
        return None if k == none else int.from_bytes(R[k, :4].tobytes())
    live = [int(x) - 1 for x in s["T"][s["T"][:, 1] > 0, 1]] + [none]
    until = {key(k): int(R[k, nb.UNTIL]) for k in live if R[k, nb.UNTIL] >= 0}
    name = {i: sid for sid, i in rt._sids.items()}
    sessions = {}
    x = c[nb.AH]
    while x >= 0:
        ks, e = [], S[x, nb.SH]
        while e >= 0:
            ks.append(key(E[e, nb.EK]))
            e = E[e, nb.ESN]
        sessions[name[int(x)]] = ks
        x = S[x, nb.SX]
    return until, sessions


def check_end_state(hooks: PolicyRuntime, comp: SessionTTLKernelRuntime) -> None:
    pol = next(iter(hooks.pm.get_plugins()))
    until, sessions = kernel_policy(comp)
    assert until == {k: int(v) for k, v in pol.until.items()}
    assert list(sessions) == list(pol.session_keys)  # the activity order, least recent first
    assert sessions == {s: list(ks) for s, ks in pol.session_keys.items()}  # first-touch order
    owners = {}
    for s, ks in sessions.items():
        for k in ks:
            owners.setdefault(k, set()).add(s)
    assert owners == {k: set(v) for k, v in pol.key_sessions.items()}
    assert comp.num_pinned == hooks.evictor.num_pinned
    assert sorted(hooks.free_ids()) == sorted(comp.free_ids()) and hooks.num_free == comp.num_free


PERSONAS = dict(seed=42, personas=4, prefix_tokens=2048, sessions=8, turns=4)
MULTI = dict(seed=3, sessions=12, turns=5)
CASES = [  # (workload, num_blocks, options)
    (("personas", PERSONAS), 600, None),
    (("personas", PERSONAS), 450, {"ttl_arrivals": "3"}),  # expiries
    (("personas", PERSONAS), 450, {"pin_cap_fraction": "0.1", "ttl_arrivals": "40"}),  # the cap binds
    (("multiturn", MULTI), 160, {"ttl_arrivals": "5"}),
    (("multiturn", MULTI), 120, {"pin_cap_fraction": "0.05", "ttl_arrivals": "2"}),
    (("zipf", dict(seed=1, personas=8, prefix_tokens=1024)), 300, {"ttl_arrivals": "16"}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][0]}-{c[1]}-{c[2]}")
def test_compiled_session_ttl_takes_the_hooks_victims(monkeypatch, case):
    (kind, kw), nb, opts = case
    log, rec = record(monkeypatch, make(kind, **kw), nb, opts)
    hooks = PolicyRuntime.for_policy("session_ttl", nb, BS, opts, key_map=False)
    comp = compiled_runtime(PolicyRuntime.for_policy("session_ttl", nb, BS, opts, key_map=False))
    assert isinstance(comp, SessionTTLKernelRuntime)
    small = SessionTTLKernelRuntime(nb, BS, ttl=comp.ttl, pin_cap=comp.pin_cap, edges=8,  # the edges grow,
                                    order_cap=nb + 2)  # the heap and the calendar compact often
    va, vb = replay(log, hooks, raw=False), replay(log, comp, raw=True)
    assert len(va) == sum(1 for n, _ in log if n == "evict") > 10
    assert va == vb == replay(log, small, raw=True)
    sa, sb = hooks.stats(), comp.stats()
    for k in ("evictions", "evict_calls", "hook_calls", "pins_refused"):
        assert sa[k] == sb[k] == small.stats()[k], k
    assert sa["evictions"] == rec["evictions"] > 0
    check_end_state(hooks, comp)
    check_end_state(hooks, small)
    assert small.s["E"].shape[0] > 8
    from spfcore.engine._session_ttl_nb import HSEQ, QTOP
    assert small.c[QTOP] == nb + 2 and (small.c[HSEQ] > nb + 2 or comp.pins_refused > 0)  # both compacted (or
    # the cap binds: few heap entries)


def test_the_streams_reach_hits_expiries_and_the_cap(monkeypatch):
    # (the cases above are not vacuous: hits, pins refused, expired pins re-scored)
    (kind, kw), nb, opts = CASES[2]
    log, rec = record(monkeypatch, make(kind, **kw), nb, opts)
    comp = compiled_runtime(PolicyRuntime.for_policy("session_ttl", nb, BS, opts, key_map=False))
    replay(log, comp, raw=True)
    assert comp.pins_refused > 0 and rec["evictions"] > 0
    (kind, kw), nb, opts = CASES[1]
    log, _ = record(monkeypatch, make(kind, **kw), nb, opts)
    hooks = PolicyRuntime.for_policy("session_ttl", nb, BS, opts, key_map=False)
    seen = []
    orig = hooks.evictor.plan_expired
    hooks.evictor.plan_expired = lambda now, a: seen.append(p := orig(now, a)) or p
    replay(log, hooks, raw=False)
    assert any(p is not None and len(p[2]) for p in seen)  # expired pins re-scored
    assert any(n == "hit" and a[1] for n, a in log)


def _hooks_and_comp(nb, opts=None):
    hooks = PolicyRuntime.for_policy("session_ttl", nb, BS, opts, key_map=False)
    comp = compiled_runtime(PolicyRuntime.for_policy("session_ttl", nb, BS, opts, key_map=False))
    assert isinstance(comp, SessionTTLKernelRuntime)
    return hooks, comp


def test_builder_refuses_what_the_kernels_do_not_take():
    assert compiled_runtime(PolicyRuntime.for_policy("session_ttl", 8, BS, {"ttl_seconds": "2.5"})) is None
    assert compiled_runtime(PolicyRuntime.for_policy("session_ttl", 8, BS, {"ttl_arrivals": str(1 << 16)})) is None
    assert compiled_runtime(PolicyRuntime.for_policy("session_ttl", 8, BS, None, hook_budget_ms=5.0)) is None
    rt = compiled_runtime(PolicyRuntime.for_policy("session_ttl", 8, BS, {"ttl_arrivals": "65535",
                                                                          "pin_cap_fraction": "0.25"}))
    assert isinstance(rt, SessionTTLKernelRuntime) and (rt.ttl, rt.pin_cap, rt.max_sessions) == (65535, 2, 8)


def test_protocol_breaks_raise_and_apply_nothing():
    from spfcore.engine._session_ttl_nb import EPOCH, MARK

    rt = compiled_runtime(PolicyRuntime.for_policy("session_ttl", 8, BS, None, key_map=False))
    view = RequestView("r", "s0", 0, 0.0, 3 * BS, ())
    rt.arrived(view, 0.0)
    rt.release([], [1, 2, 3, 4, 5, 6, 7], 0.0)
    assert rt.evict(3, 0.0) == [1, 2, 3] and rt.num_free == 4
    rt.stored(view, [1, 2], [_hash(1), _hash(2)], 0, None, BS, 0.0)

    def state():
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
    with pytest.raises(PolicyError, match="released block 9: free already"):
        rt.release([9], [], 0.0)
    with pytest.raises(PolicyError, match="stored block 2: holds a block hash already"):
        rt.stored(view, [3, 2], [_hash(3), _hash(9)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="stored block 3: holds a block hash already, or named twice"):
        rt.stored(view, [3, 3], [_hash(3), _hash(9)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="stored block 8: not a block of the pool"):
        rt.stored(view, [3, 8], [_hash(3), _hash(9)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="hit block -1: not a block of the pool"):
        rt.hit(view, [1, -1], 0.0)
    with pytest.raises(PolicyError, match="hit 9 blocks: more than the pool's 8"):
        rt.hit(view, [1] * 9, 0.0)
    with pytest.raises(PolicyError, match="need one length of 8, 16, 24 or 32 bytes"):
        rt.stored(view, [3], [b"short"], 0, None, BS, 0.0)
    with pytest.raises(KeyError):
        rt.touch([1])
    with pytest.raises(ValueError, match="asked for 5, 4 free"):
        rt.evict(5, 0.0)
    with pytest.raises(ValueError, match="negative"):
        rt.evict(-1, 0.0)
    with pytest.raises(NotImplementedError):
        rt.forget([1])
    assert unchanged()
    rt.release([2, 1], [3], 0.0)  # pinned (until 8 > arrival 0)
    assert rt.num_free == 7 and rt.num_pinned == 2
    assert rt.evict(5, 0.0) == [3, 4, 5, 6, 7]
    assert rt.evict(2, 0.0) == [2, 1]  # pinned: release order
    assert rt.evictions == 2 and kernel_policy(rt) == ({}, {})  # the keys' until and edges gone, the session too


def test_blocks_the_runtime_never_heard_stored_are_the_hooks_none_key():
    # Blocks vLLM cached after a prefix-cache reset with requests in flight: the hooks touch and score them by the
    # key None (never evicted from the policy: the runtime reports only held keys), so does the compiled runtime.
    hooks, comp = _hooks_and_comp(10, {"ttl_arrivals": "3"})
    v0 = RequestView("r0", "a", 0, 0.0, BS, ())
    v1 = RequestView("r1", "b", 1, 0.0, BS, ())
    v5 = RequestView("r5", None, 5, 0.0, BS, ())
    ops = [("arrived", (v0, 0.0)), ("release", ([], list(range(1, 10)), 0.0)), ("evict", (4, 0.0)),
           ("stored", (v0, [1], [_hash(1)], 0, None, BS, 0.0)),
           ("release", ([1, 2, 3], [4], 0.0)),  # 2 and 3: cached in vLLM, unknown here; None has no until yet
           ("arrived", (v1, 0.0)), ("touch", ([2],)), ("hit", (v1, [2], 0.0)),  # session b touches None
           ("release", ([2], [], 0.0)),  # pinned by None's until 4
           ("evict", (7, 0.0)), ("arrived", (v5, 0.0)), ("evict", (2, 0.0))]
    out = []
    for rt in (hooks, comp):
        ans = []
        for name, a in ops:
            a = list(a)
            if name == "stored" and rt is hooks:
                a[2] = [int.from_bytes(h) for h in a[2]]
            ans.append(getattr(rt, name)(*a))
        out.append(ans)
    assert out[0] == out[1]
    assert out[1][-3][-1] == 3 and out[1][-1] == [1, 2]  # unpinned 3 first; 1 and 2 pinned (2 by None's until)
    for k in ("evictions", "evict_calls", "hook_calls", "pins_refused"):
        assert hooks.stats()[k] == comp.stats()[k], k
    check_end_state(hooks, comp)
    assert kernel_policy(comp)[0] == {None: 4}  # never evicted



def _run(rt, ops, hooks: bool) -> list:
    out = []
    for name, a in ops:
        a = list(a)
        if name == "stored" and hooks:
            a[2] = [int.from_bytes(h) for h in a[2]]
        out.append(getattr(rt, name)(*a))
    return out


def _state(rt) -> dict:
    from spfcore.engine._session_ttl_nb import EPOCH, MARK
    out = {k: v.copy() for k, v in rt.s.items() if isinstance(v, np.ndarray)}
    out["BL"][:, MARK] = 0
    out["c"][EPOCH] = 0
    return out


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_an_arrival_index_below_the_latest_is_refused_with_nothing_applied():
    # The kernels' expiry calendar holds only expiries within a TTL ahead of the latest arrival (the engine's
    # arrival indices only grow). With the clock back, the hooks evict [2, 3, 1] below (block 1's pin to 6
    # lapsed at arrival 11), the kernels took [2, 3, 0] (block 1's expiry sat in a bucket not drained yet): so
    # the compiled runtime refuses such an arrival (PolicyError, nothing applied: the adapter fails open).
    ttl2 = {"ttl_arrivals": "2", "pin_cap_fraction": "1.0"}
    hooks, comp = _hooks_and_comp(4, ttl2)
    a10 = RequestView("r10", "a", 10, 0.0, BS, ())
    ops = [("release", ([], [0, 1, 2, 3], 0.0)), ("arrived", (a10, 0.0)), ("evict", (1, 0.0)),
           ("stored", (a10, [0], [_hash(0)], 0, None, BS, 0.0)), ("release", ([0], [], 0.0))]  # 0 pinned to 12
    assert _run(hooks, ops, True) == _run(comp, ops, False)
    before = _state(comp)
    for idx in (9, 4, 0, -1):
        with pytest.raises(PolicyError, match=f"arrival index {idx}: below the latest arrival's 10"):
            comp.arrived(RequestView("r", "a", idx, 0.0, BS, ()), 0.0)
    assert _same(before, _state(comp))
    same = RequestView("r10b", "a", 10, 0.0, BS, ())  # an equal index is taken (the clock stands still)
    rest = [("arrived", (same, 0.0)), ("arrived", (RequestView("r11", None, 11, 0.0, BS, ()), 0.0)),
            ("evict", (2, 0.0)), ("arrived", (RequestView("r12", None, 12, 0.0, BS, ()), 0.0)), ("evict", (2, 0.0))]
    assert _run(hooks, rest, True) == _run(comp, rest, False) == [(), (), [1, 2], (), [3, 0]]
    for k in ("evictions", "evict_calls", "hook_calls", "pins_refused"):
        assert hooks.stats()[k] == comp.stats()[k], k
    check_end_state(hooks, comp)


def test_a_touch_by_a_request_that_has_not_arrived_is_refused_with_nothing_applied():
    # A hit or store of a request whose arrival index lies ahead of the latest arrival protects to beyond the
    # calendar's reach: its expiry's bucket was drained early (an extra score call, a refused pin counted again:
    # hook_calls 16 vs 15, pins_refused 2 vs 1 below). The engine's requests arrive before their lookup, so the
    # compiled runtime refuses it (PolicyError, nothing applied).
    hooks, comp = _hooks_and_comp(4, {"ttl_arrivals": "2", "pin_cap_fraction": "0.25"})
    v0 = RequestView("r0", "c", 0, 0.0, BS, ())
    ops = [("release", ([], [0, 1, 2, 3], 0.0)), ("arrived", (v0, 0.0)), ("evict", (3, 0.0)),
           ("stored", (v0, [0], [_hash(0)], 0, None, BS, 0.0))]
    assert _run(hooks, ops, True) == _run(comp, ops, False)
    before = _state(comp)
    ahead = RequestView("r9", "c", 9, 0.0, BS, ())
    with pytest.raises(PolicyError, match="stored by request 'r9' of arrival index 9: ahead of the latest arrival's 0"):
        comp.stored(ahead, [1, 2], [_hash(1), _hash(2)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="hit by request 'r9' of arrival index 9: ahead of the latest arrival's 0"):
        comp.hit(ahead, [0], 0.0)
    assert _same(before, _state(comp)) and comp._sids.keys() == {"c"}
    rest = [("stored", (v0, [1, 2], [_hash(1), _hash(2)], 1, None, BS, 0.0)), ("release", ([2, 1, 0], [], 0.0))]
    rest += [("arrived", (RequestView(f"q{i}", None, i, 0.0, BS, ()), 0.0)) for i in range(1, 6)]
    rest += [("evict", (4, 0.0))]
    assert _run(hooks, rest, True) == _run(comp, rest, False)
    for k in ("evictions", "evict_calls", "hook_calls", "pins_refused"):
        assert hooks.stats()[k] == comp.stats()[k], k
    assert comp.pins_refused == 2
    check_end_state(hooks, comp)


def test_a_refused_store_fixes_no_hash_length():
    # (nothing applied: a store refused for its block leaves the hash length open)
    rt = compiled_runtime(PolicyRuntime.for_policy("session_ttl", 8, BS, None, key_map=False))
    view = RequestView("r", "s0", 0, 0.0, BS, ())
    rt.arrived(view, 0.0)
    with pytest.raises(PolicyError, match="stored block 9: not a block of the pool"):
        rt.stored(view, [9], [bytes(16)], 0, None, BS, 0.0)
    rt.release([], [1, 2], 0.0)
    assert rt.evict(1, 0.0) == [1]
    rt.stored(view, [1], [_hash(1)], 0, None, BS, 0.0)  # 32 bytes: taken
    assert kernel_policy(rt)[0] == {int.from_bytes(_hash(1)): 8}


# ------------------------------------------------------------ differential fuzz
FBS = 4


def _mkhash(rng, mode, hb=32, base=None):
    if mode == "collide8":
        return rng.choice([b"\0" * 8, b"\xff" * 8]) + rng.randbytes(hb - 8)
    if mode == "oneword":  # equal to ``base`` but in one word
        w = rng.randrange(hb // 8)
        return base[:8 * w] + rng.choice([b"\0" * 8, b"\xff" * 8, rng.randbytes(8)]) + base[8 * w + 8:]
    return rng.randbytes(hb)


def fuzz(seed, steps=400, odd=False):
    """``odd``: also hashes of 8 to 32 bytes (or equal in all but one word), arrival indices that skip
    (beyond the calendar's window too), blocks vLLM cached that the runtime never heard stored, a hash twice
    in one store, session ids 0, "" and a tuple, pools from one block (drawn from a second generator:
    without ``odd`` the streams are as they were)."""
    rng = random.Random(seed)
    orng = random.Random(-1 - seed)
    nb = rng.randint(3, 40)
    if odd:
        nb = orng.randint(1, 40)
    ttl = rng.choice([1, 2, 3, 5, 8, 30])
    capf = rng.choice([0.0, 0.1, 0.3, 0.5, 1.0])
    mode = rng.choice(["rand", "collide8"])
    hb, base = 32, None
    if odd:
        hb = orng.choice([8, 16, 24, 32])
        mode = orng.choice(["rand", "collide8", "oneword"])
        base = orng.randbytes(hb)
    opts = {"ttl_arrivals": str(ttl), "pin_cap_fraction": str(capf)}
    hooks = PolicyRuntime.for_policy("session_ttl", nb, FBS, opts, key_map=False)
    maxs = rng.choice([None, None, 1, 2, 3])
    if maxs is not None:  # (a tiny max_sessions: the least recently active forgotten often)
        maxs = min(maxs, nb)
        next(iter(hooks.pm.get_plugins())).max_sessions = maxs
    comp = SessionTTLKernelRuntime(nb, FBS, ttl=ttl, pin_cap=hooks.pin_cap, max_sessions=maxs,
                                   edges=rng.choice([None, 1, 3]), order_cap=rng.choice([None, nb + 2, 2 * nb + 2]))
    cfg = dict(nb=nb, ttl=ttl, capf=capf, mode=mode, maxs=maxs, hb=hb)
    orig_stored = hooks.stored  # (the hash zero-padded to 32 bytes, as the kernels hold it: kernel_policy's keys)
    hooks.stored = lambda req, ids, keys, *a: orig_stored(req, ids, [int.from_bytes(k + bytes(32 - len(k)))
                                                                     for k in keys], *a)

    both = paired(hooks, comp, f"seed {seed} {cfg}")

    ref = [0] * nb
    bhash = [None] * nb
    hmap = {}
    both("release", [], list(range(nb)), 0.0)
    chains = [[_mkhash(rng, mode, hb, base) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 6))]
    sessions = [f"s{i}" for i in range(rng.randint(1, 6))] + [None]
    if odd:
        sessions += [0, "", (1, 2)]
    many = rng.random() < 0.5  # new sessions all the time: the session rows run out and the dead ones are reused
    running = []
    arrivals = 0
    t = 0.0
    for step in range(steps):
        t += 1.0
        r = rng.random()
        if r < 0.5:
            c = rng.choice(chains)
            L = rng.randint(1, len(c))
            chain = c[:L]
            partial = rng.random() < 0.5
            if many and rng.random() < 0.7:
                sessions.append(f"n{arrivals}")
            view = RequestView(f"r{arrivals}", rng.choice(sessions[-6:] + [None]), arrivals, t, L * FBS + partial, ())
            arrivals += orng.choice([1, 1, 1, 2, ttl, ttl + 1, 5000, 70000]) if odd else 1
            both("arrived", view, t)
            hits = []
            for h in chain:
                bl = hmap.get(h)
                if not bl or bl[0] in hits:  # (a hash twice in a chain: odd hashes)
                    break
                hits.append(bl[0])
            n_new = L - len(hits) + partial
            need = n_new + sum(1 for b in hits if ref[b] == 0)
            if need > sum(1 for x in ref if x == 0):
                both("finished", view, t)
                continue
            free_hits = [b for b in hits if ref[b] == 0]
            if free_hits:
                both("touch", free_hits)
            for b in hits:
                ref[b] += 1
            if hits or rng.random() < 0.5:
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
            full = victims[: L - len(hits)]
            ks = chain[len(hits):]
            if odd and len(ks) >= 2 and orng.random() < 0.1:
                ks = [ks[0], *ks[:-1]]  # a hash twice in one store
            cut = rng.randint(0, len(full)) if full else 0
            for part_ids, part_ks, first in ((full[:cut], ks[:cut], len(hits)), (full[cut:], ks[cut:], len(hits) + cut)):
                if part_ids:
                    for b, h in zip(part_ids, part_ks):
                        bhash[b] = h
                        hmap.setdefault(h, []).append(b)
                    if odd and orng.random() < 0.05:  # cached by vLLM, never heard stored (a prefix-cache reset)
                        continue
                    both("stored", view, list(part_ids), list(part_ks), first, None, FBS, t)
            running.append([view, hits + victims, partial])
        elif r < 0.65 and running:
            ent = rng.choice(running)
            view, blocks, partial = ent
            if partial and bhash[blocks[-1]] is None:
                b = blocks[-1]
                h = _mkhash(rng, mode, hb, base) if rng.random() < 0.8 else rng.choice(rng.choice(chains))
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
        elif running:
            ent = running.pop(rng.randrange(len(running)))
            view, blocks, _ = ent
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
            raise AssertionError(f"seed {seed} {cfg}: free sets differ at step {step}")
    sa, sb = hooks.stats(), comp.stats()
    for k in ("evictions", "evict_calls", "hook_calls", "pins_refused"):
        if sa[k] != sb[k]:
            raise AssertionError(f"seed {seed} {cfg}: {k} {sa[k]} vs {sb[k]}")
    check_end_state(hooks, comp)
    return sa["evictions"], sa["pins_refused"], comp._snext == len(comp.s["S"]) and len(comp._sids) < arrivals


SEEDS = int(os.environ.get("SPFCORE_FUZZ_SEEDS", "400"))


@pytest.mark.parametrize("chunk", range(4))
def test_compiled_session_ttl_equals_the_hooks_on_random_pool_streams(chunk):
    res = [fuzz(s) for s in range(chunk, SEEDS, 4)]
    assert sum(e for e, _, _ in res) > 0 and sum(p for _, p, _ in res) > 0  # the streams evict and refuse pins
    assert any(w for _, _, w in res)  # and every session row was named, dead ones reused


@pytest.mark.parametrize("chunk", range(2))
def test_compiled_session_ttl_equals_the_hooks_on_odd_streams(chunk):
    res = [fuzz(s, odd=True) for s in range(chunk, SEEDS // 2, 2)]
    assert sum(e for e, _, _ in res) > 0 and sum(p for _, p, _ in res) > 0

@pytest.mark.engine
def test_engine_session_ttl_compiled_equals_hooks_and_simulator():
    pytest.importorskip("vllm")
    from spfcore.engine.runner import EngineSpec, open_engine

    wl = make("personas", seed=0, personas=3, prefix_tokens=512, sessions=6, turns=3, query_tokens=32, output_tokens=8)
    nb = 40
    opts = {"ttl_arrivals": "4"}
    sim = simulate(prepare(wl, 32), "session_ttl", num_blocks=nb, block_size=32, options=opts)
    spec = EngineSpec(model="tiny", block_size=32, num_blocks=nb, max_num_seqs=4, dtype="float32")
    with open_engine(spec, "session_ttl", opts) as s:
        comp = s.run(wl, seed=0, keep_outputs=True)
        assert isinstance(s.runtime, SessionTTLKernelRuntime)
        s.use_policy("session_ttl", opts, compiled=False)
        hooks = s.run(wl, seed=0, keep_outputs=True)
        assert isinstance(s.runtime, PolicyRuntime)
    assert (comp["served_by"], hooks["served_by"]) == ("compiled", "hooks")
    cached = [r["cached_tokens"] for r in comp["requests"]]
    assert cached == [r["cached_tokens"] for r in hooks["requests"]] == [r["cached_tokens"] for r in sim["requests"]]
    assert sum(cached) > 0 and cached.count(0) >= 3
    assert comp["evictions"] == hooks["evictions"] == sim["evictions"] > 0
    assert comp["evict_calls"] == hooks["evict_calls"] and comp["hook_calls"] == hooks["hook_calls"]
    assert [r["output_token_ids"] for r in comp["requests"]] == [r["output_token_ids"] for r in hooks["requests"]]
    assert comp["policy_faults"] == hooks["policy_faults"] == 0
    assert comp["hook_seconds"] == 0.0 < comp["policy_seconds"]


def test_served_metrics_count_the_compiled_runtimes_refused_pins():
    # spfcore serve publishes the runtime's counters each step; this runtime has no evictor but refuses pins
    pytest.importorskip("prometheus_client")
    from spfcore.engine.metrics import PolicyMetrics

    rt = compiled_runtime(PolicyRuntime.for_policy("session_ttl", 8, BS, {"pin_cap_fraction": "0.125"},
                                                   key_map=False))
    v = RequestView("r", "s", 0, 0.0, 2 * BS, ())
    rt.arrived(v, 0.0)
    rt.release([], [1, 2, 3], 0.0)
    assert rt.evict(2, 0.0) == [1, 2]
    rt.stored(v, [1, 2], [_hash(1), _hash(2)], 0, None, BS, 0.0)
    rt.release([2, 1], [], 0.0)  # both pinned wanted, the cap (1) refuses one
    assert rt.pins_refused == 1 and rt.num_pinned == 1
    m = PolicyMetrics("session-ttl-compiled-test", "spfcore-session-ttl", "0")
    m.publish(rt)
    assert m._last[3] == 1 and m._last[2] == rt.policy_seconds > 0
