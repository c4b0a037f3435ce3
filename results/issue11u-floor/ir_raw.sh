#!/bin/bash
# ir_raw.sh TREE ARM REQUESTS REPS: raw instructions (cachegrind "I refs") of one process that
# replays ARM once (warm-up) and then REPS times; two such counts (REPS 0 and 2) give one
# replay's instructions as their difference / 2. For scored arms run one process first
# (numba's cache misses once under valgrind, which emulates another CPU).
D=$(cd "$(dirname "$0")" && pwd)
T=$1; ARM=$2; N=$3; R=$4; PP=$T:$(ls -d $T/plugins/*/src | paste -sd:)
cd $T
v=$(PYTHONHASHSEED=0 PYTHONPATH=$PP valgrind --tool=cachegrind --cache-sim=no --branch-sim=no \
  --cachegrind-out-file=/dev/null /work/main/.venv/bin/python $D/ir.py $ARM $R $N 2>&1 \
  | sed -n 's/.*I *refs: *//p' | tr -d ,)
echo "$(basename $T) $ARM $N reps=$R $v"
