"""Run ARM's replay REPS times after one warm run (prepare and numba loads outside): under
cachegrind, Ir(REPS=1) - Ir(REPS=0) is one replay's instruction count."""
import os, sys
sys.path.insert(0, os.getcwd() + "/benchmarks")
import bench_sim as B
from spfcore.sim import prepare
from spfcore.workloads.traces import read_mooncake
n = int(sys.argv[3]) if len(sys.argv) > 3 else 0
wl = read_mooncake(B.TRACE, limit=n) if n else read_mooncake(B.TRACE)
prep = prepare(wl, 512)
B.run(prep, sys.argv[1], 9140)
for _ in range(int(sys.argv[2])):
    B.run(prep, sys.argv[1], 9140)
