"""Per-hook timers (process CPU time) and batch sizes for one arm on the seed's full-scale workload.

    python prof_hooks.py ARM [ROUNDS]
"""
import collections
import sys
import time

from spfcore import registry, runtime
from spfcore.sim import prepare, simulate
from spfcore.sim.simulator import REPLAY_ENV
from spfcore.workloads.generators import make
import os

os.environ[REPLAY_ENV] = "python"
runtime._perf = time.process_time
arm = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
wl = make("personas", seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4,
          query_tokens=128, output_tokens=32, order="round_robin")
prep = prepare(wl, 16)
n = len(wl.requests)
cls = registry.load(arm) if hasattr(registry, "load") else None
import importlib
mod = {"belady_oracle": "spfcore_belady_oracle", "frequency": "spfcore_frequency"}[arm]
m = importlib.import_module(mod)
P = [getattr(m, c) for c in dir(m) if c.endswith("Policy")][0]
stats = collections.defaultdict(lambda: [0.0, 0, 0])
pc = time.perf_counter
for name in [a for a in dir(P) if a.startswith("spfcore_")]:
    f = getattr(P, name)
    def wrap(f=f, name=name):
        def g(self, *a, **kw):
            t = pc()
            try:
                return f(self, *a, **kw)
            finally:
                s = stats[name]
                s[0] += pc() - t
                s[1] += 1
                for x in list(a) + list(kw.values()):
                    if hasattr(x, "__len__") and not isinstance(x, str):
                        try:
                            s[2] += len(x)
                        except Exception:
                            pass
                        break
        g.__wrapped__ = f
        g.spfcore_impl = getattr(f, "spfcore_impl", None)
        return g
    w = wrap()
    for attr in dir(f):
        if attr.startswith("spfcore"):
            setattr(w, attr, getattr(f, attr))
    setattr(P, name, w)
best = None
for r in range(rounds):
    stats.clear()
    rec = simulate(prep, arm, num_blocks=3561, block_size=16)
    tot = rec["policy_seconds"] / n * 1e6
    if best is None or tot < best[0]:
        best = (tot, dict((k, list(v)) for k, v in stats.items()), rec["hook_seconds"] / n * 1e6)
tot, st, hk = best
print(f"{arm}: policy us/req {tot:.1f}, hooks us/req {hk:.1f}")
for k, (s, c, items) in sorted(st.items(), key=lambda kv: -kv[1][0]):
    print(f"  {k:<28} {s / n * 1e6:8.1f} us/req  calls {c:6d}  items/call {items / max(c, 1):7.1f}")
