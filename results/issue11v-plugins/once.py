"""Replay a recorded hook stream once on the policy class of one file (for instruction counts).
python once.py MODULE CLASS FILE REC.pkl run|load"""
import gc, importlib.util, pickle, sys
sys.path.insert(0, "/tmp/h11v")
from hookrec import FakeBatch
mod, cls, path, rec, mode = sys.argv[1:6]
spec = importlib.util.spec_from_file_location(mod, path)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
ev = pickle.load(open(rec, "rb"))
p = getattr(m, cls)()
gc.disable()
if mode == "run":
    for name, args in ev:
        getattr(p, name)(*args)
else:
    for name, args in ev:
        getattr(p, "__class__")
