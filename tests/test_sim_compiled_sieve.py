"""The compiled replay of the classic ``sieve`` arm (spfcore.sim._replay_sieve_nb) against the
reference loop (_run_sequential through PolicyRuntime, the policy-ordered evictor and
spfcore_classic.sieve.Sieve's hooks): every field of the cell (hook_calls, evictions,
evict_calls included), every per-request record and the victim sequence, on generated
workloads, random ones with caches of a few blocks (walks past blocks in use and parents,
the copies exception of a hash cached twice, lookups that find a block twice), chunked
replay with key compaction, a prepared stream and the Mooncake trace's head.

The helpers take the arm's name, so that other classic arms' tests reuse them."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, event, given, settings

from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare
from spfcore.sim import simulator
from spfcore.workloads.generators import make
from spfcore.workloads.model import Request, Workload
from spfcore.workloads.traces import read_mooncake
from tests.test_sim_compiled import (TRACE, assert_same, assert_same_flat, chunked_replay, compiled, flat_workload,
                                     hash_id_workload, personas_reference, random_workload, reference, strip)

ARM = "sieve"
KIND = "sieve"
GENERATED = [
    ("personas", dict(personas=4, prefix_tokens=512, sessions=8, turns=3, query_tokens=32, output_tokens=8), 16, 1.2),
    ("multiturn", {}, 16, 2.0),  # output tokens defined: decode blocks hit later turns
    ("mix", {}, 16, 2.3),
    ("revisit", dict(sessions=4, prefix_tokens=256, noise_tokens=256, query_tokens=16, output_tokens=20), 8, 3.0),
]
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@contextlib.contextmanager
def copies_counted(monkeypatch, kind: str):
    """Counts of the copies exception: ``out["ref"]`` calls of the plugin's
    ``ClassicPolicy._victim_among_copies``, ``out["nb"]`` the kernel's
    ``COPIES`` counter summed over its runs (module of ``kind``)."""
    import importlib

    from spfcore_classic._base import ClassicPolicy

    mod = importlib.import_module(simulator._KERNEL_KINDS[kind])
    out = {"ref": 0, "nb": 0}
    among, run = ClassicPolicy._victim_among_copies, mod.run

    def counted(self):
        out["ref"] += 1
        return among(self)

    def counted_run(st, *a, **k):
        before = int(st["c"][mod.COPIES])
        status = run(st, *a, **k)
        out["nb"] += int(st["c"][mod.COPIES]) - before
        return status
    with monkeypatch.context() as m:
        m.setattr(ClassicPolicy, "_victim_among_copies", counted)
        m.setattr(mod, "run", counted_run)
        yield out


def generated_case(name, flags, bs, pressure):
    wl = make(name, seed=3, **flags)
    prep = prepare(wl, bs)
    distinct = len({k for v in prep.views for k in v.block_keys})
    return wl, prep, max(max(prep.blocks_needed) + 1, int(distinct / pressure))


def check_generated(monkeypatch, arm, options, name, flags, bs, pressure):
    """assert_same on a generated workload; the victims are not lru's (the kernel decides)."""
    wl, prep, nb = generated_case(name, flags, bs, pressure)
    ref = assert_same(monkeypatch, wl, nb, bs, arm, options)
    assert ref["evictions"] > 0 and ref["hit_blocks"] > 0
    return ref


def victims_differ_from_lru(monkeypatch, arm, options=None):
    """On some generated workload the arm's victims (and the hooks' equal them) are not lru's."""
    for case in GENERATED:
        wl, prep, nb = generated_case(*case)
        _, ours = compiled(monkeypatch, prep, nb, case[2], arm, options=options)
        _, lru = compiled(monkeypatch, prep, nb, case[2], "lru")
        if ours != lru:
            return True
    return False


def check_random(monkeypatch, case, arm, options=None):
    wl, bs, extra, *_ = case
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    with copies_counted(monkeypatch, _kind(arm)) as n:
        ref = assert_same(monkeypatch, wl, nb, bs, arm, options)
    assert n["nb"] == 3 * n["ref"]  # the kernel ran three times (simulate twice, the stream) per reference run
    event(f"copies exception: {bool(n['ref'])}; evictions: {bool(ref['evictions'])}")


def _kind(arm: str) -> str:
    return {"sieve": "sieve", "twoq": "twoq"}[arm]


def check_flat(monkeypatch, case, arm, options=None):
    """assert_same_flat (the same cell and victims, or the same KeyError of a lookup that finds
    a block twice), or the same PolicyError where the plugin finds no evictable block at all
    (flat keys: a key can be its own parent, so every free block may be a parent)."""
    from spfcore.runtime import PolicyError

    wl, bs, extra, _ = case
    with copies_counted(monkeypatch, _kind(arm)) as n:
        try:
            ref = assert_same_flat(monkeypatch, wl, bs, extra, options, arm=arm)
        except PolicyError as exc:
            assert "NoEvictable" in str(exc)
            with pytest.raises(PolicyError) as got:
                compiled(monkeypatch, prepare(wl, bs), max(prepare(wl, bs).blocks_needed) + 1 + extra, bs, arm,
                         options=options)
            assert str(got.value) == str(exc)
            event("no evictable block")
            return
    if ref is not None:
        assert n["nb"] == n["ref"]
    event("a lookup finds a block twice" if ref is None else f"copies exception: {bool(n['ref'])}")


#: A random workload (found by search) whose reference run reaches the copies exception:
#: ``([(prompt tokens, output tokens, output token ids)] per request, block size, blocks spare)``.
COPIES_CASE = ([((1, 0), 3, ()), ((0, 0), 3, ()), ((1,), 3, (0, 0, 1)), ((1, 0, 1, 1), 4, (0, 1, 0, 0))], 2, 0)


def copies_workload():
    reqs = [Request(f"r{i}", 0.0, tuple(p), o, session_id=f"s{i % 3}", output_token_ids=tuple(outs))
            for i, (p, o, outs) in enumerate(COPIES_CASE[0])]
    return Workload("copies", {}, reqs), COPIES_CASE[1], COPIES_CASE[2]


def check_copies(monkeypatch, arm, options=None):
    """The copies exception is reached by the hooks, and the kernel takes it as often, with the
    same cell and victims."""
    wl, bs, extra = copies_workload()
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    with copies_counted(monkeypatch, _kind(arm)) as n:
        assert_same(monkeypatch, wl, nb, bs, arm, options)
    assert n["ref"] > 0 and n["nb"] == 3 * n["ref"]


def check_chunked(monkeypatch, arm, kind, options=None):
    wl, bs, nb, ref, ref_victims = personas_reference(monkeypatch, arm, options)
    assert ref["hit_blocks"] > 100 and ref["evictions"] > 100
    kept, rt = chunked_replay(monkeypatch, wl, bs, nb, arm, kind, options, ref, ref_victims)
    assert simulator._compiled_kind(rt) == kind
    assert len(kept) > 10 and any(new < old for old, new, _ in kept)  # keys were forgotten
    assert all(new <= nb - 1 + cap + 64 for _, new, cap in kept)  # bounded by the cache (and the ghosts)
    return kept


def check_prepared_stream(monkeypatch, tmp_path, arm, options=None):
    from spfcore.sim.prepared import open_prepared, write_prepared

    wl = make("multiturn", seed=5)
    bs = 16
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 200  # (+40: no hits under lru, sieve or twoq)
    ref, ref_victims = reference(monkeypatch, prep, nb, bs, arm, options)
    assert ref["evictions"] > 0 and ref["hit_blocks"] > 0
    write_prepared(wl.requests, bs, tmp_path / "p")
    got, got_victims = compiled(monkeypatch, prep, nb, bs, arm, stream=open_prepared(tmp_path / "p"),
                                options=options)
    assert strip(got) == strip(ref)
    assert got_victims == ref_victims


def check_trace_head(monkeypatch, arm, options=None):
    wl = read_mooncake(TRACE, limit=1500)
    ref = assert_same(monkeypatch, wl, 700, 512, arm, options)
    assert ref["evictions"] > 10_000 and 0 < ref["block_hit_rate"] < 1  # a cache under pressure


def check_too_big(monkeypatch, arm):
    """A streamed request that does not fit raises when reached, as the reference loop does."""
    from spfcore.sim import simulate_stream

    reqs = [Request("a", 0.0, (1, 2, 3, 4), 1, session_id="s"), Request("big", 0.0, tuple(range(40)), 4)]
    for mode in ("python", "auto"):
        monkeypatch.setenv(simulator.REPLAY_ENV, mode)
        with pytest.raises(ValueError, match="request big needs 11 blocks of 4 tokens but the cache has 5 usable"):
            simulate_stream(reqs, arm, num_blocks=6, block_size=4)


# ------------------------------------------------------------------ sieve
@pytest.mark.parametrize("name,flags,bs,pressure", GENERATED, ids=[g[0] for g in GENERATED])
def test_generated_identical(monkeypatch, name, flags, bs, pressure):
    check_generated(monkeypatch, ARM, None, name, flags, bs, pressure)


def test_victims_are_not_lrus(monkeypatch):
    assert victims_differ_from_lru(monkeypatch, ARM)


@settings(max_examples=200, **SETTINGS)
@given(random_workload())
def test_random_identical(monkeypatch, case):
    check_random(monkeypatch, case, ARM)


@settings(max_examples=100, **SETTINGS)
@given(hash_id_workload())
def test_random_hash_ids_identical(monkeypatch, case):
    check_random(monkeypatch, case, ARM)


@settings(max_examples=200, **SETTINGS)
@given(flat_workload())
def test_keys_repeated_within_a_prompt(monkeypatch, case):
    """Keys that repeat within a prompt (duplicate blocks, the copies exception) or a lookup
    that finds a block twice (the same KeyError as the reference loop's touch)."""
    check_flat(monkeypatch, case, ARM)


def test_copies_exception_identical(monkeypatch):
    check_copies(monkeypatch, ARM)


def test_chunks_and_forgotten_keys_identical(monkeypatch):
    check_chunked(monkeypatch, ARM, KIND)


def test_prepared_stream_identical(monkeypatch, tmp_path):
    check_prepared_stream(monkeypatch, tmp_path, ARM)


@pytest.mark.skipif(not TRACE.exists(), reason="Mooncake trace not present")
def test_trace_head_identical(monkeypatch):
    check_trace_head(monkeypatch, ARM)


def test_request_too_big_for_the_stream(monkeypatch):
    check_too_big(monkeypatch, ARM)


def test_which_policies_compile(monkeypatch):
    from spfcore import registry
    from spfcore_classic.sieve import Sieve

    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    assert simulator._compiled_kind(PolicyRuntime.for_policy(ARM, 16, 4)) == KIND

    class Subclass(Sieve):  # another policy built on it: its own decisions, the Python loop
        pass
    pm = registry.new_plugin_manager()
    pm.register(Subclass(), name="sub")
    assert simulator._compiled_kind(PolicyRuntime(pm, 16, 4, policy_name="sub")) is None
    assert simulator._compiled_kind(PolicyRuntime.for_policy(ARM, 16, 4, hook_budget_ms=60_000)) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "python")
    assert simulator._compiled_kind(PolicyRuntime.for_policy(ARM, 16, 4)) is None
