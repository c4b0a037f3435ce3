"""A UTF-8 byte-order mark opening a trace is accepted; every other malformed
input still names FILE:LINE: field (issue 13, item 7)."""

from __future__ import annotations

import codecs
import json

import pytest
from click.testing import CliRunner

from spfcore.cli import main
from spfcore.workloads.traces import (TraceError, TraceStream, detect_format, iter_jsonl, iter_mooncake,
                                      read_jsonl, read_mooncake, read_trace)

BOM = codecs.BOM_UTF8
MC = ['{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}',
      '{"timestamp": 7, "input_length": 512, "output_length": 1, "hash_ids": [1]}']
OWN = [json.dumps({"request_id": "a", "arrival_s": 0, "prompt_token_ids": [5, 6, 7], "output_tokens": 1}),
       json.dumps({"request_id": "b", "arrival_s": 1, "prompt_token_ids": [5, 6, 8], "output_tokens": 2})]


def _write(path, lines, bom=True):
    path.write_bytes((BOM if bom else b"") + ("\n".join(lines) + "\n").encode())
    return path


def test_bom_mooncake_reads_as_without(tmp_path):
    with_bom, plain = _write(tmp_path / "b.jsonl", MC), _write(tmp_path / "p.jsonl", MC, bom=False)
    assert detect_format(with_bom) == "mooncake"
    assert read_mooncake(with_bom).requests == read_mooncake(plain).requests
    assert list(iter_mooncake(with_bom, tokens_per_block=16)) == list(iter_mooncake(plain, tokens_per_block=16))
    assert [r.hash_ids for r in TraceStream(with_bom)] == [(1, 2), (1,)]


def test_bom_spfcore_jsonl_reads_as_without(tmp_path):
    with_bom, plain = _write(tmp_path / "b.jsonl", OWN), _write(tmp_path / "p.jsonl", OWN, bom=False)
    assert detect_format(with_bom) == "spfcore"
    assert read_jsonl(with_bom).requests == read_jsonl(plain).requests == read_trace(with_bom).requests
    assert [r.request_id for r in iter_jsonl(with_bom)] == ["a", "b"]


@pytest.mark.parametrize("lines, reader, msg", [
    ([MC[0], MC[1].replace('"hash_ids": [1]', '"hash_ids": [1, -3]')], read_mooncake,
     r"m.jsonl:2: field 'hash_ids': expected a list of ints >= 0"),
    ([MC[0], MC[1].replace('"timestamp": 7', '"timestamp": -1')], read_mooncake, r"m.jsonl:2: field 'timestamp'"),
    ([MC[0], MC[1][:-1]], read_mooncake, r"m.jsonl:2: not valid JSON"),
    ([MC[0], "\ufeff" + MC[1]], read_mooncake, r"m.jsonl:2: not valid JSON"),  # a BOM is only skipped at the start
    ([OWN[0], OWN[1].replace('"output_tokens": 2', '"output_tokens": 0')], read_jsonl,
     r"m.jsonl:2: field 'output_tokens': expected an int >= 1"),
    ([OWN[0], OWN[0]], read_jsonl, r"m.jsonl:2: field 'request_id': 'a' repeats"),
    ([MC[0].replace('"output_length": 5', '"output_length": "5"')], read_mooncake,
     r"m.jsonl:1: field 'output_length': expected an int >= 0"),  # the BOM line itself is still checked
])
def test_malformed_line_after_a_bom_names_file_line_field(tmp_path, lines, reader, msg):
    p = _write(tmp_path / "m.jsonl", lines)
    with pytest.raises(TraceError, match=msg):
        reader(p)


def test_bad_bytes_after_a_bom_count_from_the_file_start(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(BOM + b'{"timestamp": 0, \xff}\n')
    with pytest.raises(TraceError, match=rf"{p}:1: not UTF-8 text \(byte 21"):
        read_mooncake(p)
    p.write_bytes(BOM + BOM + MC[0].encode() + b"\n")  # two marks: the second is content, not a mark
    with pytest.raises(TraceError, match=rf"{p}:1: "):
        read_mooncake(p)


def test_cli_simulate_accepts_a_bom_trace(tmp_path):
    with_bom, plain = _write(tmp_path / "b.jsonl", MC), _write(tmp_path / "p.jsonl", MC, bom=False)
    runs = []
    for t in (with_bom, plain):
        out = tmp_path / (t.stem + ".json")
        res = CliRunner().invoke(main, ["simulate", "--trace", str(t), "--num-blocks", "4", "--arms", "lru",
                                        "--no-ceilings", "-o", str(out)])
        assert res.exit_code == 0, res.output
        cells = json.loads(out.read_text())["cells"]
        runs.append([{k: v for k, v in c.items() if not k.endswith("_seconds")} for c in cells])
    assert runs[0] == runs[1] and runs[0][0]["prompt_tokens"] == 1112 and runs[0][0]["num_requests"] == 2


def test_an_infinite_timestamp_is_refused_on_its_own_line(tmp_path):
    from spfcore.workloads.traces import TraceError, read_mooncake

    p = tmp_path / "inf.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
                 '{"timestamp": 1e400, "input_length": 10, "output_length": 1, "hash_ids": [2]}\n')
    with pytest.raises(TraceError, match=r"inf.jsonl:2: field 'timestamp'.*finite"):
        read_mooncake(p)
