#!/bin/bash
# one cell, one tree: ab1.sh main|wt TRACE POLICY BLOCKS
tree=$1; shift
WT=/work/wt-1
if [ "$tree" = wt ]; then
  export PYTHONPATH=$WT:$WT/plugins/session_ttl/src:$WT/plugins/frequency/src:$WT/plugins/spf_expected_utility/src:$WT/plugins/belady_oracle/src:$WT/plugins/classic/src
  B=$WT/benchmarks/bench_scale_cells.py
else
  unset PYTHONPATH
  B=/work/main/benchmarks/bench_scale_cells.py
fi
echo -n "$tree $(basename $1) "
/work/main/.venv/bin/python $B $1 --policies $2 --num-blocks $3 --folder /tmp/h19d/prep-$(basename $1 .jsonl) ${@:4}
