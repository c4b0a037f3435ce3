"""``spfcore sweep``: keys, resume, the same results inline / on local
processes / on a real local Ray cluster, the report, and bad input."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from spfcore import sweep
from spfcore.cli import main
from spfcore.workloads.synth import TraceShape, write_synthetic

WL = ["--workload", "personas", "--set", "personas=2", "--set", "prefix_tokens=64", "--set", "sessions=4",
      "--set", "turns=2"]
GRID = ["--policies", "lru,frequency", "--num-blocks", "30,60", "--fractions", "0.5", "--seeds", "1,2", *WL]


def _records(folder) -> dict:
    """``{key: record}`` of a folder, without what differs run to run (timings, host, pid)."""
    out = {}
    for p in (Path(folder) / "cells").glob("*.json"):
        rec = json.loads(p.read_text())
        for k in ("host", "pid", "seconds", "cpu_seconds"):
            rec.pop(k)
        for k in sweep.TIMING_FIELDS:
            rec["cell"].pop(k, None)
        out[rec["key"]] = rec
    return out


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("trace") / "t.jsonl"
    write_synthetic(p, 300, 3, TraceShape(sessions=16, system_prompts=4))
    return p


def test_resume_reuses_every_cell_and_says_so(tmp_path):
    out = tmp_path / "sw"
    first = CliRunner().invoke(main, ["sweep", "-o", str(out), *GRID])
    assert first.exit_code == 0, first.output
    # 2 seeds x (2 policies + Belady) x 3 sizes + 2 infinite-cache cells
    assert "20 cells: 0 reused" in first.stderr and "20 run" in first.stderr
    files = {p.name: p.read_bytes() for p in (out / "cells").glob("*.json")}
    assert len(files) == 20 and (out / "mrc.png").stat().st_size > 0
    again = CliRunner().invoke(main, ["sweep", "-o", str(out), *GRID])
    assert again.exit_code == 0 and "20 cells: 20 reused" in again.stderr and " 0 run" in again.stderr
    assert {p.name: p.read_bytes() for p in (out / "cells").glob("*.json")} == files  # nothing rewritten
    # a lost cell and a failed one are run again, nothing else
    victim, failed = sorted(files)[:2]
    (out / "cells" / victim).unlink()
    rec = json.loads(files[failed])
    rec.update(status="error", cell={"error": {"policy": "lru", "hook": None, "message": "x"}})
    (out / "cells" / failed).write_text(json.dumps(rec))
    third = CliRunner().invoke(main, ["sweep", "-o", str(out), *GRID])
    assert "18 reused" in third.stderr and "2 run" in third.stderr
    assert {p.name: p.read_bytes() for p in (out / "cells").glob("*.json")}.keys() == files.keys()
    assert json.loads((out / "cells" / failed).read_text())["status"] == "ok"


def test_cells_match_simulate_and_ceilings_order(tmp_path):
    out = tmp_path / "sw"
    assert CliRunner().invoke(main, ["sweep", "-o", str(out), *GRID]).exit_code == 0
    sim = CliRunner().invoke(main, ["simulate", *WL, "--arms", "lru,frequency,belady_oracle", "--num-blocks", "30",
                                    "--seeds", "1,2", "--json"])
    assert sim.exit_code == 0, sim.output
    expect = {(c["arm"], c["seed"]): c for c in json.loads(sim.stdout)["cells"]}
    got = [r for r in _records(out).values() if r["config"]["size"] == {"blocks": 30}]
    assert len(got) == 6
    for r in got:  # the sweep's cell is simulate's replay, field for field
        e = dict(expect[r["config"]["policy"], r["config"]["seed"]])
        for k in sweep.TIMING_FIELDS:
            e.pop(k)
        assert r["cell"] == e
    infinite = {r["config"]["seed"]: r for r in _records(out).values() if r["config"]["policy"] == "infinite"}
    ceil = json.loads(sim.stdout)["ceilings"]
    for seed, r in infinite.items():
        assert r["cell"]["evictions"] == 0 and r["num_blocks"] == r["infinite_blocks"]
        assert r["cell"]["token_hit_rate"] == ceil[str(seed)]["infinite"]["token_hit_rate"]
    for r in _records(out).values():
        if "fraction" in r["config"]["size"]:  # fraction f of the distinct blocks, + the null block
            assert r["num_blocks"] == math.ceil(0.5 * r["unique_blocks"]) + 1
            assert 0 < r["unique_blocks"] < r["infinite_blocks"]
    rows = json.loads((out / "summary.json").read_text())["rows"]
    by = {(r["variant"], r["size_label"]): r for r in rows}
    for size in ("30", "60", "50%"):  # Belady is the optimum of each size; nothing beats the infinite cache
        assert by["belady_oracle", size]["miss_ratio"] <= by["lru", size]["miss_ratio"]
        assert by["infinite", "inf"]["miss_ratio"] <= by["belady_oracle", size]["miss_ratio"]
    assert by["lru", "30"]["seeds"] == [1, 2]
    assert by["lru", "30"]["token_hit_rate"] == pytest.approx(
        (expect["lru", 1]["token_hit_rate"] + expect["lru", 2]["token_hit_rate"]) / 2)


def test_keys(tmp_path, trace):
    t2 = tmp_path / "t2.jsonl"
    t2.write_bytes(trace.read_bytes())

    def grid(**kw):
        base = dict(sources=(sweep.Source(trace=str(trace)),), seeds=(0,), variants=(sweep.Variant("lru"),),
                    sizes=({"blocks": 200},), ceilings=False)
        return sweep.Grid(**{**base, **kw})

    (a,) = grid().cells()
    assert a.key == grid().cells()[0].key and len(a.key) == 32  # deterministic
    assert a.config()["code"]["spfcore"] and a.config()["source"]["sha256"]
    others = [grid(seeds=(1,)), grid(sizes=({"blocks": 201},)), grid(sizes=({"fraction": 0.5},)),
              grid(variants=(sweep.Variant("frequency"),)), grid(variants=(sweep.Variant("frequency", {"min_count": "3"}),)),
              grid(block_size=16), grid(hook_budget_ms=5.0), grid(sources=(sweep.Source(trace=str(trace), limit=10),))]
    keys = {g.cells()[0].key for g in others}
    assert len(keys) == len(others) and a.key not in keys
    with open(t2, "ab") as f:  # the same path, other bytes: another key
        f.write(b"\n")
    k1 = grid(sources=(sweep.Source(trace=str(t2)),)).cells()[0].key
    t2.write_bytes(trace.read_bytes() + b"\n\n")
    assert grid(sources=(sweep.Source(trace=str(t2)),)).cells()[0].key != k1
    # a cell run on other code than its key's is refused, not mixed in
    bad = dict(a.config(), code={"spfcore": "0" * 16})
    rec = sweep.run_cell(bad)
    assert rec["status"] == "error" and "not the code the sweep was keyed on" in rec["cell"]["error"]["message"]
    assert sweep.run_cell(a.config())["status"] == "ok"


def test_workers_and_ray_match_inline(tmp_path, trace):
    ray = pytest.importorskip("ray")
    grid = sweep.Grid((sweep.Source(trace=str(trace)),), (0,),
                      (sweep.Variant("lru"), sweep.Variant("frequency", {"min_count": "3"})),
                      ({"blocks": 100}, {"fraction": 0.1}, {"fraction": 0.3}))
    one = sweep.run_sweep(grid, tmp_path / "one", workers=1)
    two = sweep.run_sweep(grid, tmp_path / "two", workers=2)
    assert (one.total, one.ran, one.failed) == (two.total, two.ran, two.failed) == (10, 10, 0)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # a real local Ray cluster
    try:
        on_ray = sweep.run_sweep(grid, tmp_path / "ray", ray_address="auto")
        pids = {json.loads(p.read_text())["pid"] for p in (tmp_path / "ray" / "cells").glob("*.json")}
    finally:
        ray.shutdown()
    assert on_ray.ran == 10 and on_ray.failed == 0 and os.getpid() not in pids  # ran in Ray's workers
    ref = _records(tmp_path / "one")
    assert len(ref) == 10 and _records(tmp_path / "two") == ref and _records(tmp_path / "ray") == ref
    hits = sorted(r["cell"]["block_hit_rate"] for r in ref.values())
    assert hits[0] < hits[-1]  # sizes and policies really differ


def test_cli_local_ray_and_report(tmp_path, trace):
    pytest.importorskip("ray")
    args = ["sweep", "--policies", "lru", "--num-blocks", "100,200", "--trace", str(trace), "--no-ceilings"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-m", "spfcore.cli", *args, "-o", str(tmp_path / "ray"),
                          "--ray-address", "local", "--workers", "2"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 cells: 0 reused" in res.stderr and "Ray: 2 CPUs" in res.stderr
    assert CliRunner().invoke(main, [*args, "-o", str(tmp_path / "one")]).exit_code == 0
    assert _records(tmp_path / "ray") == _records(tmp_path / "one")
    # the report of an existing folder, with a cell not there yet
    next((tmp_path / "one" / "cells").glob("*.json")).unlink()
    (tmp_path / "one" / "summary.json").unlink()
    rep = CliRunner().invoke(main, ["sweep-report", str(tmp_path / "one")])
    assert rep.exit_code == 0, rep.output
    assert "1 cell(s) of this sweep not run yet" in rep.stdout and "lru" in rep.stdout
    assert len(json.loads((tmp_path / "one" / "summary.json").read_text())["rows"]) == 1


@pytest.mark.parametrize("extra, hint, words", [
    (["--fractions", "1.5"], "--fractions", "in (0, 1]"),
    (["--num-blocks", "1"], "--num-blocks", ">= 2 blocks"),
    (["--num-blocks", "30,30"], "--num-blocks", "given twice"),
    (["--num-blocks", "3x"], "--num-blocks", "'3x'"),
    (["--seeds", "-1"], "--seeds", "seed >= 0"),
    (["--seeds", "1,x"], "--seeds", "comma-separated ints"),
    (["--seeds", "1,1"], "--seeds", "given twice"),
    (["--policy-opt", "frequency.nope=1"], "--policy-opt", "unknown parameter 'nope'"),
    (["--policy-opt", "frequency.min_count=abc"], "--policy-opt", "frequency"),
    (["--policy-opt", "session_ttl.ttl_arrivals=1"], "--policy-opt", "not in the sweep"),
    (["--policy-opt", "frequency.min_count=3,3"], "--policy-opt", "repeated value"),
    (["--policy-opt", "frequency"], "--policy-opt", "NAME.KEY=VALUE"),
    (["--policies", "lru,lru"], "--policies", "distinct"),
    (["--policies", "nope"], "--policies", "not installed"),
    (["--set", "sesions=3"], "--set", "unknown flag 'sesions'"),
])
def test_bad_input_names_the_field(tmp_path, extra, hint, words):
    args = ["sweep", "-o", str(tmp_path / "sw"), "--policies", "lru,frequency", "--num-blocks", "30", *WL]
    for i, a in enumerate(args):  # a later flag of one name replaces the earlier one
        if a in extra[::2] and a not in ("--set", "--policy-opt"):
            del args[i:i + 2]
            break
    res = CliRunner().invoke(main, [*args, *extra])
    assert res.exit_code == 2, res.output
    assert hint in res.output and words in res.output
    assert not (tmp_path / "sw").exists()  # nothing written


def test_failed_cells_and_bad_folder(tmp_path, monkeypatch):
    out = tmp_path / "sw"
    # 8 blocks: too small for these requests; the cells say so, the run finishes, exit 4
    res = CliRunner().invoke(main, ["sweep", "-o", str(out), "--policies", "lru", "--num-blocks", "8,60",
                                    "--seeds", "1", "--no-ceilings", *WL])
    assert res.exit_code == 4, res.output
    assert "failed: ValueError: request" in res.stderr and "1 failed" in res.stderr
    rows = {r["size_label"]: r for r in json.loads((out / "summary.json").read_text())["rows"]}
    assert rows["8"]["seeds"] == [] and "blocks" in rows["8"]["errors"][0] and rows["60"]["seeds"] == [1]
    # the ok cell's record, read before any file is spoiled (which file globs first follows the code digest)
    ok = next(r for r in (json.loads(p.read_text()) for p in (out / "cells").glob("*.json")) if r["status"] == "ok")
    bad = next((out / "cells").glob("*.json"))
    bad.write_text("{not json")
    rep = CliRunner().invoke(main, ["sweep-report", str(out)])
    assert rep.exit_code == 1 and str(bad) in rep.output and "not a readable cell record" in rep.output
    good = json.loads(next(p for p in (out / "cells").glob("*.json") if p != bad).read_text())
    bad.write_text(json.dumps({**good, "key": bad.stem, "status": "ok", "cell": {"x": 1}}))  # whole JSON, no figures
    rep = CliRunner().invoke(main, ["sweep-report", str(out)])
    assert rep.exit_code == 1 and str(bad) in rep.output and "field 'cell'" in rep.output, rep.output
    for field, edit in (("cell.token_hit_rate", {"cell": {**ok["cell"], "token_hit_rate": "x"}}),
                        ("cell.evictions", {"cell": {**ok["cell"], "evictions": None}}),
                        ("seconds", {"seconds": "1"})):  # a figure of the wrong type: named, not a TypeError
        bad.write_text(json.dumps({**ok, "key": bad.stem, **edit}))
        rep = CliRunner().invoke(main, ["sweep-report", str(out)])
        assert rep.exit_code == 1 and str(bad) in rep.output and f"field '{field}'" in rep.output, rep.output
    nothing = CliRunner().invoke(main, ["sweep-report", str(tmp_path)])
    assert nothing.exit_code == 1 and "sweep.json: no sweep here" in nothing.output
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    no_cluster = CliRunner().invoke(main, ["sweep", "-o", str(tmp_path / "x"), "--policies", "lru", "--num-blocks",
                                           "60", "--ray-address", "auto", *WL])
    assert no_cluster.exit_code == 2 and "--ray-address" in no_cluster.output
    assert "Could not find any running Ray instance" in no_cluster.output


def _bad_line(src: Path, dst: Path, lineno: int, field: str, value) -> Path:
    lines = src.read_text().splitlines()
    obj = json.loads(lines[lineno - 1])
    obj[field] = value
    lines[lineno - 1] = json.dumps(obj)
    dst.write_text("\n".join(lines) + "\n")
    return dst


@pytest.mark.parametrize("workers", [1, 2])
def test_bad_trace_is_refused_before_any_cell(tmp_path, trace, workers):
    bad = _bad_line(trace, tmp_path / "bad.jsonl", 7, "input_length", "abc")
    out = tmp_path / "sw"
    args = ["sweep", "-o", str(out), "--policies", "lru,frequency", "--num-blocks", "100,200", "--seeds", "1,2",
            "--workers", str(workers)]
    res = CliRunner().invoke(main, [*args, "--trace", str(trace), "--trace", str(bad)])
    assert res.exit_code == 2, res.output
    assert f"Invalid value for --trace: {bad}:7: field 'input_length': expected an int >= 1, got 'abc'" in res.output
    assert "failed" not in res.output and not out.exists()  # one error, no cell run, nothing written
    # the check reads what the cells read: the first 6 requests are good
    ok = CliRunner().invoke(main, [*args, "--trace", str(bad), "--limit", "6", "--no-ceilings"])
    assert ok.exit_code == 0 and "8 cells: 0 reused" in ok.stderr and "(0 failed)" in ok.stderr


def test_bad_inputs_refused_up_front(tmp_path, trace):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    base = ["sweep", "-o", str(tmp_path / "sw"), "--policies", "lru", "--num-blocks", "100"]
    res = CliRunner().invoke(main, [*base, "--trace", str(empty)])
    assert res.exit_code == 2 and f"Invalid value for --trace: {empty.name}: empty trace\n" in res.output
    assert res.output.count("empty.jsonl") == 1  # the file named once
    res = CliRunner().invoke(main, [*base, "--trace", str(empty), "--block-size", "16"])
    assert res.exit_code == 2 and "Invalid value for --trace: empty.jsonl: empty trace\n" in res.output
    # hash-id trace lines cannot be keyed at another block size than the trace's
    mooncake = tmp_path / "mc.jsonl"
    assert CliRunner().invoke(main, ["make-trace", str(mooncake), "--requests", "20"]).exit_code == 0
    res = CliRunner().invoke(main, [*base, "--trace", str(mooncake), "--block-size", "16"])
    assert res.exit_code == 2 and "Invalid value for --block-size: " in res.output
    assert f"{mooncake}: request" in res.output and "block size 16 differs" in res.output
    assert not (tmp_path / "sw").exists()
    # the library raises InputError, and writes nothing either
    grid = sweep.Grid((sweep.Source(trace=str(_bad_line(trace, tmp_path / "b.jsonl", 2, "output_length", -1))),),
                      (0,), (sweep.Variant("lru"),), ({"blocks": 100},))
    with pytest.raises(sweep.InputError, match=r"b\.jsonl:2: field 'output_length'") as info:
        sweep.run_sweep(grid, tmp_path / "lib")
    assert info.value.param == "--trace" and not (tmp_path / "lib").exists()


def test_each_input_is_scanned_once_inline(tmp_path, trace, monkeypatch):
    import spfcore.sim.cell as cell_mod

    calls = []
    real = cell_mod.scan
    monkeypatch.setattr(cell_mod, "scan", lambda *a, **k: calls.append(1) or real(*a, **k))
    sweep._open.cache_clear()
    grid = sweep.Grid((sweep.Source(trace=str(trace)),), (0,), (sweep.Variant("lru"), sweep.Variant("frequency")),
                      ({"blocks": 100}, {"blocks": 200}))
    out = sweep.run_sweep(grid, tmp_path / "sw")
    assert (out.total, out.ran, out.failed) == (7, 7, 0) and len(calls) == 1  # the check's scan serves every cell
    sweep._open.cache_clear()
    again = sweep.run_sweep(grid, tmp_path / "sw")
    assert again.ran == 0 and len(calls) == 1  # a finished grid reads no trace


def test_failed_rows_sort_in_their_size_place(tmp_path):
    out = tmp_path / "sw"
    # 0.01 of the distinct blocks and 8 blocks are too small for these requests: both fail, 60 runs
    res = CliRunner().invoke(main, ["sweep", "-o", str(out), "--policies", "lru,frequency", "--num-blocks", "60,8",
                                    "--fractions", "0.01", "--seeds", "1", *WL])
    assert res.exit_code == 4, res.output
    rows = json.loads((out / "summary.json").read_text())["rows"]
    got = [(r["variant"], r["size_label"], bool(r["seeds"])) for r in rows]
    assert got == [("lru", "1%", False), ("lru", "8", False), ("lru", "60", True),
                   ("frequency", "1%", False), ("frequency", "8", False), ("frequency", "60", True),
                   ("belady_oracle", "1%", False), ("belady_oracle", "8", False), ("belady_oracle", "60", True),
                   ("infinite", "inf", True)]
    small = rows[0]
    assert small["errors"] and 2 <= small["num_blocks"] < 8  # the failed fraction's resolved size, shown and sorted
    assert rows[1]["num_blocks"] == 8 and rows[1]["miss_ratio"] is None
    # a size never resolved (every seed failed before sizing) goes after the variant's sized rows
    recs = [{"config": {**sweep.Cell(source={"label": "x"}, seed=0, policy="lru", options={}, size=s).config()},
             "status": st, "num_blocks": nb, "seconds": 1.0, "key": "k",
             "cell": ({"error": {"policy": "lru", "hook": None, "message": "m"}} if st == "error" else
                      {"token_hit_rate": 0.5, "block_hit_rate": 0.5, "evictions": 1})}
            for s, st, nb in [({"fraction": 0.5}, "error", None), ({"blocks": 40}, "ok", 40),
                              ({"fraction": 0.1}, "error", None), ({"blocks": 20}, "error", None)]]
    assert [r["size_label"] for r in sweep.summarize(recs)] == ["20", "40", "10%", "50%"]


def test_second_live_run_is_refused(tmp_path):
    from spfcore.fileio import output_lock

    out = tmp_path / "sw"
    with output_lock(out / "sweep"):
        res = CliRunner().invoke(main, ["sweep", "-o", str(out), "--policies", "lru", "--num-blocks", "60", *WL])
    assert res.exit_code == 1 and "another run is writing this output" in res.output
    assert not (out / "cells").exists()


def test_an_unreachable_ray_address_is_a_usage_error_at_once(tmp_path):
    # ray.init retried an unknown host or a closed port for minutes; a TCP check first refuses it
    import socket

    from spfcore.cli import main

    pytest.importorskip("ray")
    with socket.socket() as s:  # a port on this machine that nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    for addr, why in ((f"127.0.0.1:{closed}", "cannot reach Ray"), ("ray://127.0.0.1:x", "is not a number"),
                      ("nowhere.invalid:6379", "cannot reach Ray")):
        res = CliRunner().invoke(main, ["sweep", "-o", str(tmp_path / "x"), "--policies", "lru", "--num-blocks",
                                        "60", "--ray-address", addr, *WL])
        assert res.exit_code == 2 and "--ray-address" in res.output and why in res.output, (addr, res.output)
        assert addr in res.output
    assert not (tmp_path / "x").exists()  # nothing written


def test_a_trace_is_scanned_and_counted_once_per_sweep_folder(tmp_path, trace, monkeypatch):
    """The trace's scan and distinct-block count are made once (OUT/inputs/), sent with every cell, and
    change no record: a cell given them equals the cell that computes them itself."""
    grid = sweep.Grid((sweep.Source(trace=str(trace)),), (0,), (sweep.Variant("lru"), sweep.Variant("sieve")),
                      ({"fraction": 0.1}, {"fraction": 0.3}))
    sweep._open.cache_clear()
    out = sweep.run_sweep(grid, tmp_path / "sw", workers=2)
    assert (out.total, out.ran, out.failed) == (7, 7, 0)  # + Belady at both sizes + the infinite cache
    files = list((tmp_path / "sw" / "inputs").glob("*.json"))
    assert len(files) == 1
    facts = json.loads(files[0].read_text())
    recs = _records(tmp_path / "sw")
    assert {r["unique_blocks"] for r in recs.values() if "fraction" in r["config"]["size"]} == {facts["unique_blocks"]}
    assert {r["infinite_blocks"] for r in recs.values()} == {facts["blocks_total"] + 1}
    # a cell run alone (its own scan and keyed pass) gives the same record as the sweep's
    sweep._open.cache_clear()
    sweep._open_known.cache_clear()
    for key, ref in recs.items():
        alone = sweep.run_cell(ref["config"])
        for k in ("host", "pid", "seconds", "cpu_seconds"):
            alone.pop(k)
        for k in sweep.TIMING_FIELDS:
            alone["cell"].pop(k, None)
        assert alone == ref, key
    # the facts really are what the cell uses (not recomputed): forged ones change the size
    cfg = next(r["config"] for r in recs.values() if r["config"]["size"] == {"fraction": 0.3})
    keep = {k: facts[k] for k in ("block_size", "num_requests", "blocks_total", "worst_blocks", "worst_request")}
    forged = sweep.run_cell(cfg, {**keep, "unique_blocks": 1000})
    assert forged["status"] == "ok" and forged["num_blocks"] == math.ceil(0.3 * 1000) + 1
    # a second sweep into the folder (here: another grid on the same trace) reads the file, scans nothing
    sweep._open.cache_clear()
    monkeypatch.setattr(sweep, "_open", lambda *a: pytest.fail("the trace was opened again"))
    monkeypatch.setattr(sweep, "check_inputs", lambda *a, **k: None)
    src = sweep._ident_json(sweep.Source(trace=str(trace)).identity())
    got = sweep.input_facts(tmp_path / "sw", src, 0, None)
    assert {k: got[k] for k in sweep.FACTS} == {k: facts[k] for k in (*keep, "unique_blocks")}


def test_an_interrupt_keeps_finished_cells_and_counts_the_rest(tmp_path):
    grid = sweep.Grid((sweep.Source(workload="personas", flags={"personas": 2, "prefix_tokens": 64, "sessions": 4,
                                                                "turns": 2}),),
                      (1,), (sweep.Variant("lru"),), ({"blocks": 30}, {"blocks": 60}))

    def stop(rec):
        raise KeyboardInterrupt

    out = sweep.run_sweep(grid, tmp_path / "sw", on_cell=stop)  # Belady x2 + infinite + lru x2 = 5 cells
    assert (out.total, out.ran, out.interrupted) == (5, 1, 4)
    assert len(list((tmp_path / "sw" / "cells").glob("*.json"))) == 1
    again = sweep.run_sweep(grid, tmp_path / "sw")
    assert (again.reused, again.ran, again.interrupted, again.failed) == (1, 4, 0, 0)


def test_a_resumed_sweep_does_not_rescan_a_trace_it_scanned(tmp_path, trace, monkeypatch):
    grid = sweep.Grid((sweep.Source(trace=str(trace)),), (0,), (sweep.Variant("lru"),), ({"blocks": 100},))

    def stop(rec):
        raise KeyboardInterrupt

    sweep._open.cache_clear()
    first = sweep.run_sweep(grid, tmp_path / "sw", on_cell=stop)
    assert first.interrupted == 2
    sweep._open.cache_clear()
    monkeypatch.setattr(sweep, "_open", lambda *a: pytest.fail("the trace was scanned again"))
    again = sweep.run_sweep(grid, tmp_path / "sw")  # the cells open the stream from OUT/inputs' facts
    assert (again.reused, again.ran, again.failed) == (1, 2, 0)


def test_cells_with_and_without_the_prepared_stream_are_identical(tmp_path, trace):
    """The sweep's cells map the trace's prepared stream (OUT/inputs/<key>.stream); a cell given only the
    facts (the trace streamed and keyed by the cell) or nothing at all gives the same record."""
    grid = sweep.Grid((sweep.Source(trace=str(trace)),), (0,),
                      (sweep.Variant("lru"), sweep.Variant("session_ttl"), sweep.Variant("frequency")),
                      ({"blocks": 100}, {"fraction": 0.2}))
    sweep._open.cache_clear()
    sweep._open_known.cache_clear()
    out = sweep.run_sweep(grid, tmp_path / "sw")
    assert (out.total, out.ran, out.failed) == (9, 9, 0)  # + Belady at both sizes + the infinite cache
    (stream,) = (tmp_path / "sw" / "inputs").glob("*.stream")
    src = sweep._ident_json(sweep.Source(trace=str(trace)).identity())
    facts = sweep.input_facts(tmp_path / "sw", src, 0, None)
    assert facts["stream"] == str(stream.resolve())
    plain = {k: v for k, v in facts.items() if k != "stream"}
    recs = _records(tmp_path / "sw")
    for key, ref in recs.items():
        for f in (plain, None):
            sweep._open.cache_clear()
            sweep._open_known.cache_clear()
            got = sweep.run_cell(ref["config"], f)
            for k in ("host", "pid", "seconds", "cpu_seconds"):
                got.pop(k)
            for k in sweep.TIMING_FIELDS:
                got["cell"].pop(k, None)
            assert got == ref, (key, f is None)
    assert len({r["cell"]["block_hit_rate"] for r in recs.values()}) > 3  # the arms really differ
    # a cell on a host without the folder streams the trace itself (the same record)
    cfg = next(r["config"] for r in recs.values() if r["config"]["policy"] == "lru")
    sweep._open_known.cache_clear()
    away = sweep.run_cell(cfg, {**facts, "stream": str(tmp_path / "elsewhere")})
    assert away["status"] == "ok" and away["cell"]["hit_blocks"] == recs[away["key"]]["cell"]["hit_blocks"]


def test_a_corrupt_prepared_stream_is_refused_by_cells_and_rebuilt_by_the_next_run(tmp_path, trace):
    grid = sweep.Grid((sweep.Source(trace=str(trace)),), (0,), (sweep.Variant("lru"), sweep.Variant("sieve")),
                      ({"blocks": 100},), ceilings=False)
    sweep._open_known.cache_clear()
    assert sweep.run_sweep(grid, tmp_path / "sw").failed == 0
    ref = _records(tmp_path / "sw")
    (stream,) = (tmp_path / "sw" / "inputs").glob("*.stream")
    src = sweep._ident_json(sweep.Source(trace=str(trace)).identity())
    facts = sweep.input_facts(tmp_path / "sw", src, 0, None)
    bk = stream / "bk.npy"
    data = bk.read_bytes()
    bk.write_bytes(data[: len(data) // 2])  # a partial file (a full disk, a copy cut short)
    sweep._open_known.cache_clear()
    for cfg in (r["config"] for r in ref.values()):  # a cell does not replay it: an error naming the file
        rec = sweep.run_cell(cfg, facts)
        assert rec["status"] == "error" and f"{bk}: field 'bytes'" in rec["cell"]["error"]["message"]
    flipped = bytearray(data)
    flipped[-3] ^= 0x40
    bk.write_bytes(bytes(flipped))  # same size, other bytes: the driver's SHA-256 check finds it
    for p in (tmp_path / "sw" / "cells").glob("*.json"):
        p.unlink()
    sweep._open_known.cache_clear()
    again = sweep.run_sweep(grid, tmp_path / "sw")  # the next run writes the stream again, then the cells
    assert (again.ran, again.failed) == (2, 0) and _records(tmp_path / "sw") == ref
    assert bk.read_bytes() == data
    assert sorted(p.name for p in (tmp_path / "sw" / "inputs").iterdir() if p.name.startswith(".")) == []


def test_an_edited_facts_file_does_not_set_the_block_size(tmp_path, trace):
    """OUT/inputs/<key>.json is a summary for people: a block size edited there neither keys the stream
    at it (a traceback, the stream discarded, every later run failing alike) nor changes any cell."""
    grid = sweep.Grid((sweep.Source(trace=str(trace)),), (0,), (sweep.Variant("lru"),), ({"blocks": 100},),
                      ceilings=False)
    sweep._open_known.cache_clear()
    assert sweep.run_sweep(grid, tmp_path / "sw").failed == 0
    ref = _records(tmp_path / "sw")
    (facts,) = (tmp_path / "sw" / "inputs").glob("*.json")
    rec = json.loads(facts.read_text())
    facts.write_text(json.dumps({**rec, "block_size": 64}))
    for p in (tmp_path / "sw" / "cells").glob("*.json"):
        p.unlink()
    sweep._open_known.cache_clear()
    again = sweep.run_sweep(grid, tmp_path / "sw")
    assert (again.ran, again.failed) == (1, 0) and _records(tmp_path / "sw") == ref
    assert json.loads(facts.read_text()) == rec  # written back as the trace says


def test_a_worker_that_dies_is_one_clear_error_and_keeps_the_finished_cells(tmp_path, monkeypatch):
    """A local worker killed mid-cell (out of memory, SIGBUS on a mapped stream file cut short, a crash in
    compiled code) broke the pool: 'A process in the process pool was terminated abruptly ...' (exit 1), no
    cell, no cause, no next step."""
    import concurrent.futures as cf

    class DyingPool:  # the first cell finishes, the worker of the second dies
        def __init__(self, max_workers, mp_context):
            self.n = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, *args):
            f = cf.Future()
            self.n += 1
            if self.n == 1:
                f.set_result(fn(*args))
            else:
                f.set_exception(cf.process.BrokenProcessPool("A process in the process pool was terminated abruptly"))
            return f

    monkeypatch.setattr(cf, "ProcessPoolExecutor", DyingPool)
    out = tmp_path / "sw"
    res = CliRunner().invoke(main, ["sweep", "-o", str(out), "--policies", "lru", "--num-blocks", "30,60",
                                    "--no-ceilings", "--workers", "2", *WL])
    assert res.exit_code == 1 and "a local worker process died while it ran a cell" in res.output, res.output
    assert "run the same command again" in res.output
    assert len([sweep.read_cell(out, p.stem) for p in (out / "cells").glob("*.json")]) <= 1  # in as_completed order


def test_one_prepared_stream_serves_every_seed_of_a_hash_id_trace(tmp_path, trace):
    """A trace's requests depend on the seed only when --tokens-per-block draws its tokens: three seeds of a
    hash-id trace built three identical streams (1M requests: ~50 s and ~0.6 GB each)."""
    for tpb, streams in ((None, 1), (16, 2)):
        src = sweep.Source(trace=str(trace), tokens_per_block=tpb)
        grid = sweep.Grid((src,), (1, 2), (sweep.Variant("lru"), sweep.Variant("sieve")), ({"blocks": 400},),
                          ceilings=False)
        out = tmp_path / f"sw{tpb}"
        sweep._open_known.cache_clear()
        assert sweep.run_sweep(grid, out).failed == 0
        assert len(list((out / "inputs").glob("*.stream"))) == streams
        recs = _records(out)
        for key, ref in recs.items():  # each cell as it replays the trace itself, with its own seed
            sweep._open.cache_clear()
            alone = sweep.run_cell(ref["config"])
            for k in ("host", "pid", "seconds", "cpu_seconds"):
                alone.pop(k)
            for k in sweep.TIMING_FIELDS:
                alone["cell"].pop(k, None)
            assert alone == ref, (tpb, key)
        sweep._open_known.cache_clear()
        again = sweep.run_sweep(grid, out)
        assert (again.reused, again.ran) == (4, 0)


def test_cells_run_longest_expected_first_with_the_same_results(tmp_path, trace, monkeypatch):
    seen: list[list[dict]] = []
    real = sweep.execute

    def spy(configs, **kw):
        seen.append(list(configs))
        return real(configs, **kw)

    monkeypatch.setattr(sweep, "execute", spy)
    grid = sweep.Grid(sources=(sweep.Source(trace=str(trace)),), seeds=(0,),
                      variants=(sweep.Variant("lru"), sweep.Variant("frequency"), sweep.Variant("sieve")),
                      sizes=({"blocks": 40}, {"fraction": 0.5}, {"blocks": 120}))
    sweep.run_sweep(grid, tmp_path / "a")
    (facts,) = [json.loads(p.read_text()) for p in (tmp_path / "a" / "inputs").glob("*.json")]
    half = 0.5 * facts["unique_blocks"]
    assert 120 < half  # the fraction is the largest size here
    big, mid, small = {"fraction": 0.5}, {"blocks": 120}, {"blocks": 40}
    # hook-driven policies first, larger caches first, grid order on ties; then the compiled arms
    assert [(c["policy"], c["size"]) for c in seen[0]] == [
        ("sieve", big), ("sieve", mid), ("sieve", small), ("infinite", {"infinite": True}), ("lru", big),
        ("frequency", big), ("belady_oracle", big), ("lru", mid), ("frequency", mid), ("belady_oracle", mid),
        ("lru", small), ("frequency", small), ("belady_oracle", small)]
    # the order changes no result: the grid's own order gives the same records
    monkeypatch.setattr(sweep, "expected_cost_rank", lambda config, facts=None: 0)
    sweep.run_sweep(grid, tmp_path / "b")
    assert [c["policy"] for c in seen[1]][:4] == ["infinite", "lru", "lru", "lru"]
    assert _records(tmp_path / "a") == _records(tmp_path / "b") and len(_records(tmp_path / "a")) == 13
