"""belady_oracle: furthest next use first, deeper first on ties, stale
predictions re-scored, refusal without a future stream."""

import pytest

from spfcore import BlockBatch, BlockView, RequestView
from spfcore.runtime import PolicyError, score_columns
from spfcore.testing import MiniCache
from spfcore_belady_oracle import DEPTH_SLOTS, NEVER, BeladyOraclePolicy


def _block(key, depth):
    return BlockView(key, depth, None, 4, None, "r", 1, 0.0, 0.0)


def test_score_is_minus_next_use_with_depth_and_expiry():
    p = BeladyOraclePolicy()
    future = [("x0", "x1"), ("y0",), ("x0",), ("x0", "y0")]
    p.spfcore_future_requests([RequestView(f"r{i}", None, i, float(i), 9, k) for i, k in enumerate(future)])
    r0 = RequestView("r0", None, 0, 0.0, 9, future[0])
    p.spfcore_request_arrived(r0, 0.0)
    p.spfcore_blocks_hit(r0, BlockBatch.of([]), 0.0)  # served (looked up): no longer in the future
    got = p.spfcore_score_blocks(BlockBatch.of([_block("x0", 0), _block("x1", 1), _block("y0", 0),
                                                _block("z", 3)]), 0.0)
    # x0 next used at arrival 2, y0 at 1; x1 and z never again.
    values, exp_t, exp_a, pins = score_columns(got, 4)
    assert values == [-(2 * DEPTH_SLOTS + 0.0), -(NEVER * DEPTH_SLOTS + 1.0),
                      -(1 * DEPTH_SLOTS + 0.0), -(NEVER * DEPTH_SLOTS + 3.0)]
    assert exp_a == [3, 2**62, 2, 2**62] and exp_t is None and pins is None
    r2 = RequestView("r2", None, 2, 2.0, 9, future[2])
    p.spfcore_request_arrived(r2, 2.0)
    assert p.next_use("x0") == 2  # r2 waits for its lookup: x0 is needed by it
    p.spfcore_blocks_hit(r2, BlockBatch.of([]), 2.0)
    assert p.next_use("x0") == 3 and p.next_use("y0") == 3 and p.next_use("x1") == NEVER


def test_furthest_next_use_and_deeper_first_on_ties():
    c = MiniCache("belady_oracle", 5)
    c.set_future([(None, ["a0", "a1"]), (None, ["b0", "b1"]), (None, ["c0"]),
                  (None, ["a0", "a1"]), (None, ["b0", "b1"])])
    assert c.serve(["a0", "a1"]) == []
    assert c.serve(["b0", "b1"]) == []
    # Free: 1 hashless + a1,a0 (next use 3) and b1,b0 (next use 4). LRU would
    # take a1 (released first); Belady takes b1 (furthest, deeper than b0).
    assert c.serve(["c0"]) == ["b1"]
    assert c.serve(["a0", "a1"]) == []
    # Nothing is used again: a1 (depth 1) goes before c0 (depth 0) although
    # c0 was released earlier.
    assert c.serve(["b0", "b1"]) == ["a1"]
    assert c.hits == [0, 0, 0, 2, 1]


def test_passed_prediction_is_rescored():
    # Arrival 1 lists g1 but cannot hit it (a fully cached prompt recomputes its
    # last block), so the old g1 block's "next use = 1" goes stale at arrival 2
    # and is re-scored; it then ties with the recomputed copy and, released
    # earlier, is evicted in its place, so arrival 3 still hits g0, g1.
    c = MiniCache("belady_oracle", 6)
    c.set_future([(None, ["g0", "g1"]), (None, ["g0", "g1"]), (None, ["k0", "k1", "k2"]),
                  (None, ["g0", "g1"])])
    c.serve(["g0", "g1"], extra_tokens=0)
    old_g1 = c.rt.by_key["g1"]
    c.serve(["g0", "g1"], extra_tokens=0)
    new_g1 = c.rt.by_key["g1"]
    assert new_g1 != old_g1 and c.hits == [0, 1]
    assert c.serve(["k0", "k1", "k2"]) == ["g1"]
    assert old_g1 not in c.rt.meta and c.rt.by_key["g1"] == new_g1
    c.serve(["g0", "g1"])
    assert c.hits == [0, 1, 0, 2]


def test_without_future_stream_the_runtime_refuses():
    c = MiniCache("belady_oracle", 4)
    with pytest.raises(PolicyError, match="needs the future request stream"):
        c.serve(["a0"])


def test_requests_waiting_for_their_lookup_are_in_the_future():
    # Continuous batching: r1 and r2 arrive while r0 runs; their lookups come later. Their blocks
    # are needed (next use 1 and 2), not "never" as when the future started after the latest arrival.
    p = BeladyOraclePolicy()
    future = [("a0",), ("p0", "p1"), ("p0",), ("q0",)]
    views = [RequestView(f"r{i}", None, i, float(i), 9, k) for i, k in enumerate(future)]
    p.spfcore_future_requests(views)
    for v in views[:3]:
        p.spfcore_request_arrived(v, float(v.arrival_index))
    p.spfcore_blocks_hit(views[0], BlockBatch.of([]), 2.0)
    assert p.next_use("p0") == 1 and p.next_use("p1") == 1 and p.next_use("q0") == 3
    values, exp_t, exp_a, _ = score_columns(
        p.spfcore_score_blocks(BlockBatch.of([_block("p1", 1), _block("q0", 0)]), 2.5), 2)
    # p1's use by a waiting request expires at now (re-scored once r1 has looked up)
    assert values == [-(1 * DEPTH_SLOTS + 1.0), -(3 * DEPTH_SLOTS + 0.0)] and exp_t == [2.5, float("inf")]
    p.spfcore_blocks_hit(views[1], BlockBatch.of([]), 3.0)  # r1 served: p1 never used again, p0 by r2
    assert p.next_use("p1") == NEVER and p.next_use("p0") == 2
    p.spfcore_blocks_hit(views[1], BlockBatch.of([]), 3.5)  # a repeated lookup (preemption) changes nothing
    p.spfcore_blocks_hit(views[2], BlockBatch.of([]), 4.0)
    assert p.next_use("p0") == NEVER


def test_next_use_matches_its_definition_on_any_arrival_order():
    # The index is advanced arrival by arrival; arrivals that skip indices, go back, repeat or
    # outrun the stream, a hash held twice by one request and unseen hashes must all read as the
    # definition: the earliest waiting arrival holding the hash, else the first arrival after the position.
    import random

    rng = random.Random(7)
    for case in range(30):
        future = [tuple(rng.choice("abcdefgh") for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 9))]
        views = [RequestView(f"r{i}", None, i, float(i), 9, k) for i, k in enumerate(future)]
        p = BeladyOraclePolicy()
        p.spfcore_future_requests(iter(views) if case % 2 else views)
        waiting = {}
        for step in range(12):
            i = rng.choice([rng.randint(0, len(future) + 1), min(p.position + 1, len(future))])
            v = views[i] if i < len(views) else RequestView(f"x{i}", None, i, float(i), 9, ("z",))
            p.spfcore_request_arrived(v, float(step))
            waiting[v.request_id] = (i, v.block_keys)
            if rng.random() < 0.6:
                rid = rng.choice(sorted(waiting))
                p.spfcore_blocks_hit(RequestView(rid, None, waiting.pop(rid)[0], 0.0, 9, ()), BlockBatch.of([]), 0.0)
            for k in "abcdefghz":
                held = [a for a, ks in waiting.values() if k in ks]
                after = [j for j, ks in enumerate(future) if j > i and k in ks]
                want = min(held) if held else (after[0] if after else NEVER)
                assert p.next_use(k) == want, (future, i, k)
            got = score_columns(p.spfcore_score_blocks(BlockBatch.of([_block(k, 0) for k in "abcz"]), 1.0), 4)
            assert got[0] == [-(p.next_use(k) * DEPTH_SLOTS + 0.0) for k in "abcz"]


def test_ids_by_runs_match_one_lookup_a_hash():
    # the index copies shared prefixes as runs and _ids reads runs of consecutive ids (ascending, or
    # released tail first); both must give what one dict lookup a hash gives, on any mix of runs
    import random

    import numpy as np

    rng = random.Random(7)
    prefixes = [[f"p{g}.{d}" for d in range(rng.randrange(1, 60))] for g in range(6)]
    future = []
    for i in range(80):
        ks = list(rng.choice(prefixes)[:rng.randrange(0, 60)]) + [f"q{i}.{d}" for d in range(rng.randrange(0, 30))]
        if rng.random() < 0.2:
            rng.shuffle(ks)
        future.append(tuple(dict.fromkeys(ks)) + tuple(rng.sample(ks, min(len(ks), 2))))  # repeated hashes too
    p = BeladyOraclePolicy()
    p.spfcore_future_requests([RequestView(f"r{i}", None, i, float(i), 9, k) for i, k in enumerate(future)])
    ref: dict = {}
    for ks in future:
        for k in ks:
            ref.setdefault(k, len(ref) + 1)
    assert p._kid == ref and p._dist == list(ref)
    for _ in range(300):
        ks = list(rng.choice(future)) + [f"new{rng.randrange(5)}"] * rng.randrange(3)
        if rng.random() < 0.5:
            ks.reverse()
        if rng.random() < 0.2:
            rng.shuffle(ks)
        got = p._ids(ks if rng.random() < 0.5 else tuple(ks))
        assert got.tolist() == [ref.get(k, 0) for k in ks]
    got = p._ids(("new1", "p0.0", "new2", "new1"), intern=True)
    assert got.tolist() == [len(ref) + 1, ref["p0.0"], len(ref) + 2, len(ref) + 1]
    assert p._dist[-2:] == ["new1", "new2"] and len(p._next) == len(p._wmin) == len(ref) + 3
    assert p._ids(["new2", "new1", "p0.0"]).tolist() == [len(ref) + 2, len(ref) + 1, ref["p0.0"]]
    assert np.array_equal(p._ids([]), np.zeros(0, np.intp))
