#!/bin/bash
cd /work/wt-spfnb
export PYTHONPATH=/work/wt-spfnb:/work/wt-spfnb/plugins/spf_expected_utility/src:/work/wt-spfnb/plugins/session_ttl/src:/work/wt-spfnb/plugins/frequency/src:/work/wt-spfnb/plugins/belady_oracle/src:/work/wt-spfnb/plugins/classic/src
F=spfcore/sim/_replay_spf_nb.py
bug() {
  name=$1; shift
  cp $F /tmp/bugs/orig.py
  python3 - "$@" <<'PY'
import sys
p='spfcore/sim/_replay_spf_nb.py'; s=open(p).read(); a,b=sys.argv[1],sys.argv[2]
assert s.count(a)==1, a
open(p,'w').write(s.replace(a,b))
PY
  git diff --stat | tail -1
  timeout 1500 /work/main/.venv/bin/python -m pytest -q -x tests/test_sim_compiled.py -k "spf or random" -p no:cacheprovider > /tmp/bugs/$name.log 2>&1
  echo "$name rc=$? $(grep -E '^(FAILED|[0-9]+ (passed|failed))' /tmp/bugs/$name.log | head -2 | tr '\n' ' ') $(tail -1 /tmp/bugs/$name.log)"
  cp /tmp/bugs/orig.py $F
}
bug chain_direction "back = depth_of[ids[0]] > depth_of[ids[n - 1]]" "back = depth_of[ids[0]] < depth_of[ids[n - 1]]"
bug kind_seen "pc[KIND] = 2 if seen > rb else 1" "pc[KIND] = 2 if seen >= rb else 1"
bug warmup_builds "w = 1 + t // 4" "w = 1 + t // 2"
bug pairwise_sum "    return 0.0 + _pairwise(a, 0, a.shape[0])" "    r = 0.0
    for i in range(a.shape[0]):
        r += a[i]
    return r"
bug dual_ghost "        if g >= 0:  # the ghost record of a resident hash: the new ghost takes its place" "        if g >= 0 and False:  # the ghost record of a resident hash: the new ghost takes its place"
bug chunk_rise "        if not (val[b] <= old):  # its chunk's minimum rose" "        if not (val[b] <= old) and False:  # its chunk's minimum rose"
git status --short
