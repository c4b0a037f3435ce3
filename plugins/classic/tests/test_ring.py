""":class:`Ring` is an ``OrderedDict`` of keys whose rotation is O(1): the
same orders under random operations (a differential test against the
``OrderedDict`` moves it replaces), with labels that keep rising from the
head, also when they run out between the last item and the first."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from spfcore_classic import _ring
from spfcore_classic._ring import ParkingRing, Ring


def _rising(r: Ring) -> bool:
    """Labels read from the head rise (modulo the label span): the invariant :meth:`Ring.first_of` needs."""
    h = r[r.head][2] if len(r) else 0
    keys = [(r[i][2] - h) & _ring.MASK for i in r]
    return keys == sorted(keys) and len(set(keys)) == len(keys)


def _rotate(od: OrderedDict, i) -> None:
    """The old way: the keys before ``i`` move to the end, one by one."""
    for j in list(od):
        if j == i:
            return
        od.move_to_end(j)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("step_bits", [32, 3, 0])  # 3, 0: the labels between last and first run out at once
def test_ring_orders_as_an_ordereddict_under_random_operations(seed, step_bits, monkeypatch):
    monkeypatch.setattr(_ring, "STEP", 1 << step_bits)
    if step_bits < 32:  # a small label span: relabels of every size, up to all labels
        monkeypatch.setattr(_ring, "BITS", 16)
        monkeypatch.setattr(_ring, "SPAN", 1 << 16)
        monkeypatch.setattr(_ring, "MASK", (1 << 16) - 1)
        monkeypatch.setattr(_ring, "CAP", [(4 / 3) ** k for k in range(17)])
    rng = random.Random(seed)
    r, od = Ring(), OrderedDict()
    relabels = 0
    make_room = Ring._make_room

    def counting(self, t, n):
        nonlocal relabels
        relabels += 1
        return make_room(self, t, n)

    monkeypatch.setattr(Ring, "_make_room", counting)
    fresh = iter(range(10**9))
    for step in range(4000):
        op = rng.random()
        if op < 0.35 or not od:  # append (a batch of new items, as a request's blocks)
            new = [next(fresh) for _ in range(rng.randint(1, 6))]
            r.extend(new)
            od.update(dict.fromkeys(new))
        elif op < 0.55:  # a hit: to the newest end
            i = rng.choice(list(od))
            r.move_to_end(i)
            od.move_to_end(i)
        elif op < 0.75:  # a rotation to one of a few items: the first of them in the order
            few = rng.sample(list(od), min(len(od), rng.randint(1, 8)))
            i = r.first_of(few)
            assert i == next(j for j in od if j in few)
            r.rotate_to(i)
            _rotate(od, i)
        else:  # an eviction: mostly near the first item, sometimes anywhere
            i = next(iter(od)) if rng.random() < 0.5 else rng.choice(list(od))
            r.remove(i)
            del od[i]
        assert len(r) == len(od)
        if step % 97 == 0 or len(od) < 3:
            assert list(r) == list(od)
            assert [i in r for i in range(-1, 40)] == [i in od for i in range(-1, 40)]
            assert _rising(r), step
    assert list(r) == list(od) and _rising(r)
    if step_bits < 32:
        assert relabels > 10  # the relabel path ran, many times


def test_ring_basics():
    r = Ring([1, 2, 3, 4])
    assert list(r) == [1, 2, 3, 4] and len(r) == 4 and 3 in r and 9 not in r
    r.rotate_to(3)
    assert list(r) == [3, 4, 1, 2]  # the items before 3 moved to the end, in their order
    assert r.first_of([2, 4, 1]) == 4
    r.move_to_end(3)  # the first: a rotation by one
    assert list(r) == [4, 1, 2, 3]
    r.move_to_end(1)
    assert list(r) == [4, 2, 3, 1]
    r.move_to_end(1)  # already last
    assert list(r) == [4, 2, 3, 1]
    r.remove(4)
    r.append(7)
    assert list(r) == [2, 3, 1, 7] and _rising(r)
    with pytest.raises(KeyError):
        r.append(7)
    with pytest.raises(KeyError):
        r.rotate_to(4)
    for i in [2, 3, 1, 7]:
        r.remove(i)
    assert list(r) == [] and r.head is None and not r
    r.append("a")
    assert list(r) == ["a"]
    r.clear()
    assert len(r) == 0 and r.head is None


def test_ring_relabels_a_small_stretch_when_labels_run_out():
    # appended at a point whose labels are used up: a few labels around it are rewritten, not all
    r = Ring(range(1000))
    r.rotate_to(500)  # the cut is now between 499 and 500: 2**32 labels apart
    rewritten, relabels = [], 0
    for i in range(1000, 1300):  # 32 halvings use the gap up; then relabels
        before = {i: r[i][2] for i in r}
        r.append(i)
        changed = [j for j in before if r[j][2] != before[j]]
        relabels += bool(changed)
        rewritten += changed
    assert list(r) == list(range(500, 1000)) + list(range(500)) + list(range(1000, 1300))
    assert _rising(r)
    assert relabels >= 5
    assert len(rewritten) < 20 * 300  # amortized: tens of labels per append, not the ring's 1,300
    assert {j for j in rewritten if j < 1000} <= set(range(490, 510))  # old items: only next to the cut


# --- review 11: adversarial sequences on a tiny label space (every insertion near exhaustion) ---

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_OPS = st.lists(st.tuples(st.sampled_from(["append", "move", "rotate", "remove", "remove_head", "clear",
                                           "first_of", "move_head"]),
                          st.integers(0, 10**6), st.integers(1, 5)), max_size=300)


@settings(max_examples=300, deadline=None)
@given(ops=_OPS, bits=st.sampled_from([6, 7, 9]), step_bits=st.integers(0, 3))
def test_ring_matches_ordereddict_on_a_tiny_label_space(ops, bits, step_bits):
    """At most 40 items in 2**6..2**9 labels: relabels at every level up to
    the whole span, removals of the head, the empty ring and one item."""
    saved = _ring.BITS, _ring.SPAN, _ring.MASK, _ring.STEP, _ring.CAP
    _ring.BITS, _ring.SPAN, _ring.MASK = bits, 1 << bits, (1 << bits) - 1
    _ring.STEP, _ring.CAP = 1 << step_bits, [(4 / 3) ** k for k in range(bits + 1)]
    try:
        r, od, fresh = Ring(), OrderedDict(), 0
        for op, x, n in ops:
            items = list(od)
            if op == "append" or not items:
                for _ in range(n if len(od) + n <= 40 else 0):
                    r.append(fresh)
                    od[fresh] = None
                    fresh += 1
            elif op == "move":
                i = items[x % len(items)]
                r.move_to_end(i)
                od.move_to_end(i)
            elif op == "move_head":  # the first: a rotation by one
                r.move_to_end(items[0])
                od.move_to_end(items[0])
            elif op == "rotate":
                i = items[x % len(items)]
                r.rotate_to(i)
                _rotate(od, i)
            elif op == "first_of":
                few = {items[(x + 7 * j) % len(items)] for j in range(n)}
                assert r.first_of(few) == next(j for j in od if j in few)
            elif op == "remove_head":
                r.remove(items[0])
                del od[items[0]]
            elif op == "remove":
                i = items[x % len(items)]
                r.remove(i)
                del od[i]
            else:
                r.clear()
                od.clear()
            assert list(r) == list(od) and len(r) == len(od)
            assert (r.head is None) == (not od)
            assert _rising(r)
            assert all(0 <= r[i][2] < _ring.SPAN for i in r)
    finally:
        _ring.BITS, _ring.SPAN, _ring.MASK, _ring.STEP, _ring.CAP = saved


def test_ring_equality_and_copy_follow_the_order():
    r = Ring([1, 2, 3])
    r.rotate_to(2)
    assert r != Ring([1, 2, 3]) and not r == Ring([1, 2, 3])  # the same nodes, another head
    assert r == Ring([2, 3, 1])  # the same order (labels differ)
    c = r.copy()
    assert type(c) is Ring and list(c) == [2, 3, 1] and c == r
    c.move_to_end(2)
    assert list(r) == [2, 3, 1] and list(c) == [3, 1, 2]  # no shared nodes


def _active_ok(r: ParkingRing) -> bool:
    """The active items are the ring's unparked ones, in its order from the head (issue 19e)."""
    want = [i for i in r if not r.is_parked(i)]
    return list(r.active()) == want and r.nact == len(want) and r.ahead == (want[0] if want else None)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("step_bits", [32, 3])
def test_ring_parking_keeps_the_order_and_the_active_items(seed, step_bits, monkeypatch):
    # random appends / hits / rotations / removals, as above, mixed with parks and wakes (most
    # items parked, as in S3-FIFO's small queue): the order is the OrderedDict's, the active items
    # are the unparked ones in that order, and take() finds the first "evictable" active item
    monkeypatch.setattr(_ring, "STEP", 1 << step_bits)
    if step_bits < 32:
        monkeypatch.setattr(_ring, "BITS", 16)
        monkeypatch.setattr(_ring, "SPAN", 1 << 16)
        monkeypatch.setattr(_ring, "MASK", (1 << 16) - 1)
        monkeypatch.setattr(_ring, "CAP", [(4 / 3) ** k for k in range(17)])
    rng = random.Random(seed)
    r, od = ParkingRing(), OrderedDict()
    fresh = iter(range(10**9))
    for step in range(3000):
        op = rng.random()
        parked = [i for i in od if r.is_parked(i)]
        if op < 0.25 or not od:
            new = [next(fresh) for _ in range(rng.randint(1, 6))]
            r.extend(new)
            od.update(dict.fromkeys(new))
        elif op < 0.35:
            i = rng.choice(list(od))
            r.move_to_end(i)
            od.move_to_end(i)
        elif op < 0.45:  # rotation to an item (a parked one now and then)
            i = rng.choice(list(od))
            r.rotate_to(i)
            _rotate(od, i)
        elif op < 0.55:
            i = next(iter(od)) if rng.random() < 0.5 else rng.choice(list(od))
            r.remove(i)
            del od[i]
        elif op < 0.75 and r.nact:
            r.park(rng.choice(list(r.active())))
        elif op < 0.85 and parked:
            r.wake(rng.choice(parked))
        else:  # take: items with kids (odd here) are parked, the first even free one is taken
            kids = {i: i % 2 for i in od}
            free = {i for i in od if rng.random() < 0.7}
            want = next((i for i in r.active() if not kids[i] and i in free), None)
            passed = [] if want is None else list(r.active())[: list(r.active()).index(want)]
            book: dict = {}
            got = r.take(free, kids, {i: i for i in od}, book)
            assert got == want
            if got is not None:
                _rotate(od, got)
                assert all(r.is_parked(i) == bool(kids[i]) for i in passed)
            assert all(r.is_parked(i) for i in book)
        assert len(r) == len(od)
        assert list(r) == list(od) and _active_ok(r) and _rising(r), step


@pytest.mark.parametrize("seed", range(4))
def test_ring_extend_links_a_batch_as_appends_one_by_one(seed):
    # extend()'s one-pass linking (a list that fits in the labels) gives append()'s labels, order
    # and active items, also with parked items and with none active
    rng = random.Random(seed)
    r, ref = ParkingRing(), ParkingRing()
    fresh = iter(range(10**9))
    for step in range(400):
        op = rng.random()
        if op < 0.4 or not len(r):
            new = [next(fresh) for _ in range(rng.randint(1, 7))]
            r.extend(new)
            for i in new:
                ref.append(i)
        elif op < 0.6:
            i = rng.choice(list(r))
            r.rotate_to(i), ref.rotate_to(i)
        elif op < 0.7:
            i = rng.choice(list(r))
            r.remove(i), ref.remove(i)
        elif op < 0.9 and r.nact:
            i = rng.choice(list(r.active()))
            r.park(i), ref.park(i)
        elif len(r):
            ps = [i for i in r if r.is_parked(i)]
            if ps:
                i = rng.choice(ps)
                r.wake(i), ref.wake(i)
        assert dict.__eq__(r, ref) and (r.head, r.ahead, r.nact) == (ref.head, ref.ahead, ref.nact), step
        assert _active_ok(r)
    with pytest.raises(KeyError):
        r.extend([next(fresh), next(iter(r))])
