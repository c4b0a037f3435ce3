"""The compiled replay of the classic plugin's ``lirs`` (spfcore.sim._replay_lirs_nb) against the
reference loop (_run_sequential through PolicyRuntime and LIRS's hooks): every field of the cell,
every per-request record and the victim sequence, on generated workloads, random workloads with
tiny caches (walks past blocks in use and past parents, a hash cached twice and the copies
exception), chunked replay with the interned keys compacted, a prepared stream and the Mooncake
trace's head."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from spfcore import registry
from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare, simulator
from spfcore.workloads.generators import make
from tests.test_sim_compiled_arc import (check_prepared_mix, check_trace_head_not_lrus, copies_exception_reached,
                                         generated_victims_not_lrus, hash_id_workload, random_workload)
from tests.test_sim_compiled_sieve import GENERATED, check_generated, check_too_big
from tests.test_sim_compiled import (TRACE, assert_same, chunked_replay, compiled, personas_reference, reference,
                                     strip)

pytest.importorskip("spfcore_classic")
from spfcore_classic import _base  # noqa: E402
from spfcore_classic.lirs import LIRS  # noqa: E402

from spfcore.sim import _replay_lirs_nb as ln  # noqa: E402

ARM = "lirs"
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class Watch:
    """Counts, over the runs it watches, the reference's copies-exception victims
    (``ClassicPolicy._victim_among_copies``), blocks stored back over their ghost in S (a new
    LIR block), LIR blocks taken for want of an evictable HIR block (borrowed slots), walks of Q
    that passed blocks over, and the compiled kernel's copies-rule victims (``c[COPIES]``)."""

    def __init__(self, monkeypatch):
        self.copies = self.kernel_copies = self.back = self.borrowed = self.passed = 0
        among, victim, walk, run = _base.ClassicPolicy._victim_among_copies, LIRS.victim, LIRS.walk, ln.run
        insert = LIRS._insert

        def among_(pol):
            self.copies += 1
            return among(pol)

        def victim_(pol):
            b = pol.borrowed
            i = victim(pol)
            self.borrowed += pol.borrowed > b
            return i

        def insert_(pol, i, key):
            t = pol.from_ghost.get(key)
            self.back += t is not None and pol.ghost_tok.get(key) == t
            return insert(pol, i, key)

        def walk_(pol, order):
            head = order.head
            i = walk(pol, order)
            self.passed += i is not None and i != head
            return i

        def run_(st, *a, **k):
            before = int(st["c"][ln.COPIES])
            out = run(st, *a, **k)
            self.kernel_copies += int(st["c"][ln.COPIES]) - before
            return out
        monkeypatch.setattr(_base.ClassicPolicy, "_victim_among_copies", among_)
        monkeypatch.setattr(LIRS, "victim", victim_)
        monkeypatch.setattr(LIRS, "_insert", insert_)
        monkeypatch.setattr(LIRS, "walk", walk_)
        monkeypatch.setattr(ln, "run", run_)


@pytest.mark.skipif(not TRACE.exists(), reason="Mooncake trace not present")
def test_trace_head_identical(monkeypatch):
    check_trace_head_not_lrus(monkeypatch, ARM)


@pytest.mark.parametrize("name,flags,bs,pressure", GENERATED)
def test_generated_identical(monkeypatch, name, flags, bs, pressure):
    check_generated(monkeypatch, ARM, None, name, flags, bs, pressure)


def test_generated_victims_are_lirs(monkeypatch):
    """LIRS's own order, not the free queue's: on most generated workloads its victims differ from lru's."""
    assert generated_victims_not_lrus(monkeypatch, ARM) >= 3


@SETTINGS
@given(random_workload())
def test_random_identical(monkeypatch, case):
    wl, bs, extra = case
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    assert_same(monkeypatch, wl, nb, bs, ARM)


@SETTINGS
@given(hash_id_workload())
def test_random_hash_ids_identical(monkeypatch, case):
    wl, bs, extra = case
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    assert_same(monkeypatch, wl, nb, bs, ARM)


def test_copies_exception_identical(monkeypatch):
    """The copies exception (see ``copies_exception_reached``); slots are also borrowed (Q without an
    evictable block)."""
    copies_exception_reached(monkeypatch, ARM, Watch, "borrowed")


def test_chunks_and_forgotten_keys_identical(monkeypatch):
    """lirs streamed in chunks of 5 requests with the interned keys compacted after each chunk:
    S's ghosts and nonres (in their orders) and the parents' counts survive the renumbering (the same
    victims, records and counters as the reference loop), keys no longer named are forgotten, and
    those kept are bounded by the cache and the ghosts."""
    w = Watch(monkeypatch)
    wl, bs, nb, ref, ref_victims = personas_reference(monkeypatch, ARM, None)
    assert ref["hit_blocks"] > 50 and ref["evictions"] > 100 and w.back > 0
    kept, rt = chunked_replay(monkeypatch, wl, bs, nb, ARM, ARM, None, ref, ref_victims)
    assert simulator._compiled_kind(rt) == ARM
    assert len(kept) > 10 and any(new < old for old, new, _ in kept)  # keys were forgotten
    assert all(cap == 2 * nb and new <= nb - 1 + cap for _, new, cap in kept)


def test_ghosts_survive_compaction(monkeypatch):
    """A workload whose blocks come back over their ghosts after compactions: identical only if
    S keeps its ghost entries (and their places) through the renumbering."""
    wl = make("mix", seed=5)
    bs = 16
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 40
    w = Watch(monkeypatch)
    ref, ref_victims = reference(monkeypatch, prep, nb, bs, ARM)
    assert w.back > 10
    kept, _ = chunked_replay(monkeypatch, wl, bs, nb, ARM, ARM, None, ref, ref_victims)
    assert len(kept) > 10


def test_prepared_stream_identical(monkeypatch, tmp_path):
    check_prepared_mix(monkeypatch, tmp_path, ARM)


def test_which_policies_compile(monkeypatch):
    """The plugin's own LIRS, fresh, compiles (its caps from ``configure``); a subclass, a used instance and the python switch
    run the hooks."""
    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    kind = simulator._compiled_kind
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) == ARM

    class Subclass(LIRS):  # another policy built on it: its own decisions, the Python loop
        pass
    pm = registry.new_plugin_manager()
    pm.register(Subclass(), name="sub")
    assert kind(PolicyRuntime(pm, 16, 4, policy_name="sub")) is None
    rt = PolicyRuntime.for_policy(ARM, 16, 4)
    next(iter(rt.pm.get_plugins())).borrowed = 1  # not fresh: its state is the Python's
    assert ln.params_of(rt) is None and kind(rt) is None
    assert ln.params_of(PolicyRuntime.for_policy(ARM, 16, 4)) == (1, 15)
    assert ln.params_of(PolicyRuntime.for_policy(ARM, 1000, 4)) == (10, 990)  # hir_cap: 1% of the blocks
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4, hook_budget_ms=60_000)) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "python")
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) is None


def test_request_too_big_for_the_stream(monkeypatch):
    check_too_big(monkeypatch, ARM)


def test_final_state_identical(monkeypatch):
    """The same S (bottom first: blocks, and ghosts as hashes), Q, LIR set, nonres and borrowed
    slots at the end as the plugin's, on a workload with blocks back over their ghosts."""
    wl = make("mix", seed=3)
    bs = 16
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 100
    pols, states = [], []
    victim, run = LIRS.victim, ln.run

    def victim_(pol):
        pols.append(pol)
        return victim(pol)

    def run_(st, *a, **k):
        states.append(st)
        return run(st, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(LIRS, "victim", victim_)
        ref, ref_victims = reference(m, prep, nb, bs, ARM)
    monkeypatch.setattr(ln, "run", run_)
    got, got_victims = compiled(monkeypatch, prep, nb, bs, ARM)
    assert strip(got) == strip(ref)
    assert got_victims == ref_victims
    pol, st = pols[-1], states[-1]
    ids: dict = {}
    simulator._flatten(prep.plans, ids)  # the kernel's key ids, interned as _replay_compiled does
    key = dict(zip(ids.values(), ids.keys()))
    B = nb

    def ring(rings):
        rn, _, _, rl = rings
        R, out, s = len(rl), [], rings[0][0]
        while s != 0:
            out.append(s - R)
            s = rn[s]
        return out
    want_s = [i if i is not None else ("ghost", k) for k, i in (pol.info[t] for t in pol.S)]
    assert [e if e < B else ("ghost", key[e - B]) for e in ring(st["sr"])] == want_s
    assert any(isinstance(x, tuple) for x in want_s)  # ghosts in S
    assert ring(st["qr"]) == list(pol.Q)
    assert [key[k] for k in ring(st["nr"])] == list(pol.nonres)
    assert set(np.flatnonzero(st["lir"]).tolist()) == pol.lir
    assert int(st["pc"][ln.BORROWED]) == pol.borrowed and int(st["pc"][ln.NLIR]) == len(pol.lir)
