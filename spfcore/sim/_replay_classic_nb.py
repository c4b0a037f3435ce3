"""What the compiled replays of the classic policies (the ``spfcore_classic``
plugin: ``sieve``, ``twoq``, ``s3fifo``, ``arc``, ``lirs``, ``gdsf``) share:
the chain bookkeeping of :class:`spfcore_classic._base.ClassicPolicy` and
orders as circular linked lists over int ids, in numba.

Each arm's kernel module (``spfcore.sim._replay_<arm>_nb``, a
:data:`spfcore.sim.simulator.KERNELS` entry) writes its own request loop over
the pool of :mod:`spfcore.sim._replay_nb` (``key_of``, ``kh``/``kt``,
``dn``/``dp``, ``hs``, counters ``c``) and these pieces. (The six request
loops are alike; one loop taking each arm's functions as arguments would be
compiled again in every process: numba does not cache a function that takes
functions as arguments: checked with numba 0.65.)

* **Chain state** (``ClassicPolicy.parent`` / ``kids`` / ``_free``):
  ``par_of[B]``, the parent key id of a cached block (-1: depth 0, or not
  cached); ``kids[K]``, the cached blocks whose parent key id is ``k``
  (counted per key, as the plugin counts per hash); ``fr[B]``, 1 while a
  block is a free cached block (released, not hit since, not evicted): the
  ``free`` mapping of ``spfcore_evict_blocks``. A block is *evictable*
  (:func:`evictable`) when it is free and no cached block has its key as
  parent; for the copies exception (``ClassicPolicy._victim_among_copies``:
  no free block is a leaf, which needs a key cached in two blocks) a key
  held by two or more cached blocks (``kh[k] != kt[k]``) counts as a leaf.
* **Orders** (the plugin's :class:`~spfcore_classic._ring.Ring` and
  ``OrderedDict`` queues): ``R`` rings share two link arrays ``rn`` / ``rp``
  of ``R + N`` slots; slot ``r < R`` is ring ``r``'s sentinel, element ``x``
  (a block id, or a key id for a ghost list) sits at slot ``R + x``. A ring
  is circular through its sentinel: ``rn[r]`` is its first element's slot
  (the eviction end), ``rp[r]`` its last (the newest). ``rg[x]`` is the ring
  element ``x`` is in (-1: none), ``rl[r]`` its length. One element is in at
  most one ring of a set; an arm with block rings and key rings keeps two
  sets (a key set grows with the key ids: :func:`r_grow`).

The memory the plugin's walks keep of orders without an evictable block
(``ClassicPolicy._stuck``) and S3-FIFO's parking only save passes: the
victims and the orders they leave are those of the plain walk
(:func:`walk`), which is what these kernels do.
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


def r_new(nrings: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A set of ``nrings`` empty rings over elements ``0 .. n-1``: ``(rn, rp,
    rg, rl)`` (int64; ``rn``/``rp`` of ``nrings + n`` slots, ``rg`` of ``n``,
    ``rl`` of ``nrings``)."""
    rn = np.full(nrings + n, -1, np.int64)
    rp = np.full(nrings + n, -1, np.int64)
    rn[:nrings] = rp[:nrings] = np.arange(nrings)
    return rn, rp, np.full(n, -1, np.int64), np.zeros(nrings, np.int64)


def r_grow(rings: tuple, n: int) -> tuple:
    """``rings`` (:func:`r_new`'s tuple) with room for elements below ``n``
    (the new ones in no ring); the same tuple if it has room."""
    rn, rp, rg, rl = rings
    have = len(rg)
    if n <= have:
        return rings
    g = n - have
    return (np.concatenate([rn, np.full(g, -1, np.int64)]), np.concatenate([rp, np.full(g, -1, np.int64)]),
            np.concatenate([rg, np.full(g, -1, np.int64)]), rl)


def r_remap(rings: tuple, km: np.ndarray, m: int) -> tuple:
    """``rings`` over key ids renumbered by ``km`` (old -> new, -1 forgotten:
    none of those may be in a ring), ``m`` new ids; the order of every ring kept."""
    rn, rp, rg, rl = rings
    R = len(rl)
    n = len(rg)
    slot = np.arange(R + n, dtype=np.int64)  # old slot -> new slot
    slot[R:] = np.where(km[:n] >= 0, km[:n] + R, -1)

    def moved(a: np.ndarray) -> np.ndarray:
        out = np.full(R + max(m, 0), -1, np.int64)
        keep = slot >= 0
        v = a[keep]
        out[slot[keep]] = np.where(v >= 0, slot[np.maximum(v, 0)], -1)
        return out
    grg = np.full(max(m, 0), -1, np.int64)
    old = np.flatnonzero(km[:n] >= 0)
    grg[km[old]] = rg[old]
    return moved(rn), moved(rp), grg, rl


@_jit
def r_first(rn, R, r):
    """Ring ``r``'s first element (its eviction end), -1 if it is empty."""
    s = rn[r]
    return s - R if s >= R else -1


@_jit
def r_last(rp, R, r):
    """Ring ``r``'s last element (its newest), -1 if it is empty."""
    s = rp[r]
    return s - R if s >= R else -1


@_jit
def r_next(rn, R, x):
    """The element after ``x`` in its ring, -1 at its end."""
    s = rn[R + x]
    return s - R if s >= R else -1


@_jit
def r_prev(rp, R, x):
    """The element before ``x`` in its ring, -1 at its start."""
    s = rp[R + x]
    return s - R if s >= R else -1


@_jit
def r_append(rn, rp, rg, rl, r, x):
    """Element ``x`` (in no ring) joins ring ``r`` at its newest end."""
    R = len(rl)
    s = R + x
    t = rp[r]
    rn[t] = s
    rp[s] = t
    rn[s] = r
    rp[r] = s
    rg[x] = r
    rl[r] += 1


@_jit
def r_push_first(rn, rp, rg, rl, r, x):
    """Element ``x`` (in no ring) joins ring ``r`` at its first end (the eviction end)."""
    R = len(rl)
    s = R + x
    h = rn[r]
    rp[h] = s
    rn[s] = h
    rp[s] = r
    rn[r] = s
    rg[x] = r
    rl[r] += 1


@_jit
def r_remove(rn, rp, rg, rl, x):
    """Element ``x`` leaves its ring (if in one)."""
    r = rg[x]
    if r < 0:
        return
    s = len(rl) + x
    p, q = rp[s], rn[s]
    rn[p] = q
    rp[q] = p
    rg[x] = -1
    rl[r] -= 1


@_jit
def r_move_to_end(rn, rp, rg, rl, x):
    """Element ``x`` moves to its ring's newest end (``OrderedDict.move_to_end``)."""
    r = rg[x]
    r_remove(rn, rp, rg, rl, x)
    r_append(rn, rp, rg, rl, r, x)


@_jit
def r_rotate_to(rn, rp, R, r, x):
    """Ring ``r`` rotated so that element ``x`` of it is first: the elements
    before it move to the newest end, in their order (``Ring.rotate_to``;
    O(1): the sentinel moves to just before ``x``)."""
    s = R + x
    if rn[r] == s:
        return
    p, q = rp[r], rn[r]  # unlink the sentinel
    rn[p] = q
    rp[q] = p
    b = rp[s]  # and link it before x
    rn[b] = r
    rp[r] = b
    rn[r] = s
    rp[s] = r


@_jit
def evictable(b, fr, key_of, kids, kh, kt, copies):
    """Block ``b`` is free and no cached block hangs below it (``ClassicPolicy.evictable``);
    with ``copies``, a key held by two or more cached blocks counts as a leaf
    (``ClassicPolicy._victim_among_copies``)."""
    if not fr[b]:
        return False
    k = key_of[b]
    return kids[k] == 0 or (copies and kh[k] != kt[k])


@_jit
def walk(rn, rp, R, r, fr, key_of, kids, kh, kt, copies):
    """``ClassicPolicy.walk`` of block ring ``r``: its first evictable block,
    the ring rotated to it (the blocks passed over to its newest end), or -1
    with the ring unchanged."""
    s = rn[r]
    while s != r:
        b = s - R
        if evictable(b, fr, key_of, kids, kh, kt, copies):
            r_rotate_to(rn, rp, R, r, b)
            return b
        s = rn[s]
    return -1


@_jit
def stored(b, par, key_of, par_of, kids):
    """Cached block ``b`` (its key already set) has parent key id ``par``
    (-1: depth 0): ``ClassicPolicy.spfcore_blocks_stored``'s count."""
    par_of[b] = par
    if par >= 0:
        kids[par] += 1


@_jit
def unparent(b, par_of, kids):
    """Victim ``b`` leaves its parent's count (``ClassicPolicy.spfcore_evict_blocks``);
    returns the parent key id if that was its last cached child, else -1."""
    p = par_of[b]
    par_of[b] = -1
    if p < 0:
        return -1
    kids[p] -= 1
    return p if kids[p] == 0 else -1


#: The status of a classic kernel's ``run`` that found no evictable block,
#: not even among copies (a policy bug, or keys that repeat within a prompt
#: so that every free block is a parent): :func:`no_victim` reports it.
NO_VICTIM = 3


def no_victim(arm: str, st: dict, own: str | None = None):
    """The :class:`~spfcore.runtime.PolicyError` the runtime raises where the
    plugin's ``victim()`` finds no evictable block, not even among copies
    (``ClassicPolicy._victim_among_copies``): its ``NoEvictable`` message when
    no key is cached twice, else the arm's own message ``own`` (raised by the
    retried ``victim()``; ``None``: the same message both ways, as SIEVE's).
    ``st``: the kernel's state (``kh``, ``kt``, ``key_of``)."""
    from spfcore.runtime import PolicyError
    from spfcore_classic._base import NoEvictable

    kh, kt = st["kh"], st["kt"]
    if own is not None and np.any((kh >= 0) & (kh != kt)):
        exc = NoEvictable(own)
    else:
        exc = NoEvictable(f"{arm}: no evictable block (free, without a cached child) among "
                          f"{int((st['key_of'] >= 0).sum())} resident blocks")
    return PolicyError(f"policy {arm!r} failed in hook spfcore_evict_blocks: {exc!r}", policy=arm,
                       hook="spfcore_evict_blocks")
