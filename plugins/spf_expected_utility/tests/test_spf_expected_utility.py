"""spf_expected_utility, variant="seed" (set explicitly; the default is "utility"): the utility of a tiny case computed
by hand, whole-chain retention, and prefetch hints for the next session."""

import math

import pytest

from spfcore import BlockBatch
from spfcore.runtime import score_columns
from spfcore.registry import PolicyConfigError
from spfcore.testing import MiniCache

LN51 = math.log(51)
SEED = {"variant": "seed"}


def test_seed_formula_by_hand():
    # block_size 4, 1e8 KV bytes per token -> 0.4 GB per block; s = 0.08 ms (retention).
    c = MiniCache("spf_expected_utility", 16,
                  options={"variant": "seed", "kv_bytes_per_token": "100000000", "hints": "false"})
    c.serve(["a0", "a1"], "A")        # arrival 0
    c.serve(["b0"], "B")              # arrival 1
    c.serve(["a0", "a1", "a2"], "A")  # arrival 2: hits a0, a1; stores a2
    pol = c.rt.pm.get_plugin("spf_expected_utility")
    ids = [c.rt.by_key[k] for k in ("a2", "a0", "b0")]
    got = score_columns(pol.spfcore_score_blocks(BlockBatch(c.rt.table, ids), 2.0), 3)
    # a batch of copies (not the runtime's table) is scored by hash: same answer
    copies = BlockBatch.of([c.rt.meta[i] for i in ids])
    assert score_columns(pol.spfcore_score_blocks(copies, 2.0), 3) == got
    # Resident: chain a0 = 3 blocks, chain b0 = 1 -> average 2 blocks, victim_saved = 0.16 ms.
    # Chain a0 at arrival 2: A went a0 -> a0 once (p = 1, n = 1), recency 0,
    # accesses 2, consecutive 2 (A twice), reuse distance 2 - 0 = 2.
    T = min(0.5, 1.0 * min(1.0, math.log(2) / LN51))   # 0.693147 / 3.931826 = 0.176291
    P_a = T + 0.5 + min(0.25, math.log(3) / LN51) + min(0.1, 2 / 15) - min(0.5, 2 / 20)
    assert P_a == pytest.approx(0.176291 + 0.5 + 0.25 + 0.1 - 0.1, abs=1e-6)
    U_a = P_a * 0.08 * 3 - (1 - P_a) * 0.16 - (1 - P_a) * 0.5 * 1.2 - 0.02
    assert U_a == pytest.approx(0.926291 - 0.78, abs=1e-6)  # = P (0.24 + 0.76) - 0.76 - 0.02
    # Chain b0 at arrival 2: B has no prefix transition yet (T = 0), recency 1,
    # accesses 1, consecutive 1, no reuse distance.
    P_b = min(0.5, 1 / (1 + 1 / 3)) + math.log(2) / LN51 + 1 / 15
    U_b = P_b * 0.08 * 1 - (1 - P_b) * 0.16 - (1 - P_b) * 0.5 * 0.4 - 0.02
    assert U_b == pytest.approx(0.44 * 0.742958 - 0.38, abs=1e-6)  # P_b = 0.5 + 0.176291 + 0.066667
    values, expires_at, expires_at_arrival, pinned = got
    assert expires_at_arrival == [6, 6, 6]  # arrival 2 + score_ttl_arrivals 4
    assert values == pytest.approx([U_a, U_a, U_b], abs=1e-12)
    assert expires_at is None and pinned is None


def test_whole_chain_kept_over_a_later_single_block():
    script = [("A", ["a0", "a1"]), ("A", ["a0", "a1"]), ("B", ["b0"]), ("D", ["d0", "d1", "d2"])]
    spf, lru = MiniCache("spf_expected_utility", 6, options=SEED), MiniCache("lru", 6)
    # LRU evicts a1 (released at arrival 1); chain a0 (reused, 2 blocks, U ~ 0.13 ms)
    # outranks b0 (U ~ 0.0085 ms), so spf evicts b0.
    assert [spf.serve(k, s) for s, k in script][3] == ["b0"]
    assert [lru.serve(k, s) for s, k in script][3] == ["a1"]


def test_hint_pins_the_next_sessions_prefix():
    c = MiniCache("spf_expected_utility", 16, options=SEED)
    c.serve(["a0", "a1"], "A")
    c.serve(["b0"], "B")
    c.serve(["a0", "a1"], "A")
    assert c.rt.hints_issued == 0  # B's prefix has no transition yet
    c.serve(["b0"], "B")  # B -> A seen once (q = 1), A: a0 -> a0 (p = 1): hint (a0, a1)
    assert (c.rt.hints_issued, c.rt.evictor.num_pinned) == (1, 2)
    c.serve(["a0", "a1"], "A")  # uses it; hints (b0,) for B
    c.serve(["b0"], "B")        # uses that; hints (a0, a1) again, not yet used
    assert (c.rt.hints_issued, c.rt.hints_used) == (3, 2)


@pytest.mark.parametrize("opt, msg", [
    ({"variant": "better"}, "bad value 'better' for 'variant' (must be one of ['utility', 'seed'])"),
    ({"mode": "x"}, "bad value 'x' for 'mode' (must be one of ['retention', 'prefetch'])"),
    ({"c": "0"}, "'c' must be > 0"),
    ({"gamma": "1"}, "unknown parameter 'gamma'"),
    # an infinity gave a fault in a hook (ghost_factor, count_weight) or silently 0% hits (prior_weight, gap_prior)
    ({"ghost_factor": "inf"}, "'ghost_factor' must be finite: inf"),
    ({"prior_weight": "inf"}, "'prior_weight' must be finite: inf"),
    ({"count_weight": "inf"}, "'count_weight' must be finite: inf"),
    ({"gap_prior": "inf"}, "'gap_prior' must be finite: inf"),
])
def test_bad_options(opt, msg):
    with pytest.raises(PolicyConfigError, match="^policy 'spf_expected_utility': ") as e:
        MiniCache("spf_expected_utility", 4, options=opt)
    assert msg in str(e.value)


@pytest.mark.parametrize("mode, issued", [("retention", 0), ("prefetch", 1)])
def test_evicted_chain_is_hinted_only_in_prefetch_mode(mode, issued):
    c = MiniCache("spf_expected_utility", 6, options={"variant": "seed", "mode": mode})
    for s, keys in [("A", ["a0", "a1"]), ("B", ["b0"]), ("A", ["a0", "a1"])]:
        c.serve(keys, s)
    # the whole pool: b0 (lower utility) first, then chain a0 tail first
    assert c.serve(["c0", "c1", "c2", "c3", "c4"], "C") == ["b0", "a1", "a0"]
    c.serve(["b0"], "B")  # predicts A next (q = 1) with prefix a0 (p = 1); a0 is not resident
    assert c.rt.hints_issued == issued
