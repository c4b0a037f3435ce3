"""Is there more reuse signal in a block's features than spf's classes use?
An offline check, before building a learned (LRB-style) eviction policy.

LRB (Song et al., "Learning Relaxed Belady for Content Distribution Network
Caching", NSDI 2020) ranks cached objects by gradient-boosted trees over
inter-access deltas, counts and size. A model only helps if its features
predict the next access better than what a policy already uses. This script
measures that on the Mooncake conversation trace's *first half* (the tuning
part; requests ``[0, n/2)``, 512 tokens per block), with lightgbm trained on
its first 3,000 requests and scored on the rest:

* **access** samples: every stored prompt block reference (the partial last
  key of a prompt is never stored and is left out), features as at that
  access; label: the block is accessed again within ``H`` arrivals.
* **eviction** samples: 20 random blocks seen before, every second arrival,
  at their current age (1..4,096 arrivals since their latest access), the
  question an evictor asks; label: accessed again within ``H`` arrivals.

Feature sets: ``age`` alone (what LRU orders by; eviction samples only);
spf's classes (continuation or fresh request, depth, access count, mean
reuse gap; plus ``age`` on eviction samples: exactly the inputs of the
``utility`` index, see :mod:`spfcore_spf_expected_utility.utility`); that
set plus one request feature (blocks from the end of the prompt, prompt
blocks, new blocks, seen prefix, turn = earlier requests that shared the
chain's first two blocks, latest reuse gap); and every feature (LRB's
deltas 1-3, age since the first access). Printed: ROC AUC and log loss
(nats per sample) on the held-back requests. Prints figures; asserts nothing.

    pip install -e '.[bench]'   # lightgbm
    python benchmarks/reuse_signal.py [--horizon 500,1000] [--gaps ARMS] [--trace PATH]

First (``--gaps``) it prints which re-references each arm hits, by reuse gap
(what Belady keeps that spf evicts), on the same half at ``--num-blocks``.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms_table import TRACE  # noqa: E402

ACCESS = ["cont", "depth", "count", "meangap", "fromend", "plen", "nnew", "seen", "turn", "gap1", "gap2",
          "gap3", "age_first"]
EVICT = ACCESS + ["age"]
SPF_CLASSES = ["cont", "depth", "count", "meangap"]
EXTRA = ["fromend", "plen", "nnew", "seen", "turn", "gap1"]


def samples(views, horizon: int, seed: int = 0) -> dict:
    """``{"access": (X, y, t), "evict": (X, y, t)}``: feature rows (columns
    :data:`ACCESS` / :data:`EVICT`), labels (next access within ``horizon``
    arrivals) and the arrival each sample was taken at."""
    refs = defaultdict(list)
    for i, v in enumerate(views):
        for k in v.block_keys:
            refs[k].append(i)

    def reused(k, i):
        r = refs[k]
        j = np.searchsorted(r, i, side="right")
        return j < len(r) and r[j] - i <= horizon

    rng = np.random.default_rng(seed)
    acc, feat, live = defaultdict(list), {}, []
    out = {"access": ([], [], []), "evict": ([], [], [])}
    for i, v in enumerate(views):
        keys = v.block_keys
        n = len(keys)
        seen = next((d for d, k in enumerate(keys) if not acc[k]), n)
        turn = len(acc[keys[1] if n > 1 else keys[0]])
        for d, k in enumerate(keys[:-1]):  # the partial last key is never stored
            a = acc[k]
            if not a:
                live.append(k)
            a.append(i)
            c = len(a)
            gaps = [a[-j] - a[-j - 1] if c > j else np.nan for j in (1, 2, 3)]
            f = [int(seen > 1), d, c, (a[-1] - a[0]) / (c - 1) if c > 1 else np.nan, n - 1 - d, n, n - seen,
                 seen, turn, *gaps]
            feat[k] = (f, a[0])
            for col, x in zip(out["access"], (f + [i - a[0]], reused(k, i), i)):
                col.append(x)
        if i % 2 == 0 and live:
            for j in rng.choice(len(live), 20).tolist():
                k = live[j]
                f, first = feat[k]
                age = i - acc[k][-1]
                if 0 < age <= 4096:
                    for col, x in zip(out["evict"], (f + [i - first, age], reused(k, i), i)):
                        col.append(x)
    return {p: (np.array(X, float), np.array(y, bool), np.array(t)) for p, (X, y, t) in out.items()}


def hits_by_gap(prep, arms: list[str], num_blocks: int) -> None:
    """``prep``: a :func:`spfcore.sim.prepare` result at 512 tokens per block.
    Print, per octave of reuse gap (arrivals since the block's latest
    access), the re-references past depth 0 and how many each arm hits
    (simulator, sequential, from an empty cache; a request hits a prefix of
    its blocks)."""
    from spfcore.sim.simulator import simulate_stream
    hit = {}
    for arm in arms:
        r = simulate_stream(tuple(prep.workload.requests), arm, num_blocks=num_blocks, block_size=512, per_request=True)
        hit[arm] = [q["cached_tokens"] // 512 for q in r["requests"]]
    last, rows = {}, defaultdict(lambda: [0] * (1 + len(arms)))
    for i, v in enumerate(prep.views):
        for d, k in enumerate(v.block_keys):
            if d and k in last:
                row = rows[(i - last[k]).bit_length() - 1]
                row[0] += 1
                for j, arm in enumerate(arms):
                    row[1 + j] += d < hit[arm][i]
            last[k] = i
    print(f"\nre-references past depth 0 by reuse gap, {num_blocks} blocks; hits per arm")
    print(f"{'gap (arrivals)':<16}{'refs':>8}" + "".join(f"{a:>22}" for a in arms))
    for g in sorted(rows):
        print(f"{2 ** g:>6}-{2 ** (g + 1) - 1:<9}" + "".join(f"{x:>8}" if j == 0 else f"{x:>22}"
                                                       for j, x in enumerate(rows[g])))
    tot = [sum(r[j] for r in rows.values()) for j in range(1 + len(arms))]
    print(f"{'all':<16}" + "".join(f"{x:>8}" if j == 0 else f"{x:>22}" for j, x in enumerate(tot)))


def auc(score: np.ndarray, y: np.ndarray) -> float:
    """ROC AUC (Mann-Whitney U over ranks; ties broken by order)."""
    r = np.empty(len(score))
    r[np.argsort(score, kind="stable")] = np.arange(1, len(score) + 1)
    n1 = int(y.sum())
    return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * (len(y) - n1)))


def fit(X, y, t, names, cols, split: int, end: int) -> tuple[float, float]:
    """(AUC, log loss) of lightgbm on ``cols``: trained on samples before
    arrival ``split``, scored on ``[split, end)``; seeded, one thread."""
    import lightgbm as lgb
    idx = [names.index(c) for c in cols]
    tr, te = t < split, (t >= split) & (t < end)
    m = lgb.train(dict(objective="binary", num_leaves=31, learning_rate=0.1, verbose=-1, seed=0,
                       deterministic=True, num_threads=1), lgb.Dataset(X[tr][:, idx], y[tr].astype(float)), 100)
    p = np.clip(m.predict(X[te][:, idx]), 1e-9, 1 - 1e-9)
    ll = -np.mean(np.where(y[te], np.log(p), np.log(1 - p)))
    return auc(p, y[te]), float(ll)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(TRACE.resolve()))
    ap.add_argument("--horizon", default="500,1000", help="label horizons, arrivals (comma list)")
    ap.add_argument("--split", type=int, default=3000, help="train on samples before this arrival")
    ap.add_argument("--gaps", default="lru,spf_expected_utility,belady_oracle",
                    help="arms whose hits per reuse gap are printed first ('' = none)")
    ap.add_argument("--num-blocks", type=int, default=9140, help="cache for --gaps, blocks of 512 tokens")
    a = ap.parse_args(argv)
    from spfcore.sim.simulator import prepare
    from spfcore.workloads.model import Workload
    from spfcore.workloads.traces import read_trace
    wl = read_trace(a.trace)
    half = wl.requests[:len(wl.requests) // 2]
    prep = prepare(Workload(f"{wl.name}-1st", wl.params, half), 512)
    views = prep.views
    if a.gaps:
        hits_by_gap(prep, a.gaps.split(","), a.num_blocks)
    for h in (int(x) for x in a.horizon.split(",")):
        for part, (X, y, t) in samples(views, h).items():
            names = ACCESS if part == "access" else EVICT
            base = SPF_CLASSES + (["age"] if part == "evict" else [])
            sets = ([("age only (LRU's order)", ["age"])] if part == "evict" else []) + \
                [("spf's class inputs" + (" + age" if part == "evict" else ""), base)] + \
                [(f"  + {e}", base + [e]) for e in EXTRA] + [("every feature (LRB-style)", names)]
            print(f"\n{part} samples, horizon {h} arrivals: {len(y)} samples, {y.mean():.1%} reused in time")
            print(f"{'features':<34}{'AUC':>8}{'log loss':>10}")
            for label, cols in sets:
                s, ll = fit(X, y, t, names, cols, a.split, len(views) - h)
                print(f"{label:<34}{s:>8.4f}{ll:>10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
