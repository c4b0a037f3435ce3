#!/bin/bash
# alternating A/B of bench_policy_cost.py (CPU time, best of 5 per process): base /work/wt-base22 vs branch /work/wt-spf
ARM=${ARM:-spf_expected_utility}; ROUNDS=${ROUNDS:-4}
run() { local W=$1; PYTHONPATH=$W:$W/plugins/classic/src:$W/plugins/frequency/src:$W/plugins/session_ttl/src:$W/plugins/spf_expected_utility/src:$W/plugins/belady_oracle/src \
  /work/main/.venv/bin/python $W/benchmarks/bench_policy_cost.py --arms $ARM --repeat 5 | grep "^$ARM"; }
for r in $(seq 1 $ROUNDS); do
  if [ $((r % 2)) -eq 1 ]; then echo "r$r base $(run /work/wt-base22)"; echo "r$r branch $(run /work/wt-spf)"
  else echo "r$r branch $(run /work/wt-spf)"; echo "r$r base $(run /work/wt-base22)"; fi
done
