"""The shipped ``frequency`` arm's engine events as numba kernels over int
arrays, for :class:`spfcore.engine.compiled.FrequencyKernelRuntime`: the
same decisions as a :class:`~spfcore.runtime.PolicyRuntime` driving
``spfcore_frequency.FrequencyPolicy`` (its hooks and the scored evictor's
order), one kernel call per runtime event instead of Python hooks over
dicts of 256-bit keys.

The policy's model is :mod:`spfcore.sim._replay_freq_nb`'s (the simulator's
compiled replay of the same class). In the engine vLLM owns the pool and the
prefix-cache map, so the kernels keep only the policy's state and the
eviction order; keys are vLLM's block hashes, interned here. Between engine
steps the model's work evicts the CPU caches, so the state is laid out for
few cache lines per block event (results/gpu-h200-engine-calls-75ab649: cold
caches were most of the engine's policy time):

* **Key rows** ``R[K, 8]`` int64, one 64-byte line per key id: the hash's
  four words (``W0`` .. ``W3``: vLLM's 32-byte block hash, every bit
  compared, so keys are equal exactly when ``int.from_bytes`` of the hashes
  are, as on the hook path), its count ``CNT`` (0: not counted), ghost count
  ``GV`` (0: not a ghost), ghost sequence number ``GSEQ`` and the cached
  blocks holding it ``NBLK``.
* **Table** ``T[S, 2]`` (the hash's first word, key id; id -1: empty slot),
  ``S`` a power of two at least twice the key ids: open addressing, linear
  probing from the first word (uniform: sha256), backward-shift deletion (no
  tombstones); a probe reads a key row only when the first words match.
* **Key ids** are reused: id ``k`` is freed (its slot deleted, pushed on the
  stack ``fk``) once no cached block holds it, it has no count and no ghost
  count. At most ``2 * num_blocks + ghost_cap + 64`` ids are live: the
  cached blocks' keys, the ghost list (bounded after each allocation) and
  one allocation's victims before the trim.
* **Ghost list**, least recently evicted first: a ring of ``(key id,
  sequence number)`` (``re``, ``rseq``; head ``c[RHEAD]``, tail ``c[RTAIL]``)
  with lazy deletion: an entry is live while its key is a ghost with that
  sequence number (a key evicted again gets a new one at the newest end; a
  key stored again stops being a ghost). ``c[GN]`` counts the live entries;
  the ring is compacted (order kept) when full.
* **Blocks** ``BL[nb, 8]`` (``nb = num_blocks``), one line each: key id
  (-1: none), free and cached (in the order), release order, on the
  hashless stack ``hs``, previous and next block of its bucket, its bucket
  (-1: none).
* **The order**, lowest ``(count, release order)`` first, which is the
  evictor's ``(tier, score, release order)`` for this policy (admitted iff
  count >= ``min_count``: the tier follows the count): a count's free blocks
  are released in ascending order, so each count below ``len(BQ)`` (4,096)
  has a FIFO bucket, a doubly linked list through the block rows (head and
  tail in ``BQ``, a bit per non-empty bucket in ``bits``); a victim is the
  lowest non-empty bucket's head, a hit unlinks its block (O(1), about one
  cache line a block where the binary heap over every free block it
  replaces read a dozen, results/issue11-s24-compiled). Blocks of higher
  counts (rare) wait in the heap ``H[cap, 4]``: ``(tier * 2**62 + count,
  release order, block, -)``, a binary min-heap on the first two with lazy
  deletion (an entry is live iff its block is free, in no bucket, with that
  release order), taken once every bucket is empty. Counts must stay below
  ``2**62`` (they grow by one per block event).
* ``c``: int64 counters (indices below).

Kernels return 0, or a negative number naming the block that breaks the
event protocol (the caller raises; nothing of the event is applied).
"""

from __future__ import annotations

import numba
import numpy as np

from spfcore.engine._kstate_nb import prefetch

#: Counter indices: hashless blocks on the stack, cached free blocks,
#: evicted cached blocks, allocations, hook calls the hook path makes, heap
#: entries, release orders handed out, live ghosts, the ring's head and tail
#: (monotone; slot = value mod capacity), ghost sequence numbers handed out,
#: freed key ids on ``fk``, key ids never used yet start at ``NEXTID``, the
#: event number stamped on a call's blocks (``BL[:, MARK]``: a block twice in
#: one call), the count of the "no key" key (see :func:`hit`).
HSN, LRUN, EVICTIONS, EVICT_CALLS, HOOK_CALLS, HN, ORDER, GN, RHEAD, RTAIL, SEQ, NFREE, NEXTID, EPOCH, NONECNT = range(15)
NCOUNTERS = 15
W0, W1, W2, W3, CNT, GV, GSEQ, NBLK = range(8)  # key row columns
KEY, INN, ORD, HFREE, PREV, NEXT, BKT, MARK = range(8)  # block row columns
#: Counts below this have a FIFO bucket each (by default); a block of a higher count waits in the heap.
NBUCKETS = 4096
TIER1 = 2**62  # heap value of an admitted block: TIER1 + count (a non-admitted one: its count)
#: :func:`evict`'s answer when fewer than ``n`` blocks are free.
E_TOO_FEW = -1
#: :func:`stored`'s answer when every key id is live (not reached within the bound above).
E_FULL = -(2**62)

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _find(T, mask, R, w, j):
    """Slot of the key in row ``j`` of ``w`` (four int64 words): ``>= 0`` where
    ``T`` holds it, else ``-1 - slot`` of the empty slot it would take."""
    w0 = w[j, 0]
    i = w0 & mask
    while True:
        k = T[i, 1] - 1
        if k < 0:
            return -1 - i
        if T[i, 0] == w0 and R[k, W1] == w[j, 1] and R[k, W2] == w[j, 2] and R[k, W3] == w[j, 3]:
            return i
        i = (i + 1) & mask


@_jit
def _unintern(k, T, mask, R, fk, c):
    """Key id ``k`` leaves the table (backward-shift deletion) and goes back
    on the free stack."""
    i = R[k, W0] & mask
    while T[i, 1] != k + 1:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        q = T[j, 1]
        if q == 0:
            break
        home = T[j, 0] & mask
        if (j > i and (home <= i or home > j)) or (j < i and home <= i and home > j):
            T[i, 0], T[i, 1] = T[j, 0], q
            i = j
    T[i, 1] = 0
    fk[c[NFREE]] = k
    c[NFREE] += 1


@_jit
def _maybe_free(k, R, T, mask, fk, c):
    if R[k, NBLK] == 0 and R[k, CNT] == 0 and R[k, GV] == 0:
        _unintern(k, T, mask, R, fk, c)


@_jit
def _h_less(H, a, b):
    return H[a, 0] < H[b, 0] or (H[a, 0] == H[b, 0] and H[a, 1] < H[b, 1])


@_jit
def _h_swap(H, a, b):
    for x in range(3):
        H[a, x], H[b, x] = H[b, x], H[a, x]


@_jit
def _h_down(H, j, n):
    while True:
        m = 2 * j + 1
        if m >= n:
            return
        if m + 1 < n and _h_less(H, m + 1, m):
            m += 1
        if not _h_less(H, m, j):
            return
        _h_swap(H, m, j)
        j = m


@_jit
def _h_up(H, j):
    while j > 0:
        p = (j - 1) >> 1
        if not _h_less(H, j, p):
            return
        _h_swap(H, j, p)
        j = p


@_jit
def _h_compact(H, n, BL):
    """Keep the live entries and re-heapify; returns the new size."""
    m = 0
    for j in range(n):
        b = H[j, 2]
        if BL[b, INN] and H[j, 1] == BL[b, ORD] and BL[b, BKT] < 0:
            H[m, 0], H[m, 1], H[m, 2] = H[j, 0], H[j, 1], H[j, 2]
            m += 1
    for j in range(m // 2 - 1, -1, -1):
        _h_down(H, j, m)
    return m


@_jit
def _ghost(k, v, R, re, rseq, c):
    """Key id ``k`` (count ``v``) goes to the ghost list's newest end (from
    wherever it was in it)."""
    if R[k, GV] == 0:
        c[GN] += 1
    R[k, GV] = v
    c[SEQ] += 1
    R[k, GSEQ] = c[SEQ]
    cap = re.shape[0]
    if c[RTAIL] - c[RHEAD] == cap:  # full: keep the live entries, in order
        h, m = c[RHEAD], 0
        for p in range(h, c[RTAIL]):
            q = p % cap
            f = re[q]
            if R[f, GV] > 0 and R[f, GSEQ] == rseq[q]:
                t = (h + m) % cap  # (never ahead of p: safe in place)
                re[t], rseq[t] = f, rseq[q]
                m += 1
        c[RTAIL] = h + m
    q = c[RTAIL] % cap
    re[q], rseq[q] = k, c[SEQ]
    c[RTAIL] += 1


@_jit
def _append(b, v, BL, BQ, bits):
    """Block ``b`` (count ``v < len(BQ)``) to the tail of bucket ``v``."""
    t = BQ[v, 1]
    BL[b, PREV], BL[b, NEXT], BL[b, BKT] = t, -1, v
    if t >= 0:
        BL[t, NEXT] = b
    else:
        BQ[v, 0] = b
        bits[v >> 6] |= np.uint64(1) << np.uint64(v & 63)
    BQ[v, 1] = b


@_jit
def _unlink(b, BL, BQ, bits):
    """Block ``b`` leaves its bucket."""
    v, p, q = BL[b, BKT], BL[b, PREV], BL[b, NEXT]
    if p >= 0:
        BL[p, NEXT] = q
    else:
        BQ[v, 0] = q
    if q >= 0:
        BL[q, PREV] = p
    else:
        BQ[v, 1] = p
    if BQ[v, 0] < 0:
        bits[v >> 6] &= ~(np.uint64(1) << np.uint64(v & 63))
    BL[b, BKT] = -1


@_jit
def _lowest(bits):
    """The lowest non-empty bucket, or -1."""
    for i in range(bits.shape[0]):
        x = bits[i]
        if x:
            j = 0
            while not (x >> np.uint64(j)) & np.uint64(1):
                j += 1
            return i * 64 + j
    return -1


@_jit
def _twice(ids, BL, c):
    """Stamp this event's blocks; the index of the first one named twice, or -1."""
    c[EPOCH] += 1
    e = c[EPOCH]
    for j in range(ids.shape[0]):
        b = ids[j]
        if BL[b, MARK] == e:
            return j
        BL[b, MARK] = e
    return -1


@_jit
def touch(ids, BL, BQ, bits, c):
    """Hit blocks that were free leave the order (ref count 0 -> 1).
    Returns 0, or ``-1 - j`` for ``ids[j]`` not a free cached block (nothing
    applied), named twice, or outside the pool."""
    nb = BL.shape[0]
    for j in range(ids.shape[0]):
        if ids[j] < 0 or ids[j] >= nb or not BL[ids[j], INN]:
            return -1 - j
    j = _twice(ids, BL, c)
    if j >= 0:
        return -1 - j
    for j in range(ids.shape[0]):
        b = ids[j]
        BL[b, INN] = 0
        if BL[b, BKT] >= 0:  # (a heap entry is deleted lazily)
            _unlink(b, BL, BQ, bits)
    c[LRUN] -= ids.shape[0]
    return 0


@_jit
def hit(ids, BL, R, c):
    """``spfcore_blocks_hit``: +1 to each hit block's key (a key whose count
    left with an evicted duplicate starts again at 1). A block the runtime
    never heard stored (vLLM cached it while a prefix-cache reset had dropped
    its request) has no key: the hook path counts it under the key ``None``,
    and so does ``c[NONECNT]``. Returns 0, or ``-1 - j`` for ``ids[j]``
    outside the pool (nothing applied)."""
    nb = BL.shape[0]
    for j in range(ids.shape[0]):
        if ids[j] < 0 or ids[j] >= nb:
            return -1 - j
    for j in range(ids.shape[0]):
        k = BL[ids[j], KEY]
        if k >= 0:
            R[k, CNT] += 1
        else:
            c[NONECNT] += 1
    c[HOOK_CALLS] += 1
    return 0


@_jit
def stored(ids, raw, BL, R, T, mask, fk, c):
    """``spfcore_blocks_stored``: blocks ``ids`` cached with keys ``raw``
    (``bytes``, 32 a key: four int64 words each), in order: each key interned (a new key id: a
    freed one from ``fk``, else the next never used), then its count + 1, or 1 + its ghost count (it stops being a
    ghost). Returns 0, or ``-1 - j`` for block ``ids[j]`` holding a key
    already, named twice or outside the pool (nothing applied), or ``E_FULL``."""
    nb = BL.shape[0]
    for j in range(ids.shape[0]):
        if ids[j] < 0 or ids[j] >= nb or BL[ids[j], KEY] >= 0:
            return -1 - j
    j = _twice(ids, BL, c)
    if j >= 0:
        return -1 - j
    if c[NFREE] + R.shape[0] - c[NEXTID] < ids.shape[0]:
        return E_FULL
    w = np.frombuffer(raw, np.int64).reshape((ids.shape[0], 4))
    for j in range(ids.shape[0]):  # the keys' home slots, then their key rows: the misses overlapped
        prefetch(T, w[j, 0] & mask, 0)
    for j in range(ids.shape[0]):
        k = T[w[j, 0] & mask, 1] - 1
        if k >= 0:
            prefetch(R, k, 0)
    for j in range(ids.shape[0]):
        i = _find(T, mask, R, w, j)
        if i >= 0:
            k = T[i, 1] - 1
        else:
            i = -1 - i
            if c[NFREE] > 0:
                c[NFREE] -= 1
                k = fk[c[NFREE]]
            else:
                k = c[NEXTID]
                c[NEXTID] += 1
            T[i, 0], T[i, 1] = w[j, 0], k + 1
            R[k, W0], R[k, W1], R[k, W2], R[k, W3] = w[j, 0], w[j, 1], w[j, 2], w[j, 3]
            R[k, CNT] = R[k, GV] = R[k, NBLK] = 0
        BL[ids[j], KEY] = k
        R[k, NBLK] += 1
        if R[k, CNT] > 0:
            R[k, CNT] += 1
        else:
            g = R[k, GV]
            if g > 0:  # (its ring entry goes stale)
                R[k, GV] = 0
                c[GN] -= 1
            R[k, CNT] = g + 1
    if ids.shape[0]:
        c[HOOK_CALLS] += 1
    return 0


@_jit
def evict(n, out, BL, hs, R, ghost_cap, re, rseq, BQ, bits, H, T, mask, fk, c):
    """``PolicyRuntime.evict(n)``: ``n`` victims into ``out[:n]``, the top
    hashless block first, then the lowest live heap entry; each cached
    victim's key leaves ``count`` for the ghost list (its first victim in the
    call; a duplicate's later victim finds it gone) and its block; after a
    call with a cached victim the ghost list is trimmed to ``ghost_cap``
    (one ``spfcore_blocks_evicted`` call). Key ids left with nothing are
    freed. Returns 0, or ``E_TOO_FEW`` (nothing taken)."""
    if n > c[HSN] + c[LRUN]:
        return E_TOO_FEW
    c[EVICT_CALLS] += 1
    cached = False
    for j in range(n):
        if c[HSN] > 0:
            c[HSN] -= 1
            b = hs[c[HSN]]
            BL[b, HFREE] = 0
        else:
            v = _lowest(bits)
            if v >= 0:  # the lowest count's oldest release
                b = BQ[v, 0]
                _unlink(b, BL, BQ, bits)
            else:  # every free cached block has a count >= len(BQ): the heap's
                while True:
                    b, o = H[0, 2], H[0, 1]
                    c[HN] -= 1
                    _h_swap(H, 0, c[HN])
                    _h_down(H, 0, c[HN])
                    if BL[b, INN] and o == BL[b, ORD] and BL[b, BKT] < 0:
                        break
            BL[b, INN] = 0
            c[LRUN] -= 1
        out[j] = b
        k = BL[b, KEY]
        if k < 0:
            continue
        BL[b, KEY] = -1
        R[k, NBLK] -= 1
        cached = True
        c[EVICTIONS] += 1
        v = R[k, CNT]
        if v > 0:
            R[k, CNT] = 0
            if ghost_cap > 0:
                _ghost(k, v, R, re, rseq, c)
        _maybe_free(k, R, T, mask, fk, c)
    if cached:
        c[HOOK_CALLS] += 1
        cap = re.shape[0]
        while c[GN] > ghost_cap:  # the least recently evicted leave
            q = c[RHEAD] % cap
            c[RHEAD] += 1
            k = re[q]
            if R[k, GV] > 0 and R[k, GSEQ] == rseq[q]:
                R[k, GV] = 0
                c[GN] -= 1
                _maybe_free(k, R, T, mask, fk, c)
    return 0


@_jit
def release(cached, hashless, BL, hs, R, min_count, BQ, bits, H, c):
    """``PolicyRuntime.release``: cached blocks (release order) admitted and
    scored by their key's count (1 if it has none; ``spfcore_admit_blocks``
    and ``spfcore_score_blocks``), each into the heap with a new release
    order; then hashless blocks onto the stack, ``hashless[0]`` on top.
    A cached block with no key (see :func:`hit`) is scored by
    ``c[NONECNT]``, as the hook path scores the key ``None``. Returns 0, or
    ``-1 - j`` for ``cached[j]`` (``j < len(cached)``) or
    ``hashless[j - len(cached)]`` that is free already, named twice in the
    call or outside the pool: nothing applied."""
    nc, nb = cached.shape[0], BL.shape[0]
    for j in range(nc):
        b = cached[j]
        if b < 0 or b >= nb or BL[b, INN] or BL[b, HFREE]:
            return -1 - j
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if b < 0 or b >= nb or BL[b, INN] or BL[b, HFREE]:
            return -1 - nc - j
    j = _twice(cached, BL, c)
    if j >= 0:
        return -1 - j
    e = c[EPOCH]  # (the same stamp on the hashless blocks: a block in both lists is caught too)
    for j in range(hashless.shape[0]):
        b = hashless[j]
        if BL[b, MARK] == e:
            return -1 - nc - j
        BL[b, MARK] = e
    for j in range(nc):
        b = cached[j]
        k = BL[b, KEY]
        v = R[k, CNT] if k >= 0 else c[NONECNT]
        if v <= 0:
            v = 1
        c[ORDER] += 1
        o = c[ORDER]
        BL[b, ORD] = o
        BL[b, INN] = 1
        if v < BQ.shape[0]:
            _append(b, v, BL, BQ, bits)
            c[LRUN] += 1
            continue
        if c[HN] == H.shape[0]:
            c[HN] = _h_compact(H, c[HN], BL)
        m = c[HN]
        H[m, 0], H[m, 1], H[m, 2] = (v + TIER1 if v >= min_count else v), o, b
        c[HN] = m + 1
        _h_up(H, m)
        c[LRUN] += 1
    if nc:
        c[HOOK_CALLS] += 2
    for j in range(hashless.shape[0] - 1, -1, -1):
        b = hashless[j]
        hs[c[HSN]] = b
        BL[b, HFREE] = 1
        c[HSN] += 1
    return 0


def _rows(n: int, width: int, fill: int = 0) -> np.ndarray:
    """An ``(n, width)`` int64 array whose rows start on 64-byte boundaries
    (cache lines) for ``width`` 4 or 8; zeros are not written (the pages are
    committed as they are first used)."""
    buf = np.zeros(n * width + 8, np.int64) if fill == 0 else np.full(n * width + 8, fill, np.int64)
    skip = (-buf.ctypes.data % 64) // 8
    return buf[skip:skip + n * width].reshape(n, width)


def key_ids(num_blocks: int, ghost_cap: int) -> int:
    """Key ids a state holds: ``2 * num_blocks + ghost_cap + 64`` (the bound
    in the module docstring)."""
    return 2 * num_blocks + ghost_cap + 64


def state_bytes(num_blocks: int, ghost_cap: int, buckets: int = NBUCKETS) -> int:
    """Bytes :func:`new_state` reserves (most committed only as used)."""
    nk = key_ids(num_blocks, ghost_cap)
    s = 1
    while s < 2 * nk:
        s *= 2
    return 8 * (8 * nk + 2 * s + nk + 8 * num_blocks + 2 * num_blocks + 4 * (ghost_cap + num_blocks) + 2048
                + 2 * buckets + 4 * (2 * num_blocks + 1024))


def new_state(num_blocks: int, min_count: int, ghost_cap: int, buckets: int = NBUCKETS) -> dict:
    """A fresh state for ``num_blocks`` blocks: nothing free (the driver
    releases the free blocks first), no key, an empty ghost list.

    ``buckets`` (>= 1): counts below it get a FIFO bucket each, higher
    counts wait in the heap (a test sets it low to reach the heap).

    Returns:
        ``{name: array}`` of the kernels' arguments (names as there),
        ``min_count`` and ``ghost_cap`` as ints, ``mask`` the table's
        (``S - 1``).
    """
    i64 = np.int64
    nk = key_ids(num_blocks, ghost_cap)
    s = 1
    while s < 2 * nk:
        s *= 2
    c = np.zeros(NCOUNTERS, i64)
    T = np.zeros((s, 2), i64)  # (first word, key id + 1; 0: empty)
    BL = _rows(num_blocks, 8)
    BL[:, KEY] = BL[:, BKT] = -1
    BQ = _rows(buckets, 2, -1)
    rcap = 2 * (ghost_cap + num_blocks) + 1024  # > the live ghosts (<= ghost_cap + one allocation's victims)
    return {"BL": BL, "R": _rows(nk, 8), "T": T, "mask": s - 1, "fk": np.empty(nk, i64),
            "hs": np.zeros(num_blocks, i64), "re": np.zeros(rcap, i64), "rseq": np.zeros(rcap, i64),
            "BQ": BQ, "bits": np.zeros((buckets + 63) // 64, np.uint64), "H": _rows(2 * num_blocks + 1024, 4),
            "out": np.zeros(num_blocks, i64), "c": c,
            "min_count": min_count, "ghost_cap": ghost_cap}


def warm() -> None:
    """Compile every kernel (or load numba's on-disk cache) on a tiny state,
    with the argument types the runtime passes."""
    s = new_state(4, 2, 4)
    i64 = np.int64
    ids = np.array([1, 2], i64)
    w = np.arange(8, dtype=i64).tobytes()
    release(np.zeros(0, i64), ids, s["BL"], s["hs"], s["R"], 2, s["BQ"], s["bits"], s["H"], s["c"])
    evict(2, s["out"], s["BL"], s["hs"], s["R"], 4, s["re"], s["rseq"], s["BQ"], s["bits"], s["H"], s["T"], s["mask"],
          s["fk"], s["c"])
    stored(ids, w, s["BL"], s["R"], s["T"], s["mask"], s["fk"], s["c"])
    hit(ids, s["BL"], s["R"], s["c"])
    touch(np.zeros(0, i64), s["BL"], s["BQ"], s["bits"], s["c"])
