"""Trace readers/writers: Mooncake FAST'25 JSONL and spfcore JSONL."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from spfcore.workloads import block_keys
from spfcore.workloads.generators import make
from spfcore.workloads.traces import (TraceError, detect_format, read_jsonl, read_mooncake, read_trace,
                                      write_jsonl, write_mooncake)

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"  # ../shared beside the checkout
needs_trace = pytest.mark.skipif(not TRACE.exists(), reason="shared Mooncake trace not present")


@needs_trace
def test_read_whole_mooncake_trace():
    wl = read_mooncake(TRACE)
    reqs = wl.requests
    assert len(reqs) == 12031  # SOURCE.md
    assert sum(len(r.hash_ids) for r in reqs) == 288500
    assert len({h for r in reqs for h in r.hash_ids}) == 182790  # unique block ids (SOURCE.md)
    r0 = reqs[0]
    assert (r0.num_prompt_tokens, r0.output_tokens, r0.hash_ids[:3], r0.hash_block_tokens) == (6758, 500, (0, 1, 2), 512)
    assert r0.prompt_token_ids == () and r0.arrival_s == 0.0
    assert reqs[-1].arrival_s == pytest.approx(3536.999)
    assert len(block_keys(r0, 512)) == 14  # one key per hash id
    assert wl.params["format"] == "mooncake" and wl.params["limit"] is None


@needs_trace
def test_limit_and_materialized_tokens():
    wl = read_mooncake(TRACE, limit=3, tokens_per_block=16)
    r0, r1 = wl.requests[0], wl.requests[1]
    assert len(wl.requests) == 3
    assert r0.num_prompt_tokens == math.ceil(6758 * 16 / 512) == 212
    assert r0.output_tokens == math.ceil(500 * 16 / 512) == 16
    assert r1.num_prompt_tokens == math.ceil(7322 * 16 / 512)
    # both start with hash id 0: equal first block, then different ids -> different tokens
    assert r0.prompt_token_ids[:16] == r1.prompt_token_ids[:16]
    assert r0.prompt_token_ids[16:32] != r1.prompt_token_ids[16:32]
    k0, k1 = block_keys(r0, 16), block_keys(r1, 16)
    assert k0[0] == k1[0] and k0[1] != k1[1]
    assert min(r0.prompt_token_ids) >= 3
    again = read_mooncake(TRACE, limit=3, tokens_per_block=16)
    assert again.requests == wl.requests
    assert read_mooncake(TRACE, limit=3, tokens_per_block=16, seed=1).requests[0].prompt_token_ids != r0.prompt_token_ids


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}'


@pytest.mark.parametrize("line, msg", [
    ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1, "x"]}',
     "bad.jsonl:2: field 'hash_ids': expected a list of ints >= 0"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 5}', "bad.jsonl:2: field 'hash_ids': missing"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1]}',
     r"bad.jsonl:2: field 'hash_ids': 1 ids for input_length 600"),
    ('{"timestamp": 5, "input_length": -1, "output_length": 5, "hash_ids": []}',
     "bad.jsonl:2: field 'input_length': expected an int >= 1"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]',
     r"bad.jsonl:2: not valid JSON \(Expecting ',' delimiter at column 77\)"),  # just past the truncated end (was: column 1)
    ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}}',
     r"bad.jsonl:2: not valid JSON \(Extra data at column 78\)"),
])
def test_malformed_mooncake_line_names_file_line_field(tmp_path, line, msg):
    p = _write(tmp_path, "bad.jsonl", [GOOD, line])
    with pytest.raises(TraceError, match=msg):
        read_mooncake(p)


def test_timestamps_must_not_go_back(tmp_path):
    p = _write(tmp_path, "t.jsonl", [GOOD.replace('"timestamp": 0', '"timestamp": 9'), GOOD])
    with pytest.raises(TraceError, match="t.jsonl:2: field 'timestamp'"):
        read_mooncake(p)


def test_mooncake_round_trip_and_detection(tmp_path):
    src = _write(tmp_path, "src.jsonl", [GOOD, '{"timestamp": 1500, "input_length": 512, "output_length": 1, '
                                                '"hash_ids": [1]}'])
    wl = read_trace(src)
    assert detect_format(src) == "mooncake" and wl.requests[1].arrival_s == 1.5
    out = write_mooncake(wl, tmp_path / "out.jsonl")
    assert [json.loads(x) for x in out.read_text().splitlines()] == [json.loads(x) for x in src.read_text().splitlines()]


def test_own_jsonl_round_trip(tmp_path):
    wl = make("multiturn", seed=3, sessions=2, turns=2, prefix_tokens=32, query_tokens=8, output_tokens=4,
              arrival="rate", rate=2.0)
    p = write_jsonl(wl, tmp_path / "wl.jsonl")
    assert detect_format(p) == "spfcore"
    back = read_trace(p)
    assert back.requests == wl.requests
    assert read_jsonl(p, limit=2).requests == wl.requests[:2]
    hashed = read_mooncake(_write(tmp_path, "m.jsonl", [GOOD]))
    assert read_jsonl(write_jsonl(hashed, tmp_path / "h.jsonl")).requests == hashed.requests


def test_own_jsonl_errors(tmp_path):
    good = json.dumps({"request_id": "a", "arrival_s": 0, "prompt_token_ids": [5, 6], "output_tokens": 1})
    cases = [
        (good.replace('"output_tokens": 1', '"output_tokens": 0'), "x.jsonl:2: field 'output_tokens'"),
        (good.replace('"a"', '"b"').replace("[5, 6]", "[5, -6]"), "x.jsonl:2: field 'prompt_token_ids'"),
        (good, "x.jsonl:2: field 'request_id': 'a' repeats"),
        (good.replace('"a"', '"c"').replace('}', ', "colour": 1}'), "x.jsonl:2: field 'colour': unknown"),
    ]
    for line, msg in cases:
        with pytest.raises(TraceError, match=msg):
            read_jsonl(_write(tmp_path, "x.jsonl", [good, line]))


def test_writes_are_atomic(tmp_path):
    target = tmp_path / "keep.jsonl"
    target.write_text("old\n")
    wl = make("personas", seed=0, personas=1, sessions=1, turns=1, prefix_tokens=16)
    with pytest.raises(ValueError, match="no hash_ids"):
        write_mooncake(wl, target)  # token workload: nothing to write, old file untouched
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.jsonl"]  # no temp file left


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    import attrs

    target = tmp_path / "keep.jsonl"
    target.write_text("old\n")
    wl = make("personas", seed=0, personas=1, sessions=1, turns=2, prefix_tokens=16)
    bad = attrs.evolve(wl, requests=[wl.requests[0], attrs.evolve(wl.requests[1], session_id=object())])
    with pytest.raises(TypeError):
        write_jsonl(bad, target)  # fails on the 2nd line, after the temp file was opened
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.jsonl"]


def test_non_utf8_trace_names_file_and_line(tmp_path):
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(b'{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n\xff\xfe{}\n')
    with pytest.raises(TraceError, match=rf"{bad}:2: not UTF-8 text \(byte 1"):
        read_mooncake(bad)
