"""The compiled engine runtime (spfcore.engine.compiled) decides as the hooks do.

Stream tests: the simulator's reference loop (``SPFCORE_SIM_REPLAY=python``)
drives a ``PolicyRuntime`` over ``frequency``; every runtime call is recorded
and replayed into a fresh hook runtime (keys as ``vllm_keys`` makes them) and
into :class:`FrequencyKernelRuntime` (the 32-byte hashes themselves): every
allocation's victims, the counters and the policy's end state must agree.
The engine test runs the real vLLM CPU engine with both and with the simulator.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import pytest

from spfcore.engine.compiled import FrequencyKernelRuntime, compiled_runtime
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.views import RequestView
from spfcore.workloads.generators import make

EVENTS = ("arrived", "hit", "touch", "evict", "stored", "finished", "release")
BS = 16


def _hash(k) -> bytes:
    """A vLLM-like 32-byte block hash of a simulator key."""
    return hashlib.sha256(repr(k).encode()).digest()


def record(monkeypatch, workload, num_blocks, options):
    """Every runtime call of the simulator's reference loop over ``frequency``,
    as ``(event, args)``; stored keys as 32-byte hashes."""
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
    rec = simulate(prepare(workload, BS), "frequency", num_blocks=num_blocks, block_size=BS, options=options)
    monkeypatch.undo()
    return log, rec


def replay(log, rt, raw: bool) -> list:
    """Feed ``log`` to ``rt``; the victims of each allocation."""
    out = []
    for name, a in log:
        if name == "stored" and not raw:
            a = list(a)
            a[2] = [int.from_bytes(h) for h in a[2]]  # vllm_keys
        r = getattr(rt, name)(*a)
        if name == "evict":
            out.append(r)
    return out


def _state(rt: FrequencyKernelRuntime, h: bytes) -> tuple[int, int]:
    """(count, ghost count) of hash ``h`` in the compiled state, (0, 0) if not interned."""
    from spfcore.engine._frequency_nb import CNT, GV
    s = rt.s
    w = np.frombuffer(h, np.int64)
    live = s["T"][s["T"][:, 1] >= 0, 1]
    hit = live[(s["R"][live, :4] == w).all(axis=1)]
    return (int(s["R"][hit[0], CNT]), int(s["R"][hit[0], GV])) if hit.size else (0, 0)


PERSONAS = dict(seed=42, personas=4, prefix_tokens=2048, sessions=8, turns=4)
CASES = [  # (workload, num_blocks, options): hits and ghost counts coming back, a binding ghost cap, none, min_count
    (("personas", PERSONAS), 600, {"ghost_factor": "1"}),
    (("personas", PERSONAS), 600, {"ghost_factor": "0"}),
    (("personas", PERSONAS), 450, None),
    (("zipf", dict(seed=1, personas=8, prefix_tokens=1024)), 300, {"min_count": "3"}),
    (("zipf", dict(seed=1, personas=8, prefix_tokens=1024)), 300, {"ghost_factor": "1"}),  # the ring compacts
    (("multiturn", dict(seed=3)), 120, {"min_count": "1", "ghost_factor": "2"}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][0]}-{c[1]}-{c[2]}")
def test_compiled_frequency_takes_the_hooks_victims(monkeypatch, case):
    (kind, kw), nb, opts = case
    log, rec = record(monkeypatch, make(kind, **kw), nb, opts)
    hooks = PolicyRuntime.for_policy("frequency", nb, BS, opts, key_map=False)
    comp = compiled_runtime(PolicyRuntime.for_policy("frequency", nb, BS, opts, key_map=False))
    assert isinstance(comp, FrequencyKernelRuntime)
    p = comp.s  # counts >= 2 in the heap, 1 in its bucket: both parts of the order and the hand-over between them
    mixed = FrequencyKernelRuntime(nb, BS, min_count=int(p["min_count"]), ghost_cap=int(p["ghost_cap"]), buckets=2)
    va, vb = replay(log, hooks, raw=False), replay(log, comp, raw=True)
    assert len(va) == sum(1 for n, _ in log if n == "evict") > 10
    assert va == vb == replay(log, mixed, raw=True)  # every allocation: the same victims, in the same order
    sa, sb = hooks.stats(), comp.stats()
    assert sa["evictions"] == sb["evictions"] == rec["evictions"] > 0
    assert sa["evict_calls"] == sb["evict_calls"]
    assert sa["hook_calls"] == sb["hook_calls"]  # the hook calls the hook path made, counted alike
    assert sorted(hooks.free_ids()) == sorted(comp.free_ids()) and hooks.num_free == comp.num_free
    pol = next(iter(hooks.pm.get_plugins()))
    hashes = {int.from_bytes(h): h for n, a in log if n == "stored" for h in a[2]}
    for k, h in hashes.items():  # the policy's end state: every count and ghost count
        assert _state(comp, h) == (pol.count.get(k, 0), pol.ghost.get(k, 0)), k
    live = int((comp.s["T"][:, 1] >= 0).sum())
    cached = {k for k in hooks.table.key if k is not None}  # the hashes cached blocks hold
    assert live == len(pol.count.keys() | pol.ghost.keys() | cached)  # a key id per cached, counted or ghost hash
    assert (comp.s["BL"][:, 0] >= 0).sum() == sum(k is not None for k in hooks.table.key)


def test_protocol_breaks_raise_and_apply_nothing():
    rt = compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None, key_map=False))
    view = RequestView("r", None, 0, 0.0, 3 * BS, ())
    rt.release([], [1, 2, 3, 4, 5, 6, 7], 0.0)
    assert rt.evict(3, 0.0) == [1, 2, 3] and rt.num_free == 4
    rt.stored(view, [1, 2], [_hash(1), _hash(2)], 0, None, BS, 0.0)
    before = {k: v.copy() for k, v in rt.s.items() if isinstance(v, np.ndarray)}

    def unchanged():
        return all(np.array_equal(before[k], rt.s[k]) for k in before)

    with pytest.raises(PolicyError, match="released block 4: free already"):
        rt.release([1], [4], 0.0)
    assert unchanged()
    with pytest.raises(PolicyError, match="released block 3: free already, or cached without a block hash"):
        rt.release([3], [], 0.0)  # cached, but it holds no hash
    with pytest.raises(PolicyError, match="stored block 2 holds a block hash already"):
        rt.stored(view, [3, 2], [_hash(3), _hash(9)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="need 32 bytes a block"):
        rt.stored(view, [3], [b"short"], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="hit block 3 holds no block hash"):
        rt.hit(view, [1, 3], 0.0)
    with pytest.raises(KeyError):
        rt.touch([1])  # held, not free
    with pytest.raises(ValueError, match="asked for 5, 4 free"):
        rt.evict(5, 0.0)
    assert unchanged()
    rt.release([2, 1], [3], 0.0)  # the request ends: both admitted? counts 1 < min_count 2: not admitted
    assert rt.num_free == 7
    assert rt.evict(5, 0.0) == [3, 4, 5, 6, 7]  # hashless first, hashless[0] on top
    assert rt.evict(2, 0.0) == [2, 1]  # equal counts: release order
    assert rt.evictions == 2 and _state(rt, _hash(1)) == (0, 1)  # its ghost count kept


def test_only_the_shipped_class_with_plain_params_is_compiled():
    assert compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None)) is not None
    assert compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None, hook_budget_ms=5.0)) is None
    for arm in ("lru", "session_ttl", "spf_expected_utility"):
        assert compiled_runtime(PolicyRuntime.for_policy(arm, 8, BS, None)) is None


@pytest.mark.engine
def test_engine_frequency_compiled_equals_hooks_and_simulator():
    pytest.importorskip("vllm")
    from spfcore.engine.runner import EngineSpec, open_engine

    wl = make("personas", seed=0, personas=3, prefix_tokens=512, sessions=6, turns=3, query_tokens=32, output_tokens=8)
    nb = 40  # 39 usable blocks of 32 tokens: three 16-block prefixes do not fit
    sim = simulate(prepare(wl, 32), "frequency", num_blocks=nb, block_size=32)
    spec = EngineSpec(model="tiny", block_size=32, num_blocks=nb, max_num_seqs=4, dtype="float32")
    with open_engine(spec, "frequency") as s:
        comp = s.run(wl, seed=0, keep_outputs=True)
        assert isinstance(s.runtime, FrequencyKernelRuntime)
        s.use_policy("frequency", compiled=False)
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
