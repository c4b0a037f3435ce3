"""Terminal tables (rich) of results documents and load-level runs."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rich.console import Console
from rich.table import Table

from spfcore.report.results import summarize

def make_console() -> Console:
    """A rich Console for tables: the terminal's width, or 200 columns when
    output is piped or captured (so tables are not cut to 80 columns)."""
    console = Console()
    return console if console.is_terminal else Console(width=200)

#: Per-cell numeric fields averaged over seeds in a summary.
def fmt(x, spec: str, scale: float = 1.0) -> str:
    """``x * scale`` formatted by ``spec``; ``-`` for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x * scale, spec)


#: (column header, summary field, format, scale)
COLUMNS = (("hit", "token_hit_rate", ".2%", 1), ("prefill recomputed", "prefill_tokens_recomputed", ",.0f", 1),
           ("TTFT p50 ms", "ttft_p50_s", ".1f", 1e3), ("p95 ms", "ttft_p95_s", ".1f", 1e3),
           ("p99 ms", "ttft_p99_s", ".1f", 1e3), ("mean ms", "ttft_mean_s", ".1f", 1e3),
           ("hit/miss mean ms", None, "", 1), ("e2e p95 ms", "e2e_p95_s", ".1f", 1e3),
           ("rps", "throughput_rps", ".3f", 1), ("evict µs/alloc", "evict_us_per_alloc", ".1f", 1),
           ("hooks ms/req", "hook_ms_per_request", ".2f", 1),
           ("policy ms/req", "policy_ms_per_request", ".2f", 1), ("hints used/issued", None, "", 1))


def row(s: Mapping) -> list[str]:
    """One arm's summary ``s`` as the texts of :data:`COLUMNS`."""
    out = []
    for head, field, spec, scale in COLUMNS:
        if field is not None:
            out.append(fmt(s.get(field), spec, scale))
        elif head == "hit/miss mean ms":
            out.append(f"{fmt(s.get('ttft_mean_hit_s'), '.1f', 1e3)}/{fmt(s.get('ttft_mean_miss_s'), '.1f', 1e3)}")
        else:
            out.append(f"{fmt(s.get('hints_used'), '.0f')}/{fmt(s.get('hints_issued'), '.0f')}")
    return out


def engine_summary(results: Mapping) -> dict[str, dict]:
    """Per-arm engine summary of a gate results mapping, recomputed from its
    cells with :func:`summarize` (so a file written by an older spfcore shows
    every current field); the stored ``summary`` when there are no cells."""
    return summarize(results["cells"]) if results.get("cells") else dict(results.get("summary", {}))


def table(results: Mapping) -> Table:
    """A rich table: one row per engine arm (seed means), then the simulator's
    arms and its Belady and infinite-cache ceilings (token hit rate, prefill).
    Engine rows are summarized from the cells (:func:`summarize`), so a file
    written by an older spfcore shows every current column."""
    cfg = results.get("config", {})
    t = Table(title=f"spfcore gate: {cfg.get('workload_label', '')}".strip(), show_lines=False)
    t.add_column("arm")
    t.add_column("seeds", justify="right")
    for head, *_ in COLUMNS:
        t.add_column(head, justify="right")
    for arm, s in engine_summary(results).items():
        if not s.get("seeds") and s.get("errors"):
            t.add_row(arm, "0", f"[red]failed: {s['errors'][0]}[/red]", *[""] * (len(COLUMNS) - 1))
            continue
        name = arm if not s.get("errors") else f"{arm} [red](errors)[/red]"
        t.add_row(name, str(len(s.get("seeds", []))), *row(s))
    sim = results.get("sim") or {}
    if sim.get("summary"):
        t.add_section()
        for arm, s in sim["summary"].items():
            t.add_row(f"sim:{arm}", str(len(s.get("seeds", []))), fmt(s.get("token_hit_rate"), ".2%"),
                      fmt(s.get("prefill_tokens_recomputed"), ",.0f"), *[""] * (len(COLUMNS) - 2))
        for kind, s in sim.get("ceilings_summary", {}).items():
            t.add_row(f"sim:{kind}", "", fmt(s.get("token_hit_rate"), ".2%"),
                      fmt(s.get("prefill_tokens_recomputed"), ",.0f"), *[""] * (len(COLUMNS) - 2))
    return t


def tier_table(results: Mapping) -> Table | None:
    """A rich table of a run with a CPU tier (``config.cpu_blocks``), one row
    per arm, seed means: the engine's prompt tokens hit on the GPU, loaded
    from the tier and recomputed, its TTFT mean and p95; the simulator's
    loaded and recomputed tokens and estimated TTFT (``tier_cost``); whether
    engine and simulator agree on every request's GPU and CPU hit
    (:func:`spfcore.run.cell.tier_agreement`, first pass); for an arm with
    prefetch hints, the simulator with ahead-of-arrival promotion
    (recomputed, promoted blocks used/wasted). ``None`` without a tier."""
    from spfcore.run.cell import tier_agreement

    cfg = results.get("config", {})
    if cfg.get("cpu_blocks") is None:
        return None
    t = Table(title=f"CPU tier: {cfg['cpu_blocks']} blocks ({cfg.get('cpu_ratio', 0):g}x the GPU's usable blocks); "
                    f"lru = vLLM's own tier order; simulator cost model {cfg.get('tier_cost')}")
    for head in ("arm", "seeds", "GPU hit tok", "loaded tok", "recomputed tok", "TTFT mean ms", "p95 ms",
                 "sim loaded", "sim recomputed", "sim TTFT ms", "agree", "sim+promote recomputed",
                 "promoted used/wasted"):
        t.add_column(head, justify="left" if head == "arm" else "right")
    sim = results.get("sim") or {}
    sim_sum = sim.get("summary") or {}
    sim_cells = {(c.get("arm"), c.get("seed")): c for c in sim.get("cells", ()) if not c.get("error")}
    for arm, s in engine_summary(results).items():
        if not s.get("seeds"):
            continue
        ss = sim_sum.get(arm) or {}
        agree = [tier_agreement(c, sim_cells.get((arm, c.get("seed")), {})) for c in results.get("cells", ())
                 if c.get("arm") == arm and not c.get("error") and not c.get("repeat")]
        agree_s = "-" if not agree or None in agree else f"{sum(agree)}/{len(agree)}"
        pro = [sim_cells[arm, sd]["sim_promote"] for sd in s["seeds"]
               if "sim_promote" in sim_cells.get((arm, sd), {})]
        pro_rec = fmt(sum(p["prefill_tokens_recomputed"] for p in pro) / len(pro), ",.0f") if pro else "-"
        pro_uw = (f"{sum(p['promoted_used'] for p in pro) / len(pro):.0f}/"
                  f"{sum(p['promoted_wasted'] for p in pro) / len(pro):.0f}") if pro else "-"
        t.add_row(arm, str(len(s["seeds"])), fmt(s.get("gpu_hit_tokens"), ",.0f"), fmt(s.get("cpu_hit_tokens"), ",.0f"),
                  fmt(s.get("prefill_tokens_recomputed"), ",.0f"), fmt(s.get("ttft_mean_s"), ".1f", 1e3),
                  fmt(s.get("ttft_p95_s"), ".1f", 1e3), fmt(ss.get("cpu_hit_tokens"), ",.0f"),
                  fmt(ss.get("prefill_tokens_recomputed"), ",.0f"), fmt(ss.get("ttft_mean_s"), ".1f", 1e3),
                  agree_s, pro_rec, pro_uw)
    return t


def _straddles(c: Mapping) -> bool:
    """Whether criterion ``c``'s finite 95% interval contains its threshold: in a
    settled verdict its point estimate then decides nothing (the "pass" column says
    "unsettled", with the point estimate's answer in brackets)."""
    ci = c.get("ci")
    if not ci or c.get("passed") is None or not all(math.isfinite(ci[k]) for k in ("low", "high")):
        return False
    ok = {">=": lambda x: x >= c["threshold"], ">": lambda x: x > c["threshold"],
          "<": lambda x: x < c["threshold"], "<=": lambda x: x <= c["threshold"]}.get(c["op"])
    return ok is not None and ok(ci["low"]) != ok(ci["high"])


def verdict_table(verdict: Mapping) -> Table:
    """A rich table of the verdict: one row per criterion (value, threshold, CI, pass)."""
    color = {"SURVIVES": "green", "FAILS": "red"}.get(verdict["status"], "yellow")
    how = ""
    if verdict.get("settled"):
        how = (f" (settled rule: a criterion decides only when its 95% CI lies on one side of its threshold; "
               f"{verdict.get('passes', 1)} pass(es) per seed)")
    t = Table(title=f"verdict: [{color}]{verdict['status']}[/{color}]{how}")
    for col in ("criterion", "value", "threshold", "95% CI", "pass", "what"):
        t.add_column(col)
    for c in verdict["criteria"]:
        ci = c.get("ci")
        ci_s = f"[{ci['low']:+.4f}, {ci['high']:+.4f}] ({ci['method']})" if ci else "-"
        p = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "-"}[c["passed"]]
        if verdict.get("settled") and _straddles(c):
            p = f"[yellow]unsettled[/yellow] ({'yes' if c['passed'] else 'no'})"
        t.add_row(c["name"], fmt(c["value"], "+.4f"), f"{c['op']} {c['threshold']:.4g}", ci_s, p, c["note"])
    if verdict.get("info"):
        t.add_section()
        for c in verdict["info"]:  # shown beside the rule, not in it (its CI too: policy_cost's can decide)
            ci = c.get("ci")
            ci_s = f"[{ci['low']:+.4f}, {ci['high']:+.4f}] ({ci['method']})" if ci else "-"
            t.add_row(c["name"], fmt(c["value"], "+.4f"), f"({c['op']} {c['threshold']:.4g})", ci_s, "info", c["note"])
    return t


def print_report(results: Mapping, console: Console | None = None) -> None:
    """Print the arms table, the verdict table and the verdict's reasons."""
    console = console or make_console()
    console.print(table(results))
    tt = tier_table(results)
    if tt is not None:
        console.print(tt)
    v = results.get("verdict")
    if v:
        console.print(verdict_table(v))
        console.print("  rule: SURVIVES iff (ttft_p95_improvement OR prefill_reduction) AND throughput_regression "
                      "AND wasted_hints pass, with >= min_seeds seeds; headroom and harness must pass first",
                      markup=False)
        for r in v.get("reasons", ()):
            console.print(f"  - {r}", markup=False)




def load_table(doc: Mapping) -> Table:
    """A rich table of a load-level run (:func:`spfcore.run.pipeline.run_load_gate`):
    one row per level and arm."""
    slo = doc.get("ttft_slo_s")
    t = Table(title=f"spfcore gate under load: capacity {doc['capacity_rps']:.3f} req/s "
                    f"({'measured on ' + doc['config']['roles']['floor'] if doc.get('capacity_measured') else 'given'}),"
                    f" Poisson arrivals")
    cols = [("load", None), ("req/s", None), ("arm", None), ("TTFT p50 ms", "ttft_p50_s"), ("p95 ms", "ttft_p95_s"),
            ("p99 ms", "ttft_p99_s"), ("queue p95 ms", "queue_p95_s"), ("e2e p95 ms", "e2e_p95_s"),
            ("prefill recomputed", "prefill_tokens_recomputed"), ("hit", "token_hit_rate"),
            ("sim hit", "sim_token_hit_rate"), ("preempt", "preemptions")]
    if slo is not None:
        cols.append((f"goodput@{slo * 1e3:g}ms req/s", "goodput_rps"))
    for head, _ in cols:
        t.add_column(head, justify="right")
    for lv in doc["levels"]:
        t.add_section()
        for arm, s in lv["summary"].items():
            row = [f"{lv['load']:g}" + (" *" if lv["load"] == doc.get("judged_load") else ""),
                   f"{lv['rate_rps']:.3f}", arm]
            for head, f in cols[3:]:
                v = s.get(f)
                if f.endswith("_s"):
                    row.append(fmt(v, ".1f", 1e3))
                elif f in ("token_hit_rate", "sim_token_hit_rate"):
                    row.append(fmt(v, ".2%"))
                elif f == "goodput_rps":
                    row.append(fmt(v, ".3f"))
                else:
                    row.append(fmt(v, ",.0f"))
            t.add_row(*row)
    return t
