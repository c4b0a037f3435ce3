"""The ``utility`` variant's table rebuild as numba-compiled loops.

Imported by :class:`~spfcore_spf_expected_utility.utility.UtilityPolicy` on
construction (through :func:`spfcore.evictor.prepare_numba`, which makes
llvmlite safe for vLLM's module scan). Each loop performs, element by element,
the same IEEE operations in the same order as the numpy expressions it
replaces (no ``fastmath``: no reassociation, no fused multiply-add), so the
tables are bit-identical; it only skips numpy's ``(classes, buckets,
buckets)`` temporaries. ``cache=True``: compiled once into numba's on-disk
cache (``scripts/setup.sh`` warms it, :func:`warm`).
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


@_jit
def density_index(H, HR, total, lo, nb):
    """``idx[c, i] = max(0, max_{j >= i, occ > 0} hits / occ)`` with
    ``hits = H[c, j+1] - H[c, i]``, ``occ = (HR[c, j+1] - HR[c, i]) - hits *
    lo[i] + (total[c] - H[c, j+1]) * (lo[j+1] - lo[i])`` (see
    ``UtilityPolicy._build``).

    Args:
        H, HR: ``(classes, nb + 1)`` float64 prefix sums of the histograms
            (``h`` and ``h * rep``), a leading zero column.
        total: ``(classes,)`` float64, reuses plus never-reused.
        lo: ``(nb + 1,)`` float64 bucket lower edges and the end, arrivals.
        nb: buckets.

    Returns:
        ``(classes, nb)`` float64 index table.
    """
    nc = H.shape[0]
    out = np.zeros((nc, nb))
    for c in range(nc):
        tc = total[c]
        for i in range(nb):
            a = lo[i]
            h0 = H[c, i]
            r0 = HR[c, i]
            best = 0.0
            for j in range(i, nb):
                hits = H[c, j + 1] - h0
                sum_hr = HR[c, j + 1] - r0
                tail = tc - H[c, j + 1]
                span = lo[j + 1] - a
                t1 = hits * a
                t2 = sum_hr - t1
                t3 = tail * span
                occ = t2 + t3
                if occ > 0:
                    d = hits / occ
                    if d > best or d != d:  # NaN propagates, as numpy's max
                        best = d
            out[c, i] = best
    return out


@_jit
def change_offsets(r, lo_int, rel_tol, cut):
    """:func:`spfcore_spf_expected_utility.utility.change_offsets` (same
    comparisons): per ``(class, bucket i)`` the first integer age of the
    first later bucket ``j`` whose value differs by more than ``rel_tol``
    relative and (finite ``cut``) where one of the two lies below ``cut``;
    ``lo_int[nb]`` if one differs only above the cut; ``-1`` if none differs.

    Args:
        r: ``(classes, nb)`` float64 index table.
        lo_int: ``(nb + 1,)`` int64 first integer age of each bucket and the end.
        rel_tol: float.
        cut: float (``inf``: no cut).

    Returns:
        ``(classes, nb)`` int64.
    """
    nc, nb = r.shape
    out = np.empty((nc, nb), np.int64)
    has_cut = cut != np.inf
    for c in range(nc):
        for i in range(nb):
            x = r[c, i]
            tol = rel_tol * abs(x)
            res = -1
            for j in range(i + 1, nb):
                y = r[c, j]
                if abs(y - x) > tol:
                    if not has_cut or x < cut or y < cut:
                        res = lo_int[j]
                        break
                    if res < 0:
                        res = lo_int[nb]
            out[c, i] = res
    return out


@_jit
def chain_cap(x, pi, back):
    """Cap each value at its parent's, in one pass: ``res[k] = min(x[k],
    res[pi[k]])`` where the parent (position ``pi[k]`` in the batch, ``-1``:
    none) comes earlier in the pass, which runs from the last position to the
    first when ``back`` (a release batch, tail first), else forwards.

    Args:
        x: ``(n,)`` float64 values.
        pi: ``(n,)`` int64 parent positions.
        back: bool.

    Returns:
        ``(n,)`` float64, a new array.
    """
    n = x.shape[0]
    res = x.copy()
    if back:
        for k in range(n - 1, -1, -1):
            p = pi[k]
            if p > k and res[p] < res[k]:
                res[k] = res[p]
    else:
        for k in range(n):
            p = pi[k]
            if 0 <= p < k and res[p] < res[k]:
                res[k] = res[p]
    return res


@_jit
def take_back(never, cls, d):
    """``never[cls[q]] = max(never[cls[q]] - d[q], 0)`` for each ``q`` in
    order (ghosts coming back; ``d``: the decayed weight of each eviction)."""
    for q in range(cls.shape[0]):
        c = cls[q]
        nv = never[c] - d[q]
        never[c] = nv if nv > 0.0 else 0.0


@_jit
def assign(slot_of_id, nhold, id_of_slot, ids, fin):
    """Map block ``ids[k]`` to slot ``fin[k]`` (0: none), keeping per slot the
    number of ids mapped to it and the last one."""
    for k in range(ids.shape[0]):
        i = ids[k]
        o = slot_of_id[i]
        if o > 0:
            nhold[o] -= 1
        f = fin[k]
        slot_of_id[i] = f
        if f > 0:
            nhold[f] += 1
            id_of_slot[f] = i


@_jit
def parent_pos(s, ps, scratch):
    """Position in the batch of each block's parent: the block whose slot
    ``s`` is the parent's slot ``ps`` (``<= 0``: none, -1); ``None`` if a slot
    occurs twice. ``scratch``: -1 per slot, left as it was."""
    n = s.shape[0]
    ok = True
    for k in range(n):
        if scratch[s[k]] >= 0:
            ok = False
        scratch[s[k]] = k
    pi = np.empty(n if ok else 0, np.int64)
    if ok:
        for k in range(n):
            q = ps[k]
            pi[k] = scratch[q] if q > 0 else -1
    for k in range(n):
        scratch[s[k]] = -1
    return pi


def warm() -> None:
    """Compile both loops (or load them from numba's cache) now, on a tiny table."""
    H = np.zeros((2, 4))
    lo = np.array([0.0, 1.0, 2.0, 4.0])
    idx = density_index(H, H, np.ones(2), lo, 3)
    change_offsets(idx, np.array([0, 1, 2, 4], np.int64), 0.0, np.inf)
    chain_cap(np.ones(3), np.array([1, 2, -1], np.int64), True)
    take_back(np.ones(3), np.array([1, 2], np.int64), np.ones(2))
    z = np.zeros(4, np.int64)
    assign(z, z.copy(), z.copy(), np.array([1], np.int64), np.array([2], np.int64))
    parent_pos(np.array([1, 2], np.int64), np.array([2, -1], np.int64), np.full(4, -1, np.int64))
