"""The compiled sequential replays (spfcore.sim._replay_nb: hook-less arms such as lru, and
belady_oracle) against the reference loop (_run_sequential through PolicyRuntime and the
plugin's hooks): every field of the cell, every per-request record and the victim sequence,
on the Mooncake trace's head, generated workloads and random traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spfcore import runtime
from spfcore.runtime import PolicyRuntime
from spfcore.sim import iter_plans, prepare, simulate, simulate_stream
from spfcore.sim import simulator
from spfcore.workloads.generators import make
from spfcore.workloads.model import Request, Workload
from spfcore.workloads.traces import read_mooncake

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
TIMING = ("hook_seconds", "evict_seconds", "policy_seconds", "wall_seconds")


def strip(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMING}


ARMS = ("lru", "belady_oracle")


def reference(monkeypatch, prep, nb: int, bs: int, arm: str = "lru") -> tuple[dict, list]:
    """The Python loop's cell and victims (every id PolicyRuntime.evict hands out)."""
    victims: list = []
    evict = runtime.PolicyRuntime.evict

    def recording(self, n, now):
        ids = evict(self, n, now)
        victims.extend(ids)
        return ids
    monkeypatch.setenv(simulator.REPLAY_ENV, "python")
    with monkeypatch.context() as m:
        m.setattr(runtime.PolicyRuntime, "evict", recording)
        rec = simulate(prep, arm, num_blocks=nb, block_size=bs)
    return rec, victims


def compiled(monkeypatch, prep, nb: int, bs: int, arm: str = "lru", stream=None) -> tuple[dict, list]:
    """The compiled replay's cell and victims, through simulate() (or
    simulate_stream() of the requests ``stream``, per-request records kept)."""
    victims: list = []
    calls = []
    orig = simulator._replay_compiled

    def recording(*a, **k):
        calls.append(1)
        return orig(*a, victims=victims, **k)
    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    with monkeypatch.context() as m:
        m.setattr(simulator, "_replay_compiled", recording)
        if stream is None:
            rec = simulate(prep, arm, num_blocks=nb, block_size=bs)
        else:
            rec = simulate_stream(stream, arm, num_blocks=nb, block_size=bs, per_request=True)
    assert calls == [1], "simulate did not take the compiled replay"
    return rec, victims


def assert_same(monkeypatch, wl, nb: int, bs: int, arm: str = "lru") -> dict:
    prep = prepare(wl, bs)
    ref, ref_victims = reference(monkeypatch, prep, nb, bs, arm)
    got, got_victims = compiled(monkeypatch, prep, nb, bs, arm)
    assert strip(got) == strip(ref)
    assert got_victims == ref_victims
    again, _ = compiled(monkeypatch, prep, nb, bs, arm)  # the interned arrays kept on the Prepared
    assert strip(again) == strip(ref)
    stream, stream_victims = compiled(monkeypatch, prep, nb, bs, arm, stream=wl.requests)
    assert strip(stream) == strip(ref)
    assert stream_victims == ref_victims
    return ref


@pytest.mark.skipif(not TRACE.exists(), reason="Mooncake trace not present")
@pytest.mark.parametrize("arm", ARMS)
def test_trace_head_identical(monkeypatch, arm):
    wl = read_mooncake(TRACE, limit=1500)
    ref = assert_same(monkeypatch, wl, 700, 512, arm)
    assert ref["evictions"] > 10_000 and 0 < ref["block_hit_rate"] < 1  # a cache under pressure


@pytest.mark.parametrize("name,flags,bs,pressure", [
    ("personas", dict(personas=4, prefix_tokens=512, sessions=8, turns=3, query_tokens=32, output_tokens=8), 16, 1.2),
    ("multiturn", {}, 16, 2.0),  # output tokens defined: decode blocks hit later turns
    ("mix", {}, 16, 2.3),
    ("revisit", dict(sessions=4, prefix_tokens=256, noise_tokens=256, query_tokens=16, output_tokens=20), 8, 3.0),
])
@pytest.mark.parametrize("arm", ARMS)
def test_generated_identical(monkeypatch, name, flags, bs, pressure, arm):
    wl = make(name, seed=3, **flags)
    prep = prepare(wl, bs)
    distinct = len({k for v in prep.views for k in v.block_keys})
    nb = max(max(prep.blocks_needed) + 1, int(distinct / pressure))
    ref = assert_same(monkeypatch, wl, nb, bs, arm)
    assert ref["evictions"] > 0 and ref["hit_blocks"] > 0


@st.composite
def random_workload(draw):
    """Token requests over a 2-token vocabulary (long shared prefixes, prompts
    that are whole blocks: the last-token rule caches duplicate hashes),
    outputs defined or not (decode blocks matching later prompts or not)."""
    bs = draw(st.sampled_from([1, 2, 4]))
    reqs = []
    for i in range(draw(st.integers(1, 16))):
        prompt = draw(st.lists(st.integers(0, 1), min_size=1, max_size=14))
        out = draw(st.integers(1, 6))
        outs = draw(st.one_of(st.just(()), st.lists(st.integers(0, 1), min_size=out, max_size=out).map(tuple)))
        reqs.append(Request(f"r{i}", 0.0, tuple(prompt), out, session_id=f"s{i % 3}", output_token_ids=outs))
    return Workload("random", {}, reqs), bs, draw(st.integers(0, 5)), draw(st.sampled_from(ARMS))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(random_workload())
def test_random_identical(monkeypatch, case):
    wl, bs, extra, arm = case
    nb = max(prepare(wl, bs).blocks_needed) + 1 + extra
    assert_same(monkeypatch, wl, nb, bs, arm)


def test_chunks_and_forgotten_keys_identical(monkeypatch):
    """Streamed in chunks of 5 requests with the interned keys compacted after
    each chunk: the same records and victims as the reference loop."""
    wl = make("multiturn", seed=5)
    bs = 16
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 40
    ref, ref_victims = reference(monkeypatch, prep, nb, bs)
    rt = PolicyRuntime.for_policy("lru", nb, bs)
    rows, victims = [], []
    totals = simulator._replay_compiled(iter_plans(wl.requests, bs, nb), rt, nb, "lru", rows, victims, chunk=5,
                                        limit=1)
    assert victims == ref_victims
    assert [h * bs for *_, h in rows] == [r["cached_tokens"] for r in ref["requests"]]
    assert totals == (ref["num_requests"], ref["prompt_tokens"], ref["block_refs"], ref["hit_blocks"])
    assert (rt.evictions, rt.evict_calls) == (ref["evictions"], ref["evict_calls"])


def test_which_arms_compile_and_the_switch(monkeypatch, tmp_path):
    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    kind = simulator._compiled_kind
    assert kind(PolicyRuntime.for_policy("lru", 16, 4)) == "lru"
    assert kind(PolicyRuntime.for_policy("belady_oracle", 16, 4)) == "belady"
    assert kind(PolicyRuntime.for_policy("frequency", 16, 4)) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "python")
    assert kind(PolicyRuntime.for_policy("lru", 16, 4)) is None
    assert kind(PolicyRuntime.for_policy("belady_oracle", 16, 4)) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    monkeypatch.setenv("SPFCORE_TRACE_HOOKS", str(tmp_path / "hooks.log"))  # hook calls watched: every one made
    assert kind(PolicyRuntime.for_policy("belady_oracle", 16, 4)) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "numba")
    with pytest.raises(ValueError, match="SPFCORE_SIM_REPLAY='numba': expected 'auto' or 'python'"):
        simulate(make("mix", seed=1), "lru", num_blocks=4000, block_size=16)


def test_request_too_big_for_the_stream(monkeypatch):
    """A streamed request that does not fit raises when reached, as the reference loop does."""
    reqs = [Request("a", 0.0, (1, 2, 3, 4), 1), Request("big", 0.0, tuple(range(40)), 4)]
    for mode in ("python", "auto"):
        monkeypatch.setenv(simulator.REPLAY_ENV, mode)
        with pytest.raises(ValueError, match="request big needs 11 blocks of 4 tokens but the cache has 5 usable"):
            simulate_stream(reqs, "lru", num_blocks=6, block_size=4)


def test_compiled_replay_leaves_vllms_module_scan_working():
    """The compiled replay loads numba (llvmlite) in a process that may start a
    vLLM engine next (the gate runs sim cells first): vLLM's CPU worker reads
    ``vars(value).get("kernel")`` of every attribute of every loaded module,
    which llvmlite's ``ffi.lib`` broke (see test_evictor_diff). Checked in a
    fresh interpreter, where the compiled lru replay is the first to load numba."""
    import subprocess
    import sys

    code = """
import sys
from spfcore.sim import simulate
from spfcore.workloads.generators import make
assert "numba" not in sys.modules
simulate(make("mix", seed=1), "lru", num_blocks=4000, block_size=16)
assert "llvmlite.binding.ffi" in sys.modules
for module in list(sys.modules.values()):
    namespace = getattr(module, "__dict__", None)
    for value in list((namespace or {}).values()):
        if hasattr(value, "__dict__"):
            vars(value).get("kernel")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
