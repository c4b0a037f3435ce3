import sys, os
sys.path.insert(0, os.getcwd() + "/benchmarks")
import bench_sim as B
from spfcore.sim import prepare
from spfcore.workloads.traces import read_mooncake
from spfcore import evictor as E
n = int(sys.argv[1])
prep = prepare(read_mooncake(B.TRACE, limit=n) if n else read_mooncake(B.TRACE), 512)
sizes = []
rc = E.Evictor._compact
def comp(self):
    sizes.append((len(self._lru), self._ins - len(self._lru))); return rc(self)
E.Evictor._compact = comp
B.run(prep, "floor-observe", 9140)
print(len(sizes), "compactions; live sizes min/avg/max", min(s for s, _ in sizes), sum(s for s, _ in sizes) / len(sizes), max(s for s, _ in sizes), "dead at compaction avg", sum(d for _, d in sizes)/len(sizes))
