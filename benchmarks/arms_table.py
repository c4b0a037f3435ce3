"""Every online arm (the shipped ones and the classic plugins) against Belady,
on every generator shape and on both halves of the Mooncake conversation
trace: block hit rate and the share of the LRU->Belady gap each arm closes.

    python benchmarks/arms_table.py                       # report part: seeds 42-44, both trace halves
    python benchmarks/arms_table.py --seeds 0-9           # the tuning part of the generators
    python benchmarks/arms_table.py --no-trace --json shapes.json &      # two processes, merged after
    python benchmarks/arms_table.py --shapes '' --json trace.json
    python benchmarks/arms_table.py --merge shapes.json trace.json --output docs/results/arms-table.md
    python benchmarks/arms_table.py --arms spf_expected_utility --update old.json --json new.json  # one arm anew

``scripts/results.sh`` runs it and includes the markdown in docs/results.md.

Simulator, sequential mode (``spfcore.sim.simulate``), each cell from an
empty cache. Generators: their defaults (docs/design.md §1 scale), block size
16, cache pressure 2.3 (``spfcore.workloads.pressure``), the seed's
``personas`` also with ``order=shuffled``. Trace: Mooncake hash ids at 512
tokens per block, 1,828 and 9,140 blocks, the whole trace and each half
(requests ``[0, n/2)`` and ``[n/2, n)``, each from an empty cache).

Gap closed = (arm - lru) / (belady - lru) on block hit rate (undefined where
Belady equals LRU: shown as "-"). Generator rows are seed means; the
interval is the range over seeds (min..max of the per-seed gap closed).
Prints figures; never asserts a speed or a value.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from spfcore import registry
from spfcore.sim import simulate
from spfcore.workloads.generators import make
from spfcore.workloads.model import Workload
from spfcore.workloads.pressure import num_blocks_for_pressure
from spfcore.workloads.traces import read_trace

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
SHIPPED = ["lru", "session_ttl", "frequency", "spf_expected_utility"]
CLASSIC = ["arc", "s3fifo", "sieve", "lirs", "gdsf", "twoq"]
ORACLE = "belady_oracle"
SHAPES = {"personas": {}, "personas-shuffled": {"order": "shuffled"}, "zipf": {}, "bursty": {},
          "revisit": {}, "multiturn": {}}
#: shapes spf was never tuned on (benchmarks/tune_spf.py reports them apart)
HELD_OUT = {name: {} for name in ("agents", "rag", "scan", "mix")}  # = generators.HELD_OUT, in table order


def _seeds(s: str) -> list[int]:
    if "-" in s:
        a, b = s.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in s.split(",")]


def cells(workload: Workload, arms: list[str], num_blocks: int, block_size: int) -> dict[str, float]:
    """Block hit rate per arm (the arms interleaved on one input, one after the other)."""
    return {a: simulate(workload, a, num_blocks=num_blocks, block_size=block_size)["block_hit_rate"] for a in arms}


def gap(x: float, lru: float, bel: float) -> float | None:
    """Share of the LRU->Belady gap closed by ``x`` (None if there is no gap)."""
    return (x - lru) / (bel - lru) if bel - lru > 1e-12 else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="42-44", help="generator seeds, e.g. 42-44 or 0-9 or 1,2")
    ap.add_argument("--trace", default=str(TRACE.resolve()))
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--shapes", default=",".join([*SHAPES, *HELD_OUT]))
    ap.add_argument("--arms", help="recompute only these arms (comma list); the others come from --update")
    ap.add_argument("--update", metavar="JSON",
                    help="an earlier --json output: its rows are kept, the recomputed arms replace theirs")
    ap.add_argument("--output", help="write the markdown table here (else stdout)")
    ap.add_argument("--json", help="write the raw numbers here")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="render the tables from --json outputs of earlier runs (e.g. shapes and trace run apart)")
    a = ap.parse_args(argv)
    ok = {p.name for p in registry.discover() if p.status == "ok"}
    arms = [x for x in SHIPPED + CLASSIC if x in ok]
    missing = [x for x in SHIPPED + CLASSIC + [ORACLE] if x not in ok]
    if ORACLE not in ok:
        print("belady_oracle is not installed: no gap can be computed", file=sys.stderr)
        return 2
    seeds = _seeds(a.seeds)
    rows: dict[str, dict] = {}
    old = json.loads(Path(a.update).read_text()) if a.update else {}
    run_arms = [x for x in a.arms.split(",") if x] if a.arms else arms + [ORACLE]

    def run_cells(name, idx, wl, nb, bs):
        """Recomputed arms of one cell, the others from ``--update``."""
        got = cells(wl, [x for x in arms + [ORACLE] if x in run_arms], nb, bs)
        prev = old.get(name, {}).get("per_seed", [])
        if idx < len(prev):
            got = {**prev[idx], **got}
        missing = [x for x in arms + [ORACLE] if x not in got]
        if missing:
            raise SystemExit(f"{name}: no value for {missing} (not recomputed and not in --update)")
        return got

    if a.merge:
        for f in a.merge:
            rows.update(json.loads(Path(f).read_text()))
        a.shapes, a.no_trace = "", True
        got = {k for r in rows.values() for k in r["per_seed"][0]}
        arms = [x for x in arms if x in got]
        seeds = next((r["seeds"] for r in rows.values() if r["seeds"]), seeds)
    t0 = time.perf_counter()
    for shape in filter(None, a.shapes.split(",")):
        name, flags = shape, {**SHAPES, **HELD_OUT}[shape]
        gen = "personas" if shape.startswith("personas") else shape
        per_seed = []
        if old.get(name) and old[name]["seeds"] != seeds:
            raise SystemExit(f"{name}: --update has seeds {old[name]['seeds']}, not {seeds}")
        for j, s in enumerate(seeds):
            wl = make(gen, seed=s, **flags)
            nb = num_blocks_for_pressure(wl, 2.3, 16)
            per_seed.append(run_cells(name, j, wl, nb, 16))
            print(f"{name} seed {s}: {time.perf_counter() - t0:.0f}s", file=sys.stderr)
        rows[name] = {"per_seed": per_seed, "seeds": seeds}
    if not a.no_trace and Path(a.trace).exists():
        wl = read_trace(a.trace)
        reqs = wl.requests
        h = len(reqs) // 2
        parts = {"all": reqs, "1st half": reqs[:h], "2nd half": reqs[h:]}
        for nb in (1828, 9140):
            for part, rs in parts.items():
                w = Workload(f"{wl.name}-{part}", {**wl.params, "part": part}, rs)
                name = f"mooncake {nb} blocks, {part}"
                rows[name] = {"per_seed": [run_cells(name, 0, w, nb, 512)], "seeds": None}
                print(f"mooncake {nb} {part}: {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    md = render(rows, arms, seeds)
    if missing:
        md += f"\nNot installed (left out): {', '.join(missing)}.\n"
    if a.output:
        Path(a.output).write_text(md)
    else:
        print(md)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


def render(rows: dict, arms: list[str], seeds: list[int]) -> str:
    """Two markdown tables: block hit rate (+ Belady), and the share of the gap closed."""
    head = "| workload | " + " | ".join(arms) + " | belady |\n|---|" + "---:|" * (len(arms) + 1) + "\n"
    t1, t2 = head, "| workload | " + " | ".join(arms) + " |\n|---|" + "---:|" * len(arms) + "\n"
    for name, r in rows.items():
        ps = r["per_seed"]
        mean = {k: sum(c[k] for c in ps) / len(ps) for k in ps[0]}
        label = f"{name} (held out)" if name in HELD_OUT else name
        t1 += f"| {label} | " + " | ".join(f"{mean[k]:.4f}" for k in arms + [ORACLE]) + " |\n"
        cols = []
        for k in arms:
            g = gap(mean[k], mean["lru"], mean[ORACLE])
            if g is None:
                cols.append("-")
                continue
            s = f"{g:+.0%}"
            per = [gap(c[k], c["lru"], c[ORACLE]) for c in ps]
            per = [x for x in per if x is not None]
            if len(ps) > 1 and per:
                s += f" [{min(per):+.0%}..{max(per):+.0%}]"
            best = max(gap(mean[x], mean["lru"], mean[ORACLE]) for x in arms)
            cols.append(f"**{s}**" if g == best and g > 0 else s)
        t2 += f"| {label} | " + " | ".join(cols) + " |\n"
    note = (f"Generators: seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} seeds), means; block size 16, cache "
            "pressure 2.3; *held out*: shapes no spf parameter was chosen on (benchmarks/tune_spf.py). "
            "Trace: Mooncake conversation, 512 tokens per block; halves from an empty cache.\n")
    return ("## Every online arm vs Belady (benchmarks/arms_table.py)\n\n### Block hit rate\n\n" + note + "\n" + t1 + "\n### Share of the LRU→Belady gap closed\n\n"
            "(arm − lru) / (belady − lru) on block hit rate; generator rows give the range over seeds; "
            "bold: the best arm of the row.\n\n" + t2)


if __name__ == "__main__":
    sys.exit(main())
