#!/bin/bash
# A/B: A=$1 tree, B=$2 tree, alternating, bench_policy_cost --arms session_ttl --repeat 5
run() { W=$1; PYTHONPATH=$W:$W/plugins/classic/src:$W/plugins/frequency/src:$W/plugins/session_ttl/src:$W/plugins/spf_expected_utility/src:$W/plugins/belady_oracle/src \
  /work/main/.venv/bin/python $W/benchmarks/bench_policy_cost.py --arms session_ttl --repeat 5 $EXTRA | awk '$1=="session_ttl" {print $2, $5}'; }
for r in $(seq 1 ${3:-4}); do
  if (( r % 2 )); then b=$(run $1); t=$(run $2); else t=$(run $2); b=$(run $1); fi
  echo "round $r A $b B $t" | awk '{printf "%s ratio total %.3f hooks %.3f\n", $0, $7/$4, $8/$5}'
done
