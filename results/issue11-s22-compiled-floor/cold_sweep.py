"""Cold-cache sweep for floor.py's variants A, B and B2: MiB written (untimed) before each request of the seed's
stream; CPU time of this process, us per request, 3 passes of B and B2 and 2 of A per size.

    /work/main/.venv/bin/python results/issue11-s22-compiled-floor/cold_sweep.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import floor as F  # noqa: E402

stream, nreq, rec, nk = F.record_stream()
hits = F.hit_hashes(stream)
F.run_b(stream, hits)  # compile
F.run_b2(stream)
for mb in (0, 1, 4, 16, 64):
    buf = np.zeros(max(mb << 20, 64), np.uint8)
    b = [F.run_b(stream, hits, thrash=buf)[0][1] / nreq * 1e6 for _ in range(3)]
    b2 = [F.run_b2(stream, thrash=buf)[0][1] / nreq * 1e6 for _ in range(3)]
    a = [F.run_a(stream, thrash=buf)[0][1] / nreq * 1e6 for _ in range(2)]
    print(f"{mb:3d} MiB: CPU us/req  A {[round(x) for x in a]}  B {[round(x) for x in b]}  B2 {[round(x) for x in b2]}",
          flush=True)
