"""The ``spf_expected_utility`` arm: expected utility of keeping a KV block.

Two variants, chosen by ``Params.variant`` (see :data:`VARIANTS`):

* ``"utility"`` (default): learned hit density, LHD-style (Beckmann et al.,
  NSDI 2018) in Gittins-index form; see :mod:`spfcore_spf_expected_utility.utility`.
* ``"seed"``: the SPF experiment's ExpectedUtilityScorer (:class:`SeedScorer`)
  applied to *whole prefix chains* (every cached block of a chain gets its
  chain's utility), plus prefetch hints that pin the next predicted session's
  prefix for a few arrivals (:class:`SeedPolicy`).

One policy class, :class:`ExpectedUtilityPolicy`, is registered under the
entry point. It builds the variant object and registers the variant's bound
hook implementations as its own (pluggy accepts bound methods stored on the
instance), so a hook call costs exactly what it costs on the variant object
and only the hooks the variant implements are called.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from spfcore import Hint, Scores, hookimpl
from spfcore.hookspecs import HOOK_NAMES
from spfcore_spf_expected_utility.params import SAVED_MS_PER_BLOCK, VARIANT_NAMES, ExpectedUtilityParams

LN51 = math.log(51.0)


class Chain:
    """What the policy knows about one prefix chain (all blocks sharing a root key).

    Attributes:
        accesses: Requests that used the chain (hit or stored any of its blocks).
        last: Arrival index of the latest such request; ``prev`` the one before (or None).
        consecutive: Length of the current run of accesses by the same session.
        session: Session of the latest access.
        blocks: Resident cached blocks of the chain.
        stable: Block hashes shared by the chain's last two requests (its
            stable prefix, e.g. a persona prompt); the only request's keys
            after one access. The keys a prefetch hint names.
    """

    __slots__ = ("accesses", "last", "prev", "consecutive", "session", "blocks", "stable")

    def __init__(self) -> None:
        self.accesses, self.last, self.prev, self.consecutive = 0, -1, None, 0
        self.session, self.blocks, self.stable = None, 0, ()


class SeedScorer:
    """The seed's ExpectedUtilityScorer, per chain ``x`` at arrival ``i``.

    P(reuse) = clip(T + R + F + C - D, 0, 1), with (c, h from Params):

    * T = min(c, p * min(1, ln(1 + n) / ln 51)): first-order session -> prefix
      transition. ``s`` = the session that last used ``x``, ``a`` = the prefix
      (root key) of ``s``'s latest request, N(a -> y) = times two consecutive
      requests of one session (any session) used prefixes a then y;
      n = N(a -> x), p = n / sum_y N(a -> y) (0 when a has no transitions).
    * R = min(c, 1 / (1 + recency / h)), recency = i - last (arrivals).
    * F = min(c / 2, ln(1 + accesses) / ln 51), accesses = requests that used x.
    * C = min(0.2 c, consecutive / 15), consecutive = current run of accesses
      of x by the same session.
    * D = min(c, reuse_distance / 20), reuse_distance = last - prev (arrivals)
      between the latest two accesses; 0 after a single access.

    Utility, ms of prefill time (seed formula):
    U = P * s * blocks - (1 - P) * victim_saved - (1 - P) * 0.5 * GB - 0.02, where
    s = ms saved per block (0.08 retention, 2.0 prefetch), blocks = resident
    blocks of x, GB = blocks * block_size * kv_bytes_per_token / 1e9 (the
    chain's KV size, decimal GB; 0.5 ms per GB is the seed's memory-pressure
    cost), victim_saved = s * (resident cached blocks / chains with resident
    blocks): what keeping an average resident chain instead would have saved
    had it been reused. -0.02 ms is the seed's fixed cost of acting.
    """

    def __init__(self, params: ExpectedUtilityParams) -> None:
        self.c, self.h = float(params.c), float(params.h)

    def terms(self, ch: Chain, p: float, n: int, arrival: int) -> dict[str, float]:
        """The five terms T, R, F, C, D (unitless) for chain ``ch`` at ``arrival``."""
        c = self.c
        recency = max(0, arrival - ch.last)
        reuse = ch.last - ch.prev if ch.prev is not None else 0
        return {"T": min(c, p * min(1.0, math.log1p(n) / LN51)),
                "R": min(c, 1.0 / (1.0 + recency / self.h)),
                "F": min(c / 2, math.log1p(ch.accesses) / LN51),
                "C": min(0.2 * c, ch.consecutive / 15.0),
                "D": min(c, reuse / 20.0)}

    def p_reuse(self, ch: Chain, p: float, n: int, arrival: int) -> float:
        """P(reuse) in [0, 1]."""
        t = self.terms(ch, p, n, arrival)
        return min(1.0, max(0.0, t["T"] + t["R"] + t["F"] + t["C"] - t["D"]))

    def utility(self, prob: float, blocks: int, saved_ms: float, victim_saved_ms: float, gb: float) -> float:
        """U in ms (see the class docstring); ``saved_ms`` = s per block."""
        q = 1.0 - prob
        return prob * saved_ms * blocks - q * victim_saved_ms - q * 0.5 * gb - 0.02


class SeedPolicy:
    """The ``seed`` variant: SPF's expected utility on whole prefix chains, plus prefetch hints.

    A chain is identified by its root key (the request's first block hash);
    each block belongs to the chain of the request that stored it. The score of
    a free block is ``U(chain)``, expiring at arrival ``i + score_ttl_arrivals``
    (lowest utility evicted first; blocks of one chain tie, so the evictor's
    release order evicts a chain's tail first). ``U`` and its terms are defined
    in :class:`SeedScorer`; a score batch computes ``U`` once per chain.

    Hints: at the arrival of a request of session ``s``, the next session is
    predicted as the most frequent successor of ``s`` in arrival order
    (probability q), and its prefix by the prefix transitions (probability p,
    see T). If ``q * p >= hint_min_p`` the chain's stable prefix is hinted,
    lapsing ``hint_arrivals`` arrivals later; the runtime pins its resident
    free blocks. In retention mode a chain with no resident block is not
    hinted (nothing to protect); in prefetch mode it is (a promotion request).

    Costs: every free block is re-scored once per ``score_ttl_arrivals``
    arrivals (in batches). A score batch reads each block's chain from an
    array indexed by block id (kept by the store and eviction hooks, O(1) per
    block there), computes ``U`` once per distinct chain and answers
    :class:`~spfcore.Scores` (numpy; no per-block Python). Hashes held by two
    blocks (recomputed copies) are tracked per block id, so the answer is
    the per-hash one exactly; a batch not on the runtime's block table (a
    test's ``BlockBatch.of``) is scored by hash. O(prompt blocks) per arrival.
    """

    # chain-only: the hooks read keys and ids alone (and the table's identity), contract 1.4
    capabilities = frozenset({"sessions", "prefetch", "pins", "scoring", "chain-only"})

    def __init__(self, params: ExpectedUtilityParams | None = None) -> None:
        self.params = params or ExpectedUtilityParams(variant="seed")
        self.scorer = SeedScorer(self.params)
        self.saved_ms = SAVED_MS_PER_BLOCK[self.params.mode]
        self.block_size = 16
        self.num_blocks = 0
        self._reset()

    def _reset(self) -> None:
        self.arrival = 0
        self.chains: defaultdict[object, Chain] = defaultdict(Chain)
        self.root: dict[object, object] = {}  # block hash -> chain root
        self.req_root: dict[str, object] = {}  # request id -> chain root
        self.last_prefix: dict[str, object] = {}  # session -> root of its latest request
        self.prefix_next: defaultdict[object, dict] = defaultdict(dict)  # a -> {x: N(a -> x)}
        self.session_next: defaultdict[str, dict] = defaultdict(dict)  # s -> {s': count}
        self.prev_session: str | None = None
        self.resident_blocks = 0
        self.resident_chains = 0
        # block id -> chain: the index (in _names) of root.get(key, key) of the
        # hash the block holds, -1 for a hash with no root (each its own chain)
        self._names: list = []  # chain index -> chain root
        self._cid: dict = {}  # chain root -> chain index
        self.id_key: list = []  # block id -> hash last stored in it
        self.holders: dict = {}  # hash -> block ids that hold it (id_key)
        self.chain_of_id = np.zeros(0, np.int64)
        self._table = None  # the runtime's BlockTable (block ids index it)
        self._grow(self.num_blocks)

    def _grow(self, n: int) -> None:
        """Room for block ids below ``n``."""
        m = n - len(self.id_key)
        if m > 0:
            self.id_key += [None] * m
            self.chain_of_id = np.concatenate([self.chain_of_id, np.full(m, -1, np.int64)])

    # -------------------------------------------------------------- model
    def transition(self, session: str | None, x) -> tuple[float, int]:
        """(p, n) of the T term for chain ``x`` last used by ``session``."""
        if session is None or session not in self.last_prefix:
            return 0.0, 0
        out = self.prefix_next.get(self.last_prefix[session])
        if not out:
            return 0.0, 0
        n = out.get(x, 0)
        return n / sum(out.values()), n

    def chain_utility(self, x) -> float:
        """U (ms) of chain ``x`` at the current arrival."""
        ch = self.chains[x]
        p, n = self.transition(ch.session, x)
        prob = self.scorer.p_reuse(ch, p, n, self.arrival)
        avg = self.resident_blocks / self.resident_chains if self.resident_chains else 0.0
        gb = ch.blocks * self.block_size * self.params.kv_bytes_per_token / 1e9
        return self.scorer.utility(prob, ch.blocks, self.saved_ms, self.saved_ms * avg, gb)

    @staticmethod
    def _best(counts: dict):
        """(argmax, its share) of a count dict; first inserted wins ties."""
        best = max(counts, key=counts.__getitem__)
        return best, counts[best] / sum(counts.values())

    # -------------------------------------------------------------- hooks
    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self._reset()

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self.arrival = i = request.arrival_index
        s, keys = request.session_id, request.block_keys
        if self.prev_session is not None and s is not None:
            nxt = self.session_next[self.prev_session]
            nxt[s] = nxt.get(s, 0) + 1
        self.prev_session = s
        if not keys:
            return
        x = keys[0]
        self.req_root[request.request_id] = x
        ch = self.chains[x]
        if s is not None:
            if s in self.last_prefix:
                out = self.prefix_next[self.last_prefix[s]]
                out[x] = out.get(x, 0) + 1
            self.last_prefix[s] = x
        ch.accesses += 1
        ch.prev, ch.last = (ch.last if ch.accesses > 1 else None), i
        ch.consecutive = ch.consecutive + 1 if (s is not None and s == ch.session) else 1
        ch.session = s
        if not ch.stable:
            ch.stable = tuple(keys)
        else:
            k = 0
            for a, b in zip(ch.stable, keys):
                if a != b:
                    break
                k += 1
            ch.stable = ch.stable[:k]

    @hookimpl
    def spfcore_prefetch_hints(self, request, now):
        p = self.params
        s = request.session_id
        if not p.hints or s is None or not self.session_next.get(s):
            return None
        s2, q = self._best(self.session_next[s])
        a = self.last_prefix.get(s2)
        out = self.prefix_next.get(a) if a is not None else None
        if not out:
            return None
        x, px = self._best(out)
        ch = self.chains.get(x)
        if ch is None or not ch.stable or q * px < p.hint_min_p:
            return None
        if not ch.blocks and p.mode == "retention":  # nothing resident to protect
            return None
        return [Hint(ch.stable, request.arrival_index + p.hint_arrivals)]

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        keys = blocks.keys
        if not keys:
            return
        self._table = blocks.table
        x = self.req_root.setdefault(request.request_id, keys[0])
        ch, root = self.chains[x], self.root
        ids = blocks.ids.tolist()
        if ids and max(ids) >= len(self.id_key):
            self._grow(max(ids) + 1)
        id_key, holders = self.id_key, self.holders
        before = ch.blocks
        added = 0
        shared = []  # other copies of a hash stored here: they follow the hash into chain x
        for i, k in zip(ids, keys):
            if k not in root:  # a recomputed duplicate is not a new resident block
                added += 1
            root[k] = x
            o = id_key[i]
            if o is not None and o != k:  # block id reused: it no longer holds hash o
                h = holders[o]
                if len(h) == 1:
                    del holders[o]
                else:
                    h.remove(i)
            h = holders.get(k)
            if h is None:
                holders[k] = [i]
            else:
                if i not in h:
                    h.append(i)
                if len(h) > 1:
                    shared += h
            id_key[i] = k
        ch.blocks += added
        self.resident_blocks += added
        cx = self._cid.get(x)
        if cx is None:
            cx = self._cid[x] = len(self._names)
            self._names.append(x)
        self.chain_of_id[ids] = cx
        if shared:
            self.chain_of_id[shared] = cx
        if before == 0 and ch.blocks:
            self.resident_chains += 1

    @hookimpl
    def spfcore_request_finished(self, request, now):
        self.req_root.pop(request.request_id, None)

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        root, chains, holders = self.root, self.chains, self.holders
        alone = []  # copies left behind: their hash has no chain now (each is its own)
        for k in keys:
            x = root.pop(k, None)
            if x is None:
                continue
            h = holders.get(k)
            if h is not None:
                alone += h
            ch = chains[x]
            ch.blocks -= 1
            self.resident_blocks -= 1
            if ch.blocks == 0:
                self.resident_chains -= 1
        if alone:
            self.chain_of_id[alone] = -1

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        exp = self.arrival + self.params.score_ttl_arrivals
        n = len(blocks)
        if blocks.table is not self._table:  # not the runtime's blocks (a test's batch): by hash
            root, cache, util = self.root, {}, self.chain_utility
            vals = []
            for k in blocks.keys:
                x = root.get(k, k)
                u = cache.get(x)
                if u is None:
                    u = cache[x] = util(x)
                vals.append(u)
            return Scores(np.array(vals, dtype=np.float64), expires_at_arrival=exp)
        ids = blocks.ids
        c = self.chain_of_id[ids]
        util = self.chain_utility
        lo, hi = int(c.min()), int(c.max())
        if lo == hi and lo >= 0:  # one chain (the common case): U once
            return Scores(np.full(n, util(self._names[lo])), expires_at_arrival=exp)
        names = self._names
        uniq, inv = np.unique(c, return_inverse=True)
        out = np.array([util(names[u]) if u >= 0 else 0.0 for u in uniq.tolist()])[inv]
        if uniq[0] < 0:  # copies of an evicted hash: each is its own chain (named by its hash)
            id_key, cache = self.id_key, {}
            for j in np.flatnonzero(c < 0).tolist():
                k = id_key[int(ids[j])]
                u = cache.get(k)
                if u is None:
                    u = cache[k] = util(k)
                out[j] = u
        return Scores(out, expires_at_arrival=exp)


from spfcore_spf_expected_utility.utility import UtilityPolicy  # noqa: E402

#: variant name -> policy class built from :class:`ExpectedUtilityParams`.
VARIANTS = {"utility": UtilityPolicy, "seed": SeedPolicy}
assert set(VARIANTS) == set(VARIANT_NAMES)




class ExpectedUtilityPolicy:
    """Expected utility of keeping a KV block: learned hit density
    (``variant="utility"``, default) or the SPF seed's scorer with prefetch
    hints (``variant="seed"``).

    The variant object (``self.impl``, a class of :data:`VARIANTS`) holds the
    state; its bound hook implementations are copied onto this instance at
    construction, so pluggy registers them directly (no extra call per hook)
    and the runtime calls only the hooks that variant implements
    (``utility``: no hints, no pins; ``seed``: hints and pins).
    ``capabilities``: the class's (what ``spfcore list-policies`` shows) are
    the default variant's (``utility``: scoring only); an instance's are its
    variant's (``seed``: sessions, prefetch, pins, scoring).
    """

    name = "spf_expected_utility"
    contract = "1.4"  # the spfcore contract version this policy is written for (1.4: chain-only)
    capabilities = UtilityPolicy.capabilities
    Params = ExpectedUtilityParams

    def __init__(self, params: ExpectedUtilityParams | None = None) -> None:
        self.params = params or ExpectedUtilityParams()
        self.impl = VARIANTS[self.params.variant](self.params)
        self.capabilities = self.impl.capabilities
        for hook in HOOK_NAMES:
            fn = getattr(self.impl, hook, None)
            if fn is not None:
                setattr(self, hook, fn)


__all__ = ["ExpectedUtilityPolicy", "ExpectedUtilityParams", "SeedPolicy", "SeedScorer", "UtilityPolicy",
           "Chain", "VARIANTS", "SAVED_MS_PER_BLOCK"]
