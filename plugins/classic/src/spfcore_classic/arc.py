"""ARC (Megiddo and Modha, FAST 2003, "ARC: a self-tuning, low overhead
replacement cache"), as libCacheSim's ``ARC.c``.

Two LRU lists of resident blocks, T1 (seen once) and T2 (seen again), two
ghost lists of evicted block hashes, B1 and B2, and an adaptive target ``p``
for T1's size: a miss on a B1 ghost grows ``p`` by ``max(|B2|/|B1|, 1)``, a
miss on a B2 ghost shrinks it by ``max(|B1|/|B2|, 1)``; the victim is T1's
LRU block when ``|T1| > p`` (or ``== p`` on a B2 ghost hit), else T2's.

libCacheSim's variant, matched here: the ghost lists are trimmed only when
a victim is needed (the paper's case IV trims on every miss), ``p`` is a
float, and when ``|T1| + |B1|`` reaches the capacity with B1 empty, T1's LRU
block is evicted without leaving a ghost.

Chains: hit blocks are moved to T2's MRU end deepest first, new blocks
inserted deepest first; a ghost hit counts for each block of the request
that misses on a ghost (a request may adapt ``p`` several times). The LRU
end of a list is its first evictable block; if a list has none the other
list gives the victim.
"""

from __future__ import annotations

from collections import OrderedDict

from spfcore_classic._base import ClassicPolicy, NoEvictable
from spfcore_classic._ring import Ring


class ARC(ClassicPolicy):
    """ARC: adaptive balance of recency (T1) and frequency (T2) with ghost lists (no parameters)."""

    name = "arc"
    memo_across_calls = True  # blocks enter the lists only in on_hits / on_inserts (or victim)

    def configure(self, capacity):
        self.t1 = Ring()  # first = LRU end
        self.t2 = Ring()
        self.b1: OrderedDict[object, None] = OrderedDict()
        self.b2: OrderedDict[object, None] = OrderedDict()
        self.p = 0.0
        self.ghost_hit = 0  # 1 or 2: this request missed on a B1 / B2 ghost
        self.from_ghost: set = set()

    def on_hits(self, ids):
        t1, t2 = self.t1, self.t2
        for i in ids:
            if i in t1:
                t1.remove(i)
                t2.append(i)
            else:
                t2.move_to_end(i)

    def on_miss(self, keys):
        self.ghost_hit = 0
        self.from_ghost.clear()
        b1, b2, c = self.b1, self.b2, self.capacity
        if b1.keys().isdisjoint(keys) and b2.keys().isdisjoint(keys):
            return
        for k in keys:
            if k in b1:
                self.p = min(self.p + max(len(b2) / len(b1), 1), c)
                del b1[k]
                self.ghost_hit = 1
                self.from_ghost.add(k)
            elif k in b2:
                self.p = max(self.p - max(len(b1) / len(b2), 1), 0)
                del b2[k]
                self.ghost_hit = 2
                self.from_ghost.add(k)

    def on_inserts(self, ids, keys, depths):
        from_ghost = self.from_ghost
        if from_ghost.isdisjoint(keys):
            self.t1.extend(ids)
            return
        for i, k in zip(ids, keys):
            if k in from_ghost:
                from_ghost.discard(k)
                self.t2.append(i)
            else:
                self.t1.append(i)

    def victim(self):
        t1, t2, b1, b2, c, gh = self.t1, self.t2, self.b1, self.b2, self.capacity, self.ghost_hit
        trim = None  # the ghost list libCacheSim trims on this miss (after the victim is found: no walk reads it)
        if not gh and len(t1) + len(b1) + 1 > c and not b1:
            first, other, ghost = t1, t2, None  # T1 alone fills the cache: its LRU block goes, no ghost
        else:
            if not gh:  # libCacheSim trims a ghost list here, on a miss that is no ghost hit
                if len(t1) + len(b1) + 1 > c:
                    trim = b1
                elif len(t1) + len(b1) + len(t2) + len(b2) >= 2 * c and b2:
                    trim = b2
            if (t1 and (len(t1) > self.p or (len(t1) == self.p and gh == 2))) or not t2:  # REPLACE
                first, other, ghost = t1, t2, b1
            else:
                first, other, ghost = t2, t1, b2
        # the LRU evictable block of ``first`` (else of ``other``) goes, its hash to the ghost
        # list of the list it came from
        i = self.walk(first)
        if i is None:
            i = self.walk(other)
            first = other
            ghost = None if ghost is None else (b1 if other is t1 else b2)
            if i is None:  # no free leaf (a hash cached twice: see ClassicPolicy._victim_among_copies)
                raise NoEvictable("arc: no evictable block")
        if trim is not None:
            trim.popitem(last=False)
        first.remove(i)
        if ghost is not None:
            ghost[self.key[i]] = None
        # Directory bound |T1| + |T2| + |B1| + |B2| <= 2c. An object cache never
        # exceeds it (one ghost in, one out per ghost hit); a request of several
        # blocks evicts on the ghost-hit path several times, so trim the oldest
        # ghosts here (B2 first, as the miss path does).
        over = len(t1) + len(t2) + len(b1) + len(b2) - 2 * c
        while over > 0 and (b1 or b2):
            (b2 if b2 else b1).popitem(last=False)
            over -= 1
        return i
