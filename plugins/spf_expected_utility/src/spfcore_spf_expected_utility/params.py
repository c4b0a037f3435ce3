"""The one ``Params`` class of ``spf_expected_utility`` (both variants).

A field that belongs to the other variant than the selected one is simply
unused (it is still validated for type and range, so a typo is caught
whichever variant runs). The bounds on what the ``utility`` variant builds
from its fields (its tables, :data:`MAX_TABLE_BYTES`; a table rebuild's work,
:data:`MAX_REBUILD_PAIRS`) hold for ``variant="utility"`` only: a ``seed``
run builds no tables, so utility-only sizes do not refuse it (a
``UtilityPolicy`` built from such params checks them itself). The ghost
list's bound (:data:`MAX_GHOST_BYTES`) needs the cache size: it is checked
when the policy learns it (:func:`ghost_entries`).
"""

from __future__ import annotations

import math
from typing import Literal

import attrs
from attrs import validators as v

#: ms of prefill saved per retained block: retention mode (block kept on the
#: GPU) and prefetch mode (block promoted from a slower tier). Seed constants.
SAVED_MS_PER_BLOCK = {"retention": 0.08, "prefetch": 2.0}

VARIANT_NAMES = ("utility", "seed")

_num = v.instance_of((int, float))


#: Most bytes the ``utility`` variant's tables may need (:func:`table_bytes`): 256 MiB. Both the
#: hooks (``UtilityPolicy``) and the simulator's compiled replay allocate them per policy (the age
#: table's tuple is shared by the policies of one layout; up to 8 layouts of at most 8 MiB each
#: are kept per process, ``utility._age_buckets``).
MAX_TABLE_BYTES = 256 * 2**20
#: Bytes per entry of the age table (the bucket of each integer age, ``2**(max_age_log2 +
#: 1/buckets_per_octave)`` entries) at its peak: the shared tuple, the policy's int64 array and a
#: transient list or tuple while they are built (3 x 8 B; measured: 135.5 MiB for 5,931,644 ages).
AGE_ENTRY_BYTES = 24
#: Bytes per (class, age bucket) entry of the class tables at their peak (12 x 8 B): the policy's
#: histograms, gap prior, index and offsets, the compiled replay's histograms, index and offsets, a
#: rebuild's prefix sums, new index and offsets (measured: ~73 B, a run's peak RSS 110 MiB above the default's
#: at max_count 4000, 1,584,033 entries).
CLASS_ENTRY_BYTES = 96


#: Most (class, age bucket, later age bucket) triples one table rebuild may visit,
#: ``classes x nb x (nb + 1) / 2`` (:func:`rebuild_pairs`): 2**26, 0.2-0.4 s. A rebuild runs
#: every ``period`` arrivals inside the arrival hook (and in the compiled replay), and each of
#: its two passes (the index and its change points) is quadratic in the age buckets ``nb``.
#: Measured (one ``UtilityPolicy._build``, every class with data, 2 shared cores):
#: 3.2-6.3 ns a triple (flat index tails, which the change points scan to the end, the most);
#: the default, 54,000 triples, 0.2-0.4 ms; 64 buckets per octave, 5.0e7, 0.22 s; 73 (the most
#: within the bound), 6.6e7, 0.28-0.39 s; 256, 8.1e8, 2.5-2.7 s; 1,791 (the most the table bound
#: allowed at the other defaults), 3.9e10, 185 s; 43,434 at one class per kind (``max_count =
#: depth_classes = 1``), 7.2e11, about an hour (extrapolated).
MAX_REBUILD_PAIRS = 2**26
#: Bytes per ghost entry (an evicted block hash the ``utility`` variant remembers; the list holds
#: ``ghost_factor x num_blocks``) at its peak: its record slot (a 64-byte row and its stack, stamp
#: and generation, doubled as the slots grow), the dict entry, the queue and the hash object.
#: Measured (the hooks, 32-byte hashes, tracemalloc from construction to a full list):
#: 262-417 B at 5,000-100,000 blocks, ghost_factor 4-64; the compiled replay's arrays are less.
GHOST_ENTRY_BYTES = 400
#: Most bytes the ghost list may need (:func:`ghost_entries`): 4 GiB, so 10.7M entries: the
#: default ``ghost_factor`` (4) up to 2,684,354 blocks (43M tokens at 16 a block).
MAX_GHOST_BYTES = 4 * 2**30


def rebuild_pairs(buckets_per_octave: int, max_age_log2: int, max_count: int, depth_classes: int) -> float:
    """The work of one table rebuild: (class, age bucket ``i``, age bucket ``j >= i``) triples,
    ``3 x depth_classes x max_count x nb x (nb + 1) / 2``, ``nb = 1 + buckets_per_octave x
    max_age_log2``; a float (``inf`` past float range)."""
    nb = 1 + buckets_per_octave * max_age_log2
    try:
        return float(3 * depth_classes * max_count * nb * (nb + 1) // 2)
    except OverflowError:
        return math.inf


def ghost_entries(ghost_factor: float, num_blocks: int) -> int:
    """The ghost list's length for a cache of ``num_blocks`` blocks: ``max(1,
    int(ghost_factor x num_blocks))`` entries.

    Raises:
        ValueError: it would need more than :data:`MAX_GHOST_BYTES` (at
            :data:`GHOST_ENTRY_BYTES` an entry); the message names the field,
            its value, ``num_blocks`` and both sizes.
    """
    try:
        n = float(ghost_factor) * num_blocks
    except OverflowError:  # (an int past float range)
        n = math.inf if num_blocks else 0.0
    if n * GHOST_ENTRY_BYTES > MAX_GHOST_BYTES:
        raise ValueError(f"'ghost_factor'={ghost_factor!r} at num_blocks={num_blocks:,}: a ghost list of {n:,.0f} "
                         f"entries would need {_size(n * GHOST_ENTRY_BYTES)} ({GHOST_ENTRY_BYTES} B an entry); the "
                         f"bound is {_size(MAX_GHOST_BYTES)} (MAX_GHOST_BYTES)")
    return max(1, int(n))


def table_bytes(buckets_per_octave: int, max_age_log2: int, max_count: int, depth_classes: int) -> tuple[float, float]:
    """The memory the ``utility`` variant's tables need (``UtilityPolicy``'s
    ``_age_buckets`` and per-class arrays, copied by the compiled replay).

    Returns:
        ``(age table bytes, class tables bytes)``, floats (``inf`` past
        float range): ``AGE_ENTRY_BYTES x (2 + ceil(2**(nb / k)))`` ages and
        ``CLASS_ENTRY_BYTES x (3 x depth_classes x max_count + 1) x nb``,
        ``k = buckets_per_octave``, ``nb = 1 + k x max_age_log2`` age buckets.
    """
    nb = 1 + buckets_per_octave * max_age_log2
    try:
        ages = 2.0 + math.ceil(2.0 ** (nb / buckets_per_octave))
    except OverflowError:
        ages = math.inf
    try:  # (an int past float range: 10**400 classes)
        classes = float(CLASS_ENTRY_BYTES * (3 * depth_classes * max_count + 1) * nb)
    except OverflowError:
        classes = math.inf
    return AGE_ENTRY_BYTES * ages, classes


def _size(x: float) -> str:
    """Bytes as MiB (below 1 GiB) or GiB."""
    if not math.isfinite(x):
        return "more than 2**1024 bytes"
    return f"{x / 2**20:,.0f} MiB" if x < 2**30 else f"{x / 2**30:,.1f} GiB"


def _finite(inst, attr, value) -> None:
    """An infinite weight or factor gives NaN scores or no ghost list, not a policy."""
    if not isinstance(value, int) and not math.isfinite(value):  # (an int is finite, even past float range)
        raise ValueError(f"'{attr.name}' must be finite: {value}")


@attrs.frozen
class ExpectedUtilityParams:
    """Parameters of ``spf_expected_utility``.

    A field marked ``seed`` only or ``utility`` only is read by that variant
    alone. Arrivals are ``RequestView.arrival_index`` steps.

    Attributes:
        variant: ``"utility"`` (default): learned hit density, see
            :mod:`spfcore_spf_expected_utility.utility`; ``"seed"``: the SPF
            seed's ExpectedUtilityScorer on whole chains plus prefetch hints,
            see :class:`~spfcore_spf_expected_utility.SeedScorer`.
        pin_cap_fraction: Both variants (read by the runtime): most pinned
            free blocks, share of the pool (0..1). Only ``seed`` pins (hints).
        mode: ``seed`` only: ``"retention"`` (0.08 ms saved per block) or ``"prefetch"`` (2.0 ms).
        c: ``seed`` only: cap of the probability terms (0 < c <= 1); seed 0.5.
        h: ``seed`` only: recency scale, arrivals (> 0); seed 3.
        score_ttl_arrivals: ``seed`` only: A block's score expires this many arrivals after it
            was computed, so recency-based predictions age (int >= 1).
        hints: ``seed`` only: issue prefetch hints for the next predicted session's prefix.
        hint_min_p: ``seed`` only: least confidence (next-session probability times its
            prefix-transition probability, 0..1) for a hint.
        hint_arrivals: ``seed`` only: A hint issued at arrival ``i`` lapses after arrival
            ``i + hint_arrivals`` (int >= 1).
        kv_bytes_per_token: ``seed`` only: KV-cache bytes per token, all layers, K and V
            (int > 0); default Llama-3.2-3B in bf16: 2 * 28 layers * 8 KV heads
            * 128 dims * 2 bytes = 114688.
        max_count: ``utility`` only: reuse classes per group (int >= 1): class 0 = seen once,
            classes 1..max_count-1 = reused, by reuse gap (mean or latest, see
            ``gap_mean``; or by access count, ``gap_classes=False``); the last
            class holds the rest.
        root_blocks: ``utility`` only: A request is a *continuation* if more than this many
            leading prompt blocks were seen before (cached or ghost); int >= 0.
            Default 1: every Mooncake request shares hash id 0.
        ghost_factor: ``utility`` only: ghost entries for evicted block hashes, as a multiple of
            the pool (blocks); float > 0, at most :data:`MAX_GHOST_BYTES` (4 GiB) of
            ghosts at the cache's size (checked when the policy learns it). Default 4: a reuse that comes back
            later than ~4 pools of evictions could not have been a hit, so it
            no longer counts as one for its class. Mooncake, 9,140 blocks,
            block hit by ghost_factor: 1 0.2204, 2 0.2245, 3 0.2264,
            4 0.2262, 5 0.2258, 6 0.2254, 8 0.2254 (the default before);
            1,828 blocks: 0.1039 at 4, 0.1024 at 8. The synthetic workloads
            never fill the ghost list: identical decisions at 4 and 8.
        buckets_per_octave: ``utility`` only: age buckets per doubling of age (int >= 1).
        max_age_log2: ``utility`` only: ages up to 2**max_age_log2 arrivals are resolved (int >= 4).
            With ``buckets_per_octave``, ``max_count`` and ``depth_classes`` it sizes the
            tables (:func:`table_bytes`), at most :data:`MAX_TABLE_BYTES` (256 MiB): the age
            table allows ``max_age_log2`` up to 22 (default buckets: 24 B x 2**22.5 ages, 136
            MiB); default tables are 2.5 MiB. A rebuild's work (:func:`rebuild_pairs`) is
            at most :data:`MAX_REBUILD_PAIRS`: 73 buckets per octave at the other defaults.
            Both bounds hold for ``variant="utility"`` only.
        period: ``utility`` only: arrivals between table rebuilds and decays (int >= 1).
        decay: ``utility`` only: factor applied to the histograms per ``period`` (0 < decay <= 1).
            Default 0.999 (memory ~16,000 arrivals): Mooncake reuse gaps
            (median ~400 arrivals) are observed long after the store; 0.98 lost
            0.004 block hit there. Synthetic workloads (<= 224 arrivals) barely
            decay either way.
        prior_weight: ``utility`` only: pseudo-observations of the pooled distribution added to
            each class (float >= 0). Default 0.3 (1.0 before; 0.3 is +0.4
            points on zipf, +1.4 on shuffled personas, equal elsewhere).
        max_ttl: ``utility`` only: longest a score lives before re-scoring, arrivals (int >= 1).
        rel_tol: ``utility`` only: relative change of the index (0 <= rel_tol < 1) below which
            a later age bucket counts as "the same value": a block's score
            expires only where the index moves by more than this; a block
            whose index is flat (within it) for the rest of its resolved life
            gets a plain float and is never re-scored. Default 0 (exact; only
            merges buckets of equal index). Measured (sim, sequential): 0.1
            cuts Mooncake evict time ~15% at -0.002 block-hit but drops the
            personas workload from 29.6% to 19.7% token hit.
        cut_factor: ``utility`` only: changes of the index among values all above ``cut_factor``
            x the eviction frontier (the highest victim index of the previous
            ``period``) do not trigger a re-score before ``max_ttl`` (float > 0;
            default ``inf`` = off: at 2-8 it cut Mooncake re-scoring but cost
            the personas workload 3.8 points of token hit).
        chain_monotone: ``utility`` only: cap a block's score at its parent's within a batch.
        gap_classes: ``utility`` only: classes of reused blocks by their latest reuse gap
            instead of by access count.
        gap_octaves: ``utility`` only: octaves of reuse gap per gap class (int >= 1).
        count_weight: ``utility`` only: tie-break by access count (float >= 0): the score is
            ``density * (1 + count_weight * log2(accesses))``; 0 = pure density.
        depth_classes: ``utility`` only: depth buckets per kind (int >= 1): a block's class group
            is ``kind`` x ``min(floor(log2(depth + 1)) // depth_octaves,
            depth_classes - 1)``, ``depth`` = its 0-based position in the
            chain. Default 4 (depth_octaves 2: depths 0-2, 3-14, 15-62, 63+).
            On Mooncake a first-time block at depth 1 is reused with p 0.34,
            at depth >= 64 with p 0.17 (and later); 1 = no depth split.
        depth_octaves: ``utility`` only: octaves of ``depth + 1`` per depth bucket (int >= 1).
        gap_mean: ``utility`` only: gap classes by the block's *mean* reuse gap, (latest access
            - first access) / (accesses - 1), arrivals, instead of its latest
            gap: a stable estimate of the block's reuse interval (its access
            rate), which is what separates hot from warm prefixes under
            random (Zipf, shuffled) reuse; equal to the latest gap under
            cyclic reuse. The first access is remembered across evictions.
        gap_prior: ``utility`` only: pseudo-observations (float >= 0) put, in every reused
            class, at the lower edge of the class's own gap range: until a
            class has data, a block reused at gap ~g is predicted to be reused
            at ~g again (instead of only the pooled prior, which ranks an
            empty class like everything else). Any value 0.1-1000 gives the
            same personas result; 0.1 leaves learned data in charge.
    """

    variant: Literal["utility", "seed"] = attrs.field(default="utility", validator=v.in_(VARIANT_NAMES))
    pin_cap_fraction: float = attrs.field(default=0.5, validator=[_num, v.ge(0), v.le(1)])
    # ---- seed
    mode: Literal["retention", "prefetch"] = attrs.field(
        default="retention", validator=v.in_(tuple(SAVED_MS_PER_BLOCK)))
    c: float = attrs.field(default=0.5, validator=[_num, v.gt(0), v.le(1)])
    h: float = attrs.field(default=3.0, validator=[_num, v.gt(0)])
    score_ttl_arrivals: int = attrs.field(default=4, validator=[v.instance_of(int), v.ge(1)])
    hints: bool = attrs.field(default=True, validator=v.instance_of(bool))
    hint_min_p: float = attrs.field(default=0.5, validator=[_num, v.ge(0), v.le(1)])
    hint_arrivals: int = attrs.field(default=2, validator=[v.instance_of(int), v.ge(1)])
    kv_bytes_per_token: int = attrs.field(default=114688, validator=[v.instance_of(int), v.gt(0)])
    # ---- utility
    max_count: int = attrs.field(default=8, validator=[v.instance_of(int), v.ge(1)])
    root_blocks: int = attrs.field(default=1, validator=[v.instance_of(int), v.ge(0)])
    ghost_factor: float = attrs.field(default=4.0, validator=[_num, v.gt(0), _finite])
    buckets_per_octave: int = attrs.field(default=2, validator=[v.instance_of(int), v.ge(1)])
    max_age_log2: int = attrs.field(default=16, validator=[v.instance_of(int), v.ge(4)])
    period: int = attrs.field(default=16, validator=[v.instance_of(int), v.ge(1)])
    decay: float = attrs.field(default=0.999, validator=[_num, v.gt(0), v.le(1)])
    prior_weight: float = attrs.field(default=0.3, validator=[_num, v.ge(0), _finite])
    max_ttl: int = attrs.field(default=1024, validator=[v.instance_of(int), v.ge(1)])
    rel_tol: float = attrs.field(default=0.0, validator=[_num, v.ge(0), v.lt(1)])
    cut_factor: float = attrs.field(default=math.inf, validator=[_num, v.gt(0)])
    chain_monotone: bool = attrs.field(default=True, validator=v.instance_of(bool))
    gap_classes: bool = attrs.field(default=True, validator=v.instance_of(bool))
    gap_octaves: int = attrs.field(default=1, validator=[v.instance_of(int), v.ge(1)])
    count_weight: float = attrs.field(default=0.0, validator=[_num, v.ge(0), _finite])
    depth_classes: int = attrs.field(default=4, validator=[v.instance_of(int), v.ge(1)])
    depth_octaves: int = attrs.field(default=2, validator=[v.instance_of(int), v.ge(1)])
    gap_mean: bool = attrs.field(default=True, validator=v.instance_of(bool))
    gap_prior: float = attrs.field(default=0.1, validator=[_num, v.ge(0), _finite])

    def __attrs_post_init__(self) -> None:
        """A ``utility`` params: :meth:`check_tables` (a ``seed`` one builds no tables)."""
        if self.variant == "utility":
            self.check_tables()

    def check_tables(self) -> None:
        """Refuse tables beyond :data:`MAX_TABLE_BYTES` or a rebuild beyond
        :data:`MAX_REBUILD_PAIRS` (ValueError naming the fields and the size or the work)."""
        k, age, mc, dc = self.buckets_per_octave, self.max_age_log2, self.max_count, self.depth_classes
        ages, classes = table_bytes(k, age, mc, dc)
        grid = (f"'max_count'={mc}, 'depth_classes'={dc}, 'buckets_per_octave'={k}, 'max_age_log2'={age}: "
                f"{3 * dc * mc:,} classes x {1 + k * age:,} age buckets")
        if ages + classes > MAX_TABLE_BYTES:
            if ages >= classes:
                what = f"'max_age_log2'={age}, 'buckets_per_octave'={k}: an age table of 2**{age + 1 / k:g} entries"
            else:
                what = grid
            raise ValueError(f"{what} would need {_size(ages + classes)} of tables; the bound is "
                             f"{_size(MAX_TABLE_BYTES)} (MAX_TABLE_BYTES)")
        work = rebuild_pairs(k, age, mc, dc)
        if work > MAX_REBUILD_PAIRS:
            raise ValueError(f"{grid}: a table rebuild (every 'period' arrivals, in the arrival hook; quadratic in "
                             f"the age buckets) would visit {work:,.0f} (class, bucket, later bucket) triples, "
                             f"about {work * 5e-9:,.1f} s at ~5 ns each; the bound is {MAX_REBUILD_PAIRS:,} "
                             "(MAX_REBUILD_PAIRS, 0.2-0.4 s)")
