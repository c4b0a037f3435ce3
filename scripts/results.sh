#!/usr/bin/env bash
# Regenerate docs/results.md from fresh runs: the simulator on every workload
# (arms x workloads, with Belady and infinite-cache ceilings) and the survival
# gate on the CPU engine (embedded tiny model) where the simulator shows >= 10
# points of Belady headroom over session_ttl, and on the first 200 Mooncake
# requests, and the adapter's overhead benchmark. About an hour on 2 cores.
# `--sim-only` skips the engine gates (keeps existing gate JSON); `--resume`
# finishes gate runs left unfinished (default: every gate starts fresh, so a
# changed policy never mixes with cells of its older code).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-ERROR}
S=.venv/bin/spfcore
D=docs/results
mkdir -p "$D"
TRACE=${SPFCORE_TRACE:-../shared/traces/mooncake_conversation_trace.jsonl}
sim() { local name=$1; shift; "$S" simulate "$@" --json > "$D/sim-$name.json.tmp" && mv "$D/sim-$name.json.tmp" "$D/sim-$name.json"; }

# Simulator, generator defaults (docs/design.md §1 scale), block size 16, pressure 2.3, seeds 42-44.
for w in personas zipf bursty revisit multiturn; do
  sim "$w" --workload "$w" --block-size 16 --cache-pressure 2.3 --seeds 42,43,44
done
sim personas-shuffled --workload personas --set order=shuffled --block-size 16 --cache-pressure 2.3 --seeds 42,43,44
if [ -f "$TRACE" ]; then
  sim mooncake-9139 --trace "$TRACE" --num-blocks 9140
  sim mooncake-1827 --trace "$TRACE" --num-blocks 1828
fi

# Engine gates on CPU (block size 32, tiny model), prompts scaled down 16x (personas: the quick preset).
fresh=(--fresh)
[ "${1:-}" = "--resume" ] && fresh=()
if [ "${1:-}" != "--sim-only" ]; then
  small=(--set prefix_tokens=512 --set query_tokens=32 --set output_tokens=4)
  "$S" gate --preset quick --no-progress "${fresh[@]}" --output "$D/gate-personas/results.json"
  "$S" gate --preset quick --workload zipf "${small[@]}" --no-progress "${fresh[@]}" --output "$D/gate-zipf/results.json"
  "$S" gate --preset quick --workload revisit --set prefix_tokens=512 --set noise_tokens=512 \
    --set query_tokens=32 --set output_tokens=4 --no-progress "${fresh[@]}" --output "$D/gate-revisit/results.json"
  "$S" gate --preset quick --workload multiturn --set prefix_tokens=256 --set query_tokens=32 \
    --set output_tokens=4 --no-progress "${fresh[@]}" --output "$D/gate-multiturn/results.json"
  # the adapter's cost on the allocation path, every arm (printed figures, kept verbatim)
  .venv/bin/python benchmarks/bench_overhead.py --pairs 3 > "$D/overhead-cpu.txt.tmp" 2>/dev/null \
    && mv "$D/overhead-cpu.txt.tmp" "$D/overhead-cpu.txt"
  if [ -f "$TRACE" ]; then  # real input: the first 200 Mooncake requests, hash-id blocks scaled to 32 tokens
    # (~2 min per engine cell on 2 cores: started cells stop after 25 min; run again to finish)
    "$S" gate --preset quick --trace "$TRACE" --limit 200 --tokens-per-block 32 --num-blocks 600 --no-progress \
      --time-limit 1500 "${fresh[@]}" --output "$D/gate-mooncake/results.json"
  fi
fi

# Every online arm, the classic plugins included, vs Belady: generators (seeds 42-44; the held-out
# shapes agents, rag, scan, mix included) and both halves of the trace, with the share of the LRU->Belady gap closed (a markdown section of the page).
.venv/bin/python benchmarks/arms_table.py --seeds 42-44 --trace "$TRACE" --output "$D/arms-table.md.tmp" \
  --json "$D/arms-table.json" && mv "$D/arms-table.md.tmp" "$D/arms-table.md"

# spf's defaults on its train part (generator seeds 0-9, trace 1st half), report part (seeds 42-44, 2nd half)
# and held-out shapes (the search that chose them: benchmarks/tune_spf.py, log in $D/tune-spf-search.md).
.venv/bin/python benchmarks/tune_spf.py --no-tune --trace "$TRACE" --output "$D/tune-spf.md.tmp" \
  && mv "$D/tune-spf.md.tmp" "$D/tune-spf.md"

gates=$(ls "$D"/gate-*/results.json 2>/dev/null || true)
inc=()
[ -f "$D/arms-table.md" ] && inc+=(--include "$D/arms-table.md")
[ -f "$D/tune-spf.md" ] && inc+=(--include "$D/tune-spf.md")
[ -f "$D/overhead-cpu.txt" ] && inc+=(--include "$D/overhead-cpu.txt")
"$S" results-page "$D"/sim-*.json $gates "${inc[@]}" --title "spfcore results" --output docs/results.md
echo "wrote docs/results.md"
