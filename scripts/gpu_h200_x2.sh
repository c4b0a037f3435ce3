#!/usr/bin/env bash
# The H200 runs of this session on a 2-GPU host (`nvidia-h200-x2`), in 10-minute device calls,
# back to back after the install (../shared/gpu/README.md; vllm 0.24.0, VLLM_USE_FLASHINFER_SAMPLER=0):
#   bash scripts/gpu_h200_x2.sh a   # GPU0: lru's capacity, then seed 42 at 0.5 and 0.8 of it
#                                   # GPU1: `spfcore serve` bench (lru vs spf, vLLM's client), then seeds 43, 44 at 0.8
#   bash scripts/gpu_h200_x2.sh b   # GPU0: seed 43 at 0.5; GPU1: seed 44 at 0.5; then the merged gate at 0.5,0.8
# The seed's workload (16 personas x 8192 tokens, 32 sessions x 4 turns, Llama-3.2-3B architecture,
# random weights, block size 16, 3,561 blocks = pressure 2.3), Poisson arrivals at fractions of lru's
# measured capacity, all five shipped arms. The gate's per-(seed, level) jobs share one fingerprint;
# `b` merges their cells (`spfcore gate --merge-from`) and judges. Everything that comes back is
# packed in $OUT/h200.tgz (the device returns at most 8 files).
set -euo pipefail
cd "$(dirname "$0")/.."
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_LOGGING_LEVEL=ERROR
W=${WORK:-/tmp/gpu-load}
O=${OUT:-/tmp/out}
ARGS=(--model llama-3.2-3b --no-progress --num-blocks 3561)
GATE="python3 -m spfcore.cli gate"
mkdir -p "$W" "$O"
cap() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['capacity_rps'])" "$W/seed/capacity.json"; }
level() {  # GPU SEED LOAD
  CUDA_VISIBLE_DEVICES=$1 $GATE "${ARGS[@]}" --load "$3" --capacity "$(cap)" --seeds "$2" --min-seeds 1 \
    --time-limit 500 --output "$W/seed-$2-$3/results.json" > "$W/seed-$2-$3.log" 2>&1 || true
}
pack() { tar czf "$O/h200.tgz" -C "$(dirname "$W")" "$(basename "$W")" $( [ -d /tmp/serve ] && echo -C /tmp serve ) 2>/dev/null || true; }
case "${1:?a|b}" in
a)
  ( CUDA_VISIBLE_DEVICES=0 $GATE "${ARGS[@]}" --load 0.5 --capacity-only --output "$W/seed/results.json" > "$W/capacity.log" 2>&1
    level 0 42 0.5; level 0 42 0.8 ) &
  ( CUDA_VISIBLE_DEVICES=1 OUT=/tmp/serve bash scripts/gpu_serve_bench.sh --reps 1 > /dev/null 2>&1 || true
    while [ ! -f "$W/seed/capacity.json" ]; do sleep 5; done
    level 1 43 0.8; level 1 44 0.8 ) &
  wait; pack; cat "$W/seed/capacity.json"; tail -n 25 /tmp/serve/serve_bench.txt 2>/dev/null || true
  ;;
b)
  level 0 43 0.5 & level 1 44 0.5 & wait
  MERGE=()  # every per-(seed, level) job that finished cells: the gate merges them level by level
  for f in "$W"/seed-*-*/load-*/results.cells.jsonl; do [ -f "$f" ] && MERGE+=(--merge-from "$(dirname "$(dirname "$f")")"); done
  CUDA_VISIBLE_DEVICES=0 $GATE "${ARGS[@]}" --load 0.5,0.8 --capacity "$(cap)" --ttft-slo-ms 500 \
    --output "$W/seed/results.json" "${MERGE[@]}" > "$W/seed-verdict.txt" 2>&1 || true
  pack; cat "$W/seed-verdict.txt" | tail -n 80
  ;;
esac
