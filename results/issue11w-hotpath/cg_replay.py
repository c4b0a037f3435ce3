"""Instruction count of one arm's runtime calls: the simulator's recorded
stream of bench_policy_cost.py's workload (``sim_stream.py record``)
replayed into a fresh runtime, inside ``itertools.starmap`` so that callgrind
counts only the replay (runtime construction and ``set_future`` outside it;
a first replay warms numba's kernels and the caches' imports):

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=starmap_next \\
        python results/issue11w-hotpath/cg_replay.py STREAM.pkl ARM
"""
import pickle
import sys
from collections import deque
from itertools import starmap

from spfcore.runtime import PolicyRuntime

path, arm = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    doc = pickle.load(f)
nb, bs = doc["num_blocks"], doc["block_size"]
ev = [e for e in doc["streams"][(arm, "sim")] if e[0] != "_step"]
pre = [e for e in ev if e[0] == "set_future"]
ev = [e for e in ev if e[0] != "set_future"]


def fresh():
    rt = PolicyRuntime.for_policy(arm, nb, bs, None, env={})
    for name, args, _ in pre:
        getattr(rt, name)(*args)
    return rt


def replay(rt):
    for name, args, _ in ev:
        getattr(rt, name)(*args)


replay(fresh())  # warm: kernels loaded, lazy imports done
rt = fresh()
deque(starmap(replay, [(rt,)]), maxlen=0)
print(arm, "requests", doc["requests"], "evictions", rt.evictions)
