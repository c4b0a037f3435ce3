"""Sweeps: a grid of simulator cells (inputs x seeds x policy variants x cache
sizes), each an independent task, run in this process, on local worker
processes or on a Ray cluster, streamed to a folder of one JSON per cell, and
rendered as a table and miss-ratio curves.

A *cell* is one sequential replay (:meth:`spfcore.sim.cell.SimInput.run`, the
replay ``spfcore simulate`` uses): an input (a trace, streamed, or a generated
workload), a seed, a policy with its options, and a cache size given in blocks
(vLLM ``num_gpu_blocks``, null block included), as a fraction of the input's
distinct blocks, or as the infinite cache (LRU at a size where nothing is
evicted: the infinite-cache line).

Folder layout (``OUT``)::

    OUT/sweep.json          the last grid run here: its options and its cell keys
    OUT/cells/<key>.json    one per cell: {"key", "config", "status", "cell", ...}
    OUT/summary.json        the merged table (per input, variant and size: seed means)
    OUT/mrc.png             miss-ratio curves, one panel per input
    OUT/sweep.lock          held by a live run (a second live run is refused)
    OUT/inputs/<key>.json   per streamed trace and block size (and seed, with --tokens-per-block only): its
                            scan and distinct-block count,
                            made once (:func:`input_facts`) and sent with every cell
    OUT/inputs/<key>.stream/  the same trace read and keyed once: a prepared stream
                            (:mod:`spfcore.sim.prepared`, ~0.5 GB per 1M Mooncake requests) that
                            every cell memory-maps instead of re-reading and re-keying the trace

Keys: ``<key>`` is the SHA-256 (first 32 hex digits) of the cell's full
configuration as canonical JSON (:meth:`Cell.config`): the input (a trace's
path, size and SHA-256 of its bytes; a generator's name and every flag), seed,
block size, policy, options, size, hook budget, and the code digest of
spfcore and the policy's package (:func:`spfcore.run.provenance.code_digest`).
A finished cell whose file exists is never run again (resume; a second run
of the same grid runs nothing); a changed trace, option or line of code gives
new keys. Failed cells are written too and run again by the next run.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from spfcore.fileio import write_atomic

#: The policy whose cells draw the Belady line (the offline optimum: evict the block reused furthest ahead).
BELADY = "belady_oracle"
#: The ``policy`` of infinite-cache cells (LRU at a size where nothing is evicted).
INFINITE = "infinite"
KIND = "spfcore-sweep"
#: Cell fields that are timings (differ run to run); everything else is deterministic.
TIMING_FIELDS = ("wall_seconds", "hook_seconds", "policy_seconds", "evict_seconds")


#: Arms with a compiled sequential replay (:func:`spfcore.sim.simulator._compiled_kind`): cheap cells, run last.
_COMPILED = frozenset({INFINITE, "lru", BELADY, "session_ttl", "frequency",
                       "spf_expected_utility"})  # (session_ttl: in arrivals mode; spf: variant utility)


class SweepError(ValueError):
    """A sweep that cannot run or a folder that cannot be read; the message
    names the field (or file) at fault."""


class InputError(SweepError):
    """An input of the grid that no cell could replay (a malformed trace
    line, an empty trace, a block size its requests cannot be keyed at),
    found by :func:`check_inputs` before any cell runs.

    Attributes:
        param: The command-line option at fault (``--trace``,
            ``--block-size``, ``--workload``), for the CLI's usage error.
    """

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


# ------------------------------------------------------------------ the grid


@attrs.frozen
class Source:
    """One input of the grid.

    Attributes:
        trace: Trace path (Mooncake or spfcore JSONL), or None for a generator.
        limit, tokens_per_block: Trace options (see ``spfcore simulate``).
        workload: Generator name (when ``trace`` is None).
        flags: Generator flags (already converted).
    """

    trace: str | None = None
    limit: int | None = None
    tokens_per_block: int | None = None
    workload: str | None = None
    flags: dict = attrs.field(factory=dict)

    @property
    def label(self) -> str:
        """A short name: the trace's file name (+ limit) or the generator's name (+ flags)."""
        if self.trace is not None:
            lim = f"[:{self.limit}]" if self.limit else ""
            tpb = f" T={self.tokens_per_block}" if self.tokens_per_block else ""
            return f"{Path(self.trace).name}{lim}{tpb}"
        flags = ",".join(f"{k}={v}" for k, v in sorted(self.flags.items()))
        return f"{self.workload}({flags})" if flags else str(self.workload)

    def spec(self):
        """The :class:`spfcore.workloads.options.WorkloadSpec` of this source."""
        from spfcore.workloads.options import WorkloadSpec

        if self.trace is not None:
            return WorkloadSpec(trace=self.trace, limit=self.limit, tokens_per_block=self.tokens_per_block)
        return WorkloadSpec(self.workload, dict(self.flags))

    def identity(self) -> dict:
        """What decides this input's content, for keys: a trace's absolute
        path, byte size and SHA-256; a generator's name and every flag
        (defaults included).

        Raises:
            SweepError: the trace cannot be read (field ``trace``).
        """
        if self.trace is not None:
            path = os.path.realpath(self.trace)
            try:
                return {"trace": path, "bytes": os.path.getsize(path), "sha256": file_digest(path),
                        "limit": self.limit, "tokens_per_block": self.tokens_per_block}
            except OSError as exc:
                raise SweepError(f"field 'trace': {self.trace}: {exc.strerror or exc}") from None
        from spfcore.workloads import generators

        return {"workload": self.workload, "flags": {**generators.defaults(self.workload), **self.flags}}


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 hex of a file's bytes (memoized per path, size and mtime).

    Raises:
        OSError: the file cannot be read.
    """
    st = os.stat(path)
    return _file_digest(os.path.realpath(path), st.st_size, st.st_mtime_ns)


@attrs.frozen
class Variant:
    """A policy with one set of options (one line of the curve)."""

    policy: str
    options: dict = attrs.field(factory=dict)

    @property
    def label(self) -> str:
        """``policy`` or ``policy[k=v,...]``."""
        if not self.options:
            return self.policy
        return f"{self.policy}[{','.join(f'{k}={v}' for k, v in sorted(self.options.items()))}]"


def variants(policies: Sequence[str], opt_grid: Mapping[str, Mapping[str, Sequence[str]]]) -> list[Variant]:
    """Every policy x the cartesian product of its option values.

    Args:
        policies: Policy names, in order.
        opt_grid: ``{policy: {key: [value, ...]}}`` (:func:`parse_option_grid`).

    Raises:
        SweepError: options for a policy not in ``policies`` (field ``--policy-opt``).
    """
    unknown = sorted(set(opt_grid) - set(policies))
    if unknown:
        raise SweepError(f"field '--policy-opt': options for policies not in the sweep: {unknown}")
    out = []
    for p in policies:
        keys = sorted(opt_grid.get(p, {}))
        for values in itertools.product(*(opt_grid[p][k] for k in keys)):
            out.append(Variant(p, dict(zip(keys, values))))
    return out


def parse_option_grid(items: Iterable[str]) -> dict[str, dict[str, list[str]]]:
    """``["NAME.KEY=V1,V2", ...]`` -> ``{NAME: {KEY: [V1, V2]}}`` (values are
    strings, checked later against the policy's ``Params``).

    Raises:
        SweepError: a malformed item, an empty or repeated value, or a key
            given twice (field ``--policy-opt``).
    """
    out: dict[str, dict[str, list[str]]] = {}
    for item in items:
        lhs, eq, rhs = item.partition("=")
        name, dot, key = lhs.partition(".")
        name, key = name.strip(), key.strip()
        if not eq or not dot or not name or not key:
            raise SweepError(f"field '--policy-opt': {item!r}: expected NAME.KEY=VALUE[,VALUE...]")
        values = [v.strip() for v in rhs.split(",")]
        if any(not v for v in values) or len(set(values)) != len(values):
            raise SweepError(f"field '--policy-opt': {item!r}: empty or repeated value")
        if key in out.get(name, {}):
            raise SweepError(f"field '--policy-opt': {name}.{key} given twice (list the values in one: "
                             f"{name}.{key}=A,B)")
        out.setdefault(name, {})[key] = values
    return out


def _size(s: Mapping) -> dict:
    if set(s) == {"blocks"} and isinstance(s["blocks"], int) and s["blocks"] >= 2:
        return {"blocks": s["blocks"]}
    if set(s) == {"fraction"} and isinstance(s["fraction"], (int, float)) and 0 < s["fraction"] <= 1:
        return {"fraction": float(s["fraction"])}
    if dict(s) == {"infinite": True}:
        return {"infinite": True}
    raise SweepError(f"field 'size': {dict(s)!r}: expected {{'blocks': int >= 2}}, {{'fraction': 0 < f <= 1}} "
                     "or {'infinite': True}")


def size_label(size: Mapping) -> str:
    """``256`` (blocks), ``10%`` (fraction) or ``inf``."""
    if "blocks" in size:
        return str(size["blocks"])
    if "fraction" in size:
        return f"{100 * size['fraction']:g}%"
    return "inf"


@attrs.frozen
class Cell:
    """One replay of the grid.

    Attributes:
        source: The input's :meth:`Source.identity`, plus ``"label"``.
        seed: Workload seed (>= 0).
        policy: Policy name, or :data:`INFINITE`.
        options: The policy's string options.
        size: ``{"blocks": N}``, ``{"fraction": f}`` or ``{"infinite": True}``.
        block_size: Tokens per block, or None for the input's default.
        hook_budget_ms: Hook time budget, ms, or None.
        code: Code digest (:func:`spfcore.run.provenance.code_digest` of the policy).
    """

    source: dict
    seed: int
    policy: str
    options: dict
    size: dict = attrs.field(converter=_size)
    block_size: int | None = None
    hook_budget_ms: float | None = None
    code: dict = attrs.field(factory=dict)

    def config(self) -> dict:
        """The full configuration, JSON-ready: what :attr:`key` digests."""
        return {"kind": "sim-cell", "mode": "sequential", **attrs.asdict(self, recurse=False)}

    @property
    def key(self) -> str:
        """SHA-256 (32 hex digits) of :meth:`config` as canonical JSON (sorted keys, no spaces)."""
        blob = json.dumps(self.config(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    @property
    def variant(self) -> str:
        """The curve this cell belongs to (:attr:`Variant.label`)."""
        return Variant(self.policy, self.options).label


@attrs.frozen
class Grid:
    """What a sweep runs: sources x seeds x variants x sizes, plus one
    infinite-cache cell per source and seed, and the Belady variant at every
    size, when ``ceilings``.

    Attributes:
        sources: Inputs (at least one).
        seeds: Seeds (ints >= 0, distinct).
        variants: Policy variants (at least one; distinct).
        sizes: Cache sizes (``{"blocks": N}`` / ``{"fraction": f}``; at least one; distinct).
        block_size: Tokens per block, or None (each input's default).
        hook_budget_ms: Hook budget, ms, or None.
        ceilings: Add the Belady and infinite-cache cells.
    """

    sources: tuple
    seeds: tuple
    variants: tuple
    sizes: tuple
    block_size: int | None = None
    hook_budget_ms: float | None = None
    ceilings: bool = True

    def __attrs_post_init__(self):
        for name, vals in (("sources", self.sources), ("seeds", self.seeds), ("variants", self.variants),
                           ("sizes", self.sizes)):
            if not vals:
                raise SweepError(f"field '{name}': at least one is required")
            if len(set(map(repr, vals))) != len(vals):
                raise SweepError(f"field '{name}': a value is given twice in {list(vals)}")
        if any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise SweepError(f"field 'seeds': need ints >= 0, got {list(self.seeds)}")
        for s in self.sizes:
            _size(s)
        if self.block_size is not None and self.block_size < 1:
            raise SweepError(f"field 'block_size': must be >= 1, got {self.block_size}")

    def cells(self) -> list[Cell]:
        """Every cell, grouped by input and seed (so a worker's opened input is reused).

        Raises:
            SweepError: a trace that cannot be read.
        """
        vs = list(self.variants)
        if self.ceilings and not any(v.policy == BELADY and not v.options for v in vs):
            vs.append(Variant(BELADY))
        codes: dict[str, dict] = {}

        def code(policy: str) -> dict:
            if policy not in codes:
                from spfcore.run.provenance import code_digest

                codes[policy] = code_digest([policy] if policy != INFINITE else [])
            return codes[policy]

        out = []
        for src in self.sources:
            ident = {**src.identity(), "label": src.label}
            for seed in self.seeds:
                common = dict(source=ident, seed=seed, block_size=self.block_size, hook_budget_ms=self.hook_budget_ms)
                if self.ceilings:
                    out.append(Cell(policy=INFINITE, options={}, size={"infinite": True}, code=code(INFINITE),
                                    **common))
                for v in vs:
                    for size in self.sizes:
                        out.append(Cell(policy=v.policy, options=dict(v.options), size=size, code=code(v.policy),
                                        **common))
        return out


# ------------------------------------------------------------------ one cell (runs in a worker)


def _ident_json(ident: Mapping) -> str:
    """An input's identity (:meth:`Source.identity`, a cell's ``source`` less its label) as canonical JSON."""
    return json.dumps({k: v for k, v in ident.items() if k != "label"}, sort_keys=True)


@functools.lru_cache(maxsize=2)
def _open(source_json: str, seed: int, block_size: int | None):
    from spfcore.sim.cell import open_input

    ident = json.loads(source_json)
    if "trace" in ident:
        if file_digest(ident["trace"]) != ident["sha256"]:
            raise SweepError(f"field 'trace': {ident['trace']} on {socket.gethostname()} is not the file the "
                             "sweep was keyed on (its SHA-256 differs)")
        src = Source(ident["trace"], ident["limit"], ident["tokens_per_block"])
    else:
        src = Source(workload=ident["workload"], flags=ident["flags"])
    return open_input(src.spec(), seed, block_size)


def _trace_stream(ident: Mapping, seed: int):
    """The TraceStream of a trace identity (:meth:`Source.identity`), after
    checking that the file here is the one the sweep was keyed on.

    Raises:
        SweepError: the file's SHA-256 differs (field ``trace``).
    """
    if file_digest(ident["trace"]) != ident["sha256"]:
        raise SweepError(f"field 'trace': {ident['trace']} on {socket.gethostname()} is not the file the "
                         "sweep was keyed on (its SHA-256 differs)")
    return Source(ident["trace"], ident["limit"], ident["tokens_per_block"]).spec().stream(seed)


@functools.lru_cache(maxsize=2)
def _open_known(source_json: str, seed: int, block_size: int | None, facts_json: str):
    """:func:`_open` of a trace whose :func:`input_facts` are known: no scan
    pass (and no distinct-block pass). With the facts' ``stream`` (a
    prepared stream folder, :func:`input_facts`) present on this host, the
    cell memory-maps it (no trace read, no keys computed: a cell's cost is
    its replay); without it (e.g. a Ray node that does not share the
    sweep's folder) the trace is streamed and keyed by the cell, with the
    same record.

    Raises:
        spfcore.sim.prepared.PreparedStreamError: the stream folder is
            partial or corrupt (the file named).
        SweepError: the trace here, or the stream's, is not the one the sweep was keyed on.
    """
    from spfcore.sim.cell import SimInput
    from spfcore.sim.prepared import open_prepared
    from spfcore.sim.simulator import Scan

    ident, facts = json.loads(source_json), json.loads(facts_json)
    sc = Scan(facts["num_requests"], facts["blocks_total"], facts["worst_blocks"], facts["worst_request"])
    if facts.get("stream") and os.path.isdir(facts["stream"]):
        ps = open_prepared(facts["stream"])
        info = ps.meta.get("info", {})
        if (info.get("source") != ident or info.get("seed") != _input_seed(ident, seed)
                or ps.block_size != facts["block_size"]
                or ps.scan != sc):
            raise SweepError(f"field 'stream': {facts['stream']} is not the prepared stream of this cell's trace, "
                             "seed and block size")
        return SimInput(ps, ps, ps.block_size, sc.infinite_blocks, sc, ps.unique_blocks)
    stream = _trace_stream(ident, seed)
    return SimInput(stream, stream, facts["block_size"], sc.infinite_blocks, sc, facts.get("unique_blocks"))


def _input_seed(ident: Mapping, seed: int) -> int:
    """The seed a trace's requests depend on: only a Mooncake trace materialized with
    ``tokens_per_block`` draws its tokens from it; any other trace is the same for every seed,
    so one prepared stream (``0``) serves all of them (not one identical stream per seed)."""
    return seed if ident.get("tokens_per_block") else 0


def _facts_key(source_json: str, seed: int, block_size: int | None) -> str:
    blob = json.dumps({"source": json.loads(source_json), "seed": seed, "block_size": block_size}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


#: What :func:`input_facts` returns besides ``stream``.
FACTS = ("block_size", "num_requests", "blocks_total", "worst_blocks", "worst_request", "unique_blocks")


def input_facts(folder: str | os.PathLike, source_json: str, seed: int, block_size: int | None) -> dict:
    """What every cell of a streamed trace would otherwise recompute on its
    own (reading and keying the trace, one scan pass, one distinct-block
    pass): made once per (trace digest, seed, block size) in one keyed pass
    (the seed is 0 unless ``tokens_per_block`` draws the tokens: :func:`_input_seed`)
    and reused by every later cell and run:

    * ``OUT/inputs/<key>.stream/``: the prepared stream
      (:func:`spfcore.sim.prepared.ensure_prepared`): the trace's requests
      keyed at the block size, as arrays that every cell memory-maps (local
      workers and Ray tasks alike: the folder's path is sent with the cell,
      so a Ray cluster must see the sweep's folder at the same path, as a
      one-host cluster does; a node that does not streams the trace itself).
      Its files' SHA-256 are checked here once per call; a partial or
      corrupt folder is written again.
    * ``OUT/inputs/<key>.json``: the facts below (a summary for people).

    Safe when two sweeps share a folder (``OUT/inputs/<key>.lock`` and the
    stream's own lock, ``filelock`` locks: the second waits, then reads the
    first's files); both are written atomically (a temporary file or folder
    renamed into place), so a killed run leaves them whole or absent, and
    the next run does the rest.

    Args:
        folder: The sweep folder.
        source_json: The trace's identity (:func:`_ident_json`; its SHA-256 is part of the key).
        seed, block_size: As the cell's (block size None: the input's default).

    Returns:
        ``{"block_size", "num_requests", "blocks_total", "worst_blocks",
        "worst_request", "unique_blocks", "stream"}``: block size in tokens,
        the rest in requests and blocks (:class:`spfcore.sim.simulator.Scan`,
        :meth:`spfcore.sim.cell.SimInput.unique_blocks`); ``stream`` the
        prepared stream folder's absolute path.

    Raises:
        SweepError: the trace is not the file the sweep was keyed on.
        ValueError, spfcore.workloads.traces.TraceError: as :func:`_open` (a
            malformed trace: :func:`check_inputs` finds it first).
        OSError: the folder cannot be written.
    """
    from filelock import FileLock

    from spfcore.sim.cell import default_block_size
    from spfcore.sim.prepared import ensure_prepared

    d = Path(folder).resolve() / "inputs"
    d.mkdir(parents=True, exist_ok=True)
    key = _facts_key(source_json, seed, block_size)
    path = d / f"{key}.json"
    ident = json.loads(source_json)
    with FileLock(str(d / f"{key}.lock")):
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            old = None
        # from the trace, not from the summary file (an edited one would key the stream at its block size);
        # the trace's digest is memoized and the default reads up to its first hash-id request only
        bs = block_size or default_block_size(_trace_stream(ident, seed))
        info = {"source": ident, "seed": seed, "block_size_arg": block_size}
        ps = ensure_prepared(d / f"{key}.stream", lambda: _trace_stream(ident, seed), bs, info=info)
        sc = ps.scan
        facts = {"block_size": ps.block_size, "num_requests": sc.num_requests, "blocks_total": sc.blocks_total,
                 "worst_blocks": sc.worst_blocks, "worst_request": sc.worst_request,
                 "unique_blocks": ps.unique_blocks}
        rec = {"key": key, "source": ident, "seed": seed, "block_size_arg": block_size, **facts}
        if old != rec:
            write_atomic(path, json.dumps(rec, indent=1) + "\n")
    return {**facts, "stream": str(ps.path)}


def cell_facts(folder: str | os.PathLike, configs: Sequence[Mapping]) -> list[dict | None]:
    """Per cell configuration, its trace's :func:`input_facts` (None for a
    generated workload): each (trace, seed, block size) is prepared once.

    Raises:
        As :func:`input_facts`.
    """
    ins = [(_ident_json(c["source"]), _input_seed(c["source"], c["seed"]), c["block_size"])
           if "trace" in c["source"] else None for c in configs]
    known = {k: input_facts(folder, *k) for k in dict.fromkeys(ins) if k is not None}
    return [None if k is None else known[k] for k in ins]


@functools.lru_cache(maxsize=64)
def _code(policy: str) -> str:
    from spfcore.run.provenance import code_digest

    return json.dumps(code_digest([policy] if policy != INFINITE else []), sort_keys=True)


def run_cell(config: Mapping, facts: Mapping | None = None) -> dict:
    """Run one cell (:meth:`Cell.config`) and return its record. Pure
    function of the configuration, safe in any process: the input opened for
    a (source, seed, block size) is kept for the next cell of the same input
    (two at most per process). ``facts`` (:func:`input_facts` of the cell's
    trace) spare the cell the scan and distinct-block passes, and with their
    prepared ``stream`` reading and keying the trace; the record is the
    same with or without them (timings aside).

    Returns:
        ``{"key", "config", "status": "ok" | "error", "cell", "num_blocks",
        "unique_blocks", "infinite_blocks", "block_size", "host", "pid",
        "seconds", "cpu_seconds"}``: ``cell`` is the simulator's record
        (:func:`spfcore.sim.simulator.simulate`'s fields, no per-request rows)
        or ``{"error": {"policy", "hook", "message"}}``; ``num_blocks`` the
        resolved cache size (fraction ``f``: ``ceil(f * unique_blocks) + 1``,
        the null block included; infinite: the input's never-evicting size);
        ``seconds`` the cell's wall time including opening the input,
        ``cpu_seconds`` its CPU time (this process's, :func:`time.process_time`:
        what a shared machine's other work does not inflate).

    Never raises for a cell's own failure (bad input, too small a cache, a
    policy fault, code that differs from the key's): that is an error record.
    """
    from spfcore.report import error_of

    t0, c0 = time.perf_counter(), time.process_time()
    cell = Cell(**{k: v for k, v in config.items() if k not in ("kind", "mode")})
    out: dict = {"key": cell.key, "config": cell.config(), "status": "ok", "num_blocks": None,
                 "unique_blocks": None, "infinite_blocks": None, "block_size": None,
                 "host": socket.gethostname(), "pid": os.getpid()}
    try:
        if _code(cell.policy) != json.dumps(cell.code, sort_keys=True):
            raise SweepError(f"field 'code': the code on {socket.gethostname()} ({_code(cell.policy)}) is not the "
                             f"code the sweep was keyed on ({json.dumps(cell.code, sort_keys=True)})")
        if facts is not None and "trace" in cell.source:
            inp = _open_known(_ident_json(cell.source), cell.seed, cell.block_size, json.dumps(dict(facts)))
        else:
            inp = _open(_ident_json(cell.source), cell.seed, cell.block_size)
        out.update(block_size=inp.block_size, infinite_blocks=inp.infinite_blocks)
        if "infinite" in cell.size:
            nb, arm, env = inp.infinite_blocks, "lru", {}  # a measurement, not an arm: no allow/block lists
        elif "fraction" in cell.size:
            out["unique_blocks"] = inp.unique_blocks()
            nb, arm, env = math.ceil(cell.size["fraction"] * out["unique_blocks"]) + 1, cell.policy, None
        else:
            nb, arm, env = cell.size["blocks"], cell.policy, None
        out["num_blocks"] = nb = max(nb, 2)
        inp.check_fits(nb)
        rec = inp.run(arm, num_blocks=nb, options=cell.options or None, seed=cell.seed,
                      hook_budget_ms=cell.hook_budget_ms, env=env)
        if "infinite" in cell.size and rec["evictions"]:
            raise RuntimeError(f"infinite-cache run evicted {rec['evictions']} blocks (simulator bug)")
        out["cell"] = rec
    except Exception as exc:  # noqa: BLE001 - recorded; the sweep goes on
        out.update(status="error", cell={"error": error_of(exc, cell.policy)})
    out["seconds"] = time.perf_counter() - t0
    out["cpu_seconds"] = time.process_time() - c0
    return out


def expected_cost_rank(config: Mapping, facts: Mapping | None = None) -> tuple:
    """Sort key that puts a cell expected to take longer first (the order
    :func:`run_sweep` hands cells to workers: longest processing time first,
    so a grid's wall time on W workers approaches max(longest cell, total / W)).

    Hook-driven Python policies come before the arms the simulator replays
    compiled (lru, Belady, session_ttl, frequency, the infinite cache: 5-40x faster per cell; issue 19's
    1M-request grid: 4.5-41 s against 150-490 s), and within each group a
    larger cache first (more resident blocks and ghosts: issue 19's slowest
    cells were ARC, S3-FIFO and frequency, then in Python, at their largest sizes). A fraction
    size counts as ``fraction x unique_blocks`` of its trace's ``facts``
    (:func:`input_facts`), or as the fraction of a million blocks without them.
    Ties keep the grid's order (``sorted`` is stable).

    Args:
        config: A cell's configuration (:meth:`Cell.config`).
        facts: Its trace's :func:`input_facts`, or None.

    Returns:
        ``(compiled, -blocks)``: smaller sorts first.
    """
    size = config["size"]
    if "blocks" in size:
        blocks = float(size["blocks"])
    elif "fraction" in size:
        blocks = size["fraction"] * ((facts or {}).get("unique_blocks") or 1e6)
    else:  # the infinite cache
        blocks = math.inf
    return (config["policy"] in _COMPILED, -blocks)


def check_inputs(grid: Grid, sources: Iterable[Source] | None = None) -> None:
    """Open and scan each input once, before any cell runs, so that an input
    no cell could replay is one clear error instead of a failed record per
    cell: a trace is streamed once at the grid's block size (every line
    parsed and checked: :func:`spfcore.sim.simulator.scan`; memory: one
    request at a time; time: one pass, e.g. about that of one LRU cell
    without the cache); a generated workload is built and keyed for the first
    seed. Seeds change neither a trace's lines nor its keys' computability,
    so one seed is checked. What depends on the cell (a cache too small for
    the largest request, a policy fault) stays a per-cell error.

    Args:
        grid: The :class:`Grid` (its first seed and block size are used).
        sources: The inputs to check (default: all of ``grid.sources``).

    Raises:
        InputError: the first input at fault; the message names the file,
            line and field for a malformed trace line
            (``FILE:LINE: field 'NAME': problem``), the file for an empty or
            unknown trace, the file and block size for requests that cannot
            be keyed at the block size.
        SweepError: a trace that cannot be read or changed since the grid was made.
    """
    import click

    for src in grid.sources if sources is None else sources:
        param = "--trace" if src.trace is not None else "--workload"
        try:
            _open(_ident_json(src.identity()), grid.seeds[0], grid.block_size)
        except click.ClickException as exc:  # empty or unknown trace, bad generator flag
            raise InputError(exc.message, param) from None
        except SweepError:
            raise
        except ValueError as exc:  # TraceError (FILE:LINE: field ...) or keys not computable at this block size
            from spfcore.workloads.options import WorkloadOptionError
            from spfcore.workloads.traces import TraceError

            if isinstance(exc, (TraceError, WorkloadOptionError)):  # its message names the file already
                raise InputError(str(exc), param) from None
            where = src.trace if src.trace is not None else src.label
            bs = grid.block_size
            raise InputError(f"{where}: {exc}" + (" (set by --block-size)" if bs is not None else ""),
                             "--block-size" if bs is not None else param) from None


# ------------------------------------------------------------------ executors


def _inline(configs: Sequence[dict], facts: Sequence) -> Iterator[dict]:
    for c, f in zip(configs, facts):
        yield run_cell(c, f)


def _pool(configs: Sequence[dict], facts: Sequence, workers: int) -> Iterator[dict]:
    import concurrent.futures as cf
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding threads (tqdm) and locks
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        futs = [ex.submit(run_cell, c, f) for c, f in zip(configs, facts)]
        try:
            for f in cf.as_completed(futs):
                try:
                    rec = f.result()
                except cf.process.BrokenProcessPool:  # a RuntimeError whose message names no cell and no cause
                    raise SweepError("a local worker process died while it ran a cell (killed for memory or by a "
                                     "signal, or a crash in compiled code or a mapped file cut short); the "
                                     "finished cells are kept: run the same command again to do the rest") from None
                yield rec
        except BaseException:
            for f in futs:
                f.cancel()
            for p in list(getattr(ex, "_processes", {}).values()):  # don't wait for in-flight cells
                p.terminate()
            raise


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a ``host:port`` / ``ray://host:port`` address that no TCP connection
    reaches within ``timeout_s`` seconds (``ray.init`` would retry for minutes).
    ``"local"``, ``"auto"`` and addresses without a port are left to Ray.

    Raises:
        SweepError: the host is unknown, the port malformed or nothing answers.
    """
    if address in ("local", "auto"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except ValueError:
        raise SweepError(f"field '--ray-address': port {port!r} of {address!r} is not a number") from None
    except OSError as exc:
        raise SweepError(f"field '--ray-address': cannot reach Ray at {address!r} within {timeout_s:g} s: "
                         f"{exc.strerror or exc}") from None


def ray_connect(address: str, num_cpus: int | None = None) -> str:
    """Connect this process to Ray: reuse a Ray already initialised here;
    ``address="local"`` starts a local Ray of ``num_cpus`` CPUs (no
    dashboard); anything else (``"auto"``, ``"ray://host:10001"``,
    ``"host:6379"``) joins that cluster. ``SPFCORE_*`` environment variables
    (allow/block lists) are passed to the workers.

    Returns:
        A description of the cluster (its CPUs and nodes).

    Raises:
        SweepError: Ray is not installed (``pip install 'spfcore[ray]'``) or
            the cluster cannot be reached (field ``--ray-address``).
    """
    try:
        import ray
    except ImportError:
        raise SweepError("field '--ray-address': Ray is not installed; pip install 'spfcore[ray]'") from None
    if not ray.is_initialized():
        _check_reachable(address)
        env = {k: v for k, v in os.environ.items() if k.startswith("SPFCORE_")}
        kw = {"runtime_env": {"env_vars": env}} if env else {}
        try:
            if address == "local":
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, **kw)
            else:
                ray.init(address=address, log_to_driver=False, **kw)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, ValueError, ... : one message
            raise SweepError(f"field '--ray-address': cannot start or reach Ray at {address!r}: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    res = ray.cluster_resources()
    return f"Ray: {res.get('CPU', 0):g} CPUs, {len(ray.nodes())} node(s)"


def _ray(configs: Sequence[dict], facts: Sequence, max_in_flight: int | None = None) -> Iterator[dict]:
    import ray

    task = ray.remote(num_cpus=1, max_retries=1)(run_cell)
    pending = list(zip(configs, facts))
    cap = max_in_flight or max(1, 4 * int(ray.cluster_resources().get("CPU", 1)))
    running: list = []
    try:
        while pending or running:
            while pending and len(running) < cap:  # bounded in flight: results stream back as they finish
                running.append(task.remote(*pending.pop(0)))
            done, running = ray.wait(running, num_returns=1)
            yield ray.get(done[0])
    except BaseException:
        for r in running:
            ray.cancel(r, force=True)
        raise


def execute(configs: Sequence[dict], *, workers: int = 1, ray_address: str | None = None,
            facts: Sequence[Mapping | None] | None = None) -> Iterator[dict]:
    """Run cells, yielding each record as it finishes (any order).

    Args:
        configs: Cell configurations (:meth:`Cell.config`).
        facts: Per config, its trace's :func:`input_facts` or None (sent
            with the task, so a Ray node needs the trace but not the folder).
        workers: Local processes; 1 runs in this process. With Ray: the
            CPUs of a ``"local"`` Ray.
        ray_address: None (local), or a Ray address (:func:`ray_connect`);
            each cell is then one Ray task of one CPU.
    """
    facts = [None] * len(configs) if facts is None else list(facts)
    if ray_address is not None:
        ray_connect(ray_address, workers)
        return _ray(configs, facts)
    if workers <= 1:
        return _inline(configs, facts)
    return _pool(configs, facts, workers)


# ------------------------------------------------------------------ the folder


def cell_path(folder: str | os.PathLike, key: str) -> Path:
    """``OUT/cells/<key>.json``."""
    return Path(folder) / "cells" / f"{key}.json"


def read_cell(folder: str | os.PathLike, key: str) -> dict | None:
    """A cell's record, or None when absent.

    Raises:
        SweepError: a file that is not a cell record (names the file).
    """
    p = cell_path(folder, key)
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SweepError(f"{p}: not a readable cell record ({exc})") from None
    if not isinstance(rec, dict) or rec.get("key") != key or "status" not in rec:
        raise SweepError(f"{p}: field 'key': not the record of cell {key}")
    cell = rec.get("cell")
    need = ("token_hit_rate", "block_hit_rate", "evictions") if rec["status"] == "ok" else ("error",)
    if not isinstance(rec.get("config"), dict) or not isinstance(cell, dict) or any(k not in cell for k in need):
        raise SweepError(f"{p}: field 'cell': not a finished cell's record (needs 'config' and cell "
                         f"{', '.join(map(repr, need))})")
    if rec["status"] == "ok":  # the figures the report averages: numbers (an edited file: not a TypeError later)
        for field, v in [*((f"cell.{k}", cell[k]) for k in need),
                         ("num_blocks", rec.get("num_blocks")), ("seconds", rec.get("seconds"))]:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SweepError(f"{p}: field {field!r}: {v!r} is not a number")
    return rec


@attrs.frozen
class Outcome:
    """What :func:`run_sweep` did: cells in the grid, reused (already in the
    folder), run now, and of those failed; wall time (s); cells to run that
    an interrupt (Ctrl-C, SIGTERM through ``spfcore sweep``) stopped before
    they finished (in flight or not started: not written, run by the next run)."""

    total: int
    reused: int
    ran: int
    failed: int
    seconds: float
    interrupted: int = 0


def run_sweep(grid: Grid, folder: str | os.PathLike, *, workers: int = 1, ray_address: str | None = None,
              command: str | None = None, on_cell: Callable[[dict], None] | None = None) -> Outcome:
    """Run the cells of ``grid`` not yet finished in ``folder``, writing each
    record as it arrives (atomically), and the manifest ``sweep.json``.

    Holds ``OUT/sweep.lock`` for the run (:func:`spfcore.fileio.output_lock`):
    a second live run on the same folder is refused; a killed run leaves only
    whole cell files, and the next run does the rest.

    Args:
        grid: The :class:`Grid`.
        folder: Output folder (created).
        workers, ray_address: See :func:`execute`.
        command: The command line, for the manifest.
        on_cell: Called with each new record (progress).

    Raises:
        spfcore.fileio.OutputInUseError: another live run holds the folder.
        InputError: an input no cell could replay (:func:`check_inputs`);
            nothing is written.
        SweepError: a trace cannot be read, or the folder holds a bad cell file.
        OSError: the folder cannot be written.

    An interrupt (``KeyboardInterrupt``) while cells run stops the workers
    and returns: ``interrupted`` counts the cells not written.
    """
    from spfcore.fileio import output_lock

    t0 = time.perf_counter()
    folder = Path(folder)
    cells = grid.cells()
    # inputs of the cells still to run are checked before anything is written (a finished grid reads no trace)
    todo_inputs = {_ident_json(c.source) for c in cells
                   if (r := read_cell(folder, c.key)) is None or r["status"] != "ok"}
    # a trace whose facts a run here already wrote was checked then (same SHA-256 and block size): not again
    def facts_file(j: str) -> Path:
        return folder / "inputs" / f"{_facts_key(j, _input_seed(json.loads(j), grid.seeds[0]), grid.block_size)}.json"

    check_inputs(grid, [s for s in grid.sources if (j := _ident_json(s.identity())) in todo_inputs
                        and not facts_file(j).is_file()])
    with output_lock(folder / "sweep"):
        for stale in (folder / "cells").glob(".*.tmp"):  # write_atomic's, of a killed run
            stale.unlink(missing_ok=True)
        write_atomic(folder / "sweep.json", json.dumps(
            {"kind": KIND, "version": 1, "command": command, "grid": _grid_json(grid),
             "cells": [c.key for c in cells]}, indent=1) + "\n")
        todo = []
        for c in cells:
            rec = read_cell(folder, c.key)
            if rec is None or rec["status"] != "ok":
                todo.append(c.config())
        facts = cell_facts(folder, todo)
        # longest expected first (LPT: wall time on W workers near max(longest cell, total / W))
        order = sorted(range(len(todo)), key=lambda j: expected_cost_rank(todo[j], facts[j]))
        todo, facts = [todo[j] for j in order], [facts[j] for j in order]
        if workers > 1 or ray_address is not None:
            _open.cache_clear()  # the check's and the facts' opened inputs; the workers open their own
        failed = done = 0
        try:
            for rec in execute(todo, workers=workers, ray_address=ray_address, facts=facts):
                write_atomic(cell_path(folder, rec["key"]), json.dumps(rec, indent=1, default=str) + "\n")
                failed += rec["status"] != "ok"
                done += 1
                if on_cell is not None:
                    on_cell(rec)
        except KeyboardInterrupt:  # the finished cells are written; say how many were not
            return Outcome(len(cells), len(cells) - len(todo), done, failed, time.perf_counter() - t0,
                           len(todo) - done)
    return Outcome(len(cells), len(cells) - len(todo), len(todo), failed, time.perf_counter() - t0)


def _grid_json(grid: Grid) -> dict:
    return {"sources": [attrs.asdict(s) for s in grid.sources], "seeds": list(grid.seeds),
            "variants": [attrs.asdict(v) for v in grid.variants], "sizes": list(grid.sizes),
            "block_size": grid.block_size, "hook_budget_ms": grid.hook_budget_ms, "ceilings": grid.ceilings}


def load(folder: str | os.PathLike) -> tuple[dict, list[dict], list[str]]:
    """The manifest, the records of its cells found in ``folder``, and the
    keys of its cells not there (not run yet).

    Raises:
        SweepError: no readable ``sweep.json`` (names the file and field), or a bad cell file.
    """
    p = Path(folder) / "sweep.json"
    try:
        man = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(f"{p}: no sweep here (run spfcore sweep with this --out first)") from None
    except (OSError, ValueError) as exc:
        raise SweepError(f"{p}: not readable JSON ({exc})") from None
    if not isinstance(man, dict) or man.get("kind") != KIND or not isinstance(man.get("cells"), list):
        raise SweepError(f"{p}: field 'kind'/'cells': not a spfcore sweep manifest")
    recs, missing = [], []
    for key in man["cells"]:
        rec = read_cell(folder, key)
        (missing.append(key) if rec is None else recs.append(rec))
    return man, recs, missing


# ------------------------------------------------------------------ report


def summarize(records: Iterable[Mapping]) -> list[dict]:
    """The merged table: one row per (input, variant, size), seed means.

    Returns:
        Rows ``{"source", "variant", "policy", "size", "size_label", "seeds",
        "errors", "num_blocks", "token_hit_rate", "block_hit_rate",
        "miss_ratio", "evictions", "cell_seconds"}``: ``miss_ratio = 1 -
        block_hit_rate`` (prompt block references that missed), means over the
        seeds that ran (None when none did); ``errors``: one line per failed
        seed; ``num_blocks``: the resolved cache size, mean over the seeds
        that ran, or when every seed failed over the failed seeds that got as
        far as sizing (a cache too small, a policy fault), else None.

        Order: by input; then the policy variants in first-seen order, Belady
        next to last and the infinite cache last; within a variant by cache
        size in blocks, failed rows in their size's place. A row whose size
        was never resolved (every seed failed before sizing: a fraction of an
        input that could not be opened) comes after the variant's sized rows,
        by its fraction.
    """
    from spfcore.report import error_text

    groups: dict[tuple, list] = {}
    for r in records:
        c = r["config"]
        k = (c["source"]["label"], Cell(**{x: v for x, v in c.items() if x not in ("kind", "mode")}).variant,
             json.dumps(c["size"], sort_keys=True))
        groups.setdefault(k, []).append(r)

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None

    rows = []
    for (src, var, size), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        cs = [r["cell"] for r in ok]
        sz = json.loads(size)
        rows.append({"source": src, "variant": var, "policy": rs[0]["config"]["policy"], "size": sz,
                     "size_label": size_label(sz), "seeds": sorted(r["config"]["seed"] for r in ok),
                     "errors": [f"seed {r['config']['seed']}: {error_text(r['cell']['error'])}"
                                for r in rs if r["status"] != "ok"],
                     "num_blocks": mean([r["num_blocks"] for r in (ok or rs)]),
                     "token_hit_rate": mean([c["token_hit_rate"] for c in cs]),
                     "block_hit_rate": mean([c["block_hit_rate"] for c in cs]),
                     "miss_ratio": mean([1 - c["block_hit_rate"] for c in cs]),
                     "evictions": mean([c["evictions"] for c in cs]),
                     "cell_seconds": mean([r["seconds"] for r in ok])})
    order = {v: i for i, v in enumerate(dict.fromkeys(r["variant"] for r in rows))}
    def size_key(r):
        if r["num_blocks"] is not None:
            return (0, r["num_blocks"])
        return (0, r["size"]["blocks"]) if "blocks" in r["size"] else (1, r["size"].get("fraction", math.inf))

    rows.sort(key=lambda r: (r["source"], r["policy"] == INFINITE, r["policy"] == BELADY, order[r["variant"]],
                             size_key(r)))
    return rows


def table(rows: Sequence[Mapping], title: str = "spfcore sweep"):
    """The merged table as a rich Table (miss ratio and token hit rate per row)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    for col in ("input", "policy", "size", "blocks", "seeds", "miss ratio", "token hit", "evictions", "s/cell"):
        if col in ("input", "policy"):  # variant labels (``frequency[min_count=2]``) must stay whole
            t.add_column(col, justify="left", overflow="fold")
        else:
            t.add_column(col, justify="right", no_wrap=True)

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    for r in rows:
        miss = f(r["miss_ratio"], ".4f") if r["seeds"] else "[red]error[/red]"
        t.add_row(escape(r["source"]), escape(r["variant"]), r["size_label"], f(r["num_blocks"], ",.0f"),
                  f"{len(r['seeds'])}" + (f" [red](+{len(r['errors'])} failed)[/red]" if r["errors"] else ""),
                  miss, f(r["token_hit_rate"], ".4f"), f(r["evictions"], ",.0f"), f(r["cell_seconds"], ".2f"))
    return t


def plot_mrc(rows: Sequence[Mapping], path: str | os.PathLike) -> Path:
    """Miss-ratio curves (matplotlib PNG, written atomically): one panel per
    input; x = cache size in blocks (seed mean, log scale), y = miss ratio (1
    - block hit rate); one line per policy variant, Belady dashed black, the
    infinite cache a dotted horizontal line.

    Returns:
        ``path`` as a Path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spfcore.report import savefig_atomic as _savefig_atomic

    sources = list(dict.fromkeys(r["source"] for r in rows))
    fig, axes = plt.subplots(1, len(sources), figsize=(6.4 * len(sources), 4.6), squeeze=False)
    for ax, src in zip(axes[0], sources):
        rs = [r for r in rows if r["source"] == src and r["miss_ratio"] is not None]
        for var in dict.fromkeys(r["variant"] for r in rs if r["policy"] != INFINITE):
            pts = sorted((r["num_blocks"], r["miss_ratio"]) for r in rs if r["variant"] == var)
            style = dict(color="black", linestyle="--") if var == BELADY else {}
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                    label="Belady (offline optimum)" if var == BELADY else var, **style)
        for r in rs:
            if r["policy"] == INFINITE:
                ax.axhline(r["miss_ratio"], color="gray", linestyle=":", label="infinite cache")
        ax.set_xscale("log")
        ax.set_xlabel("cache size (blocks, null block included)")
        ax.set_ylabel("miss ratio (1 - block hit rate)")
        ax.set_title(src, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _savefig_atomic(fig, path)
    plt.close(fig)
    return path


def render(folder: str | os.PathLike) -> tuple[list[dict], list[str]]:
    """Write ``summary.json`` and ``mrc.png`` from ``folder``'s cells.

    Returns:
        The summary rows and the keys of cells not in the folder yet.

    Raises:
        SweepError: see :func:`load`.
    """
    folder = Path(folder)
    man, recs, missing = load(folder)
    rows = summarize(recs)
    write_atomic(folder / "summary.json", json.dumps(
        {"kind": KIND + "-summary", "command": man.get("command"), "cells": len(man["cells"]),
         "missing": len(missing), "rows": rows}, indent=1, default=str) + "\n")
    if any(r["miss_ratio"] is not None for r in rows):
        plot_mrc(rows, folder / "mrc.png")
    return rows, missing
