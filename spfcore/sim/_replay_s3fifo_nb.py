"""The sequential replay of the classic ``s3fifo`` arm
(:class:`spfcore_classic.s3fifo.S3FIFO`, policy-ordered mode) as one
numba-compiled loop over int arrays: the same model, the same decisions and
the same counts as :func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with that plugin's hooks
(:class:`spfcore_classic._base.ClassicPolicy`'s event mapping and walk).

Imported by the simulator on the first compiled ``s3fifo`` replay only (see
:mod:`spfcore.sim._replay_nb` for why numba is loaded late). The pool
(``key_of``, ``kh``/``kt``, ``dn``/``dp``, ``hs``, counters ``c``) is
:mod:`spfcore.sim._replay_nb`'s; the chain bookkeeping (``par_of``, ``kids``,
``fr``) and the rings are :mod:`spfcore.sim._replay_classic_nb`'s.

The policy's state, over block ids and key ids instead of ids and hashes:

* the small and main FIFO queues (``S3FIFO.small`` / ``main``, ParkingRings):
  rings ``SMALL`` and ``MAIN`` of one block ring set (``rn``/``rp``/``rg``/``rl``);
  the parking only saves passes (the victims and orders are the plain walk's,
  :func:`spfcore.sim._replay_classic_nb.walk`, which is what this does);
* the ghost FIFO of evicted hashes (``S3FIFO.ghost``, an ``OrderedDict``
  bounded by ``ghost_cap`` entries, :func:`spfcore_classic._base.fifo_add`):
  ring 0 of a key ring set (``gn``/``gp``/``gg``/``gl``), over key ids;
* ``freq[B]``: a resident block's count (``S3FIFO.freq``);
* ``fg[K]``: the request stamp of the hashes found in the ghost at that
  request's miss (``S3FIFO.from_ghost``: cleared at every ``on_miss``, so a
  stamp of an older request means "not in it"; a hash taken out of it by an
  insertion gets -1);
* scalars ``pc``: ``SMALL_CAP``, ``MAIN_CAP``, ``GHOST_CAP`` (blocks,
  entries), ``THR`` (``move_to_main_threshold``), ``HAS_EVICTED``, ``STAMP``.

Runtime order per request (as :func:`spfcore.sim._replay_nb.replay`, with the
hooks of ``ClassicPolicy``): arrival hook (counted), lookup, hit hook
(``on_hits`` of the hit blocks, ``on_miss`` of the request's other block
keys), touch (hit blocks leave ``fr``), allocation (hashless blocks first,
then one ``spfcore_evict_blocks`` call for the cached victims: each
``victim()``, its key and parent count dropped at once as the plugin does),
store hook (new full prompt blocks: ``on_inserts`` deepest first), decode
(store one block, allocate one), release (cached blocks back in ``fr``,
hashless ones on top of the stack).
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.sim import _replay_classic_nb as cl
from spfcore.sim._replay_nb import EVICT_CALLS, EVICTIONS, HSN, LRUN, NVICT, _insert, _lookup, _retire, init, warm_trace

#: More counter indices (after ``_replay_nb``'s first five): hook calls, the block a lookup found
#: twice, the request a status names, victims found by the copies exception (``_victim_among_copies``),
#: walks that passed blocks over (their block not the queue's first: in use or a parent).
HOOK_CALLS, TWICE, AT, COPIES, PASSED = range(5, 10)
NCOUNTERS = 10
#: :func:`replay_s3fifo` status: done, a request too big, a lookup found a block twice, no evictable block (a bug).
DONE, TOO_BIG, FOUND_TWICE, NO_VICTIM = range(4)
#: Block rings: the small and the main queue.
SMALL, MAIN = 0, 1
#: Policy scalars ``pc``.
SMALL_CAP, MAIN_CAP, GHOST_CAP, THR, HAS_EVICTED, STAMP = range(6)

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _ghost_add(k, gn, gp, gg, gl, cap):
    """``fifo_add(ghost, k, cap)``: key id ``k`` joins the ghost FIFO unless it is there,
    the oldest entries beyond ``cap`` dropped."""
    if gg[k] >= 0:
        return
    cl.r_append(gn, gp, gg, gl, 0, k)
    while gl[0] > cap:
        cl.r_remove(gn, gp, gg, gl, cl.r_first(gn, 1, 0))


@_jit
def _evict_small(rn, rp, rg, rl, freq, fr, key_of, kids, kh, kt, copies, gn, gp, gg, gl, pc, c):
    """``S3FIFO._evict_small``: walk the small queue; a block hit at least ``THR`` times moves to
    the main queue (count 0), the first other one is the victim (its hash to the ghost). -1: none."""
    thr = pc[THR]
    while rl[SMALL]:
        x = rn[SMALL]
        i = cl.walk(rn, rp, 2, SMALL, fr, key_of, kids, kh, kt, copies)
        if i < 0:
            return -1
        if i + 2 != x:
            c[PASSED] += 1
        cl.r_remove(rn, rp, rg, rl, i)
        if freq[i] >= thr:
            cl.r_append(rn, rp, rg, rl, MAIN, i)
            freq[i] = 0
        else:
            if pc[GHOST_CAP]:
                _ghost_add(key_of[i], gn, gp, gg, gl, pc[GHOST_CAP])
            return i
    return -1


@_jit
def _evict_main(rn, rp, rg, rl, freq, fr, key_of, kids, kh, kt, copies, c):
    """``S3FIFO._evict_main``: walk the main queue; a block with a positive count is re-inserted
    with ``min(count, 3) - 1``, the first with count 0 is the victim. -1: none."""
    while rl[MAIN]:
        x = rn[MAIN]
        i = cl.walk(rn, rp, 2, MAIN, fr, key_of, kids, kh, kt, copies)
        if i < 0:
            return -1
        if i + 2 != x:
            c[PASSED] += 1
        f = freq[i]
        if f >= 1:
            cl.r_move_to_end(rn, rp, rg, rl, i)
            freq[i] = (f if f < 3 else 3) - 1
        else:
            cl.r_remove(rn, rp, rg, rl, i)
            return i
    return -1


@_jit
def _victim(rn, rp, rg, rl, freq, fr, key_of, kids, kh, kt, copies, gn, gp, gg, gl, pc, c):
    """``S3FIFO.victim``: the main queue first when it holds more than its share or the small
    queue is empty, else the small queue (then the main queue). -1: no evictable block."""
    pc[HAS_EVICTED] = 1
    if rl[MAIN] > pc[MAIN_CAP] or rl[SMALL] == 0:
        i = _evict_main(rn, rp, rg, rl, freq, fr, key_of, kids, kh, kt, copies, c)
        if i >= 0:
            return i
    i = _evict_small(rn, rp, rg, rl, freq, fr, key_of, kids, kh, kt, copies, gn, gp, gg, gl, pc, c)
    if i < 0:
        i = _evict_main(rn, rp, rg, rl, freq, fr, key_of, kids, kh, kt, copies, c)
    return i


@_jit
def _alloc(n, blocks, at, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, freq, rn, rp, rg, rl, gn, gp, gg, gl, pc, c,
           victims):
    """``PolicyRuntime.evict(n)`` into ``blocks[at:]``: hashless blocks first, then (one
    ``spfcore_evict_blocks`` call) the policy's victims, each leaving its parent's count and
    the prefix cache at once (``ClassicPolicy.spfcore_evict_blocks``; the copies exception
    ``_victim_among_copies`` when no free block is a leaf). False: no evictable block (a bug)."""
    c[EVICT_CALLS] += 1
    got = 0
    while c[HSN] > 0 and got < n:
        c[HSN] -= 1
        b = hs[c[HSN]]
        blocks[at + got] = b
        _retire(b, key_of, kh, kt, dn, dp, c, victims)
        got += 1
    if got < n:
        c[HOOK_CALLS] += 1
        for j in range(got, n):
            i = _victim(rn, rp, rg, rl, freq, fr, key_of, kids, kh, kt, False, gn, gp, gg, gl, pc, c)
            if i < 0:
                i = _victim(rn, rp, rg, rl, freq, fr, key_of, kids, kh, kt, True, gn, gp, gg, gl, pc, c)
                if i < 0:
                    return False
                c[COPIES] += 1
            fr[i] = 0
            c[LRUN] -= 1
            cl.unparent(i, par_of, kids)
            _retire(i, key_of, kh, kt, dn, dp, c, victims)
            blocks[at + j] = i
    return True


@_jit
def _stored(blocks, lo, n, parent, keys, k0, key_of, kh, kt, dn, dp, par_of, kids, freq, fg, rn, rp, rg, rl, pc, c):
    """``PolicyRuntime.stored`` of ``blocks[lo:lo + n]`` with keys ``keys[k0:k0 + n]``, the
    first one's parent key ``parent`` (-1: none): the blocks cached, one stored call
    (``ClassicPolicy.spfcore_blocks_stored``: parents counted; ``S3FIFO.on_inserts`` deepest
    first: count 0, to the main queue if its hash was found in the ghost, or before the first
    eviction once the small queue is full, else to the small queue)."""
    for j in range(n):
        b = blocks[lo + j]
        k = keys[k0 + j]
        _insert(b, k, key_of, kh, kt, dn, dp)
        cl.stored(b, parent, key_of, par_of, kids)
        freq[b] = 0
        parent = k
    c[HOOK_CALLS] += 1
    stamp = pc[STAMP]
    for j in range(n - 1, -1, -1):
        b = blocks[lo + j]
        k = keys[k0 + j]
        if fg[k] == stamp:
            fg[k] = -1
            cl.r_append(rn, rp, rg, rl, MAIN, b)
        elif not pc[HAS_EVICTED] and rl[SMALL] >= pc[SMALL_CAP]:
            cl.r_append(rn, rp, rg, rl, MAIN, b)
        else:
            cl.r_append(rn, rp, rg, rl, SMALL, b)


@_jit
def replay_s3fifo(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, key_of, kh, kt, dn, dp, hs, par_of,
                  kids, fr, freq, fg, rn, rp, rg, rl, gn, gp, gg, gl, pc, c, blocks, hits, victims):
    """Replay requests ``r = 0 .. len(n_prompt)-1`` (the request arrays of
    :func:`spfcore.sim._replay_nb.replay`) under ``s3fifo``. Writes ``hits[r]``; appends every
    victim to ``victims`` unless it is empty; ``blocks``: scratch of at least ``max(n_total)``.

    Returns:
        A status: ``DONE``; ``TOO_BIG`` (request ``c[AT]`` needs more blocks than are free,
        nothing of it replayed); ``FOUND_TWICE`` (request ``c[AT]``'s lookup found block
        ``c[TWICE]`` twice, after its hit hook, where the reference loop's touch raises);
        ``NO_VICTIM`` (no evictable block even among copies: the plugin raises, a bug).
    """
    for r in range(len(n_prompt)):
        f0 = bk_off[r]
        f1 = bk_off[r + 1]
        nf = nf_[r]
        np_, nt = n_prompt[r], n_total[r]
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        if nt > c[HSN] + c[LRUN]:
            c[AT] = r
            return TOO_BIG
        c[HOOK_CALLS] += 2  # spfcore_request_arrived, spfcore_blocks_hit
        for j in range(h):  # on_hits
            freq[blocks[j]] += 1
        pc[STAMP] += 1  # on_miss: from_ghost cleared, the missed keys found in the ghost join it
        stamp = pc[STAMP]
        if gl[0]:
            for j in range(f0 + h, f1):
                k = bk[j]
                if gg[k] >= 0:
                    cl.r_remove(gn, gp, gg, gl, k)
                    fg[k] = stamp
        for j in range(h):  # touch: they leave the free set (a block met twice is not free: KeyError)
            b = blocks[j]
            if not fr[b]:
                c[TWICE] = b
                c[AT] = r
                return FOUND_TWICE
            fr[b] = 0
            c[LRUN] -= 1
        if not _alloc(np_ - h, blocks, h, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, freq, rn, rp, rg, rl,
                      gn, gp, gg, gl, pc, c, victims):
            c[AT] = r
            return NO_VICTIM
        if nf > h:
            _stored(blocks, h, nf - h, bk[f0 + h - 1] if h else -1, bk, f0 + h, key_of, kh, kt, dn, dp, par_of,
                    kids, freq, fg, rn, rp, rg, rl, pc, c)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        done = nf
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            nf_all = nf + nd
            parent = bk[f0 + nf - 1] if nf else -1
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    _stored(blocks, done, 1, parent, dk, d0 + done - nf, key_of, kh, kt, dn, dp, par_of, kids,
                            freq, fg, rn, rp, rg, rl, pc, c)
                    parent = dk[d0 + done - nf]
                    done += 1
                if j < nt:
                    if not _alloc(1, blocks, nb_, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, freq, rn, rp, rg, rl,
                                  gn, gp, gg, gl, pc, c, victims):
                        c[AT] = r
                        return NO_VICTIM
                    nb_ += 1
        # release: the cached blocks free again, the hashless ones on top of the stack (the last on top)
        for j in range(done):
            fr[blocks[j]] = 1
        c[LRUN] += done
        for j in range(done, nb_):
            hs[c[HSN]] = blocks[j]
            c[HSN] += 1
        hits[r] = h
    return DONE


# ------------------------------------------------------------ the kernel protocol (simulator.KERNELS)
def params_of(rt) -> tuple | None:
    """``(small_cap, main_cap, ghost_cap, move_to_main_threshold)`` of ``rt``'s configured
    :class:`spfcore_classic.s3fifo.S3FIFO` (the class itself, no hook called yet), or ``None``
    where this replay does not stand in (a subclass, a used instance)."""
    from spfcore_classic.s3fifo import S3FIFO

    inst = next(iter(rt.pm.get_plugins()))
    if type(inst) is not S3FIFO or inst.has_evicted or inst.key or inst.freq or inst.ghost:
        return None
    thr = inst.params.move_to_main_threshold
    if type(thr) is not int or thr < 1:
        return None
    big = 2**62
    return (min(int(inst.small_cap), big), min(int(inst.main_cap), big), min(int(inst.ghost_cap), big), min(thr, big))


def ghost_cap(st: dict) -> int:
    """Key ids the state may name beyond the cached blocks' and their parents': the ghost FIFO's bound."""
    return int(st["pc"][GHOST_CAP])


def new_state(num_blocks: int, params: tuple, nkeys: int = 0) -> dict:
    """A fresh state of a pool of ``num_blocks`` blocks (null block included), every usable block
    hashless and free, ``params`` (:func:`params_of`), room for ``nkeys`` key ids.

    Returns:
        A dict of int64 arrays (``B`` = ``num_blocks``, ``K`` = key ids): per block ``key_of``,
        ``dn``/``dp``, ``hs`` (the pool, :mod:`spfcore.sim._replay_nb`), ``par_of`` (parent key
        id, -1), ``fr`` (free cached), ``freq`` (count); the block rings ``rn``/``rp`` (``2 + B``),
        ``rg`` (``B``), ``rl`` (2); per key id ``kh``/``kt`` (int32), ``kids`` (cached children),
        ``fg`` (from-ghost stamp); the ghost ring ``gn``/``gp`` (``1 + K``), ``gg`` (``K``),
        ``gl`` (1); ``pc`` the policy scalars; ``c`` the counters."""
    i64 = np.int64
    st = {}
    st["key_of"], st["dn"], st["dp"], st["par_of"] = (np.full(num_blocks, -1, i64) for _ in range(4))
    st["hs"], st["fr"], st["freq"] = (np.zeros(num_blocks, i64) for _ in range(3))
    st["rn"], st["rp"], st["rg"], st["rl"] = cl.r_new(2, num_blocks)
    st["kh"], st["kt"] = np.full(nkeys, -1, np.int32), np.full(nkeys, -1, np.int32)
    st["kids"], st["fg"] = np.zeros(nkeys, i64), np.full(nkeys, -1, i64)
    st["gn"], st["gp"], st["gg"], st["gl"] = cl.r_new(1, nkeys)
    pc = np.zeros(6, i64)
    pc[SMALL_CAP], pc[MAIN_CAP], pc[GHOST_CAP], pc[THR] = params
    st["pc"] = pc
    c = np.zeros(NCOUNTERS, i64)
    init(num_blocks, np.zeros(num_blocks, i64), np.zeros(num_blocks, i64), st["hs"], c)
    st["c"] = c
    return st


def grow(st: dict, nkeys: int) -> None:
    """Room for key ids below ``nkeys`` (doubling)."""
    have = len(st["kh"])
    if nkeys <= have:
        return
    n = max(nkeys, 2 * have, 1024)
    g = n - have
    st["kh"] = np.concatenate([st["kh"], np.full(g, -1, np.int32)])
    st["kt"] = np.concatenate([st["kt"], np.full(g, -1, np.int32)])
    st["kids"] = np.concatenate([st["kids"], np.zeros(g, np.int64)])
    st["fg"] = np.concatenate([st["fg"], np.full(g, -1, np.int64)])
    st["gn"], st["gp"], st["gg"], st["gl"] = cl.r_grow((st["gn"], st["gp"], st["gg"], st["gl"]), n)


_ARGS = ("key_of", "kh", "kt", "dn", "dp", "hs", "par_of", "kids", "fr", "freq", "fg", "rn", "rp", "rg", "rl",
         "gn", "gp", "gg", "gl", "pc", "c")


def run(st: dict, flat: tuple, first_arrival: int, hits: np.ndarray, victims: np.ndarray) -> int:
    """Replay one chunk (:func:`spfcore.sim.simulator._flatten`'s arrays, key ids below
    ``len(st["kh"])``) into ``hits`` and ``victims`` (empty: not recorded); returns
    :func:`replay_s3fifo`'s status (``first_arrival``: unused, the policy reads no clock)."""
    n_total = flat[7]
    if not len(n_total):
        return DONE
    blocks = np.empty(int(n_total.max()), np.int64)
    status = replay_s3fifo(*flat, *(st[a] for a in _ARGS), blocks, hits, victims)
    if status == NO_VICTIM:
        raise cl.no_victim('s3fifo', st, 's3fifo: no evictable block')
    return status


def keep_keys(st: dict) -> np.ndarray:
    """Per key id, whether the state still names it: cached, on the ghost FIFO, or the parent
    of a cached block."""
    return (st["kh"] >= 0) | (st["gg"] >= 0) | (st["kids"] > 0)


def remap(st: dict, keep: np.ndarray) -> np.ndarray:
    """Renumber the key ids ``keep`` marks densely from 0 (in order) and forget the others
    (between calls; decisions do not depend on the labels; the ghost FIFO's order kept).
    Returns the old -> new map (-1: forgotten)."""
    old = np.flatnonzero(keep)
    m = len(old)
    size = len(keep)
    km = np.full(size, -1, np.int64)
    km[old] = np.arange(m)
    for name in ("key_of", "par_of"):
        a = st[name]
        held = a >= 0
        a[held] = km[a[held]]
    for name, fill in (("kh", -1), ("kt", -1), ("kids", 0)):
        a = np.full(size, fill, st[name].dtype)
        a[:m] = st[name][old]
        st[name] = a
    st["fg"] = np.full(size, -1, np.int64)  # (from_ghost: cleared at the next request's miss before any use)
    st["gn"], st["gp"], st["gg"], st["gl"] = cl.r_remap((st["gn"], st["gp"], st["gg"], st["gl"]), km, size)
    return km


def warm() -> None:
    """Call the kernel once on a tiny replay with the argument types the simulator uses:
    compiles it (or loads numba's on-disk cache) now."""
    trace, _ = warm_trace()
    nb = 8
    st = new_state(nb, (0, 8, 7, 2), 4)
    i64 = np.int64
    run(st, trace, 0, np.empty(2, i64), np.empty(8, i64))
    keep_keys(st)
