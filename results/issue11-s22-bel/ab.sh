#!/bin/bash
# ab.sh ARM ROUNDS: base (/work/wt-base22) and branch (/work/wt-bel) alternating in separate processes
# (base, branch, branch, base, ...), each bench_policy_cost.py --arms ARM --repeat 5 (CPU time, best of 5)
ARM=$1; R=${2:-4}
run() {
  T=$1
  PYTHONPATH=$T:$T/plugins/classic/src:$T/plugins/frequency/src:$T/plugins/session_ttl/src:$T/plugins/spf_expected_utility/src:$T/plugins/belady_oracle/src \
    /work/main/.venv/bin/python $T/benchmarks/bench_policy_cost.py --arms $ARM --repeat 5 | awk -v t=$2 -v a=$ARM '$1==a {print t, $2, $5}'
}
for i in $(seq 1 $R); do
  if [ $((i % 2)) = 1 ]; then run /work/wt-base22 base; run /work/wt-bel branch; else run /work/wt-bel branch; run /work/wt-base22 base; fi
done
