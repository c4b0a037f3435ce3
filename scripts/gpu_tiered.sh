#!/usr/bin/env bash
# Tiered gate on one H200 (issue 18) with the H200's vLLM 0.24.0: the seed's workload (16 personas
# x 8192 tokens, 32 sessions x 4 turns, Llama-3.2-3B architecture with random weights, block size
# 16, GPU cache at pressure 2.3 = 3,561 blocks) with a CPU tier of twice the GPU cache (7,120
# blocks: vLLM's OffloadingConnector with spfcore's SpfOffloadingSpec; on CUDA vLLM's own transfer
# handlers), sequential. The adapter serves vLLM 0.24's tier API and 0.32's (TIER_API, chosen by
# feature check; `check` prints which). Arms: lru (vLLM's own GPU and tier order), frequency (its
# tier hooks: a block enters the tier once seen twice, the lowest access count leaves first) and
# spf_expected_utility with variant=seed, mode=prefetch (the seed's prefetch hints). Each arm in
# the engine and in the two-tier simulator (same run pipeline as `spfcore gate`), one table:
# prefill recomputed, tokens loaded from the tier, TTFT, engine == simulator per request.
#
# Install first, per ../shared/gpu/README.md (vllm 0.24.0 wheels, VLLM_USE_FLASHINFER_SAMPLER=0),
# with spfcore + plugins wheels built from THIS checkout (frequency's tier hooks are new):
#   .venv/bin/pip wheel --no-deps --no-build-isolation -w .gpu/x2 . plugins/*
# Device calls (kind nvidia-h200), back to back, one per line (about 15 min of device time in all;
# estimates from results/gpu-h200-4217080: engine start + warm-up ~2.5 min, ~75 s per cell of 128
# requests, plus the tier's copies):
#   bash scripts/gpu_tiered.sh check         # imports + a 4-request tiered engine cell vs the simulator (~1 min)
#   bash scripts/gpu_tiered.sh gate          # seed 42, 3 arms: no engine cell starts after 300 s (<= 8 min)
#   bash scripts/gpu_tiered.sh gate 42,43    # adds seed 43 (seed 42's cells reused); again if it says INCOMPLETE
# The run folder is $WORK (default /tmp/gpu-tiered, kept while the machine is warm, so the second
# `gate` call resumes); each call copies it to $OUT/gpu-tiered/ (check.txt, gate.txt, gate/results.json
# with every cell, the sidecar, the plots). Then here:
#   spfcore results-page <files_at>/gpu-tiered/gate/results.json -o results/gpu-h200-tiered/README.md
# Optional, outside those minutes:
#   bash scripts/gpu_tiered.sh calibrate  # cost model: H2D bandwidth, latency, prefill/token (~2 min)
set -euo pipefail
cd "$(dirname "$0")/.."
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_LOGGING_LEVEL=ERROR
W=${WORK:-/tmp/gpu-tiered}
R=${OUT:-/tmp/out}/gpu-tiered
mkdir -p "$W" "$R"
back() { cp -r "$W"/. "$R"/ 2>/dev/null || true; }
trap back EXIT
case "${1:-}" in
  check)
    # exit 2: this vLLM has no usable tier API (printed); 1: the cell disagrees with the simulator
    python3 scripts/tier_check.py --model "${MODEL:-llama-3.2-3b}" --block-size "${BS:-16}" 2>&1 | tee "$W/check.txt" ;;
  calibrate)
    python3 benchmarks/calibrate_tier.py --model llama-3.2-3b --prompt-tokens 8192 | tee "$W/calibrate.txt" ;;
  gate)
    # frequency is the candidate against vLLM's tiers (lru: baseline and throughput floor); no oracle
    # arm (belady_oracle's engine cells would cost the budget; the simulator's tiered Belady still
    # gives the headroom check). Exit 5 (INCONCLUSIVE) is a result, not a failure; INCOMPLETE exits 0.
    python3 -m spfcore.cli gate --preset seed --model llama-3.2-3b --block-size 16 --cpu-ratio 2 \
        --seeds "${2:-42}" --arms lru,frequency,spf_expected_utility \
        --policy-opt spf_expected_utility.variant=seed --policy-opt spf_expected_utility.mode=prefetch \
        --candidate frequency --baseline lru --floor lru --oracle none --min-seeds 1 \
        --time-limit "${TIME_LIMIT:-300}" --no-progress --output "$W/gate/results.json" 2>&1 | tee -a "$W/gate.txt" \
      || [ "${PIPESTATUS[0]}" -eq 5 ] ;;
  *) echo "usage: $0 check | gate [SEEDS] | calibrate" >&2; exit 2 ;;
esac
