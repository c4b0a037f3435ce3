"""PNG plots (matplotlib, Agg backend) of results documents and load-level runs,
written atomically."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from spfcore.fileio import open_atomic

def savefig_atomic(fig, path: Path) -> None:
    """Save a matplotlib figure as PNG (110 dpi) to ``path`` through
    :func:`spfcore.fileio.open_atomic`: a killed run leaves the old picture or
    none, never half of one; the usual permissions, not 0600."""
    with open_atomic(path, "wb") as f:
        fig.savefig(f, dpi=110, format="png")


def ttft_title(results: Mapping) -> str:
    """The title of ``ttft_cdf.png``: the workload label, the load (one
    request at a time, or the arrival process and its rate, req/s) and the
    seeds of the cells."""
    cfg = results.get("config", {})
    seeds = sorted({c.get("seed") for c in results.get("cells", ()) if c.get("seed") is not None})
    flags = cfg.get("workload_flags") or {}
    if cfg.get("mode") != "timed":
        level = "one request at a time"
    elif flags.get("arrival") in ("poisson", "rate"):
        level = f"{flags['arrival']} arrivals at {float(flags.get('rate', 0)):.4g} req/s"
    else:
        level = "the workload's arrival times"
    return (f"TTFT CDF: {cfg.get('workload_label', cfg.get('workload', ''))}; load: {level}; "
            f"seeds {', '.join(map(str, seeds))}")


def plot_results(results: Mapping, outdir: str | os.PathLike) -> list[Path]:
    """Write PNG plots beside the results (matplotlib, Agg backend):

    * ``cache.png``: per arm, prefill tokens recomputed and token hit rate
      (engine seed means, simulator beside them) with the simulator's Belady
      ceiling and infinite cache marked as horizontal lines;
    * ``ttft_cdf.png``: the TTFT CDF per arm (requests of every seed and
      repeat pooled) on a log time axis (TTFTs of hits and misses differ by
      orders of magnitude), titled with the workload, the load level and
      the seeds, when the cells carry per-request TTFTs.

    Returns:
        Paths written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    eng = results.get("summary", {}) or {}
    sim = results.get("sim") or {}
    sim_sum, ceil = sim.get("summary", {}) or {}, sim.get("ceilings_summary", {}) or {}
    arms = list(dict.fromkeys([*eng, *sim_sum]))
    if arms:
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(arms) + 4), 4.5))
        x = np.arange(len(arms))
        for ax, field, label, scale in ((axes[0], "prefill_tokens_recomputed", "prefill tokens recomputed", 1),
                                        (axes[1], "token_hit_rate", "token hit rate (%)", 100)):
            def vals(src):
                return [np.nan if (src.get(a, {}).get(field) is None) else src[a][field] * scale for a in arms]
            ax.bar(x - 0.2, vals(eng), 0.4, label="engine (seed mean)")
            ax.bar(x + 0.2, vals(sim_sum), 0.4, label="simulator", alpha=0.6)
            for kind, style in (("belady", "--"), ("infinite", ":")):
                if ceil.get(kind, {}).get(field) is not None:
                    ax.axhline(ceil[kind][field] * scale, color="k", linestyle=style, label=f"{kind} (sim)")
            ax.set_xticks(x, arms, rotation=20, ha="right")
            ax.set_ylabel(label)
            ax.legend(fontsize=8)
        fig.suptitle(textwrap.fill(results.get("config", {}).get("workload_label", "spfcore gate"), 110),
                     fontsize=9)
        fig.tight_layout()
        p = outdir / "cache.png"
        savefig_atomic(fig, p)
        plt.close(fig)
        paths.append(p)
    ttfts: dict[str, list] = {}
    for c in results.get("cells", ()):
        for r in c.get("requests") or ():
            if r.get("ttft_s") is not None:
                ttfts.setdefault(c["arm"], []).append(r["ttft_s"])
    if ttfts:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for arm, v in ttfts.items():
            v = np.sort(np.asarray(v)) * 1e3
            ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=arm)
        ax.set_xscale("log")
        ax.set_xlabel("TTFT (ms, log scale)")
        ax.set_ylabel("share of requests")
        ax.set_title(textwrap.fill(ttft_title(results), 90), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = outdir / "ttft_cdf.png"
        savefig_atomic(fig, p)
        plt.close(fig)
        paths.append(p)
    return paths


def plot_load(doc: Mapping, outdir: str | os.PathLike) -> Path | None:
    """``ttft_p95_vs_load.png``: p95 TTFT (ms, seed means) against offered
    load (requests/s), one line per arm, the judged level marked. Returns the
    path, or None with no level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = doc.get("levels") or []
    if not levels:
        return None
    arms = list(dict.fromkeys(a for lv in levels for a in lv["summary"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm in arms:
        pts = [(lv["rate_rps"], lv["summary"][arm]["ttft_p95_s"] * 1e3) for lv in levels
               if (lv["summary"].get(arm) or {}).get("ttft_p95_s") is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=arm)
    j = doc.get("judged_load")
    if j is not None:
        ax.axvline(j * doc["capacity_rps"], color="k", linestyle=":", label=f"judged: {j:g} x capacity")
    ax.set_xlabel(f"offered load (requests/s; capacity {doc['capacity_rps']:.3g})")
    ax.set_ylabel("p95 TTFT (ms)")
    ys = [y for line in ax.get_lines() for y in line.get_ydata()]
    if ys and min(ys) > 0 and max(ys) / min(ys) > 10:  # near capacity p95 grows by orders of magnitude
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    seeds = ", ".join(map(str, doc.get("config", {}).get("seeds", ())))
    ax.set_title(f"p95 TTFT vs offered load, Poisson arrivals; seeds {seeds}", fontsize=9)
    fig.tight_layout()
    outdir = Path(outdir)
    p = outdir / "ttft_p95_vs_load.png"
    savefig_atomic(fig, p)
    plt.close(fig)
    return p
