#!/usr/bin/env bash
# Issue 11, part 5: the seed's full-scale gate on H200s after the hot-path work, with enough
# seeds that the throughput criterion's 95% CI can settle on one side of its 1% threshold
# (3 seeds gave [-0.0016, +0.0454] in results/gpu-h200-4217080). The seed's workload
# (16 personas x 8192 tokens, 32 sessions x 4 turns, Llama-3.2-3B architecture, random weights,
# block size 16, 3,561 blocks = pressure 2.3), sequential, all five shipped arms, 8 seeds
# (42..49), two per GPU on a 4-GPU host (`nvidia-h200-x4`).
#
# Install first, as ../shared/gpu/README.md and results/gpu-h200-4217080/commands.sh do
# (vllm 0.24.0 wheels; spfcore + plugins wheels built from THIS checkout:
#   .venv/bin/pip wheel --no-deps --no-build-isolation -w .gpu/x2 . plugins/*  ).
# Then, back to back (kind nvidia-h200-x4), each line one device call:
#   bash scripts/gpu_hotpath_gate.sh seeds   # ~9 min: engines start, cells run (resumable)
#   bash scripts/gpu_hotpath_gate.sh seeds   # resumes each job's unfinished cells
#   bash scripts/gpu_hotpath_gate.sh merge   # every job's cells into one run, judged (no engine: the cells are reused)
# With 1-2 H200s set GPUS (seeds 42.., SEEDS_PER_GPU of them per GPU, default 2: GPUS=2 runs 42..45;
# one seed of all five arms takes ~7 min on one H200), e.g.
#   GPUS=2 bash scripts/gpu_hotpath_gate.sh seeds ; GPUS=2 bash scripts/gpu_hotpath_gate.sh merge
# ARMS (default all five) narrows the arms, TIME_LIMIT (default 480 s) the cells started per call. On one
# H200 a session's 1,800 s of device time holds the install (~250 s with the machine's start) and ~15 cells of
# ~100 s: all five arms x 3 seeds did not fit (13 of 15 cells, results/gpu-h200-ce0064e). For a verdict run
# the gate's four roles over 3 seeds (12 cells; 1,548 s with the install in results/gpu-h200-8268a89, calls of
# TIME_LIMIT 360 (with the install), 470, then 340 followed by merge in the same call):
#   export GPUS=1 SEEDS_PER_GPU=3 ARMS=lru,session_ttl,spf_expected_utility,belady_oracle TIME_LIMIT=430
#   bash scripts/gpu_hotpath_gate.sh seeds   # twice or three times, then: bash scripts/gpu_hotpath_gate.sh merge
# The hot path alone, no engine and no GPU (~1-2 min, the numba wheels must be installed:
# numba 0.68.1 + llvmlite 0.50.0 cp312 on the device's Python 3.12):
#   bash scripts/gpu_hotpath_gate.sh cost    # -> $OUT/policy_cost.txt (spfcore ms/request per arm)
# Why the engine's policy ms/req exceeds `cost`'s (issue 11, 11g): record the runtime calls the adapter makes on the
# seed's model and block size (16 requests of the seed's shape, 4 arms, ~3 min), then replay them on this host's CPU,
# hot and with the caches thrashed at every engine step:
#   bash scripts/gpu_hotpath_gate.sh calls   # -> $OUT/engine_calls.txt, $OUT/engine_calls.pkl
# What comes back: $OUT/hotpath.tgz (results.json, cells, logs, plots). Then here:
#   spfcore results-page <results.json> --title "..." -o results/gpu-h200-<commit>/README.md
# The table's "policy ms/req" column is spfcore's time per request on the engine path
# (hooks, evictor, runtime bookkeeping); issue 11's target is <= 0.5 ms for every arm.
set -euo pipefail
cd "$(dirname "$0")/.."
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_LOGGING_LEVEL=ERROR
W=${WORK:-/tmp/gpu-hotpath}   # survives between calls while the machine is warm
O=${OUT:-/tmp/out}
ARGS=(--model llama-3.2-3b --no-progress --num-blocks 3561 --arms "${ARMS:-lru,session_ttl,frequency,spf_expected_utility,belady_oracle}")  # stated so every per-seed job shares one fingerprint
GATE="python3 -m spfcore.cli gate"
G=${GPUS:-4}
K=${SEEDS_PER_GPU:-2}
SEEDS=$(seq -s, 42 $((41 + K * G)))
mkdir -p "$W" "$O"
pack() { tar czf "$O/hotpath.tgz" -C "$(dirname "$W")" "$(basename "$W")" 2>/dev/null || true; }
case "${1:?seeds|merge|cost|calls}" in
seeds)
  for g in $(seq 0 $((G - 1))); do
    s=$(seq -s, $((42 + K * g)) $((41 + K * (g + 1))))
    CUDA_VISIBLE_DEVICES=$g $GATE "${ARGS[@]}" --seeds "$s" --min-seeds 1 --time-limit "${TIME_LIMIT:-480}" \
      --output "$W/job-$g/results.json" >> "$W/job-$g.log" 2>&1 &
  done
  wait || true
  pack; tail -n 3 "$W"/job-*.log
  ;;
merge)
  python3 - "$W" "$G" <<'PY'
import sys, pathlib
w = pathlib.Path(sys.argv[1])
out = w / "all" / "results.cells.jsonl"
out.parent.mkdir(parents=True, exist_ok=True)
lines = []
for g in range(int(sys.argv[2])):
    src = (w / f"job-{g}" / "results.cells.jsonl").read_text().splitlines()
    lines += src[1:] if lines else src   # the header (fingerprint) once
out.write_text("\n".join(lines) + "\n")
PY
  $GATE "${ARGS[@]}" --seeds "$SEEDS" --time-limit "${TIME_LIMIT:-480}" --output "$W/all/results.json" | tee "$W/verdict.txt" || true
  pack; tail -n 60 "$W/verdict.txt"
  ;;
calls)
  python3 benchmarks/engine_call_profile.py record "$O/engine_calls.pkl" --model llama-3.2-3b --block-size 16 \
    --num-blocks 1601 2>&1 | grep -v -e WARNING -e INFO | tee "$O/engine_calls.txt"
  python3 benchmarks/bench_policy_cost.py --engine-events "$O/engine_calls.pkl" --repeat 5 --wall-clock \
    --thrash-mb 64 | tee -a "$O/engine_calls.txt"
  ;;
cost)
  python3 -c "import spfcore._evictor_nb as nb; nb.warm(); from spfcore_spf_expected_utility import _nb; _nb.warm()"  # numba compiles once, untimed
  python3 benchmarks/bench_policy_cost.py --repeat 3 --wall-clock | tee "$O/policy_cost.txt"
  ;;
esac
