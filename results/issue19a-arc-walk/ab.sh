#!/bin/bash
# interleaved A/B: main vs issue19a, bench_scale_cells cpu seconds
cd /work/wt-19a
PM=/work/main:$(ls -d /work/main/plugins/*/src | paste -sd:)
PB=/work/wt-19a:$(ls -d /work/wt-19a/plugins/*/src | paste -sd:)
r() { echo "== $1 $2 $3 $4 $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"; PYTHONPATH=$5 /work/main/.venv/bin/python benchmarks/bench_scale_cells.py /tmp/h19c/$2.jsonl --folder /tmp/h19c/bench --policies $3 --num-blocks $4; }
for round in 1 2 3; do
  echo "#### round $round"
  r main cut50k arc 11500,26000,59000 $PM
  r branch cut50k arc 11500,26000,59000 $PB
  r branch cut150k arc 11500,26000,59000 $PB
  r main cut150k arc 11500,26000 $PM
  if [ $round = 1 ]; then
    r branch cut50k s3fifo,twoq 26000 $PB
    r main cut50k s3fifo,twoq 26000 $PM
  fi
done
echo END $(date +%T)
