"""The utility variant's id map answers exactly what the by-hash lookup does.

Every score batch of real replays (sequential and concurrent, with recomputed
copies of hashes and chains broken by evictions) is scored both ways; the id
map must give the same values and expiries, or decline (``None``) where it
cannot be sure.
"""

from __future__ import annotations

import numpy as np
import pytest

from spfcore import Scores
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
from spfcore_spf_expected_utility import utility as U


def _parts(res):
    return (res.values, res.expires_at_arrival) if isinstance(res, Scores) else (res, None)


@pytest.fixture
def checked(monkeypatch):
    seen = {"ids": 0, "declined": 0}
    by_ids = U.UtilityPolicy._score_by_ids

    def both(self, blocks):
        got = by_ids(self, blocks)
        if got is None:
            seen["declined"] += 1
            return None
        seen["ids"] += 1
        (v1, e1), (v2, e2) = _parts(got), _parts(self._score_by_keys(blocks))
        np.testing.assert_array_equal(v1, v2)
        assert (e1 is None) == (e2 is None)
        if e1 is not None:
            np.testing.assert_array_equal(np.asarray(e1), np.asarray(e2))
        return got

    monkeypatch.setattr(U.UtilityPolicy, "_score_by_ids", both)
    return seen


@pytest.mark.parametrize("shape,mode,seed", [("mix", "sequential", 7), ("mix", "concurrent", 3),
                                             ("revisit", "sequential", 1), ("multiturn", "concurrent", 2)])
def test_id_map_equals_hash_lookup(checked, shape, mode, seed):
    wl = make(shape, seed=seed)
    prep = prepare(wl, 16)
    nb = max(64, len({k for v in prep.views for k in v.block_keys}) // 3)  # pressure 3: evictions, copies
    simulate(prep, "spf_expected_utility", num_blocks=nb, block_size=16, mode=mode)
    assert checked["ids"] > 2 * checked["declined"]  # the map answered most batches


def test_id_map_under_a_thrashing_batch(checked, monkeypatch):
    """A 24-block cache under continuous batching: chains broken mid-way,
    parents evicted and recomputed elsewhere (their slots looked up again)."""
    refreshed = []
    gen_of = U.UtilityPolicy._score_by_ids

    def spy(self, blocks):
        before = self._pslot_of_id.copy()
        out = gen_of(self, blocks)
        refreshed.append(int((before != self._pslot_of_id).sum()))
        return out

    monkeypatch.setattr(U.UtilityPolicy, "_score_by_ids", spy)
    wl = make("personas", seed=3, personas=4, prefix_tokens=96, sessions=8, turns=3, query_tokens=16,
              output_tokens=12, arrival="poisson", rate=10.0)
    simulate(wl, "spf_expected_utility", num_blocks=24, block_size=16, mode="concurrent", max_running=4,
             token_budget=64)
    assert checked["ids"] > 0 and sum(refreshed) > 0


def _final_records(monkeypatch, shape, mode, seed, by_map: bool):
    """The last policy's records after a replay, hits looked up through the id
    map (the hook's usual path) or, with ``by_map`` False, by hash."""
    pols = []
    init = U.UtilityPolicy.__init__

    def keep(self, *a, **k):
        init(self, *a, **k)
        pols.append(self)

    with monkeypatch.context() as m:
        m.setattr(U.UtilityPolicy, "__init__", keep)
        if not by_map:
            m.setattr(U._load_nb(), "hit_ids", lambda *a: False)
        wl = make(shape, seed=seed)
        prep = prepare(wl, 16)
        nb = max(64, len({k for v in prep.views for k in v.block_keys}) // 3)
        res = simulate(prep, "spf_expected_utility", num_blocks=nb, block_size=16, mode=mode)
    pol = pols[-1]
    recs = {k: pol.record(k) for k in pol.info}
    return res["token_hit_rate"], recs, pol.hist.copy(), pol.never.copy()


@pytest.mark.parametrize("shape,mode,seed", [("mix", "sequential", 7), ("mix", "concurrent", 3),
                                             ("revisit", "sequential", 1), ("multiturn", "concurrent", 2)])
def test_hits_through_the_id_map_equal_the_hash_lookup(monkeypatch, shape, mode, seed):
    """A hit whose blocks the id map names (``_nb.hit_ids``) updates the same
    records as the lookup by hash: same hits, records and histograms."""
    a = _final_records(monkeypatch, shape, mode, seed, True)
    b = _final_records(monkeypatch, shape, mode, seed, False)
    assert a[0] == b[0] and a[1] == b[1]
    assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3])


def test_a_hash_twice_in_one_store_over_its_ghost():
    """A store holding hash ``a`` twice while ``a`` has a ghost record: the first copy revives
    the ghost, the second gets a new record (the one the dict names). A block ``b`` stored
    under ``a`` before its eviction keeps the revived slot as its parent's in the id map:
    that slot must not count as ``a``'s record, so ``b`` is capped at the new record's value,
    as by hash (a revived slot left as it was: ``b`` uncapped, 0.5)."""
    from spfcore import BlockBatch, RequestView
    from spfcore.views import BlockTable

    pol = U.UtilityPolicy()
    pol.spfcore_cache_configured(num_blocks=8, block_size=1)
    table = BlockTable(8, chain_only=True)

    def stored(t, ids, chain):
        for i, (key, parent, depth) in zip(ids, chain):
            table.key[i], table.parent[i], table.depth[i] = key, parent, depth
        pol.spfcore_blocks_stored(None, BlockBatch(table, ids), float(t))

    pol.spfcore_request_arrived(RequestView("r0", None, 0, 0.0, 2, ("a", "b")), 0.0)
    stored(0, [0, 1], [("a", None, 0), ("b", "a", 1)])
    old = pol.rec["a"]
    pol.spfcore_blocks_evicted(["a"], 0.0)
    table.key[0] = None
    pol.spfcore_request_arrived(RequestView("r1", None, 1, 1.0, 2, ("a", "a")), 1.0)
    stored(1, [2, 3], [("a", None, 0), ("a", "a", 1)])
    new = pol.rec["a"]
    assert new != old and pol.state[old] == 1 and pol.state[new] == 1  # the revived slot: resident, unnamed
    assert pol._pslot_of_id[1] == old and pol._slot_of_id[2] == pol._slot_of_id[3] == new
    # one row for every class: 0.1 at age 0 (a, stored now), 0.5 at age 1 (b, stored at arrival 0)
    pol._install([[0.1, 0.5] + [0.9] * (pol.nb - 2)] * pol.nc, float("inf"))
    batch = BlockBatch(table, [2, 1])  # a (depth 0), then b (depth 1, parent a)
    np.testing.assert_array_equal(_parts(pol._score_by_keys(batch))[0], [0.1, 0.1])
    got = pol._score_by_ids(batch)
    assert got is not None  # answered by the map (the parent looked up again by hash)
    np.testing.assert_array_equal(_parts(got)[0], [0.1, 0.1])
    assert pol._pslot_of_id[1] == new
