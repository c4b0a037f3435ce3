"""The policy-ordered set of free blocks: the one piece the simulator's block
pool and the vLLM adapter's free queue both delegate eviction to.

Blocks are identified by physical block ids (``int``). The evictor holds only
free blocks (ref count 0); a block in use is never in it, so it can never be
handed out. Victims are taken in this order:

1. hashless free blocks, most recently freed first (vLLM prepends them);
2. cached blocks by ``(tier, value, release order)``: tier 0 = not admitted,
   1 = admitted, 2 = pinned.

With no score, admission or victim hook the order is plain release order
(vLLM's LRU) kept in an ``OrderedDict`` (O(1) per operation). Otherwise a
binary heap with lazy deletion gives O(log n) per insert and per victim.
Scores may expire (in seconds or in arrivals): expired blocks are re-scored
in one batch before victims are chosen, so stale predictions age out without
an O(n) scan.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from numbers import Integral

from spfcore.views import Score

NEVER_ARRIVAL = 2**62

ScoreFn = Callable[[Sequence[int], float], "Sequence[float | Score] | None"]
AdmitFn = Callable[[Sequence[int], float], "Sequence[bool] | None"]
ChooseFn = Callable[[Sequence[int], int, float], "Sequence[int] | None"]


class Evictor:
    """Free blocks in eviction order.

    Args:
        num_blocks: Size of the pool, blocks; the pin cap is a share of it.
        score: ``score(ids, now)`` -> one float or Score per id, or None.
        admit: ``admit(ids, now)`` -> one bool per id, or None (admit all).
        choose: ``choose(candidate_ids, n, now)`` -> n indices, or None.
        pin_cap_fraction: Most pinned free blocks, as a share of ``num_blocks``
            (0..1). Pins beyond the cap are refused (the block keeps its value,
            unpinned).

    Raises:
        ValueError: on a bad ``pin_cap_fraction``.
    """

    def __init__(
        self,
        num_blocks: int,
        *,
        score: ScoreFn | None = None,
        admit: AdmitFn | None = None,
        choose: ChooseFn | None = None,
        pin_cap_fraction: float = 0.5,
    ) -> None:
        if not 0.0 <= pin_cap_fraction <= 1.0:
            raise ValueError(f"pin_cap_fraction must be in [0, 1], got {pin_cap_fraction}")
        self._score, self._admit, self._choose = score, admit, choose
        self.fifo = score is None and admit is None and choose is None
        self.pin_cap = int(pin_cap_fraction * num_blocks)
        self._hashless: deque[int] = deque()
        self._lru: OrderedDict[int, None] = OrderedDict()  # fifo mode
        # scored mode: id -> [tier, value, order, version]; heap of (tier, value, order, version, id)
        self._entry: dict[int, list] = {}
        self._heap: list[tuple] = []
        self._exp_t: list[tuple[float, int, int]] = []
        self._exp_a: list[tuple[int, int, int]] = []
        self._pinned: set[int] = set()
        self._order = 0
        self._version = 0
        self.pins_refused = 0

    # ------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._hashless) + (len(self._lru) if self.fifo else len(self._entry))

    def __contains__(self, block_id: int) -> bool:
        # O(1) cached lookup first; the hashless deque is short once the cache warms up
        return block_id in (self._lru if self.fifo else self._entry) or block_id in self._hashless

    def free_ids(self) -> list[int]:
        """All free block ids, hashless first then cached in no fixed order."""
        return list(self._hashless) + list(self._lru if self.fifo else self._entry)

    @property
    def num_pinned(self) -> int:
        """Pinned free blocks now."""
        return len(self._pinned)

    # ------------------------------------------------------------ inserts
    def push_hashless(self, ids: Sequence[int]) -> None:
        """Add hashless free blocks; ``ids[0]`` is reused first (vLLM ``prepend_n``)."""
        self._hashless.extendleft(reversed(ids))

    def push_cached(self, ids: Sequence[int], now: float) -> None:
        """Add cached blocks whose ref count reached 0, in release order
        (vLLM ``append_n``: a finished request's deepest block first)."""
        if self.fifo:
            for i in ids:
                self._lru[i] = None
            return
        if not ids:
            return
        admitted = self._admit(ids, now) if self._admit is not None else None
        scores = self._score(ids, now) if self._score is not None else None
        for k, i in enumerate(ids):
            self._order += 1
            tier = 1 if admitted is None or admitted[k] else 0
            self._insert(i, tier, scores[k] if scores is not None else None, self._order)

    def pin(self, ids: Iterable[int], expires_at_arrival: int) -> int:
        """Pin free cached blocks until an arrival index (prefetch hints).

        Returns:
            Number of blocks pinned (refused beyond the cap, or not free).
        """
        if self.fifo:
            raise RuntimeError("pin() needs a scored evictor; the policy implements no decision hook")
        done = 0
        for i in ids:
            e = self._entry.get(i)
            if e is None or i in self._pinned:
                continue
            if self._insert(i, e[0], Score(e[1], expires_at_arrival=expires_at_arrival, pinned=True), e[2]):
                done += 1
        return done

    def _insert(self, i: int, tier: int, s, order: int) -> bool:
        self._version += 1
        v = self._version
        pinned = False
        if s is None:
            value = 0.0
        elif isinstance(s, Score):
            value = s.value
            if s.expires_at != math.inf:
                heapq.heappush(self._exp_t, (s.expires_at, v, i))
            if s.expires_at_arrival < NEVER_ARRIVAL:
                heapq.heappush(self._exp_a, (s.expires_at_arrival, v, i))
            if s.pinned:
                if s.expires_at == math.inf and s.expires_at_arrival >= NEVER_ARRIVAL:
                    raise ValueError("a pinned Score must carry an expiry (expires_at or expires_at_arrival)")
                if len(self._pinned) < self.pin_cap or i in self._pinned:
                    pinned = True
                else:
                    self.pins_refused += 1
        else:
            value = float(s)
        if pinned:
            self._pinned.add(i)
        else:
            self._pinned.discard(i)
        self._entry[i] = [tier, value, order, v]
        heap = self._heap
        heapq.heappush(heap, (2 if pinned else tier, value, order, v, i))
        if len(heap) > 2 * len(self._entry) + 1024:
            self._compact()
        return pinned

    def _compact(self) -> None:
        """Drop stale heap entries (left by hits, re-scores and victims) once
        they outnumber live ones: O(n) every O(n) inserts, O(1) amortized."""
        entry, pinned = self._entry, self._pinned
        self._heap = [(2 if i in pinned else e[0], e[1], e[2], e[3], i) for i, e in entry.items()]
        heapq.heapify(self._heap)
        for name in ("_exp_t", "_exp_a"):
            h = [x for x in getattr(self, name) if (e := entry.get(x[2])) is not None and e[3] == x[1]]
            heapq.heapify(h)
            setattr(self, name, h)

    # ------------------------------------------------------------ removals
    def remove(self, block_id: int) -> None:
        """Take a free block out (it was hit: vLLM ``touch``).

        Raises:
            KeyError: if the block is not free.
        """
        if self.fifo:
            try:
                del self._lru[block_id]
                return
            except KeyError:
                pass
        elif self._entry.pop(block_id, None) is not None:
            self._pinned.discard(block_id)
            return
        try:  # hashless blocks are never hit; this path serves reset/cleanup only
            self._hashless.remove(block_id)
        except ValueError:
            raise KeyError(f"block {block_id} is not free") from None

    def rescore(self, ids: Iterable[int], now: float) -> int:
        """Re-score these blocks now (those not free are skipped), in one
        batch. Returns how many were re-scored."""
        if self.fifo:
            return 0
        ids = [i for i in dict.fromkeys(ids) if i in self._entry]
        if ids:
            scores = self._score(ids, now) if self._score is not None else None
            for k, i in enumerate(ids):
                e = self._entry[i]
                self._insert(i, e[0], scores[k] if scores is not None else None, e[2])
        return len(ids)

    def rescore_expired(self, now: float, arrival: int) -> int:
        """Re-score every block whose score expired by ``now`` / ``arrival``,
        in one batch. Returns how many were re-scored."""
        if self.fifo or (not self._exp_t and not self._exp_a):
            return 0
        due: dict[int, None] = {}
        for heap, clock in ((self._exp_t, now), (self._exp_a, arrival)):
            while heap and heap[0][0] <= clock:
                _, v, i = heapq.heappop(heap)
                e = self._entry.get(i)
                if e is not None and e[3] == v:
                    due[i] = None
        return self.rescore(due, now) if due else 0

    def pop(self, n: int, now: float, arrival: int) -> list[int]:
        """Take ``n`` victims: hashless blocks first, then the lowest-ranked
        cached blocks.

        Raises:
            ValueError: if fewer than ``n`` blocks are free.
        """
        if n > len(self):
            raise ValueError(f"cannot take {n} blocks: only {len(self)} free")
        out: list[int] = []
        hl = self._hashless
        while hl and len(out) < n:
            out.append(hl.popleft())
        need = n - len(out)
        if not need:
            return out
        if self.fifo:
            pop = self._lru.popitem
            out.extend(pop(last=False)[0] for _ in range(need))
            return out
        self.rescore_expired(now, arrival)
        if self._choose is None:
            got = self._pop_heap(need)
            self._forget(got)
            out.extend(got)
            return out
        cands = self._pop_heap(min(len(self._entry), 4 * need))
        try:
            idx = self._choose(cands, need, now)
            chosen = set(range(need)) if idx is None else set(idx)
            if (len(chosen) != need or (idx is not None and len(idx) != need)
                    or not all(isinstance(k, Integral) and 0 <= k < len(cands) for k in chosen)):
                raise ValueError(f"choose_victims returned {idx!r}: need {need} distinct indices < {len(cands)}")
        except BaseException:  # a failed choice takes nothing: every block stays free
            self._push_back(cands)
            self._hashless.extendleft(reversed(out))
            raise
        for k, i in enumerate(cands):
            if k in chosen:
                out.append(i)
                self._forget((i,))
            else:
                self._push_back((i,))
        return out

    def _push_back(self, ids: Iterable[int]) -> None:
        """Put popped heap entries back in, same rank."""
        for i in ids:
            e = self._entry[i]
            heapq.heappush(self._heap, (2 if i in self._pinned else e[0], e[1], e[2], e[3], i))

    def _pop_heap(self, k: int) -> list[int]:
        heap, entry, res = self._heap, self._entry, []
        while len(res) < k:
            t, value, order, v, i = heapq.heappop(heap)
            e = entry.get(i)
            if e is None or e[3] != v:
                continue  # stale
            res.append(i)
        return res

    def _forget(self, ids: Iterable[int]) -> None:
        for i in ids:
            del self._entry[i]
            self._pinned.discard(i)
