#!/bin/bash
# interleaved A/B: for each round, each cell: wt then main (order alternates per round)
cd /tmp/h19d
rounds=$1; shift
cells="$@"   # items like cut50k:arc:26000
for r in $(seq 1 $rounds); do
  for c in $cells; do
    IFS=: read tr pol nb <<< "$c"
    if [ $((r % 2)) = 1 ]; then order="wt main"; else order="main wt"; fi
    for t in $order; do
      echo -n "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) " 
      ./ab1.sh $t $tr.jsonl $pol $nb 2>&1 | grep -v "^$"
    done
  done
done
