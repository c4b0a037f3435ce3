#!/bin/bash
# Paired A/B: base (/work/wt-base22) vs branch (/work/wt-ttl), alternating separate processes,
# each bench_policy_cost.py --arms ARM --repeat 5 (CPU time, best of 5 per process).
ARM=${1:-session_ttl}; ROUNDS=${2:-4}
run() { W=$1; PYTHONPATH=$W:$W/plugins/classic/src:$W/plugins/frequency/src:$W/plugins/session_ttl/src:$W/plugins/spf_expected_utility/src:$W/plugins/belady_oracle/src \
  /work/main/.venv/bin/python $W/benchmarks/bench_policy_cost.py --arms $ARM --repeat 5 | awk -v a=$ARM '$1==a {print $2, $5}'; }
for r in $(seq 1 $ROUNDS); do
  if (( r % 2 )); then b=$(run /work/wt-base22); t=$(run /work/wt-ttl); else t=$(run /work/wt-ttl); b=$(run /work/wt-base22); fi
  echo "round $r base $b branch $t" | awk '{printf "%s ratio total %.3f hooks %.3f\n", $0, $7/$4, $8/$5}'
done
