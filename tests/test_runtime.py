"""PolicyRuntime: the event protocol, LRU tail-first order, hook errors,
hints, rescore on arrival, duplicate block hashes."""

import pytest

from spfcore import Hint, Score, hookimpl
from spfcore.registry import new_plugin_manager
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.testing import MiniCache
from spfcore.views import BlockBatch, BlockTable


def runtime_for(policy, num_blocks=8, block_size=4, **kw):
    pm = new_plugin_manager()
    pm.register(policy, name="t")
    return PolicyRuntime(pm, num_blocks, block_size, policy_name="t", **kw)


def test_lru_evicts_tail_first_in_release_order():
    c = MiniCache("lru", 6)
    assert c.serve(["a0", "a1", "a2"]) == []  # 3 full + 1 hashless block
    # 5 blocks needed: the 3 hashless free blocks, then a's tail: a2, a1.
    assert c.serve(["b0", "b1", "b2", "b3"]) == ["a2", "a1"]
    assert c.serve(["a0", "x"]) == ["b3"]  # a0 hit; x and the hashless block
    assert c.hits == [0, 0, 1]
    assert c.rt.stats()["evictions"] == 3 and c.rt.evictor.fifo


def test_recomputed_duplicate_keeps_the_key():
    # A prompt of exactly 2 full blocks hits at most 1 (the last token is
    # recomputed), so g1 is computed again into a second block.
    c = MiniCache("lru", 4)
    c.serve(["g0", "g1"], extra_tokens=0)
    old = c.rt.by_key["g1"]
    c.serve(["g0", "g1"], extra_tokens=0)
    new = c.rt.by_key["g1"]
    assert new != old and c.rt.meta[old].key == "g1"
    assert c.serve(["x0"]) == ["g1"]  # the old copy, released first
    assert old not in c.rt.meta and c.rt.by_key["g1"] == new
    c.serve(["g0", "g1"])
    assert c.hits[-1] == 2


class WrongLength:
    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [0.0]


class Raises:
    @hookimpl
    def spfcore_request_arrived(self, request, now):
        raise KeyError("boom")


class PinsForever:
    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [Score(0.0, pinned=True) for _ in blocks]


def test_bad_hook_result_and_raising_hook_are_policy_errors():
    c = MiniCache(runtime_for(PinsForever()), 0)
    with pytest.raises(PolicyError, match=r"policy 't' failed in hook spfcore_score_blocks: .*needs an expiry"):
        c.serve(["a0", "a1"])
    c = MiniCache(runtime_for(WrongLength()), 0)
    with pytest.raises(PolicyError, match="policy 't': hook spfcore_score_blocks returned 1 results for 2 blocks"):
        c.serve(["a0", "a1"])
    c = MiniCache(runtime_for(Raises()), 0)
    with pytest.raises(PolicyError, match="policy 't' failed in hook spfcore_request_arrived: KeyError") as e:
        c.serve(["a0"])
    assert isinstance(e.value.__cause__, KeyError)


class Hinter:
    """Hints ("a0", "a1") at arrival 2, lapsing after arrival 3; pins session
    "S" blocks before arrival 3 and asks for them to be re-scored on S's arrival."""

    def __init__(self):
        self.scored, self.arrival = [], 0

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self.arrival = request.arrival_index

    @hookimpl
    def spfcore_prefetch_hints(self, request, now):
        return [Hint(("a0", "a1", "zz"), 3)] if request.arrival_index == 2 else None

    @hookimpl
    def spfcore_rescore_keys(self, request, now):
        return ["s0", "nope"] if request.session_id == "S" else None

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        self.scored.append([b.key for b in blocks])
        pin = self.arrival < 3
        return [Score(0.0, expires_at_arrival=3, pinned=True) if pin and b.session_id == "S" else Score(0.0)
                for b in blocks]


def test_hints_pin_count_used_and_rescore_keys():
    pol = Hinter()
    c = MiniCache(runtime_for(pol, num_blocks=8), 0)
    c.serve(["a0", "a1"])
    c.serve(["s0"], "S")
    assert c.rt.evictor.num_pinned == 1  # s0
    c.serve(["b0"])  # arrival 2: hint pins a1, a0 (zz is not resident)
    assert (c.rt.hints_issued, c.rt.evictor.num_pinned) == (1, 3)
    c.serve(["s0"], "S")  # arrival 3: s0's and the hint's pins expire; S asks to re-score s0
    # One batch each: expired scores (s0, then the hint's pins a0, a1), the
    # rescore_keys answer (free s0; "nope" is not resident), s0's release.
    assert pol.scored[3:] == [["s0", "a0", "a1"], ["s0"], ["s0"]]
    assert c.rt.evictor.num_pinned == 0
    c.serve(["a0", "a1"])  # arrival 4: after the hint lapsed -> not used
    assert (c.rt.hints_issued, c.rt.hints_used) == (1, 0)


def test_hint_used_when_hit_before_it_lapses():
    pol = Hinter()
    c = MiniCache(runtime_for(pol, num_blocks=8), 0)
    c.serve(["a0", "a1"])
    c.serve(["q0"])
    c.serve(["b0"])         # arrival 2: hint
    c.serve(["a0", "a9"])   # arrival 3: hits a0
    assert (c.rt.hints_issued, c.rt.hints_used) == (1, 1)


def test_forget_drops_metadata_and_keys():
    c = MiniCache("lru", 4)
    c.serve(["a0", "a1"])
    ids = [c.rt.by_key["a0"], c.rt.by_key["a1"]]
    c.rt.forget(ids)
    assert c.cached() == set() and not c.rt.meta


def test_policy_time_covers_every_event_and_contains_the_hook_time():
    """``policy_seconds`` times arrived/hit/stored/finished/release/evict/touch;
    hooks run inside those events, so the hook time is part of it."""
    import time

    class Slow:
        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            time.sleep(0.002)
            return [Score(0.0) for _ in blocks]

    c = MiniCache(runtime_for(Slow(), num_blocks=8), 8)
    c.serve(["a0", "a1"])
    c.serve(["b0", "b1", "b2"])
    st = c.rt.stats()
    assert st["hook_calls"] >= 2 and st["hook_seconds"] >= 0.004
    assert st["policy_seconds"] >= st["hook_seconds"]
    lru = MiniCache("lru", 8)
    lru.serve(["a0", "a1"])
    assert lru.rt.stats()["policy_seconds"] > lru.rt.stats()["hook_seconds"]  # FIFO evictor work, no scoring
    # a driver's touch (a hit chain leaving the free queue) is spfcore's time too
    rt, i = lru.rt, lru.rt.block_of("a0")
    before = rt.policy_seconds
    assert rt.is_free(i)
    rt.touch([i])
    assert not rt.is_free(i) and rt.policy_seconds > before


@pytest.mark.parametrize("bad", ["x", float("nan"), Score(float("nan")), True, Score("1")])
def test_a_score_that_is_not_a_real_number_fails_naming_policy_and_hook(bad):
    class Bad:
        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            return [0.5] * (len(blocks) - 1) + [bad]

    c = MiniCache(runtime_for(Bad(), num_blocks=8), 8)
    with pytest.raises(PolicyError, match=r"policy 't': hook spfcore_score_blocks returned .* at position \d+: "
                                          r"a score must be a real number \(not NaN\)"):
        c.serve(["a0", "a1"])


def test_good_scores_of_every_kind_are_accepted():
    import numpy as np

    class Mixed:
        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            kinds = [1.0, 2, None, Score(3.0), np.float32(0.5), float("inf")]
            return [kinds[i % len(kinds)] for i in range(len(blocks))]

    c = MiniCache(runtime_for(Mixed(), num_blocks=8), 8)
    c.serve(["a0", "a1", "a2"])
    c.serve(["b0", "b1", "b2", "b3"])
    c.serve(["c0", "c1", "c2", "c3", "c4"])
    assert c.rt.stats()["evictions"] >= 3


class DeepFirstBatch:
    """The README's toy in the batch form."""

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return -1.0 * blocks.depth


class DeepFirstPerBlock:
    """The same toy in the per-block form."""

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [Score(-float(b.depth)) for b in blocks]


class SessionPinsBatch:
    """Pins blocks of session "s" until arrival 3 (Scores with array fields)."""

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        import numpy as np
        from spfcore import Scores

        mine = blocks.session == blocks.table.session_id("s")
        return Scores(np.zeros(len(blocks)), expires_at_arrival=np.where(mine, 3, 2**62), pinned=mine)


class SessionPinsPerBlock:
    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [Score(0.0, expires_at_arrival=3, pinned=True) if b.session_id == "s" else Score(0.0)
                for b in blocks]


SCRIPT = [(["a0", "a1", "a2"], "s"), (["b0", "b1"], None), (["c0", "c1", "c2"], None), (["a0", "a1", "x"], None),
          (["d0", "d1", "d2", "d3"], "s"), (["b0", "y"], None), (["a0", "a1", "a2"], None)]


@pytest.mark.parametrize("batch,per_block", [(DeepFirstBatch, DeepFirstPerBlock),
                                             (SessionPinsBatch, SessionPinsPerBlock)])
def test_batch_and_per_block_forms_decide_identically(batch, per_block):
    runs = []
    for cls in (batch, per_block):
        c = MiniCache(runtime_for(cls(), num_blocks=8), 0)
        runs.append(([c.serve(k, s) for k, s in SCRIPT], c.hits, c.rt.evictor.pins_refused))
    assert runs[0] == runs[1]
    assert sum(len(e) for e in runs[0][0]) > 5  # the script does evict


def test_batch_columns_follow_the_events():
    seen = {}

    class Spy:
        @hookimpl
        def spfcore_blocks_hit(self, request, blocks, now):
            seen["hit"] = (blocks.keys, blocks.access_count.tolist(), blocks.last_access.tolist(),
                           blocks.depth.tolist(), blocks.parent_index.tolist())

        @hookimpl
        def spfcore_blocks_stored(self, request, blocks, now):
            seen.setdefault("stored", []).append((blocks.keys, blocks.parents, blocks.depth.tolist(),
                                                  blocks.stored_at.tolist(), blocks.num_tokens.tolist(),
                                                  [blocks.table.sessions[s] for s in blocks.session.tolist()]))

    c = MiniCache(runtime_for(Spy(), num_blocks=8), 0)
    c.serve(["a0", "a1"], "s1")
    c.serve(["a0", "a1", "a2"], "s2")
    assert seen["stored"] == [(["a0", "a1"], [None, "a0"], [0, 1], [0.0, 0.0], [4, 4], ["s1", "s1"]),
                              (["a2"], ["a1"], [2], [1.0], [4], ["s2"])]
    assert seen["hit"] == (["a0", "a1"], [2, 2], [1.0, 1.0], [0, 1], [-1, 0])
    assert sorted(b.key for b in c.rt.meta.values()) == ["a0", "a1", "a2"]


@pytest.mark.parametrize("answer,match", [
    ("nan_array", r"nan at position 1: a score must be a real number"),
    ("bool_array", r"an array of dtype bool"),
    ("short_array", r"an array of shape \(1,\) for 2 blocks"),
    ("pin_no_expiry", r"a pin without an expiry at position 0"),
    ("short_field", r"Scores.expires_at_arrival of length 1 for 2 blocks"),
])
def test_bad_batch_answers_are_policy_errors(answer, match):
    import numpy as np
    from spfcore import Scores

    answers = {"nan_array": np.array([0.0, np.nan]), "bool_array": np.array([True, False]),
               "short_array": np.array([1.0]), "pin_no_expiry": Scores(0.0, pinned=np.array([True, False])),
               "short_field": Scores(0.0, expires_at_arrival=[3])}

    class Bad:
        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            return answers[answer]

    c = MiniCache(runtime_for(Bad()), 0)
    with pytest.raises(PolicyError, match=r"policy 't': hook spfcore_score_blocks returned " + match):
        c.serve(["a0", "a1"])


class RecordsEvicted:
    def __init__(self):
        self.evicted = []

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        self.evicted.append(list(keys))


@pytest.mark.parametrize("dup", [False, True])
@pytest.mark.parametrize("hashless", [0, 3])
def test_a_large_allocation_drops_keys_as_one_by_one(dup, hashless):
    """An allocation of more than 16 victims drops their keys in bulk: the key
    map, the hook's keys and the eviction count are those of the one-by-one
    rule (a key leaves the map only with the block that owns it), with
    hashless victims first and a recomputed duplicate among the victims."""
    pol = RecordsEvicted()
    rt = runtime_for(pol, num_blocks=64)
    rt.release([], list(range(64)), 0.0)
    req = None
    a = rt.evict(24, 0.0)
    rt.stored(req, a, [f"k{j}" for j in range(24)], 0, None, 4, 0.0)
    b = rt.evict(2, 0.0)  # a recomputed copy of k5 (it owns the key now) and k30
    rt.stored(req, b, ["k5" if dup else "k99", "k30"], 5, "k4", 4, 0.0)
    held = rt.evict(38, 0.0)  # every other block, held
    rt.release(a[::-1] + b, held[:hashless], 1.0)
    key = [rt.key_of(i) for i in range(64)]
    expected = dict(rt.by_key)
    victims = rt.evict(24 + hashless, 2.0)  # a's blocks, not b's
    assert victims[:hashless] == held[:hashless] and len(victims) - hashless > 16
    gone = []
    for i in victims:
        if key[i] is not None:
            gone.append(key[i])
            if expected.get(key[i]) == i:
                del expected[key[i]]
    assert rt.by_key == expected and pol.evicted[-1] == gone and rt.evictions == len(gone) == 24
    assert all(rt.key_of(i) is None for i in victims)
    assert rt.by_key == {"k5" if dup else "k99": b[0], "k30": b[1]}  # the copy of k5 still owns it


class KeysOnly:
    """Reads keys and ids only (as a ``keys-only`` policy must); scores by key name."""

    def __init__(self):
        self.seen = []

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        self.seen.append((list(blocks.keys), blocks.ids.tolist(), len(blocks)))

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [float(len(k) + ord(k[0]) % 3) for k in blocks.keys]  # a spread of values from the keys alone


def test_keys_only_runtime_decides_as_the_full_table_and_refuses_other_columns():
    """capability keys-only (contract 1.3): the table keeps keys alone (no
    parent, request id or numeric column written), decisions are those of
    the full table, and a column read fails naming the policy and the hook."""
    runs = []
    for keys_only in (False, True):
        pol = KeysOnly()
        rt = runtime_for(pol, num_blocks=8, keys_only=keys_only)
        c = MiniCache(rt, 0)
        runs.append(([c.serve(k, s) for k, s in SCRIPT], c.hits, pol.seen, sorted(rt.by_key.items(), key=str)))
        assert rt.track is not keys_only and rt.table.keys_only is keys_only
        written = [i for i in range(8) if rt.table.parent[i] is not None or rt.table.depth[i] != 0]
        assert bool(written) is not keys_only  # keys-only: no parent, no depth ever written
    assert runs[0] == runs[1]
    assert sum(len(e) for e in runs[0][0]) > 5  # the script does evict

    class ReadsDepth(KeysOnly):
        @hookimpl
        def spfcore_blocks_stored(self, request, blocks, now):
            blocks.depth

    c = MiniCache(runtime_for(ReadsDepth(), num_blocks=8, keys_only=True), 0)
    before = c.rt.snapshot()
    with pytest.raises(PolicyError, match=r"policy 't' failed in hook spfcore_blocks_stored: "
                                          r"AttributeError\(\"BlockBatch.depth: the policy declared capability "
                                          r"'keys-only'") as e:
        c.serve(["a0", "a1"], "s1")
    assert e.value.hook == "spfcore_blocks_stored" and c.rt.snapshot() == before  # nothing half-written
    batch = BlockBatch(BlockTable(4, keys_only=True), [0, 1])
    for col in ("depth", "parents", "request_ids", "parent_index", "access_count"):
        with pytest.raises(AttributeError, match=f"BlockBatch.{col}: "):
            getattr(batch, col)
    with pytest.raises(AttributeError, match="per-block views"):
        list(batch)
    assert batch.keys == [None, None] and batch.ids.tolist() == [0, 1]
    # the table a keys-only batch hands out has keys only: its other columns are not kept current
    assert batch.table.key is batch._table.key and batch.table.keys_only and batch.table is batch.table
    for col in ("depth", "access_count", "session", "sessions", "parent", "view"):
        with pytest.raises(AttributeError, match=f"BlockBatch.table.{col}: the policy declared capability 'keys-only'"):
            getattr(batch.table, col)
    with pytest.raises(AttributeError, match="has no attribute 'nonesuch'"):
        batch.table.nonesuch
    full = BlockBatch(BlockTable(4), [0, 1])
    assert type(full.table) is BlockTable and full.table.depth.tolist() == [0, 0, 0, 0]


def test_keys_only_policy_reading_the_tables_depth_fails_naming_it():
    class ReadsTableDepth(KeysOnly):
        @hookimpl
        def spfcore_blocks_stored(self, request, blocks, now):
            blocks.table.depth[blocks.ids]

    c = MiniCache(runtime_for(ReadsTableDepth(), num_blocks=8, keys_only=True), 0)
    with pytest.raises(PolicyError, match=r"failed in hook spfcore_blocks_stored: AttributeError\(\"BlockBatch.table.depth"):
        c.serve(["a0", "a1"], "s1")


class ChainOnly(KeysOnly):
    """Reads keys, ids, depths and parents only (as a ``chain-only`` policy may); scores by depth."""

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        self.seen.append((list(blocks.keys), blocks.depth.tolist(), blocks.parents, blocks.parent_index.tolist(),
                          blocks.table.depth[blocks.ids].tolist(), [blocks.table.parent[i] for i in blocks.ids]))

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        self.seen.append(blocks.depth.tolist())

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return -blocks.depth.astype(float) + [ord(k[0]) % 3 for k in blocks.keys]


def test_chain_only_runtime_decides_as_the_full_table_and_refuses_other_columns():
    """capability chain-only (contract 1.4): the table keeps keys, parents and
    depths (no request id, session, token count, access count or time
    written), decisions are those of the full table, and reading another
    column fails naming the capability."""
    runs = []
    for chain_only in (False, True):
        pol = ChainOnly()
        rt = runtime_for(pol, num_blocks=8, chain_only=chain_only)
        c = MiniCache(rt, 0)
        runs.append(([c.serve(k, s) for k, s in SCRIPT], c.hits, pol.seen, sorted(rt.by_key.items(), key=str)))
        assert rt.track and rt.table.kept == (frozenset({"key", "parent", "depth"}) if chain_only else None)
        t = rt.table
        other = [i for i in range(8) if t.request_id[i] is not None or t.access_count[i] or t.stored_at[i]
                 or t.num_tokens[i] or t.session[i] != -1]
        assert bool(other) is not chain_only  # chain-only: none of the other columns ever written
    assert runs[0] == runs[1]
    assert sum(len(e) for e in runs[0][0]) > 5  # the script does evict
    batch = BlockBatch(BlockTable(4, chain_only=True), [0, 1])
    assert batch.depth.tolist() == [0, 0] and batch.parents == [None, None] and batch.keys == [None, None]
    for col in ("request_ids", "access_count", "last_access", "stored_at", "session", "num_tokens"):
        with pytest.raises(AttributeError, match=f"BlockBatch.{col}: the policy declared capability 'chain-only'"):
            getattr(batch, col)
    with pytest.raises(AttributeError, match="per-block views"):
        list(batch)
    assert batch.table.depth is batch._table.depth and batch.table.parent is batch._table.parent
    for col in ("access_count", "session", "sessions", "request_id", "view"):
        with pytest.raises(AttributeError, match=f"BlockBatch.table.{col}: the policy declared capability 'chain-only'"):
            getattr(batch.table, col)
    # keys-only wins over chain-only
    assert BlockTable(4, keys_only=True, chain_only=True).kept == frozenset({"key"})


def test_belady_and_spf_declare_chain_only_and_the_runtime_honours_it():
    for name in ("belady_oracle", "spf_expected_utility"):
        rt = PolicyRuntime.for_policy(name, 16, 4)
        assert rt.track and rt._chain_only and rt.table.capability == "chain-only"


def test_session_ttl_and_frequency_declare_keys_only_and_the_runtime_honours_it():
    for name in ("session_ttl", "frequency"):
        rt = PolicyRuntime.for_policy(name, 16, 4)
        assert not rt.track and rt.table.keys_only
    assert PolicyRuntime.for_policy("spf_expected_utility", 16, 4).track  # reads depths: keys, parents, depths



@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "uint8", "uint32", "uint64"])
def test_expiry_arrays_of_any_integer_width(dtype):
    """A score hook may answer ``expires_at_arrival`` as any integer array (review 10: int32 was a
    PolicyError, numpy refusing 2**62 in an int32); the blocks expire at that arrival and are
    re-scored, exactly as with int64."""
    import numpy as np

    from spfcore import Scores

    def run(dt):
        scored = []

        class Expiring:
            @hookimpl
            def spfcore_score_blocks(self, blocks, now):
                scored.append(len(blocks))
                return Scores(0.0, expires_at_arrival=np.full(len(blocks), 2, dt))

        pm = new_plugin_manager()
        pm.register(Expiring(), name="expiring")
        c = MiniCache(PolicyRuntime(pm, 8, 4, policy_name="expiring"), 0)
        hits = [c.serve(r) for r in (["a0", "a1", "a2"], ["b0", "b1"], ["c0", "c1", "c2"], ["d0"])]
        return hits, scored

    got, want = run(np.dtype(dtype)), run(np.int64)
    assert got == want
    assert sum(want[1]) > 9  # 9 blocks stored: more scores means the expiry at arrival 2 fired


class EvictSpy:
    """Scores blocks by key, records every eviction report (a decision hook and the evicted hook)."""

    def __init__(self):
        self.gone = []

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [float(k % 7) for k in blocks.keys]

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        self.gone.append(list(keys))


def test_runtime_without_key_map_decides_as_with_it():
    """key_map=False (the simulator's and the engine's runtimes): no block
    hash -> id map is kept, decisions, eviction reports, counters and the
    table are those of a runtime that keeps it, and block_of refuses; a
    policy with a hook naming blocks by hash keeps the map all the same."""
    from spfcore.sim import prepare
    from spfcore.sim.simulator import _run_sequential
    from spfcore.workloads.generators import make

    wl = make("personas", seed=3, personas=3, prefix_tokens=256, sessions=6, turns=3, query_tokens=32,
              output_tokens=20, order="round_robin")
    prep = prepare(wl, 16)
    for make_rt in (lambda km: PolicyRuntime.for_policy("lru", 60, 16, key_map=km),
                    lambda km: runtime_for(EvictSpy(), num_blocks=60, block_size=16, key_map=km)):
        runs = []
        for km in (True, False):
            rt = make_rt(km)
            victims = []
            evict = rt.evict
            rt.evict = lambda n, now: victims.append(list(evict(n, now))) or victims[-1]
            totals = _run_sequential(prep.plans, rt, 60, 16)
            pol = rt.pm.get_plugin("t")
            runs.append((totals, victims, rt.evictions, list(rt.table.key), pol.gone if pol else None))
            assert rt.keyed is km and bool(rt.by_key) is km
        assert runs[0] == runs[1]
        assert runs[0][2] > 20 and runs[0][0][3] > 0  # it evicts and hits
        if runs[0][4] is not None:
            assert sum(map(len, runs[0][4])) == runs[0][2]  # every evicted key reported, once
    with pytest.raises(RuntimeError, match="keeps no key map"):
        rt.block_of(1)
    with pytest.raises(RuntimeError, match="keeps no key map"):
        rt.cached_keys()
    assert PolicyRuntime.for_policy("session_ttl", 16, 4, key_map=False).keyed  # spfcore_rescore_keys

    class Hints:
        @hookimpl
        def spfcore_prefetch_hints(self, request, now):
            return ()

    assert runtime_for(Hints(), key_map=False).keyed
    assert not PolicyRuntime.for_policy("frequency", 16, 4, key_map=False).keyed
