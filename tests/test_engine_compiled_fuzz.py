"""Differential fuzz of the compiled engine runtime against the hooks: random
event streams that a vLLM block pool (modelled here) produces, through a
``PolicyRuntime`` driving ``frequency``'s hooks and a
:class:`~spfcore.engine.compiled.FrequencyKernelRuntime` side by side; every
answer (victims, raised or not), the free set after every step and the end
counters must agree. Streams: lookups that stop at the first miss, recomputed
duplicates (a hash cached in two blocks), chunked stores, decode blocks,
partial (hashless) blocks, shared blocks, both release splits, allocations of
0 blocks; ``buckets`` 1-4 (the heap and the buckets mixed), ``min_count`` 1-50,
``ghost_factor`` 0-10, hashes whose first 8 (or 24) bytes collide.
``SPFCORE_FUZZ_SEEDS`` sets the seeds (default 400; a review ran 8,000 x 400
steps and 40 x 20,000 with no difference).
"""

from __future__ import annotations

import os
import random

import pytest

from spfcore.engine.compiled import FrequencyKernelRuntime
from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView

BS = 4

def mkhash(rng, mode):
    if mode == "collide8":  # first 8 bytes from a tiny set: probing, W1..W3 compare
        return rng.choice([b"\0" * 8, b"\xff" * 8, b"\x01" + b"\0" * 7]) + rng.randbytes(24)
    if mode == "collide24":
        return b"\x07" * 24 + rng.randbytes(8)
    return rng.randbytes(32)

def run(seed, steps=400, verbose=False):
    rng = random.Random(seed)
    nb = rng.randint(3, 40)
    min_count = rng.choice([1, 1, 2, 2, 3, 5, 50])
    gf = rng.choice([0, 0, 1, 2, 4, 10])
    buckets = rng.choice([None, 1, 2, 3, 4])
    mode = rng.choice(["rand", "collide8", "collide24"])
    hooks = PolicyRuntime.for_policy("frequency", nb, BS, {"min_count": str(min_count), "ghost_factor": str(gf)},
                                     key_map=False)
    comp = FrequencyKernelRuntime(nb, BS, min_count=min_count, ghost_cap=gf * nb, buckets=buckets)
    cfg = dict(nb=nb, min_count=min_count, gf=gf, buckets=buckets, mode=mode)
    log = []

    def both(name, *args):
        log.append((name, args))
        ra = rb = ea = eb = None
        try:
            ra = getattr(hooks, name)(*args)
        except Exception as e:  # noqa
            ea = e
        try:
            rb = getattr(comp, name)(*args) if name != "stored" else comp.stored(*args[:2], [k for k in args[2]], *args[3:])
        except Exception as e:  # noqa
            eb = e
        if (ea is None) != (eb is None) or ra != rb:
            raise AssertionError(f"seed {seed} {cfg}: {name}{args!r:.300}: hooks {ra!r:.200}/{ea!r} vs compiled {rb!r:.200}/{eb!r}")
        return ra
    # hooks take int keys
    orig_stored = hooks.stored
    hooks.stored = lambda req, ids, keys, *a: orig_stored(req, ids, [int.from_bytes(k) for k in keys], *a)

    ref = [0] * nb
    bhash = [None] * nb
    hmap = {}  # hash -> list of blocks (insertion order, vLLM's first is returned)
    both("release", [], list(range(nb)), 0.0)
    chains = [[mkhash(rng, mode) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 6))]
    running = []  # (view, blocks)
    t = 0.0
    arrivals = 0
    for step in range(steps):
        t += 1.0
        r = rng.random()
        if r < 0.5:  # arrival + allocate
            c = rng.choice(chains)
            L = rng.randint(1, len(c))
            chain = c[:L]
            partial = rng.random() < 0.5
            view = RequestView(f"r{arrivals}", None, arrivals, t, L * BS + partial, ())
            arrivals += 1
            both("arrived", view, t)
            hits = []
            for h in chain:
                bl = hmap.get(h)
                if not bl:
                    break
                hits.append(bl[0])
            n_new = L - len(hits) + partial
            need = n_new + sum(1 for b in hits if ref[b] == 0)
            nfree = sum(1 for x in ref if x == 0)
            if need > nfree:
                both("finished", view, t)
                continue
            free_hits = [b for b in hits if ref[b] == 0]
            if free_hits:
                both("touch", free_hits)
            for b in hits:
                ref[b] += 1
            if hits or rng.random() < 0.5:
                both("hit", view, hits, t)
            victims = both("evict", n_new, t) if n_new or rng.random() < 0.3 else []
            for b in victims:
                assert ref[b] == 0
                h = bhash[b]
                if h is not None:
                    hmap[h].remove(b)
                    if not hmap[h]:
                        del hmap[h]
                    bhash[b] = None
                ref[b] = 1
            blocks = hits + victims
            # cache full new blocks, maybe in two chunks (chunked prefill)
            full = victims[: L - len(hits)]
            ks = chain[len(hits):]
            cut = rng.randint(0, len(full)) if full else 0
            for part_ids, part_ks, first in ((full[:cut], ks[:cut], len(hits)), (full[cut:], ks[cut:], len(hits) + cut)):
                if part_ids:
                    for b, h in zip(part_ids, part_ks):
                        bhash[b] = h
                        hmap.setdefault(h, []).append(b)
                    both("stored", view, list(part_ids), list(part_ks), first, None, BS, t)
            running.append([view, blocks, partial])
        elif r < 0.65 and running:  # decode: the partial block fills (stored alone), maybe a new one allocated
            ent = rng.choice(running)
            view, blocks, partial = ent
            if partial and bhash[blocks[-1]] is None:
                b = blocks[-1]
                h = mkhash(rng, mode) if rng.random() < 0.8 else rng.choice(rng.choice(chains))  # rarely an existing hash
                bhash[b] = h
                hmap.setdefault(h, []).append(b)
                both("stored", view, [b], [h], len(blocks) - 1, None, BS, t)
                ent[2] = False
            elif sum(1 for x in ref if x == 0) >= 1:
                (v,) = both("evict", 1, t)
                h = bhash[v]
                if h is not None:
                    hmap[h].remove(v)
                    if not hmap[h]:
                        del hmap[h]
                    bhash[v] = None
                ref[v] = 1
                blocks.append(v)
                ent[2] = True
        elif running:  # finish (or preempt): free deepest first
            ent = running.pop(rng.randrange(len(running)))
            view, blocks, _ = ent
            both("finished", view, t)
            freed = []
            for b in reversed(blocks):
                ref[b] -= 1
                if ref[b] == 0:
                    freed.append(b)
            cached = [b for b in freed if bhash[b] is not None]
            hashless = [b for b in freed if bhash[b] is None]
            if rng.random() < 0.5:
                both("release", cached, hashless, t)
            else:  # as the adapter's append_n of cached then prepend_n of hashless
                if cached:
                    both("release", cached, (), t)
                if hashless:
                    both("release", (), hashless, t)
        if hooks.num_free != comp.num_free or sorted(hooks.free_ids()) != sorted(comp.free_ids()):
            raise AssertionError(f"seed {seed} {cfg}: free sets differ at step {step}")
    sa, sb = hooks.stats(), comp.stats()
    for k in ("evictions", "evict_calls", "hook_calls"):
        if sa[k] != sb[k]:
            raise AssertionError(f"seed {seed} {cfg}: {k} {sa[k]} vs {sb[k]}")
    return sa["evictions"]


SEEDS = int(os.environ.get("SPFCORE_FUZZ_SEEDS", "400"))


@pytest.mark.parametrize("chunk", range(4))
def test_compiled_frequency_equals_the_hooks_on_random_pool_streams(chunk):
    evicted = sum(run(s) for s in range(chunk, SEEDS, 4))
    assert evicted > 0  # (the streams evict: the comparison reached the order)
