#!/bin/bash
# Engine-path cost only (bench_policy_cost), more rounds: main and branch processes alternating,
# the first tree swapped each round. Usage: ab_cost_only.sh MAIN_TREE BRANCH_TREE ROUNDS > ab_cost_only.log
A=$1; B=$2; R=${3:-10}
for r in $(seq $R); do
  if [ $((r % 2)) = 1 ]; then order="$A $B"; else order="$B $A"; fi
  for T in $order; do
    PP=$T:$(ls -d $T/plugins/*/src | paste -sd:); cd $T
    PYTHONPATH=$PP /work/main/.venv/bin/python benchmarks/bench_policy_cost.py --arms lru,frequency,session_ttl --repeat 5 2>&1 \
      | grep -E "^(lru|frequency|session_ttl) " | sed "s/^/round $r $(basename $T) cost /"
  done
done
echo ALLDONE
