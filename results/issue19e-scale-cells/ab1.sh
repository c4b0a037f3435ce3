#!/bin/bash
# one cell (or several), one tree: ab1.sh base|wt TRACE POLICIES BLOCKS [bench args...]
# base = /work/wt-base (main at the start commit); wt = the branch as of $WT_SNAP (a copy of a commit,
# made with `git archive`: the branch may be edited while cells run), else /work/wt-19e itself.
# The prepared stream is kept per trace in /tmp/19e.
tree=$1; shift
case $tree in base) WT=/work/wt-base ;; wt) WT=${WT_SNAP:-/work/wt-19e} ;; *) echo "tree: base|wt"; exit 2 ;; esac
export PYTHONPATH=$WT:$WT/plugins/session_ttl/src:$WT/plugins/frequency/src:$WT/plugins/spf_expected_utility/src:$WT/plugins/belady_oracle/src:$WT/plugins/classic/src
echo -n "$tree $(basename $1 .jsonl) "
/work/main/.venv/bin/python $WT/benchmarks/bench_scale_cells.py $1 --policies $2 --num-blocks $3 --folder /tmp/19e/prep-$(basename $1 .jsonl) ${@:4}
