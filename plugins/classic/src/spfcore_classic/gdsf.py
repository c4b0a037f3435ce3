"""GDSF (Cherkasova, HP Labs 1998, "Improving WWW proxies performance with
Greedy-Dual-Size-Frequency caching policy"), as libCacheSim's ``GDSF.cpp``.

Each block has the priority ``L + frequency * 1e6 / size`` (size 1: every
block holds the same tokens), set when it is stored (frequency 1) or hit
(frequency + 1); the lowest priority is evicted and ``L`` becomes its
priority (the dynamic aging that lets old popular blocks go). Ties go to
the block stored or hit at the earlier request. With equal sizes GDSF is
LFU with dynamic aging (LFU-DA, Arlitt et al. 2000).

**Differs from libCacheSim 0.3.5's ``GDSF`` by definition**: libCacheSim
inserts the missed object first and then evicts the lowest priority, which
may be the new object itself (its priority ``L + 1e6`` below every resident
one): a bypass. spfcore's allocation always stores the request's blocks (vLLM
computes them), so here the lowest resident block goes instead. Hit counts
are close to libCacheSim's (within 0.3% of the requests in the test), not equal.

Chains: ties within a request go to the deeper block, so a chain's tail
leaves first; an unevictable lowest block is skipped for the next lowest.
"""

from __future__ import annotations

import heapq

from spfcore_classic._base import ClassicPolicy, NoEvictable


class GDSF(ClassicPolicy):
    """GDSF / LFU-DA: lowest ``L + frequency`` first, with aging ``L`` (no parameters)."""

    name = "gdsf"
    uses_depth = True  # ties go to the deeper block

    def configure(self, capacity):
        self.L = 0.0
        self.freq: dict[int, int] = {}
        self.entry: dict[int, tuple] = {}  # id -> its live heap entry
        self.heap: list[tuple] = []
        self.depth: dict[int, int] = {}

    def on_hits(self, ids):
        freq, depth, entry, heap, L, n = self.freq, self.depth, self.entry, self.heap, self.L, self.n_req
        push = heapq.heappush
        for i in ids:
            f = freq[i] = freq[i] + 1
            e = entry[i] = (L + f * 1.0e6, n, -depth[i], i)
            push(heap, e)

    def on_miss(self, keys):
        pass

    def on_inserts(self, ids, keys, depths):
        self.freq.update(dict.fromkeys(ids, 1))
        self.depth.update(zip(ids, depths))
        entry, heap, n = self.entry, self.heap, self.n_req
        prio = self.L + 1.0e6
        push = heapq.heappush
        for i, d in zip(ids, depths):
            e = entry[i] = (prio, n, -d, i)
            push(heap, e)

    def victim(self):
        heap, entry = self.heap, self.entry
        free, kids, key = self._free, self.kids, self.key  # evictable(), inlined
        pop = heapq.heappop
        skipped = []
        while True:
            try:
                e = pop(heap)
            except IndexError:  # no free leaf (a hash cached twice: see ClassicPolicy._victim_among_copies)
                for s in skipped:
                    heapq.heappush(heap, s)
                raise NoEvictable("gdsf: no evictable block") from None
            i = e[3]
            if entry.get(i) is not e:
                continue  # stale
            if i in free and not kids.get(key[i]):
                break
            skipped.append(e)
        for s in skipped:
            heapq.heappush(heap, s)
        self.L = e[0]
        del entry[i], self.freq[i], self.depth[i]
        if len(heap) > 2 * len(entry) + 1024:  # drop stale entries
            self.heap = [x for x in heap if entry.get(x[3]) is x]
            heapq.heapify(self.heap)
        return i
