"""bench_policy_cost's workload with the block hashes as given (128-bit ints) and remapped to
dense small ints (one object per distinct hash, as an adapter interning vLLM's hashes would hand
on): CPU ms/request of the runtime and of the hooks, per arm, interleaved rounds."""
import os, sys, time, statistics, dataclasses
os.environ["SPFCORE_SIM_REPLAY"] = "python"
from spfcore import runtime
from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
runtime._perf = time.process_time
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4,
          query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
n = len(wl.requests)
ids = {}
def dense(keys):
    return tuple(ids.setdefault(k, len(ids)) for k in keys)
try:
    views = tuple(dataclasses.replace(v, block_keys=dense(v.block_keys)) for v in prep.views)
except TypeError:
    import attrs
    views = tuple(attrs.evolve(v, block_keys=dense(v.block_keys)) for v in prep.views)
prep_d = dataclasses.replace(prep, views=views) if dataclasses.is_dataclass(prep) else None
if prep_d is None:
    import attrs
    prep_d = attrs.evolve(prep, views=views)
arms = sys.argv[1].split(",")
res = {(a, k): [] for a in arms for k in ("hash", "dense")}
for r in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
    for a in arms:
        for k, p in (("hash", prep), ("dense", prep_d)):
            rec = simulate(p, a, num_blocks=3561, block_size=16)
            res[a, k].append((rec["policy_seconds"] / n * 1e3, rec["hook_seconds"] / n * 1e3, rec["hit_blocks"]))
print(f"{'arm':<22}{'keys':<7}{'best ms/req':>12}{'median':>8}{'hooks best':>11}{'hooks med':>10}{'hit blocks':>11}")
for a in arms:
    for k in ("hash", "dense"):
        xs = res[a, k]
        print(f"{a:<22}{k:<7}{min(x[0] for x in xs):>12.3f}{statistics.median(x[0] for x in xs):>8.3f}"
              f"{min(x[1] for x in xs):>11.3f}{statistics.median(x[1] for x in xs):>10.3f}{xs[0][2]:>11}")
