"""LIRS (Jiang and Zhang, SIGMETRICS 2002, "LIRS: an efficient low
inter-reference recency set replacement policy to improve buffer cache
performance").

Blocks are LIR (low inter-reference recency: kept) or HIR. The stack S holds
recency order of LIR blocks, resident HIR blocks and non-resident HIR block
hashes (ghosts), pruned so its bottom is always LIR; the queue Q holds the
resident HIR blocks (1% of the blocks, at least 1). The victim is Q's front.
A hit on a HIR block that is still in S (its reuse distance beats the
bottom LIR block's recency) makes it LIR and demotes the bottom LIR block to
Q's end; a miss on a ghost in S does the same for the new block. S is
bounded to twice the blocks by dropping the oldest ghosts, as libCacheSim
does.

**Differs from libCacheSim's ``LIRS.c`` by definition**: libCacheSim, on a hit
on a resident HIR block that is not in S, also demotes the bottom LIR block to
Q and evicts from Q if that overflows it: a hit that evicts and leaves the
cache below capacity. spfcore evicts only to allocate (a hit never frees a
block), so this policy follows the paper, where such a hit only moves the
block to the tops of S and Q. Hit counts are therefore close to, not equal to,
libCacheSim's (the test checks the paper's own example and bounds the gap).

Chains: blocks enter and are touched deepest first; Q's front is its first
evictable block, and if Q has none (a request needs more new blocks than Q
holds, which an object cache never meets), S's bottom-most evictable LIR block
goes. Such a *borrowed* LIR slot is not refilled by the next new blocks (they
enter Q as HIR, so the next request evicts them, not more LIR blocks), only
by a HIR block's promotion, as in the paper.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import count

from spfcore_classic._base import ClassicPolicy, NoEvictable
from spfcore_classic._ring import Ring


class LIRS(ClassicPolicy):
    """LIRS: LIR set kept, the HIR queue (1% of the blocks) evicted from (no parameters)."""

    name = "lirs"

    def configure(self, capacity):
        self.hir_cap = max(1, int(0.01 * capacity))
        self.lir_cap = capacity - self.hir_cap
        self.S: OrderedDict[int, None] = OrderedDict()  # tokens, first = bottom
        self.Q = Ring()  # resident HIR ids, first = front
        self.lir: set[int] = set()
        self.tok: dict[int, int] = {}          # resident id -> token
        self.info: dict[int, list] = {}        # token -> [key, resident id or None]
        self.ghost_tok: dict[object, int] = {}  # non-resident hash in S -> token
        self.nonres: OrderedDict[object, None] = OrderedDict()  # ghosts in the order they left
        self.from_ghost: dict[object, int] = {}
        self._tokens = count()
        self.borrowed = 0  # LIR blocks evicted for want of an evictable HIR block, not yet refilled

    def _prune(self):
        S, info, lir = self.S, self.info, self.lir
        while S:
            t = next(iter(S))
            k, i = info[t]
            if i is not None and i in lir:
                return
            del S[t]
            if i is None:
                del info[t], self.ghost_tok[k]
                self.nonres.pop(k, None)

    def _demote_excess(self):
        S, info, lir = self.S, self.info, self.lir
        self.borrowed = min(self.borrowed, max(0, self.lir_cap - len(lir)))  # promotions refill borrowed slots
        while len(lir) > self.lir_cap:
            t = next(iter(S))  # pruned: the bottom is LIR
            i = info[t][1]
            lir.discard(i)
            del S[t]
            self.Q.append(i)
            self._prune()

    def on_hits(self, ids):
        for i in ids:
            self._hit(i)

    def _hit(self, i):
        t = self.tok[i]
        if i in self.lir:
            self.S.move_to_end(t)
            self._prune()
        elif t in self.S:
            self.S.move_to_end(t)
            self.Q.remove(i)
            self.lir.add(i)
            self._demote_excess()
        else:
            self.S[t] = None
            self.Q.move_to_end(i)
        if len(self.S) > 2 * self.capacity:
            self._limit()

    def on_miss(self, keys):
        self.from_ghost.clear()
        g = self.ghost_tok
        for k in keys:
            t = g.get(k)
            if t is not None:
                self.from_ghost[k] = t

    def on_inserts(self, ids, keys, depths):
        if self.from_ghost and not self.from_ghost.keys().isdisjoint(keys):
            for i, k in zip(ids, keys):
                self._insert(i, k)
            return
        # the usual case, no block back from a ghost: new HIR/LIR blocks on top of S, as _insert
        S, Q, lir, tok, info, tokens = self.S, self.Q, self.lir, self.tok, self.info, self._tokens
        room = self.lir_cap - self.borrowed - len(lir)
        for i, k in zip(ids, keys):
            t = next(tokens)
            info[t] = [k, i]
            tok[i] = t
            S[t] = None
            if room > 0:
                lir.add(i)
                room -= 1
            else:
                Q.append(i)
        if len(S) > 2 * self.capacity:  # once for the batch: the same ghosts go as block by block
            self._limit()

    def _insert(self, i, key):
        t = self.from_ghost.pop(key, None)
        if t is not None and self.ghost_tok.get(key) == t:
            del self.ghost_tok[key]
            self.nonres.pop(key, None)
            self.info[t] = [key, i]
            self.tok[i] = t
            self.S.move_to_end(t)
            self.lir.add(i)
            self._demote_excess()
        else:
            t = next(self._tokens)
            self.info[t] = [key, i]
            self.tok[i] = t
            self.S[t] = None
            if len(self.lir) < self.lir_cap - self.borrowed:
                self.lir.add(i)
            else:
                self.Q.append(i)
        self._limit()

    def _limit(self):
        S, nonres = self.S, self.nonres
        while len(S) > 2 * self.capacity and nonres:
            k, _ = nonres.popitem(last=False)
            t = self.ghost_tok.pop(k)
            del S[t], self.info[t]

    def victim(self):
        ok = self.evictable
        i = self.walk(self.Q)
        if i is not None:
            self.Q.remove(i)
        else:  # no evictable resident HIR block: the lowest evictable LIR block
            i = next((self.info[t][1] for t in self.S if (j := self.info[t][1]) is not None and ok(j)), None)
            if i is None:  # no free leaf (a hash cached twice: see ClassicPolicy._victim_among_copies)
                raise NoEvictable("lirs: no evictable block")
            self.lir.discard(i)
            self.borrowed += 1
            self.S.pop(self.tok[i])
        t = self.tok.pop(i)
        k = self.info[t][0]
        if t in self.S:
            self.info[t][1] = None
            old = self.ghost_tok.get(k)
            if old is not None:  # the hash's ghost from another block (vLLM caches a hash in two): one per hash
                del self.S[old], self.info[old]
            self.ghost_tok[k] = t
            self.nonres[k] = None
        else:
            del self.info[t]
        self._prune()
        return i
