import time, numpy as np
exec(open('/tmp/bel_score.py').read().split("print(\"n\", n)")[0])
import spfcore_belady_oracle as B
kid, dist = p._kid, p._dist
ids = p._ids(keys)
print(ids[:12], ids[-3:])
d = [kid.get(k, 0) for k in keys]
j = 9; k = d[j]
print("same objs", sum(keys[i] is dist[d[i]-1] for i in range(n) if d[i]))
print("run 512 gallop16", t(lambda: B._run(keys, j, k - 1, min(n - j, k), dist, -1)))
sl = dist[k-1-511:k][::-1]
print("one compare 512", t(lambda: keys[j:j+512] == dist[k-1:(k-1-512 if k-1-512>=0 else None):-1]))
print("slices only", t(lambda: (keys[j:j+512], dist[k-1:(k-1-512 if k-1-512>=0 else None):-1])))
