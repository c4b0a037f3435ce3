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
    monitored, no hook budget, and with parameters its builder takes (each
    builder's docstring says which).

    Args:
        rt: A fresh runtime of the configured policy (its
            ``spfcore_cache_configured`` already called).
    """
    from spfcore.runtime import _PLAIN_EXEC

    if rt.hook_budget_s is not None or getattr(rt.pm, "_inner_hookexec", None) is not _PLAIN_EXEC:
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
    return ids if isinstance(ids, np.ndarray) else np.array(ids, np.int64)


class FrequencyKernelRuntime:
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
    a block holding a hash, hashes of another length); nothing of that event
    is applied, so the adapter fails open. ``touch`` raises ``KeyError`` for
    a block that is not free and cached, ``evict`` ``ValueError`` when
    ``n < 0`` or fewer than ``n`` blocks are free, as the runtime does. What
    the hook path accepts the same way is accepted: a hit on, or a cached
    release of, a block the runtime never heard stored (after a prefix-cache
    reset with requests in flight) counts under one "no key" key, as the
    hooks count the key ``None``.
    """

    wants_block_hashes = True
    #: The adapter may hand ``release`` int64 id arrays (``_ids`` takes them as they are).
    id_arrays = True
    needs_future = False
    vllm_order = False
    hints_issued = hints_used = 0
    hook_seconds = 0.0

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

    # ------------------------------------------------------------ counters
    @property
    def evictions(self) -> int:
        """Cached victims so far."""
        return int(self.c[self.nb.EVICTIONS])

    @property
    def evict_calls(self) -> int:
        """Allocations (``evict`` calls that took blocks) so far."""
        return int(self.c[self.nb.EVICT_CALLS])

    @property
    def hook_calls(self) -> int:
        return int(self.c[self.nb.HOOK_CALLS])

    def stats(self) -> dict:
        """:meth:`PolicyRuntime.stats <spfcore.runtime.PolicyRuntime.stats>`'s counters."""
        return {"hook_seconds": 0.0, "hook_calls": self.hook_calls, "policy_seconds": self.policy_seconds,
                "evictions": self.evictions, "evict_seconds": self.evict_seconds, "evict_calls": self.evict_calls,
                "hints_issued": 0, "hints_used": 0, "pins_refused": 0}

    def _bad(self, what: str) -> PolicyError:
        return PolicyError(f"policy {self.policy_name!r} (compiled runtime): {what}", policy=self.policy_name)

    # ------------------------------------------------------------ events
    def arrived(self, request: RequestView, now: float) -> tuple:
        """A request arrived: nothing to decide (frequency has no arrival
        hook and no expiring score). Returns no prefetch hint."""
        return ()

    def hit(self, request: RequestView, ids: Sequence[int], now: float) -> None:
        """The lookup hit blocks ``ids``: each one's hash counts one more access
        (a block stored before a prefix-cache reset: the hook path's key
        ``None``, see :func:`~spfcore.engine._frequency_nb.hit`)."""
        t0 = _perf()
        try:
            self._k.hit(_ids(ids) if len(ids) else self._empty, *self._hit_args)
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
                already or named twice (nothing applied).
        """
        t0 = _perf()
        try:
            n = len(ids)
            if not n:
                self.c[self.nb.HOOK_CALLS] += 1  # (the hook path calls spfcore_blocks_stored on an empty store too)
                return
            raw = b"".join(keys)
            hb = self._hash_bytes or len(keys[0])
            if hb not in (8, 16, 24, 32) or len(keys[0]) != hb or len(raw) != hb * n or len(keys) != n:
                raise self._bad(f"stored {n} blocks with {len(keys)} hashes of {len(raw)} bytes in all: need one "
                                f"length of 8, 16, 24 or 32 bytes a hash ({self._hash_bytes or 'any'} here)")
            self._hash_bytes = hb
            w = np.frombuffer(raw, np.int64).reshape(n, hb // 8)
            if hb != HASH_BYTES:
                w = np.pad(w, ((0, 0), (0, (HASH_BYTES - hb) // 8)))
            a = _ids(ids)
            r = self._k.stored(a, w, *self._stored_args)
            if r == self._k.E_FULL:
                raise self._bad(f"every key id is live ({len(self.s['fk'])}): the bound does not hold")
            if r:
                raise self._bad(f"stored block {int(a[-1 - r])}: holds a block hash already, or named twice")
        finally:
            self.policy_seconds += _perf() - t0

    def finished(self, request: RequestView, now: float) -> None:
        """The request finished: nothing to do (no finished hook)."""

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
                raise self._bad(f"released block {b}: free already, or named twice")
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
                raise KeyError(int(a[-1 - r]))  # not a free cached block, or named twice
        finally:
            self.policy_seconds += _perf() - t0

    def forget(self, ids: Sequence[int]) -> None:
        """Not supported: a prefix-cache reset starts a fresh runtime.

        Raises:
            NotImplementedError: always."""
        raise NotImplementedError("FrequencyKernelRuntime.forget: start a fresh runtime instead")

    # ------------------------------------------------------------ queries
    @property
    def num_free(self) -> int:
        """Free blocks now (hashless and cached), blocks."""
        c = self.c
        return int(c[self.nb.HSN] + c[self.nb.LRUN])

    def free_ids(self) -> list[int]:
        """Every free block id: hashless first (the next one handed out
        first), then cached in no fixed order."""
        s = self.s
        return s["hs"][: self.c[self.nb.HSN]][::-1].tolist() + np.flatnonzero(s["BL"][:, self.nb.INN]).tolist()

    def is_free(self, block_id: int) -> bool:
        """Whether physical block ``block_id`` is free."""
        row = self.s["BL"][block_id]
        return bool(row[self.nb.INN] or row[self.nb.HFREE])


#: (module, qualname) of a shipped policy class -> the builder of its compiled
#: runtime, ``build(rt, policy_instance) -> runtime | None`` (``None``: the
#: hooks serve, e.g. for parameters the kernels do not take).
STANDINS = {
    ("spfcore_frequency", "FrequencyPolicy"): _frequency,
}
