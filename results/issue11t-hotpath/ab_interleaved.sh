#!/bin/bash
# Interleaved A/B of main and branch issue11t (separate processes, alternating, the first tree
# swapped each round). Usage: ab_interleaved.sh MAIN_TREE BRANCH_TREE ROUNDS > ab_interleaved.log
A=$1; B=$2; R=${3:-6}
PY=/work/main/.venv/bin/python
for r in $(seq $R); do
  if [ $((r % 2)) = 1 ]; then order="$A $B"; else order="$B $A"; fi
  for T in $order; do
    PP=$T:$(ls -d $T/plugins/*/src | paste -sd:); cd $T
    tag=$(basename $T)
    PYTHONPATH=$PP $PY benchmarks/bench_policy_cost.py --arms lru,belady_oracle,frequency,session_ttl,spf_expected_utility \
      --repeat 3 2>&1 | grep -E "^(lru|belady_oracle|frequency|session_ttl|spf_expected_utility) " | sed "s/^/round $r $tag cost /"
    PYTHONPATH=$PP $PY benchmarks/bench_sim.py --arms lru,belady_oracle,frequency,session_ttl --floors \
      --repeat 2 2>&1 | grep -E "^(lru|bel|freq|sess|floor)" | sed "s/^/round $r $tag sim /"
  done
done
echo ALLDONE
