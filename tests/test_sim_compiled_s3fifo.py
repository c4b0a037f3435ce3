"""The compiled replay of the classic ``s3fifo`` arm (spfcore.sim._replay_s3fifo_nb) against the
reference loop (_run_sequential through PolicyRuntime and spfcore_classic.s3fifo.S3FIFO's hooks):
every field of the cell (hook_calls included), every per-request record and the victim sequence,
on generated workloads, random workloads with tiny caches (walks past blocks in use and parents,
the copies exception), every non-default parameter, chunked replay with key compaction (ghost
entries renumbered), a prepared stream and the head of the Mooncake trace."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare, simulator
from spfcore.workloads.generators import make
from spfcore.workloads.model import Request, Workload
from spfcore.workloads.traces import read_mooncake
from tests.test_sim_compiled import TRACE, chunked_replay, compiled, personas_reference, reference, strip

nb_mod = pytest.importorskip("spfcore.sim._replay_s3fifo_nb")
pytest.importorskip("spfcore_classic.s3fifo")

ARM = "s3fifo"
#: every parameter away from its default: a large small queue, no ghost, promotion at the first
#: hit; a tiny small queue with a long ghost and a high threshold; a ghost larger than the cache
OPTIONS = (None, {"small_size_ratio": "0.5", "ghost_size_ratio": "0", "move_to_main_threshold": "1"},
           {"small_size_ratio": "0.05", "ghost_size_ratio": "3", "move_to_main_threshold": "3"},
           {"ghost_size_ratio": "0.2"})
OPTION_IDS = ["default", "small0.5-ghost0-thr1", "small0.05-ghost3-thr3", "ghost0.2"]


@pytest.fixture
def counters(monkeypatch):
    """The compiled replay's counters after each kernel call (copies exception, passed walks)."""
    seen = []
    run = nb_mod.run

    def recording(st_, *a, **k):
        out = run(st_, *a, **k)
        seen.append((int(st_["c"][nb_mod.COPIES]), int(st_["c"][nb_mod.PASSED]), int(st_["gl"][0])))
        return out
    monkeypatch.setattr(nb_mod, "run", recording)
    return seen


def same(monkeypatch, wl, nb: int, bs: int, options: dict | None = None, stream: bool = True) -> tuple[dict, list]:
    """Compiled vs hooks on ``wl``: the same cell and victims (through simulate on the Prepared,
    again with its interned arrays kept, and through simulate_stream); returns the reference's."""
    prep = prepare(wl, bs)
    ref, ref_victims = reference(monkeypatch, prep, nb, bs, ARM, options)
    got, got_victims = compiled(monkeypatch, prep, nb, bs, ARM, options=options)
    assert strip(got) == strip(ref)
    assert got_victims == ref_victims
    again, _ = compiled(monkeypatch, prep, nb, bs, ARM, options=options)
    assert strip(again) == strip(ref)
    if stream:
        s, s_victims = compiled(monkeypatch, prep, nb, bs, ARM, stream=wl.requests, options=options)
        assert strip(s) == strip(ref)
        assert s_victims == ref_victims
    return ref, ref_victims


@pytest.mark.skipif(not TRACE.exists(), reason="Mooncake trace not present")
@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
def test_trace_head_identical(monkeypatch, counters, options):
    wl = read_mooncake(TRACE, limit=1500)
    ref, victims = same(monkeypatch, wl, 700, 512, options)
    assert ref["evictions"] > 10_000 and 0 < ref["block_hit_rate"] < 1  # a cache under pressure
    lru, lru_victims = reference(monkeypatch, prepare(wl, 512), 700, 512, "lru")
    assert victims != lru_victims  # its own decisions, not the free queue's
    assert counters[-1][1] > 0  # walks passed blocks in use or parents


@pytest.mark.parametrize("name,flags,bs,pressure", [
    ("personas", dict(personas=4, prefix_tokens=512, sessions=8, turns=3, query_tokens=32, output_tokens=8), 16, 1.2),
    ("multiturn", {}, 16, 2.0),
    ("mix", {}, 16, 2.3),
    ("revisit", dict(sessions=4, prefix_tokens=256, noise_tokens=256, query_tokens=16, output_tokens=20), 8, 3.0),
])
@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
def test_generated_identical(monkeypatch, name, flags, bs, pressure, options):
    wl = make(name, seed=3, **flags)
    prep = prepare(wl, bs)
    distinct = len({k for v in prep.views for k in v.block_keys})
    nb = max(max(prep.blocks_needed) + 1, int(distinct / pressure))
    ref, victims = same(monkeypatch, wl, nb, bs, options)
    assert ref["evictions"] > 0 and ref["hit_blocks"] > 0
    _, lru_victims = reference(monkeypatch, prep, nb, bs, "lru")
    assert victims != lru_victims


def s3fifo_options():
    return st.one_of(st.none(), st.fixed_dictionaries({
        "small_size_ratio": st.sampled_from(["0.1", "0.3", "0.6", "0.9"]),
        "ghost_size_ratio": st.sampled_from(["0", "0.5", "0.9", "2"]),
        "move_to_main_threshold": st.sampled_from(["1", "2", "3"])}))


@st.composite
def random_workload(draw):
    """Token requests over a 2-token vocabulary (long shared prefixes, prompts that are whole
    blocks: the last-token rule caches duplicate hashes), outputs defined or not, a cache a few
    blocks above the largest request; s3fifo's params drawn."""
    bs = draw(st.sampled_from([1, 2, 4]))
    reqs = []
    for i in range(draw(st.integers(1, 24))):
        prompt = draw(st.lists(st.integers(0, 1), min_size=1, max_size=14))
        out = draw(st.integers(1, 6))
        outs = draw(st.one_of(st.just(()), st.lists(st.integers(0, 1), min_size=out, max_size=out).map(tuple)))
        reqs.append(Request(f"r{i}", 0.0, tuple(prompt), out, session_id=f"s{i % 3}", output_token_ids=outs))
    return Workload("random", {}, reqs), bs, draw(st.integers(0, 5)), draw(s3fifo_options())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(random_workload())
def test_random_identical(monkeypatch, counters, case):
    wl, bs, extra, options = case
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    counters.clear()
    same(monkeypatch, wl, nb, bs, options, stream=False)
    if counters and counters[-1][0]:
        event("copies exception")
    if counters and counters[-1][1]:
        event("walk passed blocks")


def seeded_workload(seed: int) -> tuple[Workload, int, int]:
    """:func:`random_workload`'s kind of case from ``random.Random(seed)``: (workload, bs, nb)."""
    rng = random.Random(seed)
    bs = rng.choice([1, 2])
    reqs = []
    for i in range(rng.randint(10, 40)):
        prompt = tuple(rng.randint(0, 1) for _ in range(rng.randint(1, 12)))
        out = rng.randint(1, 5)
        outs = tuple(rng.randint(0, 1) for _ in range(out)) if rng.random() < 0.5 else ()
        reqs.append(Request(f"r{i}", 0.0, prompt, out, session_id=f"s{i % 3}", output_token_ids=outs))
    wl = Workload("seeded", {}, reqs)
    return wl, bs, max(prepare(wl, bs).blocks_needed) + 1 + rng.randint(0, 4)


#: the copies exception's victim from the main queue first (a main queue above its share) and
#: from the small queue
COPIES_OPTIONS = (None, {"small_size_ratio": "0.9", "move_to_main_threshold": "1"},
                  {"small_size_ratio": "0.7", "ghost_size_ratio": "3", "move_to_main_threshold": "1"})


def test_copies_exception_identical(monkeypatch, counters):
    """Tiny caches where no free block is a leaf (a hash cached twice: the plugin's
    _victim_among_copies): reached on both sides, the same decisions."""
    from spfcore_classic._base import ClassicPolicy

    calls = []
    orig = ClassicPolicy._victim_among_copies

    def recording(self):
        calls.append(1)
        return orig(self)
    monkeypatch.setattr(ClassicPolicy, "_victim_among_copies", recording)
    reached = 0
    for seed in range(40):
        wl, bs, nb = seeded_workload(seed)
        for options in COPIES_OPTIONS:
            counters.clear()
            calls.clear()
            same(monkeypatch, wl, nb, bs, options, stream=False)
            got = max(c for c, _, _ in counters)
            assert (got > 0) == bool(calls)  # the kernel took its copies path where the hooks did
            reached += got > 0
    assert reached >= 3


def test_chunks_and_forgotten_keys_identical(monkeypatch, counters):
    """Streamed in chunks of 5 requests with the interned keys compacted after each chunk: ghost
    entries and parents survive the renumbering (the same victims, records and counters),
    keys no longer named are forgotten."""
    for options in (None, {"ghost_size_ratio": "3"}):
        wl, bs, nb, ref, ref_victims = personas_reference(monkeypatch, ARM, options)
        assert ref["hit_blocks"] > 100 and ref["evictions"] > 100
        counters.clear()
        kept, rt = chunked_replay(monkeypatch, wl, bs, nb, ARM, ARM, options, ref, ref_victims)
        assert simulator._compiled_kind(rt) == ARM
        assert len(kept) > 10 and any(new < old for old, new, _ in kept)  # keys were forgotten
        assert kept[0][2] == int(nb * (0.9 if options is None else 3))  # ghost_cap: the ghost's bound
        assert max(g for _, _, g in counters) > 0  # the ghost held entries across compactions


def test_prepared_stream_identical(monkeypatch, tmp_path):
    """A prepared stream (memory-mapped key ids): one call over its mapped ids, the same cell."""
    from spfcore.sim.prepared import open_prepared, write_prepared

    wl = make("multiturn", seed=5)
    bs = 16
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 40
    ref, _ = reference(monkeypatch, prep, nb, bs, ARM)
    assert ref["evictions"] > 0 and ref["hit_blocks"] > 0
    write_prepared(wl.requests, bs, tmp_path / "p")
    got, _ = compiled(monkeypatch, prep, nb, bs, ARM, stream=open_prepared(tmp_path / "p"))
    assert strip(got) == strip(ref)


def test_which_runs(monkeypatch):
    """The compiled replay stands in for S3FIFO itself with any params, not for a subclass, not
    with SPFCORE_SIM_REPLAY=python."""
    from spfcore import registry
    from spfcore_classic.s3fifo import S3FIFO

    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    kind = simulator._compiled_kind
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) == ARM
    for o in OPTIONS[1:]:
        assert kind(PolicyRuntime.for_policy(ARM, 16, 4, o)) == ARM
    assert nb_mod.params_of(PolicyRuntime.for_policy(ARM, 100, 4)) == (10, 90, 90, 2)

    class Sub(S3FIFO):
        pass
    pm = registry.new_plugin_manager()
    pm.register(Sub(), name="sub")
    assert kind(PolicyRuntime(pm, 16, 4, policy_name="sub")) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "python")
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) is None


@st.composite
def flat_workload(draw):
    """Token requests for test_sim_compiled's flat keys (a key per token value: keys repeated
    within a prompt and across requests, so one store may hold a hash twice, one of them found
    in the ghost), caches of a few blocks; s3fifo's params drawn."""
    bs = draw(st.sampled_from([1, 2]))
    vocab = draw(st.integers(2, 10))
    reqs = []
    for i in range(draw(st.integers(1, 40))):
        prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=8))
        reqs.append(Request(f"r{i}", 0.0, tuple(prompt), draw(st.integers(1, 3))))
    return Workload("flat", {}, reqs), bs, draw(st.integers(0, 3)), draw(s3fifo_options())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(flat_workload())
def test_keys_repeated_within_a_prompt(monkeypatch, case):
    """The same cell and victims, or the same KeyError (a lookup that finds a block twice); where
    the keys' parents form a cycle (no free block is a leaf, not even among copies: the plugin
    raises NoEvictable), the compiled replay raises the same PolicyError (its NO_VICTIM status)."""
    from spfcore.runtime import PolicyError
    from tests.test_sim_compiled import _flat_keys

    wl, bs, extra, options = case
    monkeypatch.setattr(simulator, "block_keys", _flat_keys)
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 1 + extra
    try:
        ref, ref_victims = reference(monkeypatch, prep, nb, bs, ARM, options)
    except KeyError as exc:
        event("KeyError")
        with pytest.raises(KeyError, match=str(exc.args[0])):
            compiled(monkeypatch, prep, nb, bs, ARM, options=options)
        return
    except PolicyError as exc:
        assert "NoEvictable" in str(exc)
        event("NoEvictable")
        with pytest.raises(PolicyError) as got:
            compiled(monkeypatch, prep, nb, bs, ARM, options=options)
        assert str(got.value) == str(exc)  # the runtime's report of the plugin's NoEvictable
        return
    got, got_victims = compiled(monkeypatch, prep, nb, bs, ARM, options=options)
    assert strip(got) == strip(ref)
    assert got_victims == ref_victims


def test_a_ghost_hash_twice_in_one_store(monkeypatch):
    """Flat keys (a key per token value) over seeded workloads where one store holds a hash
    twice, found in the ghost at the miss: the deeper block goes to the main queue and takes the
    hash out of from_ghost, the other to the small queue (S3FIFO.on_inserts)."""
    from spfcore.runtime import PolicyError
    from tests.test_sim_compiled import _flat_keys

    monkeypatch.setattr(simulator, "block_keys", _flat_keys)
    compared = 0
    for seed in range(150):
        rng = random.Random(seed)
        vocab = rng.randint(4, 10)
        reqs = [Request(f"r{i}", 0.0, tuple(rng.randrange(vocab) for _ in range(rng.randint(1, 5))), 1)
                for i in range(rng.randint(5, 30))]
        wl = Workload("flat", {}, reqs)
        prep = prepare(wl, 1)
        nb = max(prep.blocks_needed) + 1 + rng.randint(0, 3)
        try:
            ref, ref_victims = reference(monkeypatch, prep, nb, 1, ARM)
        except (KeyError, PolicyError):
            continue
        got, got_victims = compiled(monkeypatch, prep, nb, 1, ARM)
        assert strip(got) == strip(ref)
        assert got_victims == ref_victims
        compared += 1
    assert compared > 15


def test_a_block_moved_into_main_within_an_eviction_call(monkeypatch):
    """A case found by search where the plugin's walk memory (ClassicPolicy._stuck) missed a
    block that S3FIFO._evict_small moved into the main queue earlier in the same eviction call:
    the memory, rechecked at the main queue's first walk in that call, took the new length as
    seen and answered "no evictable block" with that block free and a leaf (a victim from the
    small queue instead). S3FIFO._evict_small now registers the block (ClassicPolicy._entered):
    the hooks give the plain walk's victims, which the kernel makes."""
    from spfcore_classic import s3fifo
    from spfcore_classic._base import ClassicPolicy
    from spfcore_classic._ring import Ring

    wl, bs, nb = seeded_workload(126)
    options = {"small_size_ratio": "0.9", "move_to_main_threshold": "1"}
    ref, ref_victims = same(monkeypatch, wl, nb, bs, options, stream=False)
    configure = s3fifo.S3FIFO.configure

    def plain_rings(self, capacity):
        configure(self, capacity)
        self.small, self.main = Ring(), Ring()
    with monkeypatch.context() as m:  # the plain walk in Python: Rings, no memory
        m.setattr(s3fifo.S3FIFO, "configure", plain_rings)
        m.setattr(ClassicPolicy, "walk", lambda self, o: self.first_evictable(o, self.evictable))
        plain, plain_victims = reference(monkeypatch, prepare(wl, bs), nb, bs, ARM, options)
    assert plain_victims == ref_victims and strip(plain) == strip(ref)


#: Found by a search over flat-key workloads (a key per token value, block size 1, 10 blocks):
#: ``(prompt tokens, outputs)`` per request.
_COPIES_MAIN_FIRST = [((7, 3), 1), ((2, 5, 8, 4, 0, 8), 2), ((9, 9), 1), ((8, 1, 7, 7), 1), ((0, 5, 3), 2)]


def test_copies_exception_from_the_main_queue_first(monkeypatch):
    """The copies exception (``ClassicPolicy._victim_among_copies``: no free block is a leaf, so
    ``victim()`` runs again with the keys cached twice counted as leaves) with the main queue
    above its share and the small queue not empty: the retry walks the main queue first, with
    the copies rule there too (the kernel's ``copies`` flag in that branch). Reached by the hooks;
    the hooks with that branch skipped in the retry (the main queue's share lifted) give other
    victims; the compiled replay gives the hooks'."""
    from spfcore_classic._base import ClassicPolicy
    from tests.test_sim_compiled import _flat_keys

    monkeypatch.setattr(simulator, "block_keys", _flat_keys)
    wl = Workload("flat", {}, [Request(f"r{i}", 0.0, p, o) for i, (p, o) in enumerate(_COPIES_MAIN_FIRST)])
    options = {"small_size_ratio": "0.7", "move_to_main_threshold": "1"}
    among = ClassicPolicy._victim_among_copies
    main_first, skip = [], []

    def among_(self):
        main_first.append(len(self.main) > self.main_cap and len(self.small) > 0)
        if not skip:
            return among(self)
        cap, self.main_cap = self.main_cap, 1 << 60  # the retry's main-queue-first branch not taken
        try:
            return among(self)
        finally:
            self.main_cap = cap
    monkeypatch.setattr(ClassicPolicy, "_victim_among_copies", among_)
    ref, ref_victims = same(monkeypatch, wl, 10, 1, options, stream=False)
    assert any(main_first)
    skip.append(1)
    _, skipped_victims = reference(monkeypatch, prepare(wl, 1), 10, 1, ARM, options)
    assert skipped_victims != ref_victims  # the branch decides here
