"""The policy-ordered set of free blocks: the one piece the simulator's block
pool and the vLLM adapter's free queue both delegate eviction to.

Blocks are identified by physical block ids (``int``). The evictor holds only
free blocks (ref count 0); a block in use is never in it, so it can never be
handed out. Victims are taken in this order:

1. hashless free blocks, most recently freed first (vLLM prepends them);
2. cached blocks by ``(tier, value, release order)``: tier 0 = not admitted,
   1 = admitted, 2 = pinned.

With no score, admission or victim hook the order is plain release order
(vLLM's LRU) kept in an ``OrderedDict`` (O(1) per operation); in
policy-ordered mode (an ``evict`` callback: the policy implements
``spfcore_evict_blocks``) the same dict is a plain set of the free cached
blocks and the policy names the victims from its own order. Otherwise the
free cached blocks are grouped by ``(tier, value)``: per tier a binary heap of
the distinct values (lazy deletion of emptied groups), and per value the
blocks sorted by release order (two parallel lists: orders, ids). Policies
give few distinct values (table lookups), so taking victims is a slice of the
lowest group (no per-victim Python work beyond forgetting the block), and an
insert, re-score or hit is O(log g) comparisons plus memmoves of the group's
``g`` entries (C speed), O(log v) more when the value is new. Scores may expire (in seconds or in
arrivals): expired blocks are re-scored in one batch before victims are
chosen, so stale predictions age out without an O(n) scan.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from numbers import Integral
from types import MappingProxyType

from spfcore.views import NEVER_ARRIVAL

#: ``(values, expires_at, expires_at_arrival, pinned)``: one list per field, one
#: entry per block (``None``: the default for every block): the form
#: :class:`spfcore.runtime.PolicyRuntime` normalizes every score answer to.
ScoreCols = tuple
ScoreFn = Callable[[Sequence[int], float], "ScoreCols | None"]
AdmitFn = Callable[[Sequence[int], float], "Sequence[bool] | None"]
ChooseFn = Callable[[Sequence[int], int, float], "Sequence[int] | None"]
#: ``evict(n, free, now)`` -> ``n`` distinct ids of free cached blocks (policy-ordered mode).
EvictFn = Callable[[int, "Mapping[int, None]", float], Sequence[int]]


def _at_most(heap: list, clock) -> list:
    """The values of binary heap ``heap`` that are <= ``clock``, ascending,
    without popping (a pruned walk: a value above the clock hides its subtree)."""
    if not heap or heap[0] > clock:
        return []
    out, todo, n = [], [0], len(heap)
    while todo:
        j = todo.pop()
        if heap[j] <= clock:
            out.append(heap[j])
            c = 2 * j + 1
            if c < n:
                todo.append(c)
                if c + 1 < n:
                    todo.append(c + 1)
    out.sort()
    return out


class Evictor:
    """Free blocks in eviction order.

    Args:
        num_blocks: Size of the pool, blocks; the pin cap is a share of it.
        score: ``score(ids, now)`` -> :data:`ScoreCols` for the ids, or None
            (value 0, no expiry, no pin: release order).
        admit: ``admit(ids, now)`` -> one bool per id, or None (admit all).
        choose: ``choose(candidate_ids, n, now)`` -> n indices, or None.
        evict: ``evict(n, free, now)`` -> ``n`` distinct ids of free cached
            blocks: policy-ordered mode (``free`` a read-only mapping whose
            keys are those ids). Excludes ``score``, ``admit`` and ``choose``.
        pin_cap_fraction: Most pinned free blocks, as a share of ``num_blocks``
            (0..1). Pins beyond the cap are refused (the block keeps its value,
            unpinned).

    Raises:
        ValueError: on a bad ``pin_cap_fraction``, or ``evict`` given with
            another hook.
    """

    def __init__(
        self,
        num_blocks: int,
        *,
        score: ScoreFn | None = None,
        admit: AdmitFn | None = None,
        choose: ChooseFn | None = None,
        evict: EvictFn | None = None,
        pin_cap_fraction: float = 0.5,
    ) -> None:
        if not 0.0 <= pin_cap_fraction <= 1.0:
            raise ValueError(f"pin_cap_fraction must be in [0, 1], got {pin_cap_fraction}")
        self._score, self._admit, self._choose, self._evict = score, admit, choose, evict
        # _flat: free cached blocks in the dict ``_lru`` (release order), no scored order
        self._flat = score is None and admit is None and choose is None
        if evict is not None and not self._flat:
            raise ValueError("policy-ordered mode (evict) excludes score, admit and choose")
        self.fifo = self._flat and evict is None
        self.ordered = evict is not None
        self.pin_cap = int(pin_cap_fraction * num_blocks)
        self._hashless: deque[int] = deque()
        self._lru: OrderedDict[int, None] = OrderedDict()  # fifo and policy-ordered modes
        # scored mode: id -> [tier, value, order, version]. Eviction order, per
        # heap tier (2 if pinned else tier): value -> group ``(orders, ids)``,
        # two parallel lists sorted by release order, and a heap of the values
        # that have a group (a group may be empty).
        # Expiries, per clock (seconds, arrivals): a heap of the distinct
        # expiries and expiry -> flat list [version, id, version, id, ...] in
        # insertion (= version) order; a version mismatch = stale.
        self._entry: dict[int, list] = {}
        self._groups: tuple[dict, dict, dict] = ({}, {}, {})
        self._vheap: tuple[list, list, list] = ([], [], [])
        self._exp_t: list[float] = []
        self._exp_a: list[int] = []
        self._exp_t_at: dict[float, list[int]] = {}
        self._exp_a_at: dict[int, list[int]] = {}
        self._exp_n = 0  # (version, id) pairs held, stale ones included
        self._pinned: set[int] = set()
        self._order = 0
        self._version = 0
        self.pins_refused = 0
        self._popped = None  # (ids, hashless taken, (entries, pinned) or None): for unpop

    # ------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._hashless) + (len(self._lru) if self._flat else len(self._entry))

    def __contains__(self, block_id: int) -> bool:
        # O(1) cached lookup first; the hashless deque is short once the cache warms up
        return block_id in (self._lru if self._flat else self._entry) or block_id in self._hashless

    def free_ids(self) -> list[int]:
        """All free block ids, hashless first then cached in no fixed order."""
        return list(self._hashless) + list(self._lru if self._flat else self._entry)

    @property
    def num_pinned(self) -> int:
        """Pinned free blocks now."""
        return len(self._pinned)

    def snapshot(self) -> dict:
        """Everything that decides what this evictor does next, as plain
        values (for tests that compare the state before and after a failed
        call): hashless queue, LRU order, entries ``id -> (tier, value,
        order, version)``, per tier the non-empty groups ``value -> (orders,
        ids)``, expiries per clock, pins, counters. Left out: emptied groups
        and the layout of the value heaps, which decide nothing. O(free blocks).
        """
        return {
            "hashless": list(self._hashless), "lru": list(self._lru),
            "entry": {i: tuple(e) for i, e in self._entry.items()},
            "groups": [{v: (tuple(o), tuple(g)) for v, (o, g) in groups.items() if g} for groups in self._groups],
            "exp_t": sorted(self._exp_t), "exp_t_at": {x: tuple(lst) for x, lst in self._exp_t_at.items()},
            "exp_a": sorted(self._exp_a), "exp_a_at": {x: tuple(lst) for x, lst in self._exp_a_at.items()},
            "exp_n": self._exp_n, "pinned": sorted(self._pinned), "order": self._order,
            "version": self._version, "pins_refused": self.pins_refused,
        }

    # ------------------------------------------------------------ inserts
    def push_hashless(self, ids: Sequence[int]) -> None:
        """Add hashless free blocks; ``ids[0]`` is reused first (vLLM ``prepend_n``)."""
        self._hashless.extendleft(reversed(ids))

    def push_cached(self, ids: Sequence[int], now: float) -> None:
        """Add cached blocks whose ref count reached 0, in release order
        (vLLM ``append_n``: a finished request's deepest block first)."""
        if self._flat:
            self._lru.update(dict.fromkeys(ids))  # released blocks are not in it: appended in order
            return
        if not ids:
            return
        admitted = self._admit(ids, now) if self._admit is not None else None
        cols = self._score(ids, now) if self._score is not None else None
        o = self._order
        self._order = o + len(ids)
        tiers = [1] * len(ids) if admitted is None else [1 if a else 0 for a in admitted]
        if (cols is None or cols[1] is None and cols[2] is None and cols[3] is None) \
                and self._entry.keys().isdisjoint(ids):
            self._append(ids, tiers, None if cols is None else cols[0], o)
        else:
            self._place(ids, tiers, cols, range(o + 1, o + 1 + len(ids)))

    def _append(self, ids: Sequence[int], tiers: Sequence[int], values, o: int) -> None:
        """:meth:`_place` for blocks not in the order yet, with values only
        (no expiry, no pin) and release orders ``o + 1 ...``, the latest so
        far: each run of equal ``(tier, value)`` extends its group at once
        (same order as one :meth:`_link` per block)."""
        n = len(ids)
        if values is None:
            values = [0.0] * n
        v = self._version
        self._entry.update(zip(ids, map(list, zip(tiers, values, range(o + 1, o + 1 + n), range(v + 1, v + 1 + n)))))
        self._version = v + n
        start = 0
        while start < n:
            tier, value = tiers[start], values[start]
            end = start + 1
            while end < n and values[end] == value and tiers[end] == tier:
                end += 1
            groups = self._groups[tier]
            g = groups.get(value)
            if g is None:
                groups[value] = (list(range(o + 1 + start, o + 1 + end)), list(ids[start:end]))
                heapq.heappush(self._vheap[tier], value)
            else:
                g[0].extend(range(o + 1 + start, o + 1 + end))
                g[1].extend(ids[start:end])
            start = end
        m = len(self._entry)
        if self._exp_n > 2 * m + 1024 or any(len(h) > 2 * m + 1024 for h in self._vheap):
            self._compact()

    def pin(self, ids: Iterable[int], expires_at_arrival: int) -> int:
        """Pin free cached blocks until an arrival index (prefetch hints).

        Returns:
            Number of blocks pinned (refused beyond the cap, or not free;
            always 0 in policy-ordered mode, where the policy orders blocks itself).
        """
        if self.ordered:
            return 0
        if self.fifo:
            raise RuntimeError("pin() needs a scored evictor; the policy implements no decision hook")
        entry, pinned = self._entry, self._pinned
        ids = [i for i in dict.fromkeys(ids) if i in entry and i not in pinned]
        if not ids:
            return 0
        es = [entry[i] for i in ids]
        n = len(ids)
        cols = ([e[1] for e in es], None, [expires_at_arrival] * n, [True] * n)
        return self._place(ids, [e[0] for e in es], cols, [e[2] for e in es])

    def _place(self, ids: Sequence[int], tiers: Sequence[int], cols, orders: Sequence[int]) -> int:
        """(Re-)insert blocks ``ids`` into the eviction order: block ``ids[k]``
        at tier ``tiers[k]``, release order ``orders[k]``, with score columns
        ``cols = (values, expires_at, expires_at_arrival, pinned)`` (each a list
        or ``None``; ``cols`` ``None``: value 0, no expiry, no pin). A block
        already in the order whose rank does not change stays where it is.

        Returns:
            Number of blocks pinned (pins beyond the cap are refused and counted
            in ``pins_refused``).
        """
        values, exp_t, exp_a, pins = cols if cols is not None else (None, None, None, None)
        entry, pinned_set, cap = self._entry, self._pinned, self.pin_cap
        groups_t, vheap = self._groups, self._vheap
        exp_t_heap, exp_t_at, exp_a_heap, exp_a_at = self._exp_t, self._exp_t_at, self._exp_a, self._exp_a_at
        heappush, inf = heapq.heappush, math.inf
        v = self._version
        ne = npinned = 0
        xt_last = xa_last = lt = la = None  # the last expiry met and its list (a batch often shares one)
        for k, i in enumerate(ids):
            tier = tiers[k]
            value = values[k] if values is not None else 0.0
            v += 1
            if exp_t is not None:
                x = exp_t[k]
                if x != inf:
                    ne += 1
                    if x != xt_last:
                        lt = exp_t_at.get(x)
                        if lt is None:
                            lt = exp_t_at[x] = []
                            heappush(exp_t_heap, x)
                        xt_last = x
                    lt.append(v)
                    lt.append(i)
            if exp_a is not None:
                x = exp_a[k]
                if x < NEVER_ARRIVAL:
                    ne += 1
                    if x != xa_last:
                        la = exp_a_at.get(x)
                        if la is None:
                            la = exp_a_at[x] = []
                            heappush(exp_a_heap, x)
                        xa_last = x
                    la.append(v)
                    la.append(i)
            pin = False
            if pins is not None and pins[k]:
                if len(pinned_set) < cap or i in pinned_set:
                    pin = True
                else:
                    self.pins_refused += 1
            old = entry.get(i)
            if old is not None:
                was_pinned = i in pinned_set if pinned_set else False
                if not pin and not was_pinned and old[0] == tier and old[1] == value:
                    old[3] = v  # same rank: stays where it is
                    continue
                order = old[2]
                go, gi = groups_t[2 if was_pinned else old[0]][old[1]]  # _unlink, inlined
                j = bisect_left(go, order)
                del go[j]
                del gi[j]
                old[0], old[1], old[3] = tier, value, v
            else:
                order = orders[k]
                entry[i] = [tier, value, order, v]
            if pin:
                pinned_set.add(i)
                npinned += 1
                ht = 2
            else:
                if pinned_set:
                    pinned_set.discard(i)
                ht = tier
            groups = groups_t[ht]  # _link, inlined
            g = groups.get(value)
            if g is None:
                groups[value] = ([order], [i])
                heappush(vheap[ht], value)
            else:
                go, gi = g
                if not go or order > go[-1]:
                    go.append(order)
                    gi.append(i)
                else:
                    j = bisect_left(go, order)
                    go.insert(j, order)
                    gi.insert(j, i)
        self._version = v
        self._exp_n += ne
        n = len(entry)
        if self._exp_n > 2 * n + 1024 or any(len(h) > 2 * n + 1024 for h in self._vheap):
            self._compact()
        return npinned

    def _expire(self, heap: list, at: dict, x, v: int, i: int) -> None:
        """Re-score block ``i`` (entry version ``v``) at expiry ``x``."""
        self._exp_n += 1
        lst = at.get(x)
        if lst is None:
            at[x] = [v, i]
            heapq.heappush(heap, x)
        else:
            lst.append(v)
            lst.append(i)

    def _link(self, i: int, ht: int, value, order: int) -> None:
        """Put block ``i`` into the eviction order at heap tier ``ht``."""
        groups = self._groups[ht]
        g = groups.get(value)
        if g is None:
            groups[value] = ([order], [i])
            heap = self._vheap[ht]
            heapq.heappush(heap, value)
        else:
            orders, gids = g
            if not orders or order > orders[-1]:  # a release: the latest order so far
                orders.append(order)
                gids.append(i)
            else:
                k = bisect_left(orders, order)
                orders.insert(k, order)
                gids.insert(k, i)

    def _unlink(self, i: int, e: list) -> None:
        """Take block ``i`` (entry ``e``, still in the order) out of the eviction order."""
        orders, gids = self._groups[2 if i in self._pinned else e[0]][e[1]]
        k = bisect_left(orders, e[2])
        del orders[k]
        del gids[k]

    def _compact(self) -> None:
        """Drop emptied value groups and stale expiry entries (left by hits,
        re-scores and victims) once they outnumber live ones: O(n) every O(n)
        inserts, O(1) amortized."""
        for groups, heap in zip(self._groups, self._vheap):
            for value in [value for value, g in groups.items() if not g[0]]:
                del groups[value]
            heap[:] = groups  # the dict's own key objects (a NaN value is found by identity)
            heapq.heapify(heap)
        entry = self._entry
        n = 0
        for heap, at in ((self._exp_t, self._exp_t_at), (self._exp_a, self._exp_a_at)):
            for x in list(at):
                it = iter(at[x])
                keep = [y for v, i in zip(it, it) if (e := entry.get(i)) is not None and e[3] == v for y in (v, i)]
                if keep:
                    at[x] = keep
                    n += len(keep) >> 1
                else:
                    del at[x]
            heap[:] = at  # in place: callers may hold the lists
            heapq.heapify(heap)
        self._exp_n = n

    # ------------------------------------------------------------ removals
    def remove(self, block_id: int) -> None:
        """Take a free block out (it was hit: vLLM ``touch``).

        Raises:
            KeyError: if the block is not free.
        """
        if self._flat:
            try:
                del self._lru[block_id]
                return
            except KeyError:
                pass
        else:
            e = self._entry.pop(block_id, None)
            if e is not None:
                self._unlink(block_id, e)
                self._pinned.discard(block_id)
                return
        try:  # hashless blocks are never hit; this path serves reset/cleanup only
            self._hashless.remove(block_id)
        except ValueError:
            raise KeyError(f"block {block_id} is not free") from None

    def rescore(self, ids: Iterable[int], now: float) -> int:
        """Re-score these blocks now (those not free are skipped), in one
        batch. Returns how many were re-scored.

        A score hook that raises leaves the evictor as before the call."""
        plan = self.plan_rescore(ids, now)
        self.commit(plan)
        return len(plan[2]) if plan is not None else 0

    def rescore_expired(self, now: float, arrival: int) -> int:
        """Re-score every block whose score expired by ``now`` / ``arrival``,
        in one batch. Returns how many were re-scored.

        A score hook that raises leaves the evictor as before the call."""
        plan = self.plan_expired(now, arrival)
        self.commit(plan)
        return len(plan[2]) if plan is not None else 0

    # Two-phase form of the re-scores: ``plan_*`` calls the score hook and
    # changes nothing; ``commit`` applies a plan and cannot fail. The runtime
    # plans every re-score of an arrival before committing any, so a hook that
    # fails midway leaves the evictor as before the arrival.
    def plan_rescore(self, ids: Iterable[int], now: float, _due: tuple = ((), ())):
        """Score the free ones of ``ids`` (in order, duplicates dropped) and
        return a plan for :meth:`commit` (``None``: nothing to do). Changes
        nothing; raises whatever the score hook raises."""
        if self._flat:
            return None
        entry = self._entry
        ids = [i for i in dict.fromkeys(ids) if i in entry]
        if not ids:
            return None
        cols = self._score(ids, now) if self._score is not None else None
        return _due, cols, ids

    def plan_expired(self, now: float, arrival: int):
        """Like :meth:`plan_rescore` for the blocks whose score expired by
        ``now`` / ``arrival`` (earliest expiry first, then insertion order).
        Changes nothing."""
        if self._flat or (not self._exp_t and not self._exp_a):
            return None
        entry = self._entry
        due: dict[int, None] = {}
        xs = []
        for heap, at, clock in ((self._exp_t, self._exp_t_at, now), (self._exp_a, self._exp_a_at, arrival)):
            found = _at_most(heap, clock)  # the expiries heappop would give, in that order
            xs.append(found)
            for x in found:
                it = iter(at[x])
                for v, i in zip(it, it):
                    e = entry.get(i)
                    if e is not None and e[3] == v:
                        due[i] = None
        plan = self.plan_rescore(due, now, tuple(xs)) if due else None
        if plan is None and (xs[0] or xs[1]):  # only stale expiries: drop them all the same
            plan = (tuple(xs), None, [])
        return plan

    def commit(self, plan) -> None:
        """Apply a plan of :meth:`plan_rescore` / :meth:`plan_expired` (no
        hook is called; ``None`` does nothing). Apply each plan at most once,
        before any other change to the evictor."""
        if plan is None:
            return
        (xt, xa), cols, ids = plan
        for heap, at, found in ((self._exp_t, self._exp_t_at, xt), (self._exp_a, self._exp_a_at, xa)):
            for x in found:
                heapq.heappop(heap)
                self._exp_n -= len(at.pop(x)) >> 1
        if ids:
            es = [self._entry[i] for i in ids]
            self._place(ids, [e[0] for e in es], cols, [e[2] for e in es])

    def pop(self, n: int, now: float, arrival: int) -> list[int]:
        """Take ``n`` victims: hashless blocks first, then the lowest-ranked
        cached blocks. Expired scores are re-scored first (as
        :meth:`rescore_expired`, committed once the score hook answered).

        A hook that raises or answers wrongly leaves the evictor as
        :meth:`rescore_expired` alone would (as before the call when nothing
        was due). :meth:`unpop` undoes a successful pop.

        Raises:
            ValueError: if fewer than ``n`` blocks are free, or the victim
                hook answered something else than ``n`` distinct indices.
        """
        if n > len(self):
            raise ValueError(f"cannot take {n} blocks: only {len(self)} free")
        hl = self._hashless
        if not self._flat and n > len(hl):  # before taking anything: a failing score hook takes nothing
            ea, et = self._exp_a, self._exp_t
            if (ea and ea[0] <= arrival) or (et and et[0] <= now):  # else rescore_expired does nothing
                self.rescore_expired(now, arrival)
        out: list[int] = []
        while hl and len(out) < n:
            out.append(hl.popleft())
        need = n - len(out)
        nh = len(out)
        if not need:
            self._popped = (out, nh, None)
            return out
        if self.fifo:
            lru = self._lru
            got = list(islice(lru, need))  # the least recently released, in order
            for i in got:
                del lru[i]
            out += got
            self._popped = (out, nh, None)
            return out
        if self.ordered:
            lru = self._lru
            try:
                got = self._evict(need, MappingProxyType(lru), now)  # read-only view, O(1)
                got = got.tolist() if hasattr(got, "tolist") else list(got)
                if (len(got) != need or len(set(got)) != need
                        or not all(isinstance(i, Integral) and i in lru for i in got)):
                    raise ValueError(f"evict_blocks returned {got!r:.200}: need {need} distinct free cached block ids")
            except BaseException:  # a failed choice takes nothing: every block stays free
                self._hashless.extendleft(reversed(out))
                raise
            for i in got:
                del lru[i]
            out += [int(i) for i in got]
            self._popped = (out, nh, None)
            return out
        entry = self._entry
        if self._choose is None:
            got = self._take(need)
            saved = [entry.pop(i) for i in got]  # _forget, inlined; kept for unpop
            pinned = None
            if self._pinned:
                pinned = self._pinned.intersection(got)
                self._pinned.difference_update(got)
            out += got
            self._popped = (out, nh, (saved, pinned))
            return out
        cands = self._take(min(len(entry), 4 * need))
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
        saved = []
        pinned = self._pinned.intersection(cands) if self._pinned else None
        for k, i in enumerate(cands):
            if k in chosen:
                out.append(i)
                saved.append(entry[i])
                self._forget((i,))
            else:
                self._push_back((i,))
        self._popped = (out, nh, (saved, pinned))
        return out

    def unpop(self, ids: list[int]) -> None:
        """Undo the pop that returned ``ids`` (the same list object), exactly:
        every block goes back where it was. Call it before any other change
        to the evictor (the runtime does, when ``spfcore_blocks_evicted`` fails).

        Raises:
            RuntimeError: ``ids`` is not the result of the last pop, or the
                pop was undone already.
        """
        rec = self._popped
        if rec is None or rec[0] is not ids:
            raise RuntimeError("unpop() takes the list returned by the last pop(), once")
        self._popped = None
        out, nh, cached = rec
        taken = out[nh:]
        if self._flat:
            lru = self._lru
            for i in reversed(taken):
                lru[i] = None
                lru.move_to_end(i, last=False)
        elif cached is not None:
            saved, pinned = cached
            entry = self._entry
            if pinned:
                self._pinned.update(pinned)
            for i, e in zip(taken, saved):
                entry[i] = e
                self._link(i, 2 if pinned and i in pinned else e[0], e[1], e[2])
        self._hashless.extendleft(reversed(out[:nh]))

    def _push_back(self, ids: Iterable[int]) -> None:
        """Put taken blocks back into the order, same rank."""
        entry, pinned = self._entry, self._pinned
        for i in ids:
            e = entry[i]
            self._link(i, 2 if i in pinned else e[0], e[1], e[2])

    def _take(self, k: int) -> list[int]:
        """Take the ``k`` lowest-ranked cached blocks out of the order, lowest
        first; their entries stay (``_forget`` or ``_push_back`` next).
        ``k`` <= free cached blocks."""
        vh = self._vheap
        if not vh[0] and not vh[2] and vh[1]:  # fast path: one tier, enough blocks in the lowest group
            orders, gids = self._groups[1][vh[1][0]]
            if len(gids) > k:
                res = gids[:k]
                del gids[:k]
                del orders[:k]
                return res
        res: list[int] = []
        for groups, heap in zip(self._groups, vh):
            while heap and k > 0:
                orders, gids = groups[heap[0]]
                if len(gids) > k:
                    res += gids[:k]
                    del gids[:k]
                    del orders[:k]
                    return res
                res += gids
                k -= len(gids)
                del groups[heapq.heappop(heap)]
            if k <= 0:
                break
        return res

    def _forget(self, ids: Iterable[int]) -> None:
        entry, pinned = self._entry, self._pinned
        for i in ids:
            del entry[i]
        if pinned:
            pinned.difference_update(ids)
