"""Review 10: benchmarks/bench_scale_cells.py's bad arguments are usage errors
(exit 2, naming the file, line and field), not tracebacks; a failed cell makes
the run exit non-zero."""

from __future__ import annotations

import sys

import pytest
from conftest import load_script





GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'


@pytest.mark.parametrize("trace, args, msg", [
    (None, ["--num-blocks", "100"], "No such file or directory"),
    (GOOD + '{"timestamp": 1, "input_length": 600\n', ["--num-blocks", "100"], "t.jsonl:2: not valid JSON"),
    (GOOD, ["--num-blocks", "0"], "field 'size'"),
    (GOOD, ["--num-blocks", "x"], "--num-blocks 'x': expected comma-separated ints"),
])
def test_bench_scale_cells_bad_arguments(tmp_path, monkeypatch, capsys, trace, args, msg):
    path = tmp_path / "t.jsonl"
    if trace is not None:
        path.write_text(trace)
    bsc = load_script("benchmarks/bench_scale_cells.py")
    monkeypatch.setattr(sys, "argv", ["bench_scale_cells.py", str(path), "--policies", "lru",
                                      "--folder", str(tmp_path / "f"), *args])
    with pytest.raises(SystemExit) as exc:
        bsc.main()
    assert exc.value.code == 2
    assert msg in capsys.readouterr().err


def test_bench_scale_cells_failed_cell_exits_non_zero(tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(GOOD)
    bsc = load_script("benchmarks/bench_scale_cells.py")
    monkeypatch.setattr(sys, "argv", ["bench_scale_cells.py", str(path), "--policies", "nosuch",
                                      "--num-blocks", "100", "--folder", str(tmp_path / "f")])
    with pytest.raises(SystemExit) as exc:
        bsc.main()
    assert exc.value.code and "1 of 1 cell(s) failed" in str(exc.value.code)
    assert "ERROR" in capsys.readouterr().out


@pytest.mark.parametrize("argv, msg", [
    (["--repeat", "0"], "argument --repeat: must be >= 1, got 0"),
    (["--num-blocks", "1"], "argument --num-blocks: must be >= 2"),
    (["--arm", "nosuch"], "argument --arm: policy 'nosuch' is not installed"),
])
def test_bench_evictor_replay_bad_arguments(monkeypatch, capsys, argv, msg):
    ber = load_script("benchmarks/bench_evictor_replay.py")
    monkeypatch.setattr(sys, "argv", ["bench_evictor_replay.py", *argv])
    with pytest.raises(SystemExit) as exc:
        ber.main()
    assert exc.value.code == 2
    assert msg in capsys.readouterr().err
