"""Stateful fuzz of the policy-ordered free queue in vLLM's block pool, at
benchmark scale: the state machine of ``tests/test_fuzz_free_queue.py`` for
every shipped policy, ``--sequences`` random operation sequences in all
(default 10,000, split evenly over the policies), ``--steps`` operations each,
vLLM's invariants checked after every step. Prints, per policy, sequences run,
steps and wall time; exits 1 on the first failure (hypothesis prints the
shrunk sequence).

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
    a = ap.parse_args()
    path = Path(__file__).resolve().parents[1] / "tests" / "test_fuzz_free_queue.py"
    spec = importlib.util.spec_from_file_location("fuzz_free_queue_machine", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    policies = a.policies.split(",") if a.policies else list(mod.POLICIES)
    per = -(-a.sequences // len(policies))
    total_seq, t_all = 0, time.perf_counter()
    print(f"{'policy':<22}{'sequences':>10}{'seconds':>10}")
    for p in policies:
        cls = mod._machine(p)
        t = time.perf_counter()
        try:
            run_state_machine_as_test(cls, settings=settings(
                max_examples=per, stateful_step_count=a.steps, deadline=None, database=None,
                suppress_health_check=list(HealthCheck)))
        finally:
            dt = time.perf_counter() - t
            print(f"{p:<22}{cls.sequences:>10,}{dt:>10.1f}", flush=True)
            total_seq += cls.sequences
    print(f"{'all':<22}{total_seq:>10,}{time.perf_counter() - t_all:>10.1f}   (<= {a.steps} steps each, "
          "invariants after every step)")


if __name__ == "__main__":
    sys.exit(main())
