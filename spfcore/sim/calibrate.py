"""Fit the concurrent simulator's step-time model on an engine run.

Under load the prefix cache is shared between the blocks of requests in
flight and the cached blocks of finished ones, so the token hit rate the
simulator predicts depends on how long requests stay in flight, i.e. on the
step time. With the old fixed model (10 ms + 10 us per token) a decode step
took half as long as on the H200 (vLLM 0.24, Llama-3.2-3B, eager mode:
17-30 ms), fewer requests were in flight, and the simulated hit rate came out
3-6 points above the engine's (``results/gpu-h200-x2-c298da1``).

The model (:mod:`spfcore.sim.simulator`, concurrent mode) gives a step that
schedules ``n`` tokens ``a + b * n`` seconds (``a`` = ``step_overhead_s``,
``b`` = ``per_token_s``). For a fixed schedule every request's prefill time
(TTFT - queue) is ``a * kp + b * np`` and its decode time (e2e - TTFT)
``a * kd + b * nd``, with ``kp, np, kd, nd`` the steps and the tokens those
steps scheduled over each phase (``_run_concurrent``'s spans). :func:`fit_timing`
replays an engine run's own input with one arm (the floor arm, whose hits do
not depend on the fit when it has none), solves the two linear equations
"mean simulated prefill = mean engine prefill" and "mean simulated decode =
mean engine decode" for ``(a, b)``, replays again with the new costs (the
schedule changes with them), and repeats until the costs stop moving: a
fixed point. Where none exists (no positive solution, or a step time that
drifts during the run, as on a loaded CPU) a pattern search finds the costs
closest to both means, and ``Timing.error`` says how close. The engine's per-request ``ttft_s``, ``e2e_s`` and ``queue_s``
(vLLM's own request timestamps, :meth:`spfcore.engine.runner.EngineSession.run`)
are all it needs, so records made before this module also calibrate.

Two additions take machine noise and the policy's own code out of the
constant model:

* **The engine's own clock.** A constant ``a + b * n`` cannot follow an
  engine whose steps slow down and speed up during a run (a shared CPU: on a
  2-core machine at a load average of 8-24 one run's steps took 0.05-2 s), and
  which requests overlap, hence the hit rate, follows the step times. Engine
  cells of timed runs carry their step log (per ``engine.step()``: start,
  duration, tokens scheduled; :meth:`spfcore.engine.runner.EngineSession.run`);
  :class:`EngineClock` replays it: a simulated step starting at ``t`` lasts as
  long as the engine's step that started nearest ``t``, scaled by the
  token-count ratio of a least-squares ``a + b * n`` fitted on the same log.
  Where the simulated schedule is the engine's, its steps then end when the
  engine's did, and what is left between the two hit rates is the model's
  scheduling and cache, not the machine's noise.
* **The policy's seconds per step.** The policy runs inside vLLM's scheduler,
  on the step's critical path: its measured ``policy_seconds`` (hooks,
  evictor work; :class:`spfcore.runtime.PolicyRuntime`) over the engine run's
  ``num_steps`` is seconds added to every step. A fit on one arm's cell
  includes that arm's policy seconds in ``step_overhead_s``;
  :meth:`Timing.with_policy` swaps them for another arm's, so the floor arm's
  fit predicts a candidate whose hooks cost milliseconds per request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from spfcore.workloads.model import Workload

#: Fixed-point iterations at most (the costs usually settle within 3-5).
MAX_ITER = 12
#: Relative change of both costs below which the fit has settled.
TOL = 1e-3
#: Summed relative error of the two means above which the fixed point is
#: abandoned for a pattern search in (log a, log b) (Hooke & Jeeves 1961).
FIT_ERR = 0.02
#: Most replays of one fit.
MAX_REPLAYS = 80


def policy_seconds_per_step(cell: Mapping) -> float | None:
    """The policy's own seconds per engine step of an engine cell:
    ``policy_seconds / num_steps`` (runtime counter over the step log's
    length), or ``None`` when the cell lacks either (sequential cells, cells
    recorded before the step log)."""
    ps, n = cell.get("policy_seconds"), cell.get("num_steps")
    if ps is None or not n:
        return None
    return float(ps) / int(n)


@attrs.frozen
class EngineClock:
    """The step durations of one engine run, as the concurrent simulator's
    ``step_time(t, n)`` (:func:`spfcore.sim.simulate`).

    A step starting at virtual time ``t`` (s after the run's start, as the
    engine's ``start_s``) that schedules ``n`` tokens takes ``d = dur_s[k] *
    (a + b * n) / (a + b * tokens[k])`` with ``k`` the engine step whose start
    is nearest ``t``, and ``(a, b)`` (:attr:`step_overhead_s`,
    :attr:`per_token_s`) the least-squares fit of ``dur_s = a + b * tokens``
    over the log (``b`` clipped at 0); it ends at ``start_s[k] + d``, where the
    engine's step ended, so the small offsets between the two clocks (the
    engine's first step starts some ms after the first arrival) do not
    accumulate and move an arrival to another step, unless that leaves less
    than ``d / 2`` (then it lasts ``d``). After the log's last step ends it
    lasts ``a + b * n``. A step's start is the engine's arrival cut-off (the
    requests that arrived by then were added before it scheduled), so where the
    schedules agree, each request arrives before the same step in both; an
    idle model waits for the engine's next step (:meth:`next_start`).

    Attributes:
        start_s, dur_s, tokens: The engine's step log (``cell["steps"]``), one
            entry per step: start s, duration s, tokens scheduled.
        step_overhead_s, per_token_s: The log's own ``a`` and ``b``, s and s/token.
        source: Which cell the log came from.
    """

    start_s: np.ndarray = attrs.field(eq=False, repr=False)
    dur_s: np.ndarray = attrs.field(eq=False, repr=False)
    tokens: np.ndarray = attrs.field(eq=False, repr=False)
    step_overhead_s: float = 0.0
    per_token_s: float = 0.0
    source: str = ""

    @classmethod
    def from_cell(cls, cell: Mapping) -> EngineClock | None:
        """The clock of an engine cell's ``steps`` log, or ``None`` when it
        has none (sequential mode, or a cell recorded before the log).

        Raises:
            ValueError: a log whose lists differ in length, or with a negative
                or non-finite duration.
        """
        log = cell.get("steps")
        if not log or not log.get("start_s"):
            return None
        where = f"engine cell {cell.get('arm')} seed {cell.get('seed')}"
        st, du, tk = (np.asarray(log[k], dtype=float) for k in ("start_s", "dur_s", "tokens"))
        if not len(st) == len(du) == len(tk):
            raise ValueError(f"{where}: step log lists of different lengths ({len(st)}, {len(du)}, {len(tk)})")
        if not (np.isfinite(du).all() and (du >= 0).all()):
            raise ValueError(f"{where}: step log has a negative or non-finite duration")
        a, b = float(np.median(du)), 0.0
        if len(set(tk.tolist())) > 1:
            (a1, b1), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(tk), tk]), du, rcond=None)
            if a1 > 0 and b1 >= 0:
                a, b = float(a1), float(b1)
        order = np.argsort(st, kind="stable")
        return cls(st[order], du[order], tk[order], a, b, f"steps of engine {cell.get('arm')} seed {cell.get('seed')}")

    def next_start(self, t: float) -> float:
        """The start (s) of the first logged step at or after ``t``, or ``t``
        past the log's end: where an idle engine took the requests that had
        arrived since it went idle (its arrival cut-off,
        :meth:`spfcore.engine.runner.EngineSession.run`)."""
        k = int(np.searchsorted(self.start_s, t))
        return float(self.start_s[k]) if k < len(self.start_s) else t

    def __call__(self, t: float, n: int) -> float:
        """Seconds of a step starting at ``t`` (s) that schedules ``n`` tokens."""
        st = self.start_s
        base = self.step_overhead_s + self.per_token_s * n
        if t > st[-1] + self.dur_s[-1]:
            return base
        k = int(np.searchsorted(st, t))
        if k == len(st) or (k > 0 and t - st[k - 1] <= st[k] - t):
            k -= 1
        d = float(self.dur_s[k]) * base / (self.step_overhead_s + self.per_token_s * self.tokens[k])
        snapped = float(st[k]) + d - t  # end where the engine's step ended: no drift from offsets
        return snapped if snapped > 0.5 * d else d


@attrs.frozen
class Timing:
    """The concurrent model's costs and limits, fitted on an engine run.

    Attributes:
        step_overhead_s: Seconds per step (``a``).
        per_token_s: Seconds per scheduled token (``b``).
        max_running: vLLM ``max_num_seqs`` of the engine run.
        token_budget: vLLM ``max_num_batched_tokens`` of the engine run.
        engine_prefill_s, engine_decode_s: The engine's means over requests of
            TTFT - queue and e2e - TTFT, s.
        sim_prefill_s, sim_decode_s: The same means in the replay at the
            fitted costs, s.
        iterations: Replays the fit took.
        error: ``|sim_prefill / engine_prefill - 1| + |sim_decode /
            engine_decode - 1|`` at the fitted costs (0: both means met).
        source: What it was fitted on (e.g. ``"engine lru seed 42"``).
        policy_s_per_step: The policy's own seconds per step included in
            ``step_overhead_s`` (:func:`policy_seconds_per_step` of the fitted
            cell, or of another arm after :meth:`with_policy`); 0 when the
            cell does not give it.
        clock: The fitted cell's :class:`EngineClock` when it has a step log;
            then the simulator replays the engine's step times instead of the
            constant costs (:meth:`simulate_kwargs`).
    """

    step_overhead_s: float
    per_token_s: float
    max_running: int
    token_budget: int
    engine_prefill_s: float = float("nan")
    engine_decode_s: float = float("nan")
    sim_prefill_s: float = float("nan")
    sim_decode_s: float = float("nan")
    iterations: int = 0
    error: float = float("nan")
    source: str = ""
    policy_s_per_step: float = 0.0
    clock: EngineClock | None = attrs.field(default=None, eq=False)

    def simulate_kwargs(self, clock: bool = True) -> dict:
        """Keyword arguments of :func:`spfcore.sim.simulate` (concurrent
        mode): the constant costs, and ``step_time`` = :attr:`clock` when
        there is one and ``clock`` is true."""
        kw = {"max_running": self.max_running, "token_budget": self.token_budget,
              "step_overhead_s": self.step_overhead_s, "per_token_s": self.per_token_s}
        if clock and self.clock is not None:
            kw["step_time"] = self.clock
        return kw

    def with_policy(self, policy_s_per_step: float, name: str = "") -> Timing:
        """These engine costs for an arm whose policy costs
        ``policy_s_per_step`` seconds per step: ``step_overhead_s`` minus the
        fitted arm's :attr:`policy_s_per_step`, plus the given one (the
        engine's own step cost does not depend on the policy; the policy's
        code runs on the step's critical path, inside vLLM's scheduler). The
        clock is dropped: it is the fitted run's, not this arm's.

        Raises:
            ValueError: a negative or non-finite ``policy_s_per_step``.
        """
        if not (policy_s_per_step >= 0 and np.isfinite(policy_s_per_step)):
            raise ValueError(f"policy_s_per_step must be finite and >= 0, got {policy_s_per_step}")
        a = max(self.step_overhead_s - self.policy_s_per_step, 0.0) + policy_s_per_step
        return attrs.evolve(self, step_overhead_s=a, policy_s_per_step=float(policy_s_per_step), clock=None,
                            source=f"{self.source}, policy {name} {1e3 * policy_s_per_step:.3f} ms/step".strip())

    def to_json(self) -> dict:
        d = attrs.asdict(self, filter=lambda a, v: a.name != "clock")
        if self.clock is not None:
            c = self.clock
            d["clock"] = {"source": c.source, "steps": len(c.start_s), "step_overhead_s": c.step_overhead_s,
                          "per_token_s": c.per_token_s}
        return d


def engine_limits(cell: Mapping, max_running: int | None = None, token_budget: int | None = None) -> tuple[int, int]:
    """The engine run's ``(max_num_seqs, max_num_batched_tokens)``: the cell's
    ``max_num_seqs`` / ``max_num_batched_tokens`` fields when it has them
    (engine cells record them), else the given values.

    Raises:
        ValueError: neither the cell nor the arguments give a limit.
    """
    mr = cell.get("max_num_seqs", max_running)
    tb = cell.get("max_num_batched_tokens", token_budget)
    if mr is None or tb is None:
        raise ValueError(f"engine cell {cell.get('arm')} seed {cell.get('seed')}: no field 'max_num_seqs' / "
                         "'max_num_batched_tokens' (cells before they were recorded): pass max_running "
                         "and token_budget (vLLM's max_num_seqs and max_num_batched_tokens of that run)")
    return int(mr), int(tb)


def _engine_phases(cell: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """Per request of an engine cell: prefill s (TTFT - queue) and decode s (e2e - TTFT)."""
    where = f"engine cell {cell.get('arm')} seed {cell.get('seed')}"
    rows = cell.get("requests")
    if not rows:
        raise ValueError(f"{where}: no per-request records (field 'requests')")
    pre, dec = [], []
    for i, r in enumerate(rows):
        for f in ("ttft_s", "e2e_s", "queue_s"):
            if r.get(f) is None:
                raise ValueError(f"{where}: request {i} ({r.get('request_id')}) has no field {f!r}")
        pre.append(r["ttft_s"] - r["queue_s"])
        dec.append(r["e2e_s"] - r["ttft_s"])
    return np.asarray(pre, dtype=float), np.asarray(dec, dtype=float)


def _replay_spans(prep, arm, options, num_blocks, max_running, token_budget, a, b) -> np.ndarray:
    """``(n, 4)`` spans ``kp, np, kd, nd`` of one concurrent replay."""
    from spfcore.runtime import PolicyRuntime
    from spfcore.sim.simulator import _no_gc, _run_concurrent

    rt = PolicyRuntime.for_policy(arm, num_blocks, prep.block_size, options)
    arr = [r.arrival_s for r in prep.workload.requests]
    views = [attrs.evolve(v, arrival_time=x) for v, x in zip(prep.views, arr)]
    if rt.needs_future:
        rt.set_future(views)
    with _no_gc():
        spans = _run_concurrent(prep, rt, num_blocks, views, max_running, token_budget, a, b)[4]
    return np.asarray(spans, dtype=float)


def fit_timing(runs: Sequence[tuple[Workload, Mapping]], *, num_blocks: int, block_size: int,
               max_running: int | None = None, token_budget: int | None = None, arm: str | None = None,
               options: Mapping | None = None) -> Timing:
    """Fit ``step_overhead_s`` and ``per_token_s`` on engine runs (see the
    module doc): the costs at which the simulator's replay of each run's
    input has the engine's mean prefill time (TTFT - queue) and mean decode
    time (e2e - TTFT), pooled over ``runs``.

    Args:
        runs: ``(workload, engine cell)`` pairs: the input the engine ran
            (arrival times in ``arrival_s``) and its cell (per-request
            ``ttft_s``, ``e2e_s``, ``queue_s``, seconds). Best the floor arm's
            cells: their schedule does not depend on the policy's hits.
        num_blocks: Cache size of the engine run, blocks (null block included).
        block_size: Tokens per block.
        max_running, token_budget: vLLM ``max_num_seqs`` and
            ``max_num_batched_tokens`` of the run, used when the cells do not
            record them (:func:`engine_limits`).
        arm: Policy replayed (default: the first cell's ``arm``).
        options: Its options.

    Returns:
        A :class:`Timing`; ``iterations`` counts the replays. When the fixed
        point misses the engine's means by more than :data:`FIT_ERR` (no
        positive solution, or no convergence within :data:`MAX_ITER`), a
        pattern search over ``(log a, log b)`` minimizes that miss within
        :data:`MAX_REPLAYS` replays; the costs closest to the engine's means
        are returned and ``error`` says how close. ``policy_s_per_step`` is
        the cells' mean :func:`policy_seconds_per_step` (0 unless every cell
        gives it); ``clock`` the one cell's :class:`EngineClock` (``None``
        for several runs or a cell without a step log).

    Raises:
        ValueError: no runs, a cell without per-request times or limits,
            cells with different limits, or an engine run with no decode
            and prefill time to fit (all zeros).
    """
    from spfcore.sim.simulator import prepare

    if not runs:
        raise ValueError("fit_timing: no engine runs to fit on")
    limits = {engine_limits(c, max_running, token_budget) for _, c in runs}
    if len(limits) > 1:
        raise ValueError(f"fit_timing: the runs used different engine limits {sorted(limits)}")
    mr, tb = limits.pop()
    arm = arm or runs[0][1].get("arm")
    preps, pre, dec = [], [], []
    for wl, cell in runs:
        p, d = _engine_phases(cell)
        if len(p) != len(wl.requests):
            raise ValueError(f"engine cell {cell.get('arm')} seed {cell.get('seed')}: {len(p)} requests, "
                             f"its workload has {len(wl.requests)}")
        preps.append(prepare(wl, block_size))
        pre.append(p)
        dec.append(d)
    target = np.array([np.concatenate(pre).mean(), np.concatenate(dec).mean()])
    if not (target > 0).all():
        raise ValueError(f"fit_timing: engine mean prefill {target[0]:.4g} s and decode {target[1]:.4g} s: "
                         "need both > 0")
    # start: every decode step pure overhead, every prefill one step of its prompt's tokens
    n_out = np.concatenate([[r.output_tokens for r in p.workload.requests] for p in preps])
    n_in = np.concatenate([[r.num_prompt_tokens for r in p.workload.requests] for p in preps])
    a = target[1] / max(float(np.mean(np.maximum(n_out - 1, 1))), 1.0)
    b = max(target[0] - a, 0.1 * target[0]) / float(n_in.mean())
    replays = 0

    def evaluate(a: float, b: float):
        """Replay at ``(a, b)``: (error, a, b, simulated means, span means)."""
        nonlocal replays
        replays += 1
        m = np.concatenate([_replay_spans(p, arm, options, num_blocks, mr, tb, a, b) for p in preps]).mean(axis=0)
        got = np.array([a * m[0] + b * m[1], a * m[2] + b * m[3]])  # spans: kp, np, kd, nd
        return float(np.abs(got / target - 1).sum()), a, b, got, m

    best = cur = evaluate(a, b)
    for _ in range(MAX_ITER):  # the fixed point: solve the schedule's linear equations, replay again
        m = cur[4]
        A = np.array([[m[0], m[1]], [m[2], m[3]]])
        try:
            na, nb = (float(x) for x in np.linalg.solve(A, target))
        except np.linalg.LinAlgError:
            break
        if na <= 0 or nb <= 0:  # no positive solution on this schedule: leave it to the search below
            break
        settled = abs(na - a) <= TOL * a and abs(nb - b) <= TOL * b
        a, b = na, nb
        cur = evaluate(a, b)
        best = min(best, cur, key=lambda x: x[0])
        if settled:
            break
    if best[0] > FIT_ERR:  # no fixed point (a step time that drifts, as on a loaded CPU): pattern search
        x, step = np.log([best[1], best[2]]), np.log(2.0)
        while step > np.log(1.01) and replays < MAX_REPLAYS:
            for d in ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, -1), (1, -1), (-1, 1)):
                cand = evaluate(*np.exp(x + step * np.array(d)))
                if cand[0] < best[0]:
                    best, x = cand, np.log([cand[1], cand[2]])
                    break
            else:
                step /= 2
    err, a, b, got, _ = best
    it = replays
    src = ", ".join(f"{c.get('arm')} seed {c.get('seed')}" for _, c in runs)
    pps = [policy_seconds_per_step(c) for _, c in runs]
    pps = float(np.mean(pps)) if all(p is not None for p in pps) else 0.0
    clock = EngineClock.from_cell(runs[0][1]) if len(runs) == 1 else None
    return Timing(step_overhead_s=float(a), per_token_s=float(b), max_running=mr, token_budget=tb,
                  engine_prefill_s=float(target[0]), engine_decode_s=float(target[1]),
                  sim_prefill_s=float(got[0]), sim_decode_s=float(got[1]), iterations=it, error=err,
                  source=f"engine {src}", policy_s_per_step=pps, clock=clock)
