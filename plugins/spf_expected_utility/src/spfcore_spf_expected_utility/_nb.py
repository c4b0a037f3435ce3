"""The ``utility`` variant's per-block work and table rebuild as numba-compiled loops.

Imported by :class:`~spfcore_spf_expected_utility.utility.UtilityPolicy` on
construction (through :func:`spfcore.evictor.prepare_numba`, which makes
llvmlite safe for vLLM's module scan). Each hook's per-block work is one or
two calls here (a store: :func:`store_records`, :func:`map_stored`; a hit:
:func:`hit_ids`; an eviction: :func:`evict_records`; a score batch:
:func:`score_ids`; a table rebuild: :func:`index_table`,
:func:`change_offsets`), so a hook costs a few dispatches whatever its
size. Each loop performs, element by element, the same IEEE operations in
the same order as the numpy expressions it replaces (no ``fastmath``: no
reassociation, no fused multiply-add), so records and tables are
bit-identical; numpy's summation-order-dependent reductions stay in numpy.
The record fields arrive as column views of the policy's row tables
(non-contiguous 1-d arrays). ``cache=True``: compiled once into numba's
on-disk cache (``scripts/setup.sh`` warms it, :func:`warm`, with the
policy's layouts, so no hook compiles).
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


@_jit
def density_index(H, HR, total, lo, nb, rep):
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
        rep: ``(classes,)`` int64: ``rep[c] < c`` names an earlier class
            whose rows (``H``, ``HR``, ``total``) are equal to ``c``'s (its
            row is copied, not computed again); ``rep[c] == c`` otherwise.

    Returns:
        ``(classes, nb)`` float64 index table.
    """
    nc = H.shape[0]
    out = np.zeros((nc, nb))
    for c in range(nc):
        rc = rep[c]
        if rc < c:
            for i in range(nb):
                out[c, i] = out[rc, i]
            continue
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
def index_table(hist, never, pooled, pooled_never, tot, prior_weight, prior, gap, use_gap, rep, lo, nb, per_kind,
                decay):
    """``UtilityPolicy._build``'s table from the histograms, the same float
    operations as its numpy form, then the histograms decayed in place.

    Per class ``c``: ``h = hist[c] (+ prior_weight * pooled / tot when
    prior) (+ gap[c] when use_gap)``, ``nev = never[c] (+ prior_weight *
    pooled_never / tot when prior)``; ``H``, ``HR``: prefix sums (numpy's
    ``cumsum``: sequential) of ``h`` and ``h * rep`` after a zero; ``total =
    H[-1] + nev``; the index by :func:`density_index`, one row per reuse class
    ``c % per_kind`` for the classes without data (``hist`` row all zero,
    ``never`` zero: the same ``h`` and ``nev``, so the same row).

    Args:
        hist, never: ``(classes, nb)``, ``(classes,)`` float64 (decayed: ``*= decay``).
        pooled: ``hist.sum(0)``; pooled_never: ``never.sum()``; tot: ``pooled.sum() + pooled_never``.
        gap: ``(classes, nb)`` gap prior; rep: ``(nb,)`` representative gap per bucket; lo: bucket edges.

    Returns:
        ``(index (classes, nb) float64, rep (classes,) int64: the class whose row each copies)``.
    """
    nc = hist.shape[0]
    same = np.empty(nc, np.int64)
    first = np.full(per_kind, -1, np.int64)
    for c in range(nc):
        e = never[c] == 0
        if e:
            for j in range(nb):
                if hist[c, j] != 0:
                    e = False
                    break
        same[c] = c
        if e:
            g = c % per_kind
            if first[g] < 0:
                first[g] = c
            same[c] = first[g]
    H = np.zeros((nc, nb + 1))
    HR = np.zeros((nc, nb + 1))
    total = np.empty(nc)
    padd = np.empty(nb)
    nadd = 0.0
    if prior:  # (tot > 0)
        for j in range(nb):
            padd[j] = prior_weight * pooled[j] / tot
        nadd = prior_weight * pooled_never / tot
    for c in range(nc):
        if same[c] != c:
            continue
        a = 0.0
        ar = 0.0
        for j in range(nb):
            x = hist[c, j]
            if prior:
                x = x + padd[j]
            if use_gap:
                x = x + gap[c, j]
            xr = x * rep[j]
            if j == 0:
                a = x
                ar = xr
            else:
                a = a + x
                ar = ar + xr
            H[c, j + 1] = a
            HR[c, j + 1] = ar
        nv = never[c]
        if prior:
            nv = nv + nadd
        total[c] = H[c, nb] + nv
    for c in range(nc):
        if same[c] != c:
            total[c] = total[same[c]]
    out = density_index(H, HR, total, lo, nb, same)
    for c in range(nc):
        for j in range(nb):
            hist[c, j] *= decay
        never[c] *= decay
    return out, same


@_jit
def change_offsets(r, lo_int, rel_tol, cut, rep):
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
        rep: ``(classes,)`` int64, as in :func:`density_index` (equal rows of ``r``).

    Returns:
        ``(classes, nb)`` int64.
    """
    nc, nb = r.shape
    out = np.empty((nc, nb), np.int64)
    has_cut = cut != np.inf
    for c in range(nc):
        q = rep[c]
        if q < c:
            for i in range(nb):
                out[c, i] = out[q, i]
            continue
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
    res = x.copy()
    _cap_in_place(res, pi, back)
    return res


@_jit
def _cap_in_place(res, pi, back):
    """:func:`chain_cap` on ``res`` itself (no copy)."""
    n = res.shape[0]
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


@_jit
def groups(kind, depth, nd, octaves):
    """``kind * nd + min((bit_length(depth + 1) - 1) // octaves, nd - 1)``
    per block (``UtilityPolicy._grps`` with one kind; integer operations,
    so the same groups as the numpy form).

    Args:
        kind: int; depth: ``(n,)`` int64 0-based chain positions;
        nd: depth classes; octaves: depth octaves per class.

    Returns:
        ``(n,)`` int64 class groups.
    """
    n = depth.shape[0]
    out = np.empty(n, np.int64)
    base = kind * nd
    for k in range(n):
        x = depth[k] + 1
        bl = 0
        while x > 0:
            bl += 1
            x >>= 1
        j = (bl - 1) // octaves
        out[k] = base + (j if j < nd - 1 else nd - 1)
    return out


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


@_jit
def reaccess(s, grp, t, reuse_only, last, count, first, cls, hist, bucket, per_kind, max_count, gap_classes,
             gap_octaves, gap_mean):
    """Records ``s`` (slots) accessed again at arrival ``t``: the histogram,
    count, latest access and class updates of ``UtilityPolicy.spfcore_blocks_hit``
    and ``_store`` (``_clss`` for the class) in one pass, with numpy's
    semantics for a slot twice in ``s`` (every field gathered before any is
    written; the histogram adds in order; per field the last write wins), so
    the records come out the same.

    Per block ``k``: ``gap = t - last[s]`` (arrivals); a reuse (every access,
    or with ``reuse_only`` one with ``gap > 0``: a store in the same arrival
    is not one) adds 1.0 to ``hist[cls[s], bucket of gap]`` and 1 to the
    count; then ``last = t`` and the class is ``grp * per_kind + g`` with
    ``g = 0`` after one access, else (``gap_classes``) ``1 + (bit_length(gap')
    - 1) // gap_octaves`` (1 for ``gap' = 0``), ``gap'`` the mean reuse gap
    ``(t - first) // (count - 1)`` with ``gap_mean`` else ``gap``, or
    (not ``gap_classes``) ``count - 1``; ``g`` capped at ``max_count - 1``.
    """
    n = s.shape[0]
    gap = np.empty(n, np.int64)
    c0 = np.empty(n, np.int64)
    cnt = np.empty(n, np.int64)
    fst = np.empty(n, np.int64)
    for k in range(n):
        sk = s[k]
        gap[k] = t - last[sk]
        c0[k] = cls[sk]
        cnt[k] = count[sk]
        fst[k] = first[sk]
    top = bucket.shape[0] - 1
    for k in range(n):
        g = gap[k]
        if not reuse_only or g > 0:
            hist[c0[k], bucket[g if g < top else top]] += 1.0
            cnt[k] += 1
    for k in range(n):
        count[s[k]] = cnt[k]
    for k in range(n):
        last[s[k]] = t
    for k in range(n):
        ck = cnt[k]
        g = 0
        if ck > 1:
            if gap_classes:
                gp = gap[k]
                if gap_mean:
                    gp = (t - fst[k]) // (ck - 1)
                if gp > 0:
                    bl = 0
                    while gp:
                        bl += 1
                        gp >>= 1
                    g = 1 + (bl - 1) // gap_octaves
                else:
                    g = 1
            else:
                g = ck - 1
            if g > max_count - 1:
                g = max_count - 1
        cls[s[k]] = grp[k] * per_kind + g


@_jit
def come_back(slots, state):
    """Classify a stored batch's records (``UtilityPolicy._store``): per
    block 1 if its slot (``-1``: no record) is resident, 2 if it is a ghost
    coming back (made resident: state 1), 0 if a new record is needed (no
    record, or a ghost's hash met again after its first copy came back).
    Residency is judged as before the batch.

    Returns:
        ``(categories int64, whether a ghost's hash came twice)``.
    """
    n = slots.shape[0]
    cat = np.zeros(n, np.int64)
    for k in range(n):
        s = slots[k]
        if s > 0 and state[s] == 1:
            cat[k] = 1
    dup = False
    for k in range(n):
        s = slots[k]
        if s > 0 and cat[k] == 0:
            if state[s] == 2:
                state[s] = 1
                cat[k] = 2
            else:
                dup = True
    return cat, dup


@_jit
def evict_pass(slots, state, never, cls, epoch_of, epoch, q, t, stamp):
    """Records ``slots`` evicted, in order (``UtilityPolicy.spfcore_blocks_evicted``):
    each resident one (state 1; a slot met again, or -1, is skipped: a copy
    whose hash was evicted before) becomes a ghost (state 2), counts as
    never reused (``never[cls] += 1.0``, pessimistic until it comes back),
    gets the table epoch and a new entry at the end of the ghost list
    (``q[t] = slot``, ``stamp[slot] = t``). ``q`` has room for every slot.

    Returns:
        ``(positions in slots of the records evicted, the list's new end)``.
    """
    n = slots.shape[0]
    keep = np.empty(n, np.int64)
    m = 0
    for k in range(n):
        s = slots[k]
        if s > 0 and state[s] == 1:
            state[s] = 2
            keep[m] = k
            m += 1
            q[t] = s
            stamp[s] = t
            t += 1
            never[cls[s]] += 1.0
            epoch_of[s] = epoch
    return keep[:m], t


@_jit
def trim_pass(q, h, t, over, state, stamp):
    """The ``over`` oldest ghosts leave (state 0), walking the ghost list
    ``q[h:t]`` from its front; an entry is a ghost's place iff the slot is a
    ghost stamped with that position (others were left behind by ghosts that
    came back, and are passed over).

    Returns:
        ``(their slots, oldest first, the list's new front)``.
    """
    out = np.empty(over, np.int64)
    m = 0
    while m < over and h < t:
        s = q[h]
        if state[s] == 2 and stamp[s] == h:
            state[s] = 0
            out[m] = s
            m += 1
        h += 1
    return out[:m], h


@_jit
def score_one(t, t0, c, bucket, vals, offs, max_ttl, never_arrival):
    """The index of a record last accessed at arrival ``t0``, class ``c``, at
    arrival ``t`` (its age's bucket in the table ``vals``), and when it
    expires: the arrival at which its age reaches the bucket's change point
    (``offs``; -1: never), at most ``t + max_ttl``; ``never_arrival`` if
    never. Returns ``(value float, expiry int, expires bool)``. The one form of
    the score, shared by the hooks (:func:`score_ids`) and the simulator's
    compiled replay."""
    a = t - t0
    top = bucket.shape[0] - 1
    b = bucket[a if a < top else top]
    off = offs[c, b]
    if off < 0:
        return vals[c, b], never_arrival, False
    y = t0 + off
    z = t + max_ttl
    return vals[c, b], (y if y < z else z), True


@_jit
def score_ids(ids, slot_of_id, pslot_of_id, pgen_of_id, gen, scratch, last, cls, vals, offs, bucket, depth,
              t, max_ttl, cap, never_arrival):
    """The whole score of a batch of block ids in one pass (the id map's
    :meth:`~spfcore_spf_expected_utility.utility.UtilityPolicy._score_by_ids`
    and ``_score_slots`` without ``count_weight``): the same gathers,
    comparisons and integer sums, so the same values and expiries.

    Per block ``k`` (id ``i = ids[k]``, record slot ``s = slot_of_id[i]``):
    age ``a = t - last[s]``, bucket ``b = bucket[min(a, len(bucket) - 1)]``,
    value ``vals[cls[s], b]``, expiry ``min(last[s] + off, t + max_ttl)``
    with ``off = offs[cls[s], b]`` (``off < 0``: ``never_arrival``). With
    ``cap`` (chain_monotone, more than one block) each value is capped at its
    parent's (the block whose slot is the parent slot recorded for ``i``),
    in one pass tail first when the first block is deeper than the last
    (a release batch), else forwards (:func:`chain_cap`).

    Args:
        ids: ``(n,)`` int64 block ids (one outside the map: status 1).
        slot_of_id, pslot_of_id, pgen_of_id: the id map (per block id).
        gen: per slot generation; scratch: per slot, -1 (left as it was).
        last, cls: per slot record arrays; vals, offs: ``(classes + 1, nb)``
            tables; bucket: bucket of each small integer age; depth: per block id.
        t, max_ttl, never_arrival: arrivals.
        cap: bool.

    Returns:
        ``(status, x, e, expiring)``: ``status`` 0 done; 1 a block without a
        record or a slot twice in the batch; 2 a parent slot the map is not sure
        of (both: answer by the general path). ``x`` float64 values, ``e``
        int64 expiries, ``expiring``: whether any ``e`` is below ``never_arrival``.
    """
    n = ids.shape[0]
    x = np.empty(n, np.float64)
    e = np.empty(n, np.int64)
    s = np.empty(n, np.int64)
    m = slot_of_id.shape[0]
    stale = False  # (the passes of the plain form fused: the same checks, the same status)
    ok = True
    for k in range(n):
        i = ids[k]
        v = slot_of_id[i] if 0 <= i < m else 0
        if v == 0:  # a block without a record
            if cap:
                for j in range(k):
                    scratch[s[j]] = -1
            return 1, x, e, False
        s[k] = v
        if cap:
            ps = pslot_of_id[i]
            if ps == 0 or (ps > 0 and gen[ps] != pgen_of_id[i]):  # the parent's slot must still name its record
                stale = True
            if scratch[v] >= 0:  # a slot twice
                ok = False
            scratch[v] = k
    pi = np.empty(n if cap else 0, np.int64)
    if cap and (stale or not ok):
        for k in range(n):
            scratch[s[k]] = -1
        return (2 if stale else 1), x, e, False
    expiring = False
    for k in range(n):
        sk = s[k]
        if cap:
            q = pslot_of_id[ids[k]]
            pi[k] = scratch[q] if q > 0 else -1
        xk, ek, exp = score_one(t, last[sk], cls[sk], bucket, vals, offs, max_ttl, never_arrival)
        x[k] = xk
        e[k] = ek
        if exp:
            expiring = True
    if cap:
        for k in range(n):
            scratch[s[k]] = -1
        if n > 1:
            _cap_in_place(x, pi, depth[ids[0]] > depth[ids[n - 1]])
    return 0, x, e, expiring


@_jit
def _group(kind, d, nd, octaves):
    """``UtilityPolicy._grp``: ``kind * nd + min((bit_length(d + 1) - 1) // octaves, nd - 1)``
    (``kind`` when ``nd == 1``)."""
    if nd == 1:
        return kind
    x = d + 1
    sh = (nd - 1) * octaves
    if sh < 63 and x >> sh > 0:  # bit_length(x) - 1 >= (nd - 1) * octaves: the last depth class
        return kind * nd + nd - 1
    bl = 0
    while x > 0:
        bl += 1
        x >>= 1
    j = (bl - 1) // octaves
    return kind * nd + (j if j < nd - 1 else nd - 1)


@_jit
def store_records(slots, kinds, ids, depth, nd, octaves, t, state, never, cls, epoch_of, epoch, pw, last, count,
                  first, hist, bucket, per_kind, max_count, gap_classes, gap_octaves, gap_mean, fs, nfree):
    """The records' side of a store (``UtilityPolicy._store``) in one pass:
    :func:`come_back`'s classification, the ghosts' :func:`take_back`, new
    records for the rest (slots taken from the top of the free stack, in
    order) and :func:`reaccess` of the records stored again, in that order,
    with the same operations, so the records come out the same.

    Args:
        slots: ``(n,)`` int64 slot of each stored hash's record (``-1``: none).
        kinds: ``(n,)`` or ``(1,)`` int64 kind of each block (one: every block's).
        ids, depth: block ids and the table's depth per block id (the block's group, :func:`_group`).
        pw: ``decay ** k`` for ``k = 0 .. epoch`` at least.
        fs, nfree: the free-slot stack (``fs[:nfree]``, top last); ``nfree >= n``.
        others: the record arrays and class parameters of :func:`reaccess`.

    Returns:
        ``(fin, new, dup, back, nfree)``: the slot of each hash's record after
        the store (only where ``dup`` is False: else a hash came twice and the
        dict decides), the positions given a new record (their slots:
        ``fin[new]``), whether a ghost's hash came twice, ghosts made
        resident, the new stack height.
    """
    n = slots.shape[0]
    grp = np.empty(n, np.int64)
    one = kinds.shape[0] == 1
    for k in range(n):
        grp[k] = _group(kinds[0] if one else kinds[k], depth[ids[k]], nd, octaves)
    cat, dup = come_back(slots, state)
    fin = slots.copy()
    back = 0
    m = 0
    for k in range(n):
        c = cat[k]
        if c == 2:  # a ghost comes back: its eviction counted as "never"; take it back
            s = slots[k]
            cc = cls[s]
            nv = never[cc] - pw[epoch - epoch_of[s]]
            never[cc] = nv if nv > 0.0 else 0.0
            back += 1
        elif c == 0:
            m += 1
    new = np.empty(m, np.int64)
    base = nfree - m
    j = 0
    for k in range(n):
        if cat[k] == 0:  # a new record: one access, class 0 of its group
            s = fs[base + j]
            new[j] = k
            j += 1
            fin[k] = s
            last[s] = t
            count[s] = 1
            cls[s] = grp[k] * per_kind
            first[s] = t
            state[s] = 1
    if m < n:  # stored again in the same arrival (gap 0): not a reuse
        rs = np.empty(n - m, np.int64)
        og = np.empty(n - m, np.int64)
        j = 0
        for k in range(n):
            if cat[k] > 0:
                rs[j] = slots[k]
                og[j] = grp[k]
                j += 1
        reaccess(rs, og, t, True, last, count, first, cls, hist, bucket, per_kind, max_count, gap_classes,
                 gap_octaves, gap_mean)
    return fin, new, dup, back, base


@_jit
def map_stored(ids, fin, p0, slot_of_id, nhold, id_of_slot, pslot_of_id, pgen_of_id, gen):
    """The id map's side of a store (``UtilityPolicy._map_stored``): block
    ``ids[k]`` holds record ``fin[k]`` (:func:`assign`); its parent's slot is
    ``fin[k - 1]`` (``p0`` for the first block: ``-1`` at depth 0, ``0``
    unknown), kept with that slot's generation. ``False`` (nothing done) if an
    id lies beyond the map."""
    n = ids.shape[0]
    m = slot_of_id.shape[0]
    for k in range(n):
        if ids[k] < 0 or ids[k] >= m:
            return False
    assign(slot_of_id, nhold, id_of_slot, ids, fin)
    for k in range(n):
        ps = p0 if k == 0 else fin[k - 1]
        i = ids[k]
        pslot_of_id[i] = ps
        pgen_of_id[i] = gen[ps if ps > 0 else 0]
    return True


@_jit
def hit_ids(ids, slot_of_id, state, kind, depth, nd, octaves, t, last, count, first, cls, hist, bucket, per_kind,
            max_count, gap_classes, gap_octaves, gap_mean):
    """A hit on blocks whose records the id map names (each id mapped to a
    resident record): :func:`reaccess` of those records, groups of ``kind``
    at each block's depth (``UtilityPolicy.spfcore_blocks_hit``). ``False``
    (nothing done) if an id is beyond the map or not mapped to a resident
    record (the hook then goes by hash)."""
    n = ids.shape[0]
    m = slot_of_id.shape[0]
    s = np.empty(n, np.int64)
    for k in range(n):
        i = ids[k]
        if i < 0 or i >= m:
            return False
        v = slot_of_id[i]
        if v <= 0 or state[v] != 1:
            return False
        s[k] = v
    grp = np.empty(n, np.int64)
    for k in range(n):
        grp[k] = _group(kind, depth[ids[k]], nd, octaves)
    reaccess(s, grp, t, False, last, count, first, cls, hist, bucket, per_kind, max_count, gap_classes,
             gap_octaves, gap_mean)
    return True


@_jit
def evict_records(slots, state, never, cls, epoch_of, epoch, q, qt, stamp, last, vals, bucket, t, ids_ok, nhold,
                  slot_of_id, id_of_slot):
    """The records' and the id map's side of an eviction
    (``UtilityPolicy.spfcore_blocks_evicted``): the frontier candidate (the
    index of the last victim, if its record is resident: ``vals[cls,
    bucket of its age]``, else -1.0), :func:`evict_pass`, then (``ids_ok``)
    each evicted record held by one block id unmapped (``UtilityPolicy._unmap_one``).

    Returns:
        ``(x, positions evicted, the ghost list's new end, positions of
        records held by several ids (left mapped: the caller makes orphans))``.
    """
    n = slots.shape[0]
    x = -1.0
    s = slots[n - 1]
    if s > 0 and state[s] == 1:
        a = t - last[s]
        top = bucket.shape[0] - 1
        x = vals[cls[s], bucket[a if a < top else top]]
    keep, qt = evict_pass(slots, state, never, cls, epoch_of, epoch, q, qt, stamp)
    nm = 0
    multi = np.empty(keep.shape[0], np.int64)
    if ids_ok:
        for j in range(keep.shape[0]):
            r = slots[keep[j]]
            h = nhold[r]
            if h == 1:
                slot_of_id[id_of_slot[r]] = 0
                nhold[r] = 0
            elif h > 1:
                multi[nm] = j
                nm += 1
    return x, keep, qt, multi[:nm]


def warm() -> None:
    """Compile every loop (or load them from numba's cache) now, on tiny
    arrays of the layouts the policy passes (its record fields and id map
    are column views of row-major tables: non-contiguous 1-d arrays), so no
    hook compiles."""
    H = np.zeros((2, 4))
    lo = np.array([0.0, 1.0, 2.0, 4.0])
    two = np.array([0, 0], np.int64)
    idx = density_index(H, H, np.ones(2), lo, 3, two)
    index_table(np.zeros((2, 3)), np.zeros(2), np.zeros(3), 0.0, 1.0, 0.3, True, np.zeros((2, 3)), True,
                np.ones(3), lo, 3, 2, 0.999)
    change_offsets(idx, np.array([0, 1, 2, 4], np.int64), 0.0, np.inf, two)
    chain_cap(np.ones(3), np.array([1, 2, -1], np.int64), True)
    groups(1, np.arange(3, dtype=np.int64), 4, 2)
    R = np.zeros((4, 8), np.int64)  # per slot: state, last, cls, count, first, epoch_of, nhold, id_of_slot
    state, last, cls, count, first, epoch_of, nhold, id_of_slot = (R[:, j] for j in range(8))
    M = np.zeros((4, 4), np.int64)  # per block id: slot, parent slot, parent generation
    slot_of_id, pslot_of_id, pgen_of_id = (M[:, j] for j in range(3))
    z = np.zeros(4, np.int64)
    ids = np.array([1, 2], np.int64)
    hist, vals, offs, bucket = np.zeros((2, 3)), np.zeros((2, 3)), np.full((2, 3), -1, np.int64), np.zeros(3, np.int64)
    cls[:] = 1
    assign(slot_of_id, nhold, id_of_slot, ids, two)
    parent_pos(ids, np.array([2, -1], np.int64), np.full(4, -1, np.int64))
    reaccess(ids, two, 3, True, last, count, first, cls, hist, bucket, 2, 2, True, 1, True)
    score_ids(ids, slot_of_id, pslot_of_id, pgen_of_id, z.copy(), np.full(4, -1, np.int64), last, cls, vals, offs,
              bucket, z.copy(), 1, 8, True, 2**62)
    store_records(np.array([1, -1], np.int64), np.array([1], np.int64), ids, z.copy(), 4, 2, 3, state, np.zeros(3),
                  cls, epoch_of, 1, np.ones(2), last, count, first, hist, bucket, 2, 2, True, 1, True,
                  np.array([3, 2], np.int64), 2)
    map_stored(ids, ids, -1, slot_of_id, nhold, id_of_slot, pslot_of_id, pgen_of_id, z.copy())
    hit_ids(ids, slot_of_id, state, 1, z.copy(), 4, 2, 3, last, count, first, cls, hist, bucket, 2, 2, True, 1, True)
    evict_records(np.array([1, -1], np.int64), state, np.zeros(3), cls, epoch_of, 1, z.copy(), 0, z.copy(), last,
                  vals, bucket, 3, True, nhold, slot_of_id, id_of_slot)
    trim_pass(np.array([1, 2], np.int64), 0, 2, 1, state, z.copy())
