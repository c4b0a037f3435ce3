#!/bin/bash
# Interleaved A/B of two trees: bench_sim.py in separate processes, alternating, the first tree
# swapped each round. Usage: ab.sh BASE_TREE BRANCH_TREE ROUNDS ARMS [--floors] > log
# (summarize with results/issue11t-hotpath/summarize.py: the branch tree's name must not contain "base")
A=$1; B=$2; R=${3:-4}; ARMS=$4; shift 4
PY=/work/main/.venv/bin/python
for r in $(seq $R); do
  if [ $((r % 2)) = 1 ]; then order="$A $B"; else order="$B $A"; fi
  for T in $order; do
    PP=$T:$(ls -d $T/plugins/*/src | paste -sd:); cd $T
    tag=$(basename $T)
    PYTHONPATH=$PP $PY benchmarks/bench_sim.py --arms $ARMS "$@" --repeat 2 2>&1 \
      | grep -E "^(lru|bel|freq|sess|floor|arc|s3fifo|sieve|gdsf|lirs|twoq|spf)" | sed "s/^/round $r $tag sim /"
  done
done
echo ALLDONE
