"""The ``utility`` variant of ``spf_expected_utility``: learned hit density.

Expected utility of keeping a free block = P(it is reused before it is
evicted) x recompute saved per hit / cache space-time it occupies until then.
With every block the same size and every hit saving one block of prefill,
that is the *hit density* of LHD (Beckmann, Chen, Cidon, "LHD: Improving
Cache Hit Rate by Maximizing Hit Density", NSDI 2018): expected hits per
block per arrival of residence. Lowest density is evicted first.

Model (all ages and gaps in arrivals, :attr:`RequestView.arrival_index`, so
the simulator and the engine decide identically):

* **Classes.** A block's class is fixed at its latest access (store or hit):
  ``group`` x ``g``, ``group = kind x depth bucket``, with ``max_count``
  values of ``g``: 0 for a block seen for the first time, else
  (``gap_classes``, default) ``1 + floor(log2(gap)) // gap_octaves`` (capped)
  where ``gap`` is the block's *mean* reuse gap ``(latest access - first
  access) // (accesses - 1)`` (``gap_mean``, default; its reuse interval, so
  a hot block under random reuse is told from a warm one; under cyclic reuse
  it equals the latest gap) or the gap of its latest reuse
  (``gap_mean=False``); or (``gap_classes=False``) ``min(accesses,
  max_count) - 1``. Accesses, gaps and the first access include those
  across an eviction, remembered by ghosts. ``kind`` is
  0 = decode block (not a prompt block of the accessing request),
  1 = prompt block of a *fresh* request (its prompt's seen prefix, cached or
  ghost, is at most ``root_blocks`` long), 2 = prompt block of a
  *continuation* (a longer seen prefix: a later turn of a conversation).
  Depth bucket (``depth_classes``, default 4) = ``min(floor(log2(depth + 1))
  // depth_octaves, depth_classes - 1)`` of the block's 0-based chain
  position: deep blocks are reused less often and later (Mooncake, first-time
  blocks: p 0.34 at depth 1, 0.17 at depth >= 64), and a deep block is only
  hit after its whole prefix is.
* **Reuse-gap distributions, learned online.** Per class, a decayed histogram
  ``h[c][j]`` of reuse gaps in log-spaced age buckets (``buckets_per_octave``
  per doubling) and a count ``never[c]`` of blocks never reused within the
  ghost horizon. Events: a hit on a resident block; a store of a block hash
  that is in the ghost list (evicted but remembered, ``ghost_factor x
  num_blocks`` entries), which is how reuse is learned while the cache
  thrashes (with LRU order on a cyclic workload nothing ever hits); a ghost
  falling off the list (``never``). Every ``period`` arrivals the histograms
  are multiplied by ``decay`` and the table below is rebuilt.
* **Index.** For a block of class ``c`` at age ``a`` (bucket ``i``, lower edge
  ``a``), keeping it until horizon ``T`` (end of bucket ``j >= i``) yields
  ``hits(i, j) = sum_{x=i..j} h[x]`` expected hits at a cost of
  ``occ(i, j) = sum_{x=i..j} h[x] (age_x - a) + tail(j) (T - a)`` block-arrivals
  (``tail(j)`` = gaps beyond ``T`` plus ``never``), both per block at age >= a.
  The score is ``max_j hits / occ``: the best hit density over horizons, the
  Gittins-index form of LHD's density (Gittins 1979; for caching, Aven,
  Coffman, Kogan 1987), so a block whose reuse is still ahead at a known gap
  (cyclic reuse) ranks above a fresh one, and a block past every observed gap
  falls to ~0 and ages out. A prior of ``prior_weight`` pseudo-observations
  of the pooled distribution keeps sparse classes sane, plus ``gap_prior``
  pseudo-observations, in each reused class, at the lower edge of the class's
  own gap range, so that a class without data yet predicts reuse at its own
  gap rather than ranking like the pooled average.
* **Re-scoring.** Per class, each rebuild also derives, for each bucket
  ``i``, the first later bucket whose index differs from bucket ``i``'s by
  more than ``rel_tol`` (relative; default 0: exactly equal values merge) and,
  optionally, lies below ``cut_factor`` x the eviction frontier (see
  :func:`change_points`). A score expires when the block's age reaches that
  bucket (at most ``max_ttl`` arrivals ahead); if no later bucket differs the
  score never expires (``2**62``: no expiry heap entry, never re-scored).
  The answer is one :class:`~spfcore.Scores` per batch (values and
  arrival expiries as numpy arrays; a plain value array when nothing
  expires). Each block is re-scored at most once per bucket it ages through
  (O(log age)).
* **Count term** (``count_weight`` > 0, default off): score x ``(1 +
  count_weight x log2(accesses))``, a frequency tie-break within a class.
* **Chains.** Within one scored batch a block never outranks its parent (a
  prefix hit needs the whole chain from depth 0).

Units: score value = expected hits per block per arrival of residence
(x ``block_size`` tokens = expected prefill tokens saved per block-arrival).

Costs (every hook takes the batch form, :class:`~spfcore.BlockBatch`): the
records live in numpy arrays indexed by a slot per block hash, a slot's fields
in one 64-byte row (``_R``; the named arrays are its column views) and a block
id's map entry in one 32-byte row (``_M``), so a record touched is one cache
line; one dict (``rec``) maps each hash to the slot of its newest record,
resident or ghost (a per-slot ``state`` tells which), and the ghost list's
LRU order is a queue of stamped entries. A store and an eviction look each
hash up once (``map`` over the keys, in C; hashing a 128-bit key is most of
it) and do the rest in one compiled pass each (:func:`_nb.store_records` and
:func:`_nb.map_stored`: ghosts coming back, new records, re-accesses, the id
map; :func:`_nb.evict_records`: records to ghosts, the frontier, the id map);
a hit whose blocks the id map names does no lookup at all
(:func:`_nb.hit_ids`). An eviction or a ghost coming back only flips states
in numpy (no hash moves between dicts), and a hash leaves the dict only when
its ghost falls off the list. Blocks hit without a record, hashes held twice
and ghosts of resident hashes take short Python paths. A score batch on the
runtime's block table is one compiled pass over block ids
(:func:`_nb.score_ids`: slots from the id map, two table gathers (value,
re-score offset), the chain cap, the expiries); other batches go by hash.
No per-block Python object. O(prompt blocks) per arrival (the seen prefix
stops after ``root_blocks + 1`` blocks; the prompt's hash set),
O(classes x buckets^2) compiled work per ``period`` arrivals (index table
and change points, :func:`_nb.index_table`; classes = 3 kinds x
``depth_classes`` x ``max_count`` = 96 by default, but a class without data
has the prior's row of its reuse class, computed once: 8 to 18 rows of 96
on the seed's workload; at most ``MAX_REBUILD_PAIRS`` triples); the
age-bucket layout is built once per (``buckets_per_octave``,
``max_age_log2``) and shared (one of at most :data:`LAYOUT_CACHE_BYTES`; a
larger one once per policy). Re-scores: every expiry fires where the
block's index changes (``rel_tol`` 0), and on the seed's full-scale
workload each of them does change the block's value
(measured: 214,278 of 214,278), so none is a no-op the evictor could skip
(skipping one safely would need a proof that its new value leaves the order
as it is); in the plugin they cost one compiled pass per batch. Victims: the
index takes few distinct values (table entries), so the evictor's per-value
groups hand them out in O(1) amortized each. Mooncake (288,500 block
references, 9,139 blocks): about 4.3M blocks scored (most re-scores as
blocks age into the next bucket).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from itertools import repeat

import numpy as np

from spfcore import NEVER_ARRIVAL, Scores, hookimpl
from spfcore_spf_expected_utility.params import ExpectedUtilityParams, ghost_entries

N_KINDS = 3  # decode, fresh prompt, continuation prompt
_nb = None  # spfcore_spf_expected_utility._nb (numba), loaded by the first UtilityPolicy


def _load_nb():
    """Import (compile, or load from numba's cache) the compiled table
    rebuild once per process, numba made safe for vLLM first."""
    global _nb
    if _nb is None:
        from spfcore.evictor import prepare_numba

        prepare_numba()
        from spfcore_spf_expected_utility import _nb as mod

        mod.warm()
        _nb = mod
    return _nb


def change_offsets(rows, lo_int, rel_tol: float, cut: float = math.inf) -> np.ndarray:
    """Re-score offsets of an index table (numpy, O(rows x buckets^2)
    elementwise work in a few array operations).

    Args:
        rows: ``(classes, buckets)`` index table (array-like of floats).
        lo_int, rel_tol, cut: As in :func:`change_points`.

    Returns:
        ``(classes, buckets)`` int64 array: the ``offset`` of
        :func:`change_points` per entry, ``-1`` for ``None`` (flat: never re-score).
    """
    r = np.asarray(rows, dtype=np.float64)  # (nc, nb)
    nc, nb = r.shape
    x = r[:, :, None]  # row[i]
    y = r[:, None, :]  # row[j]
    later = np.triu(np.ones((nb, nb), dtype=bool), 1)  # j > i
    with np.errstate(invalid="ignore"):  # inf - inf: NaN compares False, as in Python
        differs = (np.abs(y - x) > rel_tol * np.abs(x)) & later  # (nc, i, j)
    if cut == math.inf:  # every value is below an infinite cut
        crosses = differs
    else:
        crosses = differs & ((x < cut) | (y < cut))
    first = crosses.argmax(2)  # first such j (0 if none)
    lo = np.asarray(lo_int, dtype=np.int64)
    return np.where(crosses.any(2), lo[first], np.where(differs.any(2), lo[nb], -1))


def change_points(row: list[float], lo_int: list[int], rel_tol: float, cut: float = math.inf) -> list[tuple]:
    """Where one class's index row changes enough to re-score a block.

    Args:
        row: Index per age bucket (expected hits per block-arrival).
        lo_int: First integer age (arrivals) of each bucket, and the end.
        rel_tol: A later bucket ``j`` differs from bucket ``i`` if
            ``|row[j] - row[i]| > rel_tol * row[i]`` ...
        cut: ... and ``min(row[i], row[j]) < cut``: among values all above
            ``cut`` (far above what is being evicted) order does not matter.

    Returns:
        Per bucket ``i``: ``(row[i], offset)``; ``offset`` = first integer age
        of the first bucket ``j > i`` that differs, or ``lo_int[-1]`` if none
        differs only because of ``cut`` (re-score after ``max_ttl``), or
        ``None`` if the row is flat from ``i`` on (never re-score).
    """
    return change_points_all([row], lo_int, rel_tol, cut)[0]


def change_points_all(rows: list[list[float]], lo_int: list[int], rel_tol: float,
                      cut: float = math.inf) -> list[list[tuple]]:
    """:func:`change_points` of every row at once (see :func:`change_offsets`)."""
    off = change_offsets(rows, lo_int, rel_tol, cut).tolist()
    return [[(v, o if o >= 0 else None) for v, o in zip(row, orow)] for row, orow in zip(rows, off)]


#: Age-bucket layouts of at most this many bytes (estimated: 8 B an integer age, 56 B a bucket)
#: are kept for reuse, the 8 used last (:func:`_age_buckets`): 8 MiB, so at most 64 MiB in all.
#: The default layout holds 0.7 MiB; the largest the table bound accepts, 64 MiB (``max_age_log2``
#: 22 at 1 bucket per octave; measured by tracemalloc: 0.71 and 64.0 MiB).
LAYOUT_CACHE_BYTES = 8 * 2**20


def _age_buckets(buckets_per_octave: int, max_age_log2: int) -> tuple:
    """``(nb, lo, lo_int, bucket_of)`` of an age-bucket layout, built once per
    layout up to :data:`LAYOUT_CACHE_BYTES` (a larger one once per policy; a
    policy instance only reads them). ``lo``: float lower edges of buckets
    ``0 .. nb-1`` and the end (arrivals, numpy); ``lo_int``: first integer age
    of each bucket and the end; ``bucket_of[age]``: bucket of each integer age
    ``0 .. lo_int[-1]``."""
    nb = 1 + buckets_per_octave * max_age_log2
    ages = 2 + math.ceil(2.0 ** (nb / buckets_per_octave))
    if 8 * ages + 56 * (nb + 1) <= LAYOUT_CACHE_BYTES:
        return _cached_age_buckets(buckets_per_octave, max_age_log2)
    return _build_age_buckets(buckets_per_octave, max_age_log2)


@functools.lru_cache(maxsize=8)
def _cached_age_buckets(buckets_per_octave: int, max_age_log2: int) -> tuple:
    """:func:`_build_age_buckets`, the 8 used last kept (small layouts only: :func:`_age_buckets`)."""
    return _build_age_buckets(buckets_per_octave, max_age_log2)


def _build_age_buckets(buckets_per_octave: int, max_age_log2: int) -> tuple:
    """:func:`_age_buckets`'s layout, built."""
    k = buckets_per_octave
    nb = 1 + k * max_age_log2
    # bucket j >= 1 covers ages [lo_j, lo_{j+1}); bucket 0 is age 0
    lo = np.array([0.0] + [2.0 ** ((j - 1) / k) for j in range(1, nb)] + [2.0 ** (nb / k)])
    lo.setflags(write=False)
    lo_int = [0] + [math.ceil(x) for x in lo[1:]]
    bucket_of = [0] * (lo_int[-1] + 1)  # small ages: direct lookup
    for j in range(nb):  # the largest j with lo_int[j] <= age (an empty bucket gets no age)
        a, b = lo_int[j], (lo_int[j + 1] if j + 1 < nb else len(bucket_of))
        if b > a:
            bucket_of[a:b] = [j] * (b - a)
    return nb, lo, tuple(lo_int), tuple(bucket_of)


#: The record fields of a slot, the columns of ``UtilityPolicy._R`` (8 x 8 bytes: one cache line per slot).
_REC = ("state", "last", "cls", "count", "first", "epoch_of", "_nhold", "_id_of_slot")
#: The id map's fields of a block id, columns 0-2 of ``UtilityPolicy._M``.
_IDS = ("_slot_of_id", "_pslot_of_id", "_pgen_of_id")


def _rows(n: int, k: int) -> np.ndarray:
    """``(n, k)`` int64 zeros whose rows start on 64-byte boundaries (``k``
    divides 8), so a row's fields share a cache line."""
    buf = np.zeros(n * k + 8, np.int64)
    off = (-buf.ctypes.data % 64) // 8
    return buf[off:off + n * k].reshape(n, k)


def _pick(keys: list, idx: np.ndarray) -> list:
    """``[keys[j] for j in idx]`` for increasing positions ``idx``, in C
    (``keys`` itself when ``idx`` is every position)."""
    if len(idx) == len(keys):
        return keys
    return list(map(keys.__getitem__, idx.tolist()))


def _bit_length(x: np.ndarray) -> np.ndarray:
    """``int.bit_length`` of each non-negative integer (exact below 2**53)."""
    return np.frexp(x.astype(np.float64))[1].astype(np.int64)


class UtilityPolicy:
    """Evict the lowest learned hit density first (see the module doc).

    State per block hash with a record: a *slot* (row of the record arrays
    ``last`` (arrival of the latest access), ``count`` (accesses), ``cls``
    (class), ``first`` (arrival of the first access), ``epoch`` (table epoch
    at eviction, ghosts only), ``state`` (1 resident, 2 ghost)); ``rec``
    maps each hash to its newest record's slot (``info`` and ``ghost``, the
    resident and the evicted ones in LRU order, are views for tests). A
    record keeps its slot from its first store until it falls off the ghost
    list. Slot 0 is a sentinel (no record: score 0, never re-scored).

    The simulator's sequential replay of this class (``count_weight`` 0, not a
    subclass) is compiled (:mod:`spfcore.sim._replay_spf_nb`): a change to the
    records, ghosts, classes, table, score or chain cap needs the same change
    there (``tests/test_sim_compiled.py`` compares every decision).

    Args:
        params: :class:`ExpectedUtilityParams`; only its ``utility`` fields are read.

    Raises:
        ValueError: tables or a rebuild beyond their bounds
            (:meth:`ExpectedUtilityParams.check_tables`, also for params of the
            ``seed`` variant); from :meth:`spfcore_cache_configured`, a ghost
            list beyond :data:`~spfcore_spf_expected_utility.params.MAX_GHOST_BYTES`
            at that cache size (:func:`~spfcore_spf_expected_utility.params.ghost_entries`).
    """

    # chain-only: the hooks read keys, ids, depth and parents (blocks and table) alone, so the runtime
    # writes no other column (contract 1.4)
    capabilities = frozenset({"scoring", "chain-only"})

    def __init__(self, params: ExpectedUtilityParams | None = None) -> None:
        self.params = p = params or ExpectedUtilityParams()
        p.check_tables()  # (params of the seed variant are not checked when built)
        # lo: bucket lower edges (float); lo_int: first integer age of each bucket, and the end;
        # bucket_of: bucket per small integer age (direct lookup); shared read-only per layout
        self.nb, self.lo, lo_int, self.bucket_of = _age_buckets(p.buckets_per_octave, p.max_age_log2)
        self.lo_int = list(lo_int)
        self._lo_int_np = np.array(lo_int, dtype=np.int64)
        # bucket of min(age, len(bucket_of)): ages past the resolved range fall in the last bucket
        self._bucket_np = np.array(self.bucket_of + (self.nb - 1,), dtype=np.int64)
        self.per_kind = p.max_count  # reuse classes per group
        self.nd = p.depth_classes
        self.nc = N_KINDS * self.nd * self.per_kind  # groups (kind x depth bucket) x reuse classes
        # gap prior: a block reused at gap in [2**((g-1)*o), 2**(g*o)) is, until
        # its class has data, predicted to be reused at that gap again
        self.gap_prior = np.zeros((self.nc, self.nb))
        for c in range(self.nc):
            g = c % self.per_kind  # reuse class within the group; 0 = seen once, no prior
            if g == 0:
                continue
            gap = 2 ** ((g - 1) * p.gap_octaves)
            self.gap_prior[c, self.bucket_of[gap] if gap < len(self.bucket_of) else self.nb - 1] = p.gap_prior
        self._all_rows = np.arange(self.nc, dtype=np.int64)  # every index row computed (none known equal)
        self._rep = (self.lo[:self.nb] + self.lo[1:self.nb + 1]) / 2.0  # representative gap of each bucket
        self._lo_f = np.array(self.lo)  # a writable copy for the compiled loops (one array type)
        self._cwf = [1.0]  # count term per access count (index 0 unused), grown on demand
        self._pw = [1.0]  # decay ** k, grown on demand (_decay_pow)
        self._pw_np = np.ones(1)
        self.rescored = 0  # blocks scored (first scores and re-scores), for cost accounting
        self._reset(0)

    def _reset(self, num_blocks: int) -> None:
        p = self.params
        self.t = 0
        self.kind = 1  # kind of the current request's prompt blocks
        self.prompt: set | None = set()  # the current request's prompt hashes (built on first need)
        self._prompt_keys: tuple = ()
        # One dict for every record: block hash -> slot of its newest record, resident
        # (state 1) or a ghost (state 2, evicted but remembered). An eviction or a ghost
        # coming back flips the slot's state; the dict changes only when a hash is seen the
        # first time or its ghost falls off the list (the per-block churn of moving hashes
        # between a resident dict and a ghost dict cost more than the rest of the hooks).
        self.rec: dict = {}
        self._dual: dict = {}  # hash -> slot of its ghost record, for a hash whose newest record is resident
        # The ghost list, oldest first: ``_q[_qh:_qt]`` holds the slot of each eviction in order;
        # position p is the ghost's place in the list iff that slot is a ghost whose ``_stamp``
        # is p (others are left behind by ghosts that came back: passed over, dropped by _room).
        self._q = np.zeros(1024, np.int64)
        self._qh = self._qt = 0
        self.nghost = 0  # ghost records (places in the list)
        self.ghost_cap = ghost_entries(p.ghost_factor, num_blocks)  # (ValueError beyond MAX_GHOST_BYTES)
        n = max(64, num_blocks + self.ghost_cap // 4)
        # per slot, one 64-byte row of _R (a slot's fields on one cache line; the names are column views):
        # state (0 free, 1 resident, 2 ghost), last, cls, count, first, epoch_of, _nhold, _id_of_slot
        self._bind_rows(_rows(n, len(_REC)))
        self._stamp = np.zeros(n, np.int64)  # per ghost slot: its position in _q
        self.key_of: list = [None] * n  # per slot: its record's hash
        self.count[:] = 1
        self.cls[0] = self.nc  # the sentinel's class: the all-zero, never-changing row
        # the free slots, a stack (top last): slots 1, 2, ... are handed out first
        self._fs = np.arange(n - 1, -1, -1, dtype=np.int64)
        self._nfree = n - 1
        self.hist = np.zeros((self.nc, self.nb))
        self.never = np.zeros(self.nc)
        self._install(np.zeros((self.nc, self.nb)), math.inf)
        self.next_build = 0
        self.epoch = 0  # table builds so far (decay steps)
        self.theta = 0.0  # eviction frontier: largest victim index in the previous period
        self.theta_next = 0.0  # ... in the current period
        # The id map (see _score_by_ids): per block id of the runtime's table the slot of the
        # hash it holds (0: none), the slot of its parent hash when stored (-1: depth 0, 0:
        # unknown) and that slot's generation then; per slot the ids mapped to it, the last
        # one, and a generation bumped when the slot stops naming its hash's record.
        self._table = None
        self._ids_ok = True  # False once set_record or a foreign batch made the map unsure
        m = max(16, num_blocks)
        self._bind_ids(_rows(m, 4))  # per block id, one 32-byte row of _M: _slot_of_id, _pslot_of_id, _pgen_of_id
        self._gen = np.zeros(n, np.int64)
        self._scratch = np.full(n, -1, np.int64)
        self._orphans: dict = {}  # hash -> ids that held it when it lost its record (checked on use)

    # ------------------------------------------------------------ records
    def _room_slots(self, m: int) -> None:
        """At least ``m`` free slots (the record arrays grow by doubling; the
        new slots go to the bottom of the free stack)."""
        if self._nfree >= m:
            return
        n = len(self.last)
        grow = max(n, m)
        r = _rows(n + grow, len(_REC))
        r[:n] = self._R
        self._bind_rows(r)
        for name in ("_gen", "_stamp"):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(grow, np.int64)]))
        self._scratch = np.concatenate([self._scratch, np.full(grow, -1, np.int64)])
        self.key_of += [None] * grow
        fs = np.empty(n + grow, np.int64)
        fs[:grow] = np.arange(n + grow - 1, n - 1, -1)
        fs[grow:grow + self._nfree] = self._fs[:self._nfree]
        self._fs = fs
        self._nfree += grow

    def _alloc(self, m: int) -> np.ndarray:
        """``m`` free slots, from the top of the free stack."""
        self._room_slots(m)
        nf = self._nfree - m
        self._nfree = nf
        return self._fs[nf:nf + m].copy()

    def _release_slots(self, sl) -> None:
        """Slots ``sl`` (in order) back on top of the free stack."""
        k = len(sl)
        self._fs[self._nfree:self._nfree + k] = sl
        self._nfree += k

    def _new(self, keys: list, grp: np.ndarray) -> np.ndarray:
        """Records for hashes seen the first time now: one access, class 0 of
        their group (``grp``, an array). Returns their slots (a hash twice in
        ``keys``: the later slot is its record)."""
        s = self._alloc(len(keys))
        t = self.t
        self.last[s] = t
        self.count[s] = 1
        self.cls[s] = grp * self.per_kind
        self.first[s] = t
        self.state[s] = 1
        sl = s.tolist()
        self.rec.update(zip(keys, sl))
        key_of = self.key_of
        for j, k in zip(sl, keys):  # (a plain loop: about half the time of map over the bound __setitem__)
            key_of[j] = k
        return s

    def _res(self, key, default=None):
        """Slot of ``key``'s resident record, or ``default``."""
        s = self.rec.get(key)
        return s if s is not None and self.state[s] == 1 else default

    @property
    def info(self) -> dict:
        """Resident hash -> slot (O(records); tests, debugging)."""
        st = self.state
        return {k: s for k, s in self.rec.items() if st[s] == 1}

    @property
    def ghost(self) -> dict:
        """Evicted hash -> slot of its ghost record, oldest first (O(records); tests, debugging)."""
        st, stamp, key_of = self.state, self._stamp, self.key_of
        return {key_of[s]: s for p, s in enumerate(self._q[:self._qt].tolist())
                if p >= self._qh and st[s] == 2 and stamp[s] == p}

    def record(self, key) -> list | None:
        """``[last, count, class, first]`` of a resident hash, or None (tests, debugging)."""
        s = self._res(key)
        if s is None:
            return None
        return [int(self.last[s]), int(self.count[s]), int(self.cls[s]), int(self.first[s])]

    def set_record(self, key, last: int, count: int, cls: int, first: int = 0) -> None:
        """Make ``key`` resident with this record (tests)."""
        s = self._res(key)
        if s is None:
            g = self.rec.get(key)
            if g is not None:  # its ghost stays in the list, as the ghost record of a resident hash
                self._dual[key] = g
            s = self.rec[key] = int(self._alloc(1)[0])
            self.state[s] = 1
            self.key_of[s] = key
        self.last[s], self.count[s], self.cls[s], self.first[s] = last, count, cls, first
        self._ids_ok = False  # no block id named: score by hash from now on

    @property
    def table(self) -> list:
        """The index table, ``(classes, buckets)`` nested lists of floats (tests, debugging)."""
        return self._vals[:self.nc].tolist()

    # ------------------------------------------------------------ helpers
    def _bucket(self, age: int) -> int:
        bo = self.bucket_of
        return bo[age] if age < len(bo) else self.nb - 1

    def _buckets(self, age: np.ndarray) -> np.ndarray:
        """:meth:`_bucket` of each (non-negative) age."""
        bo = self._bucket_np
        return bo[np.minimum(age, len(bo) - 1)]

    def _grp(self, kind: int, depth: int) -> int:
        """Class group: kind x depth bucket (``floor(log2(depth + 1)) // depth_octaves``, capped)."""
        nd = self.nd
        if nd == 1:
            return kind
        j = ((depth + 1).bit_length() - 1) // self.params.depth_octaves
        return kind * nd + (j if j < nd else nd - 1)

    def _grps(self, kind, depth: np.ndarray) -> np.ndarray:
        """:meth:`_grp` of each block (``kind`` an int or an array; one kind:
        one compiled pass, :func:`_nb.groups`)."""
        nd = self.nd
        if nd == 1:
            return np.broadcast_to(np.asarray(kind, dtype=np.int64), depth.shape)
        if isinstance(kind, int):
            return _load_nb().groups(kind, np.ascontiguousarray(depth, np.int64), nd, self.params.depth_octaves)
        j = (_bit_length(depth + 1) - 1) // self.params.depth_octaves
        return np.minimum(j, nd - 1) + np.asarray(kind, dtype=np.int64) * nd

    def _cls(self, kind: int, count: int, gap: int = 0) -> int:
        p = self.params
        m = p.max_count
        base = kind * self.per_kind
        if count <= 1:
            return base
        if p.gap_classes:
            g = 1 + (gap.bit_length() - 1) // p.gap_octaves if gap > 0 else 1
            g = g if g < m else m - 1
        else:
            g = count - 1 if count < m else m - 1
        return base + g

    def _clss(self, grp: np.ndarray, count: np.ndarray, gap: np.ndarray) -> np.ndarray:
        """:meth:`_cls` of each block (arrays)."""
        p = self.params
        m = p.max_count
        if p.gap_classes:
            g = np.where(gap > 0, 1 + (_bit_length(gap) - 1) // p.gap_octaves, 1)
        else:
            g = count - 1
        return grp * self.per_kind + np.where(count <= 1, 0, np.minimum(g, m - 1))

    def _install(self, table, cut: float, same: np.ndarray | None = None) -> None:
        """Make ``table`` ((classes, buckets) index) the scores, with its re-score offsets
        (``same``: equal rows, the ``rep`` of :func:`_nb.density_index`; ``None``: none known)."""
        nb = self.nb
        vals = np.zeros((self.nc + 1, nb))
        vals[:self.nc] = table
        offs = np.full((self.nc + 1, nb), -1, np.int64)
        if vals.any():  # (an all-zero table, a new policy's, is flat: never re-scored, no offset to find)
            offs[:self.nc] = _load_nb().change_offsets(vals[:self.nc], self._lo_int_np, float(self.params.rel_tol),
                                                       float(cut), self._all_rows if same is None else same)
        self._vals, self._offs = vals, offs

    def _build(self) -> None:
        """Rebuild the per-class index table from the histograms (O(classes x
        buckets^2), compiled: :func:`_nb.index_table`) and its change points,
        then decay the histograms.

        For start bucket ``i`` (age ``a = lo_i``) and horizon bucket ``j >= i``:
        ``hits = H[j+1] - H[i]``, ``occ = sum_{x=i..j} h_x (rep_x - a) + tail_j
        (hi_j - a)``; index = max over ``j`` of ``hits / occ`` (where ``occ > 0``),
        at least 0; ``h`` = the class's histogram plus the priors."""
        p = self.params
        pooled = self.hist.sum(0)  # (numpy's reductions, as before: their summation order)
        pooled_never = self.never.sum()
        tot = pooled.sum() + pooled_never
        idx, same = _load_nb().index_table(
            self.hist, self.never, pooled, float(pooled_never), float(tot), float(p.prior_weight),
            bool(tot > 0 and p.prior_weight > 0), self.gap_prior, bool(p.gap_prior > 0 and p.gap_classes),
            self._rep, self._lo_f, self.nb, self.per_kind, float(p.decay))
        cut = p.cut_factor * self.theta if self.theta > 0 else math.inf
        self._install(idx, cut, same)
        self.theta = self.theta_next
        self.theta_next = 0.0
        self.epoch += 1

    # ------------------------------------------------------------ id map
    def _ids_grow(self, top: int) -> None:
        """Room for block ids up to ``top``."""
        m = len(self._slot_of_id)
        if top >= m:
            r = _rows(m + max(m, top + 1 - m), 4)
            r[:m] = self._M
            self._bind_ids(r)

    def _bind_rows(self, r: np.ndarray) -> None:
        """Make ``r`` the per-slot rows, its columns the record arrays (:data:`_REC`)."""
        self._R = r
        for j, name in enumerate(_REC):
            setattr(self, name, r[:, j])

    def _bind_ids(self, r: np.ndarray) -> None:
        """Make ``r`` the per-block-id rows, its columns the id map (:data:`_IDS`)."""
        self._M = r
        for j, name in enumerate(_IDS):
            setattr(self, name, r[:, j])

    def __getstate__(self) -> dict:
        # the column views are rebound on the copy's own rows (a copy would make them separate arrays)
        return {k: v for k, v in self.__dict__.items() if k not in _REC and k not in _IDS}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._bind_rows(self._R)
        self._bind_ids(self._M)

    def _own_table(self, blocks) -> bool:
        """Whether ``blocks`` is on the runtime's table (the first one seen);
        a batch on another table turns the id map off."""
        if self._table is None:
            self._table = blocks.table
        if blocks.table is not self._table:
            self._ids_ok = False
        return self._ids_ok

    def _map_stored(self, blocks, keys: list, fin: np.ndarray) -> None:
        """Map stored blocks to their records ``fin`` and their parents' slots."""
        if not self._own_table(blocks):
            return
        ids = blocks.ids
        p0 = self._table.parent[int(ids[0])]  # a stored batch is one chain: the first block's parent comes before it
        p0 = -1 if p0 is None else self._res(p0, 0)
        for _ in range(2):
            if _load_nb().map_stored(ids, fin, p0, self._slot_of_id, self._nhold, self._id_of_slot,
                                     self._pslot_of_id, self._pgen_of_id, self._gen):
                break
            self._ids_grow(int(ids.max()))  # an id beyond the map: room first
        if self._orphans:
            self._attach(keys)

    def _map_hit(self, blocks, new: np.ndarray, keys: list) -> None:
        """Map hit blocks ``new`` (positions) that got records, hashes ``keys``."""
        if not self._own_table(blocks):
            return
        ids = blocks.ids[new]
        self._ids_grow(int(ids.max()))
        fin = np.fromiter(map(self.rec.__getitem__, keys), np.int64, len(keys))
        _load_nb().assign(self._slot_of_id, self._nhold, self._id_of_slot, ids, fin)
        if self._orphans:
            self._attach(keys)

    def _attach(self, keys) -> None:
        """Copies of hashes in ``keys`` left without a record, still holding
        them (checked against the table), are mapped to the new records."""
        orphans, key = self._orphans, self._table.key
        for k in orphans.keys() & set(keys):
            held = [i for i in orphans.pop(k) if i < len(key) and key[i] == k]
            s = self._res(k) if held else None
            if s is not None:
                _load_nb().assign(self._slot_of_id, self._nhold, self._id_of_slot, np.array(held, np.int64),
                           np.full(len(held), s, np.int64))

    def _orphan(self, keys: list, s: np.ndarray) -> None:
        """Evicted hashes ``keys`` lost their records ``s``, each mapped to
        several block ids (the victim and copies): unmap them all; the copies
        become orphans (:meth:`_attach`). Records held by one id are unmapped
        by :func:`_nb.evict_records`."""
        for k, sl in zip(keys, s.tolist()):
            held = np.flatnonzero(self._slot_of_id == sl)
            self._slot_of_id[held] = 0
            self._orphans.setdefault(k, []).extend(held.tolist())
            self._nhold[sl] = 0
        if len(self._orphans) > len(self._slot_of_id):  # drop copies that no longer hold their hash
            key = self._table.key
            self._orphans = {k: v for k, v in self._orphans.items() if any(key[i] == k for i in v)}

    # ------------------------------------------------------------ hooks
    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        """Fresh state for a pool of ``num_blocks`` blocks (ValueError: a ghost list beyond
        ``MAX_GHOST_BYTES``, before anything is allocated)."""
        _load_nb()  # numba's kernels now, when a runtime is built (untimed), not in the first event
        self._reset(num_blocks)

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        t = self.t = request.arrival_index
        if t >= self.next_build:
            self._build()
            # warm-up: rebuild after 1, 2, 3, ... arrivals until ``period``
            self.next_build = t + min(self.params.period, 1 + t // 4)
        rec, rb = self.rec, self.params.root_blocks
        keys = request.block_keys
        seen = 0  # length of the seen prefix (cached or ghost), counted up to root_blocks + 1
        for k in keys:
            if seen > rb or k not in rec:
                break
            seen += 1
        self.kind = 2 if seen > rb else 1
        self.prompt = None
        self._prompt_keys = keys

    def _reaccess(self, s: np.ndarray, grp: np.ndarray, reuse_only: bool) -> None:
        """Records ``s`` accessed now by blocks of groups ``grp``: each access
        (with ``reuse_only`` only one at a positive gap) is a reuse at gap
        ``t - last`` (histogram, count); then its latest access is now and
        it moves to its new class (:meth:`_clss`). One compiled pass,
        :func:`_nb.reaccess` (the records come out as with the numpy form)."""
        p = self.params
        _load_nb().reaccess(s, np.ascontiguousarray(grp, np.int64), self.t, reuse_only, self.last, self.count,
                            self.first, self.cls, self.hist, self._bucket_np, self.per_kind, p.max_count,
                            p.gap_classes, p.gap_octaves, p.gap_mean)

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        if not len(blocks):
            return
        if self._ids_ok and blocks.table is self._table:  # every block's record from the id map: one compiled pass
            p = self.params
            if _load_nb().hit_ids(blocks.ids, self._slot_of_id, self.state, self.kind, self._table.depth, self.nd,
                                  p.depth_octaves, self.t, self.last, self.count, self.first, self.cls, self.hist,
                                  self._bucket_np, self.per_kind, p.max_count, p.gap_classes, p.gap_octaves,
                                  p.gap_mean):
                return
        keys = blocks.keys
        n = len(keys)
        grp = self._grps(self.kind, blocks.depth)
        slots = np.fromiter(map(self.rec.get, keys, repeat(-1)), np.int64, n)
        st = self.state[slots]  # (slot -1: the last slot's state, not used)
        old = (slots >= 0) & (st == 1)
        if not old.all():  # not seen through a store (a copy of an evicted hash): a new record
            new = np.flatnonzero(~old)
            nk = _pick(keys, new)
            gs = slots[new]
            gh = gs >= 0  # a ghost record: kept in the list as the ghost of a resident hash
            if gh.any():  # the ghost's slot no longer names the hash's record
                self._dual.update(zip(_pick(nk, np.flatnonzero(gh)), gs[gh].tolist()))
                self._gen[gs[gh]] += 1
            self._new(nk, grp[new])
            self._map_hit(blocks, new, nk)
            slots, grp = slots[old], grp[old]
        if len(slots):
            self._reaccess(slots, grp, False)

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        keys = blocks.keys
        n = len(keys)
        if not n:
            return
        self._map_stored(blocks, keys, self._store(blocks, keys, n))

    def _kinds(self, keys: list, n: int, d0: int) -> np.ndarray:
        """The kind of each stored block (hashes ``keys`` from depth ``d0``):
        the request's (:attr:`kind`) for a prompt block, 0 (decode)
        otherwise; one entry when all are alike."""
        pk = self._prompt_keys
        if list(pk[d0:d0 + n]) == keys:  # the prompt's own blocks (the usual store): one kind
            return np.array([self.kind], np.int64)
        if n == 1:  # one lookup: a scan of the prompt's keys costs less than building their set
            return np.array([self.kind if keys[0] in (pk if self.prompt is None else self.prompt) else 0], np.int64)
        if self.prompt is None:
            self.prompt = set(pk)
        if self.prompt.issuperset(keys):
            return np.array([self.kind], np.int64)
        inp = np.fromiter(map(self.prompt.__contains__, keys), bool, n)
        return np.where(inp, self.kind, 0).astype(np.int64)

    def _store(self, blocks, keys: list, n: int) -> np.ndarray:
        """The records' side of a store (one compiled pass,
        :func:`_nb.store_records`); returns the slot of each of ``keys``
        after it (``(n,)`` int64), the dict's where a hash comes twice.

        A hash twice gives it more than one record in this store (a ghost
        revived by the first copy and a new record for the second, or two new
        records): the dict names the last; the others stay resident with
        nothing naming them, so their generation changes (a parent slot the id
        map kept for a child of the hash is then looked up again by hash, as
        :meth:`_score_by_keys` finds it)."""
        ids = blocks.ids
        depth = blocks.table.depth  # (per block id)
        kinds = self._kinds(keys, n, int(depth[ids[0]]))
        rec = self.rec
        slots = np.fromiter(map(rec.get, keys, repeat(-1)), np.int64, n) if n > 1 else \
            np.array([rec.get(keys[0], -1)], np.int64)  # -1: no record
        self._room_slots(n)
        p = self.params
        nb = _load_nb()
        fin, new, dup, back, self._nfree = nb.store_records(
            slots, kinds, ids, depth, self.nd, p.depth_octaves, self.t, self.state,
            self.never, self.cls, self.epoch_of, self.epoch, self._decay_pow(self.epoch), self.last, self.count,
            self.first, self.hist, self._bucket_np, self.per_kind, p.max_count, p.gap_classes, p.gap_octaves,
            p.gap_mean, self._fs, self._nfree)
        self.nghost -= back
        m = len(new)
        if m:
            nk = keys if m == n else _pick(keys, new)
            sl = fin[new].tolist()
            b = len(rec)
            rec.update(zip(nk, sl))
            key_of = self.key_of
            for j, k in zip(sl, nk):  # (a plain loop: about half the time of map over the bound __setitem__)
                key_of[j] = k
            dup = dup or len(rec) - b != m
        if not dup:
            return fin
        got = np.fromiter(map(rec.__getitem__, keys), np.int64, n)
        self._gen[np.setdiff1d(fin, got)] += 1  # records of this store that no longer name their hash
        return got

    def _decay_pow(self, top: int) -> np.ndarray:
        """``decay ** k`` for ``k = 0 .. top`` at least (Python's pow, each
        computed once)."""
        pw = self._pw
        if top >= len(pw):
            decay = self.params.decay
            pw += [decay ** k for k in range(len(pw), top + 1)]
            self._pw_np = np.array(pw)
        return self._pw_np

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        n = len(keys)
        if not n:
            return
        rec, state = self.rec, self.state
        slots = np.fromiter(map(rec.get, keys, repeat(-1)), np.int64, n) if n > 1 else \
            np.array([rec.get(keys[0], -1)], np.int64)
        self._room(n)
        # one compiled pass: the frontier candidate, records to ghosts, the id map unmapped
        x, j, self._qt, multi = _load_nb().evict_records(
            slots, state, self.never, self.cls, self.epoch_of, self.epoch, self._q, self._qt, self._stamp, self.last,
            self._vals, self._bucket_np, self.t, self._ids_ok, self._nhold, self._slot_of_id, self._id_of_slot)
        if x > self.theta_next:  # the eviction frontier: the last victim ranked highest
            self.theta_next = x
        if len(j) < n:  # a copy whose hash was evicted before, or a hash twice (its first copy counts)
            if not len(j):
                return
            keys, slots = _pick(keys, j), slots[j]
        self.nghost += len(slots)
        nfree = self._nfree
        if self._dual:  # a resident hash with a ghost record: the new ghost takes the old one's place
            dual, stamp = self._dual, self._stamp
            for k, r in zip(keys, slots.tolist()):
                g = dual.pop(k, None)
                if g is not None:
                    stamp[r] = p = stamp[g]
                    self._q[p] = r
                    state[g] = 0
                    self._release_slots([g])
                    self.nghost -= 1
        if len(multi):  # copies held elsewhere: unmapped, remembered until the hash gets a record
            self._orphan(_pick(keys, multi), slots[multi])
        over = self.nghost - self.ghost_cap
        if over > 0:  # the oldest ghosts leave, oldest first
            self._trim(over)
        if self._nfree > nfree:  # freed slots name no record any more
            self._gen[self._fs[nfree:self._nfree]] += 1

    def _room(self, m: int) -> None:
        """Room for ``m`` more entries at the end of the ghost list: entries
        left behind are dropped (the ghosts keep their order, placed anew from
        0) and the array doubles if still more than half full."""
        q = self._q
        if self._qt + m <= len(q):
            return
        h, t = self._qh, self._qt
        es = q[h:t]
        keep = es[(self.state[es] == 2) & (self._stamp[es] == np.arange(h, t))]
        k = len(keep)
        if 2 * (k + m) > len(q):
            q = self._q = np.zeros(2 * (k + m) + 1024, np.int64)
        q[:k] = keep
        self._stamp[keep] = np.arange(k)
        self._qh, self._qt = 0, k

    def _trim(self, over: int) -> None:
        """Drop the ``over`` oldest ghosts (their slots to the free list, in
        that order, their hashes out of the record dict)."""
        tr, self._qh = _load_nb().trim_pass(self._q, self._qh, self._qt, over, self.state, self._stamp)
        tr = tr.tolist()
        ks = list(map(self.key_of.__getitem__, tr))
        if self._dual:  # the ghost record of a resident hash leaves the dual map, not the dict
            rec, dual = self.rec, self._dual
            for k, s in zip(ks, tr):
                if rec.get(k) == s:
                    del rec[k]
                else:
                    del dual[k]
        else:
            deque(map(self.rec.pop, ks), maxlen=0)  # (dict.pop: a builtin method, in C)
        self._release_slots(tr)
        self.nghost -= len(tr)

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        """Index of each block (see the module doc), as :class:`~spfcore.Scores`
        expiring (in arrivals) where the index next changes, at most
        ``max_ttl`` ahead (``2**62``: flat for the rest of the block's life,
        never re-scored); a plain array when no block expires.

        Blocks of the runtime's table are looked up by block id (the id map,
        :meth:`_score_by_ids`), others (and batches the map cannot answer
        exactly) by hash: the same answer either way."""
        self.rescored += len(blocks)
        if self._ids_ok and blocks.table is self._table and len(blocks):
            res = self._score_by_ids(blocks)
            if res is not None:
                return res
        return self._score_by_keys(blocks)

    def _score_by_keys(self, blocks):
        """:meth:`spfcore_score_blocks` by hash: a dict lookup per block."""
        keys = blocks.keys
        n = len(keys)
        s = np.fromiter(map(self.rec.get, keys, repeat(0)), np.int64, n)
        s[self.state[s] != 1] = 0  # 0: no resident record
        x = None
        if n > 1 and self.params.chain_monotone:
            x = lambda v: self._chain_cap(blocks, keys, v)  # noqa: E731
        return self._score_slots(s, x)

    def _score_by_ids(self, blocks):
        """:meth:`spfcore_score_blocks` through the id map: the slot of each
        block's hash and of its parent's read from arrays by block id, no
        per-block Python. ``None`` (score by hash) for a batch the map cannot
        answer exactly: a block without a record, or a hash held twice.

        The map is exact by construction: a store or a hit that makes a record
        maps the block ids holding the hash (copies whose hash lost its record
        are remembered and mapped again, checked against the table, when the
        hash gets one); an eviction unmaps them; a parent's slot is kept with
        the slot's generation, which changes whenever the slot stops naming
        that hash's record (then it is looked up again by hash).
        """
        ids = blocks.ids
        p = self.params
        if not p.count_weight:  # the usual case: the whole answer in one compiled pass
            st, x, e, expiring = _load_nb().score_ids(
                ids, self._slot_of_id, self._pslot_of_id, self._pgen_of_id, self._gen, self._scratch, self.last,
                self.cls, self._vals, self._offs, self._bucket_np, self._table.depth, self.t, p.max_ttl,
                p.chain_monotone and len(ids) > 1, NEVER_ARRIVAL)
            if st == 0:
                return Scores(x, expires_at_arrival=e) if expiring else x
            if st == 1:  # a block without a record, or a slot twice
                return None
            # st == 2: a parent's slot to look up again by hash: the steps below
        if int(ids.max()) >= len(self._slot_of_id):
            return None
        s = self._slot_of_id[ids]
        if not s.all():
            return None
        cap = None
        if len(ids) > 1 and self.params.chain_monotone:
            ps = self._pslot_of_id[ids]
            gen = self._gen
            stale = (ps == 0) | ((ps > 0) & (gen[np.maximum(ps, 0)] != self._pgen_of_id[ids]))
            if stale.any():  # the parent's slot may have changed: by hash
                j = np.flatnonzero(stale)
                sid = ids[j]
                get = self._res
                par = self._table.parent
                new = np.array([-1 if (q := par[i]) is None else get(q, 0) for i in sid.tolist()], np.int64)
                ps[j] = new
                self._pslot_of_id[sid] = new
                self._pgen_of_id[sid] = gen[np.maximum(new, 0)]
            pi = _load_nb().parent_pos(s, ps, self._scratch)
            if pi is None or len(pi) != len(ids):  # a hash twice in the batch
                return None
            depth = self._table.depth
            back = bool(depth[ids[0]] > depth[ids[-1]])
            cap = lambda v: _nb.chain_cap(np.ascontiguousarray(v, np.float64), pi, back)  # noqa: E731
        return self._score_slots(s, cap)

    def _score_slots(self, s: np.ndarray, cap):
        """Scores of records ``s`` (slots, 0: none); ``cap`` the chain cap of
        the values, or ``None``."""
        t = self.t
        p = self.params
        t0 = self.last[s]
        b = self._buckets(t - t0)
        c = self.cls[s]
        x = self._vals[c, b]
        off = self._offs[c, b]
        if p.count_weight:
            x = x * self._count_factor(self.count[s])
        if cap is not None:
            x = cap(x)
        never = off < 0
        if never.all():
            return x
        e = np.minimum(t0 + off, t + p.max_ttl)
        if never.any():
            e[never] = NEVER_ARRIVAL
        return Scores(x, expires_at_arrival=e)

    def _count_factor(self, count: np.ndarray) -> np.ndarray:
        """``1 + count_weight * log2(count)`` per block (Python floats, cached per count)."""
        f = self._cwf
        top = int(count.max())
        if top >= len(f):
            cw = self.params.count_weight
            f += [1.0 + cw * math.log2(k) for k in range(len(f), top + 1)]
            self._cwf_np = np.array(f)
        return self._cwf_np[count]

    @staticmethod
    def _chain_cap(blocks, keys: list, x: np.ndarray) -> np.ndarray:
        """Cap each block's value at its parent's, in one pass in chain order
        (parents first: a released chain comes tail first, so the pass runs
        backwards when the first block is deeper than the last); only a parent
        met earlier in the pass caps."""
        n = len(keys)
        depth = blocks.depth
        back = depth[0] > depth[-1]
        parents = blocks.parents
        _load_nb()
        pos = dict(zip(keys, range(n)))
        if len(pos) < n:  # a hash twice (a recomputed copy): the latest one met counts
            xs = x.tolist()
            low: dict = {}
            for k in (range(n - 1, -1, -1) if back else range(n)):
                pv = low.get(parents[k])
                if pv is not None and pv < xs[k]:
                    xs[k] = pv
                low[keys[k]] = xs[k]
            return np.array(xs)
        pi = np.fromiter(map(pos.get, parents, repeat(-1)), np.int64, n)
        return _nb.chain_cap(np.ascontiguousarray(x, np.float64), pi, bool(back))  # the same pass, compiled


__all__ = ["UtilityPolicy", "change_offsets", "change_points", "change_points_all"]
