#!/bin/bash
# ab.sh BASE BRANCH ROUNDS: floors.py and bench_policy_cost.py --repeat 5 in base and branch
# processes alternately (the first tree swapped each round); prints "tree round arm best median".
BASE=$1; BR=$2; R=${3:-3}
PY=/work/main/.venv/bin/python
FL=$(dirname "$(readlink -f "$0")")/floors.py
pp() { local w=$1; echo "$w:$w/plugins/classic/src:$w/plugins/frequency/src:$w/plugins/session_ttl/src:$w/plugins/spf_expected_utility/src:$w/plugins/belady_oracle/src"; }
for r in $(seq 1 $R); do
  if [ $((r % 2)) = 1 ]; then order="$BASE $BR"; else order="$BR $BASE"; fi
  for w in $order; do
    tag=$([ "$w" = "$BASE" ] && echo base || echo branch)
    (cd $w && PYTHONPATH=$(pp $w) $PY $FL --repeat 5) | awk -v t=$tag -v r=$r '{print t, r, "floor-"$1, $3, $5}'
    (cd $w && PYTHONPATH=$(pp $w) $PY benchmarks/bench_policy_cost.py --repeat 5 \
        --arms lru,belady_oracle,frequency,session_ttl,spf_expected_utility) | awk -v t=$tag -v r=$r 'NR>2 {print t, r, $1, $2, $3}'
  done
done
