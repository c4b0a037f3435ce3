"""The compiled replay of the classic ``gdsf`` arm (spfcore.sim._replay_gdsf_nb) against the
reference loop (_run_sequential through PolicyRuntime and spfcore_classic.gdsf.GDSF's hooks):
every field of the cell (hook_calls included), every per-request record and the victim sequence,
on generated workloads, random workloads with tiny caches (the lowest entries in use or parents,
passed over; the copies exception), chunked replay with key compaction, a prepared stream and
the head of the Mooncake trace. GDSF has no parameters."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare, simulator
from spfcore.workloads.generators import make
from spfcore.workloads.model import Request, Workload
from spfcore.workloads.traces import read_mooncake
from tests.test_sim_compiled import TRACE, chunked_replay, compiled, personas_reference, reference, strip
from tests.test_sim_compiled_s3fifo import seeded_workload

nb_mod = pytest.importorskip("spfcore.sim._replay_gdsf_nb")
pytest.importorskip("spfcore_classic.gdsf")

ARM = "gdsf"


@pytest.fixture
def counters(monkeypatch):
    """The compiled replay's counters after each kernel call (copies exception, entries passed over)."""
    seen = []
    run = nb_mod.run

    def recording(st_, *a, **k):
        out = run(st_, *a, **k)
        seen.append((int(st_["c"][nb_mod.COPIES]), int(st_["c"][nb_mod.PASSED])))
        return out
    monkeypatch.setattr(nb_mod, "run", recording)
    return seen


def same(monkeypatch, wl, nb: int, bs: int, stream: bool = True) -> tuple[dict, list]:
    """Compiled vs hooks on ``wl``: the same cell and victims (simulate on the Prepared, again with
    its interned arrays kept, and simulate_stream); returns the reference's."""
    prep = prepare(wl, bs)
    ref, ref_victims = reference(monkeypatch, prep, nb, bs, ARM)
    got, got_victims = compiled(monkeypatch, prep, nb, bs, ARM)
    assert strip(got) == strip(ref)
    assert got_victims == ref_victims
    again, _ = compiled(monkeypatch, prep, nb, bs, ARM)
    assert strip(again) == strip(ref)
    if stream:
        s, s_victims = compiled(monkeypatch, prep, nb, bs, ARM, stream=wl.requests)
        assert strip(s) == strip(ref)
        assert s_victims == ref_victims
    return ref, ref_victims


@pytest.mark.skipif(not TRACE.exists(), reason="Mooncake trace not present")
def test_trace_head_identical(monkeypatch, counters):
    wl = read_mooncake(TRACE, limit=1500)
    ref, victims = same(monkeypatch, wl, 700, 512)
    assert ref["evictions"] > 10_000 and 0 < ref["block_hit_rate"] < 1
    _, lru_victims = reference(monkeypatch, prepare(wl, 512), 700, 512, "lru")
    assert victims != lru_victims  # its own decisions, not the free queue's


@pytest.mark.parametrize("name,flags,bs,pressure", [
    ("personas", dict(personas=4, prefix_tokens=512, sessions=8, turns=3, query_tokens=32, output_tokens=8), 16, 1.2),
    ("multiturn", {}, 16, 2.0),
    ("mix", {}, 16, 2.3),
    ("revisit", dict(sessions=4, prefix_tokens=256, noise_tokens=256, query_tokens=16, output_tokens=20), 8, 3.0),
])
def test_generated_identical(monkeypatch, name, flags, bs, pressure):
    wl = make(name, seed=3, **flags)
    prep = prepare(wl, bs)
    distinct = len({k for v in prep.views for k in v.block_keys})
    nb = max(max(prep.blocks_needed) + 1, int(distinct / pressure))
    ref, victims = same(monkeypatch, wl, nb, bs)
    assert ref["evictions"] > 0 and ref["hit_blocks"] > 0


@st.composite
def random_workload(draw):
    """Token requests over a 2-token vocabulary (long shared prefixes, duplicate hashes from the
    last-token rule), outputs defined or not, a cache a few blocks above the largest request."""
    bs = draw(st.sampled_from([1, 2, 4]))
    reqs = []
    for i in range(draw(st.integers(1, 24))):
        prompt = draw(st.lists(st.integers(0, 1), min_size=1, max_size=14))
        out = draw(st.integers(1, 6))
        outs = draw(st.one_of(st.just(()), st.lists(st.integers(0, 1), min_size=out, max_size=out).map(tuple)))
        reqs.append(Request(f"r{i}", 0.0, tuple(prompt), out, session_id=f"s{i % 3}", output_token_ids=outs))
    return Workload("random", {}, reqs), bs, draw(st.integers(0, 5))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(random_workload())
def test_random_identical(monkeypatch, counters, case):
    wl, bs, extra = case
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    counters.clear()
    same(monkeypatch, wl, nb, bs, stream=False)
    if counters and counters[-1][0]:
        event("copies exception")
    if counters and counters[-1][1]:
        event("entries passed over")


def test_copies_exception_identical(monkeypatch, counters):
    """Tiny caches where no free block is a leaf (a hash cached twice: _victim_among_copies):
    reached on both sides, the same decisions."""
    from spfcore_classic._base import ClassicPolicy

    calls = []
    orig = ClassicPolicy._victim_among_copies

    def recording(self):
        calls.append(1)
        return orig(self)
    monkeypatch.setattr(ClassicPolicy, "_victim_among_copies", recording)
    reached = 0
    for seed in range(150):
        wl, bs, nb = seeded_workload(seed)
        counters.clear()
        calls.clear()
        same(monkeypatch, wl, nb, bs, stream=False)
        got = max(c for c, _ in counters)
        assert (got > 0) == bool(calls)
        reached += got > 0
    assert reached >= 2


def test_chunks_and_forgotten_keys_identical(monkeypatch):
    """Streamed in chunks of 5 requests with the interned keys compacted after each chunk:
    parents survive the renumbering, keys no longer named are forgotten."""
    wl, bs, nb, ref, ref_victims = personas_reference(monkeypatch, ARM, None)
    assert ref["hit_blocks"] > 10 and ref["evictions"] > 100
    kept, rt = chunked_replay(monkeypatch, wl, bs, nb, ARM, ARM, None, ref, ref_victims)
    assert simulator._compiled_kind(rt) == ARM
    assert len(kept) > 10 and any(new < old for old, new, _ in kept)
    assert kept[0][2] == 0  # no ghost


def test_prepared_stream_identical(monkeypatch, tmp_path):
    from spfcore.sim.prepared import open_prepared, write_prepared

    wl, bs, nb, ref, _ = personas_reference(monkeypatch, ARM, None)
    prep = prepare(wl, bs)
    assert ref["evictions"] > 0 and ref["hit_blocks"] > 0
    write_prepared(wl.requests, bs, tmp_path / "p")
    got, _ = compiled(monkeypatch, prep, nb, bs, ARM, stream=open_prepared(tmp_path / "p"))
    assert strip(got) == strip(ref)


def test_which_runs(monkeypatch):
    from spfcore import registry
    from spfcore_classic.gdsf import GDSF

    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    kind = simulator._compiled_kind
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) == ARM

    class Sub(GDSF):
        pass
    pm = registry.new_plugin_manager()
    pm.register(Sub(), name="sub")
    assert kind(PolicyRuntime(pm, 16, 4, policy_name="sub")) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "python")
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) is None
