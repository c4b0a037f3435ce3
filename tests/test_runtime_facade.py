"""The runtime is the whole facade the drivers call (issue 12): no driver
reaches into its evictor, key map or hook relay, and the public driver
methods do what the drivers relied on the internals for."""

import re
from pathlib import Path

import pytest

import spfcore
from spfcore import Hint, Score, hookimpl
from spfcore.registry import new_plugin_manager
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.views import RequestView

ROOT = Path(spfcore.__file__).parent
#: Every module that drives a PolicyRuntime (calls its events).
DRIVERS = ["sim/simulator.py", "sim/tiered.py", "sim/objects.py", "sim/replay.py", "testing.py",
           "conformance.py", "engine/vllm_adapter.py"]
#: A runtime's internals: private members, the evictor, the key map, the metadata view.
REACH_IN = re.compile(r"\b(?:rt|runtime|self\.runtime|q\.runtime|c\.rt)\.(?:_\w+|evictor|by_key|meta|table)\b")


@pytest.mark.parametrize("module", DRIVERS)
def test_no_driver_reaches_into_the_runtime(module):
    text = (ROOT / module).read_text()
    hits = [f"{module}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if REACH_IN.search(line.split("#")[0])]
    assert hits == []


def test_the_reach_in_pattern_finds_what_it_must():
    for line in ("ev = rt.evictor", "rt._call('x', None)", "self.runtime.evictor.remove(i)", "rt.by_key.get(k)",
                 "{i: m.key for i, m in rt.meta.items()}"):
        assert REACH_IN.search(line), line
    assert not REACH_IN.search("rt.touch(blocks); rt.num_free; rt.block_of(k)")


def runtime_for(policy, num_blocks=8, block_size=4):
    pm = new_plugin_manager()
    pm.register(policy, name="t")
    return PolicyRuntime(pm, num_blocks, block_size, policy_name="t")


class Hinter:
    """Scores every block 1.0; hints ("a0", "a1") at arrival 1, lapsing after arrival 3."""

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [Score(1.0)] * len(blocks)

    @hookimpl
    def spfcore_prefetch_hints(self, request, now):
        return [Hint(("a0", "a1"), 3)] if request.arrival_index == 1 else None

    @hookimpl
    def spfcore_tier_admit(self, request, keys, now):
        return [k != "no" for k in keys]


def view(i, keys):
    return RequestView(f"r{i}", None, i, float(i), 4 * len(keys) + 1, tuple(keys))


def test_driver_steps_and_queries():
    rt = runtime_for(Hinter())
    rt.release([], list(range(8)), 0.0)
    assert (rt.num_free, sorted(rt.free_ids()), rt.pin_cap, rt.num_pinned) == (8, list(range(8)), 4, 0)
    v = view(0, ["a0", "a1"])
    assert list(rt.arrived(v, 0.0)) == []
    rt.hit(v, [], 0.0)
    ids = rt.evict(3, 0.0)
    rt.stored(v, ids[:2], ["a0", "a1"], 0, None, 4, 0.0)
    assert [rt.block_of("a0"), rt.block_of("a1"), rt.block_of("zz")] == [ids[0], ids[1], None]
    assert [rt.key_of(i) for i in ids] == ["a0", "a1", None] and sorted(rt.cached_keys()) == ["a0", "a1"]
    assert rt.num_free == 5 and not rt.is_free(ids[0])
    rt.finished(v, 0.0)
    rt.release([ids[1], ids[0]], [ids[2]], 0.0)
    assert rt.num_free == 8 and rt.is_free(ids[0])
    # arrival 1 hints a0, a1: the runtime pins them and hands the hints back (for a tier's promotion)
    assert rt.arrived(view(1, ["b0"]), 1.0) == [(["a0", "a1"], 3)]
    assert rt.num_pinned == 2
    assert rt.pin([ids[2]], 5) == 0  # hashless: not pinned
    rt.touch([ids[0]])
    assert not rt.is_free(ids[0]) and rt.num_pinned == 1 and rt.num_free == 7
    with pytest.raises(KeyError):
        rt.touch([ids[0]])  # no longer free
    assert rt.implements("spfcore_tier_admit") and not rt.implements("spfcore_tier_score")
    assert rt.call_hook("spfcore_tier_admit", request=v, keys=["x", "no"], now=2.0) == [True, False]
    with pytest.raises(KeyError):
        rt.implements("tier_admit")


def test_call_hook_names_the_policy_and_hook_on_a_fault():
    class Bad:
        @hookimpl
        def spfcore_tier_score(self, request, keys, now):
            raise ZeroDivisionError("boom")

    rt = runtime_for(Bad())
    with pytest.raises(PolicyError) as err:
        rt.call_hook("spfcore_tier_score", request=view(0, ["a"]), keys=["a"], now=0.0)
    assert (err.value.policy, err.value.hook) == ("t", "spfcore_tier_score")


def test_checkpoint_and_restore_put_the_state_back():
    rt = runtime_for(Hinter())
    rt.release([], list(range(8)), 0.0)
    v = view(0, ["a0"])
    rt.arrived(v, 0.0)
    ids = rt.evict(2, 0.0)
    rt.stored(v, ids[:1], ["a0"], 0, None, 4, 0.0)
    before = rt.snapshot()
    saved = rt.checkpoint()
    evictor = rt.evictor
    rt.release([ids[0]], [ids[1]], 0.0)
    rt.evict(8, 1.0)
    assert rt.snapshot() != before
    rt.restore(saved)
    assert rt.snapshot() == before and rt.evictor is evictor


def test_arrived_of_a_policy_without_arrival_hooks_returns_no_hints():
    rt = PolicyRuntime.for_policy("lru", 4, 4, env={})
    rt.release([], list(range(4)), 0.0)
    assert list(rt.arrived(view(0, ["a"]), 0.0)) == []
    assert rt.pin([0], 3) == 0  # vLLM's order: no pins
