"""Every arm's decisions on three workloads, as one JSON digest per (workload,
arm): hit counts and a SHA-256 of the victim sequence (every block id
``PolicyRuntime.evict`` hands out, in order). Run it on two trees and compare
the files: identical decisions give identical files (issue 11: speed work must
not change a decision). The compiled replays (``lru``, ``belady_oracle``, ``frequency``) run
as ``simulate`` chooses (``SPFCORE_SIM_REPLAY``), its victims recorded too.

    PYTHONPATH=<tree>:<its plugins> python benchmarks/decision_digest.py out.json [--trace-requests 3000]

Workloads: the seed's personas at full scale (16 x 8192 tokens, block size 16,
3,561 blocks), the held-out ``mix`` shape (block size 16, pressure 2.3), and
the first ``--trace-requests`` requests of the Mooncake conversation trace
(512-token blocks, 9,140 blocks).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from spfcore import registry, runtime
from spfcore.sim import prepare, simulate, simulator
from spfcore.workloads.generators import make
from spfcore.workloads.traces import read_mooncake

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--arms", default=None)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--trace-requests", type=int, default=3000)
    a = ap.parse_args()
    victims: list[int] = []
    evict = runtime.PolicyRuntime.evict

    def recording(self, n, now):
        ids = evict(self, n, now)
        victims.extend(ids)
        return ids
    runtime.PolicyRuntime.evict = recording
    replay = getattr(simulator, "_replay_compiled", None)  # a tree with compiled replays (lru, belady_oracle, ...)
    if replay is not None:  # it hands its victims out without PolicyRuntime.evict: record them there
        simulator._replay_compiled = lambda *args, **kw: replay(*args, victims=victims, **kw)

    seed = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128,
                output_tokens=32, order="round_robin")
    mix = make("mix", seed=7)
    trace = read_mooncake(a.trace, limit=a.trace_requests)
    works = [("personas-full", prepare(seed, 16), 3561, 16), ("mix", prepare(mix, 16), None, 16),
             ("mooncake", prepare(trace, 512), 9140, 512)]
    arms = a.arms.split(",") if a.arms else [p.name for p in registry.discover() if p.status == "ok"]
    out = {}
    for name, prep, nb, bs in works:
        if nb is None:  # pressure 2.3: the distinct blocks / 2.3
            nb = max(16, int(len({k for v in prep.views for k in v.block_keys}) / 2.3))
        for arm in arms:
            victims.clear()
            rec = simulate(prep, arm, num_blocks=nb, block_size=bs)
            out[f"{name}/{arm}"] = {
                "num_blocks": nb, "hit_blocks": rec.get("hit_blocks"), "block_hit_rate": rec["block_hit_rate"],
                "token_hit_rate": rec.get("token_hit_rate"), "evictions": rec["evictions"],
                "victims": len(victims), "victims_sha256": hashlib.sha256(repr(victims).encode()).hexdigest()}
            print(name, arm, out[f"{name}/{arm}"]["block_hit_rate"], out[f"{name}/{arm}"]["victims_sha256"][:12],
                  flush=True)
    a.out.write_text(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
