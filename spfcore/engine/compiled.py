"""Compiled engine runtimes: a shipped arm's decisions without its Python
hooks, for the engine's hot path (issue 11, part 5).

In the engine every request makes about ten runtime events over ~520
blocks (the seed's scale), and a :class:`~spfcore.runtime.PolicyRuntime`
runs the policy's Python hooks over dicts of 256-bit block hashes there:
1-2 ms a request on the H200, mostly cold-cache memory traffic
(results/gpu-h200-engine-calls-75ab649). A compiled runtime stands in for
one shipped policy class (the class itself, not a subclass, with parameters
it takes; :func:`compiled_runtime` decides) and makes one numba kernel call
per event over int arrays, with the same decisions: the same victims in the
same order, and the same admissions and scores
(``tests/test_engine_compiled.py`` replays recorded event streams through
both). It serves the driver interface of ``PolicyRuntime`` that the vLLM
adapter uses (the events, ``free_ids``, ``num_free``, ``stats`` and the
counters) and no more: no key map, no hook relay, no checkpoint.

Its keys are vLLM's block hashes themselves (:attr:`wants_block_hashes`):
the adapter hands ``stored`` the 32-byte ``BlockHash`` values rather than
:func:`~spfcore.engine.vllm_adapter.vllm_keys`, and the kernels intern all
256 bits (:mod:`spfcore.engine._frequency_nb`), so keys are equal exactly
when the hook path's keys are.

The simulator keeps its own compiled replays (per trace,
:mod:`spfcore.sim.simulator`'s ``KERNELS``); these are per event, because
vLLM owns the pool and the prefix-cache map in the engine.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.views import RequestView

_perf = time.perf_counter
#: vLLM's block hash length this runtime interns, bytes (sha256 and sha256_cbor;
#: shorter hashes, xxhash's 16, are zero-padded to it).
HASH_BYTES = 32
#: The most ghost entries per block (``ghost_factor``) a compiled runtime
#: reserves; a larger one runs the hooks (default ``ghost_factor`` 4).
MAX_GHOSTS_PER_BLOCK = 64


def compiled_runtime(rt: PolicyRuntime):
    """A compiled runtime standing in for ``rt``'s policy, or ``None`` where
    none does (then ``rt`` itself serves).

    Stands in only for a shipped plugin's own class (a :data:`STANDINS`
    entry: not a subclass), alone in ``rt``'s plugin manager, hook calls not
    monitored, no hook budget, runtime calls not being recorded
    (:func:`spfcore.sim.replay.recording`: the record is ``PolicyRuntime``'s),
    and with parameters its builder takes (each builder's docstring says which).

    Args:
        rt: A fresh runtime of the configured policy (its
            ``spfcore_cache_configured`` already called).
    """
    from spfcore.runtime import _PLAIN_EXEC

    from spfcore.sim.replay import recording

    if rt.hook_budget_s is not None or getattr(rt.pm, "_inner_hookexec", None) is not _PLAIN_EXEC or recording():
        return None
    plugins = rt.pm.get_plugins()
    if len(plugins) != 1:
        return None
    inst = next(iter(plugins))
    build = STANDINS.get((type(inst).__module__, type(inst).__qualname__))
    return build(rt, inst) if build is not None else None


def _frequency(rt: PolicyRuntime, inst) -> FrequencyKernelRuntime | None:
    """``spfcore_frequency.FrequencyPolicy`` with int ``min_count >= 1`` and
    ``0 <= ghost_factor <=`` :data:`MAX_GHOSTS_PER_BLOCK` (its state is
    reserved up front for ``ghost_factor * num_blocks`` ghosts; the hooks'
    grows with use)."""
    from spfcore.sim.simulator import _frequency_params

    p = _frequency_params(rt)
    if p is None or p[1] > MAX_GHOSTS_PER_BLOCK * rt.num_blocks:
        return None
    return FrequencyKernelRuntime(rt.num_blocks, rt.block_size, min_count=p[0], ghost_cap=p[1],
                                  policy_name=rt.policy_name)


def _ids(ids) -> np.ndarray:
    """Block ids as an int64 array (an array as it is; a list through
    ``np.fromiter``: about half ``np.array``'s time on a few hundred ints)."""
    return ids if isinstance(ids, np.ndarray) else np.fromiter(ids, np.int64, len(ids))


def _stored_bytes(rt, n: int, keys: Sequence[bytes], pad: str = "right") -> tuple[bytes, int]:
    """The ``n`` vLLM block hashes ``keys`` a ``stored`` event names as one
    ``bytes`` of ``32 * n`` (``np.frombuffer`` of it: ``(n, 4)`` int64 words,
    read-only), and their length, bytes: one length of 8, 16, 24 or 32
    bytes, the runtime's first hashes' (``rt._hash_bytes``; the caller sets
    it), zero-padded to 32 on the ``pad`` side (``"right"``; ``"left"``: the
    same big-endian int). Checked: the total length and the first hash's
    (vLLM's hashes of one engine are of one length).

    Raises:
        PolicyError: hashes of another length, or not ``n`` of them.
    """
    raw = b"".join(keys)
    hb = rt._hash_bytes or len(keys[0])
    if hb not in (8, 16, 24, 32) or len(keys[0]) != hb or len(raw) != hb * n or len(keys) != n:
        raise rt._bad(f"stored {n} blocks with {len(keys)} hashes of {len(raw)} bytes in all: need one "
                      f"length of 8, 16, 24 or 32 bytes a hash ({rt._hash_bytes or 'any'} here)")
    if hb != HASH_BYTES:
        z = HASH_BYTES - hb
        w = np.frombuffer(raw, np.uint8).reshape(n, hb)
        raw = np.pad(w, ((0, 0), (z, 0) if pad == "left" else (0, z))).tobytes()
    return raw, hb


def _stored_words(rt, n: int, keys: Sequence[bytes], pad: str = "right") -> tuple[np.ndarray, int]:
    """:func:`_stored_bytes` as an ``(n, 4)`` int64 array (read-only), and the hashes' length."""
    raw, hb = _stored_bytes(rt, n, keys, pad)
    return np.frombuffer(raw, np.int64).reshape(n, 4), hb


def _counter(slot: str, doc: str) -> property:
    """A read-only property: the runtime's counter ``self.c[self.nb.<slot>]``, an int."""
    return property(lambda self: int(self.c[getattr(self.nb, slot)]), doc=doc)


class _KernelRuntime:
    """What the compiled runtimes share: the driver interface's constant
    attributes, the counters read from the kernels' counters array ``c``
    (indices in the kernel module ``nb``), ``stats``, ``num_free``, the error
    they raise and the events they do nothing or refuse on. A subclass sets ``nb``, ``c``,
    ``policy_name``, ``policy_seconds`` and ``evict_seconds``."""

    wants_block_hashes = True
    #: The adapter may hand ``release`` int64 id arrays (``_ids`` takes them as they are).
    id_arrays = True
    needs_future = False
    vllm_order = False
    hints_issued = hints_used = 0
    hook_seconds = 0.0
    pins_refused = 0

    evictions = _counter("EVICTIONS", "Cached victims so far.")
    evict_calls = _counter("EVICT_CALLS", "Allocations (``evict`` calls that took blocks) so far.")
    hook_calls = _counter("HOOK_CALLS", "The hook calls the hook path would have made so far (see the class).")

    def stats(self) -> dict:
        """:meth:`PolicyRuntime.stats <spfcore.runtime.PolicyRuntime.stats>`'s counters."""
        return {"hook_seconds": 0.0, "hook_calls": self.hook_calls, "policy_seconds": self.policy_seconds,
                "evictions": self.evictions, "evict_seconds": self.evict_seconds, "evict_calls": self.evict_calls,
                "hints_issued": 0, "hints_used": 0, "pins_refused": self.pins_refused}

    def _bad(self, what: str, hook: str | None = None) -> PolicyError:
        return PolicyError(f"policy {self.policy_name!r} (compiled runtime): {what}", policy=self.policy_name,
                           hook=hook)

    def finished(self, request: RequestView, now: float) -> None:
        """The request finished: nothing to do (no finished hook)."""

    @property
    def num_free(self) -> int:
        """Free blocks now (hashless and cached), blocks: ``c``'s counts
        ``nb.HSN`` and ``nb.LRUN`` (the spf runtime counts its own)."""
        c = self.c
        return int(c[self.nb.HSN] + c[self.nb.LRUN])

    def forget(self, ids: Sequence[int]) -> None:
        """Not supported: a prefix-cache reset starts a fresh runtime.

        Raises:
            NotImplementedError: always."""
        raise NotImplementedError(f"{type(self).__name__}.forget: start a fresh runtime instead")


class FrequencyKernelRuntime(_KernelRuntime):
    """The shipped ``frequency`` arm as numba kernels
    (:mod:`spfcore.engine._frequency_nb`), with
    :class:`~spfcore.runtime.PolicyRuntime`'s driver interface.

    Args:
        num_blocks: Pool size, blocks (physical ids ``0 .. num_blocks-1``).
        block_size: Tokens per block.
        min_count: Accesses a block's hash needs to be admitted (>= 1).
        ghost_cap: Ghost entries kept, ``ghost_factor * num_blocks`` (>= 0).
        policy_name: For error messages and the fault record.
        buckets: Counts with a FIFO bucket of the order (default
            :data:`~spfcore.engine._frequency_nb.NBUCKETS`); higher ones wait
            in a heap (same order: tests set it low to reach the heap).

    Attributes:
        policy_seconds: Wall time of every event, seconds
            (``time.perf_counter``); ``hook_seconds`` stays 0 (no hook runs).
        hook_calls: The hook calls the hook path would have made
            (``spfcore_blocks_hit`` per hit event, ``spfcore_blocks_stored``
            per non-empty store, ``spfcore_blocks_evicted`` per allocation
            with a cached victim, admit + score per release of cached
            blocks), as the simulator's compiled replays count them.
        evictions, evict_calls, evict_seconds: As the runtime's.

    Errors: an event raises :class:`~spfcore.runtime.PolicyError` (naming
    the policy and the block) when the driver breaks the event protocol (a
    block released while free, a block named twice in one call, a store into
    a block holding a hash, a block id outside the pool, hashes of another
    length); nothing of that event
    is applied, so the adapter fails open. ``touch`` raises ``KeyError`` for
    a block that is not free and cached, ``evict`` ``ValueError`` when
    ``n < 0`` or fewer than ``n`` blocks are free, as the runtime does. What
    the hook path accepts the same way is accepted: a hit on, or a cached
    release of, a block the runtime never heard stored (after a prefix-cache
    reset with requests in flight) counts under one "no key" key, as the
    hooks count the key ``None``.
    """

    def __init__(self, num_blocks: int, block_size: int, *, min_count: int, ghost_cap: int,
                 policy_name: str = "frequency", buckets: int | None = None) -> None:
        from spfcore.evictor import prepare_numba

        prepare_numba()
        from spfcore.engine import _frequency_nb as nb

        nb.warm()
        self.nb, self.num_blocks, self.block_size, self.policy_name = nb, num_blocks, block_size, policy_name
        self.s = s = nb.new_state(num_blocks, min_count, ghost_cap, buckets or nb.NBUCKETS)
        self.c = s["c"]
        self.c[nb.HOOK_CALLS] = 1  # spfcore_cache_configured, as the runtime counts it at construction
        self.policy_seconds = self.evict_seconds = 0.0
        self._k = nb
        self._touch_args = (s["BL"], s["BQ"], s["bits"], self.c)
        self._hit_args = (s["BL"], s["R"], self.c)
        self._stored_args = (s["BL"], s["R"], s["T"], s["mask"], s["fk"], self.c)
        self._evict_args = tuple(s[x] for x in ("out", "BL", "hs", "R", "ghost_cap", "re", "rseq", "BQ", "bits", "H",
                                                "T", "mask", "fk", "c"))
        self._release_args = (s["BL"], s["hs"], s["R"], s["min_count"], s["BQ"], s["bits"], s["H"], self.c)
        self._empty = np.zeros(0, np.int64)
        self._hash_bytes = 0  # the hashes' length, set by the first store

    # ------------------------------------------------------------ events
    def arrived(self, request: RequestView, now: float) -> tuple:
        """A request arrived: nothing to decide (frequency has no arrival
        hook and no expiring score). Returns no prefetch hint."""
        return ()

    def hit(self, request: RequestView, ids: Sequence[int], now: float) -> None:
        """The lookup hit blocks ``ids``: each one's hash counts one more access
        (a block stored before a prefix-cache reset: the hook path's key
        ``None``, see :func:`~spfcore.engine._frequency_nb.hit`).

        Raises:
            PolicyError: a block id outside the pool (nothing applied)."""
        t0 = _perf()
        try:
            if not len(ids):  # (no kernel call: the hook call counted, nothing else)
                self.c[self.nb.HOOK_CALLS] += 1
                return
            a = _ids(ids)
            r = self._k.hit(a, *self._hit_args)
            if r:
                raise self._bad(f"hit block {int(a[-1 - r])}: outside the pool")
        finally:
            self.policy_seconds += _perf() - t0

    def stored(self, request: RequestView, ids: Sequence[int], keys: Sequence[bytes], first_depth: int,
               parent, num_tokens: int, now: float) -> None:
        """Blocks ``ids`` were cached with vLLM block hashes ``keys``, all of
        one length of 8, 16, 24 or 32 bytes (sha256: 32, xxhash: 16; shorter
        ones are compared as if zero-padded to 32), the length of the first
        store's hashes for the runtime's life; ``first_depth``, ``parent`` and
        ``num_tokens`` are not read. Checked: the total length, and the first
        hash's (vLLM's hashes of one engine are of one length).

        Raises:
            PolicyError: a hash of another length, a block holding a hash
                already, named twice or outside the pool (nothing applied).
        """
        t0 = _perf()
        try:
            n = len(ids)
            if not n:
                self.c[self.nb.HOOK_CALLS] += 1  # (the hook path calls spfcore_blocks_stored on an empty store too)
                return
            raw, hb = _stored_bytes(self, n, keys)
            a = _ids(ids)
            r = self._k.stored(a, raw, *self._stored_args)
            if r == self._k.E_FULL:
                raise self._bad(f"every key id is live ({len(self.s['fk'])}): the bound does not hold")
            if r:
                raise self._bad(f"stored block {int(a[-1 - r])}: holds a block hash already, or named twice "
                                "(or outside the pool)")
            self._hash_bytes = hb  # (fixed by the first store taken)
        finally:
            self.policy_seconds += _perf() - t0

    def release(self, cached_ids: Sequence[int], hashless_ids: Sequence[int], now: float) -> None:
        """Blocks whose ref count reached 0: cached ones admitted and scored
        by their hash's count, into the order; hashless ones on top."""
        t0 = _perf()
        try:
            ca = _ids(cached_ids) if len(cached_ids) else self._empty
            ha = _ids(hashless_ids) if len(hashless_ids) else self._empty
            r = self._k.release(ca, ha, *self._release_args)
            if r:
                j = -1 - r
                b = int(ca[j]) if j < len(ca) else int(ha[j - len(ca)])
                raise self._bad(f"released block {b}: free already, or named twice (or outside the pool)")
        finally:
            self.policy_seconds += _perf() - t0

    def evict(self, n: int, now: float) -> list[int]:
        """Take ``n`` free blocks for an allocation (hashless first, then the
        lowest ``(admitted, count, release order)``).

        Raises:
            ValueError: if ``n < 0`` or fewer than ``n`` blocks are free.
        """
        t0 = _perf()
        try:
            if n < 0:
                raise ValueError(f"evict({n}): a negative number of blocks")
            if self._k.evict(n, *self._evict_args):
                raise ValueError(f"No free blocks available: asked for {n}, {self.num_free} free")
            return self.s["out"][:n].tolist()
        finally:
            self.policy_seconds += (dt := _perf() - t0)
            self.evict_seconds += dt

    def touch(self, ids: Sequence[int]) -> None:
        """Hit blocks that were free leave the order.

        Raises:
            KeyError: a block is not a free cached block (nothing applied).
        """
        t0 = _perf()
        try:
            a = _ids(list(ids))
            r = self._k.touch(a, *self._touch_args)
            if r:
                raise KeyError(int(a[-1 - r]))  # not a free cached block, named twice, or outside the pool
        finally:
            self.policy_seconds += _perf() - t0

    # ------------------------------------------------------------ queries
    def free_ids(self) -> list[int]:
        """Every free block id: hashless first (the next one handed out
        first), then cached in no fixed order."""
        s = self.s
        return s["hs"][: self.c[self.nb.HSN]][::-1].tolist() + np.flatnonzero(s["BL"][:, self.nb.INN]).tolist()

    def is_free(self, block_id: int) -> bool:
        """Whether physical block ``block_id`` is free."""
        row = self.s["BL"][block_id]
        return bool(row[self.nb.INN] or row[self.nb.HFREE])



# ------------------------------------------------------------ session_ttl
def _session_ttl(rt: PolicyRuntime, inst) -> SessionTTLKernelRuntime | None:
    """``spfcore_session_ttl.SessionTTLPolicy`` in arrivals mode: its own
    params class, ``ttl_seconds`` ``None``, int ``1 <= ttl_arrivals <``
    :data:`~spfcore.engine._session_ttl_nb.QMAX` (65,536: the expiry
    calendar's reach), ``max_sessions`` as ``spfcore_cache_configured`` set it
    (``max(1, num_blocks)``). Anything else (seconds mode, a longer TTL, a
    params subclass) runs the hooks."""
    from spfcore.engine._session_ttl_nb import QMAX
    from spfcore_session_ttl import SessionTTLParams

    p = inst.params
    if (type(p) is not SessionTTLParams or p.ttl_seconds is not None or type(p.ttl_arrivals) is not int
            or not 1 <= p.ttl_arrivals < QMAX or inst.max_sessions != max(1, rt.num_blocks) or not rt.keyed):
        return None
    return SessionTTLKernelRuntime(rt.num_blocks, rt.block_size, ttl=p.ttl_arrivals, pin_cap=rt.pin_cap,
                                   policy_name=rt.policy_name)


class SessionTTLKernelRuntime(_KernelRuntime):
    """The shipped ``session_ttl`` arm (arrivals mode) as numba kernels
    (:mod:`spfcore.engine._session_ttl_nb`), with
    :class:`~spfcore.runtime.PolicyRuntime`'s driver interface and the scored
    evictor's order: hashless blocks first (most recently freed), then
    unpinned cached blocks by release order, then pinned ones by release
    order; a free block is pinned while its hash's ``until`` (arrival index)
    lies ahead of the latest arrival, up to ``pin_cap`` pinned blocks.

    Args:
        num_blocks: Pool size, blocks (physical ids ``0 .. num_blocks-1``).
        block_size: Tokens per block.
        ttl: ``ttl_arrivals``: a touch by a request of arrival index ``i``
            protects its hashes to arrival ``i + ttl`` (``1 <= ttl < 65,536``).
        pin_cap: Most pinned free blocks (``int(pin_cap_fraction *
            num_blocks)``, the evictor's cap); refused pins are counted in
            ``stats()["pins_refused"]``.
        policy_name: For error messages and the fault record.
        max_sessions: Most live sessions (default ``max(1, num_blocks)``, as
            the plugin sets it; at most ``num_blocks``).
        edges, order_cap: Initial edges, and entries of the order heap and
            the expiry calendar (:func:`~spfcore.engine._session_ttl_nb.new_state`;
            tests set them low to reach growth and compaction).

    Attributes:
        policy_seconds: Wall time of every event, seconds; ``hook_seconds``
            stays 0 (no hook runs).
        hook_calls: The hook calls the hook path would have made (arrived and
            rescore_keys per arrival, a score call per non-empty re-score or
            release batch, hit per hit event, stored per store, evicted per
            allocation with a keyed victim), as the simulator's compiled replay
            counts them.
        evictions, evict_calls, evict_seconds: As the runtime's.

    Sessions (``RequestView.session_id``, any hashable; ``None``: no session)
    are interned to ids reused once the kernels dropped the session (at most
    ``2 * num_blocks + 64`` held). Edges (session, hash) grow by doubling as
    the plugin's do (its memory is sessions x hashes they touched).

    Errors: as :class:`FrequencyKernelRuntime`'s (protocol breaks raise
    :class:`~spfcore.runtime.PolicyError` with nothing applied; ``touch``
    ``KeyError``, ``evict`` ``ValueError``). An arrival index below the
    latest arrival's, and a session's hit or store by a request ahead of it,
    raise ``PolicyError`` too, nothing applied: the expiry calendar reaches a
    TTL ahead of a clock that only grows, as the engine's does (the hooks
    would take both). A hit on, or a cached release of, a block the runtime
    never heard stored (after a prefix-cache reset with requests in flight)
    is touched and scored under one "no key" key, as the hooks touch and
    score the key ``None`` (which they never evict).
    """

    def __init__(self, num_blocks: int, block_size: int, *, ttl: int, pin_cap: int,
                 policy_name: str = "session_ttl", max_sessions: int | None = None, edges: int | None = None,
                 order_cap: int | None = None) -> None:
        from spfcore.evictor import prepare_numba

        prepare_numba()
        from spfcore.engine import _session_ttl_nb as nb

        nb.warm()
        self.nb, self.num_blocks, self.block_size, self.policy_name = nb, num_blocks, block_size, policy_name
        self.ttl, self.pin_cap = int(ttl), int(pin_cap)
        self.max_sessions = max(1, num_blocks) if max_sessions is None else int(max_sessions)
        if not 1 <= self.max_sessions <= max(1, num_blocks):
            raise ValueError(f"max_sessions {self.max_sessions}: 1 .. {max(1, num_blocks)}")
        self.s = nb.new_state(num_blocks, self.ttl, self.pin_cap, self.max_sessions, edges, order_cap)
        self.c = self.s["c"]
        self.c[nb.HOOK_CALLS] = 1  # spfcore_cache_configured, as the runtime counts it at construction
        self.policy_seconds = self.evict_seconds = 0.0
        self._sids: dict = {}  # session id -> session row
        self._sfree: list[int] = []
        self._snext = 0
        self._empty = np.zeros(0, np.int64)
        self._hash_bytes = 0
        self._arr = 0  # the latest arrival index (``c[nb.ARR]``, as a Python int: cheaper to compare)
        self._empty_hits = 0  # hit events of no block (each a hit-hook call; counted here, no kernel call)
        self._bind()

    def _bind(self) -> None:
        s, c = self.s, self.c
        self._out = s["V"][self.nb.OUT]
        self._arrived_args = (s["V"], s["BL"], s["R"], s["S"], s["E"], s["HQ"], s["qb"], c)
        self._hit_args = (s["V"], s["BL"], s["R"], s["S"], s["E"], s["ht"], c)
        self._stored_args = (s["V"], s["BL"], s["R"], s["T"], s["S"], s["E"], s["ht"], c)
        self._release_args = (s["V"], s["BL"], s["R"], s["HQ"], s["qb"], c)
        self._evict_args = (s["V"], s["BL"], s["R"], s["T"], s["S"], s["E"], s["ht"], s["HQ"], s["qb"], c)

    # ------------------------------------------------------------ counters
    evictions = _counter("EVICTIONS", "Keyed victims so far.")

    @property
    def hook_calls(self) -> int:
        """The hook calls the hook path would have made so far (see the class)."""
        return int(self.c[self.nb.HOOK_CALLS]) + self._empty_hits

    pins_refused = _counter("REFUSED", "Pins the cap refused so far, blocks.")
    num_pinned = _counter("NPIN", "Pinned free blocks now.")

    def _sid(self, session_id) -> int:
        """The session row of ``session_id`` (interned; a dead row reused)."""
        i = self._sids.get(session_id)
        if i is not None:
            return i
        if not self._sfree:
            if self._snext < len(self.s["S"]):
                self._snext += 1
                i = self._snext - 1
                self._sids[session_id] = i
                return i
            alive = self.s["S"][:, self.nb.ALIVE]  # every row named: free the dead ones (amortized O(1))
            dead = [k for k, j in self._sids.items() if not alive[j]]
            for k in dead:
                self._sfree.append(self._sids.pop(k))
        i = self._sfree.pop()
        self._sids[session_id] = i
        return i

    def _ahead(self, request: RequestView, what: str) -> PolicyError:
        """A session's touch protects to ``arrival_index + ttl``, which must
        lie within the expiry calendar's reach (a TTL ahead of the latest
        arrival): the error for a request ahead of the latest arrival (one that
        has not arrived; the engine's requests arrive before their lookup)."""
        return self._bad(f"{what} by request {request.request_id!r} of arrival index {request.arrival_index}: "
                         f"ahead of the latest arrival's {self._arr} (it has not arrived)")

    def _grow(self) -> None:
        self.nb.grow_edges(self.s)
        self._bind()

    # ------------------------------------------------------------ events
    def arrived(self, request: RequestView, now: float) -> tuple:
        """A request arrived (arrival index ``request.arrival_index``, the
        clock): its session's hashes protected anew, expired pins and its
        session's free blocks re-scored. Returns no prefetch hint.

        Raises:
            PolicyError: an arrival index below the latest arrival's (or
                below 0 before the first; nothing applied). The engine's
                indices only grow; the hooks would take it.
        """
        t0 = _perf()
        try:
            pos = request.arrival_index
            if pos < self._arr:
                raise self._bad(f"arrival index {pos}: below the latest arrival's {self._arr} (the "
                                "expiry calendar takes a clock that only grows)")
            sid = request.session_id
            s = -1 if sid is None else self._sids.get(sid, -1)
            self.nb.arrived(pos, s, *self._arrived_args)
            self._arr = pos
            return ()
        finally:
            self.policy_seconds += _perf() - t0

    def hit(self, request: RequestView, ids: Sequence[int], now: float) -> None:
        """The lookup hit blocks ``ids``: a request with a session protects
        their hashes to ``arrival_index + ttl`` and owns them (a block with
        no hash: the key ``None``, see the class).

        Raises:
            PolicyError: a block not of the pool, more blocks than the pool
                holds, or a request with a session and an arrival index
                ahead of the latest arrival's (nothing applied).
        """
        t0 = _perf()
        try:
            if not len(ids):
                self._empty_hits += 1  # (spfcore_blocks_hit on an empty hit too; nothing else: no kernel call)
                return
            a = _ids(ids)
            if len(a) > self.num_blocks:
                raise self._bad(f"hit {len(a)} blocks: more than the pool's {self.num_blocks}")
            sid = request.session_id
            if sid is not None and request.arrival_index > self._arr:  # (a touch that protects)
                raise self._ahead(request, "hit")
            s = self._sid(sid) if sid is not None else -1
            end = request.arrival_index + self.ttl
            while True:
                r = self.nb.hit(a, s, end, *self._hit_args)
                if r != self.nb.E_EDGES:
                    break
                self._grow()
            if r:
                raise self._bad(f"hit block {int(a[self.nb.E_RANGE - r])}: not a block of the pool")
        finally:
            self.policy_seconds += _perf() - t0

    def stored(self, request: RequestView, ids: Sequence[int], keys: Sequence[bytes], first_depth: int,
               parent, num_tokens: int, now: float) -> None:
        """Blocks ``ids`` were cached with vLLM block hashes ``keys`` (one
        length of 8, 16, 24 or 32 bytes, as :meth:`FrequencyKernelRuntime.stored`
        takes them); a request with a session protects and owns them.

        Raises:
            PolicyError: a hash of another length, a block holding a hash
                already, named twice or not of the pool, or a request with a
                session and an arrival index ahead of the latest arrival's
                (nothing applied).
        """
        t0 = _perf()
        try:
            n = len(ids)
            if not n:
                self.c[self.nb.HOOK_CALLS] += 1  # (the hook path calls spfcore_blocks_stored on an empty store too)
                return
            w, hb = _stored_words(self, n, keys)
            sid = request.session_id
            if sid is not None and request.arrival_index > self._arr:  # (a touch that protects)
                raise self._ahead(request, "stored")
            a = _ids(ids)
            s = self._sid(sid) if sid is not None else -1
            end = request.arrival_index + self.ttl
            while True:
                r = self.nb.stored(a, w, s, end, *self._stored_args)
                if r != self.nb.E_EDGES:
                    break
                self._grow()
            if not r:
                self._hash_bytes = hb  # (fixed by the first store taken)
            if r == self.nb.E_FULL:
                raise self._bad(f"every key id is live ({self.nb.key_ids(self.num_blocks)}): the bound does not hold")
            if r <= self.nb.E_RANGE:
                raise self._bad(f"stored block {int(a[self.nb.E_RANGE - r])}: not a block of the pool")
            if r:
                raise self._bad(f"stored block {int(a[-1 - r])}: holds a block hash already, or named twice")
        finally:
            self.policy_seconds += _perf() - t0

    def release(self, cached_ids: Sequence[int], hashless_ids: Sequence[int], now: float) -> None:
        """Blocks whose ref count reached 0: cached ones scored at the latest
        arrival (pinned while their hash's ``until`` lies ahead, within the
        cap) with new release orders, in order; hashless ones on top,
        ``hashless_ids[0]`` first.

        Raises:
            PolicyError: a block free already, named twice or not of the pool
                (nothing applied).
        """
        t0 = _perf()
        try:
            ca = _ids(cached_ids) if len(cached_ids) else self._empty
            ha = _ids(hashless_ids) if len(hashless_ids) else self._empty
            r = self.nb.release(ca, ha, *self._release_args)
            if r:
                j = -1 - r
                b = int(ca[j]) if j < len(ca) else int(ha[j - len(ca)])
                raise self._bad(f"released block {b}: free already, or named twice")
        finally:
            self.policy_seconds += _perf() - t0

    def evict(self, n: int, now: float) -> list[int]:
        """Take ``n`` free blocks for an allocation (expired scores re-scored
        first when cached blocks are taken): hashless first, then unpinned by
        release order, then pinned by release order.

        Raises:
            ValueError: if ``n < 0`` or fewer than ``n`` blocks are free.
        """
        t0 = _perf()
        try:
            if n < 0:
                raise ValueError(f"evict({n}): a negative number of blocks")
            if self.nb.evict(n, *self._evict_args):
                raise ValueError(f"No free blocks available: asked for {n}, {self.num_free} free")
            return self._out[:n].tolist()
        finally:
            self.policy_seconds += (dt := _perf() - t0)
            self.evict_seconds += dt

    def touch(self, ids: Sequence[int]) -> None:
        """Hit blocks that were free leave the order.

        Raises:
            KeyError: a block is not a free cached block (nothing applied).
        """
        t0 = _perf()
        try:
            a = _ids(list(ids))
            r = self.nb.touch(a, self.s["BL"], self.c)
            if r:
                raise KeyError(int(a[-1 - r]))
        finally:
            self.policy_seconds += _perf() - t0

    # ------------------------------------------------------------ queries
    def free_ids(self) -> list[int]:
        """Every free block id: hashless first (the next one handed out
        first), then cached in no fixed order."""
        s = self.s
        return (s["V"][self.nb.HS, : self.c[self.nb.HSN]][::-1].tolist()
                + np.flatnonzero(s["BL"][: self.num_blocks, self.nb.FL] & self.nb.F_IN).tolist())

    def is_free(self, block_id: int) -> bool:
        """Whether physical block ``block_id`` is free (``False`` for an id outside the pool, as the runtime answers)."""
        if not 0 <= block_id < self.num_blocks:
            return False
        return bool(self.s["BL"][block_id, self.nb.FL])  # (free and cached, or on the hashless stack)



# ------------------------------------------------------------ belady_oracle
def _belady(rt: PolicyRuntime, inst) -> BeladyKernelRuntime | None:
    """``spfcore_belady_oracle.BeladyOraclePolicy``: it has no parameters
    (and pins nothing, so ``pin_cap_fraction`` decides nothing); always
    compiled. What :class:`BeladyKernelRuntime` refuses at run time (a
    future it cannot index, an arrival outside it) fails open there."""
    return BeladyKernelRuntime(rt.num_blocks, rt.block_size, policy_name=rt.policy_name)


class BeladyKernelRuntime(_KernelRuntime):
    """The shipped ``belady_oracle`` arm as numba kernels
    (:mod:`spfcore.engine._belady_nb`), with
    :class:`~spfcore.runtime.PolicyRuntime`'s driver interface
    (``needs_future``: :meth:`set_future` before the first arrival).

    Keys meet as on the hook path: the future's block keys are ``int``\\ s
    (:func:`~spfcore.engine.vllm_adapter.vllm_keys`, big-endian, below
    ``2**256``), read as 32 big-endian bytes; a stored vLLM hash of 8, 16,
    24 or 32 bytes is read as the same int (left zero-padded), so a key
    matches exactly when ``int.from_bytes(hash) == key``.

    A waiting request's block hashes are the future's at its arrival index
    (the engine's views carry none for a compiled runtime; the hooks read the
    view's, which the runner makes from the same prompt tokens,
    ``spf_prompt_keys``): a view's ``block_keys`` are not read.

    Args:
        num_blocks: Pool size, blocks (physical ids ``0 .. num_blocks-1``).
        block_size: Tokens per block.
        policy_name: For error messages and the fault record.
        cap: Entries of the order and of each expiry structure (default
            :func:`~spfcore.engine._belady_nb.heap_cap`; tests set it low,
            ``>= 2 * num_blocks + 1``, to reach their compactions).

    Attributes:
        policy_seconds: Wall time of every event, seconds; ``hook_seconds``
            stays 0 (no hook runs).
        hook_calls: The hook calls the hook path would have made
            (``spfcore_cache_configured``, ``spfcore_future_requests``,
            ``spfcore_request_arrived`` per arrival, ``spfcore_blocks_hit``
            per hit event, ``spfcore_score_blocks`` per release of cached
            blocks and per re-score round that found a live expired score).
        evictions, evict_calls, evict_seconds: As the runtime's.

    Errors: an event raises :class:`~spfcore.runtime.PolicyError` with
    nothing applied (the adapter fails open) for: an arrival before
    :meth:`set_future` (as the hook path), an arrival index outside the
    future (``0 .. span-1``) or already waiting, a request id already waiting,
    a block released while free or named twice, a block id outside the pool
    (``touch``: ``KeyError``), a store into a block holding
    a hash, hashes of another length than the first store's (8, 16, 24 or 32
    bytes) and :meth:`set_future` twice or after a store. ``touch`` raises
    ``KeyError`` for a block that is not free and cached, ``evict``
    ``ValueError`` when ``n < 0`` or fewer than ``n`` blocks are free. A hit
    on, or cached release of, a block the runtime never heard stored (after
    a prefix-cache reset with requests in flight) is scored as the hooks
    score the key ``None``: never used again, at the depth last stored in
    that block (0 if none).
    """

    needs_future = True

    def __init__(self, num_blocks: int, block_size: int, *, policy_name: str = "belady_oracle",
                 cap: int | None = None) -> None:
        from spfcore.evictor import prepare_numba

        prepare_numba()
        from spfcore.engine import _belady_nb as nb

        nb.warm()
        self.nb, self.num_blocks, self.block_size, self.policy_name = nb, num_blocks, block_size, policy_name
        self.s = nb.new_state(num_blocks, cap)
        self.s["c"][nb.HOOK_CALLS] = 1  # spfcore_cache_configured, as the runtime counts it at construction
        self.policy_seconds = self.evict_seconds = 0.0
        self._future_set = False
        self._waiting: dict = {}  # request id -> its arrival index, while it waits for its lookup
        self._bind()
        self._empty = np.zeros(0, np.int64)
        self._hash_bytes = 0  # the hashes' length, set by the first store

    def _bind(self) -> None:
        """The state buffer the kernels take and the views read here, anew after ``set_index``."""
        s = self.s
        self._S = self.nb.pack(s, self.nb.REGIONS)
        self.c, self._out, self._wait = s["c"], s["out"], s["WAIT"]
        self._span = len(s["off"]) - 1

    # ------------------------------------------------------------ counters
    evict_calls = _counter("EVICT_CALLS", "Allocations (``evict`` calls) so far.")

    # ------------------------------------------------------------ events
    def set_future(self, requests) -> None:
        """The future request stream (RequestViews; ``block_keys``: ints in
        ``[0, 2**256)``, as :func:`~spfcore.engine.vllm_adapter.vllm_keys`
        gives them; ``arrival_index`` each request's distinct position):
        indexed by the policy's own ``spfcore_future_requests`` (the same
        dense ids, next uses and checks), then its hashes' words and table
        built. O(uses), once per run, outside the hot path.

        Raises:
            PolicyError: a second call or one after a store, keys that are
                not such ints, arrival indices repeated, or whatever the
                policy's index refuses (counted as its hook call, as there).
        """
        nb = self.nb  # (not timed into policy_seconds: PolicyRuntime.set_future is not either)
        self.c[nb.HOOK_CALLS] += 1  # spfcore_future_requests (counted even when it fails, as _call does)
        if self._future_set or self.c[nb.STORES]:
            raise self._bad("set_future once per runtime, before any block is stored", "spfcore_future_requests")
        try:
            from spfcore_belady_oracle import BeladyOraclePolicy

            reqs = list(requests)

            if len({r.arrival_index for r in reqs}) != len(reqs):
                raise ValueError("an arrival index given to two requests")
            pol = BeladyOraclePolicy()
            pol.spfcore_future_requests(reqs)
            raw = b"".join(k.to_bytes(32, "big") for k in pol._dist)  # (negative, >= 2**256: OverflowError)
            if any(type(k) is not int for k in pol._dist):
                raise TypeError("block keys must be ints (vllm_keys)")
        except (TypeError, ValueError, OverflowError, AttributeError) as exc:
            raise self._bad(f"the future request stream: {exc!r}", "spfcore_future_requests") from exc
        i64 = np.int64
        words = np.frombuffer(raw, i64).reshape(len(pol._dist), 4)
        never = pol._never
        after = pol._after.astype(i64)
        after[pol._after == never] = nb.NEVER
        first = pol._next.astype(i64)
        first[pol._next == never] = nb.NEVER
        nb.set_index(self.s, words, np.array(pol._roff, i64), pol._rk.astype(i64), after, first)
        self._bind()
        self._future_set = True

    def arrived(self, request: RequestView, now: float) -> tuple:
        """A request arrived: the policy's position moves to its arrival
        index, it waits for its lookup, expired scores are re-scored.
        Returns no prefetch hint.

        Raises:
            PolicyError: before :meth:`set_future`, an arrival index outside
                the future or already waiting, a request id already waiting
                (nothing applied).
        """
        t0 = _perf()
        try:
            if not self._future_set:
                raise PolicyError(f"policy {self.policy_name!r} needs the future request stream "
                                  "(capability needs-future) but the runner supplied none",
                                  policy=self.policy_name, hook="spfcore_future_requests")
            i = request.arrival_index
            rid = request.request_id
            if not (0 <= i < self._span) or self._wait[i] or rid in self._waiting:
                raise self._bad(f"arrival index {i!r} of request {rid!r}: outside the future (0..{self._span - 1}) "
                                "or already waiting", "spfcore_request_arrived")
            self._waiting[rid] = i
            self.nb.arrived(int(i), float(now), self._S)
            return ()
        finally:
            self.policy_seconds += _perf() - t0

    def hit(self, request: RequestView, ids: Sequence[int], now: float) -> None:
        """The request's lookup (hit or not): it no longer waits (a repeated
        lookup, a preempted request's, changes nothing)."""
        t0 = _perf()
        try:
            self.nb.served(self._waiting.pop(request.request_id, -1), self._S)
        finally:
            self.policy_seconds += _perf() - t0

    def stored(self, request: RequestView, ids: Sequence[int], keys: Sequence[bytes], first_depth: int,
               parent, num_tokens: int, now: float) -> None:
        """Blocks ``ids`` were cached with vLLM block hashes ``keys`` (all of
        one length of 8, 16, 24 or 32 bytes, the first store's for the
        runtime's life; read as big-endian ints), at depths ``first_depth,
        first_depth + 1, ...``; ``parent`` and ``num_tokens`` are not read.
        Checked: the total length, and the first hash's.

        Raises:
            PolicyError: a hash of another length, a block outside the
                pool, holding a hash already or named twice (nothing applied).
        """
        t0 = _perf()
        try:
            n = len(ids)
            if not n:
                return
            raw, hb = _stored_bytes(self, n, keys, pad="left")  # the same int: zero bytes in front (big-endian)
            a = _ids(ids)
            r = self.nb.stored(a, raw, int(first_depth), int(request.arrival_index), self._S)
            if r:
                raise self._bad(f"stored block {int(a[-1 - r])}: holds a block hash already, or named twice "
                                "(or outside the pool)")
            self._hash_bytes = hb  # (once stored: a refused store fixes nothing)
        finally:
            self.policy_seconds += _perf() - t0

    def release(self, cached_ids: Sequence[int], hashless_ids: Sequence[int], now: float) -> None:
        """Blocks whose ref count reached 0: cached ones scored into the
        order (new release orders, in the order given); hashless ones on top."""
        t0 = _perf()
        try:
            ca = _ids(cached_ids) if len(cached_ids) else self._empty
            ha = _ids(hashless_ids) if len(hashless_ids) else self._empty
            r = self.nb.release(ca, ha, float(now), self._S)
            if r:
                j = -1 - r
                b = int(ca[j]) if j < len(ca) else int(ha[j - len(ca)])
                raise self._bad(f"released block {b}: free already, or named twice (or outside the pool)")
        finally:
            self.policy_seconds += _perf() - t0

    def evict(self, n: int, now: float) -> list[int]:
        """Take ``n`` free blocks for an allocation (expired scores re-scored
        first when cached blocks are taken; hashless first, then the lowest
        ``(value, release order)``).

        Raises:
            ValueError: if ``n < 0`` or fewer than ``n`` blocks are free.
        """
        t0 = _perf()
        try:
            if n < 0:
                raise ValueError(f"evict({n}): a negative number of blocks")
            if self.nb.evict(n, float(now), self._S):
                raise ValueError(f"No free blocks available: asked for {n}, {self.num_free} free")
            return self._out[:n].tolist()
        finally:
            self.policy_seconds += (dt := _perf() - t0)
            self.evict_seconds += dt

    def touch(self, ids: Sequence[int]) -> None:
        """Hit blocks that were free leave the order.

        Raises:
            KeyError: a block is not a free cached block, or named twice (nothing applied).
        """
        t0 = _perf()
        try:
            a = _ids(ids if isinstance(ids, (list, tuple)) else list(ids))
            r = self.nb.touch(a, self._S)
            if r:
                raise KeyError(int(a[-1 - r]))
        finally:
            self.policy_seconds += _perf() - t0

    # ------------------------------------------------------------ queries
    def free_ids(self) -> list[int]:
        """Every free block id: hashless first (the next one handed out
        first), then cached in no fixed order."""
        s = self.s
        return s["hs"][: self.c[self.nb.HSN]][::-1].tolist() + np.flatnonzero(s["BL"][:, self.nb.INN]).tolist()

    def is_free(self, block_id: int) -> bool:
        """Whether physical block ``block_id`` is free (``False`` for an id outside the pool, as the runtime answers)."""
        if not 0 <= block_id < self.num_blocks:
            return False
        row = self.s["BL"][block_id]
        return bool(row[self.nb.INN] or row[self.nb.HFREE])

    def next_use(self, key: int) -> int:
        """The policy's next use of block key ``key`` (an int, as the
        future's) now, arrival index (:data:`~spfcore.engine._belady_nb.NEVER`:
        none): as ``BeladyOraclePolicy.next_use``. For tests; O(1)."""
        nb, s = self.nb, self.s
        w = np.frombuffer(int(key).to_bytes(32, "big"), np.int64).reshape(1, 4)
        r = s["NW"][nb._find(s["T"], s["mask"], s["R"], w, 0)]
        return int(r[nb.WMIN] if r[nb.WMIN] < nb.NEVER else r[nb.NEXT])

# ------------------------------------------------------------ spf_expected_utility
def _spf(rt: PolicyRuntime, inst) -> SpfKernelRuntime | None:
    """``spfcore_spf_expected_utility.ExpectedUtilityPolicy`` with
    ``variant="utility"`` (its ``UtilityPolicy`` itself, not a subclass) and
    the parameters the simulator's compiled replay takes
    (:func:`spfcore.sim._replay_spf_nb.params_of`: every ``utility``
    parameter but ``count_weight > 0``, integer parameters below ``2**40``);
    ``None`` for ``variant="seed"`` (hints and pins) and for those parameters."""
    from spfcore.sim._replay_spf_nb import params_of

    p = params_of(rt)
    if p is None:
        return None
    return SpfKernelRuntime(rt.num_blocks, rt.block_size, policy=p[0], pin_cap=p[1], policy_name=rt.policy_name)


def _hash_words(rt, keys: Sequence[bytes], what: str) -> np.ndarray:
    """``(n, 4)`` int64 words (writable) of ``n`` vLLM block hashes of one
    length of 8, 16, 24 or 32 bytes (zero-padded to 32), the length of the
    runtime's first hashes (``rt._hash_bytes``, set here).

    Raises:
        PolicyError: hashes of another length (nothing applied).
    """
    n = len(keys)
    raw = b"".join(keys)
    hb = rt._hash_bytes or len(keys[0])
    # (the total and the shortest: every hash of hb bytes, e.g. not 32 + 16 + 48, which would fit 3 x 32)
    if hb not in (8, 16, 24, 32) or len(raw) != hb * n or min(map(len, keys)) != hb:
        raise rt._bad(f"{what} {n} hashes of {len(raw)} bytes in all: need one length of 8, 16, 24 or 32 bytes "
                      f"a hash ({rt._hash_bytes or 'any'} here)")
    rt._hash_bytes = hb
    w = np.frombuffer(bytearray(raw), np.int64).reshape(n, hb // 8)
    return w if hb == HASH_BYTES else np.pad(w, ((0, 0), (0, (HASH_BYTES - hb) // 8)))


class SpfKernelRuntime(_KernelRuntime):
    """The shipped ``spf_expected_utility`` arm, variant ``"utility"``
    (learned hit density), as numba kernels
    (:mod:`spfcore.engine._spf_nb`, on the simulator's compiled replay's
    state and sub-kernels, :mod:`spfcore.sim._replay_spf_nb`), with
    :class:`~spfcore.runtime.PolicyRuntime`'s driver interface.

    Args:
        num_blocks: Pool size, blocks (physical ids ``0 .. num_blocks-1``).
        block_size: Tokens per block.
        policy: The configured, fresh ``UtilityPolicy`` whose parameters and
            tables the kernels read (:func:`spfcore.sim._replay_spf_nb.params_of`).
        pin_cap: The runtime's pin cap, blocks (this variant never pins).
        policy_name: For error messages and the fault record.
        key_ids: Key ids reserved at first (default ``2 * num_blocks +
            ghost_cap + 1024``; tests set it low to reach sweeps and growth).

    Keys: the adapter hands ``stored`` (keys and parent) and ``arrived``
    (``request.block_keys``: the prompt's full blocks, ``wants_prompt_hashes``)
    vLLM's block hashes themselves, one length of 8, 16, 24 or 32 bytes
    (zero-padded to 32); the arrival hook needs the prompt's hashes (its seen
    prefix decides the request's kind; its hash set, the kind of each stored
    block). Key ids are reused once the state names a hash no more (a sweep
    when none is free; the arrays double when a sweep frees less than a
    quarter), so memory follows what the policy keeps: cached hashes, their
    parents, records and ghosts (``ghost_factor * num_blocks``), the
    latest prompt.

    Attributes:
        policy_seconds: Wall time of every event, seconds
            (``time.perf_counter``); ``hook_seconds`` stays 0 (no hook runs).
        hook_calls: The hook calls the hook path would have made (the
            configured call; per arrival the arrival hook, plus a score call
            when an expired score is due; per hit and per store one call,
            an empty one too; per release of cached blocks one score call;
            per allocation a score call when it re-scores expired scores and
            an evicted call when it takes cached blocks), as the simulator's
            compiled replay counts them.
        evictions, evict_calls, evict_seconds: As the runtime's.
        hints_issued, hints_used: 0 (the variant issues no hint).

    Errors: an event raises :class:`~spfcore.runtime.PolicyError` (naming
    the policy and the block) when the driver breaks the event protocol (a
    block released while free, a block named twice in one call, a store into
    a block holding a hash, a hashless release of a block holding one,
    hashes of another length, an arrival of a prompt of full blocks with no
    hashes in its view) and, unlike the hooks, for a hit on, or a cached
    release of, a block the runtime never heard stored (vLLM caches those
    after a prefix-cache reset with requests in flight): nothing of that
    event is applied, so the adapter fails open. ``touch`` raises
    ``KeyError`` for a block that is not free and cached, ``evict``
    ``ValueError`` when ``n < 0`` or fewer than ``n`` blocks are free, as the
    runtime does.
    """

    wants_prompt_hashes = True

    def __init__(self, num_blocks: int, block_size: int, *, policy, pin_cap: int = 0,
                 policy_name: str = "spf_expected_utility", key_ids: int | None = None) -> None:
        from spfcore.evictor import prepare_numba

        prepare_numba()
        from spfcore.engine import _spf_nb as nb
        from spfcore.sim import _replay_spf_nb as rs

        self.nb, self.rs = nb, rs
        self.num_blocks, self.block_size, self.policy_name = num_blocks, block_size, policy_name
        nk = key_ids or 2 * num_blocks + int(policy.ghost_cap) + 1024
        self.st = st = rs.new_state(num_blocks, (policy, pin_cap), nk)
        st["c"][nb.HSN] = 0  # nothing free: the driver releases the free blocks first
        st["c"][nb.HOOK_CALLS] = 1  # spfcore_cache_configured, as the runtime counts it at construction
        nblk = st["ib"].shape[1]
        i64 = np.int64
        self.KW, self.fk, self.live = np.zeros((nk, 4), i64), np.zeros(nk, i64), np.zeros(nk, i64)
        self.T = np.zeros((self._table_rows(nk), 2), i64)
        self.ic = np.zeros(nb.NIC, i64)
        self.hf, self.mk = np.zeros(nblk, i64), np.zeros(nblk, i64)
        self.out = np.zeros(max(num_blocks, 1), i64)
        self.policy_seconds = self.evict_seconds = 0.0
        self._hash_bytes = 0
        self._empty = np.zeros(0, i64)
        self._pw_top = 0
        self._t_top = -1  # the largest arrival index so far
        self._bind()
        _warm_spf(self)

    @staticmethod
    def _table_rows(nk: int) -> int:
        s = 1
        while s < 2 * nk:
            s *= 2
        return s

    def _bind(self) -> None:
        """The kernels' argument tuples, anew after an array grew."""
        st = self.st
        self.c, self.pc, self.ec = st["c"], st["pc"], st["ec"]
        nb = self.nb
        self._S = tuple(st[a] for a in self.rs._ARGS)
        self._H, self._O, self._D, self._R, self._E = (tuple(st[a] for a in names)
                                                       for names in (nb.HIT, nb.TOUCH, nb.STORED, nb.RELEASE, nb.EVICT))
        self._iargs = (self.KW, self.T, self.fk, self.ic, self.live, st["kr"], st["kh"], st["kt"])

    def _room_keys(self, m: int) -> None:
        """Free key ids for ``m`` more hashes: a sweep of the ids the state
        names no more; the arrays double (the table rebuilt) when fewer than
        a quarter of them and ``m`` are free after it."""
        nb, st, ic = self.nb, self.st, self.ic
        nb.sweep(self.KW, self.T, self.fk, ic, self.live, st["kr"], st["kh"], st["key_of"], st["par_of"],
                 int(self.pc[self.rs.T]))
        k = len(self.KW)
        if ic[nb.NFREE] + k - ic[nb.NEXTID] >= m + k // 4:
            return
        new = max(2 * k, k + 2 * m)
        self.rs.grow(st, new)
        new = len(st["kh"])
        i64 = np.int64
        kw = np.zeros((new, 4), i64)
        kw[:k] = self.KW
        live = np.zeros(new, i64)
        live[:k] = self.live
        self.KW, self.live = kw, live
        fk = np.zeros(new, i64)
        fk[:k] = self.fk
        self.fk = fk
        self.T = np.zeros((self._table_rows(new), 2), i64)
        nb.rehash(self.KW, self.T, self.live, int(ic[nb.NEXTID]))
        self._bind()

    def _room_slots(self, m: int) -> None:
        self.rs._grow_slots(self.st, m)
        self._bind()

    # ------------------------------------------------------------ counters
    @property
    def evict_calls(self) -> int:
        """``evict`` calls so far."""
        return int(self.c[self.rs.EVICT_CALLS])

    # ------------------------------------------------------------ events
    def arrived(self, request: RequestView, now: float) -> tuple:
        """A request arrived (arrival ``request.arrival_index``, prompt hashes
        ``request.block_keys``): the arrival hook (a table rebuild every
        ``period`` arrivals, the request's kind), then expired scores
        re-scored. Returns no prefetch hint.

        Raises:
            PolicyError: a prompt of full blocks without hashes in the view
                (an adapter that does not hand them), hashes of another
                length (nothing applied).
        """
        t0 = _perf()
        try:
            keys = request.block_keys
            if keys:
                w = _hash_words(self, keys, "arrival with")
            elif request.num_prompt_tokens >= self.block_size:
                raise self._bad(f"request {request.request_id!r} arrived with {request.num_prompt_tokens} prompt tokens "
                                "and no block hashes in its view: this runtime needs them (wants_prompt_hashes)")
            else:
                w = np.zeros((0, 4), np.int64)
            epoch = int(self.pc[self.rs.EPOCH])
            if epoch + 2 >= self._pw_top:  # decay ** k for the epochs ahead (Python's pow, as the plugin's)
                self._pw_top = epoch + 64
                self.rs._pw(self.st, self._pw_top)
                self._bind()
            t = request.arrival_index
            if t <= self._t_top:  # an index seen before (indices repeat or go back): its older prompt's stamps
                mark = self.st["kr"][:, self.rs.MARK]  # (t + 1) are no longer the latest prompt's
                mark[mark == t + 1] = 0
            self._t_top = max(self._t_top, t)
            while (r := self.nb.arrived(w, t, float(now), self._S, self._iargs)) == self.nb.NEED_KEYS:
                self._room_keys(len(w))
            if r:
                raise self._bad("the evictor lacked room (a bug)")
            return ()
        finally:
            self.policy_seconds += _perf() - t0

    def hit(self, request: RequestView, ids: Sequence[int], now: float) -> None:
        """The lookup hit blocks ``ids`` (depth order): their hashes'
        records re-accessed (or made).

        Raises:
            PolicyError: a block named twice, or one the runtime never heard
                stored (nothing applied).
        """
        t0 = _perf()
        try:
            a = _ids(ids) if len(ids) else self._empty
            while True:
                r = self.nb.hit(a, self._H, self.mk, self.ic)
                if r != self.nb.NEED_SLOTS:
                    break
                self._room_slots(2 * len(a) + 2)
            if r == self.nb.NO_KEY:
                raise self._bad("hit a block it never heard stored (after a prefix-cache reset?)")
            if r:
                raise self._bad(f"hit block {int(a[-1 - r])} twice (or outside the pool)")
        finally:
            self.policy_seconds += _perf() - t0

    def stored(self, request: RequestView, ids: Sequence[int], keys: Sequence[bytes], first_depth: int,
               parent, num_tokens: int, now: float) -> None:
        """Blocks ``ids`` were cached with vLLM block hashes ``keys`` at depths
        ``first_depth ..``, the first one's parent hash ``parent`` (``None``:
        none); ``num_tokens`` is not read.

        Raises:
            PolicyError: a hash of another length, a block holding a hash
                already or named twice (nothing applied).
        """
        t0 = _perf()
        try:
            n = len(ids)
            if n != len(keys):
                raise self._bad(f"stored {n} blocks with {len(keys)} hashes")
            if not n:
                self.c[self.nb.HOOK_CALLS] += 1  # (the hook path calls spfcore_blocks_stored on an empty store too)
                return
            w = _hash_words(self, keys if parent is None else [parent, *keys], "stored with")
            a = _ids(ids)
            while True:
                r = self.nb.stored(a, w, parent is not None, int(first_depth), self._D, self.mk, self._iargs)
                if r == self.nb.NEED_SLOTS:
                    self._room_slots(2 * n + 2)
                elif r == self.nb.NEED_KEYS:
                    self._room_keys(len(w))
                else:
                    break
            if r:
                raise self._bad(f"stored block {int(a[-1 - r])}: holds a block hash already, or named twice "
                                "(or outside the pool)")
        finally:
            self.policy_seconds += _perf() - t0

    def release(self, cached_ids: Sequence[int], hashless_ids: Sequence[int], now: float) -> None:
        """Blocks whose ref count reached 0: cached ones scored (one call) into
        the order with new release orders, hashless ones on top of the stack.

        Raises:
            PolicyError: a block free already or named twice, a hashless one
                holding a hash, a cached one the runtime never heard stored
                (nothing applied).
        """
        t0 = _perf()
        try:
            ca = _ids(cached_ids) if len(cached_ids) else self._empty
            ha = _ids(hashless_ids) if len(hashless_ids) else self._empty
            r = self.nb.release(ca, ha, self._R, self.hf, self.mk, self.ic)
            if r == self.nb.ORDERS:  # (after 2**39 releases) the free blocks' orders from 1, their order kept
                self.nb.renumber(self._O)
                r = self.nb.release(ca, ha, self._R, self.hf, self.mk, self.ic)
            if r == self.nb.NO_KEY:
                raise self._bad("released a cached block it never heard stored (after a prefix-cache reset?)")
            if r == self.nb.ORDERS:
                raise self._bad(f"release orders exhausted ({self.rs.MAX_ORDER})")
            if r == self.nb.BUG:
                raise self._bad("the evictor lacked room (a bug)")
            if r:
                j = -1 - r
                b = int(ca[j]) if j < len(ca) else int(ha[j - len(ca)])
                raise self._bad(f"released block {b}: free already, named twice, hashless with a hash, or outside "
                                "the pool")
        finally:
            self.policy_seconds += _perf() - t0

    def evict(self, n: int, now: float) -> list[int]:
        """Take ``n`` free blocks for an allocation (hashless first, then the
        lowest ``(index value, release order)``).

        Raises:
            ValueError: if ``n < 0`` or fewer than ``n`` blocks are free.
        """
        t0 = _perf()
        try:
            if n < 0:
                raise ValueError(f"evict({n}): a negative number of blocks")
            r = self.nb.evict(n, self.out, float(now), self._E, self.hf)
            if r == self.nb.TOO_FEW:
                raise ValueError(f"No free blocks available: asked for {n}, {self.num_free} free")
            if r:
                raise self._bad("the evictor or the ghost list lacked room (a bug)")
            return self.out[:n].tolist()
        finally:
            self.policy_seconds += (dt := _perf() - t0)
            self.evict_seconds += dt

    def touch(self, ids: Sequence[int]) -> None:
        """Hit blocks that were free leave the order.

        Raises:
            KeyError: a block is not a free cached block, or named twice (nothing applied).
        """
        t0 = _perf()
        try:
            a = _ids(list(ids))
            r = self.nb.touch(a, self._O, self.mk, self.ic)
            if r:
                raise KeyError(int(a[-1 - r]))
        finally:
            self.policy_seconds += _perf() - t0

    # ------------------------------------------------------------ queries
    @property
    def num_free(self) -> int:
        """Free blocks now (hashless and cached), blocks."""
        return int(self.c[self.nb.HSN] + self.ec[self.nb.ev.LIVE])

    def free_ids(self) -> list[int]:
        """Every free block id: hashless first (the next one handed out
        first), then cached in no fixed order."""
        st = self.st
        return st["hs"][: self.c[self.nb.HSN]][::-1].tolist() + np.flatnonzero(st["ib"][self.nb.ev.IN]).tolist()

    def is_free(self, block_id: int) -> bool:
        """Whether physical block ``block_id`` is free."""
        return bool(self.st["ib"][self.nb.ev.IN, block_id] or self.hf[block_id])


_SPF_WARM = []


def _warm_spf(rt: SpfKernelRuntime) -> None:
    """Compile :mod:`spfcore.engine._spf_nb`'s kernels (or load numba's
    on-disk cache) once per process, on a tiny runtime of its own with the
    argument types ``rt``'s events pass (``rt`` is not changed)."""
    if _SPF_WARM:
        return
    _SPF_WARM.append(True)
    from spfcore_spf_expected_utility.utility import UtilityPolicy

    pol = UtilityPolicy()
    pol.spfcore_cache_configured(num_blocks=8, block_size=rt.block_size)
    w = SpfKernelRuntime(8, rt.block_size, policy=pol, pin_cap=4)
    bs = w.block_size
    w.release([], [1, 2, 3, 4], 0.0)
    h = [bytes([i + 1]) * HASH_BYTES for i in range(2)]
    view = RequestView("warm", None, 0, 0.0, 2 * bs, tuple(h))
    w.arrived(view, 0.0)
    got = w.evict(2, 0.0)
    w.hit(view, [], 0.0)
    w.stored(view, got[:1], h[:1], 0, None, bs, 0.0)
    w.stored(view, got[1:2], h[1:2], 1, h[0], bs, 0.0)
    w.release(got[::-1], [], 0.0)
    w.touch(got[:1])
    w.hit(view, got[:1], 0.0)
    w.arrived(RequestView("warm2", None, 1, 0.0, 0, ()), 0.0)
    w.evict(3, 0.0)
    w._room_keys(1)
    w.nb.renumber(w._O)  # (not in the hot path the first time it is needed)


#: (module, qualname) of a shipped policy class -> the builder of its compiled
#: runtime, ``build(rt, policy_instance) -> runtime | None`` (``None``: the
#: hooks serve, e.g. for parameters the kernels do not take).
STANDINS = {
    ("spfcore_frequency", "FrequencyPolicy"): _frequency,
    ("spfcore_session_ttl", "SessionTTLPolicy"): _session_ttl,
    ("spfcore_belady_oracle", "BeladyOraclePolicy"): _belady,
    ("spfcore_spf_expected_utility", "ExpectedUtilityPolicy"): _spf,
}
