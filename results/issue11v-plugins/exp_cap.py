"""main vs branch FrequencyPolicy on a synthetic store/evict stream at a given cache size:
batches of B hashes, a share `rev` of each store taken from the ghost list (hashes coming back);
every stored batch is evicted by the next call. CPU seconds per 1M evicted hashes, interleaved."""
import gc, importlib.util, random, sys, time
sys.path.insert(0, "/tmp/h11v")
from hookrec import FakeBatch
nb, B, N, rev = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
def load(path, tag):
    spec = importlib.util.spec_from_file_location(f"f_{tag}", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m.FrequencyPolicy
F = "plugins/frequency/src/spfcore_frequency/__init__.py"
classes = {"main": load("/tmp/h11v/tree-9cb1d3e/" + F, "a"), "branch": load("/tmp/h11v/tree-abebd0d/" + F, "b")}
def stream():
    rnd = random.Random(3); out = []; ghosts = []
    for j in range(N // B):
        ks = [rnd.getrandbits(128) for _ in range(B)]
        if ghosts and rev:
            for i in range(int(B * rev)):
                ks[i] = ghosts[rnd.randrange(len(ghosts))]
            ks = list(dict.fromkeys(ks))
        out.append(ks); ghosts.extend(ks[-2:]);
        if len(ghosts) > 4 * nb: ghosts = ghosts[-4 * nb:]
    return out
batches = stream()
res = {k: [] for k in classes}
for r in range(3):
    for name in (list(classes) if r % 2 == 0 else list(classes)[::-1]):
        p = classes[name](); p.spfcore_cache_configured(nb, 16)
        # fill the ghost list to its cap first (untimed)
        for j in range(0, 4 * nb + 1, 1000):
            ks = [random.getrandbits(128) for _ in range(1000)]; p.spfcore_blocks_stored(None, FakeBatch(ks, None), 0.0); p.spfcore_blocks_evicted(ks, 0.0)
        gc.collect(); gc.disable(); t = time.process_time()
        for ks in batches:
            p.spfcore_blocks_stored(None, FakeBatch(ks, None), 0.0); p.spfcore_blocks_evicted(ks, 0.0)
        res[name].append(time.process_time() - t); gc.enable()
for k, v in res.items():
    print(f"cap {4*nb:>8} batch {B} rev {rev}: {k:<7} CPU s best {min(v):.2f} [{min(v):.2f}-{max(v):.2f}]  us/evicted hash {min(v)/N*1e6:.2f}")
