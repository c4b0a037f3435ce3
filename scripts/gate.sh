#!/usr/bin/env bash
# The main job: the survival gate on the embedded default model (random-weight
# tiny Llama, real vLLM CPU engine). Extra arguments go to `spfcore gate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-ERROR}
exec .venv/bin/spfcore gate --preset quick "$@"
