#!/bin/bash
# ir.sh TREE ARM REQUESTS > line: instructions (valgrind cachegrind "I refs", deterministic) of one
# replay of ARM (bench_sim.py's arms and floors) on the first REQUESTS requests of the Mooncake trace:
# (Ir of a process replaying twice - Ir of one replaying not at all) / 2, each after one warm replay
# (trace reading, keying and numba loads cancel out). Prints: tree arm requests Ir Ir/request.
D=$(cd "$(dirname "$0")" && pwd)
T=$1; ARM=$2; N=${3:-3000}; PP=$T:$(ls -d $T/plugins/*/src | paste -sd:)
cd $T
ir() { PYTHONHASHSEED=0 PYTHONPATH=$PP valgrind --tool=cachegrind --cache-sim=no --branch-sim=no \
  --cachegrind-out-file=/dev/null /work/main/.venv/bin/python $D/ir.py $ARM $1 $N 2>&1 \
  | sed -n 's/.*I *refs: *//p' | tr -d ,; }
a=$(ir 0); b=$(ir 2)
echo "$(basename $T) $ARM $N $(( (b - a) / 2 )) $(( (b - a) / 2 / N ))"
