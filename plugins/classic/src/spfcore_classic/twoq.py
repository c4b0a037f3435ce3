"""2Q (Johnson and Shasha, VLDB 1994, "2Q: a low overhead high performance
buffer management replacement algorithm"), as libCacheSim's ``TwoQ.c``.

New blocks enter A1in, a FIFO of 25% of the blocks; blocks evicted from it
leave their hash in A1out, a FIFO of hashes (50% of the blocks); a miss on a
hash in A1out enters Am, an LRU of the rest. A hit in A1in changes nothing, a
hit in Am moves the block to its MRU end. A1in gives the victim while it
holds more than its share, else Am's LRU block does.

Chains: blocks enter deepest first, hits are applied deepest first; the
queues' ends are their first evictable blocks, and a queue with none leaves
the victim to the other.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import attrs
from attrs import validators as v

from spfcore_classic._base import ClassicPolicy, NoEvictable, fifo_add
from spfcore_classic._ring import Ring


@attrs.frozen
class TwoQParams:
    """Parameters of ``twoq`` (libCacheSim's defaults).

    Attributes:
        a_in_size_ratio: A1in (FIFO of new blocks) share of the blocks (0 < x < 1).
        a_out_size_ratio: A1out (ghost FIFO of hashes) entries as a share of the blocks (>= 0).
    """

    a_in_size_ratio: float = attrs.field(default=0.25, validator=[v.gt(0), v.lt(1)])
    a_out_size_ratio: float = attrs.field(default=0.5, validator=[v.ge(0), v.lt(math.inf)])


class TwoQ(ClassicPolicy):
    """2Q: FIFO A1in, ghost A1out, LRU Am."""

    name = "twoq"
    memo_across_calls = True  # blocks enter the lists only in on_hits / on_inserts (or victim)
    Params = TwoQParams

    def configure(self, capacity):
        self.ain_cap = int(capacity * self.params.a_in_size_ratio)
        self.aout_cap = int(capacity * self.params.a_out_size_ratio)
        self.ain = Ring()   # first = oldest
        self.aout: OrderedDict[object, None] = OrderedDict()
        self.am = Ring()    # first = LRU end
        self.from_ghost: set = set()

    def on_hits(self, ids):
        am = self.am
        for i in ids:
            if i in am:
                am.move_to_end(i)

    def on_miss(self, keys):
        self.from_ghost.clear()
        aout = self.aout
        if aout.keys().isdisjoint(keys):
            return
        for k in keys:
            if k in aout:
                del aout[k]
                self.from_ghost.add(k)

    def on_inserts(self, ids, keys, depths):
        from_ghost = self.from_ghost
        if from_ghost.isdisjoint(keys):
            self.ain.extend(ids)
            return
        for i, k in zip(ids, keys):
            if k in from_ghost:
                from_ghost.discard(k)
                self.am.append(i)
            else:
                self.ain.append(i)

    def victim(self):
        walk = self.walk
        if len(self.ain) > self.ain_cap:
            i = walk(self.ain)
            if i is not None:
                return self._from_ain(i)
        i = walk(self.am)
        if i is not None:
            self.am.remove(i)
            return i
        i = walk(self.ain)
        if i is None:  # no free leaf (a hash cached twice: see ClassicPolicy._victim_among_copies)
            raise NoEvictable("2q: no evictable block")
        return self._from_ain(i)

    def _from_ain(self, i):
        self.ain.remove(i)
        if self.aout_cap:
            fifo_add(self.aout, self.key[i], self.aout_cap)
        return i
