"""Results JSON, atomic write, summary arithmetic, table, plots, markdown."""

from __future__ import annotations

import json
import os

import pytest
from rich.console import Console

from spfcore import report
from tests.test_gate import evaluate


def _cell(arm, seed, hits):
    """A cell of 4 requests of 1024 prompt tokens; ``hits`` cached tokens each."""
    reqs = [{"request_id": f"r{i}", "session_id": f"s{i % 2}", "prefix_group": "p0", "arrival_s": float(i),
             "prompt_tokens": 1024, "cached_tokens": h, "ttft_s": 0.3 - h / 4096, "e2e_s": 0.5 - h / 4096}
            for i, h in enumerate(hits)]
    cached = sum(hits)
    return {"arm": arm, "seed": seed, "num_requests": 4, "prompt_tokens": 4096, "cached_tokens": cached,
            "token_hit_rate": cached / 4096, "prefill_tokens_recomputed": 4096 - cached, "evictions": 3,
            "hook_seconds": 0.002, "hook_calls": 4, "policy_seconds": 0.006, "evict_seconds": 0.001, "evict_calls": 10,
            "hints_issued": 4, "hints_used": 3, "ttft_p50_s": 0.25, "ttft_p95_s": 0.3, "ttft_p99_s": 0.3,
            "ttft_mean_s": 0.27, "e2e_p50_s": 0.45, "e2e_p95_s": 0.5, "throughput_rps": 2.0 + seed % 2,
            "wall_s": 2.0, "requests": reqs}


@pytest.fixture
def results():
    cells = [_cell(a, s, h) for a, h in (("lru", (0, 0, 0, 0)), ("belady_oracle", (0, 1024, 1024, 0)))
             for s in (42, 43)]
    cells.append({"arm": "frequency", "seed": 42, "error": "PolicyError: boom"})
    sim = {"cells": [{"arm": "lru", "seed": s, "token_hit_rate": 0.0, "prefill_tokens_recomputed": 4096}
                     for s in (42, 43)],
           "ceilings": [{"seed": s, "infinite": {"token_hit_rate": 0.75, "prefill_tokens_recomputed": 1024},
                         "belady": {"token_hit_rate": 0.5, "prefill_tokens_recomputed": 2048}} for s in (42, 43)]}
    v = evaluate(cells, sim=sim, seeds=(42, 43), resamples=100)
    config = {"workload_label": "personas test", "command": "spfcore gate --preset quick --seeds 42,43",
              "num_blocks": 64, "block_size": 32, "seeds": [42, 43], "arms": ["lru", "belady_oracle"],
              "engine": {"model": "tiny-llama"}, "versions": {"vllm": "0.32.0"}}
    return report.build_results(config, cells, sim, v.to_json(), created="2026-01-01T00:00:00Z")


def test_summary_means_over_seeds(results):
    s = results["summary"]
    assert list(s) == ["lru", "belady_oracle", "frequency"]
    b = s["belady_oracle"]
    assert b["seeds"] == [42, 43]
    assert b["token_hit_rate"] == 0.5 and b["prefill_tokens_recomputed"] == 2048
    assert b["throughput_rps"] == 2.5  # seeds 42 -> 2.0, 43 -> 3.0
    assert b["evict_us_per_alloc"] == pytest.approx(100.0)  # 1 ms / 10 allocations
    assert b["hook_us_per_call"] == pytest.approx(500.0)
    assert b["hook_ms_per_request"] == pytest.approx(0.5)  # 2 ms of hooks over 4 requests
    assert b["policy_ms_per_request"] == pytest.approx(1.5)  # 6 ms in the runtime over 4 requests
    assert b["wasted_hints"] == 0.25
    # requests with hits: ttft 0.3 - 0.25; misses 0.3
    assert b["ttft_mean_hit_s"] == pytest.approx(0.05) and b["ttft_mean_miss_s"] == pytest.approx(0.3)
    assert s["frequency"]["seeds"] == [] and s["frequency"]["errors"] == ["seed 42: PolicyError: boom"]
    assert results["sim"]["ceilings_summary"]["belady"] == {"token_hit_rate": 0.5, "prefill_tokens_recomputed": 2048}
    assert results["verdict"]["status"] == "INCOMPLETE"


def test_page_summarizes_cells_of_an_older_file(results, tmp_path):
    """A results file whose stored summary predates a column still shows it:
    the engine rows are recomputed from the cells."""
    old = json.loads(json.dumps(results))
    for s in old["summary"].values():
        s.pop("hook_ms_per_request", None)
    old["cells"][2]["hook_seconds"] = 0.004  # belady seed 42: 1 ms/request, seed 43: 0.5
    assert report.engine_summary(old)["belady_oracle"]["hook_ms_per_request"] == pytest.approx(0.75)
    p = report.write_results(tmp_path / "results.json", old)
    row = next(line for line in report.markdown([p]).splitlines() if line.startswith("| belady_oracle |"))
    assert "| 0.75 |" in row


def test_json_round_trip(results, tmp_path):
    p = report.write_results(tmp_path / "out" / "results.json", results)
    back = report.read_results(p)
    assert back == json.loads(json.dumps(results))
    assert back["schema_version"] == 1 and back["spfcore_version"] == "0.1.0"
    assert back["cells"][0]["requests"][1]["cached_tokens"] == 0
    assert [f for f in os.listdir(p.parent)] == ["results.json"]  # no temp file left


def test_failed_write_leaves_no_file_and_keeps_the_old_one(results, tmp_path):
    p = tmp_path / "results.json"
    with pytest.raises(TypeError):
        report.write_results(p, {**results, "bad": object()})
    assert list(tmp_path.iterdir()) == []

    report.write_results(p, results)

    # a failure inside the write itself (after the temp file exists)
    real = os.fsync

    def fail(fd):
        raise OSError(28, "No space left on device")

    os.fsync = fail
    try:
        with pytest.raises(OSError):
            report.write_atomic(p, "{}")
    finally:
        os.fsync = real
    assert sorted(x.name for x in tmp_path.iterdir()) == ["results.json"]
    assert report.read_results(p)["created"] == "2026-01-01T00:00:00Z"


def test_read_errors_name_file_and_field(tmp_path):
    p = tmp_path / "r.json"
    p.write_text('{"schema_version": 1,\n "config": }')
    with pytest.raises(report.ResultsError, match=r"r\.json:2:12: not valid JSON"):
        report.read_results(p)
    p.write_text(json.dumps({"schema_version": 2, "config": {}, "cells": [], "summary": {}, "verdict": None}))
    with pytest.raises(report.ResultsError, match="field 'schema_version' is 2"):
        report.read_results(p)
    p.write_text(json.dumps({"schema_version": 1, "config": {}}))
    with pytest.raises(report.ResultsError, match="field 'cells' missing"):
        report.read_results(p)


def test_table_and_verdict_print(results):
    console = Console(record=True, width=250)
    report.print_report(results, console)
    text = console.export_text()
    assert "belady_oracle" in text and "50.00%" in text and "2,048" in text
    assert "sim:belady" in text and "INCOMPLETE" in text
    assert "arm frequency seed 42 failed: PolicyError: boom" in text


def test_plots_are_pngs(results, tmp_path):
    paths = report.plot_results(results, tmp_path)
    assert [p.name for p in paths] == ["cache.png", "ttft_cdf.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_markdown_prints_the_command(results, tmp_path):
    p = report.write_results(tmp_path / "results.json", results)
    md = report.markdown([p], title="Results")
    assert md.startswith("# Results\n")
    assert "```bash\nspfcore gate --preset quick --seeds 42,43\n```" in md
    assert "| belady_oracle | 2 | 50.00% | 2,048 |" in md
    assert "**Verdict: INCOMPLETE**" in md
    assert "| sim:belady | 50.00% | 2,048 |" in md


def test_markdown_command_line(results, tmp_path):
    from click.testing import CliRunner

    from spfcore.cli import main

    p = report.write_results(tmp_path / "results.json", results)
    res = CliRunner().invoke(main, ["results-page", str(p), "--title", "T"])
    assert res.exit_code == 0 and res.output.startswith("# T\n")
    assert "| belady_oracle | 2 | 50.00% | 2,048 |" in res.output and "**Verdict: INCOMPLETE**" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    res = CliRunner().invoke(main, ["results-page", str(bad)])
    assert res.exit_code == 1 and "bad.json: Expecting property name" in res.output and "line 1 column 2" in res.output


def test_results_page_links_plots_and_includes_files_verbatim(results, tmp_path):
    from click.testing import CliRunner

    from spfcore.cli import main

    run = tmp_path / "gpu"
    p = report.write_results(run / "results.json", results)
    report.plot_results(results, run)
    (run / "bench.txt").write_text("wall ratio 1.0063\n", encoding="utf-8")
    page = run / "README.md"
    r = CliRunner().invoke(main, ["results-page", str(p), "--include", str(run / "bench.txt"), "-o", str(page)])
    assert r.exit_code == 0, r.output
    md = page.read_text()
    assert "![cache.png](cache.png)" in md and "![ttft_cdf.png](ttft_cdf.png)" in md  # relative to the page
    assert md.endswith("## bench.txt\n\n```text\nwall ratio 1.0063\n```\n")
    assert report.results_page([p, p]) == report.results_page([p])  # a file named twice: one section
    (run / "bad.txt").write_bytes(b"\xff\xfe")
    r = CliRunner().invoke(main, ["results-page", str(p), "--include", str(run / "bad.txt")])
    assert r.exit_code == 1 and "bad.txt" in r.output


def test_atomic_write_uses_the_umask_and_takes_lines(tmp_path):
    from spfcore.fileio import write_atomic

    old = os.umask(0o022)
    try:
        p = write_atomic(tmp_path / "a" / "x.txt", iter(["one", "two"]))
    finally:
        os.umask(old)
    assert p.read_text() == "one\ntwo\n"
    assert p.stat().st_mode & 0o777 == 0o644

    def broken():
        yield "one"
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError):
        write_atomic(p, broken())
    assert p.read_text() == "one\ntwo\n" and sorted(x.name for x in p.parent.iterdir()) == ["x.txt"]


def test_results_page_names_output_it_cannot_write(results, tmp_path):
    from click.testing import CliRunner

    from spfcore.cli import main

    src = report.write_results(tmp_path / "r" / "results.json", results)
    blocker = tmp_path / "afile"
    blocker.write_text("")
    res = CliRunner().invoke(main, ["results-page", str(src), "-o", str(blocker / "page.md")])
    assert res.exit_code == 1 and res.exception.__class__ is SystemExit
    assert f"--output {blocker / 'page.md'}: cannot write: File exists ({blocker})" in res.output


def test_results_page_includes_a_markdown_file_as_markdown(results, tmp_path):
    p = report.write_results(tmp_path / "results.json", results)
    (tmp_path / "arms.md").write_text("## Every arm\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", encoding="utf-8")
    md = report.results_page([p], include=[tmp_path / "arms.md"])
    assert md.endswith("\n## Every arm\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert "```text\n## Every arm" not in md


def test_verdict_table_marks_unsettled_criteria():
    """In a settled verdict, a criterion whose interval contains its threshold reads
    "unsettled" (with the point estimate's answer), one wholly on a side reads yes/no."""
    from spfcore.report.tables import make_console, verdict_table

    def crit(name, value, op, thr, low, high, passed):
        return {"name": name, "value": value, "op": op, "threshold": thr, "passed": passed, "note": "",
                "ci": {"low": low, "high": high, "method": "t"}}

    v = {"status": "INCONCLUSIVE", "settled": True, "passes": 1, "criteria": [
        crit("prefill_reduction", 0.11, ">=", 0.1, 0.09, 0.13, True),
        crit("throughput_regression", -0.02, "<", 0.01, -0.03, -0.01, True),
        crit("ttft_p95_improvement", -0.2, ">=", 0.05, -0.6, 0.0, False)]}
    c = make_console()
    with c.capture() as cap:
        c.print(verdict_table(v))
    rows = {line.split("│")[1].strip(): line.split("│")[5].strip() for line in cap.get().splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    assert rows == {"prefill_reduction": "unsettled (yes)", "throughput_regression": "yes",
                    "ttft_p95_improvement": "no"}
    v["settled"] = False  # point-estimate mode: the point estimate decides
    with c.capture() as cap:
        c.print(verdict_table(v))
    assert "unsettled" not in cap.get()
