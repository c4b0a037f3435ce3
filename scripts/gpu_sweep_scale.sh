#!/usr/bin/env bash
# Issue 19's scale figure on the CPUs of a device host (no GPU used): `spfcore sweep` over a synthetic
# 1M-request Mooncake-format trace x 6 policies x 8 cache sizes (log-spaced 1%..50% of the distinct
# blocks) + Belady at each size + the infinite cache = 57 cells, with N local worker processes and/or
# on a local Ray cluster of N CPUs (EXECUTORS="local ray": side by side, N = (CPUs - 2) / 2 each, so
# the two share no core; memory bandwidth they do share), then a check that both gave the same cells.
# One worker is not run (hours): its time is the sum of the cells' own seconds, printed as such.
#   bash scripts/gpu_sweep_scale.sh         # in the foreground: a device call ends every process it
#                                           # started (a background job dies with the call)
# EXECUTORS=local: the local workers only (then WORKERS=CPUs - 2 makes sense).
# Policies: the six fastest shipped online arms (spf_expected_utility needs ~30 min per cell at 1M on one
# core, longer than a device call); POLICIES= overrides. Requests: REQUESTS= (default 1000000).
set -euo pipefail
cd "$(dirname "$0")/.."
W=${WORK:-/tmp/scale}
O=${OUT:-/tmp/out}
EX=${EXECUTORS:-local ray}
if [ "$EX" = local ] || [ "$EX" = ray ]; then N=${WORKERS:-$(( $(nproc) - 2 ))}; else N=${WORKERS:-$(( ($(nproc) - 2) / 2 ))}; fi
REQ=${REQUESTS:-1000000}
POL=${POLICIES:-lru,session_ttl,frequency,sieve,s3fifo,arc}
FR=0.01,0.01749,0.03058,0.05347,0.09351,0.1635,0.2859,0.5
SP="python3 -m spfcore.cli"
mkdir -p "$W" "$O"
driver() {
  echo "host: $(nproc) CPUs, $(free -g | awk '/Mem/{print $2}') GiB; workers $N; requests $REQ; policies $POL"
  t() { python3 -c "import time; print(f'{time.time():.1f}')"; }
  s=$(t); $SP make-trace "$W/trace.jsonl" --requests "$REQ"; e=$(t)
  echo "make-trace wall_s $(python3 -c "print(round($e-$s,1))") bytes $(stat -c %s "$W/trace.jsonl")"
  one() {
    ex=$1; if [ $ex = ray ]; then X=(--ray-address local --workers "$N"); else X=(--workers "$N"); fi
    s=$(t); rc=0
    $SP sweep -o "$W/$ex" --trace "$W/trace.jsonl" --policies "$POL" --fractions "$FR" "${X[@]}" > "$W/$ex.log" 2>&1 || rc=$?
    e=$(t); echo "sweep $ex rc $rc wall_s $(python3 -c "print(round($e-$s,1))") load1 $(cut -d' ' -f1 /proc/loadavg)"
  }
  for ex in $EX; do one $ex & done; wait
  python3 - "$W" <<'PY'
import json, sys, pathlib
w = pathlib.Path(sys.argv[1])
def cells(ex):
    out = {}
    for p in sorted((w / ex / "cells").glob("*.json")):
        r = json.loads(p.read_text())
        out[p.name] = (r["status"], r["num_blocks"], {k: v for k, v in r["cell"].items() if not k.endswith("_seconds")})
        out[p.name + ":secs"] = {"seconds": r.get("seconds"), "cpu_seconds": r.get("cpu_seconds"),
                                 "wall_seconds": r["cell"].get("wall_seconds")}
    return out
a = cells("local")
b = cells("ray") if (w / "ray" / "cells").is_dir() else {}
ka = sorted(k for k in a if not k.endswith(":secs"))
same = [k for k in ka if k in b and a[k] == b[k]]
print(f"cells local {len(ka)}, ray {sum(1 for k in b if not k.endswith(':secs'))}, identical less timings: {len(same)}")
for key in ("seconds", "cpu_seconds", "wall_seconds"):
    tot = sum(float(a[k + ":secs"].get(key, 0) or 0) for k in ka)
    print(f"sum over the local run's cells of {key}: {tot:.1f} s")
print("(seconds: the whole cell incl. opening the input; cpu_seconds: its process CPU; wall_seconds: the replay alone.\n one worker would take about the sum of seconds: an estimate from measured cells, not a 1-worker run)")
PY
}
driver 2>&1 | tee "$W/driver.log"
tar czf "$O/scale.tgz" -C "$W" driver.log $(cd "$W" && ls -d ./*.log local/*.json local/*.png ray/*.json ray/*.png local/cells ray/cells 2>/dev/null) || true
