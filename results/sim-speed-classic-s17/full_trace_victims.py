"""The whole Mooncake conversation trace through each classic arm's compiled
replay and through its hooks (SPFCORE_SIM_REPLAY=python), at the given cache
sizes: every field of the cell (timings aside) and the whole victim sequence
compared. Prints one line per (arm, size): victims, hit rate, same or not, and
the two replays' wall seconds (one run each: a correctness check, not a speed
figure; bench_sim.py gives those).

    PYTHONPATH=. .venv/bin/python results/sim-speed-classic-s17/full_trace_victims.py [--sizes 9140,2000]
"""
import argparse
import hashlib
import sys
import time
from pathlib import Path

from _pytest.monkeypatch import MonkeyPatch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.test_sim_compiled import TRACE, compiled, reference, strip  # noqa: E402

from spfcore.sim import prepare  # noqa: E402
from spfcore.workloads.traces import read_mooncake  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--arms", default="sieve,twoq,s3fifo,arc,lirs,gdsf")
ap.add_argument("--sizes", default="9140,2000")
a = ap.parse_args()
wl = read_mooncake(TRACE)
prep = prepare(wl, 512)
bad = 0
for arm in a.arms.split(","):
    for nb in map(int, a.sizes.split(",")):
        mp = MonkeyPatch()
        try:
            t0 = time.perf_counter()
            ref, rv = reference(mp, prep, nb, 512, arm)
            t1 = time.perf_counter()
            got, gv = compiled(mp, prep, nb, 512, arm)
            t2 = time.perf_counter()
        finally:
            mp.undo()
        same = strip(got) == strip(ref) and gv == rv
        bad += not same
        print(f"{arm:7s} {nb:6d} blocks: {len(rv):7d} victims sha256 {hashlib.sha256(str(rv).encode()).hexdigest()[:12]}"
              f" hit rate {ref['token_hit_rate']:.4f} {'IDENTICAL' if same else 'DIFFERENT'}"
              f"  hooks {t1 - t0:6.2f} s  compiled {t2 - t1:6.2f} s", flush=True)
sys.exit(1 if bad else 0)
