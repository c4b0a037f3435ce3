#!/bin/bash
# ab_future.sh ROUNDS: belady_oracle's index build (spfcore_future_requests on the seed's full-scale stream),
# CPU time, best of 10 per process, base and branch alternating
R=${1:-4}
run() {
  T=$1
  PYTHONPATH=$T:$T/plugins/belady_oracle/src /work/main/.venv/bin/python - $2 <<'PY'
import sys, time
from spfcore.sim import prepare
from spfcore.workloads.generators import make
import spfcore_belady_oracle as B
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
          output_tokens=32, order="round_robin")
views = prepare(wl, 16).views
best = 1e9
for _ in range(10):
    p = B.BeladyOraclePolicy()
    t = time.process_time(); p.spfcore_future_requests(views); best = min(best, time.process_time() - t)
print(sys.argv[1], f"{best * 1e3:.2f} ms", f"{best / len(views) * 1e6:.1f} us/req")
PY
}
for i in $(seq 1 $R); do
  if [ $((i % 2)) = 1 ]; then run /work/wt-base22 base; run /work/wt-bel branch; else run /work/wt-bel branch; run /work/wt-base22 base; fi
done
