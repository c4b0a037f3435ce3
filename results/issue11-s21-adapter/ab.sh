#!/bin/bash
# Alternate processes of two trees, $1 rounds: BASE (default /work/wt-base20, made with
# `git worktree add --detach /work/wt-base20 173bf1c`) and NEW (default: this checkout).
# Python: PY (default .venv/bin/python of this checkout).
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
for r in $(seq 1 "${1:-4}"); do
  for t in base new; do
    if [ $t = base ]; then W=${BASE:-/work/wt-base20}; else W=${NEW:-$ROOT}; fi
    P=$W:$W/plugins/classic/src:$W/plugins/frequency/src:$W/plugins/session_ttl/src:$W/plugins/spf_expected_utility/src:$W/plugins/belady_oracle/src
    echo "round $r tree $t"
    PYTHONPATH=$P "$PY" "$HERE/adapter_segments.py" --reps 3 2>/dev/null | grep "adapter"
  done
done
