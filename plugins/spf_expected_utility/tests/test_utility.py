"""utility variant: learned hit density (LHD-style) with ghosts.

Checks: params validation; escaping the cyclic cold start through ghost
learning (LRU hits nothing); decode blocks ranked below prompt blocks;
chain-monotone scores with arrival expiries; determinism; bounded ghosts.
"""

import numpy as np
import math

import pytest

from spfcore import BlockBatch, BlockView
from spfcore.registry import new_plugin_manager
from spfcore.runtime import PolicyRuntime, score_columns
from spfcore.testing import MiniCache
from spfcore_spf_expected_utility import ExpectedUtilityParams as UtilityParams
from spfcore_spf_expected_utility.utility import UtilityPolicy


def cache(num_blocks, **kw):
    pol = UtilityPolicy(UtilityParams(**kw))
    pm = new_plugin_manager()
    pm.register(pol)
    return MiniCache(PolicyRuntime(pm, num_blocks, 4, policy_name="utility"), num_blocks), pol


def cyclic(c, chains=6, length=8, rounds=12):
    """``chains`` prefixes of ``length`` blocks, served round robin."""
    for _ in range(rounds):
        for p in range(chains):
            c.serve([f"p{p}-{d}" for d in range(length)])
    return sum(c.hits)


@pytest.mark.parametrize("bad", [dict(max_count=0), dict(ghost_factor=0), dict(decay=0.0), dict(decay=1.5),
                                 dict(period=0), dict(max_ttl=0), dict(buckets_per_octave=0),
                                 dict(rel_tol=1.0), dict(rel_tol=-0.1), dict(cut_factor=0),
                                 dict(count_weight=-1), dict(variant="lhd"), dict(depth_classes=0),
                                 dict(depth_octaves=0), dict(gap_prior=-1)])
def test_params_validated(bad):
    with pytest.raises((ValueError, TypeError)):
        UtilityParams(**bad)


@pytest.mark.parametrize("opts,fields,size", [
    ({"max_age_log2": "30"}, "'max_age_log2'=30, 'buckets_per_octave'=2: an age table of 2\\*\\*30.5 entries", "33.9 GiB"),
    ({"max_age_log2": "23"}, "'max_age_log2'=23, 'buckets_per_octave'=2: ", "272 MiB"),
    ({"buckets_per_octave": "64", "max_age_log2": "24"}, "'max_age_log2'=24, 'buckets_per_octave'=64: ", "402 MiB"),
    ({"max_count": "1000000"}, "'max_count'=1000000, 'depth_classes'=4, 'buckets_per_octave'=2, 'max_age_log2'=16: "
     "12,000,000 classes x 33 age buckets", "35.4 GiB"),
    ({"max_count": "1" + "0" * 400}, "'max_count'=10000", "more than 2\\*\\*1024 bytes"),  # past float range
])
def test_tables_beyond_the_bound_refused(opts, fields, size):
    """Parameters whose tables need more than MAX_TABLE_BYTES are refused when the params are
    built (as the CLI's --policy-opt builds them), naming the fields and the size."""
    from spfcore import registry

    with pytest.raises(registry.PolicyConfigError, match=f"^policy 'spf_expected_utility': {fields}.* would need "
                       f"{size} of tables; the bound is 256 MiB"):
        registry.make_params(registry.get("spf_expected_utility"), opts)


@pytest.mark.parametrize("opts", [{}, {"max_age_log2": "22"}, {"buckets_per_octave": "1", "max_age_log2": "22"},
                                  {"buckets_per_octave": "64"}, {"max_count": "7000"}])
def test_tables_within_the_bound_accepted(opts):
    """The default and the largest sets within the bound: ``max_age_log2`` 22 (at 2 and at 1
    bucket per octave: 23 is refused), 64 buckets per octave, 7,000 reuse classes (8,000: 292 MiB)."""
    from spfcore import registry
    from spfcore_spf_expected_utility.params import MAX_TABLE_BYTES, table_bytes

    p = registry.make_params(registry.get("spf_expected_utility"), opts)
    used = sum(table_bytes(p.buckets_per_octave, p.max_age_log2, p.max_count, p.depth_classes))
    assert used <= MAX_TABLE_BYTES
    if opts.get("max_age_log2") == "22":  # the largest: one more octave is over the bound
        assert used > MAX_TABLE_BYTES / 2


def test_table_bytes_counts_the_tables_built():
    """table_bytes counts the entries the policy allocates: its age lookup (one int64 per
    integer age) and its (class, bucket) tables."""
    from spfcore_spf_expected_utility.params import AGE_ENTRY_BYTES, CLASS_ENTRY_BYTES, table_bytes

    p = UtilityParams(buckets_per_octave=3, max_age_log2=7, max_count=5, depth_classes=2)
    pol = UtilityPolicy(p)
    pol.spfcore_cache_configured(num_blocks=16, block_size=4)
    ages, classes = table_bytes(3, 7, 5, 2)
    assert ages == AGE_ENTRY_BYTES * len(pol._bucket_np) == AGE_ENTRY_BYTES * 164  # ages 0 .. ceil(2**(22/3)), one past
    assert classes == CLASS_ENTRY_BYTES * pol._vals.size == CLASS_ENTRY_BYTES * 31 * 22
    assert pol.hist.size == pol.gap_prior.size == pol._offs.size - pol.nb


@pytest.mark.parametrize("opts,fields,work,top", [
    ({"buckets_per_octave": "74"}, "'max_count'=8, 'depth_classes'=4, 'buckets_per_octave'=74, 'max_age_log2'=16: "
     "96 classes x 1,185 age buckets", "67,459,680", 73),
    ({"buckets_per_octave": "43434", "max_count": "1", "depth_classes": "1"},  # tables 255 MiB: within their bound
     "'max_count'=1, 'depth_classes'=1, 'buckets_per_octave'=43434, 'max_age_log2'=16: 3 classes x 694,945 age "
     "buckets", "724,423,871,955", 417),
])
def test_rebuild_beyond_the_bound_refused(opts, fields, work, top):
    """A table rebuild (quadratic in the age buckets, every ``period`` arrivals in the arrival
    hook) of more than MAX_REBUILD_PAIRS triples is refused when the params are built, with
    its work and why (both were accepted: a rebuild took 185 s at 1,791 buckets per octave);
    ``top`` buckets per octave, the most within the bound, are accepted."""
    from spfcore import registry

    info = registry.get("spf_expected_utility")
    with pytest.raises(registry.PolicyConfigError, match=f"^policy 'spf_expected_utility': {fields}: a table rebuild "
                       rf"\(every 'period' arrivals, in the arrival hook; quadratic in the age buckets\) would visit "
                       f"{work} \\(class, bucket, later bucket\\) triples, .*; the bound is 67,108,864 "
                       r"\(MAX_REBUILD_PAIRS"):
        registry.make_params(info, opts)
    from spfcore_spf_expected_utility.params import MAX_REBUILD_PAIRS, rebuild_pairs

    p = registry.make_params(info, {**opts, "buckets_per_octave": str(top)})
    assert rebuild_pairs(top, 16, p.max_count, p.depth_classes) <= MAX_REBUILD_PAIRS < rebuild_pairs(
        top + 1, 16, p.max_count, p.depth_classes)


def test_seed_variant_not_refused_for_utility_tables():
    """The table and rebuild bounds are the utility variant's: a seed params with utility-only
    sizes beyond them is accepted and runs (its fields are still checked for type and range);
    a UtilityPolicy built from it checks them itself."""
    from spfcore import registry

    info = registry.get("spf_expected_utility")
    for opts in ({"max_age_log2": "30"}, {"buckets_per_octave": "100000"}, {"max_count": "1000000"}):
        p = registry.make_params(info, {"variant": "seed", **opts})
        assert p.variant == "seed"
        with pytest.raises(ValueError, match="the bound is "):
            UtilityPolicy(p)
    with pytest.raises(registry.PolicyConfigError, match="'max_age_log2' must be >= 4"):
        registry.make_params(info, {"variant": "seed", "max_age_log2": "3"})
    c = MiniCache("spf_expected_utility", 6, options={"variant": "seed", "max_age_log2": "30"})
    for keys in (["a0", "a1"], ["b0"], ["a0", "a1"]):
        c.serve(keys)
    assert sum(c.hits) == 2


def test_ghost_list_beyond_the_bound_refused():
    """The ghost list (ghost_factor x num_blocks entries) needs the cache size: a runtime whose
    list would need more than MAX_GHOST_BYTES fails in spfcore_cache_configured, before anything
    is allocated, naming the field, its value, num_blocks and both sizes (1e12 was a MemoryError;
    120 at 100,000 blocks silently took the slots of 3M ghosts at once)."""
    from spfcore.runtime import PolicyError

    with pytest.raises(PolicyError, match=r"^policy 'spf_expected_utility' failed in hook spfcore_cache_configured: "
                       r"ValueError\(\"'ghost_factor'=1000000000000.0 at num_blocks=9,140: a ghost list of "
                       r"9,140,000,000,000,000 entries would need 3,404,915,332.8 GiB \(400 B an entry\); the bound "
                       r"is 4.0 GiB \(MAX_GHOST_BYTES\)\"\)$"):
        PolicyRuntime.for_policy("spf_expected_utility", 9140, 16, {"ghost_factor": "1e12"})
    with pytest.raises(PolicyError, match="'ghost_factor'=120.0 at num_blocks=100,000: a ghost list of 12,000,000 "
                       "entries would need 4.5 GiB"):
        PolicyRuntime.for_policy("spf_expected_utility", 100_000, 16, {"ghost_factor": "120"})
    from spfcore_spf_expected_utility.params import GHOST_ENTRY_BYTES, MAX_GHOST_BYTES, ghost_entries

    top = MAX_GHOST_BYTES // GHOST_ENTRY_BYTES // 4  # the default factor's largest cache
    assert (top, ghost_entries(4.0, top)) == (2_684_354, 10_737_416)
    with pytest.raises(ValueError, match="at num_blocks=2,684,355: a ghost list of 10,737,420 entries"):
        ghost_entries(4.0, top + 1)
    pol = UtilityPolicy(UtilityParams(ghost_factor=10**400))  # an int past float range: finite, too big
    with pytest.raises(ValueError, match="a ghost list of inf entries would need more than 2\\*\\*1024 bytes"):
        pol.spfcore_cache_configured(num_blocks=16, block_size=4)
    # the compiled replay's state, built for another cache size than the policy's
    from spfcore.sim import _replay_spf_nb as sn

    pol = UtilityPolicy(UtilityParams(ghost_factor=1000.0))
    pol.spfcore_cache_configured(num_blocks=16, block_size=4)
    with pytest.raises(ValueError, match="'ghost_factor'=1000.0 at num_blocks=1,000,000: "):
        sn.new_state(1_000_000, (pol, 0))


def test_large_age_layouts_not_kept():
    """Age-bucket layouts up to LAYOUT_CACHE_BYTES are shared by the policies of one layout; a
    larger one (11 MiB at max_age_log2 20) is not kept by the process after its policy."""
    from spfcore_spf_expected_utility import utility

    assert utility._age_buckets(2, 16) is utility._age_buckets(2, 16)
    big = utility._age_buckets(2, 20)
    assert len(big[3]) == 1_482_912 and big is not utility._age_buckets(2, 20)


def test_cyclic_cold_start_escaped_by_ghosts():
    # 6 chains x 8 blocks = 48 blocks in a 30-block pool (+1 hashless per request):
    # LRU never hits; the policy learns the gap (6 arrivals) from ghost re-stores
    # and keeps a stable subset (Belady keeps ~3 chains: ~21 of 48 blocks per round).
    lru = MiniCache("lru", 30)
    assert cyclic(lru) == 0
    c, pol = cache(30)
    hits = cyclic(c)
    assert hits >= 0.3 * 8 * 6 * 11  # > 30% of the blocks after the first round
    assert pol.hist.sum() > 0  # reuse learned


def test_decode_blocks_score_below_prompt_blocks():
    c, pol = cache(64)
    for i in range(40):  # prompt blocks reused at gap 1, "decode" blocks never
        req = c.view(["root", f"q{i}"])
        pol.spfcore_request_arrived(req, float(i))
        pol.spfcore_blocks_stored(req, BlockBatch.of([BlockView("root", 0, None, 4, None, "r", 1, 0.0, 0.0),
                                                      BlockView(f"q{i}", 1, "root", 4, None, "r", 1, 0.0, 0.0),
                                                      BlockView(f"out{i}", 2, f"q{i}", 4, None, "r", 1, 0.0, 0.0)]),
                                  float(i))
        pol.spfcore_blocks_evicted([f"out{i - 1}", f"q{i - 1}"] if i else [], float(i))
        c.next_index += 1
    vals, _, exp, _ = score_columns(pol.spfcore_score_blocks(
        BlockBatch.of([BlockView("root", 0, None, 4, None, "r", 1, 0.0, 0.0),
                       BlockView("out39", 2, "q39", 4, None, "r", 1, 0.0, 0.0)]), 39.0), 2)
    assert exp is not None and all(e < 2**62 for e in exp)
    assert vals[0] > vals[1]
    assert pol.record("out39")[2] < pol.nd * pol.per_kind  # decode kind = group rows 0..depth_classes-1


def test_scores_chain_monotone_and_expire_ahead():
    c, pol = cache(40)
    cyclic(c, chains=4, length=6, rounds=6)
    t = pol.t
    blocks = [BlockView(f"p0-{d}", d, f"p0-{d - 1}" if d else None, 4, None, "r", 1, 0.0, 0.0)
              for d in range(5, -1, -1)]  # tail first, like a release batch
    for b in blocks:
        if pol.record(b.key) is None:
            pol.set_record(b.key, t, 1, 0)
    vals, _, exp, _ = score_columns(pol.spfcore_score_blocks(BlockBatch.of(blocks), float(t)), len(blocks))
    vals = vals[::-1]  # depth order
    assert all(a >= b for a, b in zip(vals, vals[1:]))
    assert all(t < x <= t + pol.params.max_ttl for x in exp)


def test_deterministic_and_ghosts_bounded():
    runs = []
    for _ in range(2):
        c, pol = cache(30, ghost_factor=0.5)
        cyclic(c, rounds=5)
        runs.append((list(c.evicted), list(c.hits)))
        assert len(pol.ghost) <= 15
    assert runs[0] == runs[1]


def test_classes_by_mean_gap_and_depth():
    pol = UtilityPolicy(UtilityParams())
    pol.spfcore_cache_configured(num_blocks=64, block_size=4)
    blk = BlockView("a", 20, "p", 4, None, "r", 1, 0.0, 0.0)  # depth 20: bucket floor(log2 21) // 2 = 2
    for t in (0, 1, 9):  # gaps 1, 8: mean gap (9 - 0) // 2 = 4 -> g = 1 + 2 = 3; latest gap 8 -> g = 4
        req = pol_view(["a"], t)
        pol.spfcore_request_arrived(req, float(t))
        (pol.spfcore_blocks_stored if t == 0 else pol.spfcore_blocks_hit)(req, BlockBatch.of([blk]), float(t))
    grp = pol._grp(1, 20)
    assert grp == 1 * 4 + 2
    assert [pol._grp(1, d) - 4 for d in (0, 2, 3, 14, 15, 62, 63, 10**6)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert pol.record("a") == [9, 3, grp * pol.per_kind + 3, 0]
    assert pol._clss(np.array([grp]), np.array([3]), np.array([4])).tolist() == [grp * pol.per_kind + 3]
    assert [pol._grps(1, np.array([d])).item() - 4 for d in (0, 2, 3, 14, 15, 62, 63, 10**6)] == [0, 0, 1, 1, 2, 2, 3, 3]
    old = UtilityPolicy(UtilityParams(gap_mean=False, depth_classes=1))
    assert old._cls(1, 3, 8) == 1 * old.per_kind + 4


def test_gap_prior_ranks_an_empty_reused_class_by_its_own_gap():
    pol = UtilityPolicy(UtilityParams())
    pol.spfcore_cache_configured(num_blocks=64, block_size=4)
    pol._build()  # no data at all: only the gap prior
    row = pol.table[pol._cls(1, 2, 4)]  # reused at gap ~4
    assert pol.table[pol._cls(1, 1)][0] == 0.0  # seen once: nothing known
    assert row[0] > 0.0 and row[pol._bucket(16)] == 0.0  # reuse expected at ~4, none past it
    off = UtilityPolicy(UtilityParams(gap_prior=0.0))
    off.spfcore_cache_configured(num_blocks=64, block_size=4)
    off._build()
    assert off.table[off._cls(1, 2, 4)][0] == 0.0


def pol_view(keys, t):
    from spfcore import RequestView
    return RequestView(f"r{t}", None, t, float(t), 4 * len(keys) + 1, tuple(keys))


def test_reset_on_configure():
    c, pol = cache(30)
    cyclic(c, rounds=3)
    pol.spfcore_cache_configured(num_blocks=30, block_size=4)
    assert not pol.info and not pol.ghost and pol.hist.sum() == 0 and pol._nfree == len(pol.last) - 1


# ---------------------------------------------------------------- cheap re-scoring

from spfcore_spf_expected_utility import ExpectedUtilityPolicy  # noqa: E402
from spfcore_spf_expected_utility.utility import change_offsets, change_points  # noqa: E402

LO = [0, 1, 2, 4, 8, 32]  # first integer age of buckets 0..4 (1 per octave, max_age_log2 4), and the end
ROW = [4.0, 2.0, 2.0, 1.0, 1.0]


def test_change_points_exact():
    assert change_points(ROW, LO, 0.0) == [(4.0, 1), (2.0, 4), (2.0, 4), (1.0, None), (1.0, None)]
    # rel_tol 0.6: 4 -> 2 is within 2.4, 4 -> 1 is not; 2 -> 1 is within 1.2 (flat from bucket 1)
    assert change_points(ROW, LO, 0.6) == [(4.0, 4), (2.0, None), (2.0, None), (1.0, None), (1.0, None)]
    # cut 1.5: 4 -> 2 happens above the cut (ignored), 2 -> 1 crosses it
    assert change_points(ROW, LO, 0.0, 1.5) == [(4.0, 4), (2.0, 4), (2.0, 4), (1.0, None), (1.0, None)]
    # a change only above the cut: re-score at the end (capped by max_ttl), not never
    assert change_points([4.0, 2.0], [0, 1, 4], 0.0, 1.0) == [(4.0, 4), (2.0, None)]


def scorer(**kw):
    pol = UtilityPolicy(UtilityParams(buckets_per_octave=1, max_age_log2=4, max_count=1, **kw))
    assert pol.lo_int == LO
    pol._install([ROW] * pol.nc, math.inf)
    pol.t = 10
    return pol


def score(pol, blocks):
    """The score columns (values, expires_at_arrival) of a direct call."""
    vals, exp_t, exp, pins = score_columns(pol.spfcore_score_blocks(BlockBatch.of(blocks), float(pol.t)), len(blocks))
    assert exp_t is None and pins is None
    return vals, exp


def bv(key, depth=0, parent=None):
    return BlockView(key, depth, parent, 4, None, "r", 1, 0.0, 0.0)


def test_scores_expire_at_change_points_or_never():
    pol = scorer(chain_monotone=False)
    for k, last in zip("abcde", (10, 9, 8, 5, 9)):
        pol.set_record(k, last, 1, 0)
    vals, exp = score(pol, [bv(k) for k in "abcde"])
    # ages 0, 1, 2, 5, 1 -> buckets 0, 1, 2, 3, 1; bucket 1 starts at age 1;
    # buckets 1, 2 equal: next change at age 4; bucket 3 flat to the end: never re-scored
    assert vals == [4.0, 2.0, 2.0, 1.0, 2.0]
    assert exp == [11, 13, 12, 2**62, 13]
    assert score(pol, [bv("d")]) == ([1.0], None)  # nothing expires: values only
    assert pol.rescored == 6


def test_max_ttl_caps_expiry_and_count_weight_scales():
    pol = scorer(chain_monotone=False, max_ttl=2, count_weight=0.5)
    pol.set_record("b", 9, 4, 0)
    pol.set_record("d", 5, 2, 0)
    vals, exp = score(pol, [bv("b"), bv("d")])
    assert vals == [2.0 * (1 + 0.5 * 2), 1.0 * 1.5]
    assert exp == [12, 2**62]  # 13 capped at t + 2


def test_chain_monotone_caps_child_at_parent():
    pol = scorer()
    pol.set_record("p", 5, 1, 0)  # parent at 1.0 (flat)
    pol.set_record("q", 10, 1, 0)  # child at 4.0
    assert score(pol, [bv("q", 1, "p"), bv("p", 0)]) == ([1.0, 1.0], [11, 2**62])  # tail first
    assert score(pol, [bv("p", 0), bv("q", 1, "p")]) == ([1.0, 1.0], [2**62, 11])  # parent first
    # only a parent met earlier in the pass caps (here the pass starts at q: depth 1 > depth 0)
    pol.set_record("r", 10, 1, 0)
    assert score(pol, [bv("q", 1, "p"), bv("r", 0), bv("p", 0)])[0] == [1.0, 4.0, 1.0]
    assert score(pol, [bv("r", 0), bv("q", 1, "p"), bv("p", 0)])[0] == [4.0, 4.0, 1.0]


def test_one_policy_class_delegates_per_variant():
    from spfcore.registry import new_plugin_manager as npm
    for variant, has_hints in (("utility", False), ("seed", True)):
        pol = ExpectedUtilityPolicy(UtilityParams(variant=variant))
        pm = npm()
        pm.register(pol)
        names = {h.name for h in pm.get_hookcallers(pol)}
        assert ("spfcore_prefetch_hints" in names) is has_hints
        assert ("spfcore_blocks_hit" in names) is not has_hints
        assert pol.spfcore_score_blocks.__self__ is pol.impl  # no wrapper call
    assert ExpectedUtilityPolicy().params.variant == "utility"
    assert ExpectedUtilityPolicy.capabilities == {"scoring", "chain-only"} == ExpectedUtilityPolicy().capabilities
    assert ExpectedUtilityPolicy(UtilityParams(variant="seed")).capabilities == {"sessions", "prefetch", "pins", "scoring",
                                                                                 "chain-only"}
    assert isinstance(ExpectedUtilityPolicy().impl, UtilityPolicy)


def _cap_reference(blocks, x):
    """The chain cap written plainly: one pass in chain order (backwards when
    the batch starts deeper than it ends), a block capped at the value last
    given to its parent's hash met earlier in the pass."""
    n = len(blocks)
    order = range(n - 1, -1, -1) if blocks[0].depth > blocks[-1].depth else range(n)
    out, low = list(x), {}
    for k in order:
        pv = low.get(blocks[k].parent)
        if pv is not None and pv < out[k]:
            out[k] = pv
        low[blocks[k].key] = out[k]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_chain_cap_equals_the_plain_pass(seed):
    """Random batches of whole chains, chain pieces and singletons, released
    tail first or head first: the vectorized cap (one-run fast path, runs by
    ranks, links to parents elsewhere in the batch) equals the plain pass."""
    rng = np.random.default_rng(seed)
    blocks = []
    for c in range(int(rng.integers(1, 4))):
        start = int(rng.integers(0, 3))
        length = int(rng.integers(1, 12))
        blocks += [bv(f"c{c}-{d}", d, f"c{c}-{d - 1}" if d else None) for d in range(start, start + length)]
    if rng.random() < 0.5:
        blocks.reverse()  # a release: tail first
    x = rng.integers(0, 5, len(blocks)).astype(np.float64)  # ties on purpose
    got = UtilityPolicy._chain_cap(BlockBatch.of(blocks), [b.key for b in blocks], x.copy())
    assert got.tolist() == _cap_reference(blocks, x.tolist())


def _reaccess_reference(pol, s, grp, reuse_only):
    """The numpy form of a re-access (histogram, count, latest access, class):
    fancy-index gathers before any write, ``np.add.at`` for the histogram."""
    t = pol.t
    gap = t - pol.last[s]
    count = pol.count[s]
    pos = gap > 0 if reuse_only else np.ones(len(s), bool)
    np.add.at(pol.hist, (pol.cls[s[pos]], pol._buckets(gap[pos])), 1.0)
    count = count + pos
    pol.count[s] = count
    pol.last[s] = t
    if pol.params.gap_mean:
        gap = np.where(count > 1, (t - pol.first[s]) // np.maximum(count - 1, 1), gap)
    pol.cls[s] = pol._clss(grp, count, gap)


@pytest.mark.parametrize("seed", range(12))
def test_compiled_reaccess_equals_the_numpy_form(seed):
    """Random records (ages from 0 to past the bucket range, slots repeated
    in one batch) re-accessed by the compiled pass and by the numpy form:
    the same histogram, counts, latest accesses and classes."""
    rng = np.random.default_rng(seed)
    kw = dict(gap_mean=bool(seed % 2), gap_classes=seed % 3 != 2)
    a, b = UtilityPolicy(UtilityParams(**kw)), UtilityPolicy(UtilityParams(**kw))
    n = 40
    t = int(rng.integers(1, 1 << 20))
    for pol in (a, b):
        pol.t = t
    last = t - rng.choice([0, 1, 2, 7, 100, 5000, 1 << 19], n)
    first = last - rng.integers(0, 1 << 10, n)
    count = rng.integers(1, 9, n)
    cls = rng.integers(0, a.nc, n)
    hist = rng.random((a.nc, a.nb))
    for pol in (a, b):
        pol.last[1:n + 1], pol.first[1:n + 1], pol.count[1:n + 1], pol.cls[1:n + 1] = last, first, count, cls
        pol.hist[:] = hist
    s = rng.integers(1, n + 1, 60)  # slots twice on purpose
    grp = rng.integers(0, a.nc // a.per_kind, 60)
    reuse_only = bool(rng.random() < 0.5)
    a._reaccess(s, grp, reuse_only)
    _reaccess_reference(b, s, grp, reuse_only)
    for f in ("last", "count", "cls", "first"):
        assert getattr(a, f).tolist() == getattr(b, f).tolist(), f
    assert a.hist.tolist() == b.hist.tolist()
    assert a.hist.sum() > hist.sum()  # something was counted


@pytest.mark.parametrize(("depth_classes", "depth_octaves"), [(4, 2), (3, 1), (6, 3)])
def test_compiled_groups_equal_the_numpy_form(depth_classes, depth_octaves):
    """``_grps`` of one kind (the compiled pass, ``_nb.groups``) equals the
    numpy form (an array of kinds) and the scalar ``_grp`` at every depth up
    to 5,000 and at a few large ones."""
    pol = UtilityPolicy(UtilityParams(depth_classes=depth_classes, depth_octaves=depth_octaves))
    pol.spfcore_cache_configured(num_blocks=64, block_size=16)  # loads the compiled loops
    depth = np.concatenate([np.arange(5001), [2**31, 2**40 - 1, 2**52]]).astype(np.int64)
    for kind in (0, 1, 2):
        got = pol._grps(kind, depth)
        assert got.tolist() == pol._grps(np.full(len(depth), kind), depth).tolist()
        assert got.tolist() == [pol._grp(kind, int(d)) for d in depth]
    if (depth_classes, depth_octaves) == (4, 2):  # the defaults, by hand: depths 0-2, 3-14, 15-62, 63+
        assert pol._grps(2, depth)[[0, 2, 3, 14, 15, 62, 63, 5000]].tolist() == [8, 8, 9, 9, 10, 10, 11, 11]


def _numpy_index_table(pol, hist, never):
    """The index table as ``UtilityPolicy._build`` computed it in numpy (every
    class, the priors added to whole arrays), for the compiled form to equal."""
    from spfcore_spf_expected_utility import utility as U

    p, nb = pol.params, pol.nb
    h, nev = hist, never
    lo, hi = pol.lo[:nb], pol.lo[1:nb + 1]
    rep = (lo + hi) / 2.0
    pooled = h.sum(0)
    pooled_never = nev.sum()
    tot = pooled.sum() + pooled_never
    if tot > 0 and p.prior_weight > 0:
        h = h + p.prior_weight * pooled / tot
        nev = nev + p.prior_weight * pooled_never / tot
    if p.gap_prior > 0 and p.gap_classes:
        h = h + pol.gap_prior
    H = np.concatenate([np.zeros((pol.nc, 1)), np.cumsum(h, 1)], 1)
    HR = np.concatenate([np.zeros((pol.nc, 1)), np.cumsum(h * rep, 1)], 1)
    total = H[:, -1] + nev
    return U._load_nb().density_index(H, HR, total, pol._lo_f, nb, np.arange(pol.nc, dtype=np.int64))


@pytest.mark.parametrize("seed", range(6))
def test_compiled_index_table_equals_the_numpy_form(seed):
    """``_build``'s compiled table (one row per reuse class for the classes
    without data, copied) is bit for bit the numpy form's, and the histograms
    decay the same."""
    rng = np.random.default_rng(seed)
    kw = [{}, {"prior_weight": 0.0}, {"gap_prior": 0.0}, {"gap_classes": False}, {"prior_weight": 2},
          {"decay": 0.9, "max_count": 3}][seed]
    pol = UtilityPolicy(UtilityParams(**kw))
    hist = rng.exponential(1.0, (pol.nc, pol.nb)) * (rng.random((pol.nc, pol.nb)) < 0.3)
    hist[rng.random(pol.nc) < 0.7] = 0.0  # classes without data
    never = rng.exponential(1.0, pol.nc) * (rng.random(pol.nc) < 0.5)
    never[~hist.any(1)] *= rng.random(int((~hist.any(1)).sum())) < 0.5
    if seed == 0:
        hist[:], never[:] = 0.0, 0.0  # nothing at all: no pooled prior (tot 0)
    want = _numpy_index_table(pol, hist, never)
    pol.hist[:], pol.never[:] = hist, never
    pol._build()
    assert np.array_equal(pol._vals[:pol.nc], want, equal_nan=True)
    assert np.array_equal(pol.hist, hist * pol.params.decay) and np.array_equal(pol.never, never * pol.params.decay)
