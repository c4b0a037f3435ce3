"""The compiled replay of the classic ``twoq`` arm (spfcore.sim._replay_twoq_nb) against the
reference loop (_run_sequential through PolicyRuntime, the policy-ordered evictor and
spfcore_classic.twoq.TwoQ's hooks): every field of the cell, every per-request record and the
victim sequence, with the default parameters and non-default ones (A1in's share, A1out's
bound, no A1out), on generated workloads, random ones with caches of a few blocks (walks past
blocks in use and parents, the copies exception, lookups that find a block twice), chunked
replay with key compaction (A1out's key ids renumbered in order), a prepared stream and the
Mooncake trace's head. Helpers: tests/test_sim_compiled_sieve.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spfcore.runtime import PolicyRuntime
from spfcore.sim import simulator
from tests.test_sim_compiled import TRACE, compiled, flat_workload, hash_id_workload, random_workload
from tests.test_sim_compiled_sieve import (GENERATED, SETTINGS, check_chunked, check_copies, check_flat,
                                           check_generated, check_prepared_stream, check_random, check_too_big,
                                           check_trace_head, generated_case, victims_differ_from_lru)

ARM = "twoq"
KIND = "twoq"
#: Non-default parameters: a large and a small A1in, no A1out, a long and a short one.
OPTIONS = ({"a_in_size_ratio": "0.5"}, {"a_out_size_ratio": "0"},
           {"a_in_size_ratio": "0.05", "a_out_size_ratio": "2"}, {"a_in_size_ratio": "0.9", "a_out_size_ratio": "0.05"})
CASES = [None, *OPTIONS]
IDS = ["default"] + ["-".join(f"{k.split('_')[1]}{v}" for k, v in o.items()) for o in OPTIONS]


def options():
    return st.one_of(st.none(), st.fixed_dictionaries({
        "a_in_size_ratio": st.sampled_from(["0.01", "0.25", "0.5", "0.99"]),
        "a_out_size_ratio": st.sampled_from(["0", "0.1", "0.5", "4", "1e300"])}))


@pytest.mark.parametrize("options", CASES, ids=IDS)
@pytest.mark.parametrize("name,flags,bs,pressure", GENERATED, ids=[g[0] for g in GENERATED])
def test_generated_identical(monkeypatch, name, flags, bs, pressure, options):
    check_generated(monkeypatch, ARM, options, name, flags, bs, pressure)


def test_victims_are_not_lrus_nor_sieves(monkeypatch):
    assert victims_differ_from_lru(monkeypatch, ARM)
    from tests.test_sim_compiled import compiled
    from tests.test_sim_compiled_sieve import generated_case
    wl, prep, nb = generated_case(*GENERATED[2])
    assert compiled(monkeypatch, prep, nb, 16, ARM)[1] != compiled(monkeypatch, prep, nb, 16, "sieve")[1]
    # A1out's bound decides: without it (no ghost hits, everything in A1in) the victims differ
    assert compiled(monkeypatch, prep, nb, 16, ARM)[1] != compiled(monkeypatch, prep, nb, 16, ARM,
                                                                    options={"a_out_size_ratio": "0"})[1]


@settings(max_examples=200, **SETTINGS)
@given(random_workload(), options())
def test_random_identical(monkeypatch, case, opts):
    check_random(monkeypatch, case, ARM, opts)


@settings(max_examples=100, **SETTINGS)
@given(hash_id_workload(), options())
def test_random_hash_ids_identical(monkeypatch, case, opts):
    check_random(monkeypatch, case, ARM, opts)


@settings(max_examples=200, **SETTINGS)
@given(flat_workload(), options())
def test_keys_repeated_within_a_prompt(monkeypatch, case, opts):
    """Keys that repeat within a prompt (duplicate blocks, a key in from_ghost twice, the copies
    exception), a lookup that finds a block twice, or no evictable block at all: as the hooks."""
    check_flat(monkeypatch, case, ARM, opts)


def test_copies_exception_identical(monkeypatch):
    check_copies(monkeypatch, ARM)


@pytest.mark.parametrize("options", [None, {"a_out_size_ratio": "4"},
                                     {"a_in_size_ratio": "0.5", "a_out_size_ratio": "1"}],
                         ids=["default", "out4", "in0.5-out1"])
def test_chunks_and_forgotten_keys_identical(monkeypatch, options):
    """Chunks of 5 requests, key ids compacted after each: A1out and from_ghost survive the
    renumbering; the key ids kept are bounded by the cache and A1out's bound."""
    check_chunked(monkeypatch, ARM, KIND, options)


def test_prepared_stream_identical(monkeypatch, tmp_path):
    check_prepared_stream(monkeypatch, tmp_path, ARM)


@pytest.mark.skipif(not TRACE.exists(), reason="Mooncake trace not present")
@pytest.mark.parametrize("options", [None, {"a_in_size_ratio": "0.5", "a_out_size_ratio": "1"}],
                         ids=["default", "in0.5-out1"])
def test_trace_head_identical(monkeypatch, options):
    check_trace_head(monkeypatch, ARM, options)


@pytest.mark.parametrize("options", [{"a_out_size_ratio": "1e300"},
                                     {"a_in_size_ratio": "0.5", "a_out_size_ratio": "1e30"}],
                         ids=["out1e300", "in0.5-out1e30"])
def test_an_a1out_bound_beyond_int64_compiles(monkeypatch, options):
    """A1out's bound ``int(capacity * a_out_size_ratio)`` at 2**62 or more is capped at 2**62
    (A1out holds distinct key ids: never that many, so it is never trimmed either way): the
    kernel stands in, with the hooks' decisions (a ghost hit sends blocks to Am)."""
    rt = PolicyRuntime.for_policy(ARM, 100, 4, options)
    assert next(iter(rt.pm.get_plugins())).aout_cap >= 2**62
    assert simulator._kernel(KIND).params_of(rt) == (50 if "a_in_size_ratio" in options else 25, 2**62)
    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    assert simulator._compiled_kind(rt) == KIND
    ref = check_generated(monkeypatch, ARM, options, *GENERATED[1])
    # A1out decides: the victims are not those of no A1out (no ghost hits)
    wl, prep, nb = generated_case(*GENERATED[1])
    assert compiled(monkeypatch, prep, nb, 16, ARM, options=options)[1] != compiled(
        monkeypatch, prep, nb, 16, ARM, options={**options, "a_out_size_ratio": "0"})[1]
    assert ref["evictions"] > 0


def test_request_too_big_for_the_stream(monkeypatch):
    check_too_big(monkeypatch, ARM)


def test_which_policies_compile(monkeypatch):
    from spfcore import registry
    from spfcore_classic.twoq import TwoQ

    monkeypatch.setenv(simulator.REPLAY_ENV, "auto")
    kind = simulator._compiled_kind
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) == KIND
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4, {"a_out_size_ratio": "0"})) == KIND
    assert simulator._kernel(KIND).params_of(PolicyRuntime.for_policy(ARM, 100, 4)) == (25, 50)

    class Subclass(TwoQ):  # another policy built on it: its own decisions, the Python loop
        pass
    pm = registry.new_plugin_manager()
    pm.register(Subclass(), name="sub")
    assert kind(PolicyRuntime(pm, 16, 4, policy_name="sub")) is None
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4, hook_budget_ms=60_000)) is None
    monkeypatch.setenv(simulator.REPLAY_ENV, "python")
    assert kind(PolicyRuntime.for_policy(ARM, 16, 4)) is None
