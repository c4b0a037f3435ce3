"""Issue 11 part 5 prototype: how fast could the ``frequency`` arm's engine
hot path be with (a) block hashes handed as one fixed-width numpy array per
batch and (b) the policy's bookkeeping compiled (numba) over an
open-addressing table keyed by 128-bit keys?

1. Records the runtime calls of the simulator's reference (Python) replay of
   ``frequency`` on the seed's full-scale workload (the same stream as
   ``benchmarks/bench_policy_cost.py``), and gives every key a 32-byte
   sha256 "vLLM block hash".
2. Variant A (today): a fresh ``PolicyRuntime`` + ``FrequencyPolicy`` fed the
   stream, the hashes turned into keys by ``list(map(int.from_bytes, ...))``
   per stored batch (``vllm_keys``). Timed: conversion + every runtime event
   (arrived, hit, touch, evict, stored, finished, release), evictor included.
3. Variant B (prototype): per batch ``np.frombuffer(b"".join(hashes),
   np.int64).reshape(-1, 4)[:, :2]`` (128-bit keys as two int64 words) and
   the block ids as an int64 array, then ONE numba call per event (hit,
   stored, evict, release; touch if any) over: an open-addressing table
   (linear probing, backward-shift deletion, one 48-byte row per key: the
   key's two words, count, ghost count, ghost sequence number, used), a
   ghost LRU ring with lazy deletion (an entry is live iff its key's ghost
   sequence number matches; compacted when full) bounded at
   ``ghost_factor * num_blocks`` live entries, and the evictor's order
   (hashless stack, then a binary min-heap with lazy deletion over one
   packed int64 key ``tier << 62 | count << 40 | release order``). Release
   returns admission flags and scores as arrays; evict returns the victims.
   B' is B fed from stand-ins of vLLM's block objects (ids and hashes read
   off them per batch, victims handed back as objects).
4. Asserts that B's admission flags, scores and victims equal A's on the
   whole stream (and on three smaller streams with hits, returning ghost
   counts and a binding ghost cap), and that the end states agree; then
   times A, B and B's parts interleaved, several rounds in one process,
   wall and CPU time; then A, B, B' with ``--thrash-mb`` MiB written
   (untimed) before each request (cold caches).

    /work/main/.venv/bin/python results/issue11-s22-compiled-floor/floor.py [--rounds 15] [--cold-rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import statistics
import sys
import time

import numba
import numpy as np

os.environ.setdefault("SPFCORE_SIM_REPLAY", "python")
from spfcore.runtime import PolicyRuntime  # noqa: E402
from spfcore.sim import prepare, simulate  # noqa: E402
from spfcore.sim.simulator import REPLAY_ENV  # noqa: E402
from spfcore.workloads.generators import make  # noqa: E402

import spfcore_frequency  # noqa: E402

NUM_BLOCKS, BS = 3561, 16
MIN_COUNT, GHOST_FACTOR = 2, 4  # FrequencyParams defaults

def _now2():
    """(wall, this process's CPU time): another process's load inflates the first, hardly the second."""
    return time.perf_counter(), time.process_time()


def _since(t0):
    w, c = _now2()
    return w - t0[0], c - t0[1]


def _thrash(buf, paused):
    """Write all of ``buf`` (untimed: its time is added to ``paused``), evicting the CPU caches as the
    model's work between engine steps does (results/gpu-h200-engine-calls-75ab649 used 64 MiB)."""
    t = _now2()
    buf += 1
    w, c = _since(t)
    paused[0] += w
    paused[1] += c


def _minus(dt, paused):
    return dt[0] - paused[0], dt[1] - paused[1]


# ------------------------------------------------------------------ 1. the stream
EVENTS = ("arrived", "hit", "touch", "evict", "stored", "finished", "release")


SEED_WL = dict(seed=42, personas=16, prefix_tokens=8192, sessions=32, turns=4, query_tokens=128, output_tokens=32,
               order="round_robin")


def record_stream(wl_kw=SEED_WL, num_blocks=NUM_BLOCKS, options=None):
    """Run the simulator's reference loop once, recording every runtime call."""
    os.environ[REPLAY_ENV] = "python"
    wl = make("personas", **wl_kw)
    prep = prepare(wl, BS)
    log = []
    orig = {e: getattr(PolicyRuntime, e) for e in EVENTS}

    def wrap(name):
        f = orig[name]

        @functools.wraps(f)
        def w(self, *args):
            res = f(self, *args)
            if name == "arrived":
                log.append(("arrived", args[0], args[1]))
            elif name == "hit":
                log.append(("hit", args[0], list(args[1]), args[2]))
            elif name == "touch":
                log.append(("touch", list(args[0])))
            elif name == "evict":
                log.append(("evict", args[0], args[1], list(res)))
            elif name == "stored":
                req, ids, keys, fd, parent, ntok, now = args
                log.append(("stored", req, list(ids), list(keys), fd, parent, ntok, now))
            elif name == "finished":
                log.append(("finished", args[0], args[1]))
            else:
                log.append(("release", list(args[0]), list(args[1]), args[2]))
            return res
        return w

    for e in EVENTS:
        setattr(PolicyRuntime, e, wrap(e))
    try:
        rec = simulate(prep, "frequency", num_blocks=num_blocks, block_size=BS, options=options)
    finally:
        for e in EVENTS:
            setattr(PolicyRuntime, e, orig[e])
    # vLLM-like 32-byte block hashes: sha256 of the simulator's key
    hb = {}

    def h(k):
        b = hb.get(k)
        if b is None:
            b = hb[k] = hashlib.sha256(repr(k).encode()).digest()
        return b

    stream = []
    for ev in log:
        if ev[0] == "stored":
            _, req, ids, keys, fd, parent, ntok, now = ev
            stream.append(("stored", req, ids, [h(k) for k in keys], fd, None if parent is None else h(parent),
                           ntok, now))
        else:
            stream.append(ev)
    return stream, len(wl.requests), rec, len(hb)


# ------------------------------------------------------------------ 2. variant A (today)
def run_a(stream, record=None, num_blocks=NUM_BLOCKS, options=None, thrash=None):
    """Fresh runtime + FrequencyPolicy over the stream; returns seconds."""
    rt = PolicyRuntime.for_policy("frequency", num_blocks, BS, options, key_map=False)
    arrived, hit, touch, evict, stored, finished, release = (getattr(rt, e) for e in EVENTS)
    ibytes = int.from_bytes
    check = record is not None
    perf = _now2
    paused = [0.0, 0.0]
    t0 = perf()
    for ev in stream:
        e = ev[0]
        if e == "hit":
            hit(ev[1], ev[2], ev[3])
        elif e == "touch":
            touch(ev[1])
        elif e == "evict":
            got = evict(ev[1], ev[2])
            if check:
                assert got == ev[3], "A's victims differ from the recorded stream"
        elif e == "stored":
            _, req, ids, hashes, fd, parent, ntok, now = ev
            stored(req, ids, list(map(ibytes, hashes)), fd, None if parent is None else ibytes(parent), ntok, now)
        elif e == "release":
            release(ev[1], ev[2], ev[3])
        elif e == "arrived":
            if thrash is not None:
                _thrash(thrash, paused)
            arrived(ev[1], ev[2])
        else:
            finished(ev[1], ev[2])
    dt = _minus(_since(t0), paused)
    return dt, rt


def a_answers(stream, num_blocks=NUM_BLOCKS, options=None):
    """A's admission flags and scores per release (the policy's hooks wrapped)."""
    P = spfcore_frequency.FrequencyPolicy
    got = []
    oa, os_ = P.spfcore_admit_blocks, P.spfcore_score_blocks

    @functools.wraps(oa)
    def admit(self, blocks, now):
        r = oa(self, blocks, now)
        got.append(["admit", np.asarray(r).copy()])
        return r

    @functools.wraps(os_)
    def score(self, blocks, now):
        r = os_(self, blocks, now)
        got.append(["score", np.asarray(r, np.float64).copy()])
        return r

    P.spfcore_admit_blocks, P.spfcore_score_blocks = admit, score
    try:
        _, rt = run_a(stream, record=True, num_blocks=num_blocks, options=options)
    finally:
        P.spfcore_admit_blocks, P.spfcore_score_blocks = oa, os_
    admits = [a for k, a in got if k == "admit"]
    scores = [a for k, a in got if k == "score"]
    return admits, scores, rt


# ------------------------------------------------------------------ 3. variant B (prototype)
_jit = numba.njit(cache=True, nogil=True)
TIER1 = 2**62
# state counters
C_USED, C_GN, C_RHEAD, C_RTAIL, C_SEQ, C_HN, C_ORDER, C_HSN = range(8)


@_jit
def _find(T, mask, k0, k1):
    """Slot of key (k0, k1), or -1 - (the empty slot where it would go)."""
    i = k0 & mask
    while T[i, 5]:
        if T[i, 0] == k0 and T[i, 1] == k1:
            return i
        i = (i + 1) & mask
    return -1 - i


@_jit
def _slot(T, mask, c, k0, k1):
    """Slot of (k0, k1), inserted (count 0, no ghost) if absent."""
    i = _find(T, mask, k0, k1)
    if i >= 0:
        return i
    i = -1 - i
    T[i, 5] = 1
    T[i, 0], T[i, 1] = k0, k1
    T[i, 2] = 0
    T[i, 3] = 0
    T[i, 4] = 0
    c[C_USED] += 1
    return i


@_jit
def _delete(T, mask, c, i):
    """Backward-shift deletion of slot i (linear probing: no tombstones)."""
    T[i, 5] = 0
    c[C_USED] -= 1
    j = i
    while True:
        j = (j + 1) & mask
        if not T[j, 5]:
            return
        home = T[j, 0] & mask
        # move j back to i unless home lies cyclically in (i, j]
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            T[i, 0], T[i, 1], T[i, 2], T[i, 3], T[i, 4] = T[j, 0], T[j, 1], T[j, 2], T[j, 3], T[j, 4]
            T[i, 5] = 1
            T[j, 5] = 0
            i = j


@_jit
def _maybe_free(T, mask, c, i):
    if T[i, 2] == 0 and T[i, 3] == 0:
        _delete(T, mask, c, i)


@_jit
def k_hit(keys, T, mask, c):
    """spfcore_blocks_hit: +1 per key (Counter.update)."""
    for j in range(keys.shape[0]):
        i = _slot(T, mask, c, keys[j, 0], keys[j, 1])
        T[i, 2] += 1


@_jit
def k_touch(ids, inn):
    """touch: hit blocks leave the free order (their heap entries go stale)."""
    for j in range(ids.shape[0]):
        inn[ids[j]] = 0


@_jit
def k_stored(ids, keys, bk0, bk1, bhas, T, mask, c):
    """spfcore_blocks_stored: count + 1, or 1 + ghost count (the ghost leaves, lazily in the ring)."""
    for j in range(keys.shape[0]):
        k0, k1 = keys[j, 0], keys[j, 1]
        b = ids[j]
        bk0[b], bk1[b] = k0, k1
        bhas[b] = 1
        i = _slot(T, mask, c, k0, k1)
        if T[i, 2] > 0:
            T[i, 2] += 1
        else:
            g = T[i, 3]
            if g > 0:
                T[i, 3] = 0
                T[i, 4] = 0  # its ring entry is now stale
                c[C_GN] -= 1
            T[i, 2] = g + 1


@_jit
def _ring_compact(rk0, rk1, rseq, T, mask, c):
    """Drop stale ring entries (keeps order)."""
    cap = rk0.shape[0]
    h, t = c[C_RHEAD], c[C_RTAIL]
    a0, a1, aseq = np.empty(t - h, rk0.dtype), np.empty(t - h, rk1.dtype), np.empty(t - h, rseq.dtype)
    m = 0
    for p in range(h, t):  # (into scratch: the ring wraps, so an in-place copy would overwrite unread entries)
        q = p % cap
        i = _find(T, mask, rk0[q], rk1[q])
        if i >= 0 and T[i, 3] > 0 and T[i, 4] == rseq[q]:
            a0[m], a1[m], aseq[m] = rk0[q], rk1[q], rseq[q]
            m += 1
    rk0[:m], rk1[:m], rseq[:m] = a0[:m], a1[:m], aseq[:m]
    c[C_RHEAD], c[C_RTAIL] = 0, m


@_jit
def k_evict(n, out, inn, ordr, hs, hk, hb, bk0, bk1, bhas, T, mask,
            rk0, rk1, rseq, ghost_cap, c):
    """PolicyRuntime.evict(n): victims into out[:n] (hashless stack first, then the lowest heap entry);
    cached victims' counts go to the ghost ring; then the ring is trimmed to ghost_cap."""
    cap = rk0.shape[0]
    cached = False
    for j in range(n):
        if c[C_HSN] > 0:
            c[C_HSN] -= 1
            b = hs[c[C_HSN]]
        else:
            while True:
                b, x = hb[0], hk[0] & OMASK
                c[C_HN] = _h_pop(hk, hb, c[C_HN])
                if inn[b] and x == ordr[b]:
                    break
            inn[b] = 0
        out[j] = b
        if bhas[b]:
            bhas[b] = 0
            cached = True
            i = _find(T, mask, bk0[b], bk1[b])
            if i >= 0 and T[i, 2] > 0:  # (a duplicate's second victim: the count left with the first)
                v = T[i, 2]
                T[i, 2] = 0
                if ghost_cap > 0:
                    if T[i, 3] == 0:
                        c[C_GN] += 1
                    T[i, 3] = v
                    c[C_SEQ] += 1
                    T[i, 4] = c[C_SEQ]
                    if c[C_RTAIL] - c[C_RHEAD] == cap:
                        _ring_compact(rk0, rk1, rseq, T, mask, c)
                    q = c[C_RTAIL] % cap
                    rk0[q], rk1[q], rseq[q] = bk0[b], bk1[b], c[C_SEQ]
                    c[C_RTAIL] += 1
                else:
                    _maybe_free(T, mask, c, i)
    if cached:
        while c[C_GN] > ghost_cap:  # the least recently evicted leave (stale ring entries skipped)
            q = c[C_RHEAD] % cap
            c[C_RHEAD] += 1
            i = _find(T, mask, rk0[q], rk1[q])
            if i >= 0 and T[i, 3] > 0 and T[i, 4] == rseq[q]:
                T[i, 3] = 0
                T[i, 4] = 0
                c[C_GN] -= 1
                _maybe_free(T, mask, c, i)


@_jit
def k_release(cached, hashless, admit, score, inn, ordr, hs, hk, hb, bk0, bk1, T, mask, min_count, c):
    """PolicyRuntime.release: admission and score per cached block (count, 1 if unknown), pushed into the
    heap with a new release order; hashless blocks on top of the stack (hashless[0] on top)."""
    for j in range(cached.shape[0]):
        b = cached[j]
        i = _find(T, mask, bk0[b], bk1[b])
        v = T[i, 2] if i >= 0 and T[i, 2] > 0 else 1
        admit[j] = v >= min_count
        score[j] = v
        c[C_ORDER] += 1
        o = c[C_ORDER]
        ordr[b] = o
        if c[C_HN] == hk.shape[0]:
            c[C_HN] = _h_compact(hk, hb, c[C_HN], inn, ordr)
        m = c[C_HN]
        hk[m] = (TIER1 if v >= min_count else 0) | (min(v, CMAX) << OBITS) | o
        hb[m] = b
        c[C_HN] = m + 1
        _h_up(hk, hb, m)
        inn[b] = 1
    for j in range(hashless.shape[0] - 1, -1, -1):
        hs[c[C_HSN]] = hashless[j]
        c[C_HSN] += 1


# the order heap: one packed int64 key per entry, tier << 62 | count << 40 | release order (the order
# doubles as the entry's version: an entry is live iff its block is free and the order is the block's),
# beside the block id. (spfcore/sim/_replay_nb.py's heap keeps key, order, block and version in four arrays.)
OBITS = 40
OMASK = (1 << OBITS) - 1
CMAX = (1 << (62 - OBITS)) - 1  # counts above this would tie (the check asserts none reach it)


@_jit
def _h_down(hk, hb, j, n):
    x, xb = hk[j], hb[j]
    while True:
        l = 2 * j + 1
        if l >= n:
            break
        if l + 1 < n and hk[l + 1] < hk[l]:
            l += 1
        if hk[l] >= x:
            break
        hk[j], hb[j] = hk[l], hb[l]
        j = l
    hk[j], hb[j] = x, xb


@_jit
def _h_up(hk, hb, j):
    x, xb = hk[j], hb[j]
    while j > 0:
        p = (j - 1) >> 1
        if hk[p] <= x:
            break
        hk[j], hb[j] = hk[p], hb[p]
        j = p
    hk[j], hb[j] = x, xb


@_jit
def _h_pop(hk, hb, n):
    n -= 1
    hk[0], hb[0] = hk[n], hb[n]
    if n:
        _h_down(hk, hb, 0, n)
    return n


@_jit
def _h_compact(hk, hb, n, inn, ordr):
    m = 0
    for j in range(n):
        b = hb[j]
        if inn[b] and (hk[j] & OMASK) == ordr[b]:
            hk[m], hb[m] = hk[j], hb[j]
            m += 1
    for j in range(m // 2 - 1, -1, -1):
        _h_down(hk, hb, j, m)
    return m


class StateB:
    """Variant B's state: the key table, the ghost ring, the per-block arrays and the order heap."""

    def __init__(self, num_blocks=NUM_BLOCKS, ghost_factor=GHOST_FACTOR):
        self.ghost_cap = ghost_factor * num_blocks
        nslots = 1
        while nslots < 2 * (num_blocks + self.ghost_cap) + 64:  # load <= ~0.5 (counted + ghost keys)
            nslots *= 2
        self.mask = np.int64(nslots - 1)
        i64 = np.int64
        # one row per slot (one cache line: key's two words, count, ghost count, ghost sequence number, used)
        self.T = np.zeros((nslots, 6), i64)
        rcap = 2 * self.ghost_cap + 1024
        self.rk0, self.rk1, self.rseq = np.zeros(rcap, i64), np.zeros(rcap, i64), np.zeros(rcap, i64)
        self.bk0, self.bk1 = np.zeros(num_blocks, i64), np.zeros(num_blocks, i64)
        self.bhas = np.zeros(num_blocks, np.uint8)
        self.inn, self.ordr, self.hs = np.zeros(num_blocks, i64), np.zeros(num_blocks, i64), np.zeros(num_blocks, i64)
        hcap = 2 * num_blocks + 1024
        self.hk, self.hb = np.zeros(hcap, i64), np.zeros(hcap, i64)
        self.c = np.zeros(8, i64)
        self.out = np.zeros(num_blocks, i64)


def hkeys(hashes):
    """vLLM's 32-byte hashes of one batch -> (n, 2) int64 view (the first 128 bits; int64 rather than uint64
    only so the table's rows are one dtype: equality is all the table needs)."""
    return np.frombuffer(b"".join(hashes), np.int64).reshape(-1, 4)[:, :2]  # (int64: the table's words)


def convert_b(stream):
    """Pre-converted events for the kernels-only timing (and the conversion-only timing)."""
    i64 = np.int64
    out = []
    for ev in stream:
        e = ev[0]
        if e == "hit":
            out.append(("hit", None))  # the hit's keys: the adapter has them from the lookup (below)
        elif e == "touch":
            out.append(("touch", np.array(ev[1], i64)))
        elif e == "evict":
            out.append(("evict", ev[1]))
        elif e == "stored":
            out.append(("stored", np.array(ev[2], i64), hkeys(ev[3])))
        elif e == "release":
            out.append(("release", np.array(ev[1], i64), np.array(ev[2], i64)))
    return out


def hit_hashes(stream):
    """The hashes of each hit's blocks (what vLLM's lookup hands the adapter): the stored hash of each id."""
    cur = {}
    res = []
    for ev in stream:
        if ev[0] == "stored":
            for b, hsh in zip(ev[2], ev[3]):
                cur[b] = hsh
        elif ev[0] == "hit":
            res.append([cur[b] for b in ev[2]])
    return res


def run_b(stream, hits, check=None, pre=None, num_blocks=NUM_BLOCKS, ghost_factor=GHOST_FACTOR, noop=False,
          kinds=None, thrash=None):
    """Variant B over the stream: conversion + one kernel call per event. ``pre``: pre-converted
    events (kernels only). ``check``: (admits, scores, victims) lists to compare with."""
    s = StateB(num_blocks, ghost_factor)
    T, mask, c = s.T, s.mask, s.c
    inn, ordr, hs, hk, hb = s.inn, s.ordr, s.hs, s.hk, s.hb
    bk0, bk1, bhas, rk0, rk1, rseq, gcap, out = s.bk0, s.bk1, s.bhas, s.rk0, s.rk1, s.rseq, s.ghost_cap, s.out
    i64, empty = np.int64, np.empty
    admits, scores, victims = [], [], []
    # the initial release of every block as hashless (the simulator's rt.release([], range(1, N)))
    hi = 0
    perf = _now2
    if pre is None:
        paused = [0.0, 0.0]
        t0 = perf()
        for ev in stream:
            e = ev[0]
            if e == "arrived" and thrash is not None:
                _thrash(thrash, paused)
            elif e == "hit":
                k_hit(hkeys(hits[hi]) if hits[hi] else np.zeros((0, 2), np.int64), T, mask, c)
                hi += 1
            elif e == "touch":
                k_touch(np.array(ev[1], i64), inn)
            elif e == "evict":
                n = ev[1]
                k_evict(n, out, inn, ordr, hs, hk, hb, bk0, bk1, bhas, T, mask,
                        rk0, rk1, rseq, gcap, c)
                if check is not None:
                    victims.append(out[:n].tolist())
            elif e == "stored":
                k_stored(np.array(ev[2], i64), hkeys(ev[3]), bk0, bk1, bhas, T, mask, c)
            elif e == "release":
                ca = np.array(ev[1], i64)
                ad, sc = empty(len(ca), np.bool_), empty(len(ca), np.float64)
                k_release(ca, np.array(ev[2], i64), ad, sc, inn, ordr, hs, hk, hb, bk0, bk1, T, mask, MIN_COUNT, c)
                if check is not None and len(ca):
                    admits.append(ad)
                    scores.append(sc)
        dt = _minus(_since(t0), paused)
    else:
        pre_events, pre_hits = pre
        return _run_pre(pre_events, pre_hits, s, kinds, noop)
    return dt, s, (admits, scores, victims)


@_jit
def _noop(*args):
    return 0


def _run_pre(pre_events, pre_hits, s, kinds, noop):
    """The kernels on pre-converted events; ``noop``: the same calls, same arguments, to a kernel that
    does nothing (numba's dispatch cost: argument unboxing)."""
    fns = (_noop,) * 5 if noop else (k_hit, k_touch, k_evict, k_stored, k_release)
    k_hit_, k_touch_, k_evict_, k_stored_, k_release_ = fns
    T, mask, c = s.T, s.mask, s.c
    inn, ordr, hs, hk, hb = s.inn, s.ordr, s.hs, s.hk, s.hb
    bk0, bk1, bhas, rk0, rk1, rseq, gcap, out = s.bk0, s.bk1, s.bhas, s.rk0, s.rk1, s.rseq, s.ghost_cap, s.out
    empty = np.empty
    perf = _now2
    hi = 0
    if True:
        t0 = perf()
        for ev in pre_events:
            e = ev[0]
            if kinds is not None:
                tk = time.process_time()
            if e == "hit":
                k_hit_(pre_hits[hi], T, mask, c)
                hi += 1
            elif e == "touch":
                k_touch_(ev[1], inn)
            elif e == "evict":
                k_evict_(ev[1], out, inn, ordr, hs, hk, hb, bk0, bk1, bhas, T,
                        mask, rk0, rk1, rseq, gcap, c)
            elif e == "stored":
                k_stored_(ev[1], ev[2], bk0, bk1, bhas, T, mask, c)
            elif e == "release":
                ca = ev[1]
                ad, sc = empty(len(ca), np.bool_), empty(len(ca), np.float64)
                k_release_(ca, ev[2], ad, sc, inn, ordr, hs, hk, hb, bk0, bk1, T, mask,
                          MIN_COUNT, c)
            if kinds is not None:
                kinds[e] = kinds.get(e, 0.0) + time.process_time() - tk
        dt = _since(t0)
    return dt, s, None


def convert_only(stream, hits, hashes=True, ids=True):
    """Variant B's conversions alone: hashes -> (n, 2) int64 views, ids -> int64 arrays (and the release's
    two answer arrays); ``hashes`` / ``ids`` select the part."""
    i64 = np.int64
    hi = 0
    perf = _now2
    t0 = perf()
    for ev in stream:
        e = ev[0]
        if e == "hit":
            if hashes and hits[hi]:
                hkeys(hits[hi])
            hi += 1
        elif e == "touch":
            if ids:
                np.array(ev[1], i64)
        elif e == "stored":
            if ids:
                np.array(ev[2], i64)
            if hashes:
                hkeys(ev[3])
        elif e == "release":
            if ids:
                np.array(ev[1], i64)
                np.array(ev[2], i64)
                np.empty(len(ev[1]), np.bool_)
                np.empty(len(ev[1]), np.float64)
    return _since(t0)


# ------------------------------------------------------------------ B2: per-block entry ids
# B looks a key up in the table on every store, eviction and release (~1,500 random 48-byte rows a request
# of the seed's). B2 looks it up on store only: the table maps a key to an entry id (32-byte rows), each
# cached block keeps its entry's id (beid), and hits, evictions, releases and ghost trims go through it. An
# entry (key, count, ghost count, ghost sequence number, blocks holding it) is freed (its key deleted from
# the table, its id reused) once it has no count, no ghost count and no block.
E_K0, E_K1, E_CNT, E_GV, E_GSEQ, E_NBLK = range(6)
C2_NFREE = 8  # (after StateB's counters)


@_jit
def _t2_find(T, mask, k0, k1):
    i = k0 & mask
    while T[i, 3]:
        if T[i, 0] == k0 and T[i, 1] == k1:
            return i
        i = (i + 1) & mask
    return -1 - i


@_jit
def _t2_delete(T, mask, i):
    T[i, 3] = 0
    j = i
    while True:
        j = (j + 1) & mask
        if not T[j, 3]:
            return
        home = T[j, 0] & mask
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            T[i, 0], T[i, 1], T[i, 2], T[i, 3] = T[j, 0], T[j, 1], T[j, 2], 1
            T[j, 3] = 0
            i = j


@_jit
def _e_free(e, Ent, T, mask, free, c):
    if Ent[e, E_CNT] == 0 and Ent[e, E_GV] == 0 and Ent[e, E_NBLK] == 0:
        _t2_delete(T, mask, _t2_find(T, mask, Ent[e, E_K0], Ent[e, E_K1]))
        free[c[C2_NFREE]] = e
        c[C2_NFREE] += 1


@_jit
def k2_hit(ids, beid, Ent):
    """spfcore_blocks_hit, by the hit blocks' entries (a hit block is cached: it holds its key's entry)."""
    for j in range(ids.shape[0]):
        Ent[beid[ids[j]], E_CNT] += 1


@_jit
def k2_stored(ids, keys, beid, Ent, T, mask, free, c):
    for j in range(keys.shape[0]):
        k0, k1 = keys[j, 0], keys[j, 1]
        i = _t2_find(T, mask, k0, k1)
        if i >= 0:
            e = T[i, 2]
        else:
            i = -1 - i
            c[C2_NFREE] -= 1
            e = free[c[C2_NFREE]]
            T[i, 0], T[i, 1], T[i, 2], T[i, 3] = k0, k1, e, 1
            Ent[e, E_K0], Ent[e, E_K1] = k0, k1
            Ent[e, E_CNT] = Ent[e, E_GV] = Ent[e, E_GSEQ] = Ent[e, E_NBLK] = 0
        beid[ids[j]] = e
        Ent[e, E_NBLK] += 1
        if Ent[e, E_CNT] > 0:
            Ent[e, E_CNT] += 1
        else:
            g = Ent[e, E_GV]
            if g > 0:
                Ent[e, E_GV] = 0
                Ent[e, E_GSEQ] = 0
                c[C_GN] -= 1
            Ent[e, E_CNT] = g + 1


@_jit
def k2_evict(n, out, inn, ordr, hs, hk, hb, beid, Ent, T, mask, free, re, rseq, ghost_cap, c):
    cap = re.shape[0]
    cached = False
    for j in range(n):
        if c[C_HSN] > 0:
            c[C_HSN] -= 1
            b = hs[c[C_HSN]]
        else:
            while True:
                b, x = hb[0], hk[0] & OMASK
                c[C_HN] = _h_pop(hk, hb, c[C_HN])
                if inn[b] and x == ordr[b]:
                    break
            inn[b] = 0
        out[j] = b
        e = beid[b]
        if e >= 0:
            beid[b] = -1
            cached = True
            Ent[e, E_NBLK] -= 1
            v = Ent[e, E_CNT]
            if v > 0:
                Ent[e, E_CNT] = 0
                if ghost_cap > 0:
                    if Ent[e, E_GV] == 0:
                        c[C_GN] += 1
                    Ent[e, E_GV] = v
                    c[C_SEQ] += 1
                    Ent[e, E_GSEQ] = c[C_SEQ]
                    if c[C_RTAIL] - c[C_RHEAD] == cap:  # compact: keep the live ring entries, in order
                        h, t = c[C_RHEAD], c[C_RTAIL]
                        a0, a1 = np.empty(t - h, np.int64), np.empty(t - h, np.int64)
                        m = 0
                        for p in range(h, t):
                            q = p % cap
                            f = re[q]
                            if Ent[f, E_GV] > 0 and Ent[f, E_GSEQ] == rseq[q]:
                                a0[m], a1[m] = f, rseq[q]
                                m += 1
                        re[:m], rseq[:m] = a0[:m], a1[:m]
                        c[C_RHEAD], c[C_RTAIL] = 0, m
                    q = c[C_RTAIL] % cap
                    re[q], rseq[q] = e, c[C_SEQ]
                    c[C_RTAIL] += 1
                    continue
            _e_free(e, Ent, T, mask, free, c)
    if cached:
        while c[C_GN] > ghost_cap:
            q = c[C_RHEAD] % cap
            c[C_RHEAD] += 1
            e = re[q]
            if Ent[e, E_GV] > 0 and Ent[e, E_GSEQ] == rseq[q]:
                Ent[e, E_GV] = 0
                Ent[e, E_GSEQ] = 0
                c[C_GN] -= 1
                _e_free(e, Ent, T, mask, free, c)


@_jit
def k2_release(cached, hashless, admit, score, inn, ordr, hs, hk, hb, beid, Ent, min_count, c):
    for j in range(cached.shape[0]):
        b = cached[j]
        v = Ent[beid[b], E_CNT]
        if v <= 0:
            v = 1
        admit[j] = v >= min_count
        score[j] = v
        c[C_ORDER] += 1
        o = c[C_ORDER]
        ordr[b] = o
        if c[C_HN] == hk.shape[0]:
            c[C_HN] = _h_compact(hk, hb, c[C_HN], inn, ordr)
        m = c[C_HN]
        hk[m] = (TIER1 if v >= min_count else 0) | (min(v, CMAX) << OBITS) | o
        hb[m] = b
        c[C_HN] = m + 1
        _h_up(hk, hb, m)
        inn[b] = 1
    for j in range(hashless.shape[0] - 1, -1, -1):
        hs[c[C_HSN]] = hashless[j]
        c[C_HSN] += 1


class StateB2:
    def __init__(self, num_blocks=NUM_BLOCKS, ghost_factor=GHOST_FACTOR):
        i64 = np.int64
        self.ghost_cap = ghost_factor * num_blocks
        ne = 2 * num_blocks + self.ghost_cap + 64  # counted (<= blocks + a batch) + ghosts + blocks' refs
        nslots = 1
        while nslots < 2 * ne:
            nslots *= 2
        self.mask = np.int64(nslots - 1)
        self.T = np.zeros((nslots, 4), i64)  # key's two words, entry id, used
        self.Ent = np.zeros((ne, 6), i64)
        self.free = np.arange(ne - 1, -1, -1, dtype=i64)  # a stack of free entry ids
        self.beid = np.full(num_blocks, -1, i64)
        rcap = 2 * self.ghost_cap + 1024
        self.re, self.rseq = np.zeros(rcap, i64), np.zeros(rcap, i64)
        self.inn, self.ordr, self.hs = np.zeros(num_blocks, i64), np.zeros(num_blocks, i64), np.zeros(num_blocks, i64)
        hcap = 2 * num_blocks + 1024
        self.hk, self.hb = np.zeros(hcap, i64), np.zeros(hcap, i64)
        self.c = np.zeros(9, i64)
        self.c[C2_NFREE] = ne
        self.out = np.zeros(num_blocks, i64)


def run_b2(stream, check=False, num_blocks=NUM_BLOCKS, ghost_factor=GHOST_FACTOR, thrash=None):
    """B2 over the stream (hits by block ids, as the adapter has them from the lookup)."""
    s = StateB2(num_blocks, ghost_factor)
    T, mask, c, Ent, free, beid = s.T, s.mask, s.c, s.Ent, s.free, s.beid
    inn, ordr, hs, hk, hb, re, rseq, gcap, out = s.inn, s.ordr, s.hs, s.hk, s.hb, s.re, s.rseq, s.ghost_cap, s.out
    i64, empty = np.int64, np.empty
    admits, scores, victims = [], [], []
    paused = [0.0, 0.0]
    t0 = _now2()
    for ev in stream:
        e = ev[0]
        if e == "arrived":
            if thrash is not None:
                _thrash(thrash, paused)
        elif e == "hit":
            if ev[2]:
                k2_hit(np.array(ev[2], i64), beid, Ent)
        elif e == "touch":
            k_touch(np.array(ev[1], i64), inn)
        elif e == "evict":
            n = ev[1]
            k2_evict(n, out, inn, ordr, hs, hk, hb, beid, Ent, T, mask, free, re, rseq, gcap, c)
            if check:
                victims.append(out[:n].tolist())
        elif e == "stored":
            k2_stored(np.array(ev[2], i64), hkeys(ev[3]), beid, Ent, T, mask, free, c)
        elif e == "release":
            ca = np.array(ev[1], i64)
            ad, sc = empty(len(ca), np.bool_), empty(len(ca), np.float64)
            k2_release(ca, np.array(ev[2], i64), ad, sc, inn, ordr, hs, hk, hb, beid, Ent, MIN_COUNT, c)
            if check and len(ca):
                admits.append(ad)
                scores.append(sc)
    return _minus(_since(t0), paused), s, (admits, scores, victims)


# ------------------------------------------------------------------ B from vLLM-like block objects
class Block:
    """A stand-in for vLLM's ``KVCacheBlock`` (a slotted dataclass; ``block_hash`` a property over
    ``_block_hash``, as vLLM 0.24 has it)."""

    __slots__ = ("block_id", "ref_cnt", "_block_hash", "prev_free_block", "next_free_block", "is_null")

    def __init__(self, i):
        self.block_id, self.ref_cnt, self._block_hash = i, 0, None
        self.prev_free_block = self.next_free_block = None
        self.is_null = False

    @property
    def block_hash(self):
        return self._block_hash


def blocks_stream(stream):
    """The stream with block objects where the adapter has them (stored, release: the blocks; hit: the
    request's block hashes, as vLLM's lookup has them), for :func:`run_b_blocks`."""
    pool = [Block(i) for i in range(NUM_BLOCKS)]
    out = []
    for ev in stream:
        e = ev[0]
        if e == "stored":
            bl = [pool[i] for i in ev[2]]
            for b, h in zip(bl, ev[3]):
                b._block_hash = h
            out.append(("stored", bl))
        elif e == "release":
            out.append(("release", [pool[i] for i in ev[1]], [pool[i] for i in ev[2]]))
        elif e == "touch":
            out.append(("touch", [pool[i] for i in ev[1]]))
        elif e == "evict":
            out.append(("evict", ev[1]))
        elif e == "hit":
            out.append(("hit",))
        elif e == "arrived":
            out.append(("arrived",))
    return out, pool


def run_b_blocks(bstream, pool, hits, thrash=None):
    """Variant B as an adapter would run it: ids and hashes read off the block objects per batch
    (``map(attrgetter)`` into ``np.fromiter`` / ``b"".join``), victims handed back as block objects."""
    from operator import attrgetter
    get_id, get_hash = attrgetter("block_id"), attrgetter("block_hash")
    s = StateB()
    T, mask, c = s.T, s.mask, s.c
    inn, ordr, hs, hk, hb = s.inn, s.ordr, s.hs, s.hk, s.hb
    bk0, bk1, bhas, rk0, rk1, rseq, gcap, out = s.bk0, s.bk1, s.bhas, s.rk0, s.rk1, s.rseq, s.ghost_cap, s.out
    i64, empty, fromiter, join, frombuffer = np.int64, np.empty, np.fromiter, b"".join, np.frombuffer
    pget = pool.__getitem__
    z = np.zeros((0, 2), np.int64)
    hi = 0
    paused = [0.0, 0.0]
    t0 = _now2()
    for ev in bstream:
        e = ev[0]
        if e == "arrived":
            if thrash is not None:
                _thrash(thrash, paused)
        elif e == "hit":
            h = hits[hi]
            k_hit(frombuffer(join(h), i64).reshape(-1, 4)[:, :2] if h else z, T, mask, c)
            hi += 1
        elif e == "touch":
            bl = ev[1]
            k_touch(fromiter(map(get_id, bl), i64, len(bl)), inn)
        elif e == "evict":
            n = ev[1]
            k_evict(n, out, inn, ordr, hs, hk, hb, bk0, bk1, bhas, T, mask, rk0, rk1, rseq, gcap, c)
            list(map(pget, out[:n].tolist()))  # the victims as block objects
        elif e == "stored":
            bl = ev[1]
            k_stored(fromiter(map(get_id, bl), i64, len(bl)),
                     frombuffer(join(map(get_hash, bl)), i64).reshape(-1, 4)[:, :2], bk0, bk1, bhas, T, mask, c)
        elif e == "release":
            cb, hl = ev[1], ev[2]
            ca = fromiter(map(get_id, cb), i64, len(cb))
            ad, sc = empty(len(ca), np.bool_), empty(len(ca), np.float64)
            k_release(ca, fromiter(map(get_id, hl), i64, len(hl)), ad, sc, inn, ordr, hs, hk, hb, bk0, bk1, T,
                      mask, MIN_COUNT, c)
    return _minus(_since(t0), paused)


# ------------------------------------------------------------------ 4. check and time
def check(stream, num_blocks, ghost_factor, label):
    """Assert that B's admission flags, scores and victims equal A's over the whole stream."""
    options = None if ghost_factor == GHOST_FACTOR else {"ghost_factor": str(ghost_factor)}
    hits = hit_hashes(stream)
    admits_a, scores_a, rt = a_answers(stream, num_blocks, options)
    victims_a = [ev[3] for ev in stream if ev[0] == "evict"]
    _, s, (admits_b, scores_b, victims_b) = run_b(stream, hits, check=True, num_blocks=num_blocks,
                                                  ghost_factor=ghost_factor)
    assert len(admits_a) == len(admits_b) == len(scores_a) == len(scores_b), (len(admits_a), len(admits_b))
    for x, y in zip(admits_a, admits_b):
        assert np.array_equal(x, y)
    for x, y in zip(scores_a, scores_b):
        assert np.array_equal(x, y)
    assert max((x.max() for x in scores_a if len(x)), default=0) < CMAX  # (the packed heap key holds counts)
    assert victims_a == victims_b
    _, s2, (ad2, sc2, vi2) = run_b2(stream, check=True, num_blocks=num_blocks, ghost_factor=ghost_factor)
    assert len(ad2) == len(admits_a) and all(map(np.array_equal, admits_a, ad2))
    assert all(map(np.array_equal, scores_a, sc2)) and vi2 == victims_a
    pol = next(p for p in rt.pm.get_plugins() if isinstance(p, spfcore_frequency.FrequencyPolicy))
    live = np.setdiff1d(np.arange(len(s2.Ent)), s2.free[:s2.c[C2_NFREE]])
    assert len(live) == int(s2.T[:, 3].sum()) == len(pol.count.keys() | pol.ghost.keys())
    assert int((s2.Ent[live, E_GV] > 0).sum()) == len(pol.ghost) and int((s2.Ent[live, E_CNT] > 0).sum()) == len(pol.count)
    assert pol.ghost_cap == s.ghost_cap
    occ = s.T[:, 5].astype(bool)  # (a vacated slot keeps stale values)
    gv, cnt = s.T[occ, 3], s.T[occ, 2]
    assert int((gv > 0).sum()) == len(pol.ghost) == s.c[C_GN], (int((gv > 0).sum()), len(pol.ghost))
    assert int((cnt > 0).sum()) == len(pol.count)
    assert occ.sum() == len(pol.count.keys() | pol.ghost.keys())  # bounded: a slot per counted or ghost key
    nrel = sum(map(len, admits_a))
    nadm = int(sum(a.sum() for a in admits_a))
    nhit = sum(len(h) for h in hits)
    print(f"check ok [{label}]: {len(admits_a)} releases ({nrel} cached blocks, {nadm} admitted: flags and scores "
          f"equal), {len(victims_a)} evict calls (victims equal), {nhit} hit blocks, {rt.stats()['evictions']} "
          f"evictions; end: {len(pol.count)} counted, {len(pol.ghost)} ghosts (cap {s.ghost_cap}), "
          f"table {int(occ.sum())}/{len(occ)} slots")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--cold-rounds", type=int, default=5)
    ap.add_argument("--thrash-mb", type=int, default=64)
    a = ap.parse_args()
    t = time.perf_counter()
    stream, nreq, rec, nkeys = record_stream()
    counts = {e: sum(1 for ev in stream if ev[0] == e) for e in EVENTS}
    refs = sum(len(ev[3]) for ev in stream if ev[0] == "stored")
    print(f"stream: {nreq} requests, {len(stream)} runtime calls {counts}, {nkeys} distinct keys, "
          f"{refs} stored blocks, sim hit rate {rec['token_hit_rate']:.4f}, recorded in {time.perf_counter() - t:.1f} s")
    hits = hit_hashes(stream)
    t = time.perf_counter()
    check(stream, NUM_BLOCKS, GHOST_FACTOR, "seed workload, 3561 blocks, ghost_factor 4")
    print(f"(B compiled + checked in {time.perf_counter() - t:.1f} s)")
    # streams that exercise what the seed's does not: hits, ghost counts coming back, the ghost cap binding
    small = dict(SEED_WL, personas=4, prefix_tokens=2048)
    for nb, gf in ((600, 1), (600, 0), (900, 4)):
        st, _, rc, _ = record_stream(small, nb, None if gf == GHOST_FACTOR else {"ghost_factor": str(gf)})
        check(st, nb, gf, f"4 personas x 2048 tokens, {nb} blocks, ghost_factor {gf}, hit rate "
                          f"{rc['token_hit_rate']:.3f}")

    pre = (convert_b(stream), [hkeys(h) if h else np.zeros((0, 2), np.int64) for h in hits])
    run_b(stream, hits, pre=pre, noop=True)  # compile the no-op's signatures
    bstream, pool = blocks_stream(stream)
    run_b_blocks(bstream, pool, hits)
    keys = ("A", "A_hooks", "B", "B_conv", "B_hash", "B_kern", "B_disp", "B_blocks", "B2")
    per = {k: [] for k in keys}  # per pass: (wall s, CPU s)
    for r in range(a.rounds):
        order = ["A", "B", "B_conv", "B_hash", "B_kern", "B_disp", "B_blocks", "B2"]
        if r % 2:
            order.reverse()
        for v in order:
            if v == "A":
                dt, rta = run_a(stream)
                per["A"].append(dt)
                per["A_hooks"].append((rta.hook_seconds, float("nan")))
            elif v == "B":
                per["B"].append(run_b(stream, hits)[0])
            elif v == "B_conv":
                per["B_conv"].append(convert_only(stream, hits))
            elif v == "B2":
                per["B2"].append(run_b2(stream)[0])
            elif v == "B_blocks":
                per["B_blocks"].append(run_b_blocks(bstream, pool, hits))
            elif v == "B_hash":
                per["B_hash"].append(convert_only(stream, hits, ids=False))
            elif v == "B_kern":
                per["B_kern"].append(run_b(stream, hits, pre=pre)[0])
            else:
                per["B_disp"].append(run_b(stream, hits, pre=pre, noop=True)[0])
        u = 1e6 / nreq
        print(f"round {r:2d} wall (cpu) us/req: A {per['A'][-1][0] * u:6.1f} ({per['A'][-1][1] * u:6.1f}) "
              f"hooks {per['A_hooks'][-1][0] * u:6.1f} | B {per['B'][-1][0] * u:6.1f} ({per['B'][-1][1] * u:6.1f}) "
              f"conv {per['B_conv'][-1][0] * u:5.1f} kern {per['B_kern'][-1][0] * u:6.1f} "
              f"disp {per['B_disp'][-1][0] * u:5.1f} B' {per['B_blocks'][-1][0] * u:6.1f} B2 {per['B2'][-1][0] * u:6.1f} | A/B {per['A'][-1][0] / per['B'][-1][0]:4.1f}x "
              f"({per['A'][-1][1] / per['B'][-1][1]:4.1f}x)")
    best = {}  # per event kind, kernels only, CPU time (timed per call), best of 5
    for _ in range(5):
        kinds = {}
        run_b(stream, hits, pre=pre, kinds=kinds)
        for k, x in kinds.items():
            best[k] = min(best.get(k, x), x)
    u = 1e6 / nreq
    print(f"\n{'us per request':<38}{'wall min':>9}{'median':>8}{'cpu min':>9}{'median':>8}")
    names = {"A": "A  runtime + FrequencyPolicy (today)", "A_hooks": "   of which hook time (wall)",
             "B": "B  conversion + kernels", "B_conv": "   conversion only (hashes, ids)",
             "B_hash": "     of which hashes only",
             "B_kern": "   kernels only (pre-converted)", "B_disp": "   dispatch only (no-op kernels)",
             "B_blocks": "B' B from block objects (adapter-like)",
             "B2": "B2 B, key lookups on store only"}
    for k in keys:
        w = [x[0] for x in per[k]]
        c = [x[1] for x in per[k]]
        cs = f"{min(c) * u:>9.1f}{statistics.median(c) * u:>8.1f}" if k != "A_hooks" else ""
        print(f"{names[k]:<38}{min(w) * u:>9.1f}{statistics.median(w) * u:>8.1f}{cs}")
    for j, lab in ((0, "wall"), (1, "cpu")):
        ratios = [x[j] / y[j] for x, y in zip(per["A"], per["B2"])]
        print(f"paired A/B2 per round ({lab}): {' '.join(f'{x:.1f}' for x in ratios)}; min {min(ratios):.1f}x, "
              f"median {statistics.median(ratios):.1f}x, max {max(ratios):.1f}x")
        ratios = [x[j] / y[j] for x, y in zip(per["A"], per["B"])]
        print(f"paired A/B per round ({lab}): {' '.join(f'{x:.1f}' for x in ratios)}; min {min(ratios):.1f}x, "
              f"median {statistics.median(ratios):.1f}x, max {max(ratios):.1f}x")
    if a.cold_rounds:
        buf = np.zeros(a.thrash_mb << 20, np.uint8)
        cold = {"A": [], "B": [], "B_blocks": [], "B2": []}
        for r in range(a.cold_rounds):
            order = ["A", "B", "B_blocks", "B2"] if r % 2 == 0 else ["B2", "B_blocks", "B", "A"]
            for v in order:
                if v == "A":
                    cold["A"].append(run_a(stream, thrash=buf)[0])
                elif v == "B":
                    cold["B"].append(run_b(stream, hits, thrash=buf)[0])
                elif v == "B2":
                    cold["B2"].append(run_b2(stream, thrash=buf)[0])
                else:
                    cold["B_blocks"].append(run_b_blocks(bstream, pool, hits, thrash=buf))
        print(f"\ncold: {a.thrash_mb} MiB written before each request (untimed), {a.cold_rounds} interleaved rounds")
        for k in cold:
            w = [x[0] for x in cold[k]]
            c = [x[1] for x in cold[k]]
            print(f"{names[k]:<38}{min(w) * u:>9.1f}{statistics.median(w) * u:>8.1f}{min(c) * u:>9.1f}"
                  f"{statistics.median(c) * u:>8.1f}")
        for bv in ("B", "B2"):
            ratios = [x[1] / y[1] for x, y in zip(cold["A"], cold[bv])]
            print(f"paired A/{bv} per round (cpu, cold): {' '.join(f'{x:.1f}' for x in ratios)}; "
                  f"median {statistics.median(ratios):.1f}x")
    ncalls = sum(counts[e] for e in ("hit", "touch", "evict", "stored", "release"))
    print(f"B: {ncalls} kernel calls ({ncalls / nreq:.1f} per request); kernels by event (CPU, best of 5, us/req): "
          + ", ".join(f"{k} {x * u:.1f}" for k, x in sorted(best.items())))


if __name__ == "__main__":
    sys.exit(main())
