"""The compiled replay of the classic plugin's ``arc`` (spfcore.sim._replay_arc_nb) against the
reference loop (_run_sequential through PolicyRuntime and ARC's hooks): every field of the cell,
every per-request record and the victim sequence, on generated workloads, random workloads with
tiny caches (walks past blocks in use and past parents, a hash cached twice and the copies
exception), chunked replay with the interned keys compacted, a prepared stream and the Mooncake
trace's head."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spfcore import registry
from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare, simulator
from spfcore.workloads.generators import make
from spfcore.workloads.model import Request, Workload
from spfcore.workloads.traces import read_mooncake
from tests.test_sim_compiled_sieve import GENERATED, check_generated, check_too_big, generated_case
from tests.test_sim_compiled import (TRACE, assert_same, assert_same_flat, chunked_replay, compiled, personas_reference,
                                     reference, strip)

pytest.importorskip("spfcore_classic")
from spfcore_classic import _base  # noqa: E402
from spfcore_classic.arc import ARC  # noqa: E402

from spfcore.sim import _replay_arc_nb as an  # noqa: E402

ARM = "arc"
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class Watch:
    """Counts, over the runs it watches, the reference's copies-exception victims
    (``ClassicPolicy._victim_among_copies``), its B1 / B2 ghost hits, T2 walks that found
    nothing and walks that passed blocks over, and the compiled kernel's copies-rule victims (``c[COPIES]``)."""

    def __init__(self, monkeypatch):
        self.copies = self.kernel_copies = self.ghost1 = self.ghost2 = self.walk_failed = self.passed = 0
        among, on_miss, walk, run = _base.ClassicPolicy._victim_among_copies, ARC.on_miss, ARC.walk, an.run

        def among_(pol):
            self.copies += 1
            return among(pol)

        def on_miss_(pol, keys):
            on_miss(pol, keys)
            self.ghost1 += pol.ghost_hit == 1
            self.ghost2 += pol.ghost_hit == 2

        def walk_(pol, order):
            head = order.head
            i = walk(pol, order)
            self.walk_failed += i is None and order is pol.t2 and len(order) > 0
            self.passed += i is not None and i != head  # the walk passed blocks in use or parents
            return i

        def run_(st, *a, **k):
            before = int(st["c"][an.COPIES])
            out = run(st, *a, **k)
            self.kernel_copies += int(st["c"][an.COPIES]) - before
            return out
        monkeypatch.setattr(_base.ClassicPolicy, "_victim_among_copies", among_)
        monkeypatch.setattr(ARC, "on_miss", on_miss_)
        monkeypatch.setattr(ARC, "walk", walk_)
        monkeypatch.setattr(an, "run", run_)


def check_trace_head_not_lrus(monkeypatch, arm):
    """The Mooncake trace's head under pressure, identical, and not lru's hits."""
    wl = read_mooncake(TRACE, limit=1500)
    ref = assert_same(monkeypatch, wl, 700, 512, arm)
    assert ref["evictions"] > 10_000 and 0 < ref["block_hit_rate"] < 1  # a cache under pressure
    lru, _ = reference(monkeypatch, prepare(wl, 512), 700, 512, "lru")
    assert lru["hit_blocks"] != ref["hit_blocks"]


@pytest.mark.skipif(not TRACE.exists(), reason="Mooncake trace not present")
def test_trace_head_identical(monkeypatch):
    check_trace_head_not_lrus(monkeypatch, ARM)


@pytest.mark.parametrize("name,flags,bs,pressure", GENERATED)
def test_generated_identical(monkeypatch, name, flags, bs, pressure):
    check_generated(monkeypatch, ARM, None, name, flags, bs, pressure)


def generated_victims_not_lrus(monkeypatch, arm) -> int:
    """On how many generated workloads the arm's victims (the hooks') differ from lru's."""
    differ = 0
    for case in GENERATED:
        _, prep, nb = generated_case(*case)
        _, own = reference(monkeypatch, prep, nb, case[2], arm)
        _, lru = reference(monkeypatch, prep, nb, case[2], "lru")
        differ += own != lru
    return differ


def test_generated_victims_are_arcs(monkeypatch):
    """ARC's own order, not the free queue's: on most generated workloads its victims differ from lru's."""
    assert generated_victims_not_lrus(monkeypatch, ARM) >= 3


@st.composite
def random_workload(draw):
    """Token requests over a 2-token vocabulary (long shared prefixes, prompts that are whole
    blocks: the last-token rule caches duplicate hashes), outputs defined or not (decode blocks
    matching later prompts or not), a cache of the largest request and 0-5 blocks more."""
    bs = draw(st.sampled_from([1, 2, 4]))
    reqs = []
    for i in range(draw(st.integers(1, 24))):
        prompt = draw(st.lists(st.integers(0, 1), min_size=1, max_size=14))
        out = draw(st.integers(1, 6))
        outs = draw(st.one_of(st.just(()), st.lists(st.integers(0, 1), min_size=out, max_size=out).map(tuple)))
        reqs.append(Request(f"r{i}", 0.0, tuple(prompt), out, session_id=f"s{i % 3}", output_token_ids=outs))
    return Workload("random", {}, reqs), bs, draw(st.integers(0, 5))


@SETTINGS
@given(random_workload())
def test_random_identical(monkeypatch, case):
    wl, bs, extra = case
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    assert_same(monkeypatch, wl, nb, bs, ARM)


@st.composite
def hash_id_workload(draw):
    """Hash-id requests over 3 ids: ids repeated within a prompt and shared prefixes, the last
    block partial or not."""
    bs = draw(st.sampled_from([1, 2, 4]))
    reqs = []
    for i in range(draw(st.integers(1, 24))):
        ids = tuple(draw(st.lists(st.integers(0, 2), min_size=1, max_size=8)))
        p = draw(st.integers((len(ids) - 1) * bs + 1, len(ids) * bs))
        reqs.append(Request(f"h{i}", 0.0, (), draw(st.integers(1, 6)), session_id=f"s{i % 2}", hash_ids=ids,
                            hash_block_tokens=bs, num_prompt_tokens=p))
    return Workload("hash-ids", {}, reqs), bs, draw(st.integers(0, 5))


@SETTINGS
@given(hash_id_workload())
def test_random_hash_ids_identical(monkeypatch, case):
    wl, bs, extra = case
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    assert_same(monkeypatch, wl, nb, bs, ARM)


def random_requests(rng, n: int) -> list:
    """``n`` token requests over a 2-token vocabulary (as :func:`random_workload` draws them)."""
    reqs = []
    for i in range(n):
        prompt = tuple(int(x) for x in rng.integers(0, 2, int(rng.integers(1, 15))))
        out = int(rng.integers(1, 7))
        outs = tuple(int(x) for x in rng.integers(0, 2, out)) if rng.random() < 0.5 else ()
        reqs.append(Request(f"r{i}", 0.0, prompt, out, session_id=f"s{i % 3}", output_token_ids=outs))
    return reqs


def copies_exception_reached(monkeypatch, arm, watch, counter: str) -> None:
    """Workloads where no free block is a leaf (a hash cached in two blocks, the other copy's
    request holding it with a child below): the reference takes the copies exception
    (``_victim_among_copies``), the kernel its copies rule, the same number of times, with the
    same victims and records, in at least 5 workloads; tiny caches also walk past blocks in use
    and past parents (``watch``'s ``passed``) and reach ``watch``'s ``counter``."""
    rng = np.random.default_rng(7)
    reached = counted = passed = 0
    for _ in range(400):
        wl = Workload("random", {}, random_requests(rng, int(rng.integers(4, 24))))
        bs = int(rng.choice([1, 2, 4]))
        nb = max(prepare(wl, bs).blocks_needed) + 1 + int(rng.integers(0, 3))
        with monkeypatch.context() as m:
            w = watch(m)
            ref, ref_victims = reference(m, prepare(wl, bs), nb, bs, arm)
            if not w.copies:
                continue
            got, got_victims = compiled(m, prepare(wl, bs), nb, bs, arm)
            assert strip(got) == strip(ref)
            assert got_victims == ref_victims
            assert w.kernel_copies == w.copies
            reached += 1
            counted += getattr(w, counter)
            passed += w.passed
        if reached >= 5:
            break
    assert reached >= 5, f"the copies exception was reached in {reached} workloads only"
    assert counted and passed, (counter, counted, passed)


def test_copies_exception_identical(monkeypatch):
    """The copies exception (see :func:`copies_exception_reached`); T2 also has no evictable block."""
    copies_exception_reached(monkeypatch, ARM, Watch, "walk_failed")


def test_chunks_and_forgotten_keys_identical(monkeypatch):
    """arc streamed in chunks of 5 requests with the interned keys compacted after each chunk:
    the ghost lists (in their order) and the parents' counts survive the renumbering (the same
    victims, records and counters as the reference loop), keys no longer named are forgotten, and
    those kept are bounded by the cache and the ghost lists."""
    w = Watch(monkeypatch)
    wl, bs, nb, ref, ref_victims = personas_reference(monkeypatch, ARM, None)
    assert ref["hit_blocks"] > 50 and ref["evictions"] > 100 and w.ghost1 + w.ghost2 > 0
    kept, rt = chunked_replay(monkeypatch, wl, bs, nb, ARM, ARM, None, ref, ref_victims)
    assert simulator._compiled_kind(rt) == ARM
    assert len(kept) > 10 and any(new < old for old, new, _ in kept)  # keys were forgotten
    assert all(cap == 2 * nb and new <= nb - 1 + cap for _, new, cap in kept)


def test_ghosts_survive_compaction(monkeypatch):
    """A workload whose ghost hits come after compactions: identical only if B1 / B2 keep their
    keys (and orders) through the renumbering; the reference hits both ghost lists."""
    wl = make("mix", seed=5)  # 168 requests, 366 blocks: 37 requests hit B1, 11 B2
    bs = 16
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 40
    w = Watch(monkeypatch)
    ref, ref_victims = reference(monkeypatch, prep, nb, bs, ARM)
    assert w.ghost1 > 10 and w.ghost2 > 5
    kept, _ = chunked_replay(monkeypatch, wl, bs, nb, ARM, ARM, None, ref, ref_victims)
    assert len(kept) > 10


def check_prepared_mix(monkeypatch, tmp_path, arm) -> None:
    """A prepared stream (memory-mapped key ids) of the mix workload: one call over its mapped ids, the same cell."""
    from spfcore.sim.prepared import open_prepared, write_prepared

    wl = make("mix", seed=5)
    bs = 16
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 40
    ref, _ = reference(monkeypatch, prep, nb, bs, arm)
    assert ref["evictions"] > 0 and ref["hit_blocks"] > 0
    write_prepared(wl.requests, bs, tmp_path / "p")
    got, _ = compiled(monkeypatch, prep, nb, bs, arm, stream=open_prepared(tmp_path / "p"))
    assert strip(got) == strip(ref)


def test_prepared_stream_identical(monkeypatch, tmp_path):
    check_prepared_mix(monkeypatch, tmp_path, ARM)


def test_which_policies_compile(monkeypatch):
    """The plugin's own ARC, fresh, compiles; a subclass, a used instance and the python switch
    run the hooks."""
    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    kind = simulator._compiled_kind
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) == ARM

    class Subclass(ARC):  # another policy built on it: its own decisions, the Python loop
        pass
    pm = registry.new_plugin_manager()
    pm.register(Subclass(), name="sub")
    assert kind(PolicyRuntime(pm, 16, 4, policy_name="sub")) is None
    rt = PolicyRuntime.for_policy(ARM, 16, 4)
    next(iter(rt.pm.get_plugins())).p = 1.5  # not fresh: its state is the Python's
    assert an.params_of(rt) is None and kind(rt) is None
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4, hook_budget_ms=60_000)) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "python")
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) is None


def test_request_too_big_for_the_stream(monkeypatch):
    check_too_big(monkeypatch, ARM)


def test_b2_trimmed_on_a_plain_miss_identical(monkeypatch):
    """libCacheSim's trim of B2 on a miss that is no ghost hit (the directory full, ``|T1| +
    |B1| + 1 <= c``), before the victim's ghost enters, on a generated workload where it decides.
    Above 2c entries the directory bound drops the same oldest ghost anyway; at exactly 2c only
    the trim does, and the ghost it drops outlives its request only where a request stores one
    or two blocks after it (large blocks). Reached in the reference, leaving the directory at
    2c - 1 without B2's oldest ghost; the hooks without it (that ghost put back) give other
    victims and another B2 at the end; the compiled replay gives the hooks' victims and
    records, and the same lists and ``p`` at the end."""
    wl = make("mix", seed=0)
    bs = 1024
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 10  # 16 blocks: one such trim (found by a search over mix seeds and sizes)
    victim = ARC.victim
    at_2c, after, untrimmed = [], [], []
    pols, states = [], []
    run = an.run

    def victim_(pol):
        t1, t2, b1, b2, c = len(pol.t1), len(pol.t2), len(pol.b1), len(pol.b2), pol.capacity
        exact = not pol.ghost_hit and t1 + b1 + 1 <= c and t1 + b1 + t2 + b2 == 2 * c and b2 > 0
        at_2c.append(exact)
        oldest = next(iter(pol.b2)) if exact else None
        pols.append(pol)
        i = victim(pol)
        if exact:
            after.append((len(pol.t1) + len(pol.t2) + len(pol.b1) + len(pol.b2) - 2 * c, oldest in pol.b2))
            if untrimmed:  # as if not trimmed: B2's oldest ghost where it was
                pol.b2[oldest] = None
                pol.b2.move_to_end(oldest, last=False)
        return i

    def run_(st, *a, **k):
        states.append(st)
        return run(st, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(ARC, "victim", victim_)
        ref, ref_victims = reference(m, prep, nb, bs, ARM)
        # trimmed: 2c - 1 entries, B2's oldest ghost gone
        assert nb == 16 and after[:1] == [(-1, False)] and sum(at_2c) == 1
        pol = pols[-1]
        b2_len = len(pol.b2)
        untrimmed.append(1)
        other, other_victims = reference(m, prep, nb, bs, ARM)
    assert other_victims != ref_victims and strip(other) != strip(ref)  # the trim decides here
    assert (b2_len, len(pols[-1].b2)) == (3, 2)  # B2 at the end
    monkeypatch.setattr(an, "run", run_)
    got, got_victims = compiled(monkeypatch, prep, nb, bs, ARM)
    assert strip(got) == strip(ref)
    assert got_victims == ref_victims
    # the final state: T1, T2 (LRU end first), B1, B2 (oldest first, as hashes) and p
    st = states[-1]
    ids: dict = {}
    simulator._flatten(prep.plans, ids)  # the kernel's key ids, interned as _replay_compiled does
    key = dict(zip(ids.values(), ids.keys()))

    def ring(rings, r=0, keys=False):
        rn, _, _, rl = rings
        R, out, s = len(rl), [], rings[0][r]
        while s != r:
            out.append(key[s - R] if keys else s - R)
            s = rn[s]
        return out
    assert (ring(st["br"], an.T1), ring(st["br"], an.T2)) == (list(pol.t1), list(pol.t2))
    assert (ring(st["g1"], keys=True), ring(st["g2"], keys=True)) == (list(pol.b1), list(pol.b2))
    assert st["pf"][an.P] == pol.p


#: Found by a search over flat-key workloads (a key per token value, block size 2, 7 blocks):
#: ``(prompt tokens, outputs)`` per request.
_B2_AT_2C = [((1, 8, 5, 4, 7, 6), 1), ((3, 7, 7, 1), 1), ((7, 0, 8, 4, 6, 7, 3), 2), ((9, 3, 7, 2, 6, 4, 7), 1),
             ((7, 9, 0, 0), 1), ((0, 6, 9, 5, 7, 9, 9, 4), 1), ((1, 0, 5, 5, 2, 4), 3), ((3, 1, 7, 1, 4, 8, 8), 1),
             ((0,), 2), ((1,), 2), ((3, 2, 4, 5, 2, 2, 0), 2), ((6, 0, 9, 9, 1, 7, 7, 1), 2), ((5, 6, 0, 3, 6), 1),
             ((9,), 2), ((6, 2), 1), ((6, 8, 8, 1, 2, 0), 1), ((5,), 1)]


def test_b2_trimmed_on_a_plain_miss_with_the_directory_at_2c(monkeypatch):
    """The B2 trim of a plain miss (no ghost hit, ``|T1| + |B1| + 1 <= c``) with the directory
    at exactly 2c entries: libCacheSim drops B2's oldest ghost before the victim's enters, where
    the directory bound (only above 2c) would drop none, so that ghost stays only without the
    trim. Reached by the hooks; the hooks without it (that ghost put back at B2's oldest end)
    give other victims; the compiled replay gives the hooks'."""
    from tests.test_sim_compiled import _flat_keys

    monkeypatch.setattr(simulator, "block_keys", _flat_keys)
    wl = Workload("flat", {}, [Request(f"r{i}", 0.0, p, o) for i, (p, o) in enumerate(_B2_AT_2C)])
    victim = ARC.victim
    at_2c, untrimmed = [], []

    def victim_(pol):
        t1, t2, b1, b2, c = len(pol.t1), len(pol.t2), len(pol.b1), len(pol.b2), pol.capacity
        exact = not pol.ghost_hit and t1 + b1 + 1 <= c and t1 + b1 + t2 + b2 == 2 * c and b2 > 0
        at_2c.append(exact)
        oldest = next(iter(pol.b2)) if exact else None
        i = victim(pol)
        if exact and untrimmed:  # as if not trimmed: B2's oldest ghost where it was
            pol.b2[oldest] = None
            pol.b2.move_to_end(oldest, last=False)
        return i
    monkeypatch.setattr(ARC, "victim", victim_)
    ref = assert_same_flat(monkeypatch, wl, 2, 7 - 1 - max(prepare(wl, 2).blocks_needed), None, arm=ARM)
    assert ref is not None and ref["num_blocks"] == 7 and any(at_2c)
    _, ref_victims = reference(monkeypatch, prepare(wl, 2), 7, 2, ARM)
    untrimmed.append(1)
    _, untrimmed_victims = reference(monkeypatch, prepare(wl, 2), 7, 2, ARM)
    assert untrimmed_victims != ref_victims  # the trim decides here
