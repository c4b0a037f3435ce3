"""benchmarks/tune_spf.py: the train / report / held-out split never overlaps,
and the objective is the mean share of the LRU->Belady gap."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
tune = pytest.importorskip("tune_spf")


def test_parts_do_not_overlap():
    parts = {p: tune._cells(p, "trace.jsonl") for p in ("train", "report", "held-out")}
    train = {tune._cid(c) for c in parts["train"]}
    report = {tune._cid(c) for c in parts["report"]}
    held = {tune._cid(c) for c in parts["held-out"]}
    assert not train & report and not train & held and not report & held
    assert {c[3] for c in parts["train"] if c[1] != "trace"} == set(range(10))
    assert {c[3] for c in parts["report"] if c[1] != "trace"} == {42, 43, 44}
    assert {c[2]["half"] for c in parts["train"] if c[1] == "trace"} == {"1st"}
    assert {c[2]["half"] for c in parts["report"] if c[1] == "trace"} == {"2nd"}
    assert {c[0] for c in parts["held-out"]}.isdisjoint({c[0] for c in parts["train"]})
    assert {c[2]["num_blocks"] for c in parts["report"] if c[1] == "trace"} == {1828, 9140}
    assert all(c[1] != "trace" for c in parts["held-out"])
    assert all(c[1] != "trace" for c in tune._cells("train", None))


def test_summarize_and_objective():
    cells = [("zipf", "zipf", {}, 0), ("zipf", "zipf", {}, 1), ("flat", "personas", {}, 0)]
    ref = {"zipf|0": {"lru": 0.2, "belady_oracle": 0.6, "frequency": 0.5},
           "zipf|1": {"lru": 0.4, "belady_oracle": 0.6, "frequency": 0.45},
           "flat|0": {"lru": 0.3, "belady_oracle": 0.3, "frequency": 0.3}}
    spf = {"zipf|0": 0.4, "zipf|1": 0.5, "flat|0": 0.3}
    rows = {r["group"]: r for r in tune.summarize(cells, ref, spf)}
    z = rows["zipf"]
    assert z["spf"] == pytest.approx(0.45) and z["lru"] == pytest.approx(0.3) and z["belady"] == pytest.approx(0.6)
    assert z["gap"] == pytest.approx(0.5)  # (0.45 - 0.3) / (0.6 - 0.3), of the means
    assert z["gap_range"] == pytest.approx((0.5, 0.5))
    assert z["best"] == "frequency" and z["best_hit"] == pytest.approx(0.475)
    assert rows["flat"]["gap"] is None  # no gap: left out of the objective
    assert tune.objective(list(rows.values())) == pytest.approx(0.5)
    md = tune.table("t", list(rows.values()))
    assert "no (-0.0250)" in md and "| flat | 1 |" in md


def test_held_out_shapes_are_the_generators_held_out():
    """The tune/report split's held-out shapes are exactly the generators marked
    held out (which `spfcore bench`'s suite v1 leaves out), and none is tuned on."""
    from spfcore.workloads import generators

    assert set(tune.HELD_OUT) == generators.HELD_OUT
    assert generators.HELD_OUT <= set(generators.GENERATORS)
    assert not generators.HELD_OUT & set(tune.SHAPES)
