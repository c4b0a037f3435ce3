#!/usr/bin/env bash
# Tiered gate on one H200 (issue 18): the seed's workload (16 personas x 8192 tokens, 32 sessions
# x 4 turns, Llama-3.2-3B architecture with random weights, block size 16, GPU cache at pressure
# 2.3 = 3,561 blocks) with a CPU tier of twice the GPU cache (7,120 blocks: vLLM's
# OffloadingConnector with spfcore's SpfOffloadingSpec; on CUDA vLLM's own transfer worker),
# sequential. Arms: lru (vLLM's own GPU and tier order), frequency (its tier hooks: a block enters
# the tier once seen twice, the lowest access count leaves first) and spf_expected_utility with
# variant=seed, mode=prefetch (the seed's prefetch hints). Each arm in the engine and in the
# two-tier simulator (same run pipeline as `spfcore gate`), one table: prefill recomputed,
# tokens loaded from the tier, TTFT, engine == simulator per request.
#
# Install first, per ../shared/gpu/README.md (vllm 0.24.0 wheels, VLLM_USE_FLASHINFER_SAMPLER=0),
# with spfcore + plugins wheels built from THIS checkout (frequency's tier hooks are new):
#   .venv/bin/pip wheel --no-deps --no-build-isolation -w .gpu/x2 . plugins/*
# Device calls (kind nvidia-h200), back to back, one per line (~6 min of device time in all):
#   bash scripts/gpu_tiered.sh check      # this vLLM has the pluggable CPU tier? (seconds)
#   bash scripts/gpu_tiered.sh gate       # seeds 42,43: no engine cell starts after 270 s (~5 min)
#   bash scripts/gpu_tiered.sh gate       # only if the first call said INCOMPLETE: resumes the rest
# What comes back: $OUT/gpu-tiered/ (results.json with every cell, the sidecar, the printed tables,
# the log). Then here: spfcore results-page $OUT/gpu-tiered/gate/results.json -o results/gpu-h200-tiered/README.md
# Optional, outside the 6 minutes:
#   bash scripts/gpu_tiered.sh calibrate  # cost model: H2D bandwidth, latency, prefill/token (~2 min)
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
  gate)
    # frequency is the candidate against vLLM's tiers (lru: baseline and throughput floor); no oracle
    # arm (belady_oracle's engine cells would cost the budget; the simulator's tiered Belady still
    # gives the headroom check). Exit 5 (INCONCLUSIVE on 2 seeds) is a result, not a failure.
    python3 -m spfcore.cli gate --preset seed --model llama-3.2-3b --block-size 16 --cpu-ratio 2 \
        --seeds "${2:-42,43}" --arms lru,frequency,spf_expected_utility \
        --policy-opt spf_expected_utility.variant=seed --policy-opt spf_expected_utility.mode=prefetch \
        --candidate frequency --baseline lru --floor lru --oracle none --min-seeds 1 \
        --time-limit 270 --no-progress --output "$R/gate/results.json" 2>&1 | tee -a "$R/gate.txt" \
      || [ "${PIPESTATUS[0]}" -eq 5 ] ;;
  *) echo "usage: $0 check | gate [SEEDS] | calibrate" >&2; exit 2 ;;
esac
