#!/bin/bash
# bench_policy_cost.py --engine-events FILE --thrash-mb MB (the recorded engine stream replayed, warm and with MB
# MiB written before each engine step; CPU time): baseline and branch processes alternating, the first tree
# swapped each round. Usage: ab_engine.sh BASE_TREE BRANCH_TREE FILE ROUNDS [MB] > ab_engine.log
A=$1; B=$2; F=$3; R=${4:-5}; MB=${5:-64}
for r in $(seq $R); do
  if [ $((r % 2)) = 1 ]; then order="$A $B"; else order="$B $A"; fi
  for T in $order; do
    PP=$T:$(ls -d $T/plugins/*/src | paste -sd:); cd $T
    PYTHONPATH=$PP /work/main/.venv/bin/python benchmarks/bench_policy_cost.py --engine-events $F --thrash-mb $MB \
      --repeat 1 2>&1 | grep -E "^(lru|frequency|session_ttl|spf_expected_utility|belady_oracle) +engine" \
      | awk -v r=$r -v t=$(basename $T) '{print "round", r, t, "engine"$3, $1, $4}'
  done
done
echo ALLDONE
