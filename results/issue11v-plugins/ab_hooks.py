"""A/B of two trees' policy classes on one recorded event stream, in one process, interleaved rounds.
python ab_hooks.py MODULE CLASS REC.pkl PATH_A PATH_B [rounds]"""
import gc, importlib.util, pickle, sys, time
from collections import defaultdict
sys.path.insert(0, "/tmp/h11v")
from hookrec import FakeBatch
mod, cls, rec, pa, pb = sys.argv[1:6]
rounds = int(sys.argv[6]) if len(sys.argv) > 6 else 3
def load(path, tag):
    spec = importlib.util.spec_from_file_location(f"{mod}_{tag}", path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return getattr(m, cls)
A, B = load(pa, "a"), load(pb, "b")
ev = pickle.load(open(rec, "rb"))
res = {"A": defaultdict(list), "B": defaultdict(list)}
for r in range(rounds):
    for tag, C in (("A", A), ("B", B)) if r % 2 == 0 else (("B", B), ("A", A)):
        p = C(); fns = {}; t_by = defaultdict(float)
        gc.collect(); gc.disable()
        pc = time.perf_counter; c0 = time.process_time()
        for name, args in ev:
            fn = fns.get(name) or fns.setdefault(name, getattr(p, name))
            t = pc(); fn(*args); t_by[name] += pc() - t
        cpu = time.process_time() - c0
        gc.enable()
        res[tag]["cpu"].append(cpu)
        for k, v in t_by.items(): res[tag][k].append(v)
for k in res["A"]:
    a, b = res["A"][k], res["B"][k]
    print(f"{k:<28} A min {min(a):7.3f} [{min(a):.3f}-{max(a):.3f}]   B min {min(b):7.3f} [{min(b):.3f}-{max(b):.3f}]  B/A {min(b)/max(min(a),1e-9):.2f}")
