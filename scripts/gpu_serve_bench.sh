#!/usr/bin/env bash
# spfcore serve on the H200: the Llama-3.2-3B architecture (random weights) with
# spf_expected_utility and with lru, each driven by vLLM's own serving benchmark
# (vllm.benchmarks.serve, dataset prefix_repetition: 16 prefixes x 8192 tokens,
# 128-token suffixes, 32 output tokens, 128 requests, 4 at a time) on the gate's
# cache (3,561 blocks of 16 tokens: cache pressure 2.3); 2 repetitions, arms
# interleaved lru, spf, spf, lru; prints TTFT and throughput side by side.
#
# Device time: 4 server starts (~30 s each with --enforce-eager) + 4 benchmark runs
# (~30 s each at the gate's measured 5.7 req/s) = about 4 minutes; a hard limit of
# ${LIMIT:-510} s (then 60 s to stop the server) stops it with every finished run already written.
#
# Run on the device after vLLM 0.24.0 and spfcore's dependencies are installed there
# (results/gpu-h200-x2-c298da1/commands.sh; the `tokenizers` and `transformers` wheels
# come with vLLM's). This tree's spfcore is used (PYTHONPATH), the plugins from their
# installed wheels. Extra arguments go to benchmarks/bench_serve.py (e.g. --reps 1).
# Output, three files (the device brings back only a few): $OUT/serve_bench.json (every
# figure; a failed request's HTTP status and body under first_failure), $OUT/serve_bench.txt
# (what it printed), $OUT/serve_bench-logs.tgz (server logs, vLLM's saved results), also
# when the bench fails; OUT defaults to ./runs/gpu-serve-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-runs/gpu-serve-bench}"
mkdir -p "$OUT"
pack() { [ -d "$OUT/serve_bench-logs" ] && tar czf "$OUT/serve_bench-logs.tgz" -C "$OUT" serve_bench-logs \
           && rm -rf "$OUT/serve_bench-logs"; rm -f "$OUT/serve_bench.tmp"; }
trap pack EXIT
export VLLM_USE_FLASHINFER_SAMPLER=0   # flashinfer is not brought to the device (../shared/gpu/README.md)
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # this tree's spfcore (the plugins: installed wheels)
timeout -k 60 "${LIMIT:-510}" "$PY" benchmarks/bench_serve.py --model llama-3.2-3b --arms lru,spf_expected_utility \
    --num-blocks 3561 --block-size 16 --prefix-len 8192 --num-prefixes 16 --suffix-len 128 --output-len 32 \
    --num-prompts 128 --max-concurrency 4 --max-num-seqs 8 --gpu-memory-utilization 0.5 --reps 2 \
    --output "$OUT/serve_bench.json" "$@" 2>&1 | tee "$OUT/serve_bench.txt"
