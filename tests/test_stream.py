"""Streaming replay (``simulate_stream``, ``spfcore simulate --trace``) against
the in-memory replay, its CLI flags, and the synthetic trace writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from spfcore import registry
from spfcore.cli import main
from spfcore.sim import prepare, scan, simulate, simulate_stream
from spfcore.workloads.generators import make
from spfcore.workloads.synth import TraceShape, iter_synthetic, write_synthetic
from spfcore.workloads.traces import TraceError, TraceStream, read_mooncake, read_trace

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
ARMS = [p.name for p in registry.discover() if p.status == "ok"]
TIMING = ("hook_seconds", "policy_seconds", "evict_seconds", "wall_seconds")


def _same(a: dict, b: dict) -> None:
    assert {k: v for k, v in a.items() if k not in TIMING} == {k: v for k, v in b.items() if k not in TIMING}


@pytest.mark.parametrize("arm", ARMS)
def test_stream_equals_in_memory_on_generated_workloads(arm):
    # multiturn: decode keys from the workload's output tokens; revisit: unique decode keys
    for wl in (make("multiturn", seed=3, personas=2, sessions=4, turns=3, prefix_tokens=64, query_tokens=16,
                    output_tokens=20),
               make("revisit", seed=5, sessions=3, turns=3, prefix_tokens=64, gap_requests=2)):
        nb = max(prepare(wl, 16).blocks_needed) + 4  # tight: evictions happen
        mem = simulate(wl, arm, num_blocks=nb, block_size=16, seed=7)
        streamed = simulate_stream(wl.requests, arm, num_blocks=nb, block_size=16, seed=7, per_request=True)
        assert mem["evictions"] > 0 and len(mem["requests"]) == len(wl.requests)
        _same(mem, streamed)
        agg = simulate_stream(wl.requests, arm, num_blocks=nb, block_size=16, seed=7)
        assert "requests" not in agg
        _same({k: v for k, v in mem.items() if k != "requests"}, agg)


@pytest.mark.skipif(not TRACE.exists(), reason="Mooncake trace not available")
@pytest.mark.parametrize("arm", ARMS)
def test_stream_equals_in_memory_on_mooncake_prefix(arm):
    src = TraceStream(TRACE, limit=500)
    sc = scan(src, 512)
    nb = max(sc.worst_blocks + 1, sc.infinite_blocks // 6)
    mem = simulate(read_mooncake(TRACE, limit=500), arm, num_blocks=nb, block_size=512)
    streamed = simulate_stream(src, arm, num_blocks=nb, block_size=512, per_request=True)
    assert mem["num_requests"] == sc.num_requests == 500 and mem["evictions"] > 0
    _same(mem, streamed)


def test_trace_stream_reads_what_read_trace_reads(tmp_path):
    p = write_synthetic(tmp_path / "t.jsonl", 300, seed=4)
    for kw in ({}, {"limit": 17}, {"tokens_per_block": 8, "seed": 2}):
        s = TraceStream(p, **kw)
        wl = read_trace(p, **kw)
        assert tuple(s) == wl.requests and tuple(s) == wl.requests  # re-iterable
        assert (s.name, s.params) == (wl.name, wl.params)


def test_one_shot_iterator_refused_for_a_future_policy():
    if "belady_oracle" not in ARMS:
        pytest.skip("belady_oracle not installed")
    wl = make("personas", seed=1, personas=2, sessions=2, turns=2, prefix_tokens=32, query_tokens=16)
    with pytest.raises(ValueError, match="re-iterable"):
        simulate_stream(iter(wl.requests), "belady_oracle", num_blocks=50, block_size=16)


def test_make_trace_is_deterministic_and_reads_back(tmp_path):
    out = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        res = CliRunner().invoke(main, ["make-trace", str(tmp_path / f"{name}.jsonl"), "--requests", "2000",
                                        "--seed", str(seed)])
        assert res.exit_code == 0, res.output
        out.append((tmp_path / f"{name}.jsonl").read_bytes())
    assert out[0] == out[1] and out[0] != out[2]
    wl = read_mooncake(tmp_path / "a.jsonl")
    assert len(wl.requests) == 2000
    ids = [h for r in wl.requests for h in r.hash_ids]
    # shared prefixes: ids repeat (preamble, system prompts, conversation history), fresh ids are new
    assert len(set(ids)) < len(ids) and max(ids) == len(set(ids)) - 1
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(wl.requests, wl.requests[1:]))
    # a later turn extends an earlier prompt's full blocks
    full = {tuple(r.hash_ids[: r.num_prompt_tokens // 512]) for r in wl.requests}
    assert any(tuple(r.hash_ids[:k]) in full for r in wl.requests for k in range(6, len(r.hash_ids)))


def test_synthetic_rows_hold_the_mooncake_invariants():
    rows = list(iter_synthetic(3000, seed=2, shape=TraceShape(sessions=8, max_context_blocks=20)))
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 512) <= 20 for r in rows)
    assert all(r["output_length"] >= 1 for r in rows)
    with pytest.raises(ValueError, match="sessions must be > 0"):
        TraceShape(sessions=0)


def test_synthetic_memory_follows_opened_conversations_not_sessions():
    """--sessions larger than the requests (review 10: 10**11 was a bare MemoryError) writes the trace:
    free slots take no memory. Every request then opens its own conversation (none is continued), so
    each prompt is a system prompt plus a first query, as with sessions == requests."""
    rows = list(iter_synthetic(50, seed=3, shape=TraceShape(sessions=10**11)))
    assert len(rows) == 50
    stored = set()
    for r in rows:
        fresh = [h for h in r["hash_ids"] if h not in stored]
        stored.update(r["hash_ids"])
        # a continued conversation would re-use a previous prompt's non-system blocks: here only
        # system-prompt ids (shared, small) repeat, every conversation's tail is new
        assert fresh == r["hash_ids"][len(r["hash_ids"]) - len(fresh):]



ARGS = ["simulate", "--num-blocks", "40", "--arms", "lru,frequency", "--json"]


def _trace(tmp_path) -> Path:
    return write_synthetic(tmp_path / "syn.jsonl", 200, seed=9, shape=TraceShape(sessions=6, max_context_blocks=12))


def test_cli_per_request_no_ceilings_and_wall_seconds(tmp_path):
    trace = _trace(tmp_path)
    plain = json.loads(CliRunner().invoke(main, [*ARGS, "--trace", str(trace)]).stdout)
    assert all("requests" not in c for c in plain["cells"])
    assert plain["ceilings"]["42"]["infinite"]["token_hit_rate"] > 0
    assert all(c["wall_seconds"] > 0 for c in plain["cells"])
    per = json.loads(CliRunner().invoke(main, [*ARGS, "--trace", str(trace), "--per-request"]).stdout)
    assert [len(c["requests"]) for c in per["cells"]] == [200, 200]
    assert per["cells"][0]["requests"][0]["request_id"] == "mc-1"
    out = tmp_path / "o.json"
    res = CliRunner().invoke(main, [*ARGS[:-1], "--trace", str(trace), "--no-ceilings", "-o", str(out)])
    assert res.exit_code == 0, res.output
    noc = json.loads(out.read_text())
    assert "ceilings" not in noc and not any(k.startswith("ceiling:") for k in noc["summary"])
    strip = lambda d: [{k: v for k, v in c.items() if k not in TIMING} for c in d["cells"]]  # noqa: E731
    assert strip(noc) == strip(plain)
    # the streamed trace gives the cells the in-memory (concurrent-capable) path gives
    mem = [simulate(read_mooncake(trace), a, num_blocks=40, block_size=512, seed=42) for a in ("lru", "frequency")]
    assert strip(per) == [{k: v for k, v in c.items() if k not in TIMING} for c in mem]


def test_cli_refuses_a_request_that_does_not_fit_and_writes_nothing(tmp_path):
    trace = _trace(tmp_path)
    worst = scan(TraceStream(trace), 512)
    out = tmp_path / "o.json"
    res = CliRunner().invoke(main, ["simulate", "--trace", str(trace), "--num-blocks", str(worst.worst_blocks),
                                    "--arms", "lru", "-o", str(out)])
    assert res.exit_code == 2 and not out.exists() and "Invalid value for --num-blocks" in res.output  # a usage error
    assert (f"request {worst.worst_request} needs {worst.worst_blocks} blocks of 512 tokens but the cache has "
            f"{worst.worst_blocks - 1} usable" in res.output)
    # the same message as the in-memory path, and from simulate_stream itself when the request is reached
    with pytest.raises(ValueError) as mem:
        simulate(read_mooncake(trace), "lru", num_blocks=worst.worst_blocks, block_size=512)
    with pytest.raises(ValueError) as streamed:
        simulate_stream(TraceStream(trace), "lru", num_blocks=worst.worst_blocks, block_size=512)
    assert str(streamed.value) == str(mem.value) and str(mem.value) in res.output


def test_cli_bad_line_names_file_line_and_field_and_writes_nothing(tmp_path):
    trace = _trace(tmp_path)
    lines = trace.read_text().splitlines()
    lines[150] = lines[150].replace('"output_length": ', '"output_length": -')
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.json"
    res = CliRunner().invoke(main, ["simulate", "--trace", str(trace), "--num-blocks", "40", "--arms", "lru",
                                    "-o", str(out)])
    assert res.exit_code == 2 and not out.exists()
    assert f"{trace}:151: field 'output_length': expected an int >= 0" in " ".join(res.output.split())
    with pytest.raises(TraceError, match=r":151: field 'output_length'"):
        simulate_stream(TraceStream(trace), "lru", num_blocks=40, block_size=512)
