"""The stored cell (spfcore.run.cell): one cattrs converter reads and writes
the sidecar line, typed (the error a CellError), the JSON unchanged."""

import json

import pytest

from spfcore.run.cell import CellError, CellFormatError, StoredCell, error_cell, error_of, error_text
from spfcore.run.store import Store, sidecar_path
from spfcore.runtime import PolicyError

OK = {"arm": "lru", "seed": 3, "status": "ok", "token_hit_rate": 0.25, "requests": [{"ttft_s": 0.5}]}


def test_the_line_is_the_version_1_line():
    # what the hand-written to_json of schema version 1 wrote, byte for byte
    assert json.dumps(StoredCell("sim", "lru", 3, OK).to_json()) == json.dumps(
        {"kind": "sim", "arm": "lru", "seed": 3, "cell": OK})
    assert StoredCell("engine", "lru", 3, OK, 2).to_json() == {"kind": "engine", "arm": "lru", "seed": 3, "cell": OK,
                                                               "repeat": 2}
    for c in (StoredCell("sim", "lru", 3, OK), StoredCell("ceilings", "*", 0, {"seed": 0}, 1)):
        assert StoredCell.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert StoredCell.from_json({"kind": "sim", "arm": "lru", "seed": 3, "cell": OK, "repeat": None}).repeat == 0


@pytest.mark.parametrize("line, words", [
    ({"kind": "sim", "arm": "lru", "cell": {}}, "field 'seed' missing"),
    ({"kind": "sim", "arm": "lru", "seed": "3", "cell": {}}, "'seed' must be <class 'int'>"),
    ({"kind": "gpu", "arm": "lru", "seed": 3, "cell": {}}, "'kind' must be in"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": []}, "'record' must be <class 'dict'>"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": {}, "repeat": -1}, "'repeat' must be >= 0"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": {"error": {"policy": "x"}}}, "field 'cell.error': field 'hook'"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": {"error": ["boom"]}}, "field 'cell.error': expected"),
    ({"kind": "sim", "arm": "lru", "seed": 3, "cell": {"error": {"policy": 1, "hook": None, "message": "m"}}},
     "field 'cell.error': 'policy' must be"),
    (["sim"], "expected a JSON object, got list"),
])
def test_a_bad_line_names_the_field(line, words):
    with pytest.raises(CellFormatError) as err:
        StoredCell.from_json(line)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_error_is_typed():
    exc = PolicyError("policy 'p' failed in hook spfcore_score_blocks: boom", policy="p", hook="spfcore_score_blocks")
    cell = error_cell("p", 1, RuntimeError("wrapped").with_traceback(None))
    assert cell["error"] == {"policy": "p", "hook": None, "message": "RuntimeError: wrapped"}
    try:
        raise RuntimeError("engine died") from exc
    except RuntimeError as outer:
        err = error_of(outer, "p")
    assert err == {"policy": "p", "hook": "spfcore_score_blocks", "message": str(exc)}
    c = StoredCell("engine", "p", 1, {"arm": "p", "seed": 1, "status": "error", "error": err})
    assert c.failed and c.error == CellError("p", "spfcore_score_blocks", str(exc))
    assert error_text(c.error) == error_text(err) == str(exc)  # the message names the hook already
    assert CellError("p", "spfcore_blocks_hit", "boom").text() == "boom [hook spfcore_blocks_hit]"
    old = StoredCell.from_json({"kind": "sim", "arm": "p", "seed": 1, "cell": {"error": "ValueError: old file"}})
    assert old.error == CellError(None, None, "ValueError: old file") and old.failed
    assert not StoredCell("sim", "p", 1, OK).failed and StoredCell("sim", "p", 1, OK).error is None


def test_the_store_reads_back_what_it_wrote(tmp_path):
    path = sidecar_path(tmp_path / "results.json")
    s = Store(path, {"f": 1}, fresh=False)
    s.put("sim", "lru", 3, OK)
    s.put("engine", "p", 3, error_cell("p", 3, ValueError("bad")))
    s.put("engine", "lru", 3, OK, 1)
    lines = path.read_text().splitlines()
    assert json.loads(lines[1]) == {"kind": "sim", "arm": "lru", "seed": 3, "cell": OK}
    again = Store(path, {"f": 1}, fresh=False)
    assert again.done == s.done == {("sim", "lru", 3): OK, ("engine", "lru", 3, 1): OK}
    assert list(again.failed) == [("engine", "p", 3)]
