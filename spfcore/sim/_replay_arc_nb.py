"""The sequential replay of the ``arc`` arm (``spfcore_classic.arc.ARC``, the
classic plugin's ARC in policy-ordered mode) as one numba-compiled loop over
int arrays: the same decisions and the same counts as
:func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with the plugin's hooks (see
:mod:`spfcore_classic._base` for the chain mapping and :mod:`spfcore_classic.arc`
for the algorithm).

A :data:`spfcore.sim.simulator.KERNELS` module. The pool (per-key block lists
``key_of``/``kh``/``kt``/``dn``/``dp``, hashless stack ``hs``, counters ``c``)
is :mod:`spfcore.sim._replay_nb`'s; the chain bookkeeping (``par_of``,
``kids``, ``fr``) and the rings are :mod:`spfcore.sim._replay_classic_nb`'s.
The plugin's structures, over ints instead of hashes and block ids:

* T1 and T2 (``ARC.t1`` / ``ARC.t2``, LRU end first): rings 0 and 1 of one
  block ring set ``br`` (elements: block ids ``0 .. B-1``);
* B1 and B2 (``ARC.b1`` / ``ARC.b2``, ghost lists of evicted hashes, oldest
  first): ring 0 of two key ring sets ``g1`` / ``g2`` (elements: key ids); a
  key may be on both (a hash stored again by a decode step, which no lookup
  saw, is not taken off its ghost list), so each has its own set;
* ``ARC.p`` (a float, the adaptive target for T1's size): ``pf[P]``, the same
  float64 arithmetic as the Python (``len(b2) / len(b1)`` is an int division
  to float64, correctly rounded in both; ``min``/``max`` with the ints ``c``,
  ``0`` and ``1`` give the same values);
* ``ARC.ghost_hit``: ``pc[GH]``; ``ARC.from_ghost`` (the keys of this request's
  prompt that missed on a ghost, not yet inserted): ``fg[k] == pc[STAMP]``
  (a stamp per request, bumped by each ``on_miss``).

The plugin's walk memory (``ClassicPolicy._stuck``) only saves passes; the
walks here are the plain walk (:func:`spfcore.sim._replay_classic_nb.walk`):
the same victims, and the same orders after them.

Runtime order per request (:func:`spfcore.sim.simulator._run_sequential`,
policy-ordered mode of :class:`spfcore.evictor.Evictor`): arrival hook (one
call), lookup, hit hook (``on_hits`` of the hit blocks deepest first, then
``on_miss`` of the prompt's other block keys), touch (hit blocks leave the
free set), allocation (hashless blocks first; for the rest one
``spfcore_evict_blocks`` call, victims one by one, each leaving ``kids`` /
the pool at once), store hook (new full prompt blocks: ``on_inserts``
deepest first), decode (store one block, allocate one), release (the cached
blocks become free, the hashless ones go on top of the stack).
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.sim import _replay_classic_nb as cl
from spfcore.sim._replay_classic_nb import r_append, r_grow, r_new, r_remap, r_remove, stored, unparent, walk
from spfcore.sim._replay_nb import (EVICT_CALLS, EVICTIONS, HSN, LRUN, NCOUNTERS, NVICT, _insert, _lookup,  # noqa: F401
                                    _retire, init, warm_trace)

#: More counter indices (after ``_replay_nb``'s first five): hook calls, the block a lookup
#: found twice, the request a status names, victims found by the copies rule
#: (``ClassicPolicy._victim_among_copies``).
HOOK_CALLS, TWICE, AT, COPIES = range(NCOUNTERS, NCOUNTERS + 4)
NCOUNTERS_A = NCOUNTERS + 4
#: :func:`replay_arc` status: done, a request too big, a lookup found a block twice, no evictable
#: block (the plugin raises ``NoEvictable``: a policy bug).
DONE, TOO_BIG, FOUND_TWICE, NO_VICTIM = range(4)
#: Policy scalars ``pc`` (int64): ghost hit of this request (0, 1: B1, 2: B2), the request stamp of
#: ``fg``, the capacity ``c`` (``num_blocks``, as the plugin's ``configure``). Floats ``pf``: ``p``.
GH, STAMP, CAP = range(3)
P = 0
#: Block rings: T1, T2.
T1, T2 = 0, 1

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _on_hits(blocks, h, brn, brp, brg, brl):
    """``ARC.on_hits`` of ``blocks[:h]`` (depth order; deepest first here): a
    T1 block moves to T2's MRU end, a T2 block to its MRU end."""
    for j in range(h - 1, -1, -1):
        b = blocks[j]
        r_remove(brn, brp, brg, brl, b)
        r_append(brn, brp, brg, brl, T2, b)


@_jit
def _on_miss(bk, lo, hi, g1n, g1p, g1g, g1l, g2n, g2p, g2g, g2l, fg, pc, pf):
    """``ARC.on_miss`` of key ids ``bk[lo:hi]`` (the prompt's keys after its hits):
    each on B1 grows ``p``, each on B2 shrinks it, and leaves its ghost list."""
    pc[GH] = 0
    pc[STAMP] += 1
    s = pc[STAMP]
    c = pc[CAP]
    for j in range(lo, hi):
        k = bk[j]
        if g1g[k] >= 0:
            r = g2l[0] / g1l[0]
            p = pf[P] + (r if r >= 1.0 else 1.0)
            pf[P] = p if p <= c else float(c)
            r_remove(g1n, g1p, g1g, g1l, k)
            pc[GH] = 1
            fg[k] = s
        elif g2g[k] >= 0:
            r = g1l[0] / g2l[0]
            p = pf[P] - (r if r >= 1.0 else 1.0)
            pf[P] = p if p >= 0.0 else 0.0
            r_remove(g2n, g2p, g2g, g2l, k)
            pc[GH] = 2
            fg[k] = s


@_jit
def _on_inserts(blocks, lo, n, key_of, brn, brp, brg, brl, fg, pc):
    """``ARC.on_inserts`` of ``blocks[lo:lo + n]`` (depth order; deepest first
    here): a block whose key missed on a ghost in this request's prompt goes
    to T2 (once per key), the others to T1."""
    s = pc[STAMP]
    for j in range(lo + n - 1, lo - 1, -1):
        b = blocks[j]
        k = key_of[b]
        if fg[k] == s:
            fg[k] = 0
            r_append(brn, brp, brg, brl, T2, b)
        else:
            r_append(brn, brp, brg, brl, T1, b)


@_jit
def _pop_first(rn, rp, rg, rl):
    """Ring 0 of a key ring set loses its first (oldest) element (``OrderedDict.popitem(last=False)``)."""
    x = rn[0] - 1
    r_remove(rn, rp, rg, rl, x)


@_jit
def _victim(copies, key_of, kh, kt, kids, fr, brn, brp, brg, brl, g1n, g1p, g1g, g1l, g2n, g2p, g2g, g2l, pc, pf):
    """``ARC.victim``: the victim block (taken out of its list, its key on the
    ghost list of that list, ghost lists trimmed), or -1 with nothing changed
    (no evictable block; ``copies``: with ``ClassicPolicy._victim_among_copies``'s
    rule, a key held by two cached blocks counts as a leaf)."""
    n1, n2, m1, m2 = brl[T1], brl[T2], g1l[0], g2l[0]
    c = pc[CAP]
    gh = pc[GH]
    p = pf[P]
    trim = 0  # the ghost list libCacheSim trims on this miss (1: B1, 2: B2), after the victim is found
    if gh == 0 and n1 + m1 + 1 > c and m1 == 0:
        first, other, ghost = T1, T2, 0  # T1 alone fills the cache: its LRU block goes, no ghost
    else:
        if gh == 0:
            if n1 + m1 + 1 > c:
                trim = 1
            elif n1 + m1 + n2 + m2 >= 2 * c and m2 > 0:
                trim = 2
        if (n1 > 0 and (n1 > p or (n1 == p and gh == 2))) or n2 == 0:  # REPLACE
            first, other, ghost = T1, T2, 1
        else:
            first, other, ghost = T2, T1, 2
    R = 2
    i = walk(brn, brp, R, first, fr, key_of, kids, kh, kt, copies)
    if i < 0:
        i = walk(brn, brp, R, other, fr, key_of, kids, kh, kt, copies)
        if i < 0:
            return -1
        if ghost:
            ghost = 1 if other == T1 else 2
    if trim == 1:
        _pop_first(g1n, g1p, g1g, g1l)
    elif trim == 2:
        _pop_first(g2n, g2p, g2g, g2l)
    r_remove(brn, brp, brg, brl, i)
    k = key_of[i]
    if ghost == 1:
        if g1g[k] < 0:  # (an OrderedDict assignment leaves a present key where it is)
            r_append(g1n, g1p, g1g, g1l, 0, k)
    elif ghost == 2:
        if g2g[k] < 0:
            r_append(g2n, g2p, g2g, g2l, 0, k)
    over = brl[T1] + brl[T2] + g1l[0] + g2l[0] - 2 * c  # the directory bound 2c: oldest ghosts, B2 first
    while over > 0 and (g1l[0] or g2l[0]):
        if g2l[0]:
            _pop_first(g2n, g2p, g2g, g2l)
        else:
            _pop_first(g1n, g1p, g1g, g1l)
        over -= 1
    return i


@_jit
def _alloc(n, blocks, at, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, brn, brp, brg, brl,
           g1n, g1p, g1g, g1l, g2n, g2p, g2g, g2l, pc, pf, c, victims):
    """``PolicyRuntime.evict(n)`` into ``blocks[at:at + n]``: hashless blocks
    first (the stack's top), then one ``spfcore_evict_blocks`` call for the
    rest (``ClassicPolicy.spfcore_evict_blocks``: each victim from
    :func:`_victim`, else with the copies rule, then it leaves ``kids``, the
    free set and the pool). Returns False if no victim was found."""
    c[EVICT_CALLS] += 1
    got = 0
    while c[HSN] > 0 and got < n:
        c[HSN] -= 1
        b = hs[c[HSN]]
        blocks[at + got] = b
        _retire(b, key_of, kh, kt, dn, dp, c, victims)
        got += 1
    if got == n:
        return True
    c[HOOK_CALLS] += 1
    for j in range(got, n):
        i = _victim(False, key_of, kh, kt, kids, fr, brn, brp, brg, brl, g1n, g1p, g1g, g1l, g2n, g2p, g2g, g2l,
                    pc, pf)
        if i < 0:
            i = _victim(True, key_of, kh, kt, kids, fr, brn, brp, brg, brl, g1n, g1p, g1g, g1l, g2n, g2p, g2g,
                        g2l, pc, pf)
            if i < 0:
                return False
            c[COPIES] += 1
        unparent(i, par_of, kids)
        fr[i] = 0
        c[LRUN] -= 1
        blocks[at + j] = i
        _retire(i, key_of, kh, kt, dn, dp, c, victims)
    return True


@_jit
def _store(blocks, lo, n, parent, keys, k0, key_of, kh, kt, dn, dp, par_of, kids, brn, brp, brg, brl, fg, pc, c):
    """``PolicyRuntime.stored`` of ``blocks[lo:lo + n]`` with key ids
    ``keys[k0:k0 + n]``, the first one's parent key id ``parent`` (-1: none):
    cached in the pool, counted as children (``ClassicPolicy.spfcore_blocks_stored``),
    one store call, ``on_inserts``."""
    for j in range(n):
        b = blocks[lo + j]
        k = keys[k0 + j]
        _insert(b, k, key_of, kh, kt, dn, dp)
        stored(b, parent, key_of, par_of, kids)
        parent = k
    c[HOOK_CALLS] += 1
    _on_inserts(blocks, lo, n, key_of, brn, brp, brg, brl, fg, pc)


@_jit
def replay_arc(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, key_of, kh, kt, dn, dp, hs, par_of, kids, fr,
               brn, brp, brg, brl, g1n, g1p, g1g, g1l, g2n, g2p, g2g, g2l, fg, pc, pf, c, blocks, hits, victims):
    """Replay requests ``r = 0 .. len(n_prompt)-1`` (the request arrays of
    :func:`spfcore.sim._replay_nb.replay`) under ARC. Writes ``hits[r]``;
    appends every victim to ``victims`` unless it is empty; ``blocks``:
    scratch of at least ``max(n_total)`` entries.

    Returns:
        A status: ``DONE``; ``TOO_BIG``: request ``c[AT]`` needs more blocks
        than are free, nothing of it replayed; ``FOUND_TWICE``: request
        ``c[AT]``'s lookup found block ``c[TWICE]`` twice (after its hit hook,
        where the reference loop's touch raises ``KeyError``); ``NO_VICTIM``:
        request ``c[AT]`` found no evictable block (the plugin raises).
    """
    for r in range(len(n_prompt)):
        f0 = bk_off[r]
        f1 = bk_off[r + 1]
        nf = nf_[r]
        np_, nt = n_prompt[r], n_total[r]
        if nt > c[HSN] + c[LRUN]:
            c[AT] = r
            return TOO_BIG
        c[HOOK_CALLS] += 2  # spfcore_request_arrived, spfcore_blocks_hit
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        _on_hits(blocks, h, brn, brp, brg, brl)
        _on_miss(bk, f0 + h, f1, g1n, g1p, g1g, g1l, g2n, g2p, g2g, g2l, fg, pc, pf)
        for j in range(h):  # touch: the hit blocks leave the free set (a block met twice is not free)
            b = blocks[j]
            if not fr[b]:
                c[TWICE] = b
                c[AT] = r
                return FOUND_TWICE
            fr[b] = 0
            c[LRUN] -= 1
        if not _alloc(np_ - h, blocks, h, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, brn, brp, brg, brl,
                      g1n, g1p, g1g, g1l, g2n, g2p, g2g, g2l, pc, pf, c, victims):
            c[AT] = r
            return NO_VICTIM
        if nf > h:
            _store(blocks, h, nf - h, bk[f0 + h - 1] if h else -1, bk, f0 + h, key_of, kh, kt, dn, dp, par_of, kids,
                   brn, brp, brg, brl, fg, pc, c)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        done = nf
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            nf_all = nf + nd
            parent = bk[f0 + nf - 1] if nf else -1
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    _store(blocks, done, 1, parent, dk, d0 + done - nf, key_of, kh, kt, dn, dp, par_of, kids,
                           brn, brp, brg, brl, fg, pc, c)
                    parent = dk[d0 + done - nf]
                    done += 1
                if j < nt:
                    if not _alloc(1, blocks, nb_, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, brn, brp, brg, brl,
                                  g1n, g1p, g1g, g1l, g2n, g2p, g2g, g2l, pc, pf, c, victims):
                        c[AT] = r
                        return NO_VICTIM
                    nb_ += 1
        # release: the cached blocks (the first ``done``) become free, the hashless ones go on the stack
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
    ``()`` for ``rt``'s policy if it is the plugin's own ``ARC`` (no parameters),
    configured for ``rt``'s pool and fresh (no hook but ``spfcore_cache_configured``
    called yet), else ``None`` (the hooks run)."""
    from spfcore_classic._base import NoParams
    from spfcore_classic.arc import ARC

    plugins = rt.pm.get_plugins()
    inst = next(iter(plugins)) if len(plugins) == 1 else None
    if type(inst) is not ARC or type(inst.params) is not NoParams:
        return None
    if inst.capacity != rt.num_blocks or inst.n_req or inst.key or inst.t1 or inst.t2 or inst.b1 or inst.b2 \
            or inst.p != 0:
        return None
    return ()


def ghost_cap(st: dict) -> int:
    """Key ids the state may name beyond the cached blocks' (B1 and B2: the
    plugin bounds ``|T1| + |T2| + |B1| + |B2|`` by ``2c`` at each victim, and
    ghosts enter only there): ``2 * num_blocks``."""
    return 2 * int(st["pc"][CAP])


def new_state(num_blocks: int, params: tuple, nkeys: int = 0) -> dict:
    """A fresh state for :func:`replay_arc` of a pool of ``num_blocks``
    blocks (null block included), every usable block hashless and free;
    room for ``nkeys`` key ids (:func:`grow` adds more).

    Returns:
        A dict of arrays (int64 unless said), ``B`` = ``num_blocks``, ``K`` =
        key ids: per block ``key_of``, ``par_of`` (key id, parent key id; -1
        none), ``fr`` (1: free and cached), ``dn``/``dp``/``hs`` the pool's
        lists (:mod:`spfcore.sim._replay_nb`); per key id ``kh``/``kt``
        (int32: head/tail of its cached blocks' list, -1), ``kids`` (cached
        blocks whose parent it is), ``fg`` (the ``from_ghost`` stamp);
        ``br`` the block rings T1, T2 and ``g1``/``g2`` the key rings B1, B2
        (:func:`spfcore.sim._replay_classic_nb.r_new` tuples); ``pc``/``pf``
        the policy's scalars; ``c`` the replay's counters."""
    i64 = np.int64
    st = {"key_of": np.full(num_blocks, -1, i64), "dn": np.full(num_blocks, -1, i64),
          "dp": np.full(num_blocks, -1, i64), "hs": np.zeros(num_blocks, i64), "par_of": np.full(num_blocks, -1, i64),
          "fr": np.zeros(num_blocks, i64), "kh": np.full(nkeys, -1, np.int32), "kt": np.full(nkeys, -1, np.int32),
          "kids": np.zeros(nkeys, i64), "fg": np.zeros(nkeys, i64),
          "br": r_new(2, num_blocks), "g1": r_new(1, nkeys), "g2": r_new(1, nkeys)}
    pc = np.zeros(3, i64)
    pc[CAP] = num_blocks
    st["pc"], st["pf"] = pc, np.zeros(1)
    c = np.zeros(NCOUNTERS_A, i64)
    init(num_blocks, np.zeros(num_blocks, i64), np.zeros(num_blocks, i64), st["hs"], c)
    st["c"] = c
    return st


def grow(st: dict, nkeys: int) -> None:
    """Room for key ids below ``nkeys`` (doubling)."""
    have = len(st["kh"])
    if nkeys <= have:
        return
    g = max(nkeys, 2 * have, 1024) - have
    for name, fill in (("kh", -1), ("kt", -1), ("kids", 0), ("fg", 0)):
        a = st[name]
        st[name] = np.concatenate([a, np.full(g, fill, a.dtype)])
    st["g1"] = r_grow(st["g1"], have + g)
    st["g2"] = r_grow(st["g2"], have + g)


_ARGS = ("key_of", "kh", "kt", "dn", "dp", "hs", "par_of", "kids", "fr")


def run(st: dict, flat: tuple, first_arrival: int, hits: np.ndarray, victims: np.ndarray) -> int:
    """Replay one chunk (:func:`spfcore.sim.simulator._flatten`'s arrays,
    key ids below ``len(st["kh"])``) into ``hits`` (per request, hit blocks)
    and ``victims`` (empty: not recorded); ``first_arrival`` is not read (ARC
    keeps no clock).

    Returns:
        :func:`replay_arc`'s status.
    """
    n_total = flat[7]
    if not len(n_total):
        return DONE
    blocks = np.empty(int(n_total.max()), np.int64)
    status = replay_arc(*flat, *(st[a] for a in _ARGS), *st["br"], *st["g1"], *st["g2"], st["fg"], st["pc"], st["pf"],
                      st["c"], blocks, hits, victims)
    if status == NO_VICTIM:
        raise cl.no_victim('arc', st, 'arc: no evictable block')
    return status


def keep_keys(st: dict) -> np.ndarray:
    """Per key id, whether the state still names it: cached, on B1 or B2, or
    the parent of a cached block (``kids``)."""
    return (st["kh"] >= 0) | (st["g1"][2] >= 0) | (st["g2"][2] >= 0) | (st["kids"] > 0)


def remap(st: dict, keep: np.ndarray) -> np.ndarray:
    """Renumber the key ids ``keep`` marks densely from 0 (in order) and
    forget the others (between calls; decisions do not depend on the
    labels; the ghost lists keep their orders). ``fg`` is cleared (a stamp
    of a past request, read only in its own). Returns the old -> new map
    (-1: forgotten)."""
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
    st["fg"] = np.zeros(size, np.int64)
    for g in ("g1", "g2"):
        st[g] = r_grow(r_remap(st[g], km, m), size)
    return km


def warm() -> None:
    """Call the kernel once on a tiny replay with the argument types the
    simulator uses: compiles it (or loads numba's on-disk cache) now."""
    trace, _ = warm_trace()
    nb = 8
    st = new_state(nb, (), 4)
    i64 = np.int64
    run(st, trace, 0, np.empty(2, i64), np.empty(8, i64))
    keep_keys(st)
