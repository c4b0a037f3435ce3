"""The re-score commit in one compiled call (``_evictor_nb.rescore``, session 22) leaves the
evictor exactly as the drain and ``Evictor._place`` it replaces did: the same entries,
expiries, pins and counters (``snapshot``), the same victims after it; over expiries in
the calendar, on the arrivals heap (fractional, far ahead), in seconds, pins, and one tier
or several (the heap rebuilt with or without the tier compared)."""

import copy

import numpy as np
import pytest

from spfcore import evictor as E
from spfcore.evictor import Evictor
from spfcore.views import NEVER_ARRIVAL


def _old_commit(ev: Evictor, plan) -> None:
    """``Evictor.commit`` before session 22: ``drain``, then ``_place`` at each block's own tier and order."""
    if plan is None:
        return
    clocks, cols, ids = plan
    if clocks is not None:
        E.nb.drain(clocks[0], clocks[1], ev._ib, ev._tk, ev._ti, ev._ak, ev._ai, ev._qe, ev._qb, ev._c)
    if len(ids):
        ev._place(ids, E._NONE_I, cols, E._NONE_I)


def _run(seed: int, tiers: bool, seconds: bool, pins: bool) -> int:
    """Returns the bulk re-scores (a quarter of the free blocks or more: the heap rebuilt)."""
    rng = np.random.default_rng(seed)
    nblk = 400
    state = {"t": 0}

    def mix(ids, salt):
        """Pseudo-random in [0, 1) per block id, arrival and salt (the same for both evictors)."""
        h = (np.asarray(ids, np.int64) * 2654435761 + state["t"] * 40503 + salt * 977 + seed * 7919) % 1000003
        return ((h * 69069) % 1000003) / 1000003.0

    def score(ids, now):
        n = len(ids)
        t = state["t"]
        vals = np.floor(mix(ids, 1) * 6)  # few distinct values: ties by release order
        ea = t + 1 + np.floor(mix(ids, 2) * 4)  # most expire within 4 arrivals: bulk re-scores
        far = mix(ids, 3) < 0.1
        ea[far] += 3000  # beyond the calendar: the arrivals heap
        ea[mix(ids, 4) < 0.1] += 0.5  # fractional: the arrivals heap
        ea[mix(ids, 5) < 0.15] = NEVER_ARRIVAL
        et = None
        if seconds:
            et = np.where(mix(ids, 6) < 0.3, now + mix(ids, 7) * 5, np.inf)
        pn = None
        if pins:
            pn = (mix(ids, 8) < 0.1) & (ea < NEVER_ARRIVAL)
        return vals, et, ea, pn

    def admit(ids, now):
        return mix(ids, 9) < 0.8

    ev = Evictor(nblk, score=score, admit=admit if tiers else None, pin_cap_fraction=0.05, score_arrays=True)
    held = list(range(nblk))  # blocks in use (not in the evictor)
    bulk = 0
    for t in range(1, 160):
        state["t"] = t
        now = float(t)
        live = int(ev._c[E.LIVE])
        plan = ev.plan_expired(now, t)
        ref = copy.deepcopy(ev)
        ev.commit(plan)
        _old_commit(ref, plan)
        assert ev.snapshot() == ref.snapshot()
        if plan is not None and len(plan[2]) >= 64 and 4 * len(plan[2]) >= live:
            bulk += 1  # (the heap rebuilt)
        rng.shuffle(held)  # a release of some blocks in use, then an allocation: both evictors alike
        k = int(rng.integers(0, 120))
        rel, held = held[:k], held[k:]
        if rel:
            for x in (ev, ref):
                x.push_cached(np.array(rel, np.int64), now)
        take = min(len(ev), int(rng.integers(0, 100)))
        if take:
            a, b = ev.pop(take, now, t), ref.pop(take, now, t)
            assert a == b
            held += a
        assert ev.snapshot() == ref.snapshot()
    return bulk


@pytest.mark.parametrize("tiers,seconds,pins", [(False, False, False), (True, False, False), (False, True, True),
                                                (True, True, True)])
def test_rescore_commit_matches_drain_and_place(tiers, seconds, pins):
    assert sum(_run(seed, tiers, seconds, pins) for seed in range(3)) > 30  # bulk re-scores among them


def test_rescore_plan_walks_the_calendar_entries_it_drains():
    """``due`` returns the calendar's entries in the buckets due, in bucket and chain order
    (commit's drain takes them back whole and re-uses them for its pushes)."""
    ev = Evictor(16, score=lambda ids, now: (np.ones(len(ids)), None, np.array([3.0, 3.0, 5.0])[:len(ids)], None),
                 score_arrays=True)
    ev.push_cached(np.array([1, 2, 3], np.int64), 0.0)  # expiries 3, 3, 5: three calendar entries
    assert ev.plan_expired(2.0, 2) is None
    plan = ev.plan_expired(4.0, 4)
    (now, arrival, walked), cols, ids = plan
    assert (now, arrival) == (4.0, 4.0) and ids.tolist() == [1, 2] and len(walked) == 2
    assert E.nb.q_entries(ev._qe, ev._qb, ev._c)[2].tolist() == [1, 2, 3]
    ev.commit(plan)
    # two entries drained; the new expiries (3, 3) lie before the window: the arrivals heap
    assert int(ev._c[E.QN]) == 1 and int(ev._c[E.AN]) == 2
