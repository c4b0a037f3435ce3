#!/bin/bash
# bench_policy_cost.py (seed full scale, warm, CPU time): baseline and branch processes alternating,
# the first tree swapped each round. Usage: ab_cost.sh BASE_TREE BRANCH_TREE ROUNDS [ARMS] > ab_cost.log
A=$1; B=$2; R=${3:-6}; ARMS=${4:-lru,session_ttl,frequency,spf_expected_utility,belady_oracle}
for r in $(seq $R); do
  if [ $((r % 2)) = 1 ]; then order="$A $B"; else order="$B $A"; fi
  for T in $order; do
    PP=$T:$(ls -d $T/plugins/*/src | paste -sd:); cd $T
    PYTHONPATH=$PP /work/main/.venv/bin/python benchmarks/bench_policy_cost.py --arms $ARMS --repeat ${REPEAT:-3} 2>&1 \
      | grep -E "^(lru|frequency|session_ttl|spf_expected_utility|belady_oracle) " | sed "s/^/round $r $(basename $T) cost /"
  done
done
echo ALLDONE
