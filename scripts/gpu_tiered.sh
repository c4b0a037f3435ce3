#!/usr/bin/env bash
# Tiered arms on an H200 (issue 18): the seed's workload (16 personas x 8192 tokens, 32 sessions
# x 4 turns, Llama-3.2-3B architecture, block size 16, GPU pressure 2.3) with a CPU tier of twice
# the GPU cache (vLLM's OffloadingConnector, spfcore's SpfOffloadingSpec; on CUDA vLLM's own
# transfer worker), every arm in the engine and in the two-tier simulator, sequential replay.
# Install first, per ../shared/gpu/README.md. Device calls (kind nvidia-h200), one per line:
#   bash scripts/gpu_tiered.sh check       # does this vLLM have the pluggable CPU tier? (seconds)
#   bash scripts/gpu_tiered.sh calibrate   # cost model: H2D bandwidth, latency, prefill/token (~2 min)
#   bash scripts/gpu_tiered.sh seed 42     # one seed, 6 arms interleaved (~7 min); then 43, 44
# Results under $OUT/gpu-tiered/ (JSON per seed, the printed tables).
set -euo pipefail
cd "$(dirname "$0")/.."
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_LOGGING_LEVEL=ERROR
R=${OUT:-/tmp/out}/gpu-tiered
mkdir -p "$R"
case "${1:-}" in
  check)
    python3 -c "import vllm, spfcore.engine.vllm_adapter as a; print('vllm', vllm.__version__); \
print('tier API:', a.OFFLOAD_IMPORT_ERROR or 'ok')" | tee "$R/check.txt" ;;
  calibrate)
    python3 benchmarks/calibrate_tier.py --model llama-3.2-3b --prompt-tokens 8192 | tee "$R/calibrate.txt" ;;
  seed)
    python3 benchmarks/tiered_arms.py --preset seed --model llama-3.2-3b --seeds "$2" \
        --cost h200-llama-3.2-3b -o "$R/tiered-seed-$2.json" | tee "$R/tiered-seed-$2.txt" ;;
  *) echo "usage: $0 check | calibrate | seed N" >&2; exit 2 ;;
esac
