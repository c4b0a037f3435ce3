"""Trace readers and writers: Mooncake FAST'25 JSONL and spfcore's own JSONL.

Mooncake (kvcache-ai/Mooncake, FAST25-release/traces): one JSON object per
line with ``timestamp`` (ms since the trace start), ``input_length`` and
``output_length`` (tokens) and ``hash_ids`` (ids of the prompt's 512-token
blocks, the last, partial block included; equal ids at equal positions mean an
identical prefix).

* ``tokens_per_block=None`` keeps the hash ids only (``Request.hash_ids``,
  ``hash_block_tokens=512``, no token ids): for the simulator at block size
  512, where each id is one block key (:func:`spfcore.workloads.block_keys`).
* ``tokens_per_block=T`` materializes each hash id to a deterministic block of
  ``T`` token ids (drawn from ``numpy.random.default_rng([seed, id])`` in
  ``[3, vocab)``: equal ids give equal tokens in any process) for engine
  replay. Lengths are scaled by ``T / 512``: the prompt is the concatenation
  of the id blocks cut to ``ceil(input_length * T / 512)`` tokens (which keeps
  every id, since ``len(hash_ids) == ceil(input_length / 512)``), and
  ``output_tokens = max(1, ceil(output_length * T / 512))``.

spfcore's own JSONL holds one :class:`~spfcore.workloads.model.Request` per
line with all its fields (``attrs.asdict``). Both writers are atomic: the file
is written to a temporary file in the same folder and moved into place with
``os.replace``, so a reader never sees half a file.
"""

from __future__ import annotations

import codecs
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np

from spfcore.fileio import write_atomic
from spfcore.workloads.generators import MIN_TOKEN
from spfcore.workloads.model import Request, Workload

#: Tokens per ``hash_ids`` block in Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512


class TraceError(ValueError):
    """A malformed trace line; the message reads ``FILE:LINE: field 'NAME': problem``."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _lines(path: Path, limit: int | None):
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    with open(path, "rb") as fh:
        n = 0
        for lineno, raw in enumerate(fh, 1):
            if limit is not None and n >= limit:
                return
            bom = len(codecs.BOM_UTF8) if lineno == 1 and raw.startswith(codecs.BOM_UTF8) else 0
            try:  # a UTF-8 byte-order mark opening the file is skipped (editors on Windows write one)
                line = raw[bom:].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceError(f"{path}:{lineno}: not UTF-8 text (byte {bom + exc.start + 1}: {exc.reason})") from None
            if not line.strip():
                continue
            line = line.rstrip("\r\n")  # a truncated last object fails at its own end, not at the newline
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.pos + 1})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            n += 1
            yield lineno, obj


def detect_format(path: str | os.PathLike) -> str:
    """``"mooncake"`` or ``"spfcore"`` from the first non-empty line's fields.

    Raises:
        TraceError: empty file or a first line of neither format.
    """
    path = Path(path)
    for lineno, obj in _lines(path, 1):
        if "hash_ids" in obj and "input_length" in obj:
            return "mooncake"
        if "request_id" in obj:
            return "spfcore"
        raise TraceError(f"{path}:{lineno}: neither a Mooncake line (hash_ids, input_length) "
                         f"nor an spfcore line (request_id); fields: {sorted(obj)}")
    raise TraceError(f"{path.name}: empty trace")


def _field(path, lineno, obj, name, check, what):
    if name not in obj:
        raise TraceError(f"{path}:{lineno}: field {name!r}: missing")
    v = obj[name]
    if not check(v):
        raise TraceError(f"{path}:{lineno}: field {name!r}: expected {what}, got {v!r:.60}")
    return v


#: Token ids must fit the signed 64-bit integers block keys encode them as.
TOKEN_ID_LIMIT = 2**63


def _int_list(path, lineno, obj, name, elem_ok, what):
    """Field ``name``, a JSON list whose every element passes ``elem_ok``; the
    error names the first bad element (index, value, type)."""
    v = _field(path, lineno, obj, name, lambda v: isinstance(v, list), f"a list of {what}")
    if not all(map(elem_ok, v)):
        i, x = next((i, x) for i, x in enumerate(v) if not elem_ok(x))
        raise TraceError(f"{path}:{lineno}: field {name!r}: expected a list of {what}, "
                         f"got element {i} = {x!r:.40} ({type(x).__name__})")
    return v


def _block_tokens(cache: dict, hid: int, seed: int, tokens_per_block: int, vocab: int) -> list:
    b = cache.get(hid)
    if b is None:
        b = cache[hid] = np.random.default_rng([seed, hid]).integers(
            MIN_TOKEN, vocab, size=tokens_per_block).tolist()
    return b


#: Most materialized id blocks kept for reuse while reading (a bounded memo:
#: an id's tokens are a pure function of ``(seed, id)``, so dropping the memo
#: never changes what is read).
_TOKEN_MEMO_MAX = 1 << 16


def iter_mooncake(path: str | os.PathLike, *, limit: int | None = None, tokens_per_block: int | None = None,
                  seed: int = 0, vocab: int = 32000) -> Iterator[Request]:
    """Stream a Mooncake FAST'25 JSONL trace, one :class:`Request` per line,
    in file order; memory does not grow with the trace (the id -> tokens memo
    of materialized traces is bounded). Arguments, request fields and errors
    as :func:`read_mooncake`; an error is raised when its line is reached,
    after the requests before it were yielded.
    """
    path = Path(path)
    if tokens_per_block is not None and tokens_per_block < 1:
        raise ValueError(f"tokens_per_block must be >= 1, got {tokens_per_block}")
    nonneg = lambda v: _is_int(v) and v >= 0  # noqa: E731
    cache: dict[int, list] = {}
    last_t = -math.inf
    for lineno, obj in _lines(path, limit):
        ts = _field(path, lineno, obj, "timestamp", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                    and 0 <= v < math.inf, "a finite number of milliseconds >= 0")
        n_in = _field(path, lineno, obj, "input_length", lambda v: _is_int(v) and v >= 1, "an int >= 1")
        n_out = _field(path, lineno, obj, "output_length", nonneg, "an int >= 0")
        hids = _int_list(path, lineno, obj, "hash_ids", nonneg, "ints >= 0")
        if len(hids) != math.ceil(n_in / MOONCAKE_BLOCK_TOKENS):
            raise TraceError(f"{path}:{lineno}: field 'hash_ids': {len(hids)} ids for input_length "
                             f"{n_in} (expected ceil({n_in}/{MOONCAKE_BLOCK_TOKENS}))")
        if ts < last_t:
            raise TraceError(f"{path}:{lineno}: field 'timestamp': {ts} goes back in time (previous {last_t})")
        last_t = ts
        common = dict(request_id=f"mc-{lineno}", arrival_s=ts / 1000.0, hash_ids=tuple(hids),
                      hash_block_tokens=MOONCAKE_BLOCK_TOKENS)
        if tokens_per_block is None:
            yield Request(prompt_token_ids=(), output_tokens=max(1, n_out), num_prompt_tokens=n_in, **common)
        else:
            if len(cache) > _TOKEN_MEMO_MAX:
                cache.clear()
            n = math.ceil(n_in * tokens_per_block / MOONCAKE_BLOCK_TOKENS)
            toks: list[int] = []
            for h in hids:
                toks.extend(_block_tokens(cache, h, seed, tokens_per_block, vocab))
            yield Request(prompt_token_ids=toks[:n],
                          output_tokens=max(1, math.ceil(n_out * tokens_per_block / MOONCAKE_BLOCK_TOKENS)),
                          **common)


def _mooncake_params(path, limit, tokens_per_block, seed, vocab) -> dict:
    return {"trace": str(path), "format": "mooncake", "limit": limit, "tokens_per_block": tokens_per_block,
            "seed": seed, "vocab": vocab}


def read_mooncake(path: str | os.PathLike, *, limit: int | None = None, tokens_per_block: int | None = None,
                  seed: int = 0, vocab: int = 32000) -> Workload:
    """Read a Mooncake FAST'25 JSONL trace.

    Args:
        path: The trace file.
        limit: Keep the first ``limit`` requests (None: all).
        tokens_per_block: None keeps hash ids only (simulator at 512 tokens
            per block); an int materializes token ids, see the module doc.
        seed: Seed of the id -> tokens map (materialized traces only).
        vocab: Token ids lie in ``[3, vocab)``.

    Returns:
        Workload ``mooncake``; ``arrival_s = timestamp / 1000``; request ids
        ``mc-<line>``; no session ids (the trace has none).

    Raises:
        TraceError: a malformed line (file, line and field named; for
            ``hash_ids`` its first bad element: ids must be ints >= 0, not
            ``true`` or ``1.0``), timestamps going backwards, or ``hash_ids``
            not covering ``input_length``.
        OSError: the file cannot be read.
    """
    out = list(iter_mooncake(path, limit=limit, tokens_per_block=tokens_per_block, seed=seed, vocab=vocab))
    return Workload("mooncake", _mooncake_params(Path(path), limit, tokens_per_block, seed, vocab), out)


_REQ_FIELDS = {f.name: f for f in attrs.fields(Request)}


def _request_from(path: Path, lineno: int, obj: dict) -> Request:
    unknown = set(obj) - set(_REQ_FIELDS)
    if unknown:
        raise TraceError(f"{path}:{lineno}: field {sorted(unknown)[0]!r}: unknown (allowed: {', '.join(_REQ_FIELDS)})")
    nonneg = lambda x: _is_int(x) and x >= 0  # noqa: E731
    token = lambda x: _is_int(x) and 0 <= x < TOKEN_ID_LIMIT  # noqa: E731
    opt_str = lambda v: v is None or isinstance(v, str)  # noqa: E731
    kw = {
        "request_id": _field(path, lineno, obj, "request_id", lambda v: isinstance(v, str) and v, "a non-empty string"),
        "arrival_s": _field(path, lineno, obj, "arrival_s", lambda v: isinstance(v, (int, float))
                            and not isinstance(v, bool) and 0 <= v < math.inf, "a finite number of seconds >= 0"),
        "prompt_token_ids": _int_list(path, lineno, obj, "prompt_token_ids", token, "ints in [0, 2**63)"),
        "output_tokens": _field(path, lineno, obj, "output_tokens", lambda v: _is_int(v) and v >= 1, "an int >= 1"),
    }
    checks = {"session_id": (opt_str, "a string or null"), "prefix_group": (opt_str, "a string or null"),
              "hash_block_tokens": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
              "num_prompt_tokens": (lambda v: _is_int(v) and v >= 1, "an int >= 1")}
    for name, (check, what) in checks.items():
        if name in obj:
            kw[name] = _field(path, lineno, obj, name, check, what)
    if obj.get("hash_ids") is not None:
        kw["hash_ids"] = _int_list(path, lineno, obj, "hash_ids", nonneg, "ints >= 0")
    elif "hash_ids" in obj:
        kw["hash_ids"] = None
    if "output_token_ids" in obj:
        kw["output_token_ids"] = _int_list(path, lineno, obj, "output_token_ids", token, "ints in [0, 2**63)")
    if kw["prompt_token_ids"] and "num_prompt_tokens" in kw and kw["num_prompt_tokens"] != len(kw["prompt_token_ids"]):
        raise TraceError(f"{path}:{lineno}: field 'num_prompt_tokens': {kw['num_prompt_tokens']} differs from "
                         f"len(prompt_token_ids) = {len(kw['prompt_token_ids'])}")
    if not kw["prompt_token_ids"] and (kw.get("hash_ids") is None or "num_prompt_tokens" not in kw):
        raise TraceError(f"{path}:{lineno}: field 'prompt_token_ids': empty, and no hash_ids + num_prompt_tokens")
    if kw.get("hash_ids") is not None:
        kw["hash_ids"] = tuple(kw["hash_ids"])
    return Request(**kw)


def iter_jsonl(path: str | os.PathLike, *, limit: int | None = None) -> Iterator[Request]:
    """Stream spfcore's own JSONL, one :class:`Request` per line, in file
    order. Checks and errors as :func:`read_jsonl`, raised when their line is
    reached. The repeated-id check keeps the set of request ids seen, so
    memory grows by one id string per request (Mooncake traces have no such
    set: their ids are line numbers).
    """
    path = Path(path)
    seen: set[str] = set()
    last = 0.0
    for lineno, obj in _lines(path, limit):
        r = _request_from(path, lineno, obj)
        if r.request_id in seen:
            raise TraceError(f"{path}:{lineno}: field 'request_id': {r.request_id!r} repeats")
        if r.arrival_s < last:
            raise TraceError(f"{path}:{lineno}: field 'arrival_s': {r.arrival_s} goes back in time")
        seen.add(r.request_id)
        last = r.arrival_s
        yield r


def read_jsonl(path: str | os.PathLike, *, limit: int | None = None) -> Workload:
    """Read spfcore's own JSONL (one Request per line, fields as in
    :class:`~spfcore.workloads.model.Request`).

    Raises:
        TraceError: a malformed line (file, line and field named; for a list
            field its first bad element, e.g. a token id outside ``[0,
            2**63)`` or a ``true`` / ``1.0`` id), a repeated request id, or
            arrival times going backwards.
    """
    path = Path(path)
    out = list(iter_jsonl(path, limit=limit))
    return Workload(path.stem, {"trace": str(path), "format": "spfcore", "limit": limit}, out)


@attrs.frozen
class TraceStream:
    """A trace file read lazily: every iteration re-reads the file from the
    start and yields :class:`Request` objects one at a time, so several passes
    (a scan, one replay per arm, a policy's future) hold one request at a
    time. Duck-types :class:`Workload` where only ``name``, ``params`` and an
    iterable ``requests`` are needed.

    Attributes:
        path: The trace file (Mooncake or spfcore JSONL, see :func:`detect_format`).
        limit: Keep the first ``limit`` requests (None: all).
        tokens_per_block: Mooncake: materialize hash ids (see :func:`read_mooncake`).
        seed: Mooncake: seed of the id -> tokens map.
        vocab: Mooncake: token ids lie in ``[3, vocab)``.
        format: ``"mooncake"`` or ``"spfcore"``, detected on construction.

    Raises:
        TraceError: on construction, an empty trace or an unknown format;
            while iterating, a malformed line (file, line and field named).
    """

    path: Path = attrs.field(converter=Path)
    limit: int | None = None
    tokens_per_block: int | None = None
    seed: int = 0
    vocab: int = 32000
    format: str = attrs.field(init=False)

    @format.default
    def _detect(self) -> str:
        return detect_format(self.path)

    @property
    def name(self) -> str:
        """``mooncake``, or the file's stem for spfcore JSONL (as the readers name the workload)."""
        return "mooncake" if self.format == "mooncake" else self.path.stem

    @property
    def params(self) -> dict:
        """The reader's options, as :func:`read_trace`'s ``Workload.params``."""
        if self.format == "mooncake":
            return _mooncake_params(self.path, self.limit, self.tokens_per_block, self.seed, self.vocab)
        return {"trace": str(self.path), "format": "spfcore", "limit": self.limit}

    @property
    def requests(self) -> TraceStream:
        """Itself: an iterable of requests that re-reads the file on every pass."""
        return self

    def __iter__(self) -> Iterator[Request]:
        if self.format == "mooncake":
            return iter_mooncake(self.path, limit=self.limit, tokens_per_block=self.tokens_per_block,
                                 seed=self.seed, vocab=self.vocab)
        return iter_jsonl(self.path, limit=self.limit)


def read_trace(path: str | os.PathLike, *, limit: int | None = None, tokens_per_block: int | None = None,
               seed: int = 0) -> Workload:
    """Read a Mooncake or spfcore JSONL trace (format auto-detected from the
    first line). ``tokens_per_block`` and ``seed`` apply to Mooncake only.

    Raises:
        TraceError: see :func:`read_mooncake`, :func:`read_jsonl`.
    """
    if detect_format(path) == "mooncake":
        return read_mooncake(path, limit=limit, tokens_per_block=tokens_per_block, seed=seed)
    return read_jsonl(path, limit=limit)


def write_jsonl(workload: Workload, path: str | os.PathLike) -> Path:
    """Write ``workload`` as spfcore JSONL (one Request per line, all fields),
    atomically. Returns the path."""
    def lines():
        for r in workload.requests:
            d = attrs.asdict(r)
            for k in ("prompt_token_ids", "output_token_ids", "hash_ids"):
                if d[k] is not None:
                    d[k] = list(d[k])
            yield json.dumps(d, separators=(",", ":"))
    return write_atomic(path, lines())


def write_mooncake(workload: Workload, path: str | os.PathLike) -> Path:
    """Write ``workload`` as Mooncake JSONL, atomically. Every request needs
    ``hash_ids`` at 512 tokens per id; ``timestamp = round(arrival_s * 1000)``.

    Raises:
        ValueError: a request without hash ids at 512 tokens per id (nothing
            is written).
    """
    rows = []
    for r in workload.requests:
        if r.hash_ids is None or r.hash_block_tokens != MOONCAKE_BLOCK_TOKENS:
            raise ValueError(f"request {r.request_id}: no hash_ids at {MOONCAKE_BLOCK_TOKENS} tokens per id; "
                             "cannot write a Mooncake trace")
        rows.append(json.dumps({"timestamp": round(r.arrival_s * 1000), "input_length": r.num_prompt_tokens,
                                "output_length": r.output_tokens, "hash_ids": list(r.hash_ids)}))
    return write_atomic(path, rows)
