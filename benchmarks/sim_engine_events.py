"""What the engine and the simulator's concurrent model tell a policy, event by
event, on the CPU engine test's workload under load (issue 15, part 4).

Usage::

    python benchmarks/sim_engine_events.py OUT_DIR [--runs N] [--arms lru,spf_expected_utility]
    python benchmarks/sim_engine_events.py OUT_DIR --replay   # again on recorded runs, no engine

Each run is ``tests/test_sim_calibrate.py``'s load test (4 personas x 256
tokens, 8 sessions x 3 turns, 24 requests, 30 blocks of 32 tokens,
``max_num_seqs`` 4, Poisson arrivals at 0.8 of lru's capacity measured in the
run) through :func:`spfcore.run.pipeline.run_load_gate`, in
``OUT_DIR/run-<i>``. The engine's events are recorded while it runs
(:func:`spfcore.sim.replay.record_runtime_calls`, kept as
:func:`spfcore.sim.events.events`); then each arm is replayed in the
simulator on the engine's own step clock, as the gate does, with its events
recorded too. Prints per arm: token hit rate (engine / sim), preemptions,
engine step times, requests whose cached tokens differ, and where the two
event streams first part (labels, then physical block ids); then per arm how
many runs had every request the same and the same events. ``--replay`` re-simulates the runs
already in ``OUT_DIR`` (their engine events kept in ``events-<arm>.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

FLAGS = {"personas": 4, "prefix_tokens": 256, "sessions": 8, "turns": 3, "query_tokens": 32, "output_tokens": 8}


def config(arms):
    from spfcore import gate
    from spfcore.run.spec import GateConfig

    return GateConfig(workload="personas", workload_flags=FLAGS, arms=tuple(arms), seeds=(5,), block_size=32,
                      num_blocks=30, cache_pressure=None,
                      engine={"model": "tiny", "max_num_seqs": 4, "dtype": "float32"},
                      roles=gate.Roles(candidate=arms[-1], baseline="lru", floor="lru", oracle=None),
                      thresholds=gate.GateThresholds(min_seeds=1), command="sim_engine_events")


def engine_run(folder: Path, arms) -> None:
    from spfcore.run.pipeline import run_load_gate
    from spfcore.sim.events import events
    from spfcore.sim.replay import record_runtime_calls

    folder.mkdir(parents=True, exist_ok=True)
    with record_runtime_calls() as log:
        run_load_gate(config(arms), folder / "results.json", (0.8,), progress=False, plots=False)
    for arm in arms:  # the timed cell: the last engine runtime of the arm that saw every request
        timed = [k for k, rt in log.runtimes.items() if log.drivers[k] == "engine" and rt.policy_name == arm
                 and sum(c[0] == "arrived" for c in log.events.get(k, ())) == 24]
        # none for lru: vLLM's own queue serves it and no runtime event is reported (serve_vllm_order)
        doc = {"policy": arm, "driver": "engine", "events": events(log.events[timed[-1]]) if timed else None}
        (folder / f"events-{arm}.json").write_text(json.dumps(doc))


def compare(folder: Path, arms) -> list:
    import numpy as np

    from spfcore.sim import simulate
    from spfcore.sim.calibrate import fit_timing
    from spfcore.sim.events import events, first_difference, from_json
    from spfcore.sim.replay import record_runtime_calls
    from spfcore.workloads.generators import make

    res = json.loads((folder / "load-0.8" / "results.json").read_text())
    cfg = res["config"]
    wl = make(cfg["workload"], seed=5, **cfg["workload_flags"])
    eng = {c["arm"]: c for c in res["cells"] if not c.get("repeat")}
    out = []
    for arm in arms:
        e = eng[arm]
        t = fit_timing([(wl, e)], num_blocks=cfg["num_blocks"], block_size=cfg["block_size"], arm=arm)
        with record_runtime_calls() as log:
            s = simulate(wl, arm, num_blocks=cfg["num_blocks"], block_size=cfg["block_size"], mode="concurrent",
                         **t.simulate_kwargs())
        sim_events = events(list(log.events.values())[-1])
        raw = json.loads((folder / f"events-{arm}.json").read_text())["events"]
        diff = [(i, x["cached_tokens"], y["cached_tokens"])
                for i, (x, y) in enumerate(zip(e["requests"], s["requests"])) if x["cached_tokens"] != y["cached_tokens"]]
        p10, p50, p90 = (1e3 * float(x) for x in np.percentile(e["steps"]["dur_s"], [10, 50, 90]))
        print(f"{folder.name} {arm}: engine {100 * e['token_hit_rate']:.2f} sim {100 * s['token_hit_rate']:.2f} "
              f"preemptions {e.get('preemptions')} steps {e.get('num_steps')} (p10/50/90 {p10:.0f}/{p50:.0f}/{p90:.0f} "
              f"ms) requests differing {len(diff)} {diff}")
        if raw is None:
            print("  events: none reported (served by vLLM's own queue: PolicyFreeQueue.serve_vllm_order)")
            out.append((arm, e["token_hit_rate"], s["token_hit_rate"], len(diff), None))
            continue
        eng_events = from_json(raw)
        same = []
        for ids in (False, True):
            d = first_difference(eng_events, sim_events, ids=ids)
            same.append(d is None)
            print(("  events (labels): " if not ids else "  events (ids): ") + ("same" if d is None else d))
        out.append((arm, e["token_hit_rate"], s["token_hit_rate"], len(diff), all(same)))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--arms", default="lru,spf_expected_utility")
    ap.add_argument("--replay", action="store_true")
    a = ap.parse_args(argv)
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if a.runs < 1:
        ap.error(f"argument --runs: must be >= 1, got {a.runs}")
    from spfcore import registry

    for arm in arms or [""]:  # before any engine starts
        try:
            registry.get(arm)
        except registry.PolicyConfigError as exc:
            ap.error(f"argument --arms: {exc}")
    if a.replay:
        folders = sorted({p.parent for p in a.out.glob("run-*/events-*.json")}, key=lambda p: int(p.name[4:]))
        if not folders:
            ap.error(f"--replay: no recorded runs in {a.out} (run-<i>/events-<arm>.json)")
    else:
        start = 1 + max((int(p.name[4:]) for p in a.out.glob("run-*") if p.name[4:].isdigit()), default=-1)
        folders = [a.out / f"run-{start + i}" for i in range(a.runs)]
    rows = []
    for f in folders:
        if not a.replay:
            engine_run(f, arms)
        rows += compare(f, arms)
    print("\narm                   runs  all requests the same  events the same  max |gap| (points)")
    for arm in arms:
        r = [x for x in rows if x[0] == arm]
        print(f"{arm:22s} {len(r):4d} {sum(x[3] == 0 for x in r):22d} {sum(bool(x[4]) for x in r):16d}  "
              f"{max(abs(x[2] - x[1]) for x in r) * 100:.2f}"
              + ("  (no engine events: vLLM's own queue)" if any(x[4] is None for x in r) else ""))


if __name__ == "__main__":
    main()
