"""The sequential replay of the classic ``twoq`` arm
(:class:`spfcore_classic.twoq.TwoQ`, policy-ordered mode) as one
numba-compiled loop over int arrays: the same model, the same decisions and
the same counts as :func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with the plugin's hooks and the
policy-ordered evictor (:class:`spfcore.evictor.Evictor`, ``ordered``).

Pool: :mod:`spfcore.sim._replay_nb`'s (``key_of``, ``kh``/``kt``,
``dn``/``dp``, the hashless stack ``hs``, counters ``c``); chain state and
the orders: :mod:`spfcore.sim._replay_classic_nb` (``par_of``, ``kids``,
``fr``; two rings over block ids, :data:`AIN` and :data:`AM`, and one ring
over key ids, :data:`AOUT`).

The policy (``TwoQ``), rule by rule:

* ``ain`` (FIFO of new blocks, first = oldest) is block ring :data:`AIN`,
  ``am`` (LRU, first = least recently used) block ring :data:`AM`; ``aout``
  (the ghost FIFO of hashes, an ``OrderedDict``, first = oldest) is key ring
  :data:`AOUT` (``kn``/``kp``/``krg``/``krl``) over key ids;
  ``from_ghost`` (a set of hashes) is ``fg[k]`` (1: in it) with the list
  ``fgl[:c[NFG]]`` of the key ids set since it was last cleared;
* ``on_hits`` (the hit blocks deepest first): each one in ``am`` moves to its
  MRU end;
* ``on_miss`` (the request's prompt keys past the hits): ``from_ghost``
  cleared, then each key in ``aout`` leaves it and joins ``from_ghost``;
* ``on_inserts`` (new blocks deepest first, also each decode block): a block
  whose key is in ``from_ghost`` takes it out and enters ``am``, the others
  enter ``ain`` (``from_ghost`` is cleared only by the next ``on_miss``, so a
  decode block may still find its key there);
* ``victim`` (:func:`_victim`): while ``ain`` holds more than ``ain_cap``
  blocks, its first evictable block (``ClassicPolicy.walk``:
  :func:`~spfcore.sim._replay_classic_nb.walk`, the blocks passed over to the
  newest end); else, or if it has none, ``am``'s; else ``ain``'s; a block
  taken from ``ain`` leaves its key in ``aout`` (``_from_ain``, ``fifo_add``:
  unless there already, appended, the oldest dropped beyond ``aout_cap``;
  nothing when ``aout_cap`` is 0). With no evictable block anywhere
  (``NoEvictable``: the failed walks changed nothing)
  ``ClassicPolicy._victim_among_copies`` tries again with the keys held by two
  or more cached blocks counted as leaves (``copies``).

The walks' memory of the plugin (``ClassicPolicy._stuck``, kept across calls
for ``twoq``: ``memo_across_calls``) only saves passes: the same victims and
orders as the plain walk done here.

Runtime order per request: as :mod:`spfcore.sim._replay_sieve_nb` (arrival
hook; lookup; hit hook, ``on_hits`` then ``on_miss``; touch; allocation:
hashless first, then one ``spfcore_evict_blocks`` call, each victim's key
dropped and its parent's count decremented before the next is chosen; store
hook; decode; release). Hook calls counted: arrival, hit, each store, each
eviction call that takes cached blocks.

State: a dict of arrays (:func:`new_state`), key ids grown by :func:`grow`
and renumbered between calls by :func:`remap`.
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.sim import _replay_classic_nb as cl
from spfcore.sim._replay_classic_nb import (r_append, r_first, r_grow, r_move_to_end, r_new, r_remap, r_remove,
                                            stored, unparent, walk)
from spfcore.sim._replay_nb import EVICT_CALLS, HSN, LRUN, NVICT, _insert, _lookup, _retire, init, warm_trace

#: More counter indices (after ``_replay_nb``'s first five): hook calls, the
#: block a lookup found twice, the request a status names, victims found by
#: the copies exception (``ClassicPolicy._victim_among_copies`` calls), key
#: ids in ``fgl``.
HOOK_CALLS, TWICE, AT, COPIES, NFG = range(5, 10)
NCOUNTERS = 10
#: :func:`replay_twoq` status: done, a request too big, a lookup found a
#: block twice, no evictable block even among copies.
DONE, TOO_BIG, FOUND_TWICE, NO_VICTIM = range(4)
#: The block rings: A1in, Am (``R`` = 2); the key ring: A1out (``R`` = 1).
AIN, AM = 0, 1
AOUT = 0
#: Parameters ``ip``: A1in's share in blocks, A1out's bound in keys (``TwoQ.ain_cap``, ``aout_cap``).
AIN_CAP, AOUT_CAP = range(2)

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _from_ain(i, key_of, rn, rp, rg, rl, kn, kp, krg, krl, ip):
    """``TwoQ._from_ain``: block ``i`` leaves A1in, its key enters A1out
    (``fifo_add``: unless there, at the newest end, the oldest dropped beyond
    the bound)."""
    r_remove(rn, rp, rg, rl, i)
    cap = ip[AOUT_CAP]
    if cap:
        k = key_of[i]
        if krg[k] < 0:
            r_append(kn, kp, krg, krl, AOUT, k)
            while krl[AOUT] > cap:
                r_remove(kn, kp, krg, krl, r_first(kn, 1, AOUT))
    return i


@_jit
def _victim(rn, rp, rg, rl, kn, kp, krg, krl, fr, key_of, kids, kh, kt, ip, copies):
    """``TwoQ.victim`` (see the module): the victim's block id, taken out of
    its ring, or -1 (``NoEvictable``, nothing changed)."""
    R = 2
    if rl[AIN] > ip[AIN_CAP]:
        i = walk(rn, rp, R, AIN, fr, key_of, kids, kh, kt, copies)
        if i >= 0:
            return _from_ain(i, key_of, rn, rp, rg, rl, kn, kp, krg, krl, ip)
    i = walk(rn, rp, R, AM, fr, key_of, kids, kh, kt, copies)
    if i >= 0:
        r_remove(rn, rp, rg, rl, i)
        return i
    i = walk(rn, rp, R, AIN, fr, key_of, kids, kh, kt, copies)
    if i < 0:
        return -1
    return _from_ain(i, key_of, rn, rp, rg, rl, kn, kp, krg, krl, ip)


@_jit
def _alloc(n, blocks, at, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, rn, rp, rg, rl, kn, kp, krg, krl, ip, c,
           victims):
    """``PolicyRuntime.evict(n)`` into ``blocks[at:at + n]``: hashless blocks
    first (the stack's top), then one ``spfcore_evict_blocks`` call for the
    rest (``ClassicPolicy.spfcore_evict_blocks``: per victim ``victim()``,
    else the copies exception; its parent's count down; its key dropped).
    Returns False if no evictable block was found."""
    c[EVICT_CALLS] += 1
    got = 0
    while c[HSN] > 0 and got < n:
        c[HSN] -= 1
        b = hs[c[HSN]]
        _retire(b, key_of, kh, kt, dn, dp, c, victims)
        blocks[at + got] = b
        got += 1
    if got < n:
        c[HOOK_CALLS] += 1
        while got < n:
            b = _victim(rn, rp, rg, rl, kn, kp, krg, krl, fr, key_of, kids, kh, kt, ip, False)
            if b < 0:
                c[COPIES] += 1
                b = _victim(rn, rp, rg, rl, kn, kp, krg, krl, fr, key_of, kids, kh, kt, ip, True)
                if b < 0:
                    return False
            fr[b] = 0
            c[LRUN] -= 1
            unparent(b, par_of, kids)
            _retire(b, key_of, kh, kt, dn, dp, c, victims)
            blocks[at + got] = b
            got += 1
    return True


@_jit
def _store(blocks, lo, n, parent, keys, k0, key_of, kh, kt, dn, dp, par_of, kids, fg, rn, rp, rg, rl, c):
    """``PolicyRuntime.stored`` of ``blocks[lo:lo + n]`` with key ids
    ``keys[k0:k0 + n]``, the first one's parent key id ``parent`` (-1: none):
    the blocks cached, one store call (``ClassicPolicy.spfcore_blocks_stored``:
    parents counted; ``TwoQ.on_inserts``, deepest first: a key in
    ``from_ghost`` leaves it and its block enters Am, the others A1in)."""
    c[HOOK_CALLS] += 1
    for j in range(n):
        b = blocks[lo + j]
        k = keys[k0 + j]
        _insert(b, k, key_of, kh, kt, dn, dp)
        stored(b, parent, key_of, par_of, kids)
        parent = k
    for j in range(n - 1, -1, -1):
        b = blocks[lo + j]
        k = keys[k0 + j]
        if fg[k]:
            fg[k] = 0
            r_append(rn, rp, rg, rl, AM, b)
        else:
            r_append(rn, rp, rg, rl, AIN, b)


@_jit
def replay_twoq(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, ip, key_of, kh, kt, dn, dp, hs, par_of, kids,
                fr, fg, fgl, rn, rp, rg, rl, kn, kp, krg, krl, c, blocks, hits, victims):
    """Replay requests ``r = 0 .. len(n_prompt)-1`` (the request arrays of
    :func:`spfcore.sim._replay_nb.replay`) under ``twoq`` (parameters ``ip``).
    Writes ``hits[r]``; appends every victim to ``victims`` unless it is
    empty; ``blocks``: scratch of at least ``max(n_total)`` entries; ``fgl``
    room for any request's prompt keys.

    Returns:
        A status: ``DONE``; ``TOO_BIG``: request ``c[AT]`` needs more blocks
        than are free, nothing of it replayed; ``FOUND_TWICE``: request
        ``c[AT]``'s lookup found block ``c[TWICE]`` twice (after its hit
        hook); ``NO_VICTIM``: request ``c[AT]`` found no evictable block.
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
        for j in range(h - 1, -1, -1):  # TwoQ.on_hits, deepest first
            b = blocks[j]
            if rg[b] == AM:
                r_move_to_end(rn, rp, rg, rl, b)
        for j in range(c[NFG]):  # TwoQ.on_miss: from_ghost cleared, the missed keys in A1out join it
            fg[fgl[j]] = 0
        c[NFG] = 0
        if krl[AOUT]:
            for j in range(f0 + h, f1):
                k = bk[j]
                if krg[k] >= 0:
                    r_remove(kn, kp, krg, krl, k)
                    fg[k] = 1
                    fgl[c[NFG]] = k
                    c[NFG] += 1
        for j in range(h):  # touch: the hit blocks leave the free set
            b = blocks[j]
            if not fr[b]:
                c[TWICE] = b
                c[AT] = r
                return FOUND_TWICE
            fr[b] = 0
            c[LRUN] -= 1
        if not _alloc(np_ - h, blocks, h, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, rn, rp, rg, rl, kn, kp, krg,
                      krl, ip, c, victims):
            c[AT] = r
            return NO_VICTIM
        if nf > h:
            _store(blocks, h, nf - h, bk[f0 + h - 1] if h else -1, bk, f0 + h, key_of, kh, kt, dn, dp, par_of, kids,
                   fg, rn, rp, rg, rl, c)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        done = nf
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            nf_all = nf + nd
            parent = bk[f0 + nf - 1] if nf else -1
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    _store(blocks, done, 1, parent, dk, d0 + done - nf, key_of, kh, kt, dn, dp, par_of, kids, fg,
                           rn, rp, rg, rl, c)
                    parent = dk[d0 + done - nf]
                    done += 1
                if j < nt:
                    if not _alloc(1, blocks, nb_, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, rn, rp, rg, rl, kn,
                                  kp, krg, krl, ip, c, victims):
                        c[AT] = r
                        return NO_VICTIM
                    nb_ += 1
        # release: the cached blocks (0 .. done-1) free again, the hashless ones on the stack (the last on top)
        for j in range(done):
            fr[blocks[j]] = 1
        c[LRUN] += done
        for j in range(done, nb_):
            hs[c[HSN]] = blocks[j]
            c[HSN] += 1
        hits[r] = h
    return DONE


def params_of(rt) -> tuple | None:
    """The kernel protocol's parameters (see :data:`spfcore.sim.simulator.KERNELS`):
    ``(ain_cap, aout_cap)`` of ``rt``'s policy (``TwoQ.configure``'s, from its
    ``a_in_size_ratio`` and ``a_out_size_ratio``) if it is the plugin's own
    :class:`~spfcore_classic.twoq.TwoQ` (not a subclass) with no hook but
    ``spfcore_cache_configured`` called yet and both bounds ints ``>= 0``,
    else ``None`` (the hooks run). A bound is capped at ``2**62`` (int64):
    neither list can hold that many entries (A1in holds blocks, A1out
    distinct key ids), so the capped bound decides as the plugin's."""
    from spfcore_classic.twoq import TwoQ

    plugins = rt.pm.get_plugins()
    inst = next(iter(plugins)) if len(plugins) == 1 else None
    if type(inst) is not TwoQ or inst.key or inst.n_req or inst.ain or inst.am or inst.aout:
        return None
    a, b = inst.ain_cap, inst.aout_cap
    if type(a) is not int or type(b) is not int or a < 0 or b < 0:
        return None
    big = 2**62
    return min(a, big), min(b, big)


def ghost_cap(st: dict) -> int:
    """Key ids the state may name beyond the cached ones': A1out's bound."""
    return int(st["ip"][AOUT_CAP])


def new_state(num_blocks: int, params: tuple, nkeys: int = 0) -> dict:
    """A fresh state for :func:`replay_twoq` of a pool of ``num_blocks``
    blocks (null block included), every usable block hashless and free,
    ``params = (ain_cap, aout_cap)`` (:func:`params_of`), room for ``nkeys``
    key ids (:func:`grow` adds more).

    Returns:
        A dict of int64 arrays, ``B`` = ``num_blocks``, ``K`` = key ids:
        ``ip`` the parameters; per block ``key_of``, ``par_of`` (key id,
        parent key id; -1 none), ``dn``/``dp``/``hs`` (the pool's lists,
        :mod:`spfcore.sim._replay_nb`), ``fr`` (1: a free cached block); per
        key id ``kh``/``kt`` (int32: its cached blocks' list), ``kids`` (cached
        blocks it is the parent of), ``fg`` (1: in ``from_ghost``); ``fgl``
        the key ids set in ``fg`` since it was cleared (``c[NFG]`` of them);
        the block rings ``rn``/``rp`` (``2 + B``), ``rg`` (``B``), ``rl`` (2);
        the key ring ``kn``/``kp`` (``1 + K``), ``krg`` (``K``), ``krl`` (1);
        ``c`` the counters."""
    i64 = np.int64
    st = {"ip": np.array([int(params[0]), int(params[1])], i64)}
    st["key_of"], st["dn"], st["dp"], st["par_of"] = (np.full(num_blocks, -1, i64) for _ in range(4))
    st["hs"], st["fr"] = (np.zeros(num_blocks, i64) for _ in range(2))
    st["kh"], st["kt"] = np.full(nkeys, -1, np.int32), np.full(nkeys, -1, np.int32)
    st["kids"], st["fg"] = np.zeros(nkeys, i64), np.zeros(nkeys, i64)
    st["fgl"] = np.zeros(64, i64)
    st["rn"], st["rp"], st["rg"], st["rl"] = r_new(2, num_blocks)
    st["kn"], st["kp"], st["krg"], st["krl"] = r_new(1, nkeys)
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
    st["fg"] = np.concatenate([st["fg"], np.zeros(g, np.int64)])
    st["kn"], st["kp"], st["krg"], st["krl"] = r_grow((st["kn"], st["kp"], st["krg"], st["krl"]), have + g)


_ARGS = ("ip", "key_of", "kh", "kt", "dn", "dp", "hs", "par_of", "kids", "fr", "fg", "fgl", "rn", "rp", "rg", "rl",
         "kn", "kp", "krg", "krl", "c")


def run(st: dict, flat: tuple, first_arrival: int, hits: np.ndarray, victims: np.ndarray) -> int:
    """Replay one chunk (:func:`spfcore.sim.simulator._flatten`'s arrays,
    key ids below ``len(st["kh"])``) into ``hits`` (per request, hit blocks)
    and ``victims`` (empty: not recorded); ``first_arrival`` is not read
    (no decision depends on it).

    Returns:
        :func:`replay_twoq`'s status, but ``NO_VICTIM``.

    Raises:
        spfcore.runtime.PolicyError: no evictable block, not even among
            copies (keys that repeat within a prompt can make every free
            block a parent): the plugin's ``NoEvictable`` as the runtime
            reports it.
    """
    n_total = flat[7]
    if not len(n_total):
        return DONE
    blocks = np.empty(int(n_total.max()), np.int64)
    longest = int(np.diff(flat[1]).max())
    if longest > len(st["fgl"]):  # room for one prompt's keys (kept: from_ghost lives on to the next request)
        fgl = np.zeros(max(longest, 2 * len(st["fgl"])), np.int64)
        fgl[: len(st["fgl"])] = st["fgl"]
        st["fgl"] = fgl
    status = replay_twoq(*flat, *(st[a] for a in _ARGS), blocks, hits, victims)
    if status == NO_VICTIM:
        raise cl.no_victim("twoq", st, "2q: no evictable block")
    return status


def keep_keys(st: dict) -> np.ndarray:
    """Per key id, whether the state still names it: cached, the parent of a
    cached block (``kids``) or in A1out. (``from_ghost`` is read only by the
    stores of the request whose hit hook filled it: between chunks it is
    dead, and :func:`remap` clears it.)"""
    keep = (st["kh"] >= 0) | (st["kids"] > 0) | (st["krg"] >= 0)
    par = st["par_of"][st["key_of"] >= 0]
    keep[par[par >= 0]] = True
    return keep


def remap(st: dict, keep: np.ndarray) -> np.ndarray:
    """Renumber the key ids ``keep`` marks densely from 0 (in order) and
    forget the others (between calls; decisions do not depend on the
    labels; A1out keeps its order; ``from_ghost`` cleared, as the next
    request's ``on_miss`` clears it before any store reads it). Returns the
    old -> new map (-1: forgotten)."""
    old = np.flatnonzero(keep)
    m = len(old)
    km = np.full(len(keep), -1, np.int64)
    km[old] = np.arange(m)
    key_of = st["key_of"]
    held = key_of >= 0
    key_of[held] = km[key_of[held]]
    par = st["par_of"]
    par[~held] = -1
    p = par >= 0
    par[p] = km[par[p]]
    st["c"][NFG] = 0
    size = len(keep)
    st["fg"] = np.zeros(size, np.int64)
    for name, fill in (("kh", -1), ("kt", -1), ("kids", 0)):
        a = np.full(size, fill, st[name].dtype)
        a[:m] = st[name][old]
        st[name] = a
    st["kn"], st["kp"], st["krg"], st["krl"] = r_remap((st["kn"], st["kp"], st["krg"], st["krl"]), km, size)
    return km


def warm() -> None:
    """Call the kernel once on a tiny replay with the argument types the
    simulator uses: compiles it (or loads numba's on-disk cache) now."""
    trace, _ = warm_trace()
    st = new_state(8, (2, 4), 4)
    i64 = np.int64
    run(st, trace, 0, np.empty(2, i64), np.empty(8, i64))
    keep_keys(st)
