"""The simulator's concurrent model against the engine under load: token hit
rate per load level and arm, from a gate ``--load`` run's results.

Usage::

    python benchmarks/sim_vs_engine_load.py RUN_FOLDER [--models recorded,default,floor,floor+policy,own,clock]
        [--max-running N --token-budget N] [--arms a,b]

``RUN_FOLDER`` holds ``load-<F>/results.json`` (``spfcore gate --load``). For
each level, arm and seed the engine cell's ``token_hit_rate`` is compared with
the simulator's on the same input (the workload is rebuilt from the run's
config; its arrival times are checked against the engine's):

* ``recorded``: the sim cell stored in the run (whatever code made it);
* ``default``: :func:`spfcore.sim.simulate` with its default concurrent
  parameters, as the gate called it before the step costs were fitted (run
  this under an older checkout's ``PYTHONPATH`` to get that code's figures);
* ``floor``: step costs fitted on the floor arm's (``lru``) engine cell of the
  same seed (:func:`spfcore.sim.calibrate.fit_timing`): a prediction for the
  other arms, what the gate now records;
* ``floor+policy``: the floor fit with the floor's policy seconds per step
  swapped for the arm's own (:meth:`spfcore.sim.calibrate.Timing.with_policy`:
  the arm's engine ``policy_seconds / num_steps``, cells that log their steps);
* ``own``: constant step costs fitted on the arm's own engine cell: the
  model's error given the engine's mean speed in that run;
* ``clock``: the arm's own engine step log replayed as the step time
  (:class:`spfcore.sim.calibrate.EngineClock`, what the gate records when the
  cells log their steps): the model's error given the engine's speed step by
  step, i.e. without the machine's noise.

``--max-running`` / ``--token-budget`` give vLLM's ``max_num_seqs`` /
``max_num_batched_tokens`` for cells recorded before the engine wrote them
(the H200 runs of ``results/gpu-h200-x2-c298da1``: 8 and 16,384).
Prints one row per level and arm (mean over seeds, gap = sim - engine in
points) and the per-seed gaps.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--models", default="recorded,default,floor,floor+policy,own,clock")
    ap.add_argument("--max-running", type=int, default=None)
    ap.add_argument("--token-budget", type=int, default=None)
    ap.add_argument("--arms", default=None)
    ap.add_argument("--floor", default="lru")
    a = ap.parse_args(argv)
    from spfcore.sim import simulate
    from spfcore.workloads.generators import make

    models = a.models.split(",")
    print(f"{'load':>5} {'arm':22} {'engine':>7} " + " ".join(f"{m:>17}" for m in models))
    for lvl in sorted(a.run.glob("load-*/results.json"), key=lambda p: float(p.parent.name[5:])):
        d = json.loads(lvl.read_text())
        cfg = d["config"]
        nb, bs = cfg["num_blocks"], cfg["block_size"]
        eng = {(c["arm"], c["seed"]): c for c in d["cells"] if not c.get("error") and not c.get("repeat")}
        rec = {(c["arm"], c["seed"]): c for c in (d.get("sim") or {}).get("cells", ()) if not c.get("error")}
        arms = a.arms.split(",") if a.arms else [x for x in cfg["arms"] if x != a.floor]
        fits: dict = {}
        for arm in arms:
            rows = {m: [] for m in models}
            e_hits = []
            for seed in cfg["seeds"]:
                e = eng.get((arm, seed))
                if e is None:
                    continue
                wl = make(cfg["workload"], seed=seed, **cfg["workload_flags"])
                ea = [r["arrival_s"] for r in e["requests"]]
                if max(abs(x - r.arrival_s) for x, r in zip(ea, wl.requests)) > 1e-3:
                    raise SystemExit(f"{lvl}: seed {seed}: the rebuilt workload's arrivals differ from the engine's")
                e_hits.append(e["token_hit_rate"])
                for m in models:
                    if m == "recorded":
                        r = rec.get((arm, seed))
                        rows[m].append(r["token_hit_rate"] if r else np.nan)
                        continue
                    kw = {}
                    if m in ("floor", "floor+policy", "own", "clock"):
                        from spfcore.sim.calibrate import fit_timing, policy_seconds_per_step

                        src = (a.floor if m.startswith("floor") else arm, seed)
                        if src not in fits:
                            fits[src] = fit_timing([(wl, eng[src])], num_blocks=nb, block_size=bs,
                                                   max_running=a.max_running, token_budget=a.token_budget,
                                                   arm=src[0])
                        t = fits[src]
                        if m == "floor+policy":
                            pps = policy_seconds_per_step(e)
                            if pps is None:
                                raise SystemExit(f"{lvl}: {arm} seed {seed}: no policy_seconds / num_steps "
                                                 "(cells before the step log): no floor+policy model")
                            t = t.with_policy(pps, arm)
                        if m == "clock" and t.clock is None:
                            raise SystemExit(f"{lvl}: {arm} seed {seed}: no step log (cells before it): no clock model")
                        kw = t.simulate_kwargs(clock=m == "clock")
                    rows[m].append(simulate(wl, arm, num_blocks=nb, block_size=bs, mode="concurrent",
                                            **kw)["token_hit_rate"])
            if not e_hits:
                continue
            eh = np.array(e_hits)
            cols = []
            for m in models:
                v = np.array(rows[m])
                cols.append(f"{100 * v.mean():6.2f} ({100 * (v.mean() - eh.mean()):+5.2f})")
            print(f"{lvl.parent.name[5:]:>5} {arm:22} {100 * eh.mean():7.2f} " + " ".join(f"{c:>17}" for c in cols))
            for m in models:
                v = np.array(rows[m])
                print(f"{'':>5} {'':22} {m:>7} per-seed gaps: " + " ".join(f"{100 * (x - y):+.1f}" for x, y in zip(v, eh)))
        for (arm, seed), t in sorted(fits.items()):
            print(f"{'':>5} fit on {arm} seed {seed}: step {1e3 * t.step_overhead_s:.2f} ms + "
                  f"{1e6 * t.per_token_s:.2f} us/token (policy {1e3 * t.policy_s_per_step:.3f} ms/step), "
                  f"max_num_seqs {t.max_running}, max_num_batched_tokens {t.token_budget}")


if __name__ == "__main__":
    main()
