"""Markdown pages of results documents (``spfcore results-page``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from spfcore.report.results import ResultsError, read_results
from spfcore.report.tables import COLUMNS, engine_summary, fmt, row

def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(paths: Sequence[str | os.PathLike], *, title: str = "spfcore gate results",
             page_dir: str | os.PathLike | None = None) -> str:
    """A markdown page for one or more results files (for ``docs/results.md``
    or ``results/gpu-h200/README.md``): per file, the exact command that
    reproduces it, the setup, the arms table, the simulator's ceilings and the
    verdict with every criterion. With ``page_dir`` (the folder the page will
    live in), the plots found beside each results file are linked from it.

    Raises:
        ResultsError: a file that :func:`read_results` rejects.
    """
    out = [f"# {title}", ""]
    for path in paths:
        r = read_results(path)
        cfg = r["config"]
        v = r["verdict"] or {}
        out += [f"## {cfg.get('workload_label') or Path(path).parent.name}", "",
                f"Results file: `{path}` (spfcore {r.get('spfcore_version')}, {r.get('created')}).", "",
                "Reproduce:", "", "```bash", cfg.get("command") or "(command not recorded)", "```", ""]
        setup = {k: cfg.get(k) for k in ("num_blocks", "block_size", "cache_pressure", "mode", "seeds", "arms")}
        eng = cfg.get("engine") or {}
        setup["model"] = eng.get("model")
        ver = cfg.get("versions") or {}
        out += ["Setup: " + ", ".join(f"{k} = {v_}" for k, v_ in setup.items() if v_ is not None)
                + ("; " + ", ".join(f"{k} {v_}" for k, v_ in ver.items()) if ver else "") + ".", ""]
        heads = ["arm", "seeds"] + [h for h, *_ in COLUMNS]
        rows = [[a, str(len(s.get("seeds", [])))] + row(s) for a, s in engine_summary(r).items()]
        out += [_md_table(heads, rows), ""]
        sim = r.get("sim") or {}
        if sim.get("summary"):
            srows = [[f"sim:{a}", fmt(s.get("token_hit_rate"), ".2%"), fmt(s.get("prefill_tokens_recomputed"), ",.0f")]
                     for a, s in sim["summary"].items()]
            srows += [[f"sim:{k}", fmt(s.get("token_hit_rate"), ".2%"), fmt(s.get("prefill_tokens_recomputed"), ",.0f")]
                      for k, s in sim.get("ceilings_summary", {}).items()]
            out += ["Simulator (same input, seed means):", "",
                    _md_table(["arm", "token hit rate", "prefill recomputed"], srows), ""]
        if v:
            out += [f"**Verdict: {v['status']}**", ""]
            crow = []
            for c in v["criteria"]:
                ci = c.get("ci")
                crow.append([c["name"], fmt(c["value"], "+.4f"), f"{c['op']} {c['threshold']:.4g}",
                             f"[{ci['low']:+.4f}, {ci['high']:+.4f}]" if ci else "-",
                             {True: "yes", False: "no", None: "-"}[c["passed"]], c["note"]])
            out += [_md_table(["criterion", "value", "threshold", "95% CI", "pass", "what"], crow), ""]
            out += [f"- {x}" for x in v.get("reasons", ())] + ([""] if v.get("reasons") else [])
        if page_dir is not None:
            for png in ("cache.png", "ttft_cdf.png"):
                f = Path(path).parent / png
                if f.exists():
                    out += [f"![{png}]({os.path.relpath(f, page_dir)})", ""]
    return "\n".join(out).rstrip() + "\n"


def _sim_section(runs: Sequence[tuple[str, Mapping]]) -> list[str]:
    """Arms x workloads tables from ``spfcore simulate --json`` outputs."""
    order = ["lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle"]
    arms: list[str] = []
    for _, r in runs:
        arms += [a for a in r["summary"] if not a.startswith("ceiling:") and a not in arms]
    arms.sort(key=lambda a: (order.index(a) if a in order else len(order), a))
    cols = arms + (["ceiling:belady"] if "belady_oracle" not in arms else []) + ["ceiling:infinite"]
    heads = ["workload"] + [c.replace("ceiling:", "") + (" (ceiling)" if c.startswith("ceiling:") else "") for c in cols]
    out = []
    for metric, spec, label in (("token_hit_rate", ".2%", "Token hit rate (higher is better)"),
                               ("prefill_tokens_recomputed", ",.0f", "Prefill tokens recomputed (lower is better)"),
                               ("block_hit_rate", ".4f", "Block hit rate (higher is better)")):
        rows = []
        for name, r in runs:
            line = [name]
            for c in cols:
                cell = r["summary"].get(c) or {}
                line.append("error" if cell.get("error") else fmt(cell.get(metric), spec))
            rows.append(line)
        out += [f"{label}; seed means:", "", _md_table(heads, rows), ""]
    out += ["Commands (each prints the JSON these rows come from):", ""]
    for name, r in runs:
        cache = r.get("cache", {})
        out += [f"- {name}: `{r.get('command', '(not recorded)')}` (block size {cache.get('block_size')}, "
                f"num_blocks {cache.get('num_blocks')}, seeds {r.get('seeds')})"]
    return out + [""]


def results_page(paths: Sequence[str | os.PathLike], *, title: str = "spfcore results",
                 include: Sequence[str | os.PathLike] = (), page_dir: str | os.PathLike | None = None) -> str:
    """One markdown page from ``spfcore simulate --json`` outputs (arms x
    workloads tables with the Belady and infinite-cache ceilings) and
    ``spfcore gate`` results files (one section per gate run, see
    :func:`markdown`; plots linked relative to ``page_dir`` when given). Every
    table names the command that reproduces it. Each ``include`` file (e.g. a
    benchmark's printed figures, the commands that ran it) follows verbatim in
    a code block under its file name; a ``.md`` file follows as markdown, as is.

    Raises:
        ResultsError: a file that is neither kind, or a bad gate results file.
    """
    sims, gates = [], []
    for p in dict.fromkeys(paths):  # a file named twice gets one section
        try:
            data = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ResultsError(f"{p}: {exc}") from None
        if isinstance(data, dict) and data.get("kind") == "spfcore-simulate":
            sims.append((Path(p).stem.removeprefix("sim-"), data))
        elif isinstance(data, dict) and "schema_version" in data:
            gates.append(p)
        else:
            raise ResultsError(f"{p}: neither a `spfcore simulate --json` output nor a gate results file")
    out = [f"# {title}", "", "Generated by `spfcore results-page`; do not edit by hand.", ""]
    if sims:
        out += ["## Simulator: arms x workloads", ""] + _sim_section(sims)
    if gates:
        body = markdown(gates, title="", page_dir=page_dir).splitlines()
        out += ["## Survival gate on the engine", ""] + [ln.replace("## ", "### ", 1) if ln.startswith("## ") else ln
                                                         for ln in body if ln != "# "]
    for p in include:
        try:
            text = Path(p).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ResultsError(f"{p}: {exc}") from None
        if Path(p).suffix == ".md":  # a markdown section (e.g. benchmarks/arms_table.py's tables), as is
            out += ([""] if out[-1] else []) + [text.rstrip("\n"), ""]
            continue
        out += ([""] if out[-1] else []) + [f"## {Path(p).name}", "", "```text", text.rstrip("\n"), "```", ""]
    return "\n".join(out).rstrip() + "\n"
