"""A queue or LRU list whose rotation costs O(1): :class:`Ring`.

The classic policies walk their orders from the eviction end and move the
blocks they pass over to the newest end (:meth:`ClassicPolicy.walk
<spfcore_classic._base.ClassicPolicy.walk>`): a *rotation*. In an
``OrderedDict`` that costs one move per block passed over, and on long traces
(ARC's T2, most of it parents of T1 blocks) the passes grow with the trace.
Here the items sit on a circular doubly linked list with a ``head`` (the
eviction end); the item before the head is the newest. A rotation only moves
the head.

To say which of a few items comes first without walking to them, each item
carries an integer label: read from the head, labels rise modulo ``2**62``
(order-maintenance labels). A rotation keeps them rising (only the point
read from moves), so an item's position is ``(label - label(head)) mod
2**62``. New items go between the newest and the head; when no label is free
there, the labels of the smallest aligned range of labels around that point
that is sparse enough are spread evenly (Bender, Cole, Demaine, Farach-Colton
and Zito, ESA 2002, "Two simplified algorithms for maintaining order in a
list": amortized O(log n) labels rewritten per insertion).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator

BITS = 62
SPAN = 1 << BITS  # labels are 0 .. SPAN - 1, compared modulo SPAN from the head's
MASK = SPAN - 1
STEP = 1 << 32  # the label distance of a new item from the newest while the free range is wide
# a range of 2**k labels may hold at most (2 / T)**k items after a relabel (T = 1.5): 5.5e7 items at k = 62
CAP = [(4 / 3) ** k for k in range(BITS + 1)]


class Ring(dict):
    """An order of distinct hashable items, first = eviction end (the oldest
    or least recently used), last = newest.

    A ``dict`` of item -> ``[item before, item after, label]`` (the first
    item's "before" is the last; see the module for the label), so that
    ``len`` and ``in`` cost what a dict's do; change it only through the
    methods below (``dict``'s own writers would break the ring), and iterate
    over the ring itself (in its order; ``keys()`` is not in it).

    Costs: :meth:`remove`, :meth:`rotate_to` O(1); :meth:`append`,
    :meth:`move_to_end` O(1) but for the labels made room for now and then
    (amortized O(log n); on issue 19's scale trace one in 40-70 insertions
    relabels, ~20 items each); :meth:`first_of` O(its items); iteration
    from the first item, O(1) per item. Mutating the ring while iterating
    over it is not supported (the walk of the classic policies iterates,
    then rotates).
    """

    __slots__ = ("head",)

    def __init__(self, items: Iterable[Hashable] = ()) -> None:
        super().__init__()
        self.head = None  # the first item (None when empty)
        self.extend(items)

    def __iter__(self) -> Iterator:
        i = self.head
        for _ in range(len(self)):
            yield i
            i = self[i][1]

    def __repr__(self) -> str:
        return f"Ring({list(self)!r})"

    def __eq__(self, other) -> bool:
        """Equal to a :class:`Ring` of the same items in the same order
        (``dict``'s own ``==`` would compare the nodes, blind to the head:
        a ring and its rotation equal)."""
        if not isinstance(other, Ring):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # (a dict: unhashable)

    def copy(self) -> Ring:
        """A new ring of the same items in the same order (``dict.copy``
        would return a plain dict of the nodes, which share their lists)."""
        return Ring(self)

    def clear(self) -> None:
        super().clear()
        self.head = None

    def append(self, item) -> None:
        """Put ``item`` (not in the ring) last. Raises ``KeyError`` if it is in the ring."""
        if item in self:
            raise KeyError(item)
        h = self.head
        if h is None:
            self.head = item
            self[item] = [item, item, 0]
            return
        first = self[h]
        t = first[0]
        last = self[t]
        gap = (first[2] - last[2]) & MASK or SPAN  # labels from the last to the first (all of them: one item)
        step = STEP if gap > 2 * STEP else gap >> 1
        self[item] = [t, h, (last[2] + step) & MASK if step else self._make_room(t, len(self))]
        last[1] = first[0] = item

    def extend(self, items: Iterable[Hashable]) -> None:
        """:meth:`append` each of ``items``, in order."""
        for i in items:
            self.append(i)

    def remove(self, item) -> None:
        """Take ``item`` out. Raises ``KeyError`` if it is not in the ring."""
        p, n, _ = self.pop(item)
        if n == item:  # the only one
            self.head = None
            return
        self[p][1] = n
        self[n][0] = p
        if self.head == item:
            self.head = n

    def move_to_end(self, item) -> None:
        """Make ``item`` (in the ring) the last; O(1) (the first: a rotation by one)."""
        h = self.head
        node = self[item]
        if item == h:
            self.head = node[1]
        elif node[1] != h:  # not the last already: unlinked, and linked in before the first
            p, n, _ = node
            self[p][1] = n
            self[n][0] = p
            first = self[h]
            t = first[0]
            last = self[t]
            gap = (first[2] - last[2]) & MASK
            step = STEP if gap > 2 * STEP else gap >> 1
            node[:] = t, h, (last[2] + step) & MASK if step else self._make_room(t, len(self) - 1)
            last[1] = first[0] = item

    def rotate_to(self, item) -> None:
        """Make ``item`` (in the ring) the first: the items before it move to
        the end, in their order (as a walk that passes over them moves them);
        O(1). Raises ``KeyError`` if it is not in the ring."""
        if item not in self:
            raise KeyError(item)
        self.head = item

    def first_of(self, items: Iterable[Hashable]):
        """The one of ``items`` (all in the ring, at least one) nearest the
        first item: O(len(items)), by labels."""
        h = self[self.head][2]
        return min(items, key=lambda i: (self[i][2] - h) & MASK)

    def _make_room(self, t, n: int) -> int:
        """Spread the labels around the point after ``t``, the last of the
        ``n`` items linked in the ring, so that one more fits there; returns
        the new item's label.

        The range relabeled is the smallest aligned range of ``2**k`` labels
        holding ``t``'s label whose items, with the new one, number at most
        ``CAP[k]`` (all of them at ``k = BITS``); its items are a stretch of
        the ring around that point (labels rise from the head), relabeled
        evenly in their order."""
        lt = self[t][2]
        back, fwd = [self[t]], []  # the stretch's nodes: from t backwards, and from the head forwards
        for k in range(1, BITS + 1):
            a = lt >> k << k
            b = a + (1 << k)
            node = self[back[-1][0]]
            while len(back) + len(fwd) < n and a <= node[2] < b:
                back.append(node)
                node = self[node[0]]
            node = self[fwd[-1][1]] if fwd else self[self.head]
            while len(back) + len(fwd) < n and a <= node[2] < b:
                fwd.append(node)
                node = self[node[1]]
            m = len(back) + len(fwd) + 1
            if m <= CAP[k] or k == BITS:
                break
        gap = (b - a) // m
        back.reverse()
        for r, node in enumerate(back):
            node[2] = a + r * gap + (gap >> 1)
        for r, node in enumerate(fwd, len(back) + 1):
            node[2] = a + r * gap + (gap >> 1)
        return a + len(back) * gap + (gap >> 1)


class ParkingRing(Ring):
    """A :class:`Ring` with parked items (see the module): a second list
    threaded through the ring holds the active (not parked) items, in the
    ring's order. A ``dict`` of item -> ``[item before, item after, label,
    active item before, active item after]`` (the last two ``None`` for a
    parked item); ``ahead`` is the first active item from the head on,
    ``nact`` the number of active items.

    Costs: as :class:`Ring`, each link also made in the active list;
    :meth:`park` O(1); :meth:`take` O(the active items it passes);
    :meth:`wake` O(1) for an item before the first or after the last active
    one, else O(the fewest items between it and an active one: parked ones
    in the order on either side, or active ones from either end).
    """

    __slots__ = ("ahead", "nact")

    def __init__(self, items: Iterable[Hashable] = ()) -> None:
        super().__init__()
        self.head = None  # the first item (None when empty)
        self.ahead = None  # the first active item from the head on (None when none is active)
        self.nact = 0  # active items
        self.extend(items)


    def copy(self) -> ParkingRing:
        """A new ring of the same items in the same order, all active."""
        return ParkingRing(self)


    def clear(self) -> None:
        super().clear()
        self.head = self.ahead = None
        self.nact = 0


    def active(self) -> Iterator:
        """The active (not parked) items, in the ring's order from the head."""
        i = self.ahead
        for _ in range(self.nact):
            yield i
            i = self[i][4]


    def append(self, item) -> None:
        """Put ``item`` (not in the ring) last. Raises ``KeyError`` if it is in the ring."""
        if item in self:
            raise KeyError(item)
        h = self.head
        if h is None:
            self.head = self.ahead = item
            self[item] = [item, item, 0, item, item]
            self.nact = 1
            return
        first = self[h]
        t = first[0]
        last = self[t]
        gap = (first[2] - last[2]) & MASK or SPAN  # labels from the last to the first (all of them: one item)
        step = STEP if gap > 2 * STEP else gap >> 1
        label = (last[2] + step) & MASK if step else self._make_room(t, len(self))
        a = self.ahead  # the last active item, then the first
        if a is None:
            self[item] = [t, h, label, item, item]
            self.ahead = item
        else:
            an = self[a]
            ap = an[3]
            self[item] = [t, h, label, ap, a]
            self[ap][4] = an[3] = item
        self.nact += 1
        last[1] = first[0] = item


    def extend(self, items: Iterable[Hashable]) -> None:
        """:meth:`append` each of ``items``, in order (a list of new items
        that fits in the labels between the last item and the first: linked
        in one pass, the labels :meth:`append` would give)."""
        h = self.head
        if h is None or type(items) is not list or len(items) < 2 or not self.keys().isdisjoint(items) \
                or len(set(items)) != len(items):
            for i in items:
                self.append(i)
            return
        first = self[h]
        t = first[0]
        last = self[t]
        lab = last[2]
        if (first[2] - lab) & MASK <= 2 * STEP * len(items):  # room for some only: one by one
            for i in items:
                self.append(i)
            return
        if self.ahead is None:  # no active item: the first new one starts them
            i0 = items[0]
            lab = (lab + STEP) & MASK
            last[1] = first[0] = i0
            t, last = i0, [t, h, lab, i0, i0]
            self[i0] = last
            self.ahead, self.nact = i0, 1
            items = items[1:]
        a = self.ahead
        ap = self[a][3]  # the last active item
        pl = self[ap]
        for i in items:  # each linked after the last item and the last active one
            lab = (lab + STEP) & MASK
            node = self[i] = [t, h, lab, ap, a]
            last[1] = pl[4] = i
            t = ap = i
            last = pl = node
        first[0] = self[a][3] = t
        self.nact += len(items)


    def remove(self, item) -> None:
        """Take ``item`` out. Raises ``KeyError`` if it is not in the ring."""
        p, n, _, ap, an = self.pop(item)
        if n == item:  # the only one
            self.head = self.ahead = None
            self.nact = 0
            return
        self[p][1] = n
        self[n][0] = p
        if self.head == item:
            self.head = n
        if ap is not None:  # active
            self.nact -= 1
            if an == item:
                self.ahead = None
            else:
                self[ap][4] = an
                self[an][3] = ap
                if self.ahead == item:
                    self.ahead = an


    def move_to_end(self, item) -> None:
        """Make ``item`` (in the ring) the last; O(1) (the first: a rotation by one)."""
        h = self.head
        node = self[item]
        if item == h:
            self.head = node[1]
            if item == self.ahead:  # (an active first item is ahead; it stays where it is among them)
                self.ahead = node[4]
        elif node[1] != h:  # not the last already: unlinked, and linked in before the first
            p, n = node[0], node[1]
            self[p][1] = n
            self[n][0] = p
            first = self[h]
            t = first[0]
            last = self[t]
            gap = (first[2] - last[2]) & MASK
            step = STEP if gap > 2 * STEP else gap >> 1
            node[0], node[1], node[2] = t, h, (last[2] + step) & MASK if step else self._make_room(t, len(self) - 1)
            last[1] = first[0] = item
            ap = node[3]
            if ap is not None and self.nact > 1:  # active: the last active item too
                an = node[4]
                a = self.ahead
                if a == item:
                    a = self.ahead = an
                if an != a:  # not the last active item already
                    self[ap][4] = an
                    self[an][3] = ap
                    na = self[a]
                    ap = na[3]
                    node[3], node[4] = ap, a
                    self[ap][4] = na[3] = item


    def rotate_to(self, item) -> None:
        """Make ``item`` (in the ring) the first: the items before it move to
        the end, in their order (as a walk that passes over them moves them);
        O(1). Raises ``KeyError`` if it is not in the ring."""
        node = self[item]
        self.head = item
        if node[3] is not None:
            self.ahead = item
        elif self.nact:  # a parked item: the first active one after it
            self.ahead = self._next_active(item)


    def _next_active(self, item):
        """The first active item after ``item`` (there is one), going round."""
        node = self[self[item][1]]
        while node[3] is None:
            node = self[node[1]]
        return self[node[3]][4]


    def park(self, item) -> None:
        """Take ``item`` (active) out of the active items; it keeps its place in the order."""
        node = self[item]
        ap, an = node[3], node[4]
        node[3] = node[4] = None
        self.nact -= 1
        if an == item:
            self.ahead = None
            return
        self[ap][4] = an
        self[an][3] = ap
        if self.ahead == item:
            self.ahead = an


    def is_parked(self, item) -> bool:
        """``item`` (in the ring) is parked."""
        return self[item][3] is None


    def wake(self, item) -> None:
        """Make ``item`` (parked) active again, between its nearest active
        neighbours in the order: found by label from both ends of the active
        items and, in the order, from ``item`` on both sides, all four in
        step (the first to arrive decides). The usual case, a block woken
        near the head or the end, is O(1)."""
        node = self[item]
        if not self.nact:
            node[3] = node[4] = item
            self.ahead = item
            self.nact = 1
            return
        h = self[self.head][2]
        x = (node[2] - h) & MASK  # item's position from the head
        a = self.ahead
        fa = self[a]
        z = fa[3]  # the last active item
        fz = self[z]
        if x < (fa[2] - h) & MASK:  # between the head and the first active item
            p, s = z, a
            self.ahead = item
        elif x > (fz[2] - h) & MASK:  # after the last active item
            p, s = z, a
        else:
            f, b = self[node[1]], self[node[0]]
            fa, fz = self[fa[4]], self[fz[3]]  # a < item < z: from the second and the last but one
            while True:
                if f[3] is not None:  # f is active: item goes before it
                    p = f[3]
                    s = self[p][4]
                    break
                if b[3] is not None:  # b is active: item goes after it
                    s = b[4]
                    p = self[s][3]
                    break
                if (fa[2] - h) & MASK > x:  # the first active item after item
                    p = fa[3]
                    s = self[p][4]
                    break
                if (fz[2] - h) & MASK < x:  # the last active item before item
                    s = fz[4]
                    p = self[s][3]
                    break
                f, b, fa, fz = self[f[1]], self[b[0]], self[fa[4]], self[fz[3]]
        node[3], node[4] = p, s
        self[p][4] = self[s][3] = item
        self.nact += 1


    def take(self, free, kids, key, parked) -> Hashable | None:
        """The walk of the classic policies (:meth:`ClassicPolicy.walk
        <spfcore_classic._base.ClassicPolicy.walk>`) over the active items:
        the first item ``i`` in ``free`` with no cached child
        (``kids.get(key[i])`` falsy) becomes the first (:meth:`rotate_to`)
        and is returned; each item passed that has a cached child is parked
        and ``(self, i)`` appended to ``parked[key[i]]`` (its owner wakes it
        when that hash loses its last child). ``None`` when no active item is
        evictable (the order is left as it is; every active item is then a
        leaf not in ``free``)."""
        i = self.ahead
        for _ in range(self.nact):
            node = self[i]
            k = key[i]
            if kids.get(k):
                parked.setdefault(k, []).append((self, i))
                ap, an = node[3], node[4]
                node[3] = node[4] = None
                self.nact -= 1
                if an == i:
                    self.ahead = None
                    return None
                self[ap][4] = an
                self[an][3] = ap
                if self.ahead == i:
                    self.ahead = an
                i = an
            elif i in free:
                self.head = self.ahead = i
                return i
            else:
                i = node[4]
        return None
