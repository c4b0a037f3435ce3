"""The store of a run: the sidecar of finished cells beside the results
file (resume, merge of other runs' cells, wall time across calls) and where a
run's files go.

The sidecar ``<output stem>.cells.jsonl`` starts with a header line holding
the run's *fingerprint* (the part of the configuration that determines cell
values) and ``schema_version`` (:data:`spfcore.run.cell.CELL_SCHEMA_VERSION`),
then one :class:`~spfcore.run.cell.StoredCell` per line, appended and fsynced
as each cell finishes, and ``{"call_wall_s"}`` per call. A later run with the
same fingerprint skips the finished cells; one with another raises
:class:`GateResumeError`. One writer per results file:
:func:`spfcore.fileio.hold_output_lock`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from spfcore.report.results import json_default
from spfcore.run.cell import CELL_SCHEMA_VERSION, CellFormatError, StoredCell
from spfcore.run.spec import GateConfigError

class GateResumeError(RuntimeError):
    """The results' sidecar belongs to a run with another configuration."""


class MergeSourceError(GateResumeError):
    """A ``--merge-from`` run holds another configuration's cells (or a
    malformed sidecar): a bad argument, found before this run writes anything."""


def sidecar_path(output: str | os.PathLike) -> Path:
    """``runs/x/results.json`` -> ``runs/x/results.cells.jsonl``."""
    output = Path(output)
    return output.with_name(output.stem + ".cells.jsonl")


def merge_sources(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """``--merge-from`` values as results files: a folder means its
    ``results.json``. Only the sidecar beside each is read.

    Raises:
        GateConfigError: a source without a sidecar.
    """
    out = []
    for p in map(Path, paths):
        res = p / "results.json" if p.is_dir() else p
        if not sidecar_path(res).is_file():
            raise GateConfigError(f"--merge-from {p}: no finished cells there ({sidecar_path(res)} is missing)")
        out.append(res)
    return out


def run_folder(output: str | os.PathLike) -> Path:
    """The folder a run's own files go in (a load run's ``load-<F>/`` levels and
    ``capacity.json``): ``runs/x/results.json`` -> ``runs/x``; any other name,
    ``out/h200.json`` -> ``out/h200`` (so two runs written beside each other
    never share a level folder)."""
    output = Path(output)
    return output.parent if output.name == "results.json" else output.with_suffix("")


def level_path(output: str | os.PathLike, load: float) -> Path:
    """Results file of one load level of the run at ``output``: ``<run folder>/load-<F>/results.json``
    (:func:`run_folder`)."""
    return run_folder(output) / f"load-{load:g}" / "results.json"


def _read_sidecar(path: Path, fingerprint: dict, hint: str, fix: str = "use --fresh",
                  error: type[GateResumeError] = GateResumeError) -> tuple[list[StoredCell], float]:
    """The cells of the sidecar at ``path`` and the wall seconds of the calls
    recorded in it; a last line cut by a crash mid-write is dropped.

    Raises:
        GateResumeError: (``error``) the header's fingerprint is not ``fingerprint`` (the
            message names the fields that differ, then ``hint``), its version
            is not :data:`~spfcore.run.cell.CELL_SCHEMA_VERSION`, or a line
            before the last is not JSON or not a cell (file, line and field
            named, then ``fix``).
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        head = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError:
        raise error(f"{path}:1: not valid JSON; {fix}") from None
    if head.get("sidecar", CELL_SCHEMA_VERSION) != CELL_SCHEMA_VERSION:
        raise error(f"{path}:1: field 'sidecar' is {head.get('sidecar')!r}; this spfcore reads "
                              f"{CELL_SCHEMA_VERSION}; {hint}")
    if head.get("fingerprint") != json.loads(json.dumps(fingerprint, default=json_default)):
        old = head.get("fingerprint") or {}
        diff = sorted(k for k in set(old) | set(fingerprint)
                      if json.dumps(old.get(k), default=str) != json.dumps(fingerprint.get(k), default=str))
        raise error(f"{path}: finished cells of a run with another configuration (differs in: "
                              f"{', '.join(diff) or 'header'}); {hint}")
    cells, wall = [], 0.0
    for n, line in enumerate(lines[1:], start=2):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):  # a line cut by a crash mid-write
                break
            raise error(f"{path}:{n}: not valid JSON; {fix}") from None
        if "call_wall_s" in rec:
            wall += float(rec["call_wall_s"])
            continue
        try:
            cells.append(StoredCell.from_json(rec))
        except CellFormatError as exc:
            raise error(f"{path}:{n}: {exc}; {fix}") from None
    return cells, wall


def read_merge_source(path: Path, fingerprint: dict) -> list[StoredCell]:
    """The cells of ``--merge-from`` sidecar ``path``, for a run of ``fingerprint``.

    Raises:
        MergeSourceError: another configuration's cells, or a malformed sidecar.
    """
    return _read_sidecar(path, fingerprint, "--merge-from takes runs of the same configuration only",
                         fix="not a sidecar spfcore can merge", error=MergeSourceError)[0]


class Store:
    """The sidecar of one run (see the module doc): ``done`` and ``failed``
    map a cell key (:attr:`StoredCell.key`) to its record.

    Args:
        path: The sidecar (:func:`sidecar_path` of the results file).
        fingerprint: What determines the cells' values (JSON-serialisable).
        fresh: Discard the cells already there.

    Raises:
        GateResumeError: the sidecar holds another configuration's cells (or is malformed).
    """

    def __init__(self, path: Path, fingerprint: dict, fresh: bool):
        self.path, self.fingerprint = path, fingerprint
        self.done: dict[tuple, dict] = {}
        self.failed: dict[tuple, dict] = {}
        self.wall_s = 0.0  # wall seconds of the earlier calls on this sidecar
        if fresh and path.exists():
            path.unlink()
        if path.exists():
            cells, self.wall_s = _read_sidecar(path, fingerprint, "use a new --output or --fresh")
            for c in cells:
                self._note(c)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"sidecar": CELL_SCHEMA_VERSION, "fingerprint": fingerprint})

    def _note(self, c: StoredCell) -> None:
        if c.failed:
            self.failed[c.key] = c.record
        else:
            self.done[c.key] = c.record
            self.failed.pop(c.key, None)

    def merge(self, path: Path) -> int:
        """Append the cells of another run's sidecar at ``path`` (same
        fingerprint) that this one has not finished; returns how many.

        Raises:
            GateResumeError: ``path`` holds a run with another configuration.
            OSError: ``path`` cannot be read.
        """
        n = 0
        for c in read_merge_source(path, self.fingerprint):
            if c.key not in self.done:
                self.put(c.kind, c.arm, c.seed, c.record, c.repeat)
                n += 1
        return n

    def add_wall(self, seconds: float) -> float:
        """Record this call's wall seconds; returns the total over every call on this sidecar."""
        self._append({"call_wall_s": round(seconds, 3)})
        self.wall_s += seconds
        return self.wall_s

    def _append(self, obj) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(obj, default=json_default) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def put(self, kind: str, arm: str, seed: int, cell: dict, repeat: int = 0) -> None:
        """Record a finished (or failed) cell; ``repeat`` > 0: a further pass over the seed,
        keyed ``(kind, arm, seed, repeat)`` (the first pass keeps the 3-tuple key)."""
        c = StoredCell(kind, arm, seed, cell, repeat)
        self._append(c.to_json())
        self._note(c)
