"""Differential test of the scored evictor (numba, :mod:`spfcore._evictor_nb`)
against the pure-Python evictor it replaced (``tests/_evictor_ref.py``, main's
``spfcore/evictor.py`` before issue 11 part 4, kept verbatim as the reference
model): random operation sequences (releases with values, expiries in seconds
and arrivals and pins, hits, re-scores, expiry re-scores, pins, pops with and
without a victim hook, unpops, failing hooks) must give the same victims, in
the same order, and the same entries ``(tier, value, order, version)``, pins
and counters after every step."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from spfcore.evictor import Evictor

_spec = importlib.util.spec_from_file_location("_evictor_ref", Path(__file__).with_name("_evictor_ref.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)


class Boom(RuntimeError):
    pass


def _hooks(rng_seed: int, fail: dict, clock: dict | None = None):
    """score / admit / choose callbacks that are pure functions of (ids, now,
    call count), so both evictors get the same answers; ``fail['at']`` makes
    that score call raise. With ``clock`` (``{"a": arrival}``) the arrival
    expiries lie around the clock instead: near it, at the ends of the
    evictor's calendar window (2,048 arrivals), beyond it, and fractional."""
    calls = {"score": 0}

    def score(ids, now):
        calls["score"] += 1
        if fail.pop("next", False) or calls["score"] == fail.get("at"):
            raise Boom
        r = random.Random(hash((rng_seed, tuple(ids), now)) & 0xFFFFFFFF)
        vals = [float(r.choice((0, 1, 2, 2.5, -1))) for _ in ids]
        kind = r.random()
        exp_t = [r.choice((float("inf"), now + r.choice((0.5, 1.0, 2.0)))) for _ in ids] if kind < 0.5 else None
        if clock is None:
            exp_a = [r.choice((2**62, r.randrange(0, 12))) for _ in ids] if 0.3 < kind < 0.8 else None
        else:
            a = clock["a"]
            exp_a = [r.choice((2**62, a + r.randrange(-2, 12), a + r.choice((2046, 2047, 2048, 2049, 5000)),
                               a + r.randrange(0, 4) + 0.5)) for _ in ids] if 0.3 < kind < 0.8 else None
        pins = None
        if kind > 0.6:
            pins = [r.random() < 0.3 for _ in ids]
            if exp_a is None:
                exp_a = [2**62] * len(ids)
            exp_a = [x if not p or x < 2**62 else 7 for x, p in zip(exp_a, pins)]
        return vals, exp_t, exp_a, pins

    def admit(ids, now):
        return [(i * 7 + int(now)) % 5 != 0 for i in ids]

    def choose(ids, n, now):
        return list(range(len(ids) - n, len(ids)))  # the highest-ranked candidates

    return score, admit, choose


def _state(ev) -> tuple:
    if isinstance(ev, Evictor):
        s = ev.snapshot()
        entry = {i: e for i, e in s["entry"].items()}
        return entry, set(s["pinned"]), list(s["hashless"]), ev.pins_refused, len(ev)
    return ({i: tuple(e) for i, e in ev._entry.items()}, set(ev._pinned), list(ev._hashless),
            ev.pins_refused, len(ev))


@pytest.mark.parametrize(("seed", "wide", "m"), [(s, w, 1) for s in range(40) for w in (False, True)]
                         + [(s, w, 12) for s in range(6) for w in (False, True)])
def test_scored_evictor_matches_reference(seed, wide, m):
    """``wide``: arrival expiries around the clock (see :func:`_hooks`) and
    the clock sometimes jumping past the calendar's window. ``m``: pool and
    batch sizes times ``m`` (12: batches of 64 blocks and more, a quarter of
    the free blocks, take the evictor's bulk path, which rebuilds the order)."""
    rng = random.Random(seed)
    clock = {"a": 0} if wide else None
    use_admit, use_choose, cap = rng.random() < 0.5, rng.random() < 0.4, rng.choice((0.1, 0.5))
    fail_new, fail_ref = {}, {}
    mk = []
    for cls, fail in ((Evictor, fail_new), (ref.Evictor, fail_ref)):
        score, admit, choose = _hooks(seed, fail, clock)
        mk.append(cls(64 * m, score=score, admit=admit if use_admit else None,
                      choose=choose if use_choose else None, pin_cap_fraction=cap))
    new, old = mk
    def both(fn):
        res = []
        for ev in (new, old):
            try:
                res.append(fn(ev))
            except Boom:
                res.append(Boom)
        assert res[0] == res[1]
        return res[0]

    free: set[int] = set()
    used = set(range(80 * m))  # block ids in use (not free)
    now, arrival = 0.0, 0
    for step in range(120):
        op = rng.random()
        prev = (_state(new), new.snapshot())
        if op < 0.3 and used:
            ids = rng.sample(sorted(used), rng.randint(1, min(12 * m, len(used))))
            cached = ids[: len(ids) - rng.randint(0, 1)]
            hashless = ids[len(cached):]
            if both(lambda ev: ev.push_cached(cached, now)) is Boom:
                cached = []
            both(lambda ev: ev.push_hashless(hashless))
            used -= set(cached + hashless)
            free |= set(cached + hashless)
        elif op < 0.45 and free:
            cached = [i for i in free if i not in new._hashless]
            if cached:
                i = rng.choice(sorted(cached))
                new.remove(i)
                old.remove(i)
                free.discard(i)
                used.add(i)
        elif op < 0.55:
            ids = [rng.randrange(80 * m) for _ in range(rng.randint(1, 8 * m))]
            both(lambda ev: ev.rescore(ids, now))
        elif op < 0.65:
            now += rng.choice((0.0, 0.5, 1.0))
            arrival += rng.randint(0, 2) if not wide or rng.random() < 0.8 else rng.choice((2047, 2048, 3000))
            if wide:
                clock["a"] = arrival
            if rng.random() < 0.3:  # the next score call fails: both stay as before
                fail_new["next"] = fail_ref["next"] = True
            both(lambda ev: ev.rescore_expired(now, arrival))
            fail_new.pop("next", None)
            fail_ref.pop("next", None)
        elif op < 0.72:
            ids = [rng.randrange(80 * m) for _ in range(rng.randint(1, 6 * m))]
            x = rng.randint(arrival, arrival + 5)
            both(lambda ev: ev.pin(ids, x))
        elif len(new):
            n = rng.randint(1, min(6 * m, len(new)))
            a, b = new.pop(n, now, arrival), old.pop(n, now, arrival)
            assert a == b
            if rng.random() < 0.3:
                new.unpop(a)
                old.unpop(b)
            else:
                free -= set(a)
                used |= set(a)
        assert _state(new) == _state(old), (step, op, prev)
        assert new.num_pinned == old.num_pinned == len(_state(new)[1]), step
    # drain both: the whole remaining order is the same
    n = len(new)
    assert new.pop(n, now + 100, arrival + 100) == old.pop(n, now + 100, arrival + 100)


def test_failing_score_hook_leaves_both_as_before():
    fail_new, fail_ref = {}, {}
    evs = []
    for cls, fail in ((Evictor, fail_new), (ref.Evictor, fail_ref)):
        score, _, _ = _hooks(7, fail)
        evs.append(cls(32, score=score))
    new, old = evs
    for ev in evs:
        ev.push_cached(list(range(10)), 0.0)
    before = new.snapshot()
    fail_new["at"] = fail_ref["at"] = 2
    for ev in evs:
        with pytest.raises(Boom):
            ev.rescore(list(range(10)), 1.0)
    assert new.snapshot() == before
    assert _state(new) == _state(old)
    assert new.pop(10, 50.0, 50) == old.pop(10, 50.0, 50)


def test_loaded_numba_survives_vllms_module_scan():
    """vLLM's CPU worker, when it starts, reads ``vars(value).get("kernel")``
    for every attribute of every loaded module (vllm/triton_utils/dispatcher.py);
    with numba loaded by a scored evictor first, llvmlite's ``ffi.lib`` made
    that raise and the engine did not start (the engine runner builds a
    scored runtime before the engine; the gate runs sim cells first)."""
    import sys

    Evictor(8, score=lambda ids, now: None)  # loads numba + llvmlite
    assert "llvmlite.binding.ffi" in sys.modules
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not namespace:
            continue
        for value in list(namespace.values()):
            if hasattr(value, "__dict__"):
                vars(value).get("kernel")  # raises AttributeError without the fix
    from llvmlite.binding import ffi
    assert ffi.lib.LLVMPY_GetVersionInfo() > 0  # the library still answers
