"""The sequential replay of the classic ``sieve`` arm
(:class:`spfcore_classic.sieve.Sieve`, policy-ordered mode) as one
numba-compiled loop over int arrays: the same model, the same decisions and
the same counts as :func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with the plugin's hooks and the
policy-ordered evictor (:class:`spfcore.evictor.Evictor`, ``ordered``).

Pool: :mod:`spfcore.sim._replay_nb`'s (``key_of``, ``kh``/``kt``,
``dn``/``dp``, the hashless stack ``hs``, counters ``c``); chain state and
the order: :mod:`spfcore.sim._replay_classic_nb` (``par_of``, ``kids``,
``fr``; one ring over block ids, :data:`Q`).

The policy (``Sieve``), rule by rule:

* the FIFO queue (``Sieve.newer`` / ``older`` / ``head`` / ``tail``) is ring
  :data:`Q`: its first element is ``tail`` (the oldest), its last ``head``
  (the newest); ``newer[x]`` is the next element (``-1`` at the head);
* ``visited[x]`` is ``vis[x]`` (per block, 0/1); the hand
  (``Sieve.hand``, ``None``: start at the tail) is ``c[HAND]`` (-1: none);
* ``on_hits``: every hit block's bit set; ``on_inserts``: the new blocks,
  deepest first, appended at the head with bit 0; ``on_miss``: nothing;
* ``victim`` (:func:`_victim`): from the hand (else the tail) towards the
  head, wrapping to the tail: an evictable block (free, no cached child:
  :func:`~spfcore.sim._replay_classic_nb.evictable`) with its bit set is
  spared (bit cleared), the first evictable one without it is the victim;
  blocks not evictable are passed with their bit kept; after ``2 * len + 1``
  steps without a victim ``NoEvictable`` (nothing changed: a bit is cleared
  only on an evictable block, and then a victim exists within the next lap),
  and ``ClassicPolicy._victim_among_copies`` walks again with the keys held by
  two or more cached blocks counted as leaves (``copies``). The hand then
  stays at the victim's next element (``None`` at the head), the victim
  leaves the queue.

Runtime order per request (:func:`~spfcore.sim.simulator._run_sequential`):
arrival hook; lookup; hit hook (bits); touch (hit blocks leave the free set;
a block found twice: ``FOUND_TWICE``, where the reference loop's touch raises
``KeyError``); allocation (``PolicyRuntime.evict``: hashless blocks from the
stack first, then one ``spfcore_evict_blocks`` call for the cached victims,
each victim's key dropped and its parent's child count decremented before
the next is chosen, as the plugin and the runtime do); store hook (the new
full prompt blocks); decode (store one block, allocate one); release (the
cached blocks back into the free set, the hashless ones on the stack, last
block on top). Hook calls counted: arrival, hit, each store, each eviction
call that takes cached blocks (``ClassicPolicy`` implements nothing else).

State: a dict of arrays (:func:`new_state`), key ids grown by :func:`grow`
and renumbered between calls by :func:`remap`.
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.sim import _replay_classic_nb as cl
from spfcore.sim._replay_classic_nb import evictable, r_append, r_first, r_new, r_next, r_remove, stored, unparent
from spfcore.sim._replay_nb import EVICT_CALLS, HSN, LRUN, NVICT, _insert, _lookup, _retire, init, warm_trace

#: More counter indices (after ``_replay_nb``'s first five): hook calls, the
#: block a lookup found twice, the request a status names, the hand (-1: none),
#: victims found by the copies exception (``ClassicPolicy._victim_among_copies`` calls).
HOOK_CALLS, TWICE, AT, HAND, COPIES = range(5, 10)
NCOUNTERS = 10
#: :func:`replay_sieve` status: done, a request too big, a lookup found a
#: block twice, no evictable block even among copies (a bug).
DONE, TOO_BIG, FOUND_TWICE, NO_VICTIM = range(4)
#: The ring of the FIFO queue (the only one).
Q = 0

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _victim(rn, rp, rg, rl, vis, fr, key_of, kids, kh, kt, c, copies):
    """``Sieve.victim`` (see the module): the victim's block id, taken out of
    the queue, or -1 (``NoEvictable``, nothing changed)."""
    R = 1
    n = rl[Q]
    obj = c[HAND] if c[HAND] >= 0 else r_first(rn, R, Q)
    if obj < 0:
        return -1
    left = 2 * n + 1
    while True:
        if evictable(obj, fr, key_of, kids, kh, kt, copies):
            if not vis[obj]:
                break
            vis[obj] = 0
        nxt = r_next(rn, R, obj)
        obj = nxt if nxt >= 0 else r_first(rn, R, Q)
        left -= 1
        if not left:
            return -1
    c[HAND] = r_next(rn, R, obj)
    r_remove(rn, rp, rg, rl, obj)
    return obj


@_jit
def _alloc(n, blocks, at, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, vis, rn, rp, rg, rl, c, victims):
    """``PolicyRuntime.evict(n)`` into ``blocks[at:at + n]``: hashless blocks
    first (the stack's top), then one ``spfcore_evict_blocks`` call for the
    rest (``ClassicPolicy.spfcore_evict_blocks``: per victim ``victim()``,
    else the copies exception; its parent's count down; its key dropped).
    Returns False if no evictable block was found (a bug)."""
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
            b = _victim(rn, rp, rg, rl, vis, fr, key_of, kids, kh, kt, c, False)
            if b < 0:
                c[COPIES] += 1
                b = _victim(rn, rp, rg, rl, vis, fr, key_of, kids, kh, kt, c, True)
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
def _store(blocks, lo, n, parent, keys, k0, key_of, kh, kt, dn, dp, par_of, kids, vis, rn, rp, rg, rl, c):
    """``PolicyRuntime.stored`` of ``blocks[lo:lo + n]`` with key ids
    ``keys[k0:k0 + n]``, the first one's parent key id ``parent`` (-1: none):
    the blocks cached, one store call (``ClassicPolicy.spfcore_blocks_stored``:
    parents counted; ``Sieve.on_inserts``: deepest first to the queue's head,
    bit 0)."""
    c[HOOK_CALLS] += 1
    for j in range(n):
        b = blocks[lo + j]
        k = keys[k0 + j]
        _insert(b, k, key_of, kh, kt, dn, dp)
        stored(b, parent, key_of, par_of, kids)
        parent = k
    for j in range(n - 1, -1, -1):
        b = blocks[lo + j]
        r_append(rn, rp, rg, rl, Q, b)
        vis[b] = 0


@_jit
def replay_sieve(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, key_of, kh, kt, dn, dp, hs, par_of, kids,
                 fr, vis, rn, rp, rg, rl, c, blocks, hits, victims):
    """Replay requests ``r = 0 .. len(n_prompt)-1`` (the request arrays of
    :func:`spfcore.sim._replay_nb.replay`) under ``sieve``. Writes
    ``hits[r]``; appends every victim to ``victims`` unless it is empty;
    ``blocks``: scratch of at least ``max(n_total)`` entries.

    Returns:
        A status: ``DONE``; ``TOO_BIG``: request ``c[AT]`` needs more blocks
        than are free, nothing of it replayed; ``FOUND_TWICE``: request
        ``c[AT]``'s lookup found block ``c[TWICE]`` twice (after its hit
        hook); ``NO_VICTIM``: no evictable block (a bug).
    """
    for r in range(len(n_prompt)):
        f0 = bk_off[r]
        nf = nf_[r]
        np_, nt = n_prompt[r], n_total[r]
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        if nt > c[HSN] + c[LRUN]:
            c[AT] = r
            return TOO_BIG
        c[HOOK_CALLS] += 2  # spfcore_request_arrived, spfcore_blocks_hit
        for j in range(h):  # Sieve.on_hits
            vis[blocks[j]] = 1
        for j in range(h):  # touch: the hit blocks leave the free set
            b = blocks[j]
            if not fr[b]:
                c[TWICE] = b
                c[AT] = r
                return FOUND_TWICE
            fr[b] = 0
            c[LRUN] -= 1
        if not _alloc(np_ - h, blocks, h, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, vis, rn, rp, rg, rl, c,
                      victims):
            c[AT] = r
            return NO_VICTIM
        if nf > h:
            _store(blocks, h, nf - h, bk[f0 + h - 1] if h else -1, bk, f0 + h, key_of, kh, kt, dn, dp, par_of, kids,
                   vis, rn, rp, rg, rl, c)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        done = nf
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            nf_all = nf + nd
            parent = bk[f0 + nf - 1] if nf else -1
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    _store(blocks, done, 1, parent, dk, d0 + done - nf, key_of, kh, kt, dn, dp, par_of, kids, vis,
                           rn, rp, rg, rl, c)
                    parent = dk[d0 + done - nf]
                    done += 1
                if j < nt:
                    if not _alloc(1, blocks, nb_, key_of, kh, kt, dn, dp, hs, par_of, kids, fr, vis, rn, rp, rg, rl,
                                  c, victims):
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
    ``()`` for ``rt``'s policy if it is the plugin's own :class:`~spfcore_classic.sieve.Sieve`
    (not a subclass) with no hook but ``spfcore_cache_configured`` called yet, else ``None``
    (the hooks run)."""
    from spfcore_classic.sieve import Sieve

    plugins = rt.pm.get_plugins()
    inst = next(iter(plugins)) if len(plugins) == 1 else None
    if type(inst) is not Sieve or inst.key or inst.n_req or inst.newer:
        return None
    return ()


def ghost_cap(st: dict) -> int:
    """Key ids the state may name beyond the cached ones' (none: no ghosts)."""
    return 0


def new_state(num_blocks: int, params: tuple, nkeys: int = 0) -> dict:
    """A fresh state for :func:`replay_sieve` of a pool of ``num_blocks``
    blocks (null block included), every usable block hashless and free, room
    for ``nkeys`` key ids (:func:`grow` adds more); ``params``: ``()``.

    Returns:
        A dict of int64 arrays, ``B`` = ``num_blocks``, ``K`` = key ids:
        per block ``key_of``, ``par_of`` (key id, parent key id; -1 none),
        ``dn``/``dp``/``hs`` (the pool's lists, :mod:`spfcore.sim._replay_nb`),
        ``fr`` (1: a free cached block), ``vis`` (visited bits); per key id
        ``kh``/``kt`` (int32: its cached blocks' list) and ``kids`` (cached
        blocks it is the parent of); the queue's ring ``rn``/``rp`` (``1 +
        B``), ``rg`` (``B``), ``rl`` (1); ``c`` the counters (``HAND`` -1)."""
    i64 = np.int64
    st = {}
    st["key_of"], st["dn"], st["dp"], st["par_of"] = (np.full(num_blocks, -1, i64) for _ in range(4))
    st["hs"], st["fr"], st["vis"] = (np.zeros(num_blocks, i64) for _ in range(3))
    st["kh"], st["kt"] = np.full(nkeys, -1, np.int32), np.full(nkeys, -1, np.int32)
    st["kids"] = np.zeros(nkeys, i64)
    st["rn"], st["rp"], st["rg"], st["rl"] = r_new(1, num_blocks)
    c = np.zeros(NCOUNTERS, i64)
    c[HAND] = -1
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


_ARGS = ("key_of", "kh", "kt", "dn", "dp", "hs", "par_of", "kids", "fr", "vis", "rn", "rp", "rg", "rl", "c")


def run(st: dict, flat: tuple, first_arrival: int, hits: np.ndarray, victims: np.ndarray) -> int:
    """Replay one chunk (:func:`spfcore.sim.simulator._flatten`'s arrays,
    key ids below ``len(st["kh"])``) into ``hits`` (per request, hit blocks)
    and ``victims`` (empty: not recorded); ``first_arrival`` is not read
    (no decision depends on it).

    Returns:
        :func:`replay_sieve`'s status, but ``NO_VICTIM``.

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
    status = replay_sieve(*flat, *(st[a] for a in _ARGS), blocks, hits, victims)
    if status == NO_VICTIM:
        raise cl.no_victim("sieve", st)
    return status


def keep_keys(st: dict) -> np.ndarray:
    """Per key id, whether the state still names it: cached, or the parent
    of a cached block (``kids``)."""
    keep = (st["kh"] >= 0) | (st["kids"] > 0)
    par = st["par_of"][st["key_of"] >= 0]
    keep[par[par >= 0]] = True
    return keep


def remap(st: dict, keep: np.ndarray) -> np.ndarray:
    """Renumber the key ids ``keep`` marks densely from 0 (in order) and
    forget the others (between calls; decisions do not depend on the
    labels). Returns the old -> new map (-1: forgotten)."""
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
    size = len(keep)
    for name, fill in (("kh", -1), ("kt", -1), ("kids", 0)):
        a = np.full(size, fill, st[name].dtype)
        a[:m] = st[name][old]
        st[name] = a
    return km


def warm() -> None:
    """Call the kernel once on a tiny replay with the argument types the
    simulator uses: compiles it (or loads numba's on-disk cache) now."""
    trace, _ = warm_trace()
    st = new_state(8, (), 4)
    i64 = np.int64
    run(st, trace, 0, np.empty(2, i64), np.empty(8, i64))
    keep_keys(st)
