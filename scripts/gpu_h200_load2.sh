#!/usr/bin/env bash
# Issue 15's second H200 load run, on a 2-GPU host (`nvidia-h200-x2`), after the install
# (../shared/gpu/README.md; vLLM 0.24.0, VLLM_USE_FLASHINFER_SAMPLER=0), one device call per part.
#   bash scripts/gpu_h200_load2.sh a   # ~9 min: 9 cells of ~46 s per GPU, engine start, warm-up, merge
#       The seed workload at 0.5 of lru's capacity (5.746 req/s, measured in
#       results/gpu-h200-x2-c298da1, given with --capacity), arms lru, session_ttl,
#       spf_expected_utility (no oracle: harness check skipped), 6 seeds: 42-44 on GPU0 and 45-47
#       on GPU1 in parallel (one engine each), then one merged 6-seed verdict judged against
#       session_ttl (the gate's baseline) and a second one against lru (same cells, re-judged).
#       Settles (or not) whether spf's p95 TTFT is >= 15% below both, the interval excluding 0.
#   bash scripts/gpu_h200_load2.sh b   # ~8 min: capacity ~80 s, then 12 cells of ~24 s (GPU0) | ~15 s (GPU1)
#       2,048-token prefixes (32 personas, the seed's 32 sessions x 4 turns, 128-token queries,
#       32 output tokens; 3,561 blocks: one request holds 138 blocks, 3.9% of the cache, where
#       the seed's held 520 = 15%): lru's capacity measured on GPU0, then 0.5 of it on GPU0 and
#       0.8 on GPU1, arms lru, session_ttl, spf_expected_utility, belady_oracle, seeds 42-44;
#       merged. The simulator (step costs fitted on the H200 run) predicts spf keeps ~40% of
#       tokens at both levels (on the seed workload: 16.5% at 0.5, 6% at 0.8).
#   bash scripts/gpu_h200_load2.sh b1  # part b on ONE H200 (`nvidia-h200`): capacity, then both levels one
#       after the other in one resumable run (`--time-limit`, 420 s a call by default): ~11 min in all,
#       so call `b1` again on the same warm machine until its log ends with the verdict and no
#       "INCOMPLETE" (the finished cells and capacity.json are reused, "reused N of M cells").
# Dry run of part b on CPU (tiny model and workload, same commands and flags; a few minutes):
#   MODEL_ARGS="--model tiny --num-blocks 800" \
#   SCALE_ARGS="--set personas=4 --set prefix_tokens=256 --set sessions=4 --set turns=2 --set query_tokens=32 --set output_tokens=4" \
#   WORK=/tmp/dry OUT=/tmp/dry-out bash scripts/gpu_h200_load2.sh b1
# Both parts do not fit in 8 minutes of device time (~17 min together): run `a` first, `b` in a
# second call. The device returns at most 8 files: all is packed in $OUT/h200-load2-<part>.tgz.
# Merging: `spfcore gate --merge-from` where the installed spfcore has it (issue 12), else the
# sidecar concatenation of scripts/gpu_h200_x2.sh; the merge job keeps CUDA_VISIBLE_DEVICES=0 so
# its device fingerprint is the jobs' whichever way device_name counts GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_LOGGING_LEVEL=ERROR
W=${WORK:-/tmp/gpu-load2}
O=${OUT:-/tmp/out}
GATE="python3 -m spfcore.cli gate"
CAP_SEED=5.746184741025108  # lru's capacity on the seed workload (results/gpu-h200-x2-c298da1/capacity.json)
mkdir -p "$W" "$O"
HAVE_MERGE_FROM=$($GATE --help 2>/dev/null | grep -q -- --merge-from && echo 1 || echo 0)

merge() {  # DEST_FOLDER "L1 L2 .." SRC_FOLDER...: join the jobs' finished cells level by level into DEST
  local dest=$1 levels=$2; shift 2
  if [ "$HAVE_MERGE_FROM" = 1 ]; then
    for s in "$@"; do MERGE_ARGS+=(--merge-from "$s"); done
    return
  fi
  python3 - "$dest" "$levels" "$@" <<'PY'
import pathlib, sys
dest, levels, srcs = pathlib.Path(sys.argv[1]), sys.argv[2].split(), [pathlib.Path(p) for p in sys.argv[3:]]
for load in levels:
    out = dest / f"load-{load}" / "results.cells.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for s in srcs:
        p = s / f"load-{load}" / "results.cells.jsonl"
        if p.exists():
            src = p.read_text().splitlines()
            lines += src[1:] if lines else src  # one header (the fingerprint), every job's cells
    if lines:
        out.write_text("\n".join(lines) + "\n")
PY
}
pack() { tar czf "$O/h200-load2-$1.tgz" -C "$(dirname "$W")" "$(basename "$W")" 2>/dev/null || true; }

case "${1:?a|b|b1}" in
a)
  A=(--model llama-3.2-3b --no-progress --num-blocks 3561 --arms lru,session_ttl,spf_expected_utility
     --oracle none --load 0.5 --capacity "$CAP_SEED" --ttft-slo-ms 500)
  CUDA_VISIBLE_DEVICES=0 $GATE "${A[@]}" --seeds 42,43,44 --time-limit 470 --output "$W/a-g0/results.json" \
    > "$W/a-g0.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 $GATE "${A[@]}" --seeds 45,46,47 --time-limit 470 --output "$W/a-g1/results.json" \
    > "$W/a-g1.log" 2>&1 &
  wait || true
  MERGE_ARGS=(); merge "$W/a" "0.5" "$W/a-g0" "$W/a-g1"
  CUDA_VISIBLE_DEVICES=0 $GATE "${A[@]}" --seeds 42,43,44,45,46,47 --output "$W/a/results.json" \
    "${MERGE_ARGS[@]}" > "$W/a-verdict-vs-session_ttl.txt" 2>&1 || true
  cp -r "$W/a" "$W/a-vs-lru"  # the same cells judged with lru as the baseline (roles are not in the fingerprint)
  CUDA_VISIBLE_DEVICES=0 $GATE "${A[@]}" --seeds 42,43,44,45,46,47 --baseline lru \
    --output "$W/a-vs-lru/results.json" > "$W/a-verdict-vs-lru.txt" 2>&1 || true
  pack a; tail -n 40 "$W/a-verdict-vs-session_ttl.txt"; tail -n 14 "$W/a-verdict-vs-lru.txt"
  ;;
b|b1)
  # shellcheck disable=SC2206  # word splitting of the two overridable argument strings is meant
  B=(${MODEL_ARGS:---model llama-3.2-3b --num-blocks 3561} --no-progress
     ${SCALE_ARGS:---set personas=32 --set prefix_tokens=2048}
     --arms lru,session_ttl,spf_expected_utility,belady_oracle --seeds 42,43,44 --ttft-slo-ms 500)
  if [ "$1" = b1 ]; then  # one GPU: capacity (kept in capacity.json) and both levels, resumed call by call
    log="$W/b1-$(date +%s).log"
    $GATE "${B[@]}" --load 0.5,0.8 --time-limit "${TIME_LIMIT:-420}" --output "$W/b/results.json" > "$log" 2>&1 \
      || true
    pack b; tail -n 60 "$log"
    exit 0
  fi
  CUDA_VISIBLE_DEVICES=0 $GATE "${B[@]}" --load 0.5 --capacity-only --output "$W/b/results.json" \
    > "$W/b-capacity.log" 2>&1
  CAP=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['capacity_rps'])" "$W/b/capacity.json")
  CUDA_VISIBLE_DEVICES=0 $GATE "${B[@]}" --load 0.5 --capacity "$CAP" --time-limit 330 \
    --output "$W/b-0.5/results.json" > "$W/b-0.5.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 $GATE "${B[@]}" --load 0.8 --capacity "$CAP" --time-limit 330 \
    --output "$W/b-0.8/results.json" > "$W/b-0.8.log" 2>&1 &
  wait || true
  MERGE_ARGS=(); merge "$W/b" "0.5 0.8" "$W/b-0.5" "$W/b-0.8"
  CUDA_VISIBLE_DEVICES=0 $GATE "${B[@]}" --load 0.5,0.8 --capacity "$CAP" --output "$W/b/results.json" \
    "${MERGE_ARGS[@]}" > "$W/b-verdict.txt" 2>&1 || true
  pack b; echo "capacity $CAP req/s"; tail -n 60 "$W/b-verdict.txt"
  ;;
esac
