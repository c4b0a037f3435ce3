set -e
cd /tmp/h19c
PY=/work/main/.venv/bin/python
export PYTHONPATH=/work/main:$(ls -d /work/main/plugins/*/src | paste -sd:)
$PY -m spfcore.cli make-trace /tmp/h19c/t20k.jsonl --requests 20000 --sessions 4096
G="--trace /tmp/h19c/t20k.jsonl --policies lru,session_ttl,frequency,sieve,arc,s3fifo --num-blocks 1000,5000 --fractions 0.05 --workers 2"
rm -rf e2e_main e2e_new
( time $PY -m spfcore.cli sweep -o e2e_main $G ) > e2e_main.log 2>&1
export PYTHONPATH=/work/wt-19:$(ls -d /work/wt-19/plugins/*/src | paste -sd:)
( time $PY -m spfcore.cli sweep -o e2e_new $G ) > e2e_new.log 2>&1
$PY - <<'PY'
import json, glob
def load(d):
    out = {}
    for p in glob.glob(f"/tmp/h19c/{d}/cells/*.json"):
        r = json.load(open(p))
        c = r["config"]; k = (c["policy"], json.dumps(c["size"], sort_keys=True))
        for x in ("host", "pid", "seconds", "cpu_seconds", "key"): r.pop(x)
        r["config"].pop("code")
        r["cell"] = {a: b for a, b in r["cell"].items() if not a.endswith("_seconds")}
        out[k] = r
    return out
a, b = load("e2e_main"), load("e2e_new")
print(len(a), len(b), "identical (less timings, key and code digest):", a == b)
import statistics
for d in ("e2e_main", "e2e_new"):
    ss = [json.load(open(p)) for p in glob.glob(f"/tmp/h19c/{d}/cells/*.json")]
    print(d, "sum of cell seconds", round(sum(r["seconds"] for r in ss), 1), "cpu", round(sum(r["cpu_seconds"] for r in ss), 1))
PY
