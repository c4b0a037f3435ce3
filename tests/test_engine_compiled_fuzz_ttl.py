"""Adversarial differential fuzz (review, session 26) of the compiled ``session_ttl``
engine runtime against the hooks, built as the engine builds it
(``compiled_runtime(PolicyRuntime.for_policy(...))``), on streams unlike
tests/test_engine_compiled_session_ttl.py's fuzz: many sessions (up to 200)
over small pools (2-12 blocks: every session beyond ``max_sessions`` =
``num_blocks`` forgets the least recent), pin caps of 0-3 blocks, preempted
requests (blocks released without ``finished``, re-admitted later with the
same arrival index, below the latest: hits on what they left, re-stores of
their hashes into other blocks), requests that wait about a TTL of arrivals
before their allocation, hashes stored twice (recomputed duplicates),
allocations that take every free block and lone evictions of 0..free blocks.
Every answer, the free set after every step, the counters and the end state
must agree; ``breaks``: protocol breaks mid-stream the compiled runtime must
refuse with nothing applied. ``SPFCORE_FUZZ_SEEDS`` sets the seeds (default 300).

Also ``spf_expected_utility`` (tests/test_engine_compiled_spf.py's fuzz) over
pools of 65-260 blocks and chains of up to 48 blocks: the compiled replay's
order holds several chunks of ``CHUNK`` (64) blocks (the shipped fuzz's pools
of at most 40 are one chunk), and allocations of ``HEAP_FROM`` (8) or more
blocks pop through the chunk heap, under pressure too.
"""

from __future__ import annotations

import os
import random

import pytest

from spfcore.engine.compiled import SessionTTLKernelRuntime, compiled_runtime
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.views import RequestView
from _compiled_pair import paired

BS = 4


def _check_end(hooks, comp):
    from test_engine_compiled_session_ttl import check_end_state
    check_end_state(hooks, comp)


def _h(rng, mode, hb):
    if mode == "collide8":
        return rng.choice([b"\0" * 8, b"\xff" * 8]) + rng.randbytes(hb - 8)
    return rng.randbytes(hb)


def fuzz(seed, steps=300, odd=False, ttls=(1, 2, 3, 4, 6, 10), breaks=False):
    """``odd``: the runtime built with few edges and a small heap and calendar (growth, compaction), hashes of
    8-32 bytes (or alike in their first 8), arrival indices that jump by about a TTL (or far beyond the
    calendar), stores vLLM made that the runtime never hears (drawn from a second generator)."""
    rng = random.Random(seed)
    orng = random.Random(-7 - seed)
    nb = rng.randint(2, 12)
    ttl = rng.choice(ttls)
    capf = rng.choice([0.0, 0.1, 0.2, 0.34, 0.5, 1.0])
    opts = {"ttl_arrivals": str(ttl), "pin_cap_fraction": str(capf)}
    hooks = PolicyRuntime.for_policy("session_ttl", nb, BS, opts, key_map=False)
    comp = compiled_runtime(PolicyRuntime.for_policy("session_ttl", nb, BS, opts, key_map=False))
    assert isinstance(comp, SessionTTLKernelRuntime)
    hb, mode = 32, "rand"
    if odd:
        comp = SessionTTLKernelRuntime(nb, BS, ttl=ttl, pin_cap=comp.pin_cap, edges=orng.choice([1, 2, 5]),
                                       order_cap=orng.choice([nb + 2, nb + 3, 2 * nb + 2]))
        hb, mode = orng.choice([8, 16, 24, 32]), orng.choice(["rand", "collide8"])
    cfg = dict(nb=nb, ttl=ttl, capf=capf, pin_cap=comp.pin_cap, hb=hb, mode=mode)
    orig_stored = hooks.stored
    hooks.stored = lambda req, ids, keys, *a: orig_stored(req, ids, [int.from_bytes(k + bytes(32 - len(k)))
                                                                     for k in keys], *a)
    both = paired(hooks, comp, f"seed {seed} {cfg}")

    ref = [0] * nb
    bhash = [None] * nb
    hmap = {}
    unheard = set()
    both("release", [], list(range(nb)), 0.0)
    nsess = rng.choice([1, 3, 20, 200])
    sessions = [f"s{i}" for i in range(nsess)] + [None]
    chains = [[_h(rng, mode, hb) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 8))]
    waiting = []  # (view, chain, partial): arrived (or preempted), not yet allocated
    running = []  # [view, chain, blocks, partial]
    arrivals = 0
    t = 0.0

    def nfree():
        return sum(1 for x in ref if x == 0)

    def take(victims):
        for b in victims:
            assert ref[b] == 0
            h = bhash[b]
            unheard.discard(b)
            if h is not None:
                hmap[h].remove(b)
                if not hmap[h]:
                    del hmap[h]
                bhash[b] = None
            ref[b] = 1

    def free(blocks, split):
        freed = []
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                freed.append(b)
        cached = [b for b in freed if bhash[b] is not None]
        hashless = [b for b in freed if bhash[b] is None]
        if split:
            if cached:
                both("release", cached, (), t)
            if hashless:
                both("release", (), hashless, t)
        else:
            both("release", cached, hashless, t)

    def admit(view, chain, partial):
        hits = []
        for h in chain:
            bl = hmap.get(h)
            if not bl or bl[0] in hits:
                break
            hits.append(bl[0])
        if rng.random() < 0.1 and hits:  # recomputed: the scheduler did not use the whole hit
            hits = hits[: rng.randrange(len(hits))]
        n_new = len(chain) - len(hits) + partial
        need = n_new + sum(1 for b in hits if ref[b] == 0)
        if need > nfree():
            return False
        free_hits = [b for b in hits if ref[b] == 0]
        if free_hits:
            both("touch", free_hits)
        for b in hits:
            ref[b] += 1
        if hits or rng.random() < 0.5:
            both("hit", view, hits, t)
        victims = both("evict", n_new, t) if n_new or rng.random() < 0.3 else []
        take(victims)
        full = victims[: len(chain) - len(hits)]
        ks = chain[len(hits):]
        cut = rng.randint(0, len(full)) if full else 0
        for ids, kk, first in ((full[:cut], ks[:cut], len(hits)), (full[cut:], ks[cut:], len(hits) + cut)):
            if ids:
                for b, h in zip(ids, kk):
                    bhash[b] = h
                    hmap.setdefault(h, []).append(b)
                if odd and orng.random() < 0.05:
                    unheard.update(ids)  # (cached in vLLM; to the runtime hashless)
                    continue
                both("stored", view, list(ids), list(kk), first, None, BS, t)
        running.append([view, chain, hits + victims, partial])
        return True

    for step in range(steps):
        t += 1.0
        r = rng.random()
        if r < 0.35:  # arrival
            c = rng.choice(chains)
            chain = c[: rng.randint(1, len(c))]
            view = RequestView(f"r{arrivals}", rng.choice(sessions), arrivals, t, len(chain) * BS + 1, ())
            arrivals += orng.choice([1, 1, 1, 1, ttl - 1, ttl, ttl + 1, 2 * ttl, 70000]) if odd else 1
            both("arrived", view, t)
            if rng.random() < 0.6:
                if not admit(view, chain, rng.random() < 0.5):
                    both("finished", view, t)
            else:
                waiting.append((view, chain, rng.random() < 0.5))
        elif r < 0.5 and waiting:  # admit a waiting (or preempted) request, the oldest mostly
            i = 0 if rng.random() < 0.7 else rng.randrange(len(waiting))
            view, chain, partial = waiting[i]
            if admit(view, chain, partial):
                waiting.pop(i)
            elif rng.random() < 0.3:
                waiting.pop(i)
                both("finished", view, t)
        elif r < 0.6 and running:  # decode: fill the partial block (maybe a duplicate hash), or grow one
            ent = rng.choice(running)
            view, chain, blocks, partial = ent
            if partial and bhash[blocks[-1]] is None:
                b = blocks[-1]
                h = _h(rng, mode, hb) if rng.random() < 0.6 else rng.choice(rng.choice(chains))
                bhash[b] = h
                hmap.setdefault(h, []).append(b)
                both("stored", view, [b], [h], len(blocks) - 1, None, BS, t)
                ent[3] = False
            elif nfree() >= 1:
                (v,) = both("evict", 1, t)
                take([v])
                blocks.append(v)
                ent[3] = True
        elif r < 0.68 and running:  # preempt: free its blocks, back to waiting (no finished)
            ent = running.pop(rng.randrange(len(running)))
            view, chain, blocks, partial = ent
            free(blocks, rng.random() < 0.5)
            waiting.insert(0, (view, chain, partial))
        elif r < 0.75:  # a lone eviction of 0..free blocks (a speculative or large allocation), held then freed
            n = rng.randint(0, nfree())
            vs = both("evict", n, t)
            take(vs)
            if vs and running:
                running[rng.randrange(len(running))][2].extend(vs)
            elif vs:
                free(vs, False)
        elif running:  # finish
            ent = running.pop(rng.randrange(len(running)))
            view, chain, blocks, partial = ent
            both("finished", view, t)
            free(blocks, rng.random() < 0.5)
        if breaks and rng.random() < 0.05:  # a protocol break: the compiled runtime refuses it, nothing applied
            fr = [b for b in range(nb) if ref[b] == 0]
            held = [b for b in range(nb) if ref[b] > 0]
            kind = rng.randrange(5)
            call = None
            if kind == 0 and fr:  # release a free block (after a held one)
                call = ("release", held[:1] + [rng.choice(fr)], (), t)
            elif kind == 1 and fr:
                call = ("release", (), held[:1] + [rng.choice(fr)], t)
            elif kind == 2 and running:  # store into a block that holds a hash already (or out of the pool)
                cachedb = [b for b in range(nb) if bhash[b] is not None and ref[b] > 0 and b not in unheard]
                bad = rng.choice(cachedb) if cachedb and rng.random() < 0.7 else nb + rng.randrange(3)
                ids = [b for b in held if bhash[b] is None and b not in unheard][:1] + [bad]
                call = ("stored", running[0][0], ids, [_h(rng, mode, hb) for _ in ids], 0, None, BS, t)
            elif kind == 3 and running:  # a hit naming a block out of the pool
                call = ("hit", running[0][0], held[:1] + [rng.choice([-1, nb, nb + 5])], t)
            elif kind == 4:
                call = ("evict", nfree() + 1 + rng.randrange(2), t)
            if call is not None:
                from test_engine_compiled_session_ttl import _same, _state
                before, counts = _state(comp), comp.stats()
                try:
                    getattr(comp, call[0])(*call[1:])
                except (PolicyError, ValueError):
                    pass
                else:
                    raise AssertionError(f"seed {seed} {cfg}: {call!r:.300} taken")
                if not _same(before, _state(comp)) or comp.stats()["evictions"] != counts["evictions"]:
                    raise AssertionError(f"seed {seed} {cfg}: {call!r:.300} refused, but applied")
            if hooks.num_free != comp.num_free or sorted(hooks.free_ids()) != sorted(comp.free_ids()):
                raise AssertionError(f"seed {seed} {cfg}: free sets differ after a break at step {step}")
        if hooks.num_free != comp.num_free or sorted(hooks.free_ids()) != sorted(comp.free_ids()):
            raise AssertionError(f"seed {seed} {cfg}: free sets differ at step {step}")
    sa, sb = hooks.stats(), comp.stats()
    for k in ("evictions", "evict_calls", "hook_calls", "pins_refused"):
        if sa[k] != sb[k]:
            raise AssertionError(f"seed {seed} {cfg}: {k} {sa[k]} vs {sb[k]}")
    _check_end(hooks, comp)
    return sa["evictions"], sa["pins_refused"]


SEEDS = int(os.environ.get("SPFCORE_FUZZ_SEEDS", "300"))


@pytest.mark.parametrize("chunk", range(4))
def test_compiled_session_ttl_equals_the_hooks_on_adversarial_streams(chunk):
    res = [fuzz(s) for s in range(chunk, SEEDS, 4)]
    assert sum(e for e, _ in res) > 0 and sum(p for _, p in res) > 0


@pytest.mark.parametrize("chunk", range(2))
def test_compiled_session_ttl_equals_the_hooks_on_odd_adversarial_streams(chunk):
    res = [fuzz(s, odd=True) for s in range(chunk, SEEDS, 2)]
    assert sum(e for e, _ in res) > 0 and sum(p for _, p in res) > 0


@pytest.mark.parametrize("back", [False, True])
def test_compiled_spf_equals_the_hooks_over_several_order_chunks(back):
    from spfcore.sim._replay_spf_nb import CHUNK, HEAP_FROM
    from test_engine_compiled_spf import fuzz as spf_fuzz

    assert (CHUNK, HEAP_FROM) == (64, 8)  # (the pools and chains below reach past both)
    evicted = sum(spf_fuzz(s, back=back, pool=(65, 260), chain=48, chains=10) for s in range(SEEDS // 6))
    assert evicted > 0


def test_compiled_session_ttl_equals_the_hooks_with_long_ttls():
    # TTLs up to the calendar's most (65,535), arrival indices that jump by about a TTL
    res = [fuzz(s, odd=True, ttls=(50, 1000, 65534, 65535)) for s in range(SEEDS // 3)]
    assert sum(e for e, _ in res) > 0 and sum(p for _, p in res) > 0


@pytest.mark.parametrize("odd", [False, True])
def test_protocol_breaks_mid_stream_are_refused_with_nothing_applied(odd):
    # releases of free blocks (after a held one), stores into a cached block or out of the pool (after a fresh
    # one), hits out of the pool, evictions of more than the free: the compiled runtime raises (PolicyError;
    # evict ValueError), its arrays and counters as before, and the stream goes on deciding as the hooks
    # (which take some of these calls; they are not made to them)
    res = [fuzz(s, odd=odd, breaks=True) for s in range(SEEDS // 3)]
    assert sum(e for e, _ in res) > 0
