#!/bin/bash
# digests.sh TREE TAG: the three decision digests of the brief for one tree, into /tmp/bel-*-TAG.json
T=$1; G=$2
export PYTHONPATH=$T:$T/plugins/classic/src:$T/plugins/frequency/src:$T/plugins/session_ttl/src:$T/plugins/spf_expected_utility/src:$T/plugins/belady_oracle/src
PY=/work/main/.venv/bin/python
cd $T
$PY benchmarks/decision_digest.py /tmp/bel-dd-$G.json > /tmp/bel-dd-$G.log 2>&1
$PY benchmarks/gate_sim_digest.py /tmp/bel-gd-$G.json > /tmp/bel-gd-$G.log 2>&1
SPFCORE_SIM_REPLAY=python $PY benchmarks/decision_digest.py /tmp/bel-ddpy-$G.json --arms belady_oracle,frequency --trace-requests 300 > /tmp/bel-ddpy-$G.log 2>&1
sha256sum /tmp/bel-*-$G.json
