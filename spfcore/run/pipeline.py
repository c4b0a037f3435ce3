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
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
from tqdm import tqdm

from spfcore import gate, report
from spfcore.run import plan
from spfcore.run.cell import error_cell
from spfcore.run.provenance import code_digest, versions
from spfcore.run.spec import GateConfig, GateConfigError, load_workload, workload_label
from spfcore.run.store import Store, level_path, merge_sources, read_merge_source, run_folder, sidecar_path
from spfcore.workloads.model import Workload

BELADY = "belady_oracle"
#: The smallest ``max_num_batched_tokens`` vLLM chooses by default on any platform (256: TPU v5p, API
#: server; 2048-4096 on CPU, 8192-16384 on GPU: ``EngineArgs.get_batch_defaults``): a sequential engine
#: run whose prompts are all this short computes each in one step unless its engine config sets a
#: smaller limit.
SHORTEST_DEFAULT_BUDGET = 256


def default_engine_factory(arm: str, options: Mapping | None, *, num_blocks: int, block_size: int,
                           engine: Mapping):
    """Open a real vLLM engine for ``arm`` (:func:`spfcore.engine.runner.open_engine`);
    later arms reuse it through ``EngineSession.use_policy``."""
    from spfcore.engine.runner import EngineSpec, open_engine

    spec = EngineSpec(block_size=block_size, num_blocks=num_blocks, **dict(engine))
    return open_engine(spec, arm, dict(options or {}))


def run_engine_cells(config, workloads, side, bar, engine_factory, num_blocks, deadline=None,
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

    A failed cell is recorded (:func:`spfcore.run.cell.error_cell`) and the run
    goes on: an arm in ``broken`` (``{arm: exception}``: not installed, not
    allowed or not constructible) fails without touching the engine; a cell
    whose run raised closes the engine (a run stopped part-way can leave
    requests holding KV blocks) and the next cell starts a fresh one.
    """
    broken = broken or {}
    session, start_error = None, None
    try:
        rep = 0
        while True:
            for arm, seed in plan.interleaved(config.arms, config.seeds, rep):
                key = ("engine", arm, seed) + ((rep,) if rep else ())
                if key in side.done:
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    return
                opts = config.policy_options.get(arm)
                bar.set_description(f"engine {arm} seed {seed}")
                if arm in broken:  # never reaches the engine: a start failure here is the arm's, not the engine's
                    side.put("engine", arm, seed, error_cell(arm, seed, broken[arm]), rep)
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
                    cell = error_cell(arm, seed, exc)
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


def default_sim(workload, arm, *, num_blocks, block_size, options=None, mode="sequential", seed=0, timing=None,
                cpu_blocks=None, cost=None, token_budget=None):
    """:func:`spfcore.sim.simulate`; the engine's ``timed`` mode is the
    simulator's ``concurrent`` mode (continuous batching on arrival times),
    with ``timing`` (a :class:`spfcore.sim.calibrate.Timing`: step costs and
    vLLM limits fitted on the engine run, recorded in the cell) when given.
    ``token_budget`` (sequential mode): the engine's
    ``max_num_batched_tokens``, by which the replay chunks prefills as the
    engine does (recorded in the cell).

    With ``cpu_blocks`` (a CPU tier, sequential mode): :func:`tiered_sim`."""
    if cpu_blocks is not None:
        return tiered_sim(workload, arm, num_blocks=num_blocks, block_size=block_size, options=options,
                          seed=seed, cpu_blocks=cpu_blocks, cost=cost)
    from spfcore.sim import simulate

    kw = timing.simulate_kwargs() if timing is not None else {"token_budget": token_budget}
    cell = simulate(workload, arm, num_blocks=num_blocks, block_size=block_size, options=options,
                    mode="concurrent" if mode == "timed" else mode, seed=seed, **kw)
    if timing is not None:
        cell["timing"] = timing.to_json()
    return cell


#: Fields of a tiered simulator run with promotion kept in a cell's ``sim_promote``.
PROMOTE_FIELDS = ("gpu_hit_tokens", "cpu_hit_tokens", "prefill_tokens_recomputed", "ttft_mean_s", "ttft_p95_s",
                  "hints_issued", "hints_used", "hints_wasted", "promoted_blocks", "promoted_used",
                  "promoted_wasted", "bytes_promoted")


def tiered_sim(workload, arm, *, num_blocks, block_size, cpu_blocks, options=None, seed=0, cost=None) -> dict:
    """The simulator's cell of a tiered gate arm: :func:`spfcore.sim.tiered.simulate_tiered`
    with ``promote=False`` (as vLLM's engine, which cannot load a tier block
    before its request arrives), per-request rows kept (``requests``: the
    engine's per-request GPU and CPU hits are compared with them,
    :func:`spfcore.run.cell.tier_agreement`). For an arm that issued
    prefetch hints, ``sim_promote`` holds :data:`PROMOTE_FIELDS` of a second
    run with ahead-of-arrival promotion (what it would buy; hints issued,
    used, wasted; promoted blocks used and wasted).

    Args:
        cpu_blocks: CPU tier size, blocks.
        cost: Cost model name or :class:`~spfcore.sim.tiered.CostModel`
            (default ``tiny-cpu``).
    """
    from spfcore.sim.tiered import simulate_tiered

    kw = dict(num_blocks=num_blocks, cpu_blocks=cpu_blocks, block_size=block_size, cost=cost or "tiny-cpu",
              options=options, seed=seed)
    cell = simulate_tiered(workload, arm, per_request=True, promote=False, **kw)
    if cell.get("hints_issued"):
        pro = simulate_tiered(workload, arm, promote=True, **kw)
        cell["sim_promote"] = {k: pro[k] for k in PROMOTE_FIELDS}
    return cell


def engine_timing(config, workload, cell, num_blocks: int, arm: str):
    """The concurrent model's step costs fitted on ``arm``'s engine cell
    (:func:`spfcore.sim.calibrate.fit_timing`), or ``(None, reason)`` when
    the cell cannot give them (no per-request times or engine limits)."""
    from spfcore.sim.calibrate import fit_timing

    try:
        return fit_timing([(workload, cell)], num_blocks=num_blocks, block_size=config.block_size,
                          arm=arm, options=config.policy_options.get(arm)), None
    except ValueError as exc:
        return None, str(exc)


def default_ceilings(workload, *, num_blocks, block_size, belady_record=None, cpu_blocks=None, cost=None):
    """:func:`spfcore.sim.ceilings` (``belady_record``: the sequential
    ``belady_oracle`` cell of the same input, reused instead of a new run).

    With ``cpu_blocks`` (a CPU tier): the Belady row is ``belady_oracle`` on
    the GPU with vLLM's LRU tier behind it (:func:`tiered_sim`; the arm's
    tiered cell when given): the harness and headroom checks then compare
    like with like. It bounds GPU retention under vLLM's tier order, not a
    policy with its own tier hooks (one beat it by 2x at quick scale,
    results/cpu-tiered-quick). The infinite cache bounds both tiers."""
    from spfcore.sim import ceilings

    if cpu_blocks is not None and belady_record is None:  # (a failure fails the seed's ceilings cell, recorded)
        belady_record = tiered_sim(workload, BELADY, num_blocks=num_blocks, block_size=block_size,
                                   cpu_blocks=cpu_blocks, cost=cost)

    return ceilings(workload, num_blocks=num_blocks, block_size=block_size, belady_record=belady_record)




def preflight(config: GateConfig, workloads: Mapping, num_blocks: int) -> None:
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
    from spfcore.sim import check_fits, prepare

    try:  # an arm not installed or broken is skipped: its cells fail (broken_arms), the run goes on
        registry.check_options(config.arms, config.policy_options)
    except registry.PolicyConfigError as exc:
        raise GateConfigError(f"--policy-opt: {exc}") from None
    roles = attrs.asdict(config.roles)
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
    missing = {r: a for r, a in roles.items() if a is not None and a not in config.arms}
    if missing:  # (after the installed check: a misspelt --candidate gets its "did you mean")
        raise GateConfigError("field 'arms': the gate's roles need these arms too: "
                              + ", ".join(f"{r}={a}" for r, a in missing.items()))
    try:
        resolve_model(dict(config.engine).get("model"))
    except ValueError as exc:
        raise GateConfigError(f"field 'model': {exc}") from None
    for seed, wl in workloads.items():
        try:
            check_fits(prepare(wl, config.block_size), num_blocks)  # no-op for a prepared workload
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
        engine_cells: Runs the engine cells, with :func:`run_engine_cells`'s
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
        GateResumeError: the sidecar belongs to another configuration;
            :class:`~spfcore.run.store.MergeSourceError` (before anything is
            written): a ``merge_from`` run does.
        GateConfigError, ValueError: bad configuration or workload flags.
        KeyboardInterrupt: passed through; finished cells stay in the sidecar.

    A policy (or engine) error in one cell is recorded as ``{"arm", "seed",
    "error"}`` and the run goes on; the verdict is then ``INCOMPLETE``.

    Sequential mode: the simulator chunks each prefill by the engine's
    ``max_num_batched_tokens`` as the engine does (``token_budget`` of
    :func:`spfcore.sim.simulate`, recorded in the cell) where a prompt is
    longer than it; that limit is ``config.engine``'s, else the first engine
    cell's, for which the simulator's cells wait when a prompt is longer than
    :data:`SHORTEST_DEFAULT_BUDGET` (without any engine cell they run at the
    end with each prompt in one step, ``token_budget_note`` saying so).

    Timed mode: an arm's simulator cell of a seed runs once that arm's engine
    cell of the seed is in; the concurrent model's step costs and vLLM limits
    are fitted on it (:func:`engine_timing`, recorded as the sim cell's
    ``timing``; ``timing_note`` when the cell cannot give them and defaults
    were used). When the engine cell logs its steps, the simulator replays
    that log as its step time (``timing.clock``,
    :class:`spfcore.sim.calibrate.EngineClock`), so the machine's noise in that
    run is the engine's and the simulator's alike. Fitted on the floor arm
    instead, the model misses a candidate whose own code slows the engine's
    steps (spf on the CPU engine: 1.65 ms per request, 45% more time per token
    than lru's run; :meth:`spfcore.sim.calibrate.Timing.with_policy` adds it).
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
    preflight(config, prepared, num_blocks)
    cpu_blocks = config.cpu_blocks_for(num_blocks)
    tier_kw = {}
    if cpu_blocks is not None:  # the engine's tier (EngineSpec.cpu_blocks) and the two-tier simulator's
        config = attrs.evolve(config, engine={**config.engine, "cpu_blocks": cpu_blocks})
        tier_kw = {"cpu_blocks": cpu_blocks, "cost": config.tier_cost_name()}
    wparams = {k: v for k, v in first.params.items() if k != "seed"}
    vers = versions(config.arms)
    fingerprint = {"workload": first.name, "workload_params": wparams, "trace": config.trace,
                   "limit": config.limit, "tokens_per_block": config.tokens_per_block,
                   "num_blocks": num_blocks, "block_size": config.block_size, "mode": config.mode,
                   "engine": dict(config.engine), "policy_options": dict(config.policy_options),
                   "simulate": config.simulate,
                   "versions": {k: v for k, v in vers.items() if k != "policies"},
                   "code": code_digest(config.arms)}
    if tier_kw:  # (a run without a tier keeps the fingerprint it had)
        fingerprint["tier"] = dict(tier_kw)
    full_config = {**config.to_json(), "num_blocks": num_blocks, "num_blocks_given": config.num_blocks,
                   "cpu_blocks": cpu_blocks, "tier_cost": tier_kw.get("cost"),
                   "workload_params": wparams, "num_requests": len(first.requests),
                   "workload_label": workload_label(config, first, num_blocks)
                   + (f"; CPU tier {cpu_blocks} blocks ({config.cpu_ratio:g}x)" if tier_kw else ""), "versions": vers,
                   "sidecar": str(sidecar_path(output))}
    sources = merge_sources(merge_from)
    for src in sources:  # a source of another configuration is refused before this run's sidecar is written
        read_merge_source(sidecar_path(src), fingerprint)
    side = Store(sidecar_path(output), fingerprint, fresh)
    for src in sources:
        side.merge(sidecar_path(src))
    broken = broken_arms(config)

    sim_units = plan.sim_units(config.arms, config.seeds) if config.simulate else []
    eng_units = plan.engine_units(config.arms, config.seeds)
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

    # timed mode: the simulator's step costs are fitted on the same arm's engine cell of the same seed
    # (sim.calibrate), so a sim cell waits for it; it then shows what the simulator's scheduling and
    # cache make of the engine's speed in that run
    timed = config.mode == "timed"
    timings: dict = {}

    longest = max((max(p.prompt_tokens, default=0) for p in prepared.values()), default=0)

    def prefill_budget() -> int | None:
        """The engine's ``max_num_batched_tokens`` (tokens per step): the
        configured one, else the first engine cell's (one engine config per
        run), else ``None`` (no engine cell yet)."""
        tb = config.engine.get("max_num_batched_tokens", (config.engine.get("extra") or {}).get(
            "max_num_batched_tokens"))
        if tb is None:
            tb = next((c["max_num_batched_tokens"] for k, c in side.done.items()
                       if k[0] == "engine" and c.get("max_num_batched_tokens")), None)
        return None if tb is None else int(tb)

    def run_sims(final: bool = False) -> None:
        # sequential mode: the engine chunks a prompt longer than its max_num_batched_tokens, and the
        # replay does the same (the stores between chunks move the classic arms' victims), so where a
        # prompt may be that long the simulator's cells (the ceilings too: they reuse belady_oracle's)
        # wait for the engine's limit
        budget, unknown = None, False
        if not timed and not tier_kw:
            budget = prefill_budget()
            unknown = budget is None and longest > SHORTEST_DEFAULT_BUDGET
            if unknown and not final:
                return
        for kind, arm, seed in sim_units:
            if (kind, arm, seed) in side.done:
                continue
            timing = note = None
            if kind == "sim" and timed:
                ec = side.done.get(("engine", arm, seed))
                if ec is None and not (final and ("engine", arm, seed) in side.failed):
                    continue  # not yet (or cut by --time-limit: a later call fits it)
                if ec is not None and (arm, seed) not in timings:
                    timings[arm, seed] = engine_timing(config, workloads[seed], ec, num_blocks, arm)
                timing, note = timings.get((arm, seed), (None, "the arm's engine cell failed"))
            bar.set_description(f"sim {arm if kind == 'sim' else 'ceilings'} seed {seed}")
            try:
                if kind == "ceilings":
                    bel = side.done.get(("sim", BELADY, seed)) if reuse_belady else None
                    if bel is not None and not config.policy_options.get(BELADY):
                        cell = dict(ceilings_fn(prepared[seed], num_blocks=num_blocks, block_size=config.block_size,
                                                belady_record=bel, **tier_kw))
                    else:
                        cell = dict(ceilings_fn(prepared[seed], num_blocks=num_blocks, block_size=config.block_size,
                                                **tier_kw))
                    cell["seed"] = seed
                else:
                    if arm in broken:
                        raise broken[arm]
                    kw = {"timing": timing} if timing is not None else dict(tier_kw)
                    if budget is not None and longest > budget:  # (else no prompt is chunked)
                        kw["token_budget"] = budget
                    cell = dict(sim_fn(prepared[seed], arm, num_blocks=num_blocks, block_size=config.block_size,
                                       options=config.policy_options.get(arm), mode=config.mode, seed=seed, **kw))
                    cell.update(arm=arm, seed=seed, status="ok")
                    if note:
                        cell["timing_note"] = f"default step costs: {note}"
                    if unknown:
                        cell["token_budget_note"] = ("no engine cell gave max_num_batched_tokens: each prompt "
                                                     "replayed in one prefill step")
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                cell = error_cell(arm, seed, exc)
            side.put(kind, arm, seed, cell)
            bar.update()

    try:
        run_sims()

        def again(rep: int) -> bool:
            """Run pass ``rep + 1``? Only while the verdict is INCONCLUSIVE and the budget lasts."""
            nonlocal reused
            run_sims()  # timed mode: the floor's cells of pass 0 are in; the verdict reads the sim
            if not config.settle or rep + 1 >= config.max_passes:
                return False
            if config.budget_s is not None and time.monotonic() - t_start >= config.budget_s:
                return False
            if judge(rep + 1)[1].status != gate.INCONCLUSIVE:
                return False
            nxt = plan.engine_units(config.arms, config.seeds, rep + 1)
            reused += sum(1 for u in nxt if u in side.done)
            bar.total += len(nxt)
            bar.update(sum(1 for u in nxt if u in side.done))
            return True

        (engine_cells or run_engine_cells)(config, workloads, side, bar, engine_factory, num_blocks,
                                            deadline=None if time_limit_s is None else t_start + time_limit_s,
                                            broken=broken, again=again)
        run_sims(final=True)
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
            preflight(config, {config.seeds[0]: wl}, nb)  # before the capacity engine starts
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
