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
_NEW = object()  # the new item's place in a stretch being relabeled


class Ring:
    """An order of distinct hashable items, first = eviction end (the oldest
    or least recently used), last = newest.

    O(1): ``len``, ``in``, :meth:`append`, :meth:`remove`, :meth:`move_to_end`,
    :meth:`rotate_to`; :meth:`first_of` is O(its items); iteration from the
    first item, O(1) per item; :meth:`append` is amortized O(log n) (labels
    made room for). Mutating the ring while iterating over it is not
    supported (the walk of the classic policies iterates, then rotates).
    Memory: three dict entries per item.
    """

    __slots__ = ("head", "_next", "_prev", "_label")

    def __init__(self, items: Iterable[Hashable] = ()) -> None:
        self.head = None  # the first item (None when empty)
        self._next: dict = {}   # item -> the item after it (the first, after the last)
        self._prev: dict = {}   # item -> the item before it
        self._label: dict = {}  # item -> its label (see the module)
        self.extend(items)

    def __len__(self) -> int:
        return len(self._label)

    def __contains__(self, item) -> bool:
        return item in self._label

    def __iter__(self) -> Iterator:
        nxt, i = self._next, self.head
        for _ in range(len(self._label)):
            yield i
            i = nxt[i]

    def __repr__(self) -> str:
        return f"Ring({list(self)!r})"

    def clear(self) -> None:
        self.head = None
        self._next.clear()
        self._prev.clear()
        self._label.clear()

    def append(self, item) -> None:
        """Put ``item`` (not in the ring) last. Raises ``KeyError`` if it is in the ring."""
        lab = self._label
        if item in lab:
            raise KeyError(item)
        h = self.head
        if h is None:
            self.head = self._next[item] = self._prev[item] = item
            lab[item] = 0
            return
        nxt, prv = self._next, self._prev
        t = prv[h]
        gap = (lab[h] - lab[t]) & MASK or SPAN  # labels from the last to the first (all of them: one item)
        step = min(STEP, gap >> 1)
        lab[item] = (lab[t] + step) & MASK if step else self._make_room(t)
        nxt[t] = prv[h] = item
        nxt[item], prv[item] = h, t

    def extend(self, items: Iterable[Hashable]) -> None:
        """:meth:`append` each of ``items``, in order."""
        for i in items:
            self.append(i)

    def remove(self, item) -> None:
        """Take ``item`` out. Raises ``KeyError`` if it is not in the ring."""
        del self._label[item]
        p, n = self._prev.pop(item), self._next.pop(item)
        if n == item:  # the only one
            self.head = None
            return
        self._next[p], self._prev[n] = n, p
        if self.head == item:
            self.head = n

    def move_to_end(self, item) -> None:
        """Make ``item`` (in the ring) the last; O(1) (the first: a rotation by one)."""
        h = self.head
        if item == h:
            self.head = self._next[h]
        elif self._next[item] != h:
            self.remove(item)
            self.append(item)

    def rotate_to(self, item) -> None:
        """Make ``item`` (in the ring) the first: the items before it move to
        the end, in their order (as a walk that passes over them moves them);
        O(1). Raises ``KeyError`` if it is not in the ring."""
        if item not in self._label:
            raise KeyError(item)
        self.head = item

    def first_of(self, items: Iterable[Hashable]):
        """The one of ``items`` (all in the ring, at least one) nearest the
        first item: O(len(items)), by labels."""
        lab, h = self._label, self._label[self.head]
        return min(items, key=lambda i: (lab[i] - h) & MASK)

    def _make_room(self, t) -> int:
        """Spread the labels around the point after ``t``, the last item, so
        that one more fits there; returns the new item's label.

        The range relabeled is the smallest aligned range of ``2**k`` labels
        holding ``t``'s label whose items, with the new one, number at most
        ``CAP[k]`` (all of them at ``k = BITS``); its items are a stretch of
        the ring around that point (labels rise from the head), relabeled
        evenly in their order."""
        nxt, prv, lab, h = self._next, self._prev, self._label, self.head
        n, lt = len(lab), lab[t]
        back, fwd = [t], []  # the stretch: from t backwards, and from the head forwards
        for k in range(1, BITS + 1):
            a = lt >> k << k
            b = a + (1 << k)
            j = prv[back[-1]]
            while len(back) + len(fwd) < n and a <= lab[j] < b:
                back.append(j)
                j = prv[j]
            j = nxt[fwd[-1]] if fwd else h
            while len(back) + len(fwd) < n and a <= lab[j] < b:
                fwd.append(j)
                j = nxt[j]
            m = len(back) + len(fwd) + 1
            if m <= CAP[k] or k == BITS:
                break
        stretch = back[::-1] + [_NEW] + fwd
        gap = (b - a) // m
        new = 0
        for r, j in enumerate(stretch):
            x = a + r * gap + (gap >> 1)
            if j is _NEW:
                new = x
            else:
                lab[j] = x
        return new
