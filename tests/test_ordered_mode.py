"""Policy-ordered mode (hook spfcore_evict_blocks): served by the evictor,
bad answers are PolicyErrors that take nothing."""

from __future__ import annotations

import pluggy
import pytest

from spfcore import hookimpl
from spfcore.evictor import Evictor
from spfcore.registry import new_plugin_manager
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.sim.objects import replay_objects


class NewestFirst:
    """Evicts the most recently stored free block (MRU), by its own order."""

    def __init__(self, answer=None):
        self.order, self.answer = [], answer

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        self.order += blocks.ids.tolist()

    @hookimpl
    def spfcore_evict_blocks(self, n, free, now):
        if self.answer is not None:
            return self.answer(n, free)
        out = [i for i in reversed(self.order) if i in free][:n]
        for i in out:
            self.order.remove(i)
        return out


def _rt(policy, n=4) -> PolicyRuntime:
    pm = new_plugin_manager()
    pm.register(policy, name="mru")
    return PolicyRuntime(pm, n, 1, policy_name="mru")


def test_policy_names_the_victims():
    rt = _rt(NewestFirst())
    assert rt.evictor.ordered and not rt.evictor.fifo
    r = replay_objects([1, 2, 3, 4, 5, 4, 6, 1], rt, 4)
    # MRU of 4: 5 evicts 4, 4 evicts 5, 6 evicts 4, 1 hits
    assert (r.hits, r.evictions) == (1, 3)


@pytest.mark.parametrize("answer", [lambda n, free: [], lambda n, free: [999] * n,
                                    lambda n, free: "x", lambda n, free: None])
def test_a_bad_answer_is_a_policy_error_that_takes_nothing(answer):
    rt = _rt(NewestFirst(answer))
    replay_objects([1, 2, 3, 4], rt, 4)
    before = rt.snapshot()
    with pytest.raises(PolicyError, match="spfcore_evict_blocks"):
        rt.evict(1, 9.0)
    assert rt.snapshot() == before


def test_mixed_modes_are_refused():
    class Both(NewestFirst):
        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            return None

    with pytest.raises(PolicyError, match="one mode"):
        _rt(Both())
    with pytest.raises(ValueError):
        Evictor(4, score=lambda ids, now: None, evict=lambda n, free, now: [])


def test_replay_objects_refuses_bad_sizes():
    with pytest.raises(ValueError, match="capacity"):
        replay_objects([1], "lru", 0)
    with pytest.raises(ValueError, match="runtime has 4 blocks"):
        replay_objects([1], _rt(NewestFirst()), 5)
