"""The runtime's own cost per request on bench_policy_cost.py's workload (the
seed at full scale, sequential, CPU time), for do-nothing policies: lru (no
hook), ``observe`` (every observation hook, keys-only, reading nothing),
``score`` (observe + a score hook answering None: the scored evictor), and
``score-keys`` (hooks that read ``blocks.keys``, a score of ``Scores(0.0)``).
Best and median of ``--repeat`` interleaved rounds.

    python results/issue11-s20-floor/floors.py [--repeat 5]

(A copy of results/issue11w-hotpath/floors.py; the runtime is built as the
simulator builds it: ``key_map=False`` where the tree has that option.)
"""
import argparse
import inspect
import os
import statistics
import sys
import time

from spfcore import Scores, hookimpl, registry, runtime
from spfcore.runtime import PolicyRuntime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV, _run_sequential
from spfcore.workloads.generators import make


class Observe:
    @hookimpl
    def spfcore_request_arrived(self, request, now):
        pass

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        pass

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        pass

    @hookimpl
    def spfcore_request_finished(self, request, now):
        pass

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        pass


class Score(Observe):
    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        return None


class ScoreKeys(Observe):
    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        blocks.keys

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        blocks.keys

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        blocks.keys
        return Scores(0.0)


#: as the simulator builds its runtime (no key map) where the tree has the option (base: it keeps one)
KEY_MAP = {"key_map": False} if "key_map" in inspect.signature(PolicyRuntime).parameters else {}

FLOORS = {"observe": Observe, "score": Score, "score-keys": ScoreKeys}


def run(prep, arm):
    if arm == "lru":
        rec = simulate(prep, arm, num_blocks=3561, block_size=16)
        return rec["policy_seconds"]
    pm = registry.new_plugin_manager()
    pm.register(FLOORS[arm](), name=arm)
    rt = PolicyRuntime(pm, 3561, 16, policy_name=arm, keys_only=True, **KEY_MAP)
    _run_sequential(prep.plans, rt, 3561, 16)
    return rt.policy_seconds


ap = argparse.ArgumentParser()
ap.add_argument("--repeat", type=int, default=5)
a = ap.parse_args()
os.environ[REPLAY_ENV] = "python"
runtime._perf = time.process_time
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4,
          query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
n = len(wl.requests)
arms = ["lru", *FLOORS]
per = {x: [] for x in arms}
for _ in range(a.repeat):
    for arm in arms:
        per[arm].append(run(prep, arm) / n * 1e3)
for arm in arms:
    print(f"{arm:<12} best {min(per[arm]):.3f} median {statistics.median(per[arm]):.3f} ms/req")
