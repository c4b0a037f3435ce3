"""Every hook of the contract is reached through the runtime (as datasette
tests that every hook is documented and tested): a policy implementing every
hook, driven by the real runtime through :class:`spfcore.testing.MiniCache`,
has each hook of :data:`spfcore.hookspecs.HOOK_NAMES` called, recorded with
pluggy's hook-call monitoring; and ``SPFCORE_TRACE_HOOKS`` writes those
calls for a real simulator run."""

from __future__ import annotations

import collections

import attrs
import pytest

from spfcore import hookimpl, registry
from spfcore.hookspecs import HOOK_NAMES
from spfcore.runtime import PolicyRuntime
from spfcore.testing import MiniCache
from spfcore.views import Hint


@attrs.frozen
class _Params:
    pass


class EveryHook:
    """Implements every hook of the scoring mode (all but spfcore_evict_blocks), the tier hooks included."""

    name = "every_hook"
    capabilities = frozenset({"needs-future", "prefetch", "scoring", "admission", "sessions"})
    Params = _Params

    def __init__(self, params):
        self.params = params

    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        pass

    @hookimpl
    def spfcore_future_requests(self, requests):
        self.future = list(requests)

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        pass

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        pass

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        pass

    @hookimpl
    def spfcore_request_finished(self, request, now):
        pass

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        pass

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return [float(i) for i in range(len(blocks))]

    @hookimpl
    def spfcore_admit_blocks(self, blocks, now):
        return [True] * len(blocks)

    @hookimpl
    def spfcore_choose_victims(self, candidates, n, now):
        return list(range(n))

    @hookimpl
    def spfcore_rescore_keys(self, request, now):
        return list(request.block_keys[:1])

    @hookimpl
    def spfcore_prefetch_hints(self, request, now):
        return [Hint(keys=tuple(request.block_keys[:1]), expires_at_arrival=request.arrival_index + 2)]

    @hookimpl
    def spfcore_tier_admit(self, request, keys, now):
        return [True] * len(keys)

    @hookimpl
    def spfcore_tier_score(self, request, keys, now):
        return [float(i) for i in range(len(keys))]


class OrderedEveryHook(EveryHook):
    """The policy-ordered mode: spfcore_evict_blocks instead of score/admit/choose."""

    name = "ordered_every_hook"
    spfcore_score_blocks = spfcore_admit_blocks = spfcore_choose_victims = None

    @hookimpl
    def spfcore_evict_blocks(self, n, free, now):
        return list(free)[:n]


def _drive(policy_cls) -> collections.Counter:
    pm = registry.new_plugin_manager()
    pm.register(policy_cls(_Params()), name=policy_cls.name)
    calls = collections.Counter()
    pm.add_hookcall_monitoring(lambda name, impls, kw: calls.update([name]), lambda *a: None)
    rt = PolicyRuntime(pm, 8, 4, policy_name=policy_cls.name, needs_future=True)
    cache = MiniCache(rt, 0)
    prompts = [("s1", ("a", "b", "c")), ("s2", ("d", "e", "f")), ("s1", ("a", "b", "c", "g")),
               ("s3", ("h", "i", "j")), ("s2", ("d", "e", "f", "k"))]
    cache.set_future(prompts)
    for session, keys in prompts:
        cache.serve(keys, session)
    assert cache.evicted, "the scenario must evict, or the eviction hooks are never asked"
    # the slower tier's hooks, through the helpers both tier drivers call (sim.tiered, the engine's tier)
    from spfcore.sim.tiered import tier_admit, tier_ranks

    req = cache.view(("a", "b", "c"), "s1", index=cache.next_index)
    assert tier_admit(rt, req, list(req.block_keys), 9.0) == [True, True, True]
    assert tier_ranks(rt, req, list(req.block_keys), 9.0) == (["c", "b", "a"], [2.0, 1.0, 0.0])
    return calls


def test_every_hook_is_called_through_the_runtime():
    called = set(_drive(EveryHook)) | set(_drive(OrderedEveryHook))
    assert set(HOOK_NAMES) - called == set()


def test_the_ordered_mode_asks_evict_blocks_and_never_the_scoring_hooks():
    calls = _drive(OrderedEveryHook)
    assert calls["spfcore_evict_blocks"] > 0
    assert not {"spfcore_score_blocks", "spfcore_admit_blocks", "spfcore_choose_victims"} & set(calls)


@pytest.mark.parametrize("where", ["stderr", "file"])
def test_trace_hooks_writes_every_call_of_a_simulator_run(where, tmp_path, monkeypatch, capfd):
    from spfcore.sim import simulate
    from spfcore.workloads.generators import make

    path = tmp_path / "hooks.log"
    monkeypatch.setenv(registry.TRACE_ENV, "1" if where == "stderr" else str(path))
    wl = make("personas", seed=1, personas=2, prefix_tokens=64, sessions=4, turns=2, query_tokens=8,
              output_tokens=2)
    cell = simulate(wl, "session_ttl", num_blocks=8, block_size=16)
    text = capfd.readouterr().err if where == "stderr" else path.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("spfcore-hook session_ttl ")]
    hooks = collections.Counter(ln.split()[2] for ln in lines)
    # one line per call of each hook session_ttl implements, none of those it does not
    assert set(hooks) == set(registry.get("session_ttl").hooks)
    assert hooks["spfcore_cache_configured"] == 1
    assert hooks["spfcore_request_arrived"] == cell["num_requests"] == len(wl.requests) == 8
    assert hooks["spfcore_blocks_evicted"] > 0 and cell["evictions"] > 0
    assert all(" -> " in ln and ln.endswith(" us)") for ln in lines)
    assert any("spfcore_score_blocks blocks=<" in ln and "blocks> now=" in ln for ln in lines)
    monkeypatch.delenv(registry.TRACE_ENV)
    capfd.readouterr()
    simulate(wl, "session_ttl", num_blocks=8, block_size=16)
    assert "spfcore-hook" not in capfd.readouterr().err
