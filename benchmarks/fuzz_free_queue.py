"""Stateful fuzz of the policy-ordered free queue in vLLM's block pool, at
benchmark scale: the state machine of ``tests/test_fuzz_free_queue.py`` for
every shipped policy, ``--sequences`` random operation sequences in all
(default 10,000, in rounds of ``--chunk`` per policy), ``--steps`` operations each,
vLLM's invariants checked after every step. Prints the running count after
each round, then sequences and wall time per policy; stops with the failing,
shrunk sequence (hypothesis) on the first failure.

    .venv/bin/python benchmarks/fuzz_free_queue.py [--sequences 10000] [--steps 40] [--policies lru,frequency]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequences", type=int, default=10_000, help="operation sequences in all")
    ap.add_argument("--steps", type=int, default=40, help="most operations per sequence")
    ap.add_argument("--policies", default=None, help="comma-separated (default: every shipped policy)")
    ap.add_argument("--chunk", type=int, default=100, help="sequences per policy per round")
    a = ap.parse_args()
    path = Path(__file__).resolve().parents[1] / "tests" / "test_fuzz_free_queue.py"
    spec = importlib.util.spec_from_file_location("fuzz_free_queue_machine", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    policies = a.policies.split(",") if a.policies else list(mod.POLICIES)
    machines = {p: mod._machine(p) for p in policies}
    secs = dict.fromkeys(policies, 0.0)
    t_all = time.perf_counter()
    # rounds of --chunk sequences per policy (each a fresh hypothesis run), so progress shows as it goes
    while sum(m.sequences for m in machines.values()) < a.sequences:
        for p, cls in machines.items():
            t = time.perf_counter()
            run_state_machine_as_test(cls, settings=settings(
                max_examples=a.chunk, stateful_step_count=a.steps, deadline=None, database=None,
                suppress_health_check=list(HealthCheck)))
            secs[p] += time.perf_counter() - t
        done = sum(m.sequences for m in machines.values())
        print(f"{done:>8,} sequences, {time.perf_counter() - t_all:>7.0f} s: "
              + ", ".join(f"{p} {m.sequences:,}" for p, m in machines.items()), flush=True)
    print(f"\n{'policy':<22}{'sequences':>10}{'seconds':>10}")
    for p, cls in machines.items():
        print(f"{p:<22}{cls.sequences:>10,}{secs[p]:>10.1f}")
    print(f"{'all':<22}{sum(m.sequences for m in machines.values()):>10,}{time.perf_counter() - t_all:>10.1f}"
          f"   (<= {a.steps} steps each, vLLM's invariants after every step; no failure)")

if __name__ == "__main__":
    sys.exit(main())
