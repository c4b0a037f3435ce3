# The device calls that produced this folder, in order (H200 lent by the
# `device` tool; 2026-11-29; Python 3.12.3, torch 2.11.0+cu130, vLLM 0.24.0).
# Here, once: the vLLM bundle (../shared/gpu/README.md), the few pure-Python
# wheels the device lacks, and spfcore + the four plugins as wheels:
#   bash ../shared/gpu/fetch.sh .gpu
#   (matplotlib and its deps -> .gpu/x1; pluggy attrs click rich tqdm
#    markdown-it-py mdurl pygments -> .gpu/x2)
#   .venv/bin/pip wheel --no-deps --no-build-isolation -w .gpu/x2 . plugins/*
# On the device, back to back (each line one call; carry in brackets):
mkdir -p /tmp/b && cp -r .gpu/g1 /tmp/b/                                  # [.gpu/g1]
cp -r .gpu/g2 /tmp/b/                                                     # [.gpu/g2]
cp -r .gpu/g3 /tmp/b/                                                     # [.gpu/g3]
cp -r .gpu/g4 /tmp/b/                                                     # [.gpu/g4]
cp -r .gpu/g5 /tmp/b/ && mkdir -p /tmp/x && cp .gpu/x1/*.whl /tmp/x/      # [.gpu/g5, .gpu/x1]
cp -r .gpu/g6 /tmp/b/ && bash /tmp/b/g6/install.sh /tmp/b \
  && python3 -m pip install --no-index --no-deps /tmp/x/*.whl .gpu/x2/*.whl  # [.gpu/g6, .gpu/x2]
# the gate, in three calls of at most 10 minutes; each resumes the last
# (results/gpu-h200 -> /tmp/gpu-h200 on the device, copied back after each call)
export VLLM_USE_FLASHINFER_SAMPLER=0
spfcore gate --model llama-3.2-3b --output results/gpu-h200/results.json --no-progress --time-limit 380  # 5 cells
spfcore gate --model llama-3.2-3b --output results/gpu-h200/results.json --no-progress --time-limit 480  # 9 cells
spfcore gate --model llama-3.2-3b --output results/gpu-h200/results.json --no-progress                   # last cell
# the adapter's overhead (lru through the adapter vs stock vLLM, interleaved A B x3;
# 8 sessions instead of 32 to fit the device time left) -> overhead.txt
python3 benchmarks/bench_overhead.py --model llama-3.2-3b --personas 16 --prefix-tokens 8192 --sessions 8 \
  --turns 4 --query-tokens 128 --output-tokens 32 --pairs 3 --arms lru,spf_expected_utility,belady_oracle
# here: the page
spfcore results-page results/gpu-h200/results.json --title "spfcore gate at the seed's full scale on an H200" \
  --include results/gpu-h200/commands.sh --include results/gpu-h200/overhead.txt -o results/gpu-h200/README.md
