#!/bin/bash
# interleaved A/B: drive.sh ROUNDS CELL... (CELL = cut50k:arc:26000); per round and cell both trees, order alternating
rounds=$1; shift
here=$(dirname $(readlink -f $0))
for r in $(seq 1 $rounds); do
  for c in "$@"; do
    IFS=: read tr pol nb <<< "$c"
    if [ $((r % 2)) = 1 ]; then order="wt base"; else order="base wt"; fi
    for t in $order; do
      echo -n "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) "
      $here/ab1.sh $t /tmp/19e/$tr.jsonl $pol $nb 2>&1 | grep -v "^$"
    done
  done
done
