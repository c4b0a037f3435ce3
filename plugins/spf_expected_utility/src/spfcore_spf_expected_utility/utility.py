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
  score is a plain ``float`` (no expiry heap entry, never re-scored). Blocks
  with equal (value, expiry) in one batch share one ``Score`` object. Each
  block is re-scored at most once per bucket it ages through (O(log age)).
* **Count term** (``count_weight`` > 0, default off): score x ``(1 +
  count_weight x log2(accesses))``, a frequency tie-break within a class.
* **Chains.** Within one scored batch a block never outranks its parent (a
  prefix hit needs the whole chain from depth 0).

Units: score value = expected hits per block per arrival of residence
(x ``block_size`` tokens = expected prefill tokens saved per block-arrival).

Costs: O(1) per block in every observation hook (dict + OrderedDict), O(1)
per scored block (table lookup; one pass per batch, chain cap included),
O(prompt blocks) per arrival for the seen prefix, O(classes x buckets^2)
numpy work per ``period`` arrivals (index table and change points, both
vectorized; classes = 3 kinds x ``depth_classes`` x ``max_count`` = 96 by
default); the age-bucket layout is built once per (``buckets_per_octave``,
``max_age_log2``) and shared. Victims: the index takes few distinct values
(table entries), so the evictor's per-value groups hand them out in O(1)
amortized each.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict

import numpy as np

from spfcore import Score, hookimpl
from spfcore_spf_expected_utility.params import ExpectedUtilityParams

NEVER_ARRIVAL = 2**62
N_KINDS = 3  # decode, fresh prompt, continuation prompt


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
    """:func:`change_points` of every row at once (numpy, O(rows x buckets^2)
    elementwise work in a few array operations); same floats, same result.

    Args:
        rows: ``(classes, buckets)`` index table, Python floats.
        lo_int, rel_tol, cut: As in :func:`change_points`.

    Returns:
        Per row, the list :func:`change_points` returns for it.
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
    has_cross = crosses.any(2)
    has_diff = differs.any(2)
    end = lo_int[nb]
    lo = lo_int
    out = []
    for c in range(nc):
        fc, hc, hd = first[c].tolist(), has_cross[c].tolist(), has_diff[c].tolist()
        out.append([(v, lo[f] if h else (end if d else None))
                    for v, f, h, d in zip(rows[c], fc, hc, hd)])
    return out


@functools.lru_cache(maxsize=8)
def _age_buckets(buckets_per_octave: int, max_age_log2: int) -> tuple:
    """``(nb, lo, lo_int, bucket_of)`` of an age-bucket layout, built once per
    layout (a policy instance only reads them). ``lo``: float lower edges of
    buckets ``0 .. nb-1`` and the end (arrivals, numpy); ``lo_int``: first
    integer age of each bucket and the end; ``bucket_of[age]``: bucket of each
    integer age ``0 .. lo_int[-1]``."""
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


class UtilityPolicy:
    """Evict the lowest learned hit density first (see the module doc).

    Per resident block hash: ``[last access arrival, accesses, class, first
    access arrival]``; the same record moves to the ghost list on eviction
    (with the table epoch appended).

    Args:
        params: :class:`ExpectedUtilityParams`; only its ``utility`` fields are read.
    """

    def __init__(self, params: ExpectedUtilityParams | None = None) -> None:
        self.params = p = params or ExpectedUtilityParams()
        # lo: bucket lower edges (float); lo_int: first integer age of each bucket, and the end;
        # bucket_of: bucket per small integer age (direct lookup); shared read-only per layout
        self.nb, self.lo, lo_int, self.bucket_of = _age_buckets(p.buckets_per_octave, p.max_age_log2)
        self.lo_int = list(lo_int)
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
        self.rescored = 0  # blocks scored (first scores and re-scores), for cost accounting
        self._reset(0)

    def _reset(self, num_blocks: int) -> None:
        p = self.params
        self.t = 0
        self.kind = 1  # kind of the current request's prompt blocks
        self.prompt: set = set()
        self.info: dict = {}
        self.ghost: OrderedDict = OrderedDict()
        self.ghost_cap = max(1, int(p.ghost_factor * num_blocks))
        self.hist = np.zeros((self.nc, self.nb))
        self.never = np.zeros(self.nc)
        self.table = [[0.0] * self.nb for _ in range(self.nc)]
        self.rows = [[(0.0, None)] * self.nb for _ in range(self.nc)]
        self.next_build = 0
        self.epoch = 0  # table builds so far (decay steps)
        self.theta = 0.0  # eviction frontier: largest victim index in the previous period
        self.theta_next = 0.0  # ... in the current period

    # ------------------------------------------------------------ helpers
    def _bucket(self, age: int) -> int:
        bo = self.bucket_of
        return bo[age] if age < len(bo) else self.nb - 1

    def _grp(self, kind: int, depth: int) -> int:
        """Class group: kind x depth bucket (``floor(log2(depth + 1)) // depth_octaves``, capped)."""
        nd = self.nd
        if nd == 1:
            return kind
        j = ((depth + 1).bit_length() - 1) // self.params.depth_octaves
        return kind * nd + (j if j < nd else nd - 1)

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

    def _build(self) -> None:
        """Rebuild the per-class index table from the histograms (numpy,
        O(classes x buckets^2)) and its change points, then decay the histograms."""
        p = self.params
        h, nev = self.hist, self.never
        nb = self.nb
        lo = self.lo[:nb]
        hi = self.lo[1:nb + 1]
        rep = (lo + hi) / 2.0  # representative gap of each bucket
        pooled = h.sum(0)
        pooled_never = nev.sum()
        tot = pooled.sum() + pooled_never
        if tot > 0 and p.prior_weight > 0:
            h = h + p.prior_weight * pooled / tot
            nev = nev + p.prior_weight * pooled_never / tot
        if p.gap_prior > 0 and p.gap_classes:
            h = h + self.gap_prior
        # for start bucket i (age a = lo_i) and horizon bucket j >= i:
        #   hits = H[j+1] - H[i];  occ = sum_{x=i..j} h_x (rep_x - a) + tail_j (hi_j - a)
        H = np.concatenate([np.zeros((self.nc, 1)), np.cumsum(h, 1)], 1)  # (nc, nb+1)
        HR = np.concatenate([np.zeros((self.nc, 1)), np.cumsum(h * rep, 1)], 1)
        total = H[:, -1] + nev  # (nc,)
        ii = np.arange(nb)[:, None]
        jj = np.arange(nb)[None, :]
        valid = jj >= ii  # (nb, nb)
        a = lo[:, None]  # (nb, 1)
        hits = H[:, None, 1:] - H[:, :nb, None]  # (nc, i, j)
        sum_hr = HR[:, None, 1:] - HR[:, :nb, None]
        tail = total[:, None, None] - H[:, None, 1:]
        occ = sum_hr - hits * a[None] + tail * (hi[None, None, :] - a[None])
        with np.errstate(divide="ignore", invalid="ignore"):
            dens = np.where(valid[None] & (occ > 0), hits / occ, 0.0)
        idx = dens.max(2)
        self.table = idx.tolist()
        cut = p.cut_factor * self.theta if self.theta > 0 else math.inf
        self.rows = change_points_all(self.table, self.lo_int, p.rel_tol, cut)
        self.theta = self.theta_next
        self.theta_next = 0.0
        self.hist *= p.decay
        self.never *= p.decay
        self.epoch += 1

    # ------------------------------------------------------------ hooks
    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        self._reset(num_blocks)

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        t = self.t = request.arrival_index
        if t >= self.next_build:
            self._build()
            # warm-up: rebuild after 1, 2, 3, ... arrivals until ``period``
            self.next_build = t + min(self.params.period, 1 + t // 4)
        info, ghost = self.info, self.ghost
        seen = 0
        for k in request.block_keys:
            if k in info or k in ghost:
                seen += 1
            else:
                break
        self.kind = 2 if seen > self.params.root_blocks else 1
        self.prompt = set(request.block_keys)

    def _reuse(self, cls: int, gap: int) -> None:
        self.hist[cls, self._bucket(gap)] += 1.0

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        info, t = self.info, self.t
        c2 = self._cls
        kind = self.kind
        hist = self.hist
        bucket = self._bucket
        gm = self.params.gap_mean
        grp = self._grp
        for b in blocks:
            r = info.get(b.key)
            kg = grp(kind, b.depth)
            if r is None:
                info[b.key] = [t, 1, c2(kg, 1), t]
                continue
            gap = t - r[0]
            hist[r[2], bucket(gap)] += 1.0
            r[0] = t
            n = r[1] = r[1] + 1
            r[2] = c2(kg, n, (t - r[3]) // (n - 1) if gm else gap)

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        info, ghost, t = self.info, self.ghost, self.t
        c2, prompt, kind = self._cls, self.prompt, self.kind
        hist, bucket = self.hist, self._bucket
        gm = self.params.gap_mean
        grp = self._grp
        for b in blocks:
            k = b.key
            kd = grp(kind if k in prompt else 0, b.depth)
            r = info.get(k)
            if r is None:
                r = ghost.pop(k, None)
                if r is None:
                    info[k] = [t, 1, c2(kd, 1), t]
                    continue
                # the eviction counted as "never": take it back (decayed since)
                nv = self.never[r[2]] - self.params.decay ** (self.epoch - r.pop())
                self.never[r[2]] = nv if nv > 0.0 else 0.0
                info[k] = r
            gap = t - r[0]
            if gap > 0:
                hist[r[2], bucket(gap)] += 1.0
                r[1] += 1
            r[0] = t
            n = r[1]
            r[2] = c2(kd, n, (t - r[3]) // (n - 1) if gm and n > 1 else gap)

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        info, ghost, cap = self.info, self.ghost, self.ghost_cap
        never, ep = self.never, self.epoch
        if keys:  # the eviction frontier: the last victim ranked highest
            r = info.get(keys[-1])
            if r is not None:
                age = self.t - r[0]
                bo = self.bucket_of
                x = self.table[r[2]][bo[age] if age < len(bo) else self.nb - 1]
                if x > self.theta_next:
                    self.theta_next = x
        for k in keys:
            r = info.pop(k, None)
            if r is not None:
                ghost[k] = r
                never[r[2]] += 1.0  # pessimistic until the hash comes back
                r.append(ep)
        while len(ghost) > cap:
            ghost.popitem(last=False)

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        """Index of each block (see the module doc): a plain ``float`` when
        the index is flat for the rest of the block's life, else a ``Score``
        expiring (in arrivals) where the index next changes, at most
        ``max_ttl`` ahead. Equal (value, expiry) pairs share one Score."""
        info, t, rows = self.info, self.t, self.rows
        bo, nbm = self.bucket_of, self.nb - 1
        nbo = len(bo)
        p = self.params
        cap = t + p.max_ttl  # latest expiry (arrival index)
        cw = p.count_weight
        n = len(blocks)
        self.rescored += n
        out: list = [0.0] * n
        # one pass in chain order (parents first: a released chain comes tail first)
        if n > 1 and p.chain_monotone:
            order = range(n - 1, -1, -1) if blocks[0].depth > blocks[-1].depth else range(n)
            low: dict | None = {}  # key -> (capped) value of the blocks seen so far
        else:
            order, low = range(n), None
        cache: dict = {}  # (value, expiry) -> shared Score
        for k in order:
            b = blocks[k]
            r = info.get(b.key)
            e = None
            if r is None:  # not seen through a store/hit (cannot happen in a run): neutral
                x = 0.0
            else:
                t0 = r[0]
                age = t - t0
                x, off = rows[r[2]][bo[age] if age < nbo else nbm]
                if cw:
                    x *= 1.0 + cw * math.log2(r[1])
                if off is not None:
                    e = t0 + off
                    if e > cap:
                        e = cap
            if low is not None:
                pv = low.get(b.parent)
                if pv is not None and pv < x:
                    x = pv
                low[b.key] = x
            if e is None:
                out[k] = x
            else:
                key = (x, e)
                sc = cache.get(key)
                if sc is None:
                    sc = cache[key] = Score(x, expires_at_arrival=e)
                out[k] = sc
        return out


__all__ = ["UtilityPolicy", "change_points", "change_points_all"]
