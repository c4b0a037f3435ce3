import random, timeit
from collections import Counter
from itertools import compress, repeat
random.seed(1)
allk = [random.getrandbits(128) for _ in range(20000)]
count = Counter({k: 1 for k in allk[:3561]})
ghost = {k: 2 for k in allk[3561:3561+14244]}
keys = list(ghost)[:520]
moved = set()
def run():
    g = dict(ghost); c = Counter(count); m = set()
    t0 = timeit.default_timer()
    a = g.keys().isdisjoint(keys)
    t1 = timeit.default_timer()
    b = c.keys().isdisjoint(keys)
    t2 = timeit.default_timer()
    back = list(map(g.pop, keys, repeat(0)))
    t3 = timeit.default_timer()
    m.update(compress(keys, back))
    t4 = timeit.default_timer()
    dict.update(c, zip(keys, map((1).__add__, back)))
    t5 = timeit.default_timer()
    return [t1-t0, t2-t1, t3-t2, t4-t3, t5-t4]
import statistics
rs = [run() for _ in range(200)]
for i, name in enumerate(["ghost.isdisjoint", "count.isdisjoint", "ghost.pop map", "moved.update", "count update"]):
    print(f"{name:<20} {statistics.median(r[i] for r in rs)*1e6:7.1f} us")
