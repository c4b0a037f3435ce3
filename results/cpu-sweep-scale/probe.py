import sys, time, resource, json
from spfcore import sweep
trace, frac = sys.argv[1], float(sys.argv[2])
pols = sys.argv[3].split(",")
t=time.perf_counter()
g = sweep.Grid((sweep.Source(trace=trace),), (0,), tuple(sweep.Variant(p) for p in pols), ({"fraction": frac},), ceilings=False)
cells = g.cells()
print(f"grid/digest {time.perf_counter()-t:.1f}s", flush=True)
t=time.perf_counter()
sweep.check_inputs(g)
print(f"check (scan) {time.perf_counter()-t:.1f}s", flush=True)
for c in cells:
    r = sweep.run_cell(c.config())
    cc = r["cell"]
    print(c.policy, r["status"], f"{r['seconds']:.1f}s", r["num_blocks"], r["unique_blocks"], cc.get("block_refs"), cc.get("block_hit_rate"), cc.get("error"),
          f"maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:.0f}MB", flush=True)
