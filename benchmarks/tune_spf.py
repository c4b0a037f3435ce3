"""Tune ``spf_expected_utility`` honestly: choose its parameters on one part
of the data, report on another.

    python benchmarks/tune_spf.py                         # tune (coordinate descent) then report
    python benchmarks/tune_spf.py --no-tune               # report the defaults only
    python benchmarks/tune_spf.py --set count_weight=0.5  # report one setting (no search)

Parts (simulator, sequential mode, every cell from an empty cache; block hit rate):

* **train** (parameters are chosen here only): the generator shapes the
  project tuned on (:data:`arms_table.SHAPES`) at seeds 0-9, and the first
  half of the Mooncake conversation trace (requests ``[0, n/2)``) at 1,828
  and 9,140 blocks of 512 tokens.
* **report**: the same shapes at seeds 42-44, the trace's second half
  (``[n/2, n)``, from an empty cache) at both sizes.
* **held-out**: shapes the project never tuned on (:data:`HELD_OUT`:
  ``agents``, ``rag``, ``scan``, ``mix``), seeds 42-44.

Objective (maximized on train): the mean over train groups of spf's share of
the LRU->Belady gap, ``(spf - lru) / (belady - lru)`` on block hit rate (a
shape's seeds averaged first, so each shape and each trace size weighs one);
groups without a gap are left out. The search is coordinate descent over
:data:`GRID` (one parameter at a time, every listed value, keep the best,
``--passes`` passes). A value is kept only if it beats the incumbent by more
than ``--min-gain`` (gap share points): a change inside the noise of the
train set is not a finding.

Every table row gives spf, LRU, Belady, the best classic/shipped online arm
(computed once per cell, cached in ``--cache``; on train only with
``--train-all``) and spf's gap share. Prints
figures; never asserts a value.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms_table import CLASSIC, HELD_OUT, ORACLE, SHAPES, SHIPPED, TRACE, gap  # noqa: E402

SPF = "spf_expected_utility"
#: parameter -> values tried by the coordinate descent (the default included)
GRID = {
    "count_weight": [0.0, 0.5, 1.0],
    "prior_weight": [0.1, 0.3, 1.0],
    "depth_classes": [1, 4, 6],
    "max_count": [4, 8, 12],
}
REFERENCE = [a for a in SHIPPED if a != SPF] + CLASSIC


def _cells(part: str, trace: str | None) -> list[tuple[str, str, dict, int]]:
    """``(group, generator or 'trace', flags/spec, seed)`` of one part."""
    out = []
    shapes = HELD_OUT if part == "held-out" else SHAPES
    seeds = range(0, 10) if part == "train" else range(42, 45)
    for name, flags in shapes.items():
        gen = "personas" if name.startswith("personas") else name
        out += [(name, gen, flags, s) for s in seeds]
    if part != "held-out" and trace:
        half = "1st" if part == "train" else "2nd"
        out += [(f"mooncake {nb} {half} half", "trace", {"num_blocks": nb, "half": half}, 0) for nb in (1828, 9140)]
    return out


_PREP: dict = {}


def _prepared(gen: str, flags: dict, seed: int, trace: str | None):
    """(prepared workload, num_blocks, block_size) of a cell, built once per process."""
    key = (gen, json.dumps(flags, sort_keys=True), seed)
    if key not in _PREP:
        from spfcore.sim.simulator import prepare
        from spfcore.workloads.model import Workload
        if gen == "trace":
            from spfcore.workloads.traces import read_trace
            wl = read_trace(trace)
            h = len(wl.requests) // 2
            rs = wl.requests[:h] if flags["half"] == "1st" else wl.requests[h:]
            _PREP[key] = (prepare(Workload(f"{wl.name}-{flags['half']}", wl.params, rs), 512), flags["num_blocks"], 512)
        else:
            from spfcore.workloads.generators import make
            from spfcore.workloads.pressure import num_blocks_for_pressure
            wl = make(gen, seed=seed, **flags)
            _PREP[key] = (prepare(wl, 16), num_blocks_for_pressure(wl, 2.3, 16), 16)
    return _PREP[key]


def _run(job) -> tuple:
    """One simulation: ``job = (cell, arm, options, trace)`` -> ``(cell, arm, options, block hit)``."""
    cell, arm, options, trace = job
    from spfcore.sim import simulate
    prep, nb, bs = _prepared(cell[1], cell[2], cell[3], trace)
    r = simulate(prep, arm, options=options or None, num_blocks=nb, block_size=bs)
    return cell, arm, options, r["block_hit_rate"]


def _source_digest() -> str:
    """First 12 hex digits of the SHA-256 of spf's source files: a cached
    spf result counts only for the code that made it."""
    import hashlib

    import spfcore_spf_expected_utility as m
    h = hashlib.sha256()
    for f in sorted(Path(m.__file__).parent.glob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _cid(cell) -> str:
    return f"{cell[0]}|{cell[3]}"


class Tuner:
    """Runs cells on a process pool; reference arms cached in a JSON file."""

    def __init__(self, trace: str | None, workers: int, cache: Path | None) -> None:
        self.trace, self.cache = trace, cache
        self.pool = ProcessPoolExecutor(workers) if workers > 1 else None
        self.ref: dict = json.loads(cache.read_text()) if cache and cache.exists() else {}

    def _map(self, jobs):
        return list(self.pool.map(_run, jobs, chunksize=1)) if self.pool else [_run(j) for j in jobs]

    def seed_cache(self, files: list[Path]) -> None:
        """Reference cells from ``benchmarks/arms_table.py --json`` outputs
        (same simulator, same cells: generator seeds and trace halves)."""
        for f in files:
            if not f.exists():
                continue
            for name, r in json.loads(f.read_text()).items():
                if name.startswith("mooncake "):
                    nb, part = name.split()[1], name.split(", ")[1]
                    if part == "all":
                        continue
                    ids = [f"mooncake {nb} {part.split()[0]} half|0"]
                else:
                    ids = [f"{name}|{s}" for s in r["seeds"]]
                for i, cell in zip(ids, r["per_seed"]):
                    self.ref.setdefault(i, {}).update({a: v for a, v in cell.items() if a != SPF})

    def references(self, cells, arms=None) -> None:
        """LRU, Belady and every other online arm (or ``arms``) per cell (cached)."""
        jobs = [(c, a, {}, self.trace) for c in cells for a in (arms or [ORACLE, *REFERENCE])
                if a not in self.ref.get(_cid(c), {})]
        for c, a, _, v in self._map(jobs):
            self.ref.setdefault(_cid(c), {})[a] = v
        if self.cache and jobs:
            self.cache.write_text(json.dumps(self.ref, indent=1))

    def spf(self, cells, options: dict) -> dict:
        """spf's block hit per cell id under ``options`` (string dict); runs
        kept for the report (same cell, same options: same result)."""
        key = f"{SPF} {_source_digest()} {json.dumps(options, sort_keys=True)}"
        todo = [c for c in cells if key not in self.ref.get(_cid(c), {})]
        for c, _, _, v in self._map([(c, SPF, options, self.trace) for c in todo]):
            self.ref.setdefault(_cid(c), {})[key] = v
        if self.cache and todo:
            self.cache.write_text(json.dumps(self.ref, indent=1))
        return {_cid(c): self.ref[_cid(c)][key] for c in cells}


def summarize(cells, ref: dict, spf: dict) -> list[dict]:
    """One row per group: means over seeds of spf, lru, belady, the best other
    arm (by mean), spf's gap share (of the means) and its range over seeds."""
    groups: dict[str, list] = {}
    for c in cells:
        groups.setdefault(c[0], []).append(_cid(c))
    rows = []
    for g, ids in groups.items():
        mean = lambda f: sum(f(i) for i in ids) / len(ids)  # noqa: E731
        have = [a for a in [ORACLE, *REFERENCE] if all(a in ref[i] for i in ids)]
        m = {a: mean(lambda i, a=a: ref[i][a]) for a in have}
        s = mean(lambda i: spf[i])
        best = max((a for a in have if a not in ("lru", ORACLE)), key=m.__getitem__, default=None)
        per = [gap(spf[i], ref[i]["lru"], ref[i][ORACLE]) for i in ids]
        per = [x for x in per if x is not None]
        rows.append({"group": g, "n": len(ids), "spf": s, "lru": m["lru"], "belady": m[ORACLE], "best": best,
                     "best_hit": m[best] if best else None, "gap": gap(s, m["lru"], m[ORACLE]),
                     "best_gap": gap(m[best], m["lru"], m[ORACLE]) if best else None,
                     "gap_range": (min(per), max(per)) if len(per) > 1 else None})
    return rows


def objective(rows: list[dict]) -> float:
    """Mean gap share over groups with a gap."""
    g = [r["gap"] for r in rows if r["gap"] is not None]
    return sum(g) / len(g) if g else 0.0


def table(title: str, rows: list[dict]) -> str:
    """Markdown table of :func:`summarize` rows."""
    out = (f"#### {title}\n\n| workload | cells | lru | best other arm | spf | belady | spf gap share "
           "| best other's gap share | spf ≥ best other |\n|---|---:|---:|---|---:|---:|---:|---:|---|\n")
    for r in rows:
        g = "-" if r["gap"] is None else f"{r['gap']:+.0%}"
        if r["gap_range"]:
            g += f" [{r['gap_range'][0]:+.0%}..{r['gap_range'][1]:+.0%}]"
        bg = "-" if r["best_gap"] is None else f"{r['best_gap']:+.0%}"
        if r["best"] is None:  # only lru and Belady were run (train, without --train-all)
            ok, best = "-", "- (not run)"
        else:
            ok = "yes" if r["spf"] >= r["best_hit"] - 1e-12 else f"no ({r['spf'] - r['best_hit']:+.4f})"
            best = f"{r['best']} {r['best_hit']:.4f}"
        out += (f"| {r['group']} | {r['n']} | {r['lru']:.4f} | {best} | {r['spf']:.4f} | "
                f"{r['belady']:.4f} | {g} | {bg} | {ok} |\n")
    return out + f"\nMean spf gap share: {objective(rows):+.1%}.\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(TRACE.resolve()))
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--no-tune", action="store_true", help="report the defaults (or --set) only")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="start from this spf option")
    ap.add_argument("--params", default=",".join(GRID), help="grid parameters to search (comma list)")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--min-gain", type=float, default=0.005, help="least train gain (gap share) to move")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", default="docs/results/tune-spf-reference.json",
                    help="reference arms per cell (JSON, reused across runs)")
    ap.add_argument("--seed-from", nargs="*", default=["docs/results/arms-table-shapes.json",
                                                        "docs/results/arms-table-trace.json"],
                    help="arms_table.py --json outputs whose reference cells are reused")
    ap.add_argument("--train-all", action="store_true",
                    help="every reference arm on train too (default: lru and Belady, all the objective needs)")
    ap.add_argument("--output", help="write the markdown report here (else stdout)")
    a = ap.parse_args(argv)
    trace = None if a.no_trace or not Path(a.trace).exists() else a.trace
    t0 = time.perf_counter()
    tu = Tuner(trace, a.workers, Path(a.cache) if a.cache else None)
    parts = {p: _cells(p, trace) for p in ("train", "report", "held-out")}
    tu.seed_cache([Path(f) for f in a.seed_from])
    for p, cs in parts.items():
        tu.references(cs, None if p != "train" or a.train_all else ["lru", ORACLE])
        print(f"references {p}: {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    cur = dict(kv.split("=", 1) for kv in a.set)
    train = parts["train"]
    best = objective(summarize(train, tu.ref, tu.spf(train, cur)))
    log = [f"start {cur or 'defaults'}: train {best:+.2%}"]
    print(log[-1], file=sys.stderr)
    from spfcore_spf_expected_utility import ExpectedUtilityParams
    defaults = ExpectedUtilityParams()
    if not a.no_tune:
        for _ in range(a.passes):
            for k in filter(None, a.params.split(",")):
                now = cur.get(k, getattr(defaults, k))
                for v in GRID[k]:
                    if str(v) == str(now):  # the incumbent's own value
                        continue
                    trial = {**cur, k: str(v)}
                    score = objective(summarize(train, tu.ref, tu.spf(train, trial)))
                    log.append(f"{k}={v}: train {score:+.2%}")
                    print(log[-1], f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
                    if score > best + a.min_gain:
                        best, cur = score, trial
                        log.append(f"  -> keep {cur}")
    how = ("the search is logged in docs/results/tune-spf-search.md" if a.no_tune
           else "search log at the end")
    md = ("## spf_expected_utility: tune / report split (benchmarks/tune_spf.py)\n\n"
          f"Parameters: `{cur or 'the shipped defaults'}`, chosen on train only ({how}); train objective "
          f"{best:+.2%} (mean share of the LRU→Belady gap). Block hit rate, seed means; gap share of the means, "
          "[range over seeds]. Train runs only lru and Belady (all the objective needs).\n\n")
    for p, cs in parts.items():
        md += table({"train": "Train (seeds 0-9, trace 1st half): parameters chosen here",
                     "report": "Report (seeds 42-44, trace 2nd half): not seen while tuning",
                     "held-out": "Held-out shapes (seeds 42-44): never tuned on"}[p],
                    summarize(cs, tu.ref, tu.spf(cs, cur))) + "\n"
    if not a.no_tune:
        md += "Search log (train objective per trial):\n\n" + "".join(f"    {x}\n" for x in log)
    if a.output:
        Path(a.output).write_text(md)
    else:
        print(md)
    print(f"done: {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
