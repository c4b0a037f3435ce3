"""The ``belady_oracle`` arm: Belady's MIN order over prefix-cache blocks (the ceiling).

Belady (1966), "A study of replacement algorithms for a virtual-storage
computer": evicting the item whose next use lies furthest in the future
minimises misses for a single cache. Here the item is a KV block keyed by its
block hash, and "next use" is the arrival index of the next request whose
prompt contains that block hash and that has not been served yet: a request
not yet arrived, or one that arrived and waits for its prefix-cache lookup
(concurrent mode, continuous batching: requests queue behind running ones).
"""

from __future__ import annotations

from itertools import count, repeat
from operator import itemgetter

import attrs
import numpy as np

from spfcore import NEVER_ARRIVAL, Scores, hookimpl

#: Next use of a block hash that no future request contains, in arrivals.
NEVER = 2**36
#: Multiplier that packs (next use, depth) into one exactly representable float:
#: NEVER * DEPTH_SLOTS + depth < 2**53.
DEPTH_SLOTS = 2**16


#: Shortest request (in blocks) whose shared prefix the index copies as a run; shortest run worth a lookup.
_RUN_MIN = 16


def _run(keys, j: int, s: int, m: int, ref=None, step: int = 1) -> int:
    """Length of the longest run ``keys[j + t] == ref[s + step * t]`` for
    ``t < L <= m``, given that it holds at ``t = 0`` (``ref``: ``keys``
    itself by default; ``step`` 1 or -1): ``_RUN_MIN`` uses, then all ``m``,
    then bisection, on slice comparisons (C loops): about 2 element comparisons a use of the run."""
    if ref is None:
        ref = keys
    lo, w = 1, _RUN_MIN

    def same(a: int, b: int) -> bool:
        if step > 0:
            return keys[j + a:j + b] == ref[s + a:s + b]
        e = s - b
        return keys[j + a:j + b] == ref[s - a:e if e >= 0 else None:-1]

    while lo < m:
        hi = min(lo + w, m)
        if not same(lo, hi):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if same(lo, mid):
                    lo = mid
                else:
                    hi = mid
            return lo
        lo = hi
        w = m  # past a short run: the rest at once
    return lo


@attrs.frozen
class BeladyParams:
    """Belady has no parameters: its order is fixed by the future request stream."""


class BeladyOraclePolicy:
    """Evict the block whose next use is furthest in the future.

    The runner hands the whole request stream to :meth:`spfcore_future_requests`
    before the first arrival; the policy numbers each block hash (a dense id)
    and keeps, per arrival index, the ids its request holds and, for each of
    those uses, the id's following use. The current position is the
    ``arrival_index`` of the latest :meth:`spfcore_request_arrived`, and the
    policy keeps every id's next use strictly after it in one array: an
    arrival overwrites the entries of its own ids with their following uses
    (one numpy assignment over the request's blocks), so scoring a batch is
    one dict lookup per run of consecutive ids (a prefix, tail first) and
    array reads, no search. The
    future is every request not yet *served*: those after the position, and
    those that arrived but whose lookup (:meth:`spfcore_blocks_hit`, called
    once per lookup, hit or not) has not happened yet. The next use of a
    block is the smallest arrival index among the waiting requests that hold
    its hash, else the first arrival index strictly after the position. In
    sequential mode nothing waits when blocks are scored, so this is the
    classic order; under continuous batching, without the waiting requests, a
    prefix needed by requests queued behind a long one read as "never used
    again" and was evicted first (issue 15). A preempted request looks its
    prefix up again; no hook tells the policy of a preemption, so that second
    lookup is not in its future (a known gap).

    Score value = ``-(next_use * 2**16 + min(depth, 2**16 - 1))``: blocks never
    used again go first (``next_use = 2**36``), then the furthest next use;
    on equal next use the deeper block goes first (evicting a chain's tail
    never breaks the chain for the blocks before it). The score expires at
    arrival ``next_use + 1``: a block whose predicted use passed without a hit
    (e.g. its ancestor was evicted, so the lookup stopped early) is re-scored
    with its following use instead of staying protected forever. A score
    whose next use is a waiting request also expires at ``now`` (seconds): its
    lookup comes without an arrival, so the block is re-scored before the
    next victims are chosen.

    Decisions depend on arrival indices only, so the simulator and the engine
    evict the same blocks in sequential mode. Without a future stream the
    runtime refuses to run this policy (capability ``needs-future``).

    Memory: 8 bytes per (request, distinct block hash) use (two int32 arrays;
    int64 past 2**31 ids or arrivals), about 40 per arrival index (its
    offset, a Python int), 20 per distinct hash plus the hash -> id dict.
    """

    name = "belady_oracle"
    contract = "1.4"  # the spfcore contract version this policy is written for (1.4: chain-only)
    # chain-only: the hooks read blocks.keys and blocks.depth alone, so the runtime writes no other column
    capabilities = frozenset({"needs-future", "scoring", "chain-only"})
    Params = BeladyParams

    def __init__(self, params: BeladyParams | None = None) -> None:
        self.params = params or BeladyParams()
        self._kid: dict[object, int] = {}  # block hash -> dense id >= 1 (0: a hash no request holds)
        self._dist: list = []  # dense id - 1 -> its block hash
        self._index(np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32))
        #: Requests arrived but not yet looked up: request id -> [arrival index, block hashes, their ids or None].
        self.waiting: dict[object, list] = {}

    def _index(self, ids: np.ndarray, off: np.ndarray, after: np.ndarray, first=None) -> None:
        """Install a future index, the position at the stream's start (-1).

        Args:
            ids: id of each use (int array), grouped by arrival index.
            off: int64, ``len(arrivals) + 1``: arrival ``j``'s uses are ``ids[off[j]:off[j + 1]]``.
            after: per use, the same id's next use strictly after that arrival
                (``after.dtype``'s max: none); its dtype is the next uses'.
            first: ``(ids, arrivals)`` of each id's first use, when the caller has them.
        """
        self._rk, self._after = ids, after
        self._roff = off.tolist()  # (Python ints: slicing with numpy scalars is slower)
        self._never = int(np.iinfo(after.dtype).max)  # "no next use" in _after and _next
        n = len(self._kid) + 1
        self._next = np.full(n, self._never, after.dtype)  # id -> its first use strictly after ``_at``
        self._wmin = np.full(n, NEVER, np.int64)  # id -> the earliest waiting arrival holding it
        self._wset: list = []  # the id arrays written into _wmin (reset before a rebuild)
        self._wdirty = False  # the waiting set changed since _wmin was built
        self.position = -1
        if first is None:
            self._rewind(-1)
        else:
            self._next[first[0]] = first[1]
            self._at = -1

    @hookimpl
    def spfcore_future_requests(self, requests):
        """Build the index (see the class). O(uses) time, the uses' ids hashed
        once (a request's shared prefix compared instead), sorted once (twice
        if requests are out of arrival order).

        Raises:
            ValueError: arrival indices negative or sparse (more than 4 per
                request): they must be positions in the stream.
        """
        keys: list = []
        extend = keys.extend
        tups, arrivals, counts = [], [], []
        for r in requests:
            ks = r.block_keys
            extend(ks)
            tups.append(ks)
            arrivals.append(r.arrival_index)
            counts.append(len(ks))
        # each use -> the position of its hash's first use (dense ids in that order, below), in C passes: a
        # request's run of uses equal to those at its first hash's first use (a shared prefix) is copied
        # from there, one comparison a use instead of one hash lookup; the other uses set each hash's first
        # position in one setdefault pass per request that copied a run (else per stream)
        kid: dict = {}
        first = np.empty(len(keys), np.int64)
        done = g = 0  # first[:done] is set (and kid holds those uses); g: the request's first use
        for ks, c in zip(tups, counts):
            if c >= _RUN_MIN:
                if done < g:
                    first[done:g] = np.fromiter(map(kid.setdefault, keys[done:g], count(done)), np.int64, g - done)
                    done = g
                p = kid.get(ks[0])
                if p is not None:
                    n = _run(keys, g, p, min(c, g - p))
                    first[g:g + n] = first[p:p + n]
                    done = g + n
            g += c
        if done < g:
            first[done:g] = np.fromiter(map(kid.setdefault, keys[done:g], count(done)), np.int64, g - done)
        del keys, tups
        ids = np.cumsum(first == np.arange(len(first)), dtype=np.int32 if len(kid) < 2**31 else np.int64)[first]
        self._dist = list(kid)
        kid = self._kid = dict(zip(kid, range(1, len(kid) + 1)))
        arr = np.array(arrivals, np.int64)
        span = int(arr.max()) + 1 if len(arr) else 0
        if len(arr) and (arr.min() < 0 or span > 4 * len(arr) + 1024):
            raise ValueError(f"arrival indices {int(arr.min())}..{span - 1} for {len(arr)} requests: "
                             "they must be the requests' positions in the stream (0, 1, ...)")
        adt = np.int32 if span < 2**31 - 1 else np.int64
        a = np.repeat(arr.astype(adt), counts)
        if len(arr) > 1 and (arr[1:] < arr[:-1]).any():  # not in arrival order: made so
            o = np.argsort(a, kind="stable")
            a, ids = a[o], ids[o]
        # each id's uses together, arrivals ascending; a hash held twice at one arrival counts once
        o = np.argsort(ids, kind="stable")
        si, sa = ids[o], a[o]
        same = si[1:] == si[:-1]
        dup = same & (sa[1:] == sa[:-1])
        if dup.any():
            keep = np.ones(len(a), bool)
            keep[o[1:][dup]] = False
            a, ids = a[keep], ids[keep]
            o = np.argsort(ids, kind="stable")
            si, sa = ids[o], a[o]
            same = si[1:] == si[:-1]
        nxt = np.full(len(a), np.iinfo(adt).max, adt)  # per use in id order: the same id's next use
        nxt[:-1][same] = sa[1:][same]
        after = np.empty(len(a), adt)
        after[o] = nxt
        head = np.ones(len(a), bool)  # each id's first use
        head[1:] = ~same
        self._index(ids, np.searchsorted(a, np.arange(span + 1)), after, (si[head], sa[head]))
        self.waiting = {}

    def _rewind(self, pos: int) -> None:
        """Set every id's next use to its first use strictly after ``pos``
        (a position that went back, or a fresh index): O(uses after ``pos``)."""
        nxt, off = self._next, self._roff
        nxt.fill(self._never)
        start = int(off[min(max(pos + 1, 0), len(off) - 1)])
        rk = self._rk[start:]
        if len(rk):
            u, first = np.unique(rk, return_index=True)
            arrival = np.repeat(np.arange(len(off) - 1), np.diff(np.asarray(off)))[start:]
            nxt[u] = arrival[first]
        self._at = pos

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        i = self.position = request.arrival_index
        self.waiting[request.request_id] = [i, request.block_keys, None]
        self._wdirty = True
        at, off = self._at, self._roff
        if i == at + 1 and i < len(off) - 1:  # the stream's next arrival: its uses pass
            s, e = off[i], off[i + 1]
            self._next[self._rk[s:e]] = self._after[s:e]
            self._at = i
        elif i > at:  # arrivals skipped: their uses pass too, in order
            after, rk, nxt = self._after, self._rk, self._next
            for j in range(at + 1, min(i + 1, len(off) - 1)):
                s, e = off[j], off[j + 1]
                nxt[rk[s:e]] = after[s:e]
            self._at = i
        elif i < at:
            self._rewind(i)

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        if self.waiting.pop(request.request_id, None) is not None:  # else a repeated lookup (a preempted
            self._wdirty = True                                      # request's): already served once

    def _ids(self, keys, intern: bool = False) -> np.ndarray:
        """Ids of block hashes ``keys`` (intp): 0 for a hash no future request
        holds, or with ``intern`` a new id (never used after the position).

        Hashes come in runs of consecutive ids (a prefix in chain order, or
        released tail first): one dict lookup a run, the rest of the run
        checked against :attr:`_dist` with one comparison a hash (see
        :func:`_run`); after short runs, one lookup a hash."""
        kid, dist = self._kid, self._dist
        if type(keys) is not list:  # (a tuple: its slices must compare with dist's)
            keys = list(keys)
        n = len(keys)
        ids = np.zeros(n, np.intp)
        get = kid.get
        j = steps = 0
        while j < n:
            if steps > 4 and j < _RUN_MIN * steps:  # short runs: one lookup a hash for the rest
                ids[j:] = np.fromiter(map(get, keys[j:], repeat(0)), np.intp, n - j)
                break
            steps += 1
            k = get(keys[j], 0)
            if not k:
                j += 1
                continue
            if j + 1 < n and k < len(dist) and keys[j + 1] == dist[k]:  # ascending ids k, k + 1, ...
                m = _run(keys, j, k - 1, min(n - j, len(dist) - k + 1), dist)
                ids[j:j + m] = np.arange(k, k + m)
            elif j + 1 < n and k > 1 and keys[j + 1] == dist[k - 2]:  # descending ids k, k - 1, ...
                m = _run(keys, j, k - 1, min(n - j, k), dist, -1)
                ids[j:j + m] = np.arange(k, k - m, -1)
            else:
                ids[j] = k
                m = 1
            j += m
        if intern and not ids.all():
            for j in np.flatnonzero(ids == 0).tolist():
                k = keys[j]
                i = kid.get(k)
                if i is None:
                    i = kid[k] = len(kid) + 1
                    dist.append(k)
                ids[j] = i
            grow = len(kid) + 1 - len(self._next)
            self._next = np.concatenate([self._next, np.full(grow, self._never, self._next.dtype)])
            self._wmin = np.concatenate([self._wmin, np.full(grow, NEVER, np.int64)])
        return ids

    def _waiting_min(self) -> np.ndarray:
        """Id -> the earliest arrival index among the waiting requests that
        hold it (:data:`NEVER`: none), int64; rebuilt after the waiting set
        changed (one assignment per waiting request, latest arrival first so
        the earliest writes last)."""
        if self._wdirty:
            entries = sorted(self.waiting.values(), key=itemgetter(0), reverse=True)
            for w in entries:
                if w[2] is None:
                    w[2] = self._ids(w[1], intern=True)
            wm = self._wmin
            for ids in self._wset:
                wm[ids] = NEVER
            for w in entries:
                wm[w[2]] = w[0]
            self._wset = [w[2] for w in entries]
            self._wdirty = False
        return self._wmin

    def next_use(self, key) -> int:
        """Arrival index of the next use of block hash ``key``: the earliest
        waiting request that holds it, else the first request after the
        current position; :data:`NEVER` if none."""
        if self.waiting:
            w = int(self._waiting_min()[self._kid.get(key, 0)])
            if w < NEVER:
                return w
        n = int(self._next[self._kid.get(key, 0)])
        return NEVER if n == self._never else n

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        ids = self._ids(blocks.keys)
        nu = self._next[ids]
        never = nu == self._never
        nu = nu.astype(np.int64)
        wait = None
        if self.waiting:
            w = self._waiting_min()[ids]
            wait = w < NEVER
            if wait.any():
                never &= ~wait
                nu[wait] = w[wait]
            else:
                wait = None
        exp_a = nu + 1
        exp_a[never] = NEVER_ARRIVAL
        nu[never] = NEVER
        nu *= DEPTH_SLOTS
        nu += np.minimum(blocks.depth, DEPTH_SLOTS - 1)
        values = np.negative(nu, dtype=np.float64)  # exact: below 2**53
        if wait is None:
            return Scores(values, expires_at_arrival=exp_a)
        return Scores(values, expires_at=np.where(wait, float(now), np.inf), expires_at_arrival=exp_a)


__all__ = ["BeladyOraclePolicy", "BeladyParams", "NEVER", "DEPTH_SLOTS"]
