"""Memory of streaming replay: peak RSS and wall time of ``spfcore simulate
--no-ceilings`` per arm on synthetic Mooncake-format traces of growing size.

For each size (default 100k and 1M requests, 10x apart) a trace is written
once with ``spfcore make-trace`` (kept in ``--dir``), then each arm runs in
its own child process::

    spfcore simulate --trace T --no-ceilings --num-blocks N --arms ARM -o cell.json

Peak RSS is the child's ``ru_maxrss`` (``os.wait4``), so it covers the whole
command: interpreter, imports, the scan pass, the replay. The cache is the
same at every size (``--num-blocks``), so a streaming replay should stay flat
as the trace grows. ``belady_oracle`` (``--belady-max`` sizes only) holds its
future index, linear in block references: its bytes per reference are
``(RSS(belady) - RSS(lru)) / block refs`` at the same size. ``--inspect``
also replays each arm in a child that reports, after the run, the length and
deep size of every container attribute of the policy object, to show which
state grows with the trace. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_memory.py [--sizes 100000,1000000] [--arms lru,frequency]
        [--spf-max 100000] [--belady-max 100000] [--inspect]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ONLINE = ("lru", "session_ttl", "frequency", "spf_expected_utility")
SLOW = "spf_expected_utility"
BELADY = "belady_oracle"


def _child(args: list[str]) -> tuple[int, float, int]:
    """Run ``python -m spfcore.cli ARGS``; returns (exit status, wall s, peak RSS bytes)."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "spfcore.cli", *args], stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, time.perf_counter() - t, ru.ru_maxrss * 1024  # Linux: KiB


def _trace(folder: Path, n: int, seed: int) -> Path:
    path = folder / f"synthetic-{n}-seed{seed}.jsonl"
    if not path.exists():
        rc, wall, rss = _child(["make-trace", str(path), "--requests", str(n), "--seed", str(seed)])
        if rc:
            raise SystemExit(f"make-trace failed ({rc})")
        print(f"make-trace {n:>10,} requests: {wall:7.1f} s, peak RSS {rss / 2**20:7.1f} MiB, "
              f"{path.stat().st_size / 2**20:,.0f} MiB on disk", flush=True)
    return path


def _simulate(trace: Path, arm: str, num_blocks: int, out: Path) -> dict:
    rc, wall, rss = _child(["simulate", "--trace", str(trace), "--no-ceilings", "--num-blocks", str(num_blocks),
                            "--arms", arm, "--output", str(out)])
    cell = json.loads(out.read_text())["cells"][0] if rc == 0 else {"error": f"exit status {rc}"}
    return {"rss": rss, "wall": wall, **cell}


def _deep_size(obj, seen: set) -> int:
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    n = sys.getsizeof(obj)
    if isinstance(obj, dict):
        n += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        n += sum(_deep_size(x, seen) for x in obj)
    elif hasattr(obj, "__slots__"):
        n += sum(_deep_size(getattr(obj, s), seen) for s in obj.__slots__ if hasattr(obj, s))
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        n += _deep_size(vars(obj), seen)
    return n


def _inspect_child(arm: str, trace: str, num_blocks: int) -> None:
    """In this process: stream-replay ``trace`` under ``arm``, then print the
    policy object's container attributes as JSON ``{name: [len, deep bytes]}``."""
    from spfcore import runtime
    from spfcore.sim import simulate_stream
    from spfcore.workloads.traces import TraceStream

    made = []
    orig = runtime.PolicyRuntime.for_policy.__func__

    def capture(cls, *a, **kw):
        rt = orig(cls, *a, **kw)
        made.append(rt)
        return rt

    runtime.PolicyRuntime.for_policy = classmethod(capture)
    rec = simulate_stream(TraceStream(trace), arm, num_blocks=num_blocks, block_size=512)
    out = {"block_refs": rec["block_refs"]}
    def walk(obj, path: str, depth: int) -> None:  # containers of the policy and of the objects it holds
        for name, val in vars(obj).items():
            if isinstance(val, (dict, list, set)):
                out[f"{path}.{name}"] = [len(val), _deep_size(val, set())]
            elif depth and hasattr(val, "__dict__") and type(val).__module__.startswith("spfcore_"):
                walk(val, f"{path}.{name}", depth - 1)

    for plugin in made[0].pm.get_plugins():
        if hasattr(plugin, "__dict__"):
            walk(plugin, type(plugin).__name__, 2)
    for name in ("meta", "by_key", "_hints"):
        val = getattr(made[0], name)
        out[f"PolicyRuntime.{name}"] = [len(val), _deep_size(val, set())]
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000", help="comma-separated request counts")
    ap.add_argument("--arms", default=None, help=f"comma-separated; default: the installed of {', '.join(ONLINE)}")
    ap.add_argument("--num-blocks", type=int, default=20001, help="cache size, null block included (every size)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "spfcore-bench-memory")
    ap.add_argument("--spf-max", type=int, default=100_000, help=f"largest size to run {SLOW} at (it is slow)")
    ap.add_argument("--belady-max", type=int, default=100_000, help=f"largest size to run {BELADY} at (0: never)")
    ap.add_argument("--inspect", action="store_true", help="also report the policies' container sizes")
    ap.add_argument("--inspect-child", nargs=3, metavar=("ARM", "TRACE", "NUM_BLOCKS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inspect_child:
        _inspect_child(a.inspect_child[0], a.inspect_child[1], int(a.inspect_child[2]))
        return

    from spfcore import registry

    ok = {p.name for p in registry.discover() if p.status == "ok"}
    arms = a.arms.split(",") if a.arms else [x for x in ONLINE if x in ok]
    sizes = [int(s) for s in a.sizes.split(",")]
    a.dir.mkdir(parents=True, exist_ok=True)
    traces = {n: _trace(a.dir, n, a.seed) for n in sizes}
    print(f"\nspfcore simulate --no-ceilings --num-blocks {a.num_blocks} (512-token blocks), one child per cell")
    print(f"{'arm':<22}{'requests':>11}{'block refs':>12}{'peak RSS MiB':>14}{'wall s':>9}{'replay s':>10}"
          f"{'k refs/s':>10}{'hit rate':>10}")
    lru_rss = {}
    runs = [(arm, n) for arm in arms for n in sizes if arm != SLOW or n <= a.spf_max]
    if BELADY in ok and a.belady_max:
        runs += [(BELADY, n) for n in sizes if n <= a.belady_max]
    for arm, n in runs:
        c = _simulate(traces[n], arm, a.num_blocks, a.dir / f"cell-{arm}-{n}.json")
        if "error" in c:
            print(f"{arm:<22}{n:>11,}  {c['error']}", flush=True)
            continue
        if arm == "lru":
            lru_rss[n] = c["rss"]
        extra = ""
        if arm == BELADY and n in lru_rss:
            extra = f"   future index ~{(c['rss'] - lru_rss[n]) / c['block_refs']:.0f} bytes/ref over lru"
        print(f"{arm:<22}{n:>11,}{c['block_refs']:>12,}{c['rss'] / 2**20:>14.1f}{c['wall']:>9.1f}"
              f"{c['wall_seconds']:>10.1f}{c['block_refs'] / c['wall_seconds'] / 1e3:>10.1f}"
              f"{c['block_hit_rate']:>10.4f}{extra}", flush=True)
    if a.inspect:
        print("\npolicy containers after the replay: entries / deep MiB (growth with the trace = not pruned)")
        for arm, n in runs:
            res = subprocess.run([sys.executable, __file__, "--inspect-child", arm, str(traces[n]),
                                  str(a.num_blocks)], capture_output=True, text=True)
            if res.returncode:
                print(f"{arm} {n:,}: failed: {res.stderr.strip().splitlines()[-1:]}")
                continue
            d = json.loads(res.stdout)
            refs = d.pop("block_refs")
            parts = [f"{k} {v[0]:,} / {v[1] / 2**20:.1f}" for k, v in d.items()]
            print(f"{arm:<22}{n:>11,} ({refs:,} refs): " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
