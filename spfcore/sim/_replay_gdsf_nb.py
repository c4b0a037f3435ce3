"""The sequential replay of the classic ``gdsf`` arm (:class:`spfcore_classic.gdsf.GDSF`,
policy-ordered mode) as one numba-compiled loop over int arrays: the same model, the same
decisions and the same counts as :func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with that plugin's hooks
(:class:`spfcore_classic._base.ClassicPolicy`'s event mapping).

The pool and the chain bookkeeping are :mod:`spfcore.sim._replay_nb`'s and
:mod:`spfcore.sim._replay_classic_nb`'s (as :mod:`spfcore.sim._replay_s3fifo_nb`). The
policy's state (``GDSF.L`` / ``freq`` / ``depth`` / ``entry`` / ``heap``):

* ``pf[0]``: ``L``, the aging value (float64, the last victim's priority);
* per block ``freq`` (hits since stored, plus one), ``depth`` (0-based chain position when
  stored), ``ver`` (the version of its live heap entry; bumped at every push and at eviction);
* a binary heap of entries ``(prio, n, -depth, block)`` in lexicographic order, as the
  plugin's tuples (``hp`` float64 ``L + freq * 1e6`` computed as Python does, ``hn`` the
  request number ``n_req`` at the push, ``hd`` ``-depth``, ``hb`` the block, ``hx`` its
  version: an entry whose version is not its block's is stale and skipped); stale entries
  are dropped when the heap is full (``GDSF.victim``'s compaction: it changes no decision,
  every live key being distinct);
* ``pc``: ``NREQ`` (``ClassicPolicy.n_req``), ``HN`` (heap entries).

``GDSF.victim``: the lowest live entry whose block is evictable (free, no cached child; the
copies exception of ``_victim_among_copies`` when none is); the live entries passed over are
pushed back; ``L`` becomes the victim's priority.
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.sim import _replay_classic_nb as cl
from spfcore.sim._replay_nb import EVICT_CALLS, EVICTIONS, HSN, LRUN, NVICT, _insert, _lookup, _retire, init, warm_trace

#: More counter indices (after ``_replay_nb``'s first five): hook calls, the block a lookup found
#: twice, the request a status names, victims found by the copies exception, live entries passed over.
HOOK_CALLS, TWICE, AT, COPIES, PASSED = range(5, 10)
NCOUNTERS = 10
#: :func:`replay_gdsf` status: done, a request too big, a lookup found a block twice, no evictable block (a bug).
DONE, TOO_BIG, FOUND_TWICE, NO_VICTIM = range(4)
#: Policy scalars ``pc``: requests arrived, heap entries.
NREQ, HN = range(2)

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _less(hp, hn, hd, hb, a, b):
    """Entry ``a`` before entry ``b`` (Python's tuple order of ``(prio, n, -depth, id)``)."""
    if hp[a] != hp[b]:
        return hp[a] < hp[b]
    if hn[a] != hn[b]:
        return hn[a] < hn[b]
    if hd[a] != hd[b]:
        return hd[a] < hd[b]
    return hb[a] < hb[b]


@_jit
def _swap(hp, hn, hd, hb, hx, a, b):
    hp[a], hp[b] = hp[b], hp[a]
    hn[a], hn[b] = hn[b], hn[a]
    hd[a], hd[b] = hd[b], hd[a]
    hb[a], hb[b] = hb[b], hb[a]
    hx[a], hx[b] = hx[b], hx[a]


@_jit
def _up(hp, hn, hd, hb, hx, j):
    while j > 0:
        p = (j - 1) >> 1
        if not _less(hp, hn, hd, hb, j, p):
            return
        _swap(hp, hn, hd, hb, hx, j, p)
        j = p


@_jit
def _down(hp, hn, hd, hb, hx, j, n):
    while True:
        m = 2 * j + 1
        if m >= n:
            return
        if m + 1 < n and _less(hp, hn, hd, hb, m + 1, m):
            m += 1
        if not _less(hp, hn, hd, hb, m, j):
            return
        _swap(hp, hn, hd, hb, hx, m, j)
        j = m


@_jit
def _compact(hp, hn, hd, hb, hx, n, ver):
    """Keep the live entries and re-heapify; returns the new size."""
    m = 0
    for j in range(n):
        b = hb[j]
        if hx[j] == ver[b]:
            hp[m], hn[m], hd[m], hb[m], hx[m] = hp[j], hn[j], hd[j], hb[j], hx[j]
            m += 1
    for j in range(m // 2 - 1, -1, -1):
        _down(hp, hn, hd, hb, hx, j, m)
    return m


@_jit
def _push(b, prio, n_req, d, ver, hp, hn, hd, hb, hx, pc):
    """Block ``b``'s new live entry ``(prio, n_req, -d, b)`` (its older ones stale)."""
    ver[b] += 1
    n = pc[HN]
    if n == len(hp):
        n = _compact(hp, hn, hd, hb, hx, n, ver)
    hp[n], hn[n], hd[n], hb[n], hx[n] = prio, n_req, -d, b, ver[b]
    pc[HN] = n + 1
    _up(hp, hn, hd, hb, hx, n)


@_jit
def _pop(hp, hn, hd, hb, hx, pc):
    """Take the heap's top entry to slot ``HN - 1`` (after the pop: just past the heap)."""
    n = pc[HN] - 1
    _swap(hp, hn, hd, hb, hx, 0, n)
    _down(hp, hn, hd, hb, hx, 0, n)
    pc[HN] = n
    return n


@_jit
def _victim(fr, key_of, kids, kh, kt, copies, ver, hp, hn, hd, hb, hx, sp, sn, sd, sb, sx, pf, pc, c):
    """``GDSF.victim``: the lowest live entry's block that is evictable (the live entries passed
    over pushed back, ``L`` its priority, its entry dropped), or -1 (none; nothing changed but
    stale entries dropped). ``sp``..``sx``: scratch for the entries passed over."""
    m = 0
    i = -1
    while pc[HN] > 0:
        t = _pop(hp, hn, hd, hb, hx, pc)
        b = hb[t]
        if hx[t] != ver[b]:
            continue  # stale
        if cl.evictable(b, fr, key_of, kids, kh, kt, copies):
            i = b
            pf[0] = hp[t]
            break
        sp[m], sn[m], sd[m], sb[m], sx[m] = hp[t], hn[t], hd[t], hb[t], hx[t]
        m += 1
    if m:
        c[PASSED] += m
    for j in range(m):  # pushed back (room: each came out of the heap)
        n = pc[HN]
        hp[n], hn[n], hd[n], hb[n], hx[n] = sp[j], sn[j], sd[j], sb[j], sx[j]
        pc[HN] = n + 1
        _up(hp, hn, hd, hb, hx, n)
    if i >= 0:
        ver[i] += 1  # its entry stale: GDSF forgets it
    return i


@_jit
def _alloc(n, blocks, at, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, ver, hp, hn, hd, hb, hx, sp, sn, sd, sb, sx,
           pf, pc, c, victims):
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
            i = _victim(fr, key_of, kids, kh, kt, False, ver, hp, hn, hd, hb, hx, sp, sn, sd, sb, sx, pf, pc, c)
            if i < 0:
                i = _victim(fr, key_of, kids, kh, kt, True, ver, hp, hn, hd, hb, hx, sp, sn, sd, sb, sx, pf, pc, c)
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
def _stored(blocks, lo, n, depth0, parent, keys, k0, key_of, kh, kt, dn, dp, par_of, kids, freq, depth, ver,
            hp, hn, hd, hb, hx, pf, pc, c):
    """``PolicyRuntime.stored`` of ``blocks[lo:lo + n]`` (depths ``depth0 ...``) with keys
    ``keys[k0:k0 + n]``, the first one's parent key ``parent`` (-1: none): the blocks cached,
    one stored call (``ClassicPolicy.spfcore_blocks_stored``: parents counted;
    ``GDSF.on_inserts``: count 1, entry ``(L + 1e6, n_req, -depth, id)``)."""
    for j in range(n):
        b = blocks[lo + j]
        k = keys[k0 + j]
        _insert(b, k, key_of, kh, kt, dn, dp)
        cl.stored(b, parent, key_of, par_of, kids)
        parent = k
    c[HOOK_CALLS] += 1
    prio = pf[0] + 1.0e6
    for j in range(n - 1, -1, -1):
        b = blocks[lo + j]
        freq[b] = 1
        depth[b] = depth0 + j
        _push(b, prio, pc[NREQ], depth0 + j, ver, hp, hn, hd, hb, hx, pc)


@_jit
def replay_gdsf(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, key_of, kh, kt, dn, dp, hs, par_of,
                kids, fr, freq, depth, ver, hp, hn, hd, hb, hx, sp, sn, sd, sb, sx, pf, pc, c, blocks, hits, victims):
    """Replay requests ``r = 0 .. len(n_prompt)-1`` (the request arrays of
    :func:`spfcore.sim._replay_nb.replay`) under ``gdsf``. Writes ``hits[r]``; appends every
    victim to ``victims`` unless it is empty; ``blocks``: scratch of at least ``max(n_total)``.

    Returns:
        A status: ``DONE``; ``TOO_BIG`` (request ``c[AT]`` needs more blocks than are free,
        nothing of it replayed); ``FOUND_TWICE`` (request ``c[AT]``'s lookup found block
        ``c[TWICE]`` twice, after its hit hook, where the reference loop's touch raises);
        ``NO_VICTIM`` (no evictable block even among copies: the plugin raises, a bug).
    """
    for r in range(len(n_prompt)):
        f0 = bk_off[r]
        nf = nf_[r]
        np_, nt = n_prompt[r], n_total[r]
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        if nt > c[HSN] + c[LRUN]:
            c[AT] = r
            return TOO_BIG
        c[HOOK_CALLS] += 2  # spfcore_request_arrived (n_req), spfcore_blocks_hit
        pc[NREQ] += 1
        L = pf[0]
        for j in range(h - 1, -1, -1):  # on_hits, deepest first
            b = blocks[j]
            f = freq[b] + 1
            freq[b] = f
            _push(b, L + f * 1.0e6, pc[NREQ], depth[b], ver, hp, hn, hd, hb, hx, pc)
        for j in range(h):  # touch: they leave the free set (a block met twice is not free: KeyError)
            b = blocks[j]
            if not fr[b]:
                c[TWICE] = b
                c[AT] = r
                return FOUND_TWICE
            fr[b] = 0
            c[LRUN] -= 1
        if not _alloc(np_ - h, blocks, h, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, ver, hp, hn, hd, hb, hx,
                      sp, sn, sd, sb, sx, pf, pc, c, victims):
            c[AT] = r
            return NO_VICTIM
        if nf > h:
            _stored(blocks, h, nf - h, h, bk[f0 + h - 1] if h else -1, bk, f0 + h, key_of, kh, kt, dn, dp, par_of,
                    kids, freq, depth, ver, hp, hn, hd, hb, hx, pf, pc, c)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        done = nf
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            nf_all = nf + nd
            parent = bk[f0 + nf - 1] if nf else -1
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    _stored(blocks, done, 1, done, parent, dk, d0 + done - nf, key_of, kh, kt, dn, dp, par_of, kids,
                            freq, depth, ver, hp, hn, hd, hb, hx, pf, pc, c)
                    parent = dk[d0 + done - nf]
                    done += 1
                if j < nt:
                    if not _alloc(1, blocks, nb_, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, ver, hp, hn, hd, hb,
                                  hx, sp, sn, sd, sb, sx, pf, pc, c, victims):
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
    """``()`` for ``rt``'s configured :class:`spfcore_classic.gdsf.GDSF` (the class itself, no
    hook called yet: GDSF has no parameters), or ``None`` (a subclass, a used instance)."""
    from spfcore_classic.gdsf import GDSF

    inst = next(iter(rt.pm.get_plugins()))
    if type(inst) is not GDSF or inst.L != 0.0 or inst.key or inst.freq or inst.heap:
        return None
    return ()


def ghost_cap(st: dict) -> int:
    """Key ids the state may name beyond the cached blocks' and their parents': none (no ghost)."""
    return 0


def new_state(num_blocks: int, params: tuple, nkeys: int = 0) -> dict:
    """A fresh state of a pool of ``num_blocks`` blocks (null block included), every usable block
    hashless and free, room for ``nkeys`` key ids.

    Returns:
        A dict of arrays (int64 unless said; ``B`` = ``num_blocks``, ``K`` = key ids, ``H`` = heap
        slots, ``4 B + 4096``): per block ``key_of``, ``dn``/``dp``, ``hs`` (the pool), ``par_of``
        (parent key id, -1), ``fr`` (free cached), ``freq``, ``depth``, ``ver``; the heap ``hp``
        (float64), ``hn``, ``hd``, ``hb``, ``hx`` (``H``) and its scratch ``sp``..``sx`` (``B``);
        per key id ``kh``/``kt`` (int32), ``kids``; ``pf`` (float64: ``L``), ``pc`` (``NREQ``,
        ``HN``); ``c`` the counters."""
    i64 = np.int64
    st = {}
    st["key_of"], st["dn"], st["dp"], st["par_of"] = (np.full(num_blocks, -1, i64) for _ in range(4))
    st["hs"], st["fr"], st["freq"], st["depth"], st["ver"] = (np.zeros(num_blocks, i64) for _ in range(5))
    cap = 4 * num_blocks + 4096
    st["hp"] = np.zeros(cap)
    st["hn"], st["hd"], st["hb"], st["hx"] = (np.zeros(cap, i64) for _ in range(4))
    st["sp"] = np.zeros(num_blocks)
    st["sn"], st["sd"], st["sb"], st["sx"] = (np.zeros(num_blocks, i64) for _ in range(4))
    st["kh"], st["kt"] = np.full(nkeys, -1, np.int32), np.full(nkeys, -1, np.int32)
    st["kids"] = np.zeros(nkeys, i64)
    st["pf"] = np.zeros(1)
    st["pc"] = np.zeros(2, i64)
    c = np.zeros(NCOUNTERS, i64)
    init(num_blocks, np.zeros(num_blocks, i64), np.zeros(num_blocks, i64), st["hs"], c)
    st["c"] = c
    return st


def grow(st: dict, nkeys: int) -> None:
    """Room for key ids below ``nkeys`` (doubling)."""
    have = len(st["kh"])
    if nkeys <= have:
        return
    g = max(nkeys, 2 * have, 1024) - have
    st["kh"] = np.concatenate([st["kh"], np.full(g, -1, np.int32)])
    st["kt"] = np.concatenate([st["kt"], np.full(g, -1, np.int32)])
    st["kids"] = np.concatenate([st["kids"], np.zeros(g, np.int64)])


_ARGS = ("key_of", "kh", "kt", "dn", "dp", "hs", "par_of", "kids", "fr", "freq", "depth", "ver", "hp", "hn", "hd",
         "hb", "hx", "sp", "sn", "sd", "sb", "sx", "pf", "pc", "c")


def run(st: dict, flat: tuple, first_arrival: int, hits: np.ndarray, victims: np.ndarray) -> int:
    """Replay one chunk (:func:`spfcore.sim.simulator._flatten`'s arrays, key ids below
    ``len(st["kh"])``) into ``hits`` and ``victims`` (empty: not recorded); returns
    :func:`replay_gdsf`'s status (``first_arrival``: unused, the policy counts its requests)."""
    n_total = flat[7]
    if not len(n_total):
        return DONE
    blocks = np.empty(int(n_total.max()), np.int64)
    status = replay_gdsf(*flat, *(st[a] for a in _ARGS), blocks, hits, victims)
    if status == NO_VICTIM:
        raise cl.no_victim('gdsf', st, 'gdsf: no evictable block')
    return status


def keep_keys(st: dict) -> np.ndarray:
    """Per key id, whether the state still names it: cached, or the parent of a cached block."""
    return (st["kh"] >= 0) | (st["kids"] > 0)


def remap(st: dict, keep: np.ndarray) -> np.ndarray:
    """Renumber the key ids ``keep`` marks densely from 0 (in order) and forget the others
    (between calls; decisions do not depend on the labels). Returns the old -> new map."""
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
    return km


def warm() -> None:
    """Call the kernel once on a tiny replay with the argument types the simulator uses:
    compiles it (or loads numba's on-disk cache) now."""
    trace, _ = warm_trace()
    nb = 8
    st = new_state(nb, (), 4)
    i64 = np.int64
    run(st, trace, 0, np.empty(2, i64), np.empty(8, i64))
    keep_keys(st)
