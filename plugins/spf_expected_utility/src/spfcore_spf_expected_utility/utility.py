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
  ``kind`` x ``count`` where ``count = min(accesses, max_count)`` (accesses
  include those before an eviction, remembered by ghosts) and ``kind`` is
  0 = decode block (not a prompt block of the accessing request),
  1 = prompt block of a *fresh* request (its prompt's seen prefix, cached or
  ghost, is at most ``root_blocks`` long), 2 = prompt block of a
  *continuation* (a longer seen prefix: a later turn of a conversation).
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
  of the pooled distribution keeps sparse classes sane.
* **Re-scoring.** A score expires when the block's age enters the next bucket
  (at most ``max_ttl`` arrivals ahead), so scores age with no scan; each
  block is re-scored O(log age) times.
* **Chains.** Within one scored batch a block never outranks its parent (a
  prefix hit needs the whole chain from depth 0).

Units: score value = expected hits per block per arrival of residence
(x ``block_size`` tokens = expected prefill tokens saved per block-arrival).

Costs: O(1) per block in every observation hook (dict + OrderedDict), O(1)
per scored block (table lookup), O(prompt blocks) per arrival for the seen
prefix, O(classes x buckets^2) numpy work per ``period`` arrivals; victims
O(log n) in the evictor heap.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import attrs
import numpy as np
from attrs import validators as v

from spfcore import Score, hookimpl

NEVER_ARRIVAL = 2**62
N_KINDS = 3  # decode, fresh prompt, continuation prompt


@attrs.frozen
class UtilityParams:
    """Parameters of the ``utility`` variant.

    Attributes:
        max_count: Access-count classes 1..max_count (the last holds all
            higher counts); int >= 1.
        root_blocks: A request is a *continuation* if more than this many
            leading prompt blocks were seen before (cached or ghost); int >= 0.
            Default 1: every Mooncake request shares hash id 0.
        ghost_factor: Ghost entries for evicted block hashes, as a multiple of
            the pool (blocks); float > 0.
        buckets_per_octave: Age buckets per doubling of age (arrivals); int >= 1.
        max_age_log2: Ages up to 2**max_age_log2 arrivals are resolved; int >= 4.
        period: Arrivals between table rebuilds (and decays); int >= 1.
        decay: Factor applied to the histograms per ``period`` (0 < decay <= 1).
        prior_weight: Pseudo-observations of the pooled distribution added to
            each class (float >= 0).
        max_ttl: Longest a score lives before re-scoring, arrivals (int >= 1).
        chain_monotone: Cap a block's score at its parent's within a batch.
    """

    max_count: int = attrs.field(default=4, validator=[v.instance_of(int), v.ge(1)])
    root_blocks: int = attrs.field(default=1, validator=[v.instance_of(int), v.ge(0)])
    ghost_factor: float = attrs.field(default=8.0, validator=[v.instance_of((int, float)), v.gt(0)])
    buckets_per_octave: int = attrs.field(default=2, validator=[v.instance_of(int), v.ge(1)])
    max_age_log2: int = attrs.field(default=16, validator=[v.instance_of(int), v.ge(4)])
    period: int = attrs.field(default=16, validator=[v.instance_of(int), v.ge(1)])
    decay: float = attrs.field(default=0.98, validator=[v.instance_of((int, float)), v.gt(0), v.le(1)])
    prior_weight: float = attrs.field(default=1.0, validator=[v.instance_of((int, float)), v.ge(0)])
    max_ttl: int = attrs.field(default=128, validator=[v.instance_of(int), v.ge(1)])
    chain_monotone: bool = attrs.field(default=True, validator=v.instance_of(bool))


class UtilityPolicy:
    """Evict the lowest learned hit density first (see the module doc).

    Per resident block hash: ``[last access arrival, accesses, class]``; the
    same record moves to the ghost list on eviction.
    """

    name = "spf_expected_utility"
    capabilities = frozenset({"scoring"})
    Params = UtilityParams

    def __init__(self, params: UtilityParams | None = None) -> None:
        self.params = p = params or UtilityParams()
        self.nb = 1 + p.buckets_per_octave * p.max_age_log2
        k = p.buckets_per_octave
        # bucket j >= 1 covers ages [lo_j, lo_{j+1}); bucket 0 is age 0
        self.lo = np.array([0.0] + [2.0 ** ((j - 1) / k) for j in range(1, self.nb)] + [2.0 ** (self.nb / k)])
        lo_int = [0] + [math.ceil(x) for x in self.lo[1:]]
        self.lo_int = lo_int  # first integer age of each bucket, and the end
        self.bucket_of = [0] * (lo_int[-1] + 1)  # small ages: direct lookup
        j = 0
        for age in range(len(self.bucket_of)):
            while j + 1 < self.nb and age >= lo_int[j + 1]:
                j += 1
            self.bucket_of[age] = j
        self.nc = N_KINDS * p.max_count
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
        self.next_build = 0
        self.epoch = 0  # table builds so far (decay steps)

    # ------------------------------------------------------------ helpers
    def _bucket(self, age: int) -> int:
        bo = self.bucket_of
        return bo[age] if age < len(bo) else self.nb - 1

    def _cls(self, kind: int, count: int) -> int:
        m = self.params.max_count
        return kind * m + (count if count < m else m) - 1

    def _build(self) -> None:
        """Rebuild the per-class index table from the histograms (numpy,
        O(classes x buckets^2)), then decay the histograms."""
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
            self.next_build = t + self.params.period
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
        for b in blocks:
            r = info.get(b.key)
            if r is None:
                info[b.key] = [t, 1, c2(kind, 1)]
                continue
            hist[r[2], bucket(t - r[0])] += 1.0
            r[0] = t
            r[1] += 1
            r[2] = c2(kind, r[1])

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        info, ghost, t = self.info, self.ghost, self.t
        c2, prompt, kind = self._cls, self.prompt, self.kind
        hist, bucket = self.hist, self._bucket
        for b in blocks:
            k = b.key
            kd = kind if k in prompt else 0
            r = info.get(k)
            if r is None:
                r = ghost.pop(k, None)
                if r is None:
                    info[k] = [t, 1, c2(kd, 1)]
                    continue
                # the eviction counted as "never": take it back (decayed since)
                nv = self.never[r[2]] - self.params.decay ** (self.epoch - r.pop())
                self.never[r[2]] = nv if nv > 0.0 else 0.0
                info[k] = r
            if t > r[0]:
                hist[r[2], bucket(t - r[0])] += 1.0
                r[1] += 1
            r[0] = t
            r[2] = c2(kd, r[1])

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        info, ghost, cap = self.info, self.ghost, self.ghost_cap
        never, ep = self.never, self.epoch
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
        info, t, tab = self.info, self.t, self.table
        lo_int, bo, nbm = self.lo_int, self.bucket_of, self.nb - 1
        nbo = len(bo)
        max_ttl = self.params.max_ttl
        out = []
        vals = []
        for b in blocks:
            r = info.get(b.key)
            if r is None:  # not seen through a store/hit (cannot happen in a run): neutral
                vals.append(0.0)
                out.append(t + max_ttl)
                continue
            t0 = r[0]
            age = t - t0
            i = bo[age] if age < nbo else nbm
            vals.append(tab[r[2]][i])
            exp = t0 + lo_int[i + 1]
            if exp - t > max_ttl or i == nbm:
                exp = t + max_ttl
            out.append(exp if exp > t else t + 1)
        n = len(blocks)
        if n > 1 and self.params.chain_monotone:
            order = range(n - 1, -1, -1) if blocks[0].depth > blocks[-1].depth else range(n)
            low = {}
            for k in order:
                b = blocks[k]
                pv = low.get(b.parent)
                if pv is not None and pv < vals[k]:
                    vals[k] = pv
                low[b.key] = vals[k]
        out = [Score(x, expires_at_arrival=e) for x, e in zip(vals, out)]
        return out


__all__ = ["UtilityPolicy", "UtilityParams"]
