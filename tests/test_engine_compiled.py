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
import time

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
    live = s["T"][s["T"][:, 1] > 0, 1] - 1  # (the table holds key id + 1; 0: empty)
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
    live = int((comp.s["T"][:, 1] > 0).sum())
    cached = {k for k in hooks.table.key if k is not None}  # the hashes cached blocks hold
    assert live == len(pol.count.keys() | pol.ghost.keys() | cached)  # a key id per cached, counted or ghost hash
    assert (comp.s["BL"][:, 0] >= 0).sum() == sum(k is not None for k in hooks.table.key)


def test_protocol_breaks_raise_and_apply_nothing():
    from spfcore.engine._frequency_nb import EPOCH, MARK

    rt = compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None, key_map=False))
    view = RequestView("r", None, 0, 0.0, 3 * BS, ())
    rt.release([], [1, 2, 3, 4, 5, 6, 7], 0.0)
    assert rt.evict(3, 0.0) == [1, 2, 3] and rt.num_free == 4
    rt.stored(view, [1, 2], [_hash(1), _hash(2)], 0, None, BS, 0.0)

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
        rt.stored(view, [3, 2], [_hash(3), _hash(9)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="stored block 3: holds a block hash already, or named twice"):
        rt.stored(view, [3, 3], [_hash(3), _hash(9)], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match="need one length of 8, 16, 24 or 32 bytes"):
        rt.stored(view, [3], [b"short"], 0, None, BS, 0.0)
    with pytest.raises(PolicyError, match=r"\(32 here\)"):
        rt.stored(view, [3, 4], [_hash(3)[:16], _hash(4) + b"x" * 16], 0, None, BS, 0.0)  # 16 + 48 bytes
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
            rt.stored(view, [bad], [_hash(5)], 0, None, BS, 0.0)
        with pytest.raises(PolicyError, match=f"hit block {bad}: outside the pool"):
            rt.hit(view, [1, bad], 0.0)
        with pytest.raises(KeyError):
            rt.touch([bad])
    assert unchanged()
    rt.release([2, 1], [3], 0.0)  # the request ends: counts 1 < min_count 2, not admitted
    assert rt.num_free == 7
    assert rt.evict(5, 0.0) == [3, 4, 5, 6, 7]  # hashless first, hashless[0] on top
    assert rt.evict(2, 0.0) == [2, 1]  # equal counts: release order
    assert rt.evictions == 2 and _state(rt, _hash(1)) == (0, 1)  # its ghost count kept
    rt.release([], [1, 2], 0.0)
    with pytest.raises(KeyError):
        rt.touch([1, 1])  # (hashless, and named twice)


def _both(ops, buckets=None):
    """Run ``ops`` (``(event, args)``) on the hook runtime and the compiled one; their answers."""
    hooks = PolicyRuntime.for_policy("frequency", 10, BS, None, key_map=False)
    comp = compiled_runtime(PolicyRuntime.for_policy("frequency", 10, BS, None, key_map=False))
    out = []
    for rt, raw in ((hooks, False), (comp, True)):
        ans = []
        for name, args in ops:
            a = list(args)
            if name == "stored" and not raw:
                a[2] = [int.from_bytes(h) for h in a[2]]
            ans.append(getattr(rt, name)(*a))
        out.append((ans, rt.stats()))
    return out


def test_blocks_the_runtime_never_heard_stored_count_as_the_hooks_none_key():
    # After a prefix-cache reset with requests in flight, vLLM caches their blocks without a stored event: the
    # adapter then releases blocks "cached" that the runtime holds no key for. The hooks score them by the key
    # None (count.get(None, 1)) and count their hits under None; so does the compiled runtime.
    v = RequestView("r", None, 0, 0.0, BS, ())
    ops = [("release", ([], list(range(1, 10)), 0.0)), ("evict", (4, 0.0)),
           ("stored", (v, [1], [_hash(1)], 0, None, BS, 0.0)),
           ("release", ([1, 2, 3], [4], 0.0)),  # 2 and 3: cached in vLLM, unknown here
           ("touch", ([2],)), ("hit", (v, [2], 0.0)), ("touch", ([1],)), ("hit", (v, [1], 0.0)),
           ("release", ([2, 1], [], 0.0)),  # None's count is 1 + 1, key 1's 2
           ("evict", (9, 0.0))]
    (a, sa), (b, sb) = _both(ops)
    assert a == b and a[-1][-3:] == [3, 2, 1]  # 3 (count 1) first, then release order among count 2
    assert sa["evictions"] == sb["evictions"] == 1 and sa["hook_calls"] == sb["hook_calls"]


def test_xxhash_length_hashes_decide_as_the_hooks(monkeypatch):
    # vLLM's xxhash algorithms give 16-byte block hashes: zero-padded, every bit still compared
    log, _ = record(monkeypatch, make("zipf", seed=1, personas=8, prefix_tokens=1024), 300, None)
    short = [(n, [a[0], a[1], [h[:16] for h in a[2]], *a[3:]] if n == "stored" else a) for n, a in log]
    hooks = PolicyRuntime.for_policy("frequency", 300, BS, None, key_map=False)
    comp = compiled_runtime(PolicyRuntime.for_policy("frequency", 300, BS, None, key_map=False))
    va, vb = replay(short, hooks, raw=False), replay(short, comp, raw=True)
    assert va == vb and hooks.evictions == comp.evictions > 0 and comp._hash_bytes == 16


def test_memory_is_committed_as_used_and_a_huge_ghost_factor_runs_the_hooks():
    from spfcore.engine import _frequency_nb as nb

    big = nb.state_bytes(300_000, 4 * 300_000)
    t = time.perf_counter()
    rt = FrequencyKernelRuntime(300_000, BS, min_count=2, ghost_cap=4 * 300_000)
    assert rt.num_free == 0 and big > 200 * 2**20  # (~275 MiB reserved: zero pages, committed as used)
    print(f"300,000 blocks: {big / 2**20:.0f} MiB reserved, built in {time.perf_counter() - t:.2f} s")
    huge = PolicyRuntime.for_policy("frequency", 40, BS, {"ghost_factor": str(10**9)}, key_map=False)
    assert compiled_runtime(huge) is None  # 4e10 ghosts would be reserved up front: the hooks grow with use


def test_only_the_shipped_class_with_plain_params_is_compiled():
    assert compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None)) is not None
    assert compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None, hook_budget_ms=5.0)) is None
    assert compiled_runtime(PolicyRuntime.for_policy("lru", 8, BS, None)) is None  # (vLLM's own queue serves lru)
    for arm in ("frequency", "session_ttl", "belady_oracle", "spf_expected_utility"):  # every shipped plugin arm
        assert compiled_runtime(PolicyRuntime.for_policy(arm, 8, BS, None)) is not None, arm
    from spfcore.sim.replay import record_runtime_calls

    with record_runtime_calls():  # the record is PolicyRuntime's calls: the hooks serve while it records
        assert compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None)) is None
    assert compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None)) is not None


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


def test_served_metrics_publish_a_compiled_runtime():
    # spfcore serve turns metrics on: each step publishes the runtime's counters (a compiled one has no evictor)
    pytest.importorskip("prometheus_client")
    from spfcore.engine.metrics import PolicyMetrics

    rt = compiled_runtime(PolicyRuntime.for_policy("frequency", 8, BS, None, key_map=False))
    rt.release([], [1, 2, 3], 0.0)
    rt.stored(RequestView("r", None, 0, 0.0, BS, ()), [3], [_hash(3)], 0, None, BS, 0.0)  # (not free: no check)
    m = PolicyMetrics("frequency-compiled-test", "spfcore-frequency", "0")
    m.publish(rt)
    assert m._last[0] == rt.evictions == 0 and m._last[2] == rt.policy_seconds > 0
