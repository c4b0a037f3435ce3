"""Counts of the parking walk (issue 19e): per take() the active items passed (parked / busy),
per wake() the cursor steps. Usage (PYTHONPATH = the branch): python instr_take.py TRACE POLICY BLOCKS"""
import collections, runpy, sys
from spfcore_classic import _ring
st = collections.Counter()
R = _ring.Ring
take0 = R.take
def take(self, free, kids, key, parked):
    st['take'] += 1
    i = self.ahead
    for _ in range(self.nact):
        if kids.get(key[i]):
            st['parked'] += 1
        elif i in free:
            break
        else:
            st['busy'] += 1
        i = self[i][4]
    return take0(self, free, kids, key, parked)
R.take = take
wake0 = R.wake
def wake(self, item):
    st['wake'] += 1
    return wake0(self, item)
R.wake = wake
sys.argv = ['bench', sys.argv[1], '--policies', sys.argv[2], '--num-blocks', sys.argv[3], '--folder',
            '/tmp/19e/prep-' + sys.argv[1].split('/')[-1][:-6]]
runpy.run_path(sys.argv[0].replace('instr_take.py', '') + '../../benchmarks/bench_scale_cells.py', run_name='__main__')
print(dict(st))
