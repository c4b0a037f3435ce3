"""Evictor: hashless first, release order, tiers, pins (cap, expiry), rescore,
choose_victims validation, too few free blocks."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spfcore.evictor import Evictor
from spfcore.runtime import score_columns
from spfcore.views import Score


def scored(values, **kw):
    """An evictor scoring block id ``i`` as ``values[i]`` (float or Score); records calls."""
    calls = []

    def score(ids, now):
        calls.append(list(ids))
        return score_columns([values[i] for i in ids], len(ids))

    ev = Evictor(10, score=score, **kw)
    ev.calls = calls
    return ev


def test_fifo_hashless_first_then_release_order():
    ev = Evictor(10)
    assert ev.fifo
    ev.push_cached([5, 4, 3], 0.0)  # a finished request's blocks, deepest first
    ev.push_hashless([1, 2])        # vLLM prepend_n: 1 reused first
    ev.push_hashless([0])
    assert len(ev) == 6 and 4 in ev and 9 not in ev
    assert ev.pop(4, 0.0, 0) == [0, 1, 2, 5]
    ev.remove(3)  # a hit (touch)
    assert ev.pop(1, 0.0, 0) == [4]
    with pytest.raises(KeyError, match="block 3 is not free"):
        ev.remove(3)


def test_fifo_rebuilds_its_order_and_keeps_it(monkeypatch):
    """The fifo order dict is rebuilt once its deleted slots pile up (:meth:`Evictor._compact`):
    victims stay in release order across rebuilds, hits and an undone pop (a list model)."""
    import spfcore.evictor as E

    monkeypatch.setattr(E, "_COMPACT", 8)  # with 20 * isqrt(20) = 80: a rebuild every ~80 deletions
    ev, model, nxt, rebuilds = Evictor(64), [], 0, 0
    for r in range(400):
        new = list(range(nxt, nxt + 3))
        nxt += 3
        ev.push_cached(new, 0.0)
        model += new
        if r % 5 == 0:  # a hit on a block in the middle of the order
            ev.remove(model.pop(len(model) // 2))
        if len(model) > 20:
            lru = ev._lru
            got = ev.pop(3, 0.0, 0)
            assert got == model[:3]
            del model[:3]
            rebuilds += ev._lru is not lru
            if r % 50 == 0:  # undone: the victims go back in front
                ev.unpop(got)
                model[:0] = got
        assert list(ev._lru) == model and ev._ins - len(ev._lru) <= 80
    assert rebuilds >= 5


def test_too_few_free_blocks():
    ev = Evictor(10)
    ev.push_hashless([0, 1])
    with pytest.raises(ValueError, match="cannot take 3 blocks: only 2 free"):
        ev.pop(3, 0.0, 0)
    assert len(ev) == 2  # nothing was taken


def test_lowest_score_first_ties_by_release_order():
    ev = scored({1: 2.0, 2: 1.0, 3: 2.0, 4: 0.5})
    ev.push_cached([1, 2], 0.0)
    ev.push_cached([3, 4], 0.0)
    ev.push_hashless([9])
    assert ev.calls == [[1, 2], [3, 4]]  # one score call per release batch
    assert ev.pop(5, 0.0, 0) == [9, 4, 2, 1, 3]


def test_not_admitted_before_admitted_before_pinned():
    vals = {1: 0.0, 2: 5.0, 3: 9.0, 4: Score(-100.0, expires_at_arrival=10, pinned=True)}
    admit = {1: True, 2: True, 3: False, 4: True}
    ev = scored(vals, admit=lambda ids, now: [admit[i] for i in ids])
    ev.push_cached([4, 1, 2, 3], 0.0)
    assert ev.num_pinned == 1
    # 3 is not admitted (tier 0) despite its high value; pinned 4 goes only when nothing else is left.
    assert ev.pop(4, 0.0, 0) == [3, 1, 2, 4]


def test_pin_cap_refuses_and_counts():
    pin = Score(0.0, expires_at_arrival=5, pinned=True)
    ev = scored({i: pin for i in range(6)}, pin_cap_fraction=0.2)  # cap = int(0.2 * 10) = 2
    ev.push_cached([0, 1, 2, 3], 0.0)
    assert (ev.num_pinned, ev.pins_refused) == (2, 2)
    # refused pins stay in LRU order ahead of the pinned ones
    assert ev.pop(4, 0.0, 0) == [2, 3, 0, 1]


def test_pin_without_expiry_is_an_error():
    with pytest.raises(ValueError, match=r"Score\(pinned=True\) needs an expiry"):
        Score(1.0, pinned=True)
    assert Score(1.0, expires_at=5.0, pinned=True).pinned and Score(1.0, expires_at_arrival=3, pinned=True).pinned


def test_bad_pin_cap_fraction():
    with pytest.raises(ValueError, match=r"pin_cap_fraction must be in \[0, 1\], got 1.5"):
        Evictor(10, pin_cap_fraction=1.5)


def test_expiry_by_arrival_and_by_seconds_rescores_in_one_batch():
    vals = {1: Score(-5.0, expires_at_arrival=3), 2: Score(-4.0, expires_at=2.5), 3: 0.0}
    ev = scored(vals)
    ev.push_cached([1, 2, 3], 0.0)
    vals.update({1: 7.0, 2: 8.0})
    assert ev.rescore_expired(now=2.0, arrival=2) == 0
    assert ev.rescore_expired(now=2.5, arrival=3) == 2
    assert ev.calls[-1] == [2, 1]  # seconds heap first, then arrivals: one batch
    assert ev.pop(3, 2.5, 3) == [3, 1, 2]


def test_expired_pin_is_unpinned_and_keeps_release_order():
    vals = {1: Score(0.0, expires_at_arrival=2, pinned=True), 2: 0.0}
    ev = scored(vals)
    ev.push_cached([1, 2], 0.0)
    vals[1] = 0.0
    assert ev.pop(1, 0.0, 1) == [2]  # 1 still pinned at arrival 1
    ev.push_cached([2], 0.0)
    assert ev.pop(1, 0.0, 2) == [1]  # re-scored at arrival 2, unpinned, released before 2
    assert ev.num_pinned == 0


def test_pin_api_and_explicit_rescore():
    vals = {1: 1.0, 2: 2.0, 3: 3.0}
    ev = scored(vals)
    ev.push_cached([1, 2, 3], 0.0)
    assert ev.pin([1, 99], expires_at_arrival=4) == 1  # 99 is not free
    vals[3] = -1.0
    assert ev.rescore([3, 3, 42], 0.0) == 1
    assert ev.pop(3, 0.0, 0) == [3, 2, 1]
    with pytest.raises(RuntimeError, match="needs a scored evictor"):
        Evictor(4).pin([0], 3)


def test_choose_victims_override_and_validation():
    vals = {i: float(i) for i in range(8)}
    picks = {"idx": [2]}
    seen = []

    def choose(ids, n, now):
        seen.append((list(ids), n))
        return picks["idx"]

    ev = Evictor(10, score=lambda ids, now: score_columns([vals[i] for i in ids], len(ids)), choose=choose)
    ev.push_cached([5, 1, 3, 7, 2], 0.0)
    assert ev.pop(1, 0.0, 0) == [3]
    assert seen == [([1, 2, 3, 5], 1)]  # min(len, 4 * n) lowest, lowest first
    picks["idx"] = None
    assert ev.pop(2, 0.0, 0) == [1, 2]  # None = the first n; 1, 2, 5 had gone back in at their rank
    ev.push_hashless([9])
    for bad in ([0, 0], [0, 1], [5], [], [-1], [0.0]):  # need is 1 (one hashless block)
        picks["idx"] = bad
        with pytest.raises(ValueError, match="choose_victims returned"):
            ev.pop(2, 0.0, 0)
        assert len(ev) == 3  # a refused choice takes nothing, the hashless block included
    picks["idx"] = [1]
    assert ev.pop(2, 0.0, 0) == [9, 7]  # hashless first, then candidate 1 of [5, 7]
    picks["idx"] = None
    assert ev.pop(1, 0.0, 0) == [5]


@given(st.lists(st.tuples(st.integers(-3, 3), st.booleans()), min_size=1, max_size=40))
def test_pop_order_is_tier_value_release_order(items):
    vals = {i: float(v) for i, (v, _) in enumerate(items)}
    adm = {i: a for i, (_, a) in enumerate(items)}
    ev = Evictor(len(items), score=lambda ids, now: score_columns([vals[i] for i in ids], len(ids)),
                 admit=lambda ids, now: [adm[i] for i in ids])
    ids = list(vals)
    ev.push_cached(ids[: len(ids) // 2], 0.0)
    ev.push_cached(ids[len(ids) // 2:], 0.0)
    want = sorted(ids, key=lambda i: (adm[i], vals[i], i))
    assert ev.pop(len(ids), 0.0, 0) == want
    assert len(ev) == 0 and not math.isnan(ev.pins_refused)
