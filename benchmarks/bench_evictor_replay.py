"""The scored evictor's own time per request, apart from the hooks and the
runtime: one arm's sequential replay (default spf_expected_utility on the
seed's full-scale workload, as ``bench_policy_cost.py``) is run once with the
:class:`~spfcore.evictor.Evictor`'s public calls recorded (arguments, and the
score hook's answers); the recording is then replayed ``--repeat`` times on a
fresh evictor whose hooks (score, admission, victim choice) hand the
recorded answers back, timing each
call with ``perf_counter``. Prints the best and median ms per request, the
time per method in the best replay, and a digest of the victims (the same
digest on two trees: the same decisions). Prints figures; asserts nothing.

    PYTHONPATH=<tree>:<its plugins> python benchmarks/bench_evictor_replay.py [--arm spf_expected_utility] [--repeat 7]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time

import numpy as np

from spfcore import evictor
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.workloads.generators import make

CALLS = ("push_cached", "push_hashless", "remove", "remove_many", "pin", "plan_expired", "plan_rescore", "commit",
         "pop", "unpop")


def _copy(x):
    if isinstance(x, np.ndarray):
        return x.copy()
    return list(x) if isinstance(x, (list, tuple)) else x


def record(prep, arm: str, num_blocks: int, block_size: int) -> tuple[list, list, dict]:
    """One replay of ``arm`` with the scored evictor's top-level calls recorded.

    Returns:
        ``(calls, answers, init)``: calls ``(method, args)`` in order (a
        ``commit`` names its plan by the position of the ``plan_*`` call that
        made it; a ``pop`` / ``unpop`` pair shares the pop's position), each
        hook's answers in order (``{"score": [...], "admit": [...],
        "choose": [...]}``), and the evictor's constructor options (which
        hooks it had among them).
    """
    E = evictor.Evictor
    calls: list = []
    answers: dict = {"score": [], "admit": [], "choose": []}
    init: dict = {}
    made: dict = {}  # id(result of a plan_* or pop) -> position in calls
    depth = [0]
    orig = {name: getattr(E, name) for name in CALLS + ("__init__",)}

    def new_init(self, num_blocks, **kw):
        orig["__init__"](self, num_blocks, **kw)
        hooks = {h: kw.get(h) for h in answers}
        if not self._flat and not init:  # the runtime's scored evictor
            init.update(num_blocks=num_blocks, pin_cap_fraction=kw.get("pin_cap_fraction", 0.5),
                        score_arrays=kw.get("score_arrays", False),
                        hooks=[h for h, f in hooks.items() if f is not None])

            def recorder(h, f):
                def recorded(*args):
                    res = f(*args)
                    if h == "score":
                        answers[h].append(None if res is None else tuple(_copy(c) for c in res))
                    else:
                        answers[h].append(_copy(res))
                    return res
                return recorded
            for h, f in hooks.items():
                if f is not None:
                    setattr(self, "_" + h, recorder(h, f))
            self._recorded = True

    def wrap(name):
        f = orig[name]

        def w(self, *args):
            depth[0] += 1
            try:
                res = f(self, *args)
            finally:
                depth[0] -= 1
            if depth[0] == 0 and getattr(self, "_recorded", False):
                if name in ("commit", "unpop"):
                    calls.append((name, made.get(id(args[0])) if args[0] is not None else None))
                else:
                    if name.startswith("plan_") or name == "pop":
                        made[id(res)] = len(calls)
                    calls.append((name, tuple(_copy(a) for a in args)))
            return res
        return w

    E.__init__ = new_init
    for name in CALLS:
        setattr(E, name, wrap(name))
    try:
        simulate(prep, arm, num_blocks=num_blocks, block_size=block_size)
    finally:
        for name, f in orig.items():
            setattr(E, name, f)
    return calls, answers, init


def replay(calls: list, answers: list, init: dict) -> tuple[float, dict, list]:
    """Replay a recording on a fresh evictor; returns ``(seconds, seconds per
    method, victims)``."""
    its = {h: iter(a) for h, a in answers.items()}
    hooks = {h: (lambda *args, _it=its[h]: next(_it)) for h in init["hooks"]}
    ev = evictor.Evictor(init["num_blocks"], **hooks, pin_cap_fraction=init["pin_cap_fraction"],
                         score_arrays=init["score_arrays"])
    results: dict = {}
    per: dict = {}
    victims: list = []
    pc = time.perf_counter
    total = 0.0
    for k, (name, args) in enumerate(calls):
        t = pc()
        if name in ("commit", "unpop"):
            res = getattr(ev, name)(results.pop(args) if args is not None else None)
        else:
            res = results[k] = getattr(ev, name)(*args)
        d = pc() - t
        total += d
        per[name] = per.get(name, 0.0) + d
        if name == "pop":
            victims.append(list(res))
    return total, per, victims


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", default="spf_expected_utility")
    ap.add_argument("--num-blocks", type=int, default=3561)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error(f"argument --repeat: must be >= 1, got {a.repeat}")
    if a.num_blocks < 2:
        ap.error(f"argument --num-blocks: must be >= 2 (the null block + 1), got {a.num_blocks}")
    from spfcore import registry
    try:
        registry.get(a.arm)
    except registry.PolicyConfigError as exc:
        ap.error(f"argument --arm: {exc}")
    os.environ[REPLAY_ENV] = "python"  # the event-by-event path the engine runs
    wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4,
              query_tokens=128, output_tokens=32, order="round_robin")
    prep = prepare(wl, 16)
    n = len(wl.requests)
    calls, answers, init = record(prep, a.arm, a.num_blocks, 16)
    if not init:
        print(f"{a.arm}: no scored evictor (no score, admission or victim hook): nothing to replay")
        return
    runs = [replay(calls, answers, init) for _ in range(a.repeat)]
    best = min(runs, key=lambda r: r[0])
    digest = hashlib.sha256(repr(best[2]).encode()).hexdigest()[:16]
    print(f"{a.arm}: {len(calls)} evictor calls, hook answers "
          f"{ {h: len(v) for h, v in answers.items() if h in init['hooks']} }; victims sha256 {digest}")
    print(f"evictor ms/req: best {best[0] / n * 1e3:.4f}, median "
          f"{statistics.median(r[0] for r in runs) / n * 1e3:.4f} ({a.repeat} replays)")
    for name, s in sorted(best[1].items(), key=lambda x: -x[1]):
        print(f"  {name:<14}{s / n * 1e3:9.4f} ms/req")


if __name__ == "__main__":
    main()
