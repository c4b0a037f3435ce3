"""The sequential replay of the shipped ``spf_expected_utility`` arm, variant
``"utility"`` (learned hit density), as one numba-compiled loop over int
arrays: the same model, the same decisions and the same counts as
:func:`spfcore.sim.simulator._run_sequential` driving a
:class:`~spfcore.runtime.PolicyRuntime` with
``spfcore_spf_expected_utility.ExpectedUtilityPolicy`` (its hooks, see
:mod:`spfcore_spf_expected_utility.utility`) and the scored evictor it runs on
(:mod:`spfcore.evictor`).

Imported by the simulator on the first compiled ``spf`` replay only (see
:mod:`spfcore.sim._replay_nb` for why numba is loaded late). Other modules'
compiled code is called from inside the kernel:

* the pool (per-key block lists, hashless stack, victims, counters):
  :mod:`spfcore.sim._replay_nb` (``_insert``, ``_retire``, ``init``);
* the policy's per-block passes and table rebuild:
  ``spfcore_spf_expected_utility._nb`` (``store_records``, ``reaccess``,
  ``evict_pass``, ``trim_pass``, ``index_table``, ``change_offsets``,
  ``_group``), the plugin's own functions;
* the scored evictor's expiry pieces, :mod:`spfcore._evictor_nb`
  (``due_entries``, ``_q_fits``, ``_q_last``, the arrivals heap's
  ``_t_push`` / ``_t_drop`` / ``_t_filter``), on its state layout (rows
  ``IN``, ``ORD``, ``VER`` per block, its counters).

The evictor's order and calendar are kept here in forms that give the same
victims and the same re-score rounds for this policy (every block admitted,
never pinned: the key is ``(value, release order)``, total), cheaper per
re-score (about 330 blocks re-scored per arrival on the Mooncake trace, 19
times the victims): chunked minima of int64 order keys instead of the lazy-deletion heap (see
the order section), an intrusive calendar instead of the pooled one (see the
calendar section). The due blocks are read in the evictor's ``(expiry,
version)`` order, the victims are its lowest keys, and the counters it
keeps (versions, live blocks, the calendar's window) move as in it.

What this module adds is the plugin's Python glue, over key ids instead of
hashes: the record dict ``rec`` (hash -> slot of its newest record) is
``kr[key, REC]``, the ghost records of resident hashes (``_dual``) are
``kr[key, DUAL]``, a slot's hash (``key_of``) is ``sr[slot, KEY]``; the
prompt's hash set is a stamp per key id (``kr[:, MARK]``); scores are computed
as the plugin's by-hash path does (``_score_by_keys``: the resident record of
each block's hash, the chain cap by parent hash, the latest copy of a hash met
in the pass capping its children), which the plugin's id-map path answers
identically; a re-score reads each block's record inputs from a per-block
row (``bsc``, kept current by :func:`_refresh`), and the cap finds the
parent's hash without a per-hash table (:func:`_score`). The plugin's id map, orphans and slot generations decide nothing
(they only pick between the two identical paths) and are not kept. The
histogram reductions numpy does in ``UtilityPolicy._build`` are reproduced in
numpy's summation order (``hist.sum(0)``: row by row; ``never.sum()`` and
``pooled.sum()``: numpy's pairwise sum, :func:`_pairwise`); ``decay ** k`` is
Python's, computed by the caller (:func:`run`).

Runtime order per request (:func:`spfcore.sim.simulator._run_sequential`):
arrival hook (table rebuild every ``period`` arrivals, request kind), expired
scores re-scored (one score call), lookup, hit hook, touch, allocation
(expired scores first if cached blocks are taken; victims; one evicted call
with the cached victims' hashes), store hook (new full prompt blocks), decode
(store one block, allocate one), release (one score call for the cached
blocks, tail first; hashless blocks on top of the stack).

Covered: every ``utility`` parameter except ``count_weight`` > 0 (the
simulator's Python loop runs that, and the ``seed`` variant).

State: a dict of arrays (:func:`new_state`), grown by :func:`grow`
(key ids) and by :func:`run` (record slots, between requests); key ids may
be renumbered between calls (:func:`remap`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from spfcore import _evictor_nb as ev
from spfcore.sim._replay_nb import EVICT_CALLS, HSN, LRUN, NVICT, _insert, _lookup, _retire, init, warm_trace
from spfcore_spf_expected_utility import _nb as pnb
from spfcore_spf_expected_utility.params import ghost_entries

#: More counter indices (after ``_replay_nb``'s first five): hook calls,
#: release orders handed out, the block a lookup found twice, the request a
#: status names, blocks met by the chain cap's passes (:func:`_score`).
HOOK_CALLS, ORDER, TWICE, AT, PASS = range(5, 10)
NCOUNTERS_S = 10
#: :func:`replay_spf` status: done, a request too big, a lookup found a block twice, more record slots needed.
DONE, TOO_BIG, FOUND_TWICE, NEED_SLOTS = range(4)
#: Per-slot columns of ``sr`` (``(slots, 8)``: one 64-byte row per slot, as the plugin's ``_R``; its
#: record fields, ``_REC``; ``KEY``: the slot's hash, ``STAMP``: its ghost-list position).
STATE, LAST, CLS, COUNT, FIRST, EPOCH_OF, KEY, STAMP = range(8)
NSCOLS = 8
#: Per-key-id columns of ``kr`` (``(key ids, 3)``): slot of its newest record (-1: none), of its
#: ghost record while a newer one is resident (-1: none), the prompt stamp (arrival + 1 of the
#: request whose prompt holds it).
REC, DUAL, MARK = range(3)
NKCOLS = 3
#: Policy counters ``pc``: arrival, kind of the request's prompt blocks, next rebuild, table epoch,
#: ghost records, free slots, ghost list head and end. Floats ``pf``: frontier, next frontier.
T, KIND, NEXT_BUILD, EPOCH, NGHOST, NFREE, QH, QT = range(8)
THETA, THETA_NEXT = range(2)
#: Integer parameters ``ip``.
(ROOT_BLOCKS, PERIOD, MAX_TTL, CHAIN_MONO, GAP_CLASSES, GAP_OCTAVES, GAP_MEAN, ND, DEPTH_OCT, PER_KIND,
 MAX_COUNT, GHOST_CAP, NBK, NC, USE_GAP, PIN_CAP) = range(16)
#: Float parameters ``fp``.
PRIOR_WEIGHT, DECAY, REL_TOL, CUT_FACTOR = range(4)
NEVER = 2**62

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _pairwise_leaf(a, lo, n):
    """numpy's pairwise sum of ``a[lo:lo + n]`` for ``n <= 128``: sequential
    below 8, else eight accumulators, combined as a tree, then the rest."""
    if n < 8:
        res = -0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    m = n - n % 8
    while i < m:
        j = lo + i
        r0 += a[j]
        r1 += a[j + 1]
        r2 += a[j + 2]
        r3 += a[j + 3]
        r4 += a[j + 4]
        r5 += a[j + 5]
        r6 += a[j + 6]
        r7 += a[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@_jit
def _pairwise(a, lo, n):
    """numpy's pairwise sum of ``a[lo:lo + n]`` (float64, contiguous): the
    same additions in the same order (``DOUBLE_pairwise_sum``: blocks of at
    most 128 by :func:`_pairwise_leaf`; above, the two halves, the first
    ``n // 2`` rounded down to a multiple of 8, summed and added). The
    recursion is run on an explicit stack (numba's cache does not keep
    recursive functions)."""
    if n <= 128:
        return _pairwise_leaf(a, lo, n)
    slo = np.empty(64, np.int64)
    sn = np.empty(64, np.int64)
    sstate = np.zeros(64, np.int64)
    sleft = np.zeros(64, np.float64)
    slo[0], sn[0], sstate[0] = lo, n, 0
    d = 0
    ret = 0.0
    while d >= 0:
        m = sn[d]
        if m <= 128:
            ret = _pairwise_leaf(a, slo[d], m)
            d -= 1
            continue
        h = m // 2
        h -= h % 8
        st = sstate[d]
        if st == 0:  # the first half
            sstate[d] = 1
            d += 1
            slo[d], sn[d], sstate[d] = slo[d - 1], h, 0
        elif st == 1:  # its sum came back: the second half
            sleft[d] = ret
            sstate[d] = 2
            d += 1
            slo[d], sn[d], sstate[d] = slo[d - 1] + h, m - h, 0
        else:
            ret = sleft[d] + ret
            d -= 1
    return ret


@_jit
def np_sum(a):
    """``a.sum()`` of a 1-d contiguous float64 array, bit for bit as numpy
    (the reduction starts from 0.0 and adds the pairwise sum)."""
    return 0.0 + _pairwise(a, 0, a.shape[0])


@_jit
def _build(hist, never, vals, offs, gap_prior, rep, lo_f, lo_int, ip, fp, pc, pf):
    """``UtilityPolicy._build``: the index table and its re-score offsets
    from the histograms (then decayed), the frontier moved on, a new epoch."""
    nc, nb = hist.shape
    pooled = np.empty(nb)
    for j in range(nb):
        pooled[j] = hist[0, j]
    for c in range(1, nc):  # hist.sum(0): row by row
        for j in range(nb):
            pooled[j] += hist[c, j]
    pooled_never = np_sum(never)
    tot = np_sum(pooled) + pooled_never
    pw = fp[PRIOR_WEIGHT]
    idx, same = pnb.index_table(hist, never, pooled, pooled_never, tot, pw, tot > 0 and pw > 0, gap_prior,
                                ip[USE_GAP] != 0, rep, lo_f, nb, ip[PER_KIND], fp[DECAY])
    theta = pf[THETA]
    cut = fp[CUT_FACTOR] * theta if theta > 0 else np.inf
    o = pnb.change_offsets(idx, lo_int, fp[REL_TOL], cut, same)
    for c in range(nc):
        for j in range(nb):
            vals[c, j] = idx[c, j]
            offs[c, j] = o[c, j]
    pf[THETA] = pf[THETA_NEXT]
    pf[THETA_NEXT] = 0.0
    pc[EPOCH] += 1


# ------------------------------------------------------------ the order
# The scored evictor's order for this policy: every block admitted (tier 1), never pinned, so the
# key is (value, release order ``ib[ORD, b]``), total (release orders are distinct); the lowest
# free block is the victim. Any exact minimum gives the evictor's victims, so the order is kept in a
# form that makes a re-score O(1) (a re-score round moves about 330 blocks per arrival on the
# Mooncake trace, 19 times the victims) and a victim a few vector passes: per block its value as an
# order key ``ok[b]`` (:func:`_okey`, int64, ordered as the values; ``EMPTY`` while the block is
# not in the order), block ids in chunks of ``CHUNK``, per chunk the id of its lowest block ``cmb``
# (-1: none) and that block's key ``cmk`` (``EMPTY``: none) and release order ``cmo``. A victim is
# the lowest chunk minimum; a chunk is scanned again when its minimum leaves or rises. The scans
# are minimum reductions over int64 (vectorized; ties on the value, frequent since the values come
# from a table, broken by a second pass over the release orders). The evictor's rows IN, ORD and
# VER (and its calendar and expiry heaps) are kept as it keeps them, so its expiry kernels
# (``q_due_any``, ``due_live``, ``drain``) read this state as their own.
CHUNK = 64
#: The order key of a block not in the order (above every value's key).
EMPTY = 2**63 - 1


@_jit
def _okey(x):
    """The order key of a value ``x`` (float64, not NaN): an int64 that
    orders as the values do, equal for equal values (``-0.0`` as ``0.0``):
    the IEEE-754 bits, the non-sign bits flipped for negatives (the usual
    total-order map of doubles)."""
    b = np.float64(x + 0.0).view(np.int64)
    return b ^ ((b >> 63) & 0x7FFFFFFFFFFFFFFF)


@_jit
def _o_less(a, b, ok, ib):
    """Whether block ``a``'s key ranks below block ``b``'s."""
    ka, kb = ok[a], ok[b]
    return ka < kb or (ka == kb and ib[ev.ORD, a] < ib[ev.ORD, b])


@_jit
def _o_min(b, cmb, cmk, cmo, ok, ib):
    """Block ``b`` is its chunk's minimum."""
    c = b // CHUNK
    cmb[c] = b
    cmk[c] = ok[b]
    cmo[c] = ib[ev.ORD, b]


#: :func:`_lowest` packs ``(release order, index)`` into one int64: indices below ``2**IX_BITS``, release
#: orders below ``2**(63 - IX_BITS)`` (checked by :func:`new_state` and :func:`run`).
IX_BITS = 24
IX_MASK = (1 << IX_BITS) - 1
MAX_ORDER = 1 << (63 - IX_BITS)


@_jit
def _lowest(k, o, lo, hi):
    """The index ``j`` in ``lo:hi`` of the lowest ``(k[j], o[j])`` (``o``
    distinct where ``k`` ties) and that key: ``(j, k[j], o[j])``; ``(-1,
    EMPTY, EMPTY)`` if every ``k`` is ``EMPTY``. Two minimum reductions (the
    second over ``(o[j], j - lo)`` packed), on slices, whose indices from 0 let
    the loops vectorize."""
    ks = k[lo:hi]
    os_ = o[lo:hi]
    n = ks.shape[0]
    m = EMPTY
    for j in range(n):
        v = ks[j]
        if v < m:
            m = v
    if m == EMPTY:
        return -1, m, m
    mo = EMPTY
    for j in range(n):
        v = (os_[j] << IX_BITS) | j if ks[j] == m else EMPTY
        if v < mo:
            mo = v
    return lo + (mo & IX_MASK), m, mo >> IX_BITS


@_jit
def _o_scan(c, cmb, cmk, cmo, ok, ib):
    """Chunk ``c``'s minimum anew (a scan of its blocks' keys)."""
    lo = c * CHUNK
    hi = lo + CHUNK
    if hi > ok.shape[0]:
        hi = ok.shape[0]
    cmb[c], cmk[c], cmo[c] = _lowest(ok, ib[ev.ORD], lo, hi)


@_jit
def _o_remove(b, cmb, cmk, cmo, ok, ib):
    """Block ``b`` leaves the order (``ib[IN, b]`` already 0)."""
    ok[b] = EMPTY
    c = b // CHUNK
    if cmb[c] == b:
        _o_scan(c, cmb, cmk, cmo, ok, ib)


@_jit
def _o_pop(cmb, cmk, cmo, ok, ib, ec):
    """The lowest free block, out of the order (IN cleared, LIVE counted)."""
    c, _, _ = _lowest(cmk, cmo, 0, cmk.shape[0])
    b = cmb[c]
    ib[ev.IN, b] = 0
    ec[ev.LIVE] -= 1
    _o_remove(b, cmb, cmk, cmo, ok, ib)
    return b


#: :func:`_o_take` pops through a heap of the chunks from this many blocks on (below, :func:`_o_pop`
#: each: its scan of the chunk minima is cheaper than building the heap).
HEAP_FROM = 8


@_jit
def _c_less(a, b, cmk, cmo):
    """Whether chunk ``a``'s minimum ranks below chunk ``b``'s."""
    return cmk[a] < cmk[b] or (cmk[a] == cmk[b] and cmo[a] < cmo[b])


@_jit
def _c_sift(h, i, m, cmk, cmo):
    """Chunk ``h[i]`` sifted down the binary min-heap ``h[:m]`` of chunks (by their minima)."""
    x = h[i]
    while True:
        j = 2 * i + 1
        if j >= m:
            break
        if j + 1 < m and _c_less(h[j + 1], h[j], cmk, cmo):
            j += 1
        if not _c_less(h[j], x, cmk, cmo):
            break
        h[i] = h[j]
        i = j
    h[i] = x


@_jit
def _o_take(n, blocks, at, cmb, cmk, cmo, ok, ib, ec, qe, qb):
    """The ``n`` lowest free blocks (at most the free ones), lowest first,
    into ``blocks[at:]``, out of the order and the calendar: :func:`_o_pop`
    each, the same blocks, found through a heap of the chunks by their
    minima (built once; a chunk is scanned anew and sifted down after each
    block it gives) when ``n`` is :data:`HEAP_FROM` or more."""
    if n < HEAP_FROM:
        for j in range(n):
            b = _o_pop(cmb, cmk, cmo, ok, ib, ec)
            _c_unlink(b, qe, qb)
            blocks[at + j] = b
        return
    h = np.empty(cmb.shape[0], np.int64)
    m = 0
    for c in range(cmb.shape[0]):
        if cmb[c] >= 0:
            h[m] = c
            m += 1
    for i in range(m // 2 - 1, -1, -1):
        _c_sift(h, i, m, cmk, cmo)
    for j in range(n):
        c = h[0]
        b = cmb[c]
        ib[ev.IN, b] = 0
        ec[ev.LIVE] -= 1
        _o_remove(b, cmb, cmk, cmo, ok, ib)
        _c_unlink(b, qe, qb)
        blocks[at + j] = b
        if cmb[c] < 0:  # the chunk is empty: the heap's last takes its place
            m -= 1
            h[0] = h[m]
        _c_sift(h, 0, m, cmk, cmo)


# ------------------------------------------------------------ the expiry calendar
# The evictor's arrivals calendar (an expiry at integer arrival ``x`` with ``base <= x < base + QW``
# waits in bucket ``x % QW``, in push order = version order; others on the arrivals heap, merged by
# ``(expiry, version)`` when read; ``base``: ``ec[QBASE]``, moved as the evictor moves it), kept
# intrusively: a free block has at most one live expiry (the one of its version), so each block is
# in at most one bucket, a doubly linked list through ``qe`` (``(blocks, 4)``: per block its expiry,
# next and previous block, -1 none, and a pad: one 32-byte row, so a push or an unlink touches one
# line per block), and leaves it when re-placed, hit or taken. The buckets hold no stale
# entry, so a round reads only due blocks. ``qb`` ``(2, QW)``: first and last block per bucket.
QW = ev.QW


@_jit
def _c_unlink(b, qe, qb):
    """Block ``b`` leaves its bucket (if in one)."""
    x = qe[b, 0]
    if x < 0:
        return
    k = x & (QW - 1)
    nx, pv = qe[b, 1], qe[b, 2]
    if pv >= 0:
        qe[pv, 1] = nx
    else:
        qb[0, k] = nx
    if nx >= 0:
        qe[nx, 2] = pv
    else:
        qb[1, k] = pv
    qe[b, 0] = -1


@_jit
def _c_push(b, y, qe, qb):
    """Block ``b`` (in no bucket) at the end of bucket ``y % QW``."""
    k = y & (QW - 1)
    t = qb[1, k]
    qe[b, 0], qe[b, 1], qe[b, 2] = y, -1, t
    if t >= 0:
        qe[t, 1] = b
    else:
        qb[0, k] = b
    qb[1, k] = b


@_jit
def _c_due_any(arrival, qb, ec):
    """``spfcore._evictor_nb.q_due_any``: whether a bucket due by ``arrival``
    holds a block; if none does, ``base`` moves past the clock."""
    last = ev._q_last(arrival, ec)
    for x in range(ec[ev.QBASE], last + 1):
        if qb[0, x & (QW - 1)] >= 0:
            return True
    if last >= ec[ev.QBASE]:
        ec[ev.QBASE] = np.int64(np.floor(min(arrival, ev.NEVER_ARRIVAL_F))) + 1
    return False


@_jit
def _c_drain(arrival, qb, ec):
    """``spfcore._evictor_nb._q_drain``: the buckets due by ``arrival`` emptied (their blocks
    already out of them: :func:`_due` unlinks each as it reads it), ``base`` moved past them."""
    last = ev._q_last(arrival, ec)
    if last < ec[ev.QBASE]:
        return
    for x in range(ec[ev.QBASE], last + 1):
        k = x & (QW - 1)
        qb[0, k] = qb[1, k] = -1
    ec[ev.QBASE] = np.int64(np.floor(min(arrival, ev.NEVER_ARRIVAL_F))) + 1


@_jit
def _place(ids, values, exp_a, orders, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec):
    """``spfcore._evictor_nb.place`` for this policy's answers (tier 1, no
    pin, arrival expiries ``exp_a`` float64, ``NEVER``: none): in sequence,
    per block a new version, its expiry registered (the calendar if it fits,
    else the arrivals heap), and its key set (a block in the order at the same
    value stays where it is; ``orders`` empty: each block's own release order,
    a re-score; a chunk whose minimum rose is scanned once, after the
    batch); then stale expiry entries dropped as ``place`` does. The
    blocks are in no calendar bucket (a due block left it in :func:`_due`, a
    hit or taken block in :func:`_c_unlink`), so a heap entry of theirs is
    what goes stale. Returns False (nothing done) if an expiry structure lacks
    room."""
    n = ids.shape[0]
    if max(ec[ev.TN], ec[ev.AN]) + n > ak.shape[0]:
        return False
    has_ord = orders.shape[0] > 0
    rise = np.zeros(cmb.shape[0], np.bool_)  # per chunk: its minimum rose in this batch (in ``rn[:nr]``)
    rn = np.empty(cmb.shape[0], np.int64)
    nr = 0
    v = ec[ev.VERSION]
    an = ec[ev.AN]
    for k in range(n):
        i = ids[k]
        value = values[k]
        v += 1
        y = exp_a[k]
        if y < ev.NEVER_ARRIVAL_F:
            if ev._q_fits(y, ec):
                _c_push(i, np.int64(y), qe, qb)
            else:
                an = ev._t_push(ak, ai, an, y, v, i)
        ib[ev.VER, i] = v
        key = _okey(value)
        if ib[ev.IN, i]:
            old = ok[i]
            if old == key:  # same rank: stays where it is
                continue
        else:
            old = EMPTY
            ib[ev.IN, i] = 1
            ec[ev.LIVE] += 1
            if has_ord:
                ib[ev.ORD, i] = orders[k]
        ok[i] = key
        c = i // CHUNK
        if rise[c]:
            continue
        m = cmb[c]
        if m == i:
            if key > old:  # its chunk's minimum rose: scanned once, after the batch
                rise[c] = True
                rn[nr] = c
                nr += 1
            else:
                cmk[c] = key
        elif m < 0 or _o_less(i, m, ok, ib):
            _o_min(i, cmb, cmk, cmo, ok, ib)
    for j in range(nr):
        _o_scan(rn[j], cmb, cmk, cmo, ok, ib)
    ec[ev.VERSION] = v
    tn = ec[ev.TN]
    if tn + an > 2 * ec[ev.LIVE] + 1024:  # (stale heap entries; the calendar keeps none)
        tn = ev._t_filter(ib, tk, ti, tn, -np.inf, True)
        an = ev._t_filter(ib, ak, ai, an, -np.inf, True)
    ec[ev.TN], ec[ev.AN] = tn, an
    return True


@_jit
def _inputs(k, kr, sr):
    """The score inputs of key id ``k``: ``(last access, class)`` of its
    resident record, the sentinel's (slot 0: class ``nc``, the all-zero row
    of the table) without one."""
    s = kr[k, REC]
    if s < 0 or sr[s, STATE] != 1:
        s = 0
    return sr[s, LAST], sr[s, CLS]


@_jit
def _refresh(blocks, lo, hi, key_of, kh, dn, dp, kr, sr, ib, bsc):
    """After the records of the keys of ``blocks[lo:hi]`` changed (a hit, a
    store, an eviction): the score inputs ``bsc`` of every free block holding
    one of those keys anew (a hash cached twice: the other copy's; a block
    alone in its key's list needs nothing, it is in use)."""
    for j in range(lo, hi):
        bj = blocks[j]
        k = key_of[bj]
        if k < 0 or (dn[bj] < 0 and dp[bj] < 0):
            continue
        last, cls = _inputs(k, kr, sr)
        b = kh[k]
        while b >= 0:
            if ib[ev.IN, b]:
                bsc[b, 0] = last
                bsc[b, 1] = cls
            b = dn[b]


@_jit
def _score(ids, cached, key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, t, ip, c):
    """``spfcore_score_blocks`` of blocks ``ids`` (by hash, as
    ``UtilityPolicy._score_by_keys``): per block the value ``vals[cls,
    bucket of age]`` of its hash's resident record (0, never expiring,
    without one), capped at its parent's within the batch (``chain_monotone``;
    the pass runs tail first when the first block is deeper than the last;
    the latest copy of a hash met in the pass caps), and the expiry
    ``min(last + offset, t + max_ttl)`` (offset < 0: never), as float64 (the
    evictor's column).

    The record's ``(last, class)`` come from ``bsc`` (per block, ``(B, 2)``)
    when ``cached`` (a re-score: the blocks are free, and :func:`_refresh`
    keeps their inputs current), else from the records, written to ``bsc`` (a
    release). The cap finds a parent's hash as the block met just before
    (almost always: a chain re-scored or released together), else among the
    parent hash's cached blocks, by ``bq`` (per block, the pass order it was
    met in, counted across calls by ``c[PASS]``).

    Returns:
        ``(values float64 (n,), arrival expiries float64 (n,))``.
    """
    n = ids.shape[0]
    x = np.empty(n, np.float64)
    e = np.empty(n, np.float64)
    mt = ip[MAX_TTL]
    for k in range(n):
        b = ids[k]
        if not cached:
            bsc[b, 0], bsc[b, 1] = _inputs(key_of[b], kr, sr)
        xk, ek, _ = pnb.score_one(t, bsc[b, 0], bsc[b, 1], bucket, vals, offs, mt, NEVER)
        x[k] = xk
        e[k] = ek
    if n > 1 and ip[CHAIN_MONO] != 0:
        base = c[PASS]
        c[PASS] = base + n
        back = depth_of[ids[0]] > depth_of[ids[n - 1]]
        kq = -1  # the position of the block met just before
        for q in range(n):
            k = n - 1 - q if back else q
            b = ids[k]
            p = par_of[b]
            if p >= 0:
                j = -1
                if kq >= 0 and key_of[ids[kq]] == p:
                    j = kq
                else:  # the latest block of hash p met in this pass, if any
                    top = base - 1
                    d = kh[p]
                    while d >= 0:
                        if bq[d] > top:
                            top = bq[d]
                        d = dn[d]
                    if top >= base:
                        j = n - 1 - (top - base) if back else top - base
                if j >= 0 and x[j] < x[k]:
                    x[k] = x[j]
            bq[b] = base + q
            kq = k
    return x, e


@_jit
def _lexsort2(primary, secondary):
    """``np.lexsort((secondary, primary))`` (stable sorts, so ties keep their order)."""
    o = np.argsort(secondary, kind="mergesort")
    o2 = np.argsort(primary[o], kind="mergesort")
    return o[o2]


@_jit
def _due_sorted(hk, hi, n, bound):
    """``spfcore._evictor_nb.due_entries`` of one expiry heap (``n`` entries,
    due by ``bound``): ``(expiries, versions, ids)`` sorted by ``(expiry,
    version)``."""
    k, v, i = ev.due_entries(hk, hi, n, bound)
    if v.shape[0] > 1:
        o = _lexsort2(k, v)
        k, v, i = k[o], v[o], i[o]
    return k, v, i


@_jit
def _keep_live(out, m, i, v, ib):
    """Append block ``i`` to ``out[:m]`` if its entry's version ``v`` is live
    (a heap entry of a block in the order, not re-placed since); returns the
    new length. (The calendar's entries are live by construction.)"""
    if ib[ev.IN, i] and ib[ev.VER, i] == v:
        out[m] = i
        m += 1
    return m


@_jit
def _due(now, arrival, ib, tk, ti, ak, ai, qe, qb, c):
    """``spfcore._evictor_nb.due``: the blocks whose score expired by
    ``now`` (seconds heap) then ``arrival`` (the calendar's due buckets merged
    with the arrivals heap's live due entries), in ``(expiry, version)``
    order, each once (a block has one live entry). The calendar's blocks read
    leave their buckets (``qe``; :func:`_c_drain` empties the buckets)."""
    tv = np.empty(0, np.int64)
    tid = np.empty(0, np.int64)
    if c[ev.TN]:
        _, tv, tid = _due_sorted(tk, ti, c[ev.TN], now)
    ak_ = np.empty(0, np.float64)
    av = np.empty(0, np.int64)
    aid = np.empty(0, np.int64)
    if c[ev.AN]:
        ak_, av, aid = _due_sorted(ak, ai, c[ev.AN], arrival)
    last = ev._q_last(arrival, c)
    out = np.empty(tid.shape[0] + aid.shape[0] + c[ev.LIVE], np.int64)
    m = 0
    for j in range(tid.shape[0]):
        m = _keep_live(out, m, tid[j], tv[j], ib)
    h, nh = 0, aid.shape[0]
    for x in range(c[ev.QBASE], last + 1):
        b = qb[0, x & (QW - 1)]
        while b >= 0:
            if h < nh:
                v = ib[ev.VER, b]
                while h < nh and (ak_[h] < x or (ak_[h] == x and av[h] < v)):
                    m = _keep_live(out, m, aid[h], av[h], ib)
                    h += 1
            out[m] = b
            m += 1
            qe[b, 0] = -1  # (out of its bucket: _c_drain empties the buckets read here)
            b = qe[b, 1]
    while h < nh:
        m = _keep_live(out, m, aid[h], av[h], ib)
        h += 1
    return out[:m]


@_jit
def _expire(now, arrival, key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, ip, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai,
            qe, qb, ec, c):
    """``Evictor.plan_expired`` + ``commit``: if a score expired by
    ``arrival`` (the evictor's short-circuit test: seconds heap, arrivals
    heap, then the calendar, which moves its window when nothing is due), the
    due blocks are re-scored in one score call and placed again (tier and
    release order kept); the due entries are dropped. Returns -1, or -2 if
    the evictor lacked room (a bug)."""
    due = False
    if ec[ev.TN] != 0 and tk[0] <= now:
        due = True
    elif ec[ev.AN] != 0 and ak[0] <= arrival:
        due = True
    elif _c_due_any(arrival, qb, ec):
        due = True
    if not due:
        return -1
    ids = _due(now, arrival, ib, tk, ti, ak, ai, qe, qb, ec)
    n = ids.shape[0]
    if n:
        c[HOOK_CALLS] += 1
    x, e = _score(ids, True, key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, np.int64(arrival), ip, c)
    ec[ev.TN] = ev._t_drop(ib, tk, ti, ec[ev.TN], now)
    ec[ev.AN] = ev._t_drop(ib, ak, ai, ec[ev.AN], arrival)
    _c_drain(arrival, qb, ec)
    if n:
        ei = np.empty(0, np.int64)
        if not _place(ids, x, e, ei, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec):
            return -2
    return -1


@_jit
def _release_slot(fs, pc, s):
    fs[pc[NFREE]] = s
    pc[NFREE] += 1


@_jit
def _evicted(gone, t, kr, sr, fs, q, never, vals, bucket, ip, pc, pf):
    """``UtilityPolicy.spfcore_blocks_evicted`` of hashes ``gone`` (key
    ids, the cached victims' in victim order): the frontier candidate (the last
    one's index), records to ghosts (``evict_pass``), a ghost record of a
    resident hash replaced in place by the new ghost, then the oldest ghosts
    trimmed beyond ``ghost_cap``. Returns False if the ghost list lacked room
    (a bug)."""
    n = gone.shape[0]
    slots = np.empty(n, np.int64)
    for j in range(n):
        slots[j] = kr[gone[j], REC]
    state, stamp = sr[:, STATE], sr[:, STAMP]
    qt = pc[QT]
    if qt + n > q.shape[0]:  # _room: the live entries moved to the front, in order
        h = pc[QH]
        k = 0
        for p in range(h, qt):
            s = q[p]
            if state[s] == 2 and stamp[s] == p:
                q[k] = s
                stamp[s] = k
                k += 1
        pc[QH] = 0
        qt = pc[QT] = k
        if k + n > q.shape[0]:
            return False
    x = -1.0
    s = slots[n - 1]
    if s > 0 and state[s] == 1:
        a = t - sr[s, LAST]
        top = bucket.shape[0] - 1
        x = vals[sr[s, CLS], bucket[a if a < top else top]]
    keep, qt = pnb.evict_pass(slots, state, never, sr[:, CLS], sr[:, EPOCH_OF], pc[EPOCH], q, qt, stamp)
    pc[QT] = qt
    if x > pf[THETA_NEXT]:
        pf[THETA_NEXT] = x
    pc[NGHOST] += keep.shape[0]
    for j in range(keep.shape[0]):
        k = gone[keep[j]]
        g = kr[k, DUAL]
        if g >= 0:  # the ghost record of a resident hash: the new ghost takes its place
            kr[k, DUAL] = -1
            r = slots[keep[j]]
            p = stamp[g]
            stamp[r] = p
            q[p] = r
            state[g] = 0
            _release_slot(fs, pc, g)
            pc[NGHOST] -= 1
    over = pc[NGHOST] - ip[GHOST_CAP]
    if over > 0:  # the oldest ghosts leave
        tr, qh = pnb.trim_pass(q, pc[QH], pc[QT], over, state, stamp)
        pc[QH] = qh
        for j in range(tr.shape[0]):
            s = tr[j]
            k = sr[s, KEY]
            if kr[k, REC] == s:
                kr[k, REC] = -1
            else:
                kr[k, DUAL] = -1
            _release_slot(fs, pc, s)
        pc[NGHOST] -= tr.shape[0]
    return True


@_jit
def _hit(blocks, h, t, key_of, depth_of, kr, sr, fs, hist, bucket, ip, pc):
    """``UtilityPolicy.spfcore_blocks_hit`` of ``blocks[:h]`` (by hash): a
    block whose hash has no resident record gets a new one (a ghost record
    stays as the hash's ghost, ``DUAL``); the others are re-accessed
    (``reaccess``), groups of the request's kind at each block's depth."""
    if h == 0:
        return
    kind = pc[KIND]
    nd, oc, pk = ip[ND], ip[DEPTH_OCT], ip[PER_KIND]
    grp = np.empty(h, np.int64)
    slots = np.empty(h, np.int64)
    m = 0
    for j in range(h):
        b = blocks[j]
        grp[j] = pnb._group(kind, depth_of[b], nd, oc)
        s = kr[key_of[b], REC]
        slots[j] = s
        if not (s >= 0 and sr[s, STATE] == 1):
            m += 1
    og = grp
    os_ = slots
    if m:
        base = pc[NFREE] - m
        pc[NFREE] = base
        og = np.empty(h - m, np.int64)
        os_ = np.empty(h - m, np.int64)
        i = 0
        o = 0
        for j in range(h):
            s = slots[j]
            if s >= 0 and sr[s, STATE] == 1:
                og[o] = grp[j]
                os_[o] = s
                o += 1
                continue
            k = key_of[blocks[j]]
            if s >= 0:  # a ghost record: kept in the list as the ghost of a resident hash
                kr[k, DUAL] = s
            ns = fs[base + i]
            i += 1
            sr[ns, LAST] = t
            sr[ns, COUNT] = 1
            sr[ns, CLS] = grp[j] * pk
            sr[ns, FIRST] = t
            sr[ns, STATE] = 1
            kr[k, REC] = ns
            sr[ns, KEY] = k
    if os_.shape[0]:
        pnb.reaccess(os_, og, t, False, sr[:, LAST], sr[:, COUNT], sr[:, FIRST], sr[:, CLS], hist, bucket, pk, ip[MAX_COUNT],
                     ip[GAP_CLASSES] != 0, ip[GAP_OCTAVES], ip[GAP_MEAN] != 0)


@_jit
def _store(blocks, lo, n, t, key_of, depth_of, kr, sr, fs, hist, never, pw, bucket, ip, pc):
    """``UtilityPolicy.spfcore_blocks_stored`` of ``blocks[lo:lo + n]``
    (their keys and depths already written): kinds (the request's for a hash
    of its prompt, 0 otherwise), ``store_records``, the new records' hashes."""
    slots = np.empty(n, np.int64)
    kinds = np.empty(n, np.int64)
    ids = np.empty(n, np.int64)
    kind = pc[KIND]
    for j in range(n):
        b = blocks[lo + j]
        k = key_of[b]
        ids[j] = b
        slots[j] = kr[k, REC]
        kinds[j] = kind if kr[k, MARK] == t + 1 else 0
    fin, new, dup, back, base = pnb.store_records(
        slots, kinds, ids, depth_of, ip[ND], ip[DEPTH_OCT], t, sr[:, STATE], never, sr[:, CLS], sr[:, EPOCH_OF], pc[EPOCH], pw,
        sr[:, LAST], sr[:, COUNT], sr[:, FIRST], hist, bucket, ip[PER_KIND], ip[MAX_COUNT], ip[GAP_CLASSES] != 0,
        ip[GAP_OCTAVES], ip[GAP_MEAN] != 0, fs, pc[NFREE])
    pc[NFREE] = base
    pc[NGHOST] -= back
    for j in range(new.shape[0]):  # in order: a hash twice, the later record is its record
        s = fin[new[j]]
        k = key_of[ids[new[j]]]
        kr[k, REC] = s
        sr[s, KEY] = k


@_jit
def _alloc(n, blocks, at, now, t, key_of, kh, kt, dn, dp, hs, par_of, depth_of, kr, sr, bsc, bq, fs, q, never, vals, offs,
           bucket, ip, pc, pf, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec, c, victims):
    """``PolicyRuntime.evict(n)``: ``n`` victims into ``blocks[at:]``
    (expired scores re-scored first when cached blocks are taken; hashless
    blocks first, then the evictor's lowest), one evicted call with the cached
    victims' hashes, then each victim leaves the prefix cache. Returns False
    on a bug (no room)."""
    c[EVICT_CALLS] += 1
    if n > c[HSN]:
        if _expire(now, float(t), key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, ip, ib, ok, cmb, cmk, cmo, tk, ti,
                   ak, ai, qe, qb, ec, c) < -1:
            return False
    got = 0
    while c[HSN] > 0 and got < n:
        c[HSN] -= 1
        blocks[at + got] = hs[c[HSN]]
        got += 1
    _o_take(n - got, blocks, at + got, cmb, cmk, cmo, ok, ib, ec, qe, qb)  # the lowest (value, release order) first
    m = 0
    for j in range(n):
        if key_of[blocks[at + j]] >= 0:
            m += 1
    if m:
        gone = np.empty(m, np.int64)
        i = 0
        for j in range(n):
            k = key_of[blocks[at + j]]
            if k >= 0:
                gone[i] = k
                i += 1
        c[HOOK_CALLS] += 1
        if not _evicted(gone, t, kr, sr, fs, q, never, vals, bucket, ip, pc, pf):
            return False
        _refresh(blocks, at, at + n, key_of, kh, dn, dp, kr, sr, ib, bsc)
    for j in range(n):
        _retire(blocks[at + j], key_of, kh, kt, dn, dp, c, victims)
    return True


@_jit
def _stored(blocks, lo, n, depth0, parent, keys, k0, t, key_of, kh, kt, dn, dp, par_of, depth_of, kr, sr, bsc, ib,
            fs, hist, never, pw, bucket, ip, pc, c):
    """``PolicyRuntime.stored`` of ``blocks[lo:lo + n]`` with keys
    ``keys[k0:k0 + n]`` from depth ``depth0``, the first one's parent key
    ``parent`` (-1: none): the blocks cached, one stored call."""
    for j in range(n):
        b = blocks[lo + j]
        k = keys[k0 + j]
        depth_of[b] = depth0 + j
        par_of[b] = parent
        _insert(b, k, key_of, kh, kt, dn, dp)
        parent = k
    c[HOOK_CALLS] += 1
    _store(blocks, lo, n, t, key_of, depth_of, kr, sr, fs, hist, never, pw, bucket, ip, pc)
    _refresh(blocks, lo, lo + n, key_of, kh, dn, dp, kr, sr, ib, bsc)


@_jit
def replay_spf(bk, bk_off, nf_, n_look, dk, dk_off, n_prompt, n_total, start, first_arrival, ip, fp, bucket, lo_int,
               rep, lo_f, gap_prior, pw, key_of, kh, kt, dn, dp, hs, par_of, depth_of, kr, sr, bsc, bq, fs, q, hist, never,
               vals, offs, pc, pf, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec, c, blocks, hits, victims):
    """Replay requests ``r = start .. len(n_prompt)-1`` (the request arrays
    of :func:`spfcore.sim._replay_nb.replay`; request ``r`` at arrival index
    ``first_arrival + r``) under the ``utility`` policy and the scored
    evictor. Writes ``hits[r]``; appends every victim to ``victims`` unless
    it is empty; ``blocks``: scratch of at least ``max(n_total)`` entries.

    Args:
        ip, fp: int64 / float64 parameters (indices above); bucket: bucket of
            each small integer age (the last for older); lo_int: first integer
            age of each bucket and the end; rep: representative gap per
            bucket; lo_f: float bucket edges; gap_prior: ``(classes,
            buckets)``; pw: ``decay ** k`` for every epoch reached.
        others: the state of :func:`new_state` (pool, policy, evictor).

    Returns:
        A status (``DONE``; ``TOO_BIG``: request ``c[AT]`` needs more blocks
        than are free, nothing of it replayed; ``FOUND_TWICE``: request
        ``c[AT]``'s lookup found block ``c[TWICE]`` twice, after its hit hook,
        where the reference loop's touch raises ``KeyError``; ``NEED_SLOTS``:
        request ``c[AT]`` may need more record slots than are free, nothing of
        it replayed; -1: the evictor or the ghost list lacked room, a bug).
    """
    for r in range(start, len(n_prompt)):
        f0 = bk_off[r]
        f1 = bk_off[r + 1]
        nf = nf_[r]
        np_, nt = n_prompt[r], n_total[r]
        if nt > c[HSN] + ec[ev.LIVE]:
            c[AT] = r
            return TOO_BIG
        if pc[NFREE] < 2 * nt + 2:
            c[AT] = r
            return NEED_SLOTS
        t = first_arrival + r
        now = float(t)
        # arrival: the policy's hook (rebuild, kind, the prompt's hashes), then expired scores
        c[HOOK_CALLS] += 1
        pc[T] = t
        if t >= pc[NEXT_BUILD]:
            _build(hist, never, vals, offs, gap_prior, rep, lo_f, lo_int, ip, fp, pc, pf)
            per = ip[PERIOD]
            w = 1 + t // 4
            pc[NEXT_BUILD] = t + (per if per < w else w)
        seen = 0
        rb = ip[ROOT_BLOCKS]
        for j in range(f0, f1):
            if seen > rb or kr[bk[j], REC] < 0:
                break
            seen += 1
        pc[KIND] = 2 if seen > rb else 1
        for j in range(f0, f1):
            kr[bk[j], MARK] = t + 1
        if _expire(now, now, key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, ip, ib, ok, cmb, cmk, cmo, tk, ti, ak,
                   ai, qe, qb, ec, c) < -1:
            return -1
        # lookup, hit hook, touch
        h = _lookup(kh, bk, f0, n_look[r], blocks)
        c[HOOK_CALLS] += 1
        _hit(blocks, h, t, key_of, depth_of, kr, sr, fs, hist, bucket, ip, pc)
        _refresh(blocks, 0, h, key_of, kh, dn, dp, kr, sr, ib, bsc)
        if h:
            for k in range(h):  # touch: they leave the order (a block met twice is not free: KeyError)
                b = blocks[k]
                if not ib[ev.IN, b]:
                    c[TWICE] = b
                    c[AT] = r
                    return FOUND_TWICE
                ib[ev.IN, b] = 0
                ec[ev.LIVE] -= 1
                _o_remove(b, cmb, cmk, cmo, ok, ib)
                _c_unlink(b, qe, qb)
        # prefill: allocation, then the new full prompt blocks stored
        if not _alloc(np_ - h, blocks, h, now, t, key_of, kh, kt, dn, dp, hs, par_of, depth_of, kr, sr, bsc, bq, fs, q, never,
                      vals, offs, bucket, ip, pc, pf, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb, ec, c, victims):
            return -1
        if nf > h:
            _stored(blocks, h, nf - h, h, bk[f0 + h - 1] if h else -1, bk, f0 + h, t, key_of, kh, kt, dn, dp, par_of,
                    depth_of, kr, sr, bsc, ib, fs, hist, never, pw, bucket, ip, pc, c)
        d0 = dk_off[r]
        nd = dk_off[r + 1] - d0
        nb_ = np_
        done = nf
        if nt > np_ or nd:  # decode: block j-1 fills (is cached), then block j is allocated
            nf_all = nf + nd
            parent = bk[f0 + nf - 1] if nf else -1
            for j in range(np_, nt + 1):
                if done < j and done < nf_all:
                    _stored(blocks, done, 1, done, parent, dk, d0 + done - nf, t, key_of, kh, kt, dn, dp, par_of,
                            depth_of, kr, sr, bsc, ib, fs, hist, never, pw, bucket, ip, pc, c)
                    parent = dk[d0 + done - nf]
                    done += 1
                if j < nt:
                    if not _alloc(1, blocks, nb_, now, t, key_of, kh, kt, dn, dp, hs, par_of, depth_of, kr, sr, bsc, bq, fs,
                                  q, never, vals, offs, bucket, ip, pc, pf, ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe, qb,
                                  ec, c, victims):
                        return -1
                    nb_ += 1
        # release, tail first: the cached blocks scored (one call) and placed with new release orders;
        # the hashless ones on top of the stack
        if done:
            ids = np.empty(done, np.int64)
            for j in range(done):
                ids[j] = blocks[done - 1 - j]
            c[HOOK_CALLS] += 1
            x, e = _score(ids, False, key_of, par_of, depth_of, kh, dn, kr, sr, bsc, bq, vals, offs, bucket, t, ip, c)
            o = c[ORDER]
            c[ORDER] = o + done
            if not _place(ids, x, e, np.arange(o + 1, o + 1 + done), ib, ok, cmb, cmk, cmo, tk, ti, ak, ai, qe,
                          qb, ec):
                return -1
        for j in range(done, nb_):
            hs[c[HSN]] = blocks[j]
            c[HSN] += 1
        hits[r] = h
    c[LRUN] = ec[ev.LIVE]
    return DONE


def _params(pol, rt_pin_cap: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ip, fp)`` of a configured ``UtilityPolicy``: its params and
    derived sizes, as the kernel reads them."""
    p = pol.params
    ip = np.zeros(16, np.int64)
    ip[ROOT_BLOCKS], ip[PERIOD], ip[MAX_TTL] = p.root_blocks, p.period, p.max_ttl
    ip[CHAIN_MONO], ip[GAP_CLASSES], ip[GAP_OCTAVES], ip[GAP_MEAN] = (p.chain_monotone, p.gap_classes,
                                                                      p.gap_octaves, p.gap_mean)
    ip[ND], ip[DEPTH_OCT], ip[PER_KIND], ip[MAX_COUNT] = pol.nd, p.depth_octaves, pol.per_kind, p.max_count
    ip[GHOST_CAP], ip[NBK], ip[NC] = pol.ghost_cap, pol.nb, pol.nc
    ip[USE_GAP] = bool(p.gap_prior > 0 and p.gap_classes)
    ip[PIN_CAP] = rt_pin_cap
    fp = np.array([float(p.prior_weight), float(p.decay), float(p.rel_tol), float(p.cut_factor)])
    return ip, fp


def supports(pol) -> bool:
    """Whether the compiled replay stands in for ``pol`` (a configured
    ``UtilityPolicy``, no hook called yet): ``count_weight`` 0 (its count
    term is the Python loop's), integer parameters that fit int64, and the
    derived tables the kernel reads present on the instance."""
    p = pol.params
    try:
        ok = (p.count_weight == 0 and all(type(getattr(p, a)) is int and 0 <= getattr(p, a) < 2**40
                                          for a in ("root_blocks", "period", "max_ttl", "gap_octaves",
                                                    "depth_octaves", "max_count"))
              and pol.t == 0 and not pol.rec and pol.next_build == 0)
        for a in ("gap_prior", "_rep", "_lo_f", "_bucket_np", "_lo_int_np", "nb", "nc", "nd", "per_kind",
                  "ghost_cap"):
            getattr(pol, a)
    except AttributeError:
        return False
    return bool(ok)


def params_of(rt) -> tuple | None:
    """The kernel protocol's parameters (see :data:`spfcore.sim.simulator.KERNELS`):
    ``(pol, pin_cap)``, the configured ``UtilityPolicy`` of ``rt``'s shipped
    ``spf_expected_utility`` policy and ``rt``'s pin cap in blocks, or ``None``
    where this replay does not stand in (variant ``"seed"``, a subclass of
    the variant's class, parameters :func:`supports` refuses)."""
    inst = next(iter(rt.pm.get_plugins()))
    impl = getattr(inst, "impl", None)
    p = getattr(inst, "params", None)
    if getattr(p, "variant", None) != "utility" or type(impl).__qualname__ != "UtilityPolicy" \
            or type(impl).__module__ != "spfcore_spf_expected_utility.utility":
        return None
    return (impl, rt.pin_cap) if supports(impl) else None


def ghost_cap(st: dict) -> int:
    """Key ids the state may name beyond the cached ones' (the ghost records'
    bound): the simulator's compaction limit adds it."""
    return int(st["ip"][GHOST_CAP])


def new_state(num_blocks: int, params: tuple, nkeys: int = 0) -> dict:
    """A fresh state for :func:`replay_spf` of a pool of ``num_blocks``
    blocks (null block included), every usable block hashless and free, and
    ``params = (pol, pin_cap)`` (:func:`params_of`): the configured (fresh)
    ``UtilityPolicy`` ``pol``'s parameters and tables, the pin cap in blocks;
    room for ``nkeys`` key ids (:func:`grow` adds more).

    Returns:
        A dict of arrays (int64 unless said), ``B`` = ``num_blocks``, ``K`` =
        key ids, ``S`` = record slots, ``C`` = classes, ``J`` = age buckets:
        ``ip``/``fp`` the integer/float parameters (:func:`_params`);
        ``bucket``, ``lo_int``, ``rep``, ``lo_f``, ``gap_prior`` the plugin's
        bucket tables; per block (``B``) ``key_of``, ``par_of``, ``depth_of``
        (key id, parent key id, 0-based depth; -1 none), ``dn``/``dp``/``hs``
        the pool's lists (:mod:`spfcore.sim._replay_nb`); per key id
        ``kh``/``kt`` (int32: head/tail of its cached blocks' list, -1) and
        ``kr`` ``(K, NKCOLS)`` (record slot, dual slot: the ghost record of a
        resident hash, a prompt's stamp, a batch-position scratch);
        ``sr`` ``(S, NSCOLS)`` the record rows (as the plugin's, one cache
        line each) and ``fs`` the free slots; ``q`` the ghost list (a queue of slots);
        ``hist`` ``(C, J)`` and ``never`` ``(C,)`` float64, the decayed reuse
        histograms; ``vals``/``offs`` ``(C + 1, J)`` the index table and its
        change points; ``ib``/``ok``, ``cmb``/``cmk``/``cmo`` (order keys, chunk minima of
        :data:`CHUNK` blocks), ``tk``/``ti``/``ak``/``ai``/``qe``/``qb``/``ec``
        the evictor's rows, expiry heaps, calendar and counters
        (:mod:`spfcore._evictor_nb`); ``pc``/``pf`` the policy's scalars (clock, kind, next rebuild,
        table epoch, ghosts, free slots, ghost-queue head and tail);
        ``c`` the replay's counters.

    Raises:
        ValueError: ``pol``'s ghost list at ``num_blocks`` beyond
            ``MAX_GHOST_BYTES`` (:func:`spfcore_spf_expected_utility.params.ghost_entries`),
            or more blocks than the replay takes."""
    i64 = np.int64
    pol, pin_cap = params
    ghost_entries(pol.params.ghost_factor, num_blocks)  # (ValueError beyond MAX_GHOST_BYTES, before the queue is built)
    ip, fp = _params(pol, pin_cap)
    nc, nbk, ghost_cap = int(ip[NC]), int(ip[NBK]), int(ip[GHOST_CAP])
    st = {"ip": ip, "fp": fp, "bucket": np.ascontiguousarray(pol._bucket_np, i64),
          "lo_int": np.ascontiguousarray(pol._lo_int_np, i64), "rep": np.ascontiguousarray(pol._rep, np.float64),
          "lo_f": np.ascontiguousarray(pol._lo_f, np.float64),
          "gap_prior": np.ascontiguousarray(pol.gap_prior, np.float64), "pw_list": [1.0]}
    st["pw"] = np.ones(1)
    st["key_of"], st["dn"], st["dp"], st["par_of"] = (np.full(num_blocks, -1, i64) for _ in range(4))
    st["hs"], st["depth_of"] = np.zeros(num_blocks, i64), np.zeros(num_blocks, i64)
    st["kh"], st["kt"] = np.full(nkeys, -1, np.int32), np.full(nkeys, -1, np.int32)
    kr = np.zeros((nkeys, NKCOLS), i64)
    kr[:, [REC, DUAL]] = -1
    st["kr"] = kr
    ns = max(64, num_blocks + ghost_cap // 4)
    sr = np.zeros((ns, NSCOLS), i64)
    sr[:, COUNT] = 1
    sr[0, CLS] = nc  # the sentinel's class: the all-zero, never-changing row
    st["sr"] = sr
    st["fs"] = np.arange(ns - 1, -1, -1, dtype=i64)
    pc = np.zeros(8, i64)
    pc[NFREE] = ns - 1
    st["pc"], st["pf"] = pc, np.zeros(2)
    st["q"] = np.zeros(2 * (ghost_cap + num_blocks) + 1024, i64)
    st["hist"], st["never"] = np.zeros((nc, nbk)), np.zeros(nc)
    st["vals"] = np.zeros((nc + 1, nbk))
    st["offs"] = np.full((nc + 1, nbk), -1, i64)  # (the empty table: flat, never re-scored)
    nblk = max(int(num_blocks), 16)
    ib = np.zeros((ev.NROWS, nblk), i64)
    ib[ev.HST] = -1
    cap = 4 * nblk + 4096  # the expiry heaps: room for any batch (see _place)
    nch = -(-nblk // CHUNK)
    if nch > IX_MASK:
        raise ValueError(f"num_blocks={num_blocks}: the compiled spf replay takes at most {IX_MASK * CHUNK} blocks")
    st["bsc"] = np.zeros((nblk, 2), i64)
    st["bq"] = np.full(nblk, -1, i64)
    st.update(ib=ib, ok=np.full(nblk, EMPTY, i64), cmb=np.full(nch, -1, i64), cmk=np.full(nch, EMPTY, i64),
              cmo=np.zeros(nch, i64),
              tk=np.zeros(cap), ti=np.zeros((2, cap), i64), ak=np.zeros(cap),
              ai=np.zeros((2, cap), i64))
    st["qe"], st["qb"] = np.full((nblk, 4), -1, i64), np.full((2, QW), -1, i64)
    st["ec"] = np.zeros(ev.NCOUNTERS, i64)
    c = np.zeros(NCOUNTERS_S, i64)
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
    more = np.zeros((g, NKCOLS), np.int64)
    more[:, [REC, DUAL]] = -1
    st["kr"] = np.concatenate([st["kr"], more])


def _grow_slots(st: dict, m: int) -> None:
    """At least ``m`` more free record slots (``UtilityPolicy._room_slots``:
    the new slots at the bottom of the free stack)."""
    sr, fs, pc = st["sr"], st["fs"], st["pc"]
    n = sr.shape[0]
    g = max(n, m)
    new = np.zeros((n + g, NSCOLS), np.int64)
    new[:n] = sr
    st["sr"] = new
    f = np.empty(n + g, np.int64)
    f[:g] = np.arange(n + g - 1, n - 1, -1)
    nfree = int(pc[NFREE])
    f[g:g + nfree] = fs[:nfree]
    st["fs"] = f
    pc[NFREE] = nfree + g


def _pw(st: dict, top: int) -> None:
    """``decay ** k`` for ``k = 0 .. top`` at least, by Python's pow (``UtilityPolicy._decay_pow``)."""
    pw = st["pw_list"]
    if top >= len(pw):
        decay = float(st["fp"][DECAY])
        pw += [decay ** k for k in range(len(pw), top + 1)]
        st["pw"] = np.array(pw)


_ARGS = ("ip", "fp", "bucket", "lo_int", "rep", "lo_f", "gap_prior", "pw", "key_of", "kh", "kt", "dn", "dp", "hs",
         "par_of", "depth_of", "kr", "sr", "bsc", "bq", "fs", "q", "hist", "never", "vals", "offs", "pc", "pf", "ib", "ok", "cmb",
         "cmk", "cmo", "tk", "ti", "ak", "ai", "qe", "qb", "ec", "c")


def run(st: dict, flat: tuple, first_arrival: int, hits: np.ndarray, victims: np.ndarray) -> int:
    """Replay one chunk (:func:`spfcore.sim.simulator._flatten`'s arrays,
    key ids below ``len(st["kh"])``, its first request at arrival index
    ``first_arrival``) into ``hits`` (per request, hit blocks) and
    ``victims`` (empty: not recorded); record slots are added between
    requests as needed.

    Returns:
        :func:`replay_spf`'s status (never ``NEED_SLOTS``).
    """
    n_total = flat[7]
    if not len(n_total):
        return DONE
    blocks = np.empty(int(n_total.max()), np.int64)
    if int(st["c"][ORDER]) + int(n_total.sum()) >= MAX_ORDER:  # (release orders: see _lowest)
        raise OverflowError(f"the compiled spf replay hands out release orders below {MAX_ORDER}")
    start = 0
    while True:
        _pw(st, int(st["pc"][EPOCH]) + len(n_total) - start + 2)  # at most one table build per request
        status = replay_spf(*flat, start, first_arrival, *(st[a] for a in _ARGS), blocks, hits, victims)
        if status != NEED_SLOTS:
            return status
        start = int(st["c"][AT])
        _grow_slots(st, 2 * int(n_total[start]) + 2)


def keep_keys(st: dict) -> np.ndarray:
    """Per key id, whether the state still names it: cached, with a record
    (resident or ghost), or the parent of a cached block (the chain cap
    compares parents' hashes)."""
    kr, key_of = st["kr"], st["key_of"]
    keep = (st["kh"] >= 0) | (kr[:, REC] >= 0) | (kr[:, DUAL] >= 0)
    par = st["par_of"][key_of >= 0]
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

    def relabel(a: np.ndarray) -> None:
        held = a >= 0
        a[held] = km[a[held]]
    key_of = st["key_of"]
    relabel(key_of)
    par = st["par_of"]
    par[key_of < 0] = -1
    relabel(par)
    sr = st["sr"]
    relabel(sr[:, KEY])
    size = len(keep)
    for name in ("kh", "kt"):
        a = np.full(size, -1, st[name].dtype)
        a[:m] = st[name][old]
        st[name] = a
    kr = np.zeros((size, NKCOLS), np.int64)
    kr[:, [REC, DUAL]] = -1
    kr[:m] = st["kr"][old]
    st["kr"] = kr
    return km


def warm() -> None:
    """Call the kernel once on a tiny replay with the argument types the
    simulator uses: compiles it (or loads numba's on-disk cache) now."""
    from spfcore_spf_expected_utility.utility import UtilityPolicy

    trace, _ = warm_trace()
    nb = 8
    pol = UtilityPolicy()
    pol.spfcore_cache_configured(num_blocks=nb, block_size=16)
    st = new_state(nb, (pol, 4), 4)
    i64 = np.int64
    run(st, trace, 0, np.empty(2, i64), np.empty(8, i64))
    keep_keys(st)
