"""The utility variant's record dict and ghost list hold exactly what a plain
model of them holds: the resident hashes, and the evicted ones in LRU order
(a hash's place kept while a newer record of it is resident, the oldest
dropped beyond ``ghost_factor x num_blocks``).

The model is the two-dict form (resident set, ghost dict in insertion order)
driven by the same hook calls of real replays; the policy's ``info`` and
``ghost`` views must equal it after every eviction.
"""

from __future__ import annotations

import pytest

from spfcore.sim import prepare, simulate
from spfcore.workloads.generators import make
from spfcore_spf_expected_utility import utility as U


class Model:
    def __init__(self, cap):
        self.cap, self.info, self.ghost, self.dual = cap, set(), {}, set()

    def stored(self, keys):
        for k in keys:
            if k not in self.info:
                self.ghost.pop(k, None)
                self.info.add(k)

    def hit(self, keys):
        for k in keys:
            if k not in self.info:
                if k in self.ghost:
                    self.dual.add(k)
                self.info.add(k)

    def evicted(self, keys):
        for k in keys:
            if k not in self.info:
                continue
            self.info.discard(k)
            self.dual.discard(k)
            self.ghost.setdefault(k, None)  # a ghost of a resident hash keeps its place
        while len(self.ghost) > self.cap:
            k = next(iter(self.ghost))
            del self.ghost[k]


@pytest.mark.parametrize("shape,mode,seed,ghost_factor", [("mix", "concurrent", 3, 0.25), ("revisit", "sequential", 1, 0.5),
                                                          ("multiturn", "concurrent", 2, 1.0), ("thrash", "concurrent", 3, 0.5)])
def test_records_match_the_two_dict_model(monkeypatch, shape, mode, seed, ghost_factor):
    models, checks = {}, {"evictions": 0, "trimmed": 0, "dual": 0}

    def model(pol):
        if id(pol) not in models:
            models[id(pol)] = Model(pol.ghost_cap)
        return models[id(pol)]

    def wrap(name, fn):
        orig = getattr(U.UtilityPolicy, name)
        if name == "spfcore_blocks_evicted":
            def hook(self, keys, now):
                out = orig(self, keys, now)
                fn(self, model(self), list(keys))
                return out
        else:
            def hook(self, request, blocks, now):
                out = orig(self, request, blocks, now)
                fn(self, model(self), list(blocks.keys))
                return out
        hook.__dict__.update(orig.__dict__)  # the pluggy marker
        monkeypatch.setattr(U.UtilityPolicy, name, hook)

    def after_evict(pol, m, keys):
        before = len(m.ghost) + len(m.info)
        m.evicted(keys)
        checks["evictions"] += 1
        checks["trimmed"] += len(m.ghost) + len(m.info) < before
        checks["dual"] += bool(m.dual)
        assert set(pol.info) == m.info
        assert list(pol.ghost) == list(m.ghost)
        assert pol.nghost == len(m.ghost)

    wrap("spfcore_blocks_stored", lambda pol, m, keys: m.stored(keys))
    wrap("spfcore_blocks_hit", lambda pol, m, keys: m.hit(keys))
    wrap("spfcore_blocks_evicted", after_evict)
    opts = {"ghost_factor": str(ghost_factor)}
    if shape == "thrash":  # chains broken mid-way, copies of evicted hashes hit: ghosts of resident hashes
        wl = make("personas", seed=seed, personas=4, prefix_tokens=96, sessions=8, turns=3, query_tokens=16,
                  output_tokens=12, arrival="poisson", rate=10.0)
        simulate(wl, "spf_expected_utility", num_blocks=24, block_size=16, mode=mode, max_running=4,
                 token_budget=64, options=opts)
    else:
        prep = prepare(make(shape, seed=seed), 16)
        nb = max(64, len({k for v in prep.views for k in v.block_keys}) // 3)
        simulate(prep, "spf_expected_utility", num_blocks=nb, block_size=16, mode=mode, options=opts)
    assert checks["evictions"] > 20 and checks["trimmed"] > 0
    assert checks["dual"] > 0 or shape != "thrash"  # ghosts of resident hashes were there
