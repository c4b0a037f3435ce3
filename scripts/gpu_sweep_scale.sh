#!/usr/bin/env bash
# Issue 19's scale figure on the CPUs of a device host (no GPU used): `spfcore sweep` over a synthetic
# 1M-request Mooncake-format trace x 6 policies x 8 cache sizes + Belady at each size + the infinite cache
# = 57 cells, with N local worker processes, then on a local Ray cluster of N CPUs (one after the other,
# each with the host to itself), then a check that both gave the same cells.
#
# The trace: make-trace --sessions 4096 (256 by default). Reuse distances in make-trace come from the
# conversations open at once; with 256 of them every reuse is short and LRU reaches the infinite cache's
# hit rate at ~20k blocks (a flat curve at 1%..50% of the 7.1M distinct blocks of a 1M trace). With 4096
# the curve bends from ~1k to ~220k blocks (measured on 100k requests: lru token hit rate 0.229 @ 739
# blocks, 0.317 @ 7.4k, 0.398 @ 22k, 0.557 @ 74k, 0.608 @ 221k = the infinite cache's). The distances do
# not grow with the trace's length, so the sizes are absolute blocks, log-spaced 1,000..300,000.
#
# Resumable across device calls (each <= CALL_S + 30 seconds, CALL_S default 520): every call does what is left.
# The sweep is stopped by SIGTERM CALL_S seconds after the call began; it keeps the finished cells and
# prints how many were not finished (in flight: lost, rerun by the next call). Run the same command again
# until it prints "ALL DONE". Per call and executor it prints the wall time and the cells done; the
# figure's wall time per executor is the sum over its calls (WORK/<ex>.calls).
# An executor starts only with MIN_START s (default 300) left in the call, else it waits for the next call,
# so its wall time is one uncut run when its cells fit one call.
#   bash scripts/gpu_sweep_scale.sh         # in the foreground (a background job dies with the call)
# Measured (results/sweep-scale-h200-1m-4dfc7bb, nvidia-h200, 14 workers, main 4dfc7bb): 1M requests, 57 cells,
# 7,025 s of cells, the longest 294 s; 755 s (local) and 642 s (Ray), each across two calls. Older notes:
# Cost, an ESTIMATE (not measured on the device): the cells of an earlier 1M run on a 32-CPU host took
# per cell 70 s lru, 85 Belady, ~250 session_ttl and arc, ~320 sieve, ~370 frequency, ~400 s3fifo
# (14,000 CPU-s), of which ~65 s per cell was reading and keying the trace. Each executor's driver now
# does that once, into a prepared stream (OUT/inputs/<key>.stream, ~0.6 GB; ~50 s here, ~90 s there,
# serial, before the cells), and every cell memory-maps it (measured on this 2-core machine at 100k and
# 300k requests, interleaved A/B, scaled linearly: -39 CPU-s per lru cell, -73 Belady, -46 session_ttl
# at 1M; benchmarks/bench_prepared_stream.py). So per cell ~5 s lru, ~15 Belady, ~185 session_ttl and
# arc, ~255 sieve, ~305 frequency, ~335 s3fifo: ~10,300 CPU-s. On 30 workers ~350-400 s of cells + ~100 s
# driver (scan + prepared stream) = ~450-500 s per executor: about one call each on nvidia-h200-x2.
# Since results/sweep-scale-h200x2-68fd51f (7 cells over 490 s; issue 19c, benchmarks/bench_scale_cells.py, this
# 2-core machine, interleaved A/B on the trace's first 50k requests): ARC's walk keeps its memory of a list without an
# evictable block across eviction calls (ARC at 11,500 blocks 23.5 -> 9.0 s, at 26,000 63.7 -> 22.4 s; best of 3),
# frequency's ghost trim no longer scans the dict's freed slots (at 133,000 blocks on 150k requests 23.6 -> 19.2 s;
# the 1.2M-entry list at 300,000 blocks gained most), and the sweep starts the longest cells first. ARC's cells still
# grow faster than the trace (branch, 26,000 blocks: 22-36 s at 50k requests, 172 s at 150k): at 1M requests ARC
# from 11,500 to 59,000 blocks may still pass one call (not measured); a cut cell is rerun by the next call.
# EXECUTORS="local ray" (default) or one of them. WORKERS (default CPUs - 2). POLICIES, REQUESTS,
# SESSIONS, BLOCKS override the grid. One worker is not run (hours): its time is the sum of the cells'
# own seconds, printed as such (an estimate from measured cells, not a 1-worker run).
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
CALL_S=${CALL_S:-520}
O=${OUT:-/tmp/out}
EX=${EXECUTORS:-local ray}
N=${WORKERS:-$(( $(nproc) - 2 ))}
REQ=${REQUESTS:-1000000}
SES=${SESSIONS:-4096}
W=${WORK:-/tmp/scale}/r$REQ-s$SES  # one folder per trace shape: an older run's cells are not mixed in
POL=${POLICIES:-lru,session_ttl,frequency,sieve,s3fifo,arc}
BL=${BLOCKS:-1000,2260,5100,11500,26000,59000,133000,300000}
SP="python3 -m spfcore.cli"
mkdir -p "$W" "$O"
left() { echo $(( CALL_S - ($(date +%s) - T0) )); }
driver() {
  echo "host: $(nproc) CPUs, $(free -g | awk '/Mem/{print $2}') GiB; workers $N; requests $REQ; sessions $SES;" \
       "policies $POL; blocks $BL; this call's budget ${CALL_S} s"
  TR="$W/trace.jsonl"
  if [ ! -s "$TR" ]; then  # same seed and shape: same bytes, so a later call's cells keep their keys
    s=$(date +%s.%N); $SP make-trace "$TR.part" --requests "$REQ" --sessions "$SES"; mv "$TR.part" "$TR"
    echo "make-trace wall_s $(python3 -c "print(round($(date +%s.%N)-$s,1))") bytes $(stat -c %s "$TR")"
  fi
  all=1
  for ex in $EX; do
    if [ -f "$W/$ex.done" ]; then echo "sweep $ex: done in an earlier call"; continue; fi
    b=$(left)  # an executor is started only with MIN_START s left, so its wall time is not cut and re-run
    if [ "$b" -lt "${MIN_START:-300}" ]; then echo "sweep $ex: ${b} s left in this call: next call"; all=0; continue; fi
    if [ $ex = ray ]; then X=(--ray-address local --workers "$N"); else X=(--workers "$N"); fi
    # the executors share one prepared stream (OUT/inputs/, built once by the first; its build time is in that
    # executor's wall time only): the figure compares running the cells, not keying the trace twice
    if [ $ex != local ] && [ -d "$W/local/inputs" ] && [ ! -e "$W/$ex/inputs" ]; then
      mkdir -p "$W/$ex" && ln -s "$W/local/inputs" "$W/$ex/inputs"
    fi
    s=$(date +%s.%N); rc=0; l0=0; [ -f "$W/$ex.log" ] && l0=$(wc -l < "$W/$ex.log")
    timeout --foreground -s TERM -k 30 "$b" $SP sweep -o "$W/$ex" --trace "$TR" --policies "$POL" --num-blocks "$BL" "${X[@]}" \
      >> "$W/$ex.log" 2>&1 || rc=$?
    wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")
    n=$(ls "$W/$ex/cells" 2>/dev/null | wc -l)
    echo "$wall $rc $n" >> "$W/$ex.calls"
    echo "sweep $ex rc $rc wall_s $wall cells_in_folder $n load1 $(cut -d' ' -f1 /proc/loadavg)"
    tail -n +$((l0 + 1)) "$W/$ex.log" | grep "^sweep:" || true
    if [ $rc = 0 ] || [ $rc = 4 ]; then touch "$W/$ex.done"; else all=0; fi  # 4: a cell failed (see the table)
  done
  python3 - "$W" <<'PY'
import json, sys, pathlib
w = pathlib.Path(sys.argv[1])
def cells(ex):
    out = {}
    for p in sorted((w / ex / "cells").glob("*.json")):
        r = json.loads(p.read_text())
        out[p.name] = (r["status"], r["num_blocks"], {k: v for k, v in r["cell"].items() if not k.endswith("_seconds")})
        out[p.name + ":secs"] = {"seconds": r.get("seconds"), "cpu_seconds": r.get("cpu_seconds"),
                                 "wall_seconds": r["cell"].get("wall_seconds"), "policy": r["config"]["policy"]}
    return out
for ex in ("local", "ray"):
    f = w / f"{ex}.calls"
    if f.exists():
        calls = [line.split() for line in f.read_text().splitlines() if line.strip()]
        print(f"{ex}: {len(calls)} call(s), wall s per call {[float(c[0]) for c in calls]}, "
              f"sum {sum(float(c[0]) for c in calls):.1f} s (in-flight cells cut at a call's end are in it)")
a = cells("local") if (w / "local" / "cells").is_dir() else {}
b = cells("ray") if (w / "ray" / "cells").is_dir() else {}
ka = sorted(k for k in a if not k.endswith(":secs"))
same = [k for k in ka if k in b and a[k] == b[k]]
print(f"cells local {len(ka)}, ray {sum(1 for k in b if not k.endswith(':secs'))}, identical less timings: {len(same)}")
for key in ("seconds", "cpu_seconds", "wall_seconds"):
    tot = sum(float(a[k + ":secs"].get(key, 0) or 0) for k in ka)
    print(f"sum over the local run's cells of {key}: {tot:.1f} s")
per = {}
for k in ka:
    s = a[k + ":secs"]
    per.setdefault(s["policy"], []).append(float(s["seconds"] or 0))
print("per policy: cells, sum of seconds, max: " + "; ".join(f"{p} {len(v)} {sum(v):.0f} {max(v):.0f}"
                                                               for p, v in sorted(per.items())))
print("(seconds: the whole cell; wall_seconds: the replay; one worker would take about the sum of seconds)")
PY
  if [ $all = 1 ]; then echo "ALL DONE"; else echo "NOT DONE: run the same command again (resumes)"; fi
  echo "call wall_s $(( $(date +%s) - T0 ))"
}
driver 2>&1 | tee -a "$W/driver.log"
for ex in local ray; do [ -d "$W/$ex" ] && $SP sweep-report "$W/$ex" > "$W/$ex.report" 2>&1 || true; done
tar czf "$O/scale.tgz" -C "$W" driver.log $(cd "$W" && ls -d ./*.log ./*.calls ./*.report local/*.json local/*.png \
  ray/*.json ray/*.png local/cells ray/cells local/inputs/*.json ray/inputs/*.json 2>/dev/null) || true
# (OUT/inputs/*.stream/, the prepared streams, ~0.6 GB each at 1M requests, stay on the host)
