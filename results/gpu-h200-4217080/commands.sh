# Second run of the seed's full-scale gate on an H200, spfcore at commit 4217080
# (the spf model of session 2: reuse classes by mean gap, depth buckets, decay
# 0.999, prior 0.3). Device lent by the `device` tool; 2026-11-29; Python 3.12.3,
# torch 2.11.0+cu130, vLLM 0.24.0. The first run (model of 170f0bf) is in
# ../gpu-h200/. Here, once: the wheels, as in ../gpu-h200/commands.sh:
#   .venv/bin/pip wheel --no-deps --no-build-isolation -w .gpu/x2 . plugins/*
# The vLLM wheel re-split into 5 parts of 55.8 MB (a call carries at most
# 64 MiB including the checkout):
#   cat .gpu/g1/part_aa .gpu/g2/part_ab .gpu/g3/part_ac .gpu/g4/part_ad .gpu/g5/part_ae > w
#   split -n 5 w part_   # -> .gpu/h1/part_aa ... .gpu/h5/part_ae
# On the device, back to back (each line one call; carry in brackets):
mkdir -p /tmp/b/g1 /tmp/x2 && cp .gpu/h1/part_aa /tmp/b/g1/ && cp .gpu/x2/*.whl /tmp/x2/   # [.gpu/h1, .gpu/x2]
mkdir -p /tmp/b/g2 && cp .gpu/h2/part_ab /tmp/b/g2/                                        # [.gpu/h2]
mkdir -p /tmp/b/g3 && cp .gpu/h3/part_ac /tmp/b/g3/                                        # [.gpu/h3]
mkdir -p /tmp/b/g4 && cp .gpu/h4/part_ad /tmp/b/g4/                                        # [.gpu/h4]
mkdir -p /tmp/b/g5 && cp .gpu/h5/part_ae /tmp/b/g5/                                        # [.gpu/h5]
mkdir -p /tmp/x && cp .gpu/x1/*.whl /tmp/x/                                                # [.gpu/x1]
cp -r .gpu/g6 /tmp/b/ && bash /tmp/b/g6/install.sh /tmp/b \
  && python3 -m pip install -q --no-index --no-deps /tmp/x/*.whl /tmp/x2/*.whl            # [.gpu/g6]
# the gate in three calls (each engine start + warm-up ~2.5 min: 5 cells per call = one
# seed, all arms), each resuming the last; /tmp/gpu-h200 copied to $OUT after each
export VLLM_USE_FLASHINFER_SAMPLER=0
spfcore gate --model llama-3.2-3b --output /tmp/gpu-h200/results.json --no-progress --fresh --time-limit 430  # seed 42
spfcore gate --model llama-3.2-3b --output /tmp/gpu-h200/results.json --no-progress --time-limit 480          # seed 43
spfcore gate --model llama-3.2-3b --output /tmp/gpu-h200/results.json --no-progress                          # seed 44
# 1,520 s of the session's 1,800 s of device time; no time left for a repeat.
# here: the page
spfcore results-page results/gpu-h200-4217080/results.json --title "spfcore gate at the seed's full scale on an H200, second run (commit 4217080)" \
  --include results/gpu-h200-4217080/commands.sh -o results/gpu-h200-4217080/README.md
