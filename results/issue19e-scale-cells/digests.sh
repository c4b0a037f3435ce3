#!/bin/bash
# decision_digest.py and gate_sim_digest.py on the baseline and the branch snapshot $1
for t in base wt; do
  if [ $t = base ]; then WT=/work/wt-base; else WT=$1; fi
  export PYTHONPATH=$WT:$WT/plugins/session_ttl/src:$WT/plugins/frequency/src:$WT/plugins/spf_expected_utility/src:$WT/plugins/belady_oracle/src:$WT/plugins/classic/src
  cd $WT
  /usr/bin/time -f "$t decision %e s" /work/main/.venv/bin/python benchmarks/decision_digest.py /tmp/19e/dd-$t.json
  /usr/bin/time -f "$t gate %e s" /work/main/.venv/bin/python benchmarks/gate_sim_digest.py /tmp/19e/gs-$t.json
done
cmp /tmp/19e/dd-base.json /tmp/19e/dd-wt.json && echo "decision_digest identical"
cmp /tmp/19e/gs-base.json /tmp/19e/gs-wt.json && echo "gate_sim_digest identical"
