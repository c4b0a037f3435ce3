"""The hot path's shortcuts decide exactly as the long way (issue 11): hooks
called directly vs through pluggy, a release appended by runs vs placed block
by block, the classic policies' walk, and the keys-only table of lru."""

from collections import OrderedDict

import numpy as np

from spfcore import Scores, hookimpl
from spfcore.evictor import Evictor
from spfcore.registry import new_plugin_manager
from spfcore.runtime import PolicyRuntime
from spfcore.testing import MiniCache
from spfcore_classic._base import ClassicPolicy


class Depthy:
    """Scores by depth; its hooks take fewer arguments than the spec's."""

    def __init__(self):
        self.stored = []

    @hookimpl
    def spfcore_blocks_stored(self, blocks):  # no request, no now
        self.stored += blocks.keys

    @hookimpl
    def spfcore_score_blocks(self, blocks):
        return -blocks.depth.astype(float)


def _runtime(policy, nb=8, bs=4):
    pm = new_plugin_manager()
    pm.register(policy, name="t")
    return PolicyRuntime(pm, nb, bs, policy_name="t")


def test_direct_hooks_with_fewer_arguments_and_monitoring_added_later():
    pol = Depthy()
    c = MiniCache(_runtime(pol), 8)
    assert set(c.rt._direct) == {"spfcore_blocks_stored", "spfcore_score_blocks"}
    c.serve(["a0", "a1", "a2"])
    assert pol.stored == ["a0", "a1", "a2"]
    # deepest first: a2 scored -2, evicted before a1 (-1) and a0 (0)
    assert c.serve(["b0", "b1", "b2", "b3", "b4", "b5"]) == ["a2", "a1"]  # 5 hashless blocks, then 2 cached
    seen = []
    undo = c.rt.pm.add_hookcall_monitoring(lambda name, impls, kw: seen.append(name), lambda *a: None)
    try:
        c.serve(["d0", "d1"])  # pluggy dispatches again: the monitor sees every hook call
    finally:
        undo()
    assert "spfcore_blocks_stored" in seen and "spfcore_score_blocks" in seen
    assert pol.stored[-2:] == ["d0", "d1"]
    assert c.rt.hook_calls > 0 and c.rt.hook_seconds > 0


def test_two_plugins_on_one_hook_go_through_pluggy():
    pm = new_plugin_manager()
    a, b = Depthy(), Depthy()
    pm.register(a, name="a")
    pm.register(b, name="b")
    rt = PolicyRuntime(pm, 8, 4, policy_name="a")
    assert "spfcore_blocks_stored" not in rt._direct  # both observers must be called
    c = MiniCache(rt, 8)
    c.serve(["x0", "x1"])
    assert a.stored == b.stored == ["x0", "x1"]


def _scored_evictor(values, pins=None, exp=None):
    def score(ids, now):
        return ([values[i] for i in ids], None, None if exp is None else [exp[i] for i in ids],
                None if pins is None else [pins[i] for i in ids])
    return Evictor(64, score=score, pin_cap_fraction=0.5)


def test_release_appended_by_runs_equals_block_by_block():
    values = {i: float(i % 3 == 0) for i in range(1, 40)}  # runs of equal and of distinct values
    fast, slow = _scored_evictor(values), _scored_evictor(values)
    for batch in ([5, 6, 7, 9, 3], [12, 15, 18, 1, 2], [20, 21, 24, 27, 30, 31]):
        fast.push_cached(batch, 0.0)
        o = slow._order
        slow._order += len(batch)
        slow._place(batch, [1] * len(batch), slow._score(batch, 0.0), range(o + 1, o + 1 + len(batch)))
        assert fast.snapshot() == slow.snapshot()
    assert fast.pop(7, 0.0, 0) == slow.pop(7, 0.0, 0) == [5, 7, 1, 2, 20, 31, 6]  # value 0 in release order, then value 1


def test_pins_and_expiries_take_the_long_way_and_keep_their_order():
    values = {i: 0.0 for i in range(1, 10)}
    pins = {i: i % 2 == 0 for i in range(1, 10)}
    exp = {i: 5 if i % 2 == 0 else 2**62 for i in range(1, 10)}
    ev = _scored_evictor(values, pins, exp)
    ev.push_cached([1, 2, 3, 4, 5, 6], 0.0)
    assert ev.num_pinned == 3
    assert ev.pop(4, 0.0, 0) == [1, 3, 5, 2]  # unpinned first, then pinned in release order


def test_first_evictable_walk():
    order = OrderedDict.fromkeys([1, 2, 3, 4])
    assert ClassicPolicy.first_evictable(order, lambda i: False) is None
    assert list(order) == [1, 2, 3, 4]  # a full miss leaves the order as it was
    assert ClassicPolicy.first_evictable(order, lambda i: i == 3) == 3
    assert list(order) == [3, 4, 1, 2]  # the blocks passed over moved to the newest end


def test_first_evictable_inlined_check_equals_the_method():
    class P(ClassicPolicy):
        def configure(self, capacity):
            pass

    p = P()
    p.key, p.kids = {1: "a", 2: "b", 3: "c", 4: "d"}, {"a": 1, "c": 2}
    p._free = {1: None, 2: None, 4: None}
    order = OrderedDict.fromkeys([1, 3, 2, 4])
    # 1 has a cached child, 3 is in use: 2 is the first evictable block
    assert ClassicPolicy.first_evictable(order, p.evictable) == 2
    assert list(order) == [2, 4, 1, 3]


def test_lru_keeps_keys_only():
    c = MiniCache("lru", 6)
    assert not c.rt.track and c.rt._quiet_arrival
    c.serve(["a0", "a1", "a2"])
    assert sorted(b.key for b in c.rt.meta.values()) == ["a0", "a1", "a2"]
    assert int(np.count_nonzero(c.rt.table.access_count)) == 0  # nobody reads it
    s = _runtime(Depthy())
    assert s.track and not s._quiet_arrival


def test_scores_scalar_value_takes_the_append_path():
    class Flat:
        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            return Scores(1.0)

    c = MiniCache(_runtime(Flat(), nb=6), 6)
    c.serve(["a0", "a1", "a2"])
    assert c.rt.evictor.snapshot()["groups"][1] == {1.0: ((1, 2, 3), (2, 1, 0))}  # tail first: a2 on block 2
