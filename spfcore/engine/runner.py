"""Run one (arm, seed) cell of a workload through a real vLLM engine.

:func:`open_engine` starts an in-process vLLM engine for one arm (``None`` /
``"stock"``: stock vLLM without ``scheduler_cls``; otherwise the installed
policy of that name through :class:`~spfcore.engine.vllm_adapter.PolicyScheduler`).
:meth:`EngineSession.run` runs a workload from an empty cache and returns a
cell record (the fields are listed in :meth:`EngineSession.run`);
:meth:`EngineSession.close` frees the engine so the next arm can start in the
same process.

vLLM is imported only inside these functions, so ``import spfcore`` and the
CLI work without it.

Definitions (docs/design.md §4): TTFT = first token time - arrival, from
vLLM's own request stats (``RequestOutput.metrics.first_token_latency``,
stats enabled with ``disable_log_stats=False``), or, where a vLLM version
lacks them, from the step at which the first token was seen; e2e = time the
finished output was seen - arrival; prefill recomputed = prompt tokens -
cached tokens; token hit rate = cached / prompt tokens; throughput =
finished requests / wall time.
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Mapping

import attrs
import numpy as np

from spfcore.engine.presets import model_config, resolve_model
from spfcore.run.cell import EngineRecord, EngineTierRecord
from spfcore.workloads.model import Request, Workload, block_keys, request_view

MODES = ("sequential", "timed")


def _positive_or_none(inst, attribute, value):
    if value is not None and value < 1:
        raise ValueError(f"EngineSpec.{attribute.name} must be >= 1 or None, got {value!r}")


@attrs.frozen
class EngineSpec:
    """How to start the engine.

    Attributes:
        model: Preset name (``tiny``, ``llama-3.2-3b``), checkpoint folder, or
            ``None`` for ``tiny`` (see :func:`spfcore.engine.presets.resolve_model`).
        block_size: Tokens per KV block; ``None``: 32 on CPU (CPU attention
            needs a multiple of 32), 16 on GPU.
        num_blocks: KV cache size in blocks, null block included (vLLM
            ``num_gpu_blocks_override``); ``None`` lets vLLM size it from memory.
        max_model_len: Longest prompt + output, tokens; ``None``: the model's
            ``max_position_embeddings``, capped at ``(num_blocks - 1) *
            block_size`` (vLLM refuses a longer one).
        max_num_seqs: Most requests running at once.
        max_num_batched_tokens: Tokens per scheduler step (chunked prefill
            budget); ``None``: vLLM's default.
        enforce_eager: No CUDA graphs / compilation (faster start).
        dtype: Model dtype (``auto``: the config's ``torch_dtype``).
        gpu_memory_utilization: Share of GPU memory (CPU: of one NUMA node's
            memory; keep <= 0.5 there).
        engine_seed: vLLM's random seed (dummy weights, sampling).
        async_scheduling: vLLM async scheduling; off by default so that the
            stock and the policy arms run the same scheduler loop.
        extra: Further ``vllm.LLM`` keyword arguments, passed verbatim.
        cpu_blocks: A CPU tier of this many blocks behind the prefix cache
            (vLLM's KV offloading connector with spfcore's spec,
            :func:`spfcore.engine.vllm_adapter.offload_config`), or ``None``.
    """

    model: str | None = None
    block_size: int | None = attrs.field(default=None, validator=_positive_or_none)
    num_blocks: int | None = attrs.field(default=None, validator=_positive_or_none)
    max_model_len: int | None = attrs.field(default=None, validator=_positive_or_none)
    max_num_seqs: int = 8
    max_num_batched_tokens: int | None = attrs.field(default=None, validator=_positive_or_none)
    enforce_eager: bool = True
    dtype: str = "auto"
    gpu_memory_utilization: float = 0.5
    engine_seed: int = 0
    async_scheduling: bool = False
    extra: dict = attrs.field(factory=dict)
    cpu_blocks: int | None = None

    def __attrs_post_init__(self):
        if self.num_blocks is not None and self.num_blocks < 2:
            raise ValueError(f"EngineSpec.num_blocks must be >= 2 (null block + 1), got {self.num_blocks}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"EngineSpec.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")


def default_block_size() -> int:
    """Tokens per block when :class:`EngineSpec` gives none: 32 on vLLM's CPU
    platform (CPU attention needs a multiple of 32), 16 elsewhere (GPU).
    Imports vLLM."""
    from vllm.platforms import current_platform

    return 32 if current_platform.is_cpu() else 16


def _llm_kwargs(spec: EngineSpec, block_size: int) -> dict:
    path, load_format = resolve_model(spec.model)
    max_len = spec.max_model_len
    if max_len is None:
        max_len = int(model_config(spec.model).get("max_position_embeddings", 4096))
        if spec.num_blocks is not None:
            max_len = min(max_len, (spec.num_blocks - 1) * block_size)
    kw = dict(model=path, load_format=load_format, skip_tokenizer_init=True, block_size=block_size,
              max_model_len=max_len, max_num_seqs=spec.max_num_seqs, enforce_eager=spec.enforce_eager,
              dtype=spec.dtype, gpu_memory_utilization=spec.gpu_memory_utilization, seed=spec.engine_seed,
              enable_prefix_caching=True, disable_log_stats=False, async_scheduling=spec.async_scheduling)
    if spec.num_blocks is not None:
        kw["num_gpu_blocks_override"] = spec.num_blocks
    if spec.max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = spec.max_num_batched_tokens
    if spec.cpu_blocks is not None:
        from spfcore.engine.vllm_adapter import offload_config

        kw["kv_transfer_config"] = offload_config(spec.cpu_blocks)
    kw.update(spec.extra)
    return kw


def open_engine(spec: EngineSpec, arm: str | None = None, options: Mapping[str, str] | None = None) -> EngineSession:
    """Start an in-process vLLM engine for one arm.

    Args:
        spec: Engine configuration.
        arm: ``None`` or ``"stock"``: stock vLLM (no ``scheduler_cls``);
            otherwise an installed policy name (e.g. ``"lru"``), run through
            the policy-driven free queue.
        options: The policy's string options (``{"key": "value"}``).

    Returns:
        An :class:`EngineSession`; call :meth:`EngineSession.close` when done.

    Raises:
        spfcore.registry.PolicyConfigError: unknown policy or bad option (checked
            before the engine starts).
        ValueError: bad model or spec.
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core (and scheduler) in this process
    stock = arm is None or arm == "stock"
    options = dict(options or {})
    if not stock:
        from spfcore.runtime import PolicyRuntime

        PolicyRuntime.for_policy(arm, 2, 1, options)  # fail fast on a bad policy/option
    block_size = spec.block_size or default_block_size()
    kw = _llm_kwargs(spec, block_size)

    from vllm import LLM

    if not stock:
        from spfcore.engine.vllm_adapter import PolicyAsyncScheduler, PolicyScheduler

        kw["scheduler_cls"] = PolicyAsyncScheduler if spec.async_scheduling else PolicyScheduler
    llm = LLM(**kw)
    return EngineSession(spec, "stock" if stock else arm, options, llm, block_size)


class EngineSession:
    """One started engine serving one arm; runs cells one after another.

    Attributes:
        arm: ``"stock"`` or the policy name.
        block_size: Tokens per block.
        num_blocks: Blocks in the pool, null block included.
        llm: The ``vllm.LLM``.
        scheduler: The engine's scheduler (in-process).
    """

    _open = 0  # engines open in this process

    def __init__(self, spec: EngineSpec, arm: str, options: dict, llm, block_size: int) -> None:
        from spfcore.engine.vllm_adapter import engine_scheduler

        EngineSession._open += 1

        self.spec, self.arm, self.options, self.llm = spec, arm, options, llm
        self.block_size = block_size
        self.scheduler = engine_scheduler(llm)
        pool = self.scheduler.kv_cache_manager.block_pool
        self.num_blocks = int(pool.num_gpu_blocks)
        self.max_model_len = int(llm.llm_engine.model_config.max_model_len)
        self.policy = arm != "stock"
        if self.policy:
            self.scheduler.spf_install(self.scheduler.spf_factory(arm, options))

    def use_policy(self, arm: str, options: Mapping[str, str] | None = None, *,
                   vllm_order_queue: bool = True, compiled: bool = True) -> None:
        """Switch this engine to another policy arm (no engine restart): the
        next :meth:`run` uses ``arm``. Only for sessions opened with a policy
        (the stock arm has no policy queue).

        ``vllm_order_queue=False`` drives even an arm whose order is vLLM's
        own (``lru``, which is otherwise served by vLLM's own queue and
        reports no event) through the runtime and every adapter event: for
        tests and benchmarks of the adapter itself (see
        :meth:`~spfcore.engine.vllm_adapter.PolicySchedulerMixin.spf_install`).

        Requests a failed earlier run left in the engine are aborted first
        (:meth:`reset`), so a failed arm never blocks the next one.

        ``compiled=False`` runs the policy's hooks even where a compiled
        runtime stands in for them (:mod:`spfcore.engine.compiled`: every
        shipped plugin arm, within its builder's params): for tests and
        benchmarks that compare the two. (From the command line, a hook
        budget, ``--hook-budget-ms``, also runs the hooks.)

        Raises:
            ValueError: on a stock session or ``arm`` ``"stock"``/``None``.
            spfcore.registry.PolicyConfigError: unknown policy or bad option.
            spfcore.runtime.PolicyError: the policy fails while being built
                (``spfcore_cache_configured``); the engine stays usable.
        """
        if not self.policy or arm is None or arm == "stock":
            raise ValueError("use_policy() switches between policy arms of a policy session; "
                             "open a separate engine for stock vLLM")
        from spfcore.runtime import PolicyRuntime

        opts = dict(options or {})
        nb, bs = self.num_blocks, self.block_size
        PolicyRuntime.for_policy(arm, nb, bs, opts)  # fail fast
        self.reset()
        self.scheduler.spf_install(self.scheduler.spf_factory(arm, opts, compiled=compiled),
                                   vllm_order_queue=vllm_order_queue)
        self.arm, self.options = arm, opts

    def reset(self) -> int:
        """Leave the engine clean after a failed run: abort every request the
        engine still holds (output processor and scheduler; vLLM frees their
        KV blocks), then reset the prefix cache (a policy arm gets a fresh
        runtime). :meth:`run` calls this itself when it fails, and
        :meth:`use_policy` before switching arms; callers need it only after
        driving ``llm`` themselves.

        Returns:
            The number of requests aborted.

        Raises:
            RuntimeError: blocks are still held after every request was
                aborted (vLLM's state is broken; close this engine and open
                a new one); the message gives the count.
        """
        from vllm.v1.request import RequestStatus

        engine = self.llm.llm_engine
        internal = list(engine.output_processor.request_states)
        if internal:
            engine.abort_request(internal, internal=True)
        sched = self.scheduler
        aborted = set(internal) | {r.request_id for r in sched.finish_requests(None, RequestStatus.FINISHED_ABORTED)}
        left = dict(sched.requests)  # finished, but freeing them raised half way (still queued)
        if left:
            sched.running = [r for r in sched.running if r.request_id not in left]
            for rid, r in left.items():
                sched.kv_cache_manager.free(r)
                sched.finished_req_ids.add(rid)
                del sched.requests[rid]
            aborted |= set(left)
        ok = (self.llm.reset_prefix_cache(reset_connector=True) if self.spec.cpu_blocks is not None
              else self.llm.reset_prefix_cache())
        if not ok:
            pool = sched.kv_cache_manager.block_pool
            used = pool.num_gpu_blocks - 1 - pool.get_num_free_blocks()
            raise RuntimeError(f"engine not clean: {used} KV blocks still held after aborting "
                               f"{len(aborted)} requests; close this engine and open a new one")
        return len(aborted)

    @property
    def runtime(self):
        """The PolicyRuntime of the current cell (``None`` for stock)."""
        return self.scheduler.spf_runtime if self.policy else None

    def _check(self, requests: list[Request]) -> None:
        for r in requests:
            if not r.prompt_token_ids:
                raise ValueError(f"request {r.request_id}: no prompt tokens (hash-id trace requests "
                                 "must be materialized into tokens for the engine)")
            if r.num_prompt_tokens + r.output_tokens > self.max_model_len:
                raise ValueError(f"request {r.request_id}: prompt {r.num_prompt_tokens} + output "
                                 f"{r.output_tokens} tokens exceed max_model_len {self.max_model_len}")

    def run(self, workload: Workload, seed: int, mode: str = "sequential", *,
            keep_outputs: bool = False) -> dict:
        """Run ``workload`` from an empty cache and return the cell record.

        The prefix cache is reset first (policy arms get a fresh PolicyRuntime;
        needs-future policies get the whole request stream through
        ``runtime.set_future``).

        Args:
            workload: Requests (token prompts); in ``timed`` mode run in
                ``arrival_s`` order.
            seed: Recorded in the cell (the workload was built from it).
            mode: ``sequential`` (one request at a time, the next one added when
                the previous one finished, as in the SPF seed run) or
                ``timed`` (requests added at their ``arrival_s``, seconds after
                the start, while the engine steps).
            keep_outputs: Also record each request's ``output_token_ids``.

        Returns:
            The fields of :class:`spfcore.run.cell.EngineRecord` (with a CPU
            tier :class:`~spfcore.run.cell.EngineTierRecord`) as a dict:
            ``arm, seed, mode, workload``, sizes and scheduler limits, token
            counts and ``token_hit_rate``, the runtime's counters, fail-open
            counters, latency percentiles, ``throughput_rps``, ``wall_s`` and
            ``requests``: ``[{"request_id", "session_id",
            "prefix_group", "arrival_s", "prompt_tokens", "cached_tokens",
            "ttft_s", "e2e_s", "queue_s" (scheduled - queued, vLLM engine-core
            timestamps), "preemptions"}]``; in ``timed`` mode also ``"num_steps"`` and the step
            log ``"steps": {"start_s", "dur_s", "tokens"}``: per ``engine.step()``
            its start (s after the run's start: its arrival cut-off, the moment
            the loop took the requests that had arrived, which were added before
            the step and later ones after it), its duration (s, until the next
            step starts while the engine stays busy, so the loop's own work between
            steps, adding requests included, counts, else until it returns) and the tokens its schedule
            scheduled (``SchedulerOutput.total_num_scheduled_tokens``): the
            engine's own clock, which the simulator can replay
            (:class:`spfcore.sim.calibrate.EngineClock`). Tokens are counts, times seconds. Stock
            vLLM has no runtime: its ``evictions`` is ``None`` and its hook
            counters are 0.

            A policy fault does not stop the run: the adapter fails open
            (:mod:`spfcore.engine.vllm_adapter`) and the run completes in
            vLLM's own order. ``policy_faults`` is then 1 (else 0),
            ``policy_fault`` is ``{"policy", "hook", "where", "error"}``
            (else ``None``), ``fail_open_allocations`` / ``fail_open_blocks``
            count the allocations (blocks) served in vLLM's order; the
            counters of the policy stop at the fault. A caller judging the
            arm must treat ``policy_faults > 0`` as a failed arm.

        Raises:
            ValueError: bad mode, a request without tokens or longer than
                ``max_model_len``.
            RuntimeError: the prefix cache could not be reset (see :meth:`reset`).
            Exception: anything that escapes the engine; the engine is
                cleaned first (:meth:`reset`), so the next run or arm works.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        reqs = list(workload.requests)
        if mode == "timed":
            reqs.sort(key=lambda r: r.arrival_s)
        self._check(reqs)
        self.reset()
        try:
            return self._run(workload, seed, mode, reqs, keep_outputs)
        except BaseException as exc:
            try:
                self.reset()
            except Exception as cleanup:  # noqa: BLE001 - the run's own error matters more
                exc.add_note(f"cleanup after the failed run also failed: {cleanup}")
            raise

    def _run(self, workload, seed, mode, reqs, keep_outputs) -> dict:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sched, bs = self.scheduler, self.block_size
        runtime = self.runtime
        if runtime is not None and runtime.needs_future:
            views = [request_view(r, i, r.arrival_s, tuple(sched.spf_prompt_keys(r.prompt_token_ids)))
                     for i, r in enumerate(reqs)]
            sched.spf_guarded("future", runtime.set_future, views)

        engine = self.llm.llm_engine
        recs: dict[str, dict] = {}
        steps = None  # timed mode: the step log
        state: dict[str, list] = {}  # request id -> [arrival monotonic, first token seen, finished seen, output]
        t0, w0 = time.monotonic(), time.time()

        def add(r: Request, arrival_mono: float, arrival_wall: float) -> None:
            if runtime is not None:
                sched.spf_label(r.request_id, r.session_id, r.prefix_group)
            sp = SamplingParams(max_tokens=r.output_tokens, min_tokens=r.output_tokens, ignore_eos=True,
                                temperature=0.0)
            engine.add_request(r.request_id, TokensPrompt(prompt_token_ids=list(r.prompt_token_ids)), sp,
                               arrival_time=arrival_wall)
            state[r.request_id] = [arrival_mono, None, None, None]
            recs[r.request_id] = {"request_id": r.request_id, "session_id": r.session_id,
                                  "prefix_group": r.prefix_group, "arrival_s": round(arrival_mono - t0, 6),
                                  "prompt_tokens": r.num_prompt_tokens, "cached_tokens": None,
                                  "ttft_s": None, "e2e_s": None}

        def step() -> None:
            outs = engine.step()
            now = time.monotonic()
            for o in outs:
                st, rec = state[o.request_id], recs[o.request_id]
                if st[1] is None and o.outputs and o.outputs[0].token_ids:
                    st[1] = now
                    lat = getattr(o.metrics, "first_token_latency", None) if o.metrics is not None else None
                    rec["ttft_s"] = float(lat) if lat else now - st[0]
                if o.finished:
                    st[2] = now
                    rec["e2e_s"] = now - st[0]
                    rec["cached_tokens"] = int(o.num_cached_tokens or 0)
                    m = o.metrics  # vLLM RequestStateStats: engine-core monotonic timestamps
                    if m is not None and getattr(m, "scheduled_ts", 0) and getattr(m, "queued_ts", 0):
                        rec["queue_s"] = max(0.0, float(m.scheduled_ts - m.queued_ts))
                    if m is not None and getattr(m, "num_preemptions", None) is not None:
                        rec["preemptions"] = int(m.num_preemptions)
                    if keep_outputs:
                        rec["output_token_ids"] = list(o.outputs[0].token_ids)

        if mode == "sequential":
            for r in reqs:
                now = time.monotonic()
                add(r, now, time.time())
                while engine.has_unfinished_requests():
                    step()
        else:
            i = 0
            starts, durs, toks = [], [], []  # the step log (see _cell)
            busy_since = None  # start of the last step, while the engine has not idled since
            while i < len(reqs) or engine.has_unfinished_requests():
                # a step starts at its arrival cut-off: the requests that arrived by then are added
                # (runtime.arrived) before it schedules, a later one after it
                s0 = time.monotonic()
                elapsed = s0 - t0
                while i < len(reqs) and reqs[i].arrival_s <= elapsed:
                    add(reqs[i], t0 + reqs[i].arrival_s, w0 + reqs[i].arrival_s)
                    i += 1
                if engine.has_unfinished_requests():
                    if busy_since is not None:  # the previous step lasts until this one starts
                        durs[-1] = elapsed - busy_since
                    step()
                    starts.append(elapsed)
                    durs.append(time.monotonic() - s0)
                    toks.append(int(getattr(sched, "spf_scheduled_tokens", 0)))
                    busy_since = elapsed
                else:
                    busy_since = None
                    if i < len(reqs):
                        time.sleep(max(0.0, min(reqs[i].arrival_s - elapsed, 0.05)))
            # not rounded: the simulator compares arrival times with these starts
            steps = {"start_s": starts, "dur_s": durs, "tokens": toks}
        wall = time.monotonic() - t0
        return self._cell(workload, seed, mode, reqs, recs, wall, steps)

    def _cell(self, workload, seed, mode, reqs, recs, wall, steps=None) -> dict:
        """The cell record (:class:`spfcore.run.cell.EngineRecord`, or
        :class:`~spfcore.run.cell.EngineTierRecord` with a CPU tier) as a dict.

        Raises:
            TypeError, spfcore.run.cell.CellFormatError: a missing, unknown or
                ill-typed field (named).
        """
        rows = [recs[r.request_id] for r in reqs]
        prompt = sum(r["prompt_tokens"] for r in rows)
        cached = sum(r["cached_tokens"] or 0 for r in rows)
        ttft = np.array([r["ttft_s"] for r in rows if r["ttft_s"] is not None], dtype=float)
        e2e = np.array([r["e2e_s"] for r in rows if r["e2e_s"] is not None], dtype=float)

        def q(a, p):
            return float(np.percentile(a, p)) if a.size else math.nan

        runtime = self.runtime
        stats = runtime.stats() if runtime is not None else {
            "hook_seconds": 0.0, "hook_calls": 0, "policy_seconds": 0.0, "evictions": None, "evict_seconds": 0.0,
            "evict_calls": 0, "hints_issued": 0, "hints_used": 0, "pins_refused": 0}
        queue = self.scheduler.spf_queue if self.policy else None
        fault = queue.fault if queue is not None else None
        adapter = queue.adapter_seconds if queue is not None else 0.0
        served_by = ("stock" if queue is None else "vllm-queue" if queue.vllm_order
                     else "compiled" if runtime.wants_block_hashes else "hooks")
        stats["policy_seconds"] += adapter  # all of spfcore's time: the runtime's events and the adapter's own
        qd = np.array([r["queue_s"] for r in rows if r.get("queue_s") is not None], dtype=float)
        tier = self._tier_fields(rows) if self.spec.cpu_blocks is not None else {}
        cls = EngineTierRecord if tier else EngineRecord
        return cls(arm=self.arm, seed=seed, mode=mode, workload=workload.name,
                   block_size=self.block_size, num_blocks=self.num_blocks,
                   max_num_seqs=int(self.scheduler.max_num_running_reqs),  # the simulator's limits
                   max_num_batched_tokens=int(self.scheduler.max_num_scheduled_tokens),
                   num_requests=len(rows), prompt_tokens=prompt, cached_tokens=cached,
                   token_hit_rate=cached / prompt if prompt else 0.0, prefill_tokens_recomputed=prompt - cached,
                   **stats, adapter_seconds=adapter, served_by=served_by, policy_faults=int(fault is not None), policy_fault=fault,
                   fail_open_allocations=queue.fail_open_allocations if queue is not None else 0,
                   fail_open_blocks=queue.fail_open_blocks if queue is not None else 0,
                   queue_p50_s=q(qd, 50), queue_p95_s=q(qd, 95),
                   preemptions=sum(r.get("preemptions") or 0 for r in rows), **tier,
                   ttft_p50_s=q(ttft, 50), ttft_p95_s=q(ttft, 95), ttft_p99_s=q(ttft, 99),
                   ttft_mean_s=float(ttft.mean()) if ttft.size else math.nan,
                   e2e_p50_s=q(e2e, 50), e2e_p95_s=q(e2e, 95),
                   throughput_rps=len(e2e) / wall if wall > 0 else math.nan, wall_s=wall, requests=rows,
                   num_steps=len(steps["start_s"]) if steps is not None else None, steps=steps).to_json()

    def _tier_fields(self, rows: list) -> dict:
        """With a CPU tier: per request ``cpu_hit_tokens`` (loaded from the
        tier) and ``gpu_hit_tokens`` (cached - loaded), and the cell's totals
        and tier counters (``tier_stored_blocks``, ``tier_not_admitted``)."""
        from spfcore.engine.vllm_adapter import offload_manager

        mgr = offload_manager(self.scheduler)
        loaded: dict = {}
        known = {r["request_id"] for r in rows}
        for rid, n in (mgr.loaded if mgr is not None else {}).items():
            ext = rid if rid in known else rid.rsplit("-", 1)[0]  # vLLM may suffix the id given to it
            loaded[ext] = loaded.get(ext, 0) + n
        for r in rows:
            r["cpu_hit_tokens"] = loaded.get(r["request_id"], 0) * self.block_size
            r["gpu_hit_tokens"] = (r["cached_tokens"] or 0) - r["cpu_hit_tokens"]
        cpu = sum(r["cpu_hit_tokens"] for r in rows)
        return {"cpu_blocks": self.spec.cpu_blocks, "cpu_hit_tokens": cpu,
                "gpu_hit_tokens": sum(r["gpu_hit_tokens"] for r in rows),
                "tier_stored_blocks": mgr.stored_chunks if mgr is not None else None,
                "tier_not_admitted": mgr.not_admitted if mgr is not None else None}

    def close(self) -> None:
        """Shut the engine down and free its memory, so another engine can
        start in this process. Idempotent.

        Note: vLLM's executor shutdown tears down the process-wide
        model-parallel groups, so an engine still open in the same process
        cannot step afterwards: with several engines open, close them together
        at the end.
        """
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        self.scheduler = None
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001 - best effort; version dependent
            pass
        del llm
        gc.collect()
        EngineSession._open -= 1
        if EngineSession._open == 0:  # the model-parallel state is per process, shared by open engines
            try:
                from vllm.distributed.parallel_state import (
                    destroy_distributed_environment,
                    destroy_model_parallel,
                )

                destroy_model_parallel()
                destroy_distributed_environment()
            except Exception:  # noqa: BLE001 - best effort; version dependent
                pass
            gc.collect()

    def __enter__(self) -> EngineSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
