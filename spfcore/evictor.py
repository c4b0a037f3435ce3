"""The policy-ordered set of free blocks: the one piece the simulator's block
pool and the vLLM adapter's free queue both delegate eviction to.

Blocks are identified by physical block ids (``int`` >= 0). The evictor holds
only free blocks (ref count 0); a block in use is never in it, so it can never
be handed out. Victims are taken in this order:

1. hashless free blocks, most recently freed first (vLLM prepends them);
2. cached blocks by ``(tier, value, release order)``: tier 0 = not admitted,
   1 = admitted, 2 = pinned.

With no score, admission or victim hook the order is plain release order
(vLLM's LRU) kept in an insertion-ordered ``dict`` (O(1) per operation); in
policy-ordered mode (an ``evict`` callback: the policy implements
``spfcore_evict_blocks``) the same dict is a plain set of the free cached
blocks and the policy names the victims from its own order. Otherwise
(scored mode) the per-block state lives in numpy arrays indexed by block id
and the order in a binary min-heap over numpy arrays keyed by ``(tier, value,
release order)`` with lazy deletion (a re-scored or hit block leaves a stale
entry behind; the heap is rebuilt from the live entries once it holds more
than ``2 * live + 1024``, and at once by a batch that re-places a quarter of
the free blocks or more). The per-block loops are numba-compiled
(:mod:`spfcore._evictor_nb`, loaded with the first scored evictor): each
batch (a release, a re-score, a pin, an allocation) is one compiled call,
O(log n) per block; a hit is a few numpy scalar writes. Scores may expire (in
seconds or in arrivals): expired blocks are re-scored in one batch before
victims are chosen, so stale predictions age out without an O(n) scan.
Expiries in seconds wait on a heap; expiries at whole arrivals up to 2,048
ahead wait in a calendar, one bucket per arrival filled in push order, so an
expiry round reads its due blocks in order without sorting them (on spf's
workloads a round re-scores about half the free blocks at every arrival).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice, repeat
from numbers import Integral
from types import MappingProxyType

import numpy as np

from spfcore.views import NEVER_ARRIVAL

# The scored mode's state layout (the same numbers as spfcore._evictor_nb,
# which is imported on the first scored evictor only: importing this module,
# or running only fifo / policy-ordered evictors, does not load numba; vLLM's
# CPU build scans every loaded module when it starts and trips over llvmlite's ffi).
ORD, VER, HST, DST, TIER, IN, PIN = range(7)
NROWS = 7
HN, TN, AN, VERSION, LIVE, NPIN, REFUSED, HSEQ, DSEQ, QBASE, QN, QFREE, QTOP = range(13)
NCOUNTERS = 13
nb = None  # spfcore._evictor_nb, once loaded
_INT = frozenset({int})
#: (fifo mode) :meth:`Evictor._compact` rebuilds the release-order dict once it holds more than
#: ``max(_COMPACT, 20 * isqrt(live))`` deleted slots: a rebuild costs ~25 ns per live block and
#: each pop walks ~1.5 ns per deleted slot, so about sqrt(live) balances the two (9,139 live: ~1,900).
_COMPACT = 1024
_NONE_F, _NONE_B = np.empty(0), np.empty(0, np.bool_)  # a score column at its default for every block
_NONE_I = np.empty(0, np.int64)  # tiers / release orders: each block's own (a re-score)
_ONES = np.ones(1024, np.int64)  # tier 1 (admitted) for a release of up to 1,024 blocks (a view: no allocation)

#: ``(values, expires_at, expires_at_arrival, pinned)``: one list or array per
#: field, one entry per block (``None``: the default for every block): the
#: form :class:`spfcore.runtime.PolicyRuntime` normalizes every score answer to.
ScoreCols = tuple
ScoreFn = Callable[[Sequence[int], float], "ScoreCols | None"]
AdmitFn = Callable[[Sequence[int], float], "Sequence[bool] | None"]
ChooseFn = Callable[[Sequence[int], int, float], "Sequence[int] | None"]
#: ``evict(n, free, now)`` -> ``n`` distinct ids of free cached blocks (policy-ordered mode).
EvictFn = Callable[[int, "Mapping[int, None]", float], Sequence[int]]


def _load_nb():
    """Import (and compile, or load from numba's cache) the scored evictor's
    numba loops, once per process."""
    global nb
    if nb is None:
        from spfcore import _evictor_nb
        _scannable_llvmlite()
        _evictor_nb.warm()
        nb = _evictor_nb
    return nb


def prepare_numba() -> None:
    """Import numba in a way vLLM's CPU build tolerates (see
    :func:`_scannable_llvmlite`). A plugin with numba kernels calls it before
    importing them (policy-ordered policies never load the scored evictor,
    which does it otherwise)."""
    import numba  # noqa: F401

    _scannable_llvmlite()


def _scannable_llvmlite() -> None:
    """Let vLLM's CPU build start in a process that loaded numba first (the
    simulator's scored cells before the gate's engine cells; the engine
    runner's fail-fast runtime). When vLLM's worker starts it scans every
    attribute of every loaded module and calls ``vars(value).get(...)``;
    ``llvmlite.binding.ffi.lib`` answers ``__dict__`` with a wrapped C
    function (its ``__getattr__`` forwards every name to the CDLL), so the
    scan raised AttributeError and the engine did not start. Its class is
    swapped for a subclass, same layout, whose ``__dict__`` is an empty dict:
    nothing else changes (every other attribute still reaches the library)."""
    try:
        from llvmlite.binding import ffi
    except ImportError:  # pragma: no cover - another llvmlite layout: nothing to fix
        return
    lib = getattr(ffi, "lib", None)
    base = type(lib)
    if lib is None or getattr(base, "_spfcore_scannable", False) or isinstance(vars(base).get("__dict__"), property):
        return

    class _Scannable(base):
        __slots__ = ()
        _spfcore_scannable = True

        @property
        def __dict__(self):
            return {}

    try:
        lib.__class__ = _Scannable
    except TypeError:  # pragma: no cover - a layout that forbids it: leave llvmlite as it is
        pass


class Evictor:
    """Free blocks in eviction order.

    Args:
        num_blocks: Size of the pool, blocks; the pin cap is a share of it.
            (In scored mode, block ids at or beyond it grow the per-block arrays.)
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
        score_arrays: ``score`` and ``admit`` take the ids as an int64 numpy
            array (else re-scores pass a list and releases what the caller gave).

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
        score_arrays: bool = False,
    ) -> None:
        if not 0.0 <= pin_cap_fraction <= 1.0:
            raise ValueError(f"pin_cap_fraction must be in [0, 1], got {pin_cap_fraction}")
        self._score, self._admit, self._choose, self._evict = score, admit, choose, evict
        self.score_arrays = score_arrays
        # _flat: free cached blocks in the dict ``_lru`` (release order), no scored order
        self._flat = score is None and admit is None and choose is None
        if evict is not None and not self._flat:
            raise ValueError("policy-ordered mode (evict) excludes score, admit and choose")
        self.fifo = self._flat and evict is None
        self.ordered = evict is not None
        self.pin_cap = int(pin_cap_fraction * num_blocks)
        self._hashless: deque[int] = deque()
        # fifo and policy-ordered modes: a plain dict (insertion order = release order; releases
        # and allocations in bulk C-level calls, several times cheaper than an OrderedDict's)
        self._lru: dict[int, None] = {}
        #: (fifo mode) entries put into ``_lru`` since it was last built; minus its length: the
        #: deleted entries whose slots a pop's front scan still walks (see :meth:`_compact`)
        self._ins = 0
        self._order = 0  # release orders handed out (scored mode)
        self._popped = None  # (ids, hashless taken, (ids array, pinned flags) or None): for unpop
        if not self._flat:  # scored mode: see spfcore._evictor_nb for the layout
            _load_nb()
            nblk = max(int(num_blocks), 16)
            self._ib = np.zeros((NROWS, nblk), np.int64)
            self._ib[HST] = -1
            self._val = np.zeros(nblk, np.float64)
            cap = 2 * nblk + 2048
            self._hv = np.zeros(cap, np.float64)
            self._hi = np.zeros((cap, 4), np.int64)  # an entry's fields side by side
            self._tk = np.zeros(cap, np.float64)
            self._ti = np.zeros((2, cap), np.int64)
            self._ak = np.zeros(cap, np.float64)
            self._ai = np.zeros((2, cap), np.int64)
            self._qe, self._qb, self._c = nb.calendar(cap)
            self._in, self._pin = self._ib[IN], self._ib[PIN]  # row views (hits)

    def __getstate__(self) -> dict:
        # the row views are rebuilt on the copy's own array (copy.deepcopy
        # would copy them as separate arrays: MiniCache's checkpoints copy the evictor)
        return {k: v for k, v in self.__dict__.items() if k not in ("_in", "_pin")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if not self._flat:
            self._in, self._pin = self._ib[IN], self._ib[PIN]

    # ------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._hashless) + (len(self._lru) if self._flat else int(self._c[LIVE]))

    def __contains__(self, block_id: int) -> bool:
        # O(1) cached lookup first; the hashless deque is short once the cache warms up
        if self._flat:
            if block_id in self._lru:
                return True
        elif 0 <= block_id < len(self._in) and self._in[block_id]:
            return True
        return block_id in self._hashless

    def free_ids(self) -> list[int]:
        """All free block ids, hashless first then cached in no fixed order."""
        if self._flat:
            return list(self._hashless) + list(self._lru)
        return list(self._hashless) + np.flatnonzero(self._in).tolist()

    @property
    def num_pinned(self) -> int:
        """Pinned free blocks now."""
        return 0 if self._flat else int(self._c[NPIN])

    @property
    def pins_refused(self) -> int:
        """Pins refused so far (beyond the cap), blocks."""
        return 0 if self._flat else int(self._c[REFUSED])

    def snapshot(self) -> dict:
        """Everything that decides what this evictor does next, as plain
        values (for tests that compare the state before and after a failed
        call): hashless queue, LRU order, entries ``id -> (tier, value,
        order, version)``, per heap tier the groups ``value -> (orders, ids)``
        in eviction order, the live expiry entries per clock ``(expiry,
        version, id)``, pins, counters. Left out: stale heap entries and the
        layout of the heaps, which decide nothing. O(free blocks).
        """
        if self._flat:
            return {"hashless": list(self._hashless), "lru": list(self._lru), "order": self._order}
        ib, val, c = self._ib, self._val, self._c
        ids = np.flatnonzero(ib[IN]).tolist()
        entry = {i: (int(ib[TIER, i]), float(val[i]), int(ib[ORD, i]), int(ib[VER, i])) for i in ids}
        groups: list[dict] = [{}, {}, {}]
        for i in sorted(ids, key=lambda i: entry[i][2]):
            t, v, o, _ = entry[i]
            g = groups[2 if ib[PIN, i] else t].setdefault(v, ([], []))
            g[0].append(o)
            g[1].append(i)

        def live(k, rows, n):
            return sorted((float(k[j]), int(rows[0, j]), int(rows[1, j])) for j in range(n)
                          if ib[IN, rows[1, j]] and ib[VER, rows[1, j]] == rows[0, j])
        qx, qv, qi = nb.q_entries(self._qe, self._qb, c)  # the arrivals calendar: the same entries, in order
        return {
            "hashless": list(self._hashless), "entry": entry,
            "groups": [{v: (tuple(o), tuple(g)) for v, (o, g) in gs.items()} for gs in groups],
            "exp_t": live(self._tk, self._ti, int(c[TN])), "exp_a": sorted(live(self._ak, self._ai, int(c[AN]))
                                                                         + live(qx, np.stack([qv, qi]), len(qi))),
            "pinned": np.flatnonzero(ib[PIN]).tolist(), "order": self._order,
            "version": int(c[VERSION]), "pins_refused": int(c[REFUSED]),
        }

    # ------------------------------------------------------------ storage
    def _ensure(self, ids: np.ndarray, pushes: int) -> None:
        """Room for block ids ``ids`` and ``pushes`` more entries on every
        heap (arrays grow by doubling).

        Raises:
            ValueError: a negative block id.
        """
        if len(ids):
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0:
                raise ValueError(f"block id {lo}: block ids are >= 0")
            nblk = self._ib.shape[1]
            if hi >= nblk:
                new = max(2 * nblk, hi + 1)
                ib = np.zeros((NROWS, new), np.int64)
                ib[HST] = -1
                ib[:, :nblk] = self._ib
                self._ib = ib
                self._val = np.concatenate([self._val, np.zeros(new - nblk)])
                self._in, self._pin = ib[IN], ib[PIN]
        c = self._c
        need = max(int(c[HN]), int(c[TN]), int(c[AN]), int(c[QN])) + pushes
        cap = self._hv.shape[0]
        if need > cap:
            new = max(2 * cap, need)

            def grow(a):
                b = np.zeros(a.shape[:-1] + (new,), a.dtype)
                b[..., :cap] = a
                return b

            hi = np.zeros((new, 4), np.int64)
            hi[:cap] = self._hi
            self._hv, self._hi = grow(self._hv), hi
            self._tk, self._ti = grow(self._tk), grow(self._ti)
            self._ak, self._ai = grow(self._ak), grow(self._ai)
            self._qe = grow(self._qe)  # pool entries keep their indices: the chains stay valid

    @staticmethod
    def _ids(ids: Iterable[int]) -> np.ndarray:
        """``ids`` as a 1-d int64 array (an int64 array as it is)."""
        t = type(ids)
        if t is list or t is tuple:  # one pass (np.asarray of a list scans it twice: ~1.5x the time)
            return np.fromiter(ids, np.int64, len(ids))
        if t is not np.ndarray:
            ids = list(ids)
        elif ids.dtype == np.int64 and ids.ndim == 1:
            return ids
        return np.asarray(ids, np.int64).reshape(-1)

    # ------------------------------------------------------------ inserts
    def push_hashless(self, ids: Sequence[int]) -> None:
        """Add hashless free blocks; ``ids[0]`` is reused first (vLLM ``prepend_n``)."""
        self._hashless.extendleft(reversed(ids))

    def push_cached(self, ids: Sequence[int], now: float) -> None:
        """Add cached blocks whose ref count reached 0, in release order
        (vLLM ``append_n``: a finished request's deepest block first)."""
        if self._flat:
            self._lru.update(zip(ids, repeat(None)))  # released blocks are not in it: appended in order
            self._ins += len(ids)
            return
        n = len(ids)
        if not n:
            return
        arr = self._ids(ids)
        if self.score_arrays:  # one conversion: the hooks' batches read the array (their list made on demand)
            ids = arr
        admitted = self._admit(ids, now) if self._admit is not None else None
        cols = self._score(ids, now) if self._score is not None else None
        if admitted is None:
            tiers = _ONES[:n] if n <= len(_ONES) else np.ones(n, np.int64)
        else:
            tiers = np.asarray(admitted, np.bool_).astype(np.int64)
        o = self._order
        self._order = o + n
        self._place(arr, tiers, cols, np.arange(o + 1, o + 1 + n, dtype=np.int64))

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
        ids = nb.live_unique(self._ids(ids), True, self._ib, self._c)
        n = len(ids)
        if not n:
            return 0
        cols = (self._val[ids], None, np.full(n, float(expires_at_arrival)), np.ones(n, np.bool_))
        return self._place(ids, _NONE_I, cols, _NONE_I)

    def _place(self, ids: np.ndarray, tiers: np.ndarray, cols, orders: np.ndarray) -> int:
        """(Re-)insert blocks ``ids`` into the eviction order: block ``ids[k]``
        at tier ``tiers[k]``, release order ``orders[k]`` (kept for a block
        already in the order; both empty: each block's own, for blocks in
        the order), with score columns ``cols = (values,
        expires_at, expires_at_arrival, pinned)`` (each an array, a list or
        ``None``; ``cols`` ``None``: value 0, no expiry, no pin). In
        sequence, per block: a new version; the expiries registered (seconds
        if finite, arrivals if below ``2**62``); a pin honoured if fewer than
        the cap are pinned or the block already is; a block already in the
        order whose rank does not change stays where it is.

        Returns:
            Number of blocks pinned (pins beyond the cap are refused and counted
            in ``pins_refused``).
        """
        ids = ids if isinstance(ids, np.ndarray) else self._ids(ids)
        values, exp_t, exp_a, pins = cols if cols is not None else (None, None, None, None)
        args = (ids, np.asarray(tiers, np.int64),
                _NONE_F if values is None else np.asarray(values, np.float64),
                _NONE_F if exp_t is None else np.asarray(exp_t, np.float64),
                _NONE_F if exp_a is None else np.asarray(exp_a, np.float64),
                _NONE_B if pins is None else np.asarray(pins, np.bool_),
                np.asarray(orders, np.int64), self.pin_cap)
        granted = nb.place(*args, *self._all())
        if granted < 0:  # an id beyond the arrays, or a heap without room: grow, then again
            self._ensure(ids, len(ids))
            granted = nb.place(*args, *self._all())
        return int(granted)

    def _all(self) -> tuple:
        return (self._ib, self._val, self._hv, self._hi, self._tk, self._ti, self._ak, self._ai, self._qe, self._qb,
                self._c)

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
            inn = self._in
            if 0 <= block_id < len(inn) and inn[block_id]:
                inn[block_id] = 0  # its heap entries go stale
                c = self._c
                c[LIVE] -= 1
                pinned = self._pin
                if pinned[block_id]:
                    pinned[block_id] = 0
                    c[NPIN] -= 1
                return
        try:  # hashless blocks are never hit; this path serves reset/cleanup only
            self._hashless.remove(block_id)
        except ValueError:
            raise KeyError(f"block {block_id} is not free") from None

    def remove_many(self, ids: Sequence[int]) -> None:
        """:meth:`remove` of each of ``ids`` in order, in one call (a hit
        chain leaving the free queue).

        Raises:
            KeyError: a block is not free; the blocks before it were taken out.
        """
        if self._flat:
            lru = self._lru
            if all(map(lru.__contains__, ids)) and len(set(ids)) == len(ids):
                deque(map(lru.pop, ids), maxlen=0)
                return
        elif len(ids):
            arr = self._ids(ids)
            k = nb.remove_many(arr, self._ib, self._c)
            if k < 0:
                return
            ids = arr[k:].tolist()  # the rest, one by one (a hashless block, or not free: KeyError)
        for i in ids:
            self.remove(i)

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
    def plan_rescore(self, ids: Iterable[int], now: float, _due=None):
        """Score the free ones of ``ids`` (in order, duplicates dropped) and
        return a plan for :meth:`commit` (``None``: nothing to do). Changes
        nothing; raises whatever the score hook raises."""
        if self._flat:
            return None
        ids = ids if isinstance(ids, np.ndarray) else nb.live_unique(self._ids(ids), False, self._ib, self._c)
        if not len(ids):
            return None
        if self._score is None:
            cols = None
        else:  # the runtime's callback takes the id array as it is (a list for any other)
            cols = self._score(ids if self.score_arrays else ids.tolist(), now)
        return _due, cols, ids

    def _expiry_due(self, now: float, arrival: int) -> bool:
        c = self._c
        return bool((c[TN] and self._tk[0] <= now) or (c[AN] and self._ak[0] <= arrival)
                    or nb.q_due_any(float(arrival), self._qb, c))

    def plan_expired(self, now: float, arrival: int):
        """Like :meth:`plan_rescore` for the blocks whose score expired by
        ``now`` / ``arrival`` (earliest expiry first, then insertion order;
        seconds before arrivals). Changes nothing."""
        if self._flat or not self._expiry_due(now, arrival):
            return None
        clocks = (float(now), float(arrival))
        due = nb.due(*clocks, self._ib, self._tk, self._ti, self._ak, self._ai, self._qe, self._qb, self._c)
        plan = self.plan_rescore(due, now, clocks) if len(due) else None
        if plan is None:  # only stale expiries: drop them all the same
            plan = (clocks, None, due)
        return plan

    def commit(self, plan) -> None:
        """Apply a plan of :meth:`plan_rescore` / :meth:`plan_expired` (no
        hook is called; ``None`` does nothing). Apply each plan at most once,
        before any other change to the evictor."""
        if plan is None:
            return
        clocks, cols, ids = plan
        if clocks is not None:
            nb.drain(*clocks, self._ib, self._tk, self._ti, self._ak, self._ai, self._qe, self._qb, self._c)
        if len(ids):
            self._place(ids, _NONE_I, cols, _NONE_I)  # each block keeps its tier and release order

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
        hl = self._hashless
        if n > len(hl) + (len(self._lru) if self._flat else self._c[LIVE]):  # (len(self), inlined)
            raise ValueError(f"cannot take {n} blocks: only {len(self)} free")
        if not self._flat and n > len(hl) and self._expiry_due(now, arrival):
            self.rescore_expired(now, arrival)  # before taking anything: a failing score hook takes nothing
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
            deque(map(lru.pop, got), maxlen=0)  # (dict.pop: a builtin method, ~3x cheaper a call than __delitem__)
            if self._ins - len(lru) > max(_COMPACT, 20 * math.isqrt(len(lru))):
                self._compact()
            out += got
            self._popped = (out, nh, None)
            return out
        if self.ordered:
            lru = self._lru
            try:
                got = self._evict(need, MappingProxyType(lru), now)  # read-only view, O(1)
                got = got.tolist() if hasattr(got, "tolist") else list(got)
                plain = set(map(type, got)) <= _INT  # plain ints (the runtime's answer): checked in C
                if (len(got) != need or len(set(got)) != need
                        or not (plain or all(isinstance(i, Integral) for i in got))
                        or not all(map(lru.__contains__, got))):
                    raise ValueError(f"evict_blocks returned {got!r:.200}: need {need} distinct free cached block ids")
            except BaseException:  # a failed choice takes nothing: every block stays free
                self._hashless.extendleft(reversed(out))
                raise
            deque(map(lru.pop, got), maxlen=0)
            out += got if plain else [int(i) for i in got]
            self._popped = (out, nh, None)
            return out
        state = (self._ib, self._val, self._hv, self._hi, self._c)
        if self._choose is None:
            got = np.empty(need, np.int64)
            pinned = np.empty(need, np.bool_)
            nb.take(need, True, got, pinned, *state)
            out += got.tolist()
            self._popped = (out, nh, (got, pinned))
            return out
        k = min(int(self._c[LIVE]), 4 * need)
        cands_a = np.empty(k, np.int64)
        pinned = np.empty(k, np.bool_)
        nb.take(k, False, cands_a, pinned, *state)
        cands = cands_a.tolist()
        try:
            idx = self._choose(cands, need, now)
            chosen = set(range(need)) if idx is None else set(idx)
            if (len(chosen) != need or (idx is not None and len(idx) != need)
                    or not all(isinstance(k, Integral) and 0 <= k < len(cands) for k in chosen)):
                raise ValueError(f"choose_victims returned {idx!r}: need {need} distinct indices < {len(cands)}")
        except BaseException:  # a failed choice takes nothing: every block stays free
            nb.settle(cands_a, np.zeros(k, np.bool_), *state)  # take freed room for k heap entries
            self._hashless.extendleft(reversed(out))
            raise
        mask = np.zeros(k, np.bool_)
        mask[[int(j) for j in chosen]] = True
        nb.settle(cands_a, mask, *state)
        got = cands_a[mask]
        out += got.tolist()
        self._popped = (out, nh, (got, pinned[mask]))
        return out

    def _compact(self) -> None:
        """(fifo mode) Rebuild ``_lru`` without its deleted slots. A dict keeps
        the slot of a deleted entry until it resizes, and iterating from the
        front walks every such slot; pops delete at the front, so each pop's
        ``islice`` walked all the blocks popped (and hit) since the last
        resize, thousands on a 9k-block cache (a resize only comes once the
        table is full, ~1.3-2.4x the live blocks): ~40% of a pop's time on the
        Mooncake trace (9k blocks).
        A rebuild costs O(live), once per ``max(_COMPACT, 20 * isqrt(live))`` deletions."""
        self._lru = dict.fromkeys(self._lru)
        self._ins = len(self._lru)

    def hashless_popped(self, ids: list[int]) -> int | None:
        """How many of the last :meth:`pop`'s victims (``ids``, the list it
        returned) were hashless blocks (they come first), or ``None`` if
        ``ids`` is not that list."""
        rec = self._popped
        return rec[1] if rec is not None and rec[0] is ids else None

    def _state(self) -> tuple:
        return self._ib, self._val, self._hv, self._hi, self._c

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
            lru = self._lru  # back at the front, in order (a failure path: O(free blocks))
            rest = list(lru)
            lru.clear()
            lru.update(zip(taken, repeat(None)))
            lru.update(zip(rest, repeat(None)))
            self._ins = len(lru)
        elif cached is not None:
            got, pinned = cached  # take freed room for them on the heap
            nb.restore(got, pinned, *self._state())
        self._hashless.extendleft(reversed(out[:nh]))
