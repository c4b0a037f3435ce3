"""SIEVE (Zhang et al., NSDI 2024, "SIEVE is simpler than LRU"), as
libCacheSim's ``Sieve.c``.

One FIFO queue, newest at the head, a visited bit per block and a hand that
walks from the tail towards the head: a visited block is spared (bit cleared),
the first unvisited one is evicted and the hand stays where it stopped.
Chains: a request's new blocks enter the queue deepest first (the head of the
chain nearest the queue's head); a hit sets the bits of all hit blocks; the
hand walks past blocks that are not evictable (in use, or a parent of a cached
block) without clearing their bit.
"""

from __future__ import annotations

from spfcore_classic._base import ClassicPolicy, NoEvictable


class Sieve(ClassicPolicy):
    """SIEVE: FIFO queue with a visited bit and a moving hand (no parameters)."""

    name = "sieve"

    def configure(self, capacity):
        self.newer: dict[int, int | None] = {}  # towards the queue head (insertion)
        self.older: dict[int, int | None] = {}
        self.head = self.tail = self.hand = None
        self.visited: dict[int, int] = {}

    def on_hits(self, ids):
        self.visited.update(dict.fromkeys(ids, 1))

    def on_miss(self, keys):
        pass

    def on_inserts(self, ids, keys, depths):
        if not ids:
            return
        h = self.head  # each block goes to the head in turn: ids[0] next to the old head
        self.older.update(zip(ids, [h, *ids[:-1]]))
        self.newer.update(zip(ids, [*ids[1:], None]))
        if h is not None:
            self.newer[h] = ids[0]
        else:
            self.tail = ids[0]
        self.head = ids[-1]
        self.visited.update(dict.fromkeys(ids, 0))

    def victim(self):
        visited, newer, tail = self.visited, self.newer, self.tail
        free, kids, key = self._free, self.kids, self.key  # evictable(), inlined: the hand's cost
        obj = self.hand if self.hand is not None else tail
        left = 2 * len(newer) + 1  # two rounds: the first clears every visited bit, the second must find a victim
        while True:
            if obj in free and not kids.get(key[obj]):
                if not visited[obj]:
                    break
                visited[obj] = 0
            nxt = newer[obj]
            obj = nxt if nxt is not None else tail
            left -= 1
            if not left:  # no free leaf at all (see test_chains: a hash cached twice): an error, not a hang
                raise NoEvictable(f"sieve: no evictable block (free, without a cached child) among "
                                   f"{len(newer)} resident blocks")
        self.hand = newer[obj]
        self._unlink(obj)
        return obj

    def _unlink(self, i):
        o, n = self.older.pop(i), self.newer.pop(i)
        del self.visited[i]
        if o is not None:
            self.newer[o] = n
        else:
            self.tail = n
        if n is not None:
            self.older[n] = o
        else:
            self.head = o
