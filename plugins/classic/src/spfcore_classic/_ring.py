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
