import sys, collections, runpy
from spfcore_classic import _base
from spfcore_classic._ring import Ring
st = collections.Counter()
it = Ring.__iter__
def counting_iter(self):
    st['iter_calls'] += 1
    for x in it(self):
        st['iter_items'] += 1
        yield x
Ring.__iter__ = counting_iter
mr = Ring._make_room
def make_room(self, t, n):
    st['relabels'] += 1
    return mr(self, t, n)
Ring._make_room = make_room
P = _base.ClassicPolicy
rc = P._recheck
def recheck(self, order, memo):
    st['recheck'] += 1; st['recheck_busy'] += len(memo[2])
    return rc(self, order, memo)
P._recheck = recheck
en = P._entered
def entered(self, ids):
    st['entered'] += 1; st['entered_work'] += len(ids) * len(self._stuck)
    return en(self, ids)
P._entered = entered
wk = P._woken
def woken(self, order, memo):
    st['woken'] += 1; st['woken_set'] += len(memo[5])
    return wk(self, order, memo)
P._woken = woken
w = P.walk
def walk(self, order):
    st['walk'] += 1
    return w(self, order)
P.walk = walk
ev = P.spfcore_evict_blocks
sys.argv = ['bench', sys.argv[1], '--policies', sys.argv[2], '--num-blocks', sys.argv[3], '--folder', '/tmp/h19d/prep-' + sys.argv[1].split('/')[-1][:-6]]
runpy.run_path('/work/wt-1/benchmarks/bench_scale_cells.py', run_name='__main__')
print(dict(st))
