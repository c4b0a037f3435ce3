"""benchmarks/reuse_signal.py: the sample builder's labels and features, and
its AUC, on inputs small enough to check by hand (the lightgbm fit itself is
a library call and is not re-tested here)."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("reuse_signal", ROOT / "benchmarks" / "reuse_signal.py")
rs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rs)


def test_auc_of_a_known_ranking():
    y = np.array([False, False, True, True])
    assert rs.auc(np.array([0.1, 0.4, 0.35, 0.8]), y) == 0.75
    assert rs.auc(np.array([0.1, 0.2, 0.3, 0.4]), y) == 1.0


def test_access_samples_labels_and_features():
    # the last key of each prompt is its partial block: never stored, never sampled
    views = [SimpleNamespace(block_keys=k) for k in
             (("a", "b", "x0"), ("a", "c", "x1"), ("a", "b", "x2"), ("a", "b", "d", "x3"))]
    X, y, t = rs.samples(views, horizon=1)["access"]
    # a, b | a, c | a, b | a, b, d: reused within 1 arrival?
    assert y.tolist() == [True, False, True, False, True, True, False, False, False]
    assert t.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 3]
    row = dict(zip(rs.ACCESS, X[5].tolist()))  # b at arrival 2: its second access
    assert row == {"cont": 1, "depth": 1, "count": 2, "meangap": 2.0, "fromend": 1, "plen": 3, "nnew": 1,
                   "seen": 2, "turn": 1, "gap1": 2, "gap2": row["gap2"], "gap3": row["gap3"], "age_first": 2}
    assert np.isnan(row["gap2"]) and np.isnan(row["gap3"])
    X2, y2, _ = rs.samples(views, horizon=2)["access"]
    assert y2.tolist() == [True, True, True, False, True, True, False, False, False]  # b comes back 2 later
