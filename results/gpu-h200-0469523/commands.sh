# Issue 11, part 5: the seed's full-scale gate on one H200 at 0469523 (session 23): the gate's four roles
# (lru floor, session_ttl baseline, spf_expected_utility candidate, belady_oracle ceiling) x seeds 42-44,
# 12 engine cells + 12 simulator cells, sequential, interleaved per seed. Since 8268a89 (results/gpu-h200-8268a89):
# lru is served by vLLM's own FreeKVCacheBlockQueue (no runtime event); spfcore's other code is unchanged.
# 2026-12-03, `nvidia-h200` (1 GPU, 16 CPUs), Python 3.12.3, torch 2.11.0+cu130, vLLM 0.24.0, numba 0.68.0.
#
# Install (6 calls, back to back): .gpu/g1..g5 as in ../shared/gpu/README.md; results/ and docs/ moved out of
# the tree for those calls only; spfcore + plugin wheels built from this commit:
#   .venv/bin/pip wheel --no-deps --no-build-isolation -w .gpu/x2 . plugins/*
# (plus py3.12 wheels of cattrs copier filelock prometheus-client pluggy attrs click rich tqdm docstring-parser).
# The sixth call (carry .gpu/g6 .gpu/x2):
#   cp -r .gpu/g6 /tmp/b/ && bash /tmp/b/g6/install.sh /tmp/b && mkdir -p /tmp/x2 && cp .gpu/x2/* /tmp/x2/ \
#     && python3 -m pip install -q --no-index --find-links /tmp/x2 --find-links /tmp/b/g6 /tmp/x2/spfcore*.whl
export VLLM_USE_FLASHINFER_SAMPLER=0 GPUS=1 SEEDS_PER_GPU=3 ARMS=lru,session_ttl,spf_expected_utility,belady_oracle
TIME_LIMIT=360 bash scripts/gpu_hotpath_gate.sh seeds   # (the install's call) 486 s: 3 cells
TIME_LIMIT=400 bash scripts/gpu_hotpath_gate.sh seeds   # 456 s: 5 cells
TIME_LIMIT=280 timeout 400 bash scripts/gpu_hotpath_gate.sh seeds   # 4 cells, then in the same call:
TIME_LIMIT=480 timeout 100 bash scripts/gpu_hotpath_gate.sh merge   # every cell judged (verdict.txt); 387 s for both
# Device time: 1,693 s of 1,800 (the machine's start ~270 s, one refused start 91 s). per_seed.txt: each engine
# cell's policy ms/req split into the adapter's part (EngineRecord.adapter_seconds) and the runtime's (hooks
# included), read from results.cells.jsonl (not kept: 0.6 MB; results.json holds every cell).
