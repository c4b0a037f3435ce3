"""Why s3fifo's walk passes blocks: per walked queue, how many items a walk passes over that are not free
(in use) or that have cached children, and how often the same block is passed again. Usage (PYTHONPATH = a tree):
python instr_skip.py TRACE POLICY BLOCKS"""
import collections, runpy, sys
from spfcore_classic import _base
st = collections.Counter()
passes = collections.Counter()
P = _base.ClassicPolicy
def walk(self, order):
    st['walk'] += 1
    name = 'small' if order is getattr(self, 'small', None) else 'main' if order is getattr(self, 'main', None) else 'other'
    free, kids, key = self._free, self.kids, self.key
    for i in order:
        if i in free and not kids.get(key[i]):
            break
        st[name + (':busy' if i not in free else ':kids')] += 1
        passes[(i, key[i])] += 1
    return w(self, order)
w = P.walk
P.walk = walk
sys.argv = ['bench', sys.argv[1], '--policies', sys.argv[2], '--num-blocks', sys.argv[3], '--folder',
            '/tmp/19e/prep-' + sys.argv[1].split('/')[-1][:-6]]
runpy.run_path(sys.argv[0].replace('instr_skip.py', '') + '../../benchmarks/bench_scale_cells.py', run_name='__main__')
print(dict(st))
h = collections.Counter(passes.values())
import statistics
vals = sorted(passes.values())
tot = sum(vals)
print('lifetimes passed', len(vals), 'passes', tot, 'share of passes by blocks passed >=k times:',
      {k: round(sum(v for v in vals if v >= k) / tot, 3) for k in (2, 5, 10, 20, 50, 100, 1000)})
print('blocks passed', len(passes), 'passes', sum(passes.values()), 'by count (top):', sorted(h.items())[:10], 'max', max(passes.values()))
