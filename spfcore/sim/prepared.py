"""A request stream keyed once and kept on disk as memory-mapped arrays.

Reading a trace and computing its block hashes (:func:`spfcore.keys.chain_keys_from_ids`,
one BLAKE2b digest per block reference) costs more than a compiled replay
of it: at 1M Mooncake requests (18.7M block references) about 50 s of every
``lru`` cell. :func:`write_prepared` makes that pass once, for one block
size, and writes what every sequential replay needs as ``.npy`` arrays;
:func:`open_prepared` maps them (``numpy.load(mmap_mode="r")``: the pages
are the OS's page cache, shared by every process that maps them, and no
process copies them), and :func:`spfcore.sim.simulator.simulate_stream`
replays a :class:`PreparedStream` as it replays the trace itself, with the
same decisions and the same record (timings aside):

* the compiled replays (``lru``, ``belady_oracle``, ``frequency``,
  ``session_ttl``) read the interned key ids straight from the maps
  (``belady_oracle`` its future index too; ``session_ttl`` renumbers them
  chunk by chunk, and the session ids);
* a policy driven through its hooks gets, request by request, the same
  :class:`~spfcore.views.RequestView` objects and block hashes (Python
  ints, rebuilt from the stored 128-bit keys) as from the trace.

Folder layout (one folder per stream; ``n`` requests, ``R`` prompt block
references, ``D`` decode blocks, ``K`` distinct keys)::

    meta.json          kind, version, block size, the facts below, the
                       source's identity, and per array: file, dtype,
                       shape, bytes, SHA-256 (written last)
    arrival_s.npy      float64[n]   the request's own arrival time, s
    prompt_tokens.npy  int64[n]     prompt length, tokens
    n_prompt.npy       int64[n]     blocks after prefill, cdiv(P, bs)
    n_total.npy        int64[n]     blocks at the end, cdiv(P + O - 1, bs)
    nf.npy, n_look.npy int64[n]     full prompt blocks; blocks looked up
    bk_off.npy         int64[n+1]   request i's prompt keys: bk[bk_off[i]:bk_off[i+1]]
    bk.npy             int64[R]     key ids of RequestView.block_keys
    dk_off.npy, dk.npy int64[n+1], int64[D]  key ids of the decode blocks
    key_hi.npy, key_lo.npy  uint64[K]  key id -> key: (hi << 64) | lo
    rid_off.npy, rid.npy    int64[n+1], uint8  request ids, UTF-8
    sid.npy, group.npy int64[n]     session id / prefix group: index into
                                    the name table, -1 for None
    name_off.npy, names.npy int64[S+1], uint8  the name table, UTF-8
    uses_off.npy, uses.npy  int64[K+1], int64  Belady's future index
                       (:func:`spfcore.sim.simulator._future_index`)

Disk: about 8 bytes per block reference, twice (keys and future index),
plus 16 per distinct key and about 100 per request (1M Mooncake requests:
about 0.5 GB).

Integrity: :func:`open_prepared` checks every file's presence, size, dtype
and shape against ``meta.json`` (cheap: every opening), and with
``verify=True`` its SHA-256 (one read of the folder: the sweep's driver, once
per run); a mismatch raises :class:`PreparedStreamError` naming the file.
:func:`ensure_prepared` writes a folder atomically (a temporary folder
renamed into place, under a ``filelock`` lock), rebuilds one that fails the
check, and is safe when several processes ask for the same folder at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import attrs
import numpy as np

from spfcore.fileio import write_atomic
from spfcore.views import RequestView

KIND = "spfcore-prepared-stream"
VERSION = 1
_M64 = (1 << 64) - 1
#: Per-request arrays (length n), in file order, and their dtypes.
_PER_REQUEST = {"arrival_s": "<f8", "prompt_tokens": "<i8", "n_prompt": "<i8", "n_total": "<i8", "nf": "<i8",
                "n_look": "<i8", "sid": "<i8", "group": "<i8"}
_DTYPES = {**_PER_REQUEST, "bk_off": "<i8", "bk": "<i8", "dk_off": "<i8", "dk": "<i8", "key_hi": "<u8",
           "key_lo": "<u8", "rid_off": "<i8", "rid": "|u1", "name_off": "<i8", "names": "|u1",
           "uses_off": "<i8", "uses": "<i8"}


class PreparedStreamError(ValueError):
    """A prepared stream folder that is missing, partial or corrupt; the
    message names the file (and the field: size, dtype, shape or SHA-256)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_prepared(requests: Iterable, block_size: int, path: str | os.PathLike, *,
                   info: dict | None = None) -> Path:
    """Key ``requests`` once at ``block_size`` and write the stream folder
    ``path`` (see the module doc), atomically: the arrays go to a temporary
    folder beside ``path`` that is renamed onto it at the end, so ``path``
    is whole or absent; an error leaves nothing behind.

    The keys are :func:`spfcore.sim.simulator.iter_plans`'s, so a replay of
    the folder is the replay of ``requests``. Memory while writing: the
    arrays (about 16 bytes per block reference), and one dict entry per
    distinct key (about 100 bytes each: 0.7 GB for 7.1M keys); time: one
    keyed pass (:func:`~spfcore.sim.simulator.iter_plans`) plus a sort of
    the block references (the future index).

    Args:
        requests: Requests in arrival order (a TraceStream, a tuple...);
            read once.
        block_size: Tokens per block (>= 1).
        path: The folder to create; it must not exist.
        info: JSON-ready facts recorded in ``meta.json`` as ``"info"``
            (e.g. the source's identity; ``name`` and ``params`` give the
            stream's :attr:`PreparedStream.name` / ``params``).

    Returns:
        ``path`` as a Path.

    Raises:
        ValueError: as :func:`~spfcore.sim.simulator.iter_plans` (bad block
            size, keys not computable, no prompt or output token).
        spfcore.workloads.traces.TraceError: a malformed trace line.
        FileExistsError: ``path`` exists.
        OSError: the folder cannot be written.
    """
    from spfcore.sim.simulator import _future_index, iter_plans

    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path}: exists (a prepared stream is never overwritten)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        col = {k: array("d" if v == "<f8" else "q") for k, v in _PER_REQUEST.items()}
        bk, dk, bk_off, dk_off, rid_off, name_off = (array("q") for _ in range(6))
        bk_off.append(0), dk_off.append(0), rid_off.append(0), name_off.append(0)
        rid, names = bytearray(), bytearray()
        ids: dict = {}
        name_ids: dict = {}
        sd = ids.setdefault

        def name(s) -> int:
            if s is None:
                return -1
            j = name_ids.get(s)
            if j is None:
                j = name_ids[s] = len(name_ids)
                names.extend(s.encode("utf-8", "surrogatepass"))
                name_off.append(len(names))
            return j

        for view, lookup, fk, dks, n_prompt, n_total, arrival_s in iter_plans(requests, block_size):
            bk.extend([sd(k, len(ids)) for k in view.block_keys])  # len(ids) is read before each insert
            dk.extend([sd(k, len(ids)) for k in dks])
            bk_off.append(len(bk))
            dk_off.append(len(dk))
            rid.extend(view.request_id.encode("utf-8", "surrogatepass"))
            rid_off.append(len(rid))
            col["arrival_s"].append(arrival_s)
            col["prompt_tokens"].append(view.num_prompt_tokens)
            col["n_prompt"].append(n_prompt)
            col["n_total"].append(n_total)
            col["nf"].append(len(fk))
            col["n_look"].append(len(lookup))
            col["sid"].append(name(view.session_id))
            col["group"].append(name(view.prefix_group))
        arrs = {k: np.frombuffer(v, np.dtype(_PER_REQUEST[k])) if len(v) else np.zeros(0, _PER_REQUEST[k])
                for k, v in col.items()}
        del col
        i64 = lambda a: np.frombuffer(a, np.int64) if len(a) else np.zeros(0, np.int64)  # noqa: E731
        arrs.update(bk=i64(bk), bk_off=i64(bk_off), dk=i64(dk), dk_off=i64(dk_off), rid_off=i64(rid_off),
                    name_off=i64(name_off), rid=np.frombuffer(bytes(rid), np.uint8),
                    names=np.frombuffer(bytes(names), np.uint8))
        nkeys = len(ids)
        arrs["key_hi"] = np.fromiter((k >> 64 for k in ids), np.uint64, nkeys)
        arrs["key_lo"] = np.fromiter((k & _M64 for k in ids), np.uint64, nkeys)
        del ids, sd
        n = len(arrs["n_total"])
        # distinct blocks the cache ever holds (SimInput.unique_blocks): full prompt blocks and decode blocks
        counts = np.diff(arrs["bk_off"])
        pos = np.arange(len(arrs["bk"]), dtype=np.int64) - np.repeat(arrs["bk_off"][:-1], counts)
        held = np.zeros(nkeys, np.bool_)
        held[arrs["bk"][pos < np.repeat(arrs["nf"], counts)]] = True
        held[arrs["dk"]] = True
        unique = int(held.sum())
        del counts, pos, held
        arrs["uses"], arrs["uses_off"] = _future_index(arrs["bk"], arrs["bk_off"], nkeys)
        worst = int(np.argmax(arrs["n_total"])) if n else None
        facts = {"num_requests": n, "blocks_total": int(arrs["n_total"].sum()),
                 "worst_blocks": int(arrs["n_total"][worst]) if n else 0,
                 "worst_request": None if worst is None else
                 bytes(arrs["rid"][arrs["rid_off"][worst]:arrs["rid_off"][worst + 1]]).decode("utf-8", "surrogatepass"),
                 "unique_blocks": unique, "num_keys": nkeys, "block_refs": len(arrs["bk"])}
        files = {}
        for k in _DTYPES:
            a = np.ascontiguousarray(arrs.pop(k), dtype=_DTYPES[k])
            f = tmp / f"{k}.npy"
            np.save(f, a, allow_pickle=False)
            files[k] = {"file": f.name, "dtype": a.dtype.str, "shape": list(a.shape), "bytes": f.stat().st_size,
                        "sha256": _sha256(f)}
            del a
        write_atomic(tmp / "meta.json", json.dumps({"kind": KIND, "version": VERSION, "block_size": block_size,
                                                    "facts": facts, "info": info or {}, "arrays": files},
                                                   indent=1) + "\n")
        os.rename(tmp, path)  # fails (nothing replaced) if another writer's folder appeared meanwhile
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _load(path: Path, meta: dict, name: str) -> np.ndarray:
    spec = meta["arrays"].get(name)
    f = path / (spec or {}).get("file", f"{name}.npy")
    if spec is None:
        raise PreparedStreamError(f"{path / 'meta.json'}: field 'arrays': no entry for {name!r}")
    try:
        size = f.stat().st_size
    except FileNotFoundError:
        raise PreparedStreamError(f"{f}: missing (the prepared stream is partial)") from None
    if size != spec["bytes"]:
        raise PreparedStreamError(f"{f}: field 'bytes': {size} bytes on disk, meta.json says {spec['bytes']} "
                                  "(partial or replaced file)")
    try:
        a = np.load(f, mmap_mode="r", allow_pickle=False) if np.prod(spec["shape"]) else np.load(f)
    except (ValueError, OSError) as exc:
        raise PreparedStreamError(f"{f}: not a readable .npy array ({exc})") from None
    if a.dtype.str != spec["dtype"] or list(a.shape) != spec["shape"]:
        raise PreparedStreamError(f"{f}: field 'dtype'/'shape': {a.dtype.str} {list(a.shape)} on disk, meta.json "
                                  f"says {spec['dtype']} {spec['shape']}")
    return a


def open_prepared(path: str | os.PathLike, *, verify: bool = False) -> PreparedStream:
    """Map the stream folder ``path`` (read-only, ``mmap_mode="r"``).

    Args:
        verify: Also compare every file's SHA-256 with ``meta.json`` (reads
            the whole folder once: about 1 s per GB).

    Raises:
        PreparedStreamError: no readable ``meta.json`` (not a stream, or one
            whose writing never finished), another format version, or a
            file missing, of another size, dtype or shape, or (``verify``)
            of other bytes; the message names the file.
    """
    path = Path(path)
    mp = path / "meta.json"
    try:
        meta = json.loads(mp.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PreparedStreamError(f"{mp}: missing (not a prepared stream, or a partial one)") from None
    except (OSError, ValueError) as exc:
        raise PreparedStreamError(f"{mp}: not readable JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("kind") != KIND or not isinstance(meta.get("arrays"), dict):
        raise PreparedStreamError(f"{mp}: field 'kind': not a {KIND} folder")
    if meta.get("version") != VERSION:
        raise PreparedStreamError(f"{mp}: field 'version': {meta.get('version')!r}, this code reads {VERSION}")
    arrays = {k: _load(path, meta, k) for k in _DTYPES}
    if verify:
        for k, spec in meta["arrays"].items():
            f = path / spec["file"]
            if _sha256(f) != spec["sha256"]:
                raise PreparedStreamError(f"{f}: field 'sha256': the file's bytes differ from meta.json's digest "
                                          "(corrupt)")
    return PreparedStream(path, meta, arrays)


def ensure_prepared(path: str | os.PathLike, requests: Callable[[], Iterable], block_size: int, *,
                    info: dict | None = None) -> PreparedStream:
    """The stream folder ``path``, written first if it is absent, and written
    again if it fails :func:`open_prepared` ``(verify=True)`` or was made at
    another block size or from another source (``info`` differs). Holds
    ``<path>.lock`` (``filelock``) meanwhile: a second process asking for
    the same folder waits, then maps the first one's. Temporary folders of
    a killed writer are removed.

    Args:
        requests: Called (once, only when the folder must be written) for
            the requests in arrival order.
        block_size, info: As :func:`write_prepared`.

    Raises:
        As :func:`write_prepared`.
    """
    from filelock import FileLock

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # a killed writer's (we hold the lock)
            _remove(stale)
        if path.exists():
            try:
                ps = open_prepared(path, verify=True)
                if ps.block_size == block_size and ps.meta.get("info", {}) == (info or {}):
                    return ps
            except PreparedStreamError:
                pass
            _discard(path)  # mapped elsewhere? those maps keep the old files (unlinked, not overwritten)
        write_prepared(requests(), block_size, path, info=info)
        return open_prepared(path)


def _discard(path: Path) -> None:
    gone = path.with_name(f".{path.name}.{os.getpid()}.old.tmp")
    os.rename(path, gone)
    _remove(gone)


def _remove(p: Path) -> None:
    """A folder or (where the folder should be) a file; rmtree alone leaves a file, silently."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


@attrs.frozen(eq=False)
class PreparedStream:
    """A prepared stream folder, mapped (:func:`open_prepared`). Stands in
    for the request stream in :func:`spfcore.sim.simulator.simulate_stream`
    and :func:`~spfcore.sim.simulator.ceilings_stream` (sequential mode)
    at its :attr:`block_size`.

    Attributes:
        path: The folder.
        meta: Its ``meta.json``.
        arrays: Name -> read-only memory-mapped array (see the module doc).
    """

    path: Path
    meta: dict
    arrays: dict = attrs.field(repr=False)

    @property
    def block_size(self) -> int:
        """Tokens per block the keys were made at."""
        return self.meta["block_size"]

    @property
    def num_requests(self) -> int:
        """Requests in the stream."""
        return self.meta["facts"]["num_requests"]

    @property
    def num_keys(self) -> int:
        """Distinct keys (prompt and decode blocks): key ids are ``0 .. num_keys - 1``."""
        return self.meta["facts"]["num_keys"]

    @property
    def unique_blocks(self) -> int:
        """Distinct blocks the cache ever holds in sequential replay
        (:meth:`spfcore.sim.cell.SimInput.unique_blocks`)."""
        return self.meta["facts"]["unique_blocks"]

    @property
    def scan(self):
        """The stream's :class:`~spfcore.sim.simulator.Scan` (what
        :func:`~spfcore.sim.simulator.scan` of the source gives)."""
        from spfcore.sim.simulator import Scan

        f = self.meta["facts"]
        return Scan(f["num_requests"], f["blocks_total"], f["worst_blocks"], f["worst_request"])

    @property
    def name(self) -> str:
        """The source's name (``info["name"]``), else the folder's."""
        return self.meta.get("info", {}).get("name") or self.path.name

    @property
    def params(self) -> dict:
        """The source's parameters (``info["params"]``), else ``{}``."""
        return self.meta.get("info", {}).get("params") or {}

    def flat(self) -> tuple:
        """The compiled replay's arrays ``(bk, bk_off, nf, n_look, dk,
        dk_off, n_prompt, n_total)`` (:func:`spfcore.sim._replay_nb.replay`),
        read-only maps."""
        a = self.arrays
        return tuple(a[k] for k in ("bk", "bk_off", "nf", "n_look", "dk", "dk_off", "n_prompt", "n_total"))

    def future(self) -> tuple:
        """Belady's future index ``(uses, uses_off)`` over every key id."""
        return self.arrays["uses"], self.arrays["uses_off"]

    def totals(self) -> tuple[int, int, int]:
        """``(requests, prompt tokens, prompt block references)``."""
        return self.num_requests, int(self.arrays["prompt_tokens"].sum()), self.meta["facts"]["block_refs"]

    def rid(self, i: int) -> str:
        """Request ``i``'s id."""
        off = self.arrays["rid_off"]
        return bytes(self.arrays["rid"][off[i]:off[i + 1]]).decode("utf-8", "surrogatepass")

    def first_too_big(self, num_blocks: int) -> int | None:
        """Index of the first request needing more than ``num_blocks - 1`` blocks, or None."""
        over = np.flatnonzero(self.arrays["n_total"] > num_blocks - 1)
        return int(over[0]) if len(over) else None

    def _names(self, idx: list) -> list:
        a = self.arrays
        off, blob = a["name_off"], a["names"]
        cache: dict = {-1: None}
        out = []
        for j in idx:
            s = cache.get(j, cache)
            if s is cache:
                s = cache[j] = bytes(blob[off[j]:off[j + 1]]).decode("utf-8", "surrogatepass")
            out.append(s)
        return out

    def _chunks(self, decode: bool, chunk: int = 256) -> Iterator[tuple]:
        """Per request ``(view, nf, n_look, decode keys, n_prompt, n_total,
        arrival_s)``, keys as Python ints; ``decode keys`` is ``()`` unless
        ``decode``. Reads ``chunk`` requests at a time (256: a policy's
        private memory peaks as with the trace itself; 4096 added ~16 MiB
        at 100k requests, from the chunk's transient keys)."""
        a = self.arrays
        hi, lo = a["key_hi"], a["key_lo"]
        n = self.num_requests
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            bo = a["bk_off"][s:e + 1].tolist()
            ids = a["bk"][bo[0]:bo[-1]]
            keys = [(h << 64) | x for h, x in zip(hi[ids].tolist(), lo[ids].tolist())]
            if decode:
                do = a["dk_off"][s:e + 1].tolist()
                ids = a["dk"][do[0]:do[-1]]
                dks = [(h << 64) | x for h, x in zip(hi[ids].tolist(), lo[ids].tolist())]
            ro = a["rid_off"][s:e + 1].tolist()
            rids = bytes(a["rid"][ro[0]:ro[-1]])
            sids = self._names(a["sid"][s:e].tolist())
            groups = self._names(a["group"][s:e].tolist())
            cols = [a[k][s:e].tolist() for k in ("prompt_tokens", "nf", "n_look", "n_prompt", "n_total", "arrival_s")]
            for j, (p, nf, nl, npr, nt, arr) in enumerate(zip(*cols)):
                i = s + j
                rid = rids[ro[j] - ro[0]:ro[j + 1] - ro[0]].decode("utf-8", "surrogatepass")
                view = RequestView(rid, sids[j], i, float(i), p, tuple(keys[bo[j] - bo[0]:bo[j + 1] - bo[0]]),
                                   groups[j])
                yield (view, nf, nl, tuple(dks[do[j] - do[0]:do[j + 1] - do[0]]) if decode else (), npr, nt, arr)

    def views(self) -> Iterator[RequestView]:
        """The policy-facing views, as :func:`spfcore.sim.simulator.iter_views` of the source."""
        for row in self._chunks(False):
            yield row[0]

    def plans(self, num_blocks: int | None = None) -> Iterator[tuple]:
        """The replay plans, as :func:`spfcore.sim.simulator.iter_plans` of
        the source (same keys, same tuples); with ``num_blocks``, a request
        needing more than ``num_blocks - 1`` blocks raises when it is
        reached, with iter_plans's message.

        Raises:
            ValueError: a request that does not fit (with ``num_blocks``).
        """
        from spfcore.sim.simulator import _too_big

        bs = self.block_size
        for view, nf, nl, dks, npr, nt, arr in self._chunks(True):
            if num_blocks is not None and nt > num_blocks - 1:
                raise _too_big(view.request_id, nt, bs, num_blocks)
            fk = view.block_keys[:nf]
            yield view, fk[:nl], fk, dks, npr, nt, arr

    def rows(self, hits: np.ndarray) -> Iterator[tuple]:
        """Per-request rows ``(request_id, session_id, prefix_group,
        arrival_s, prompt_tokens, hit_blocks)`` (see
        :func:`spfcore.sim.simulator._cell`) for the replay's ``hits``."""
        for (view, *_rest, arr), h in zip(self._chunks(False), hits.tolist()):
            yield view.request_id, view.session_id, view.prefix_group, arr, view.num_prompt_tokens, h


__all__ = ["KIND", "PreparedStream", "PreparedStreamError", "ensure_prepared", "open_prepared", "write_prepared"]
