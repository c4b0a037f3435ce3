"""S3-FIFO (Yang et al., SOSP 2023, "FIFO queues are all you need for cache
eviction"), as libCacheSim's ``S3FIFO.c``.

A small FIFO queue (10% of the blocks) takes new blocks; a main FIFO queue
(the rest) takes blocks hit at least ``move_to_main_threshold`` times while
in the small queue, and blocks whose hash is found in the ghost FIFO (90% of
the blocks' worth of hashes evicted from the small queue). Each hit adds one
to a block's count; the main queue re-inserts a block whose count is
positive with ``min(count, 3) - 1`` (a FIFO with reinsertion) and evicts the
first whose count is 0. The main queue is evicted from when it holds more
than its share or the small queue is empty.

libCacheSim's variant, matched here: until the first eviction, new blocks
go to the main queue once the small queue is full; a block moved from the
small to the main queue starts there with count 0; queue sizes are truncated
(``int(0.1 * capacity)``). Capacities below 20 blocks make libCacheSim refuse
one-block objects (the small queue must be larger than an object).

Chains: blocks enter deepest first; a hit counts for every hit block; the
queues' ends are their first evictable blocks (blocks in use or with cached
children stay where they are).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import attrs
from attrs import validators as v

from spfcore_classic._base import ClassicPolicy, NoEvictable, fifo_add
from spfcore_classic._ring import ParkingRing


@attrs.frozen
class S3FIFOParams:
    """Parameters of ``s3fifo`` (libCacheSim's defaults).

    Attributes:
        small_size_ratio: Small queue share of the blocks (0 < x < 1).
        ghost_size_ratio: Ghost entries (evicted block hashes) as a share of the blocks (>= 0).
        move_to_main_threshold: Hits in the small queue that send a block to the main queue (int >= 1).
    """

    small_size_ratio: float = attrs.field(default=0.1, validator=[v.gt(0), v.lt(1)])
    ghost_size_ratio: float = attrs.field(default=0.9, validator=[v.ge(0), v.lt(math.inf)])
    move_to_main_threshold: int = attrs.field(default=2, validator=[v.instance_of(int), v.ge(1)])


class S3FIFO(ClassicPolicy):
    """S3-FIFO: small, main and ghost FIFO queues with lazy promotion."""

    name = "s3fifo"
    memo_across_calls = True  # blocks enter the lists only in on_hits / on_inserts (or victim)
    Params = S3FIFOParams

    def configure(self, capacity):
        p = self.params
        self.small_cap = int(capacity * p.small_size_ratio)
        self.main_cap = capacity - self.small_cap
        self.ghost_cap = int(capacity * p.ghost_size_ratio)
        self.small = ParkingRing()  # first = oldest (parking: the small queue's roots of long-lived
        self.main = ParkingRing()  # prefixes are passed once, not lap after lap; _ring's module doc)
        self.ghost: OrderedDict[object, None] = OrderedDict()
        self.freq: dict[int, int] = {}
        self.from_ghost: set = set()
        self.has_evicted = False

    def on_hits(self, ids):
        freq = self.freq
        for i in ids:
            freq[i] += 1

    def on_miss(self, keys):
        self.from_ghost.clear()
        ghost = self.ghost
        if ghost.keys().isdisjoint(keys):
            return
        for k in keys:
            if k in ghost:
                del ghost[k]
                self.from_ghost.add(k)

    def on_inserts(self, ids, keys, depths):
        small, main, from_ghost = self.small, self.main, self.from_ghost
        self.freq.update(dict.fromkeys(ids, 0))
        if self.has_evicted and from_ghost.isdisjoint(keys):  # the usual case: all to the small queue
            small.extend(ids)
            return
        for i, k in zip(ids, keys):
            if k in from_ghost:
                from_ghost.discard(k)
                main.append(i)
            elif not self.has_evicted and len(small) >= self.small_cap:
                main.append(i)  # warm-up: the small queue is full before the first eviction
            else:
                small.append(i)

    def victim(self):
        self.has_evicted = True
        if len(self.main) > self.main_cap or not self.small:
            i = self._evict_main()
            if i is not None:
                return i
        i = self._evict_small()  # may move every block to the main queue and evict none
        if i is None:
            i = self._evict_main()
        if i is None:  # no free leaf in either queue (a hash cached twice: see ClassicPolicy._victim_among_copies)
            raise NoEvictable("s3fifo: no evictable block")
        return i

    def _evict_small(self):
        small, main, freq, walk = self.small, self.main, self.freq, self.walk
        thr = self.params.move_to_main_threshold
        while small:
            i = walk(small)
            if i is None:
                return None
            small.remove(i)
            if freq[i] >= thr:
                main.append(i)
                freq[i] = 0
                if self._stuck:  # a block entering main inside victim(): the walk memory must see it
                    self._entered((i,))  # (else a memory rechecked later in this call misses it; see walk)
            else:
                del freq[i]
                if self.ghost_cap:
                    fifo_add(self.ghost, self.key[i], self.ghost_cap)
                return i
        return None

    def _evict_main(self):
        main, freq, walk = self.main, self.freq, self.walk
        while main:
            i = walk(main)
            if i is None:
                return None
            f = freq[i]
            if f >= 1:
                main.move_to_end(i)  # the first: a rotation by one
                freq[i] = min(f, 3) - 1
            else:
                main.remove(i)
                del freq[i]
                return i
        return None
