#!/usr/bin/env bash
# Run the whole test suite (unit, simulator, and real-vLLM engine tests).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not engine"`.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-ERROR}
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
