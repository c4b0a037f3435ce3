"""The hook contract between spfcore and policy plugins (pluggy project "spfcore").

One contract serves both drivers: the trace-driven simulator
(:mod:`spfcore.sim`) and the vLLM adapter (:mod:`spfcore.engine.vllm_adapter`).
Both call hooks through :class:`spfcore.runtime.PolicyRuntime`, so a policy makes
the same decisions on the same event stream wherever it runs.

Rules for policies:

* Policies are deterministic functions of the events they are shown. They read
  time only from the ``now`` argument (seconds; engine: ``time.monotonic()``,
  simulator: the workload's virtual clock) or from ``RequestView.arrival_index``.
* Hooks are called in batches (per request, per release, per allocation), never
  once per block on a hot path. ``blocks`` arguments are a
  :class:`~spfcore.views.BlockBatch`; ``request`` is a
  :class:`~spfcore.views.RequestView`.

Two forms, one contract:

* **Batch form** (fast; every shipped policy): read columns of the batch
  (``blocks.keys`` a list of block hashes; numpy arrays ``blocks.depth``,
  ``.access_count``, ``.last_access``, ``.stored_at``, ``.session``,
  ``.num_tokens``, ``.parent_index``, ``.ids``) and answer with arrays: a numpy
  float array of scores or a :class:`~spfcore.views.Scores` (values, expiries
  and pins as arrays or scalars), a numpy bool array for admission. A release
  of 520 blocks is scored with a few numpy operations and no per-block
  Python object. A policy reading only ``keys``, ``ids`` and ``len`` may
  declare the capability ``keys-only`` (contract 1.3): the runtime then keeps
  no other column, and the batch refuses to hand one out. A policy reading
  only those and ``depth``, ``parents``, ``parent_index`` (and
  ``blocks.table``'s ``key``, ``parent``, ``depth``) may declare
  ``chain-only`` (contract 1.4): the runtime keeps keys, parents and depths
  alone (no request id, session, token count, access count or time is
  written per block on a store or hit), and the batch refuses the rest.
* **Per-block form** (convenient, slower): iterate ``blocks`` to get frozen
  :class:`~spfcore.views.BlockView` objects (built on demand, about a
  microsecond each; nothing is built for policies that do not iterate) and
  answer with lists of ``float`` / :class:`~spfcore.views.Score` / ``bool``.

Two ways to decide evictions:

* **Scored** (the default; every shipped arm but the classic ones): the
  policy scores blocks as they become evictable
  (:func:`spfcore_score_blocks`, :func:`spfcore_admit_blocks`, optionally a
  re-ranking by :func:`spfcore_choose_victims`) and the evictor keeps the order.
* **Policy-ordered** (:func:`spfcore_evict_blocks`): the policy keeps its own
  order and names the victims at each allocation, as libCacheSim's ``evict``
  does; for orders a score cannot express (ARC's adaptive target, S3-FIFO's
  queues, LIRS's stack; the ``spfcore-classic`` plugins). A policy uses one
  mode, never both.

Tests can call hooks directly with ``BlockBatch.of([BlockView(...), ...])``.
* A policy is a class registered under the entry-point group
  ``spfcore.policies``; see :mod:`spfcore.registry`. If its ``Params`` has a
  field ``pin_cap_fraction`` (share of the pool, 0..1), the evictor uses it
  as the cap on pinned free blocks (default 0.5).

Observation hooks are called on every registered plugin. Decision hooks
(score, admit, choose victims, evict blocks, prefetch, tier admit, tier score) are ``firstresult``: the run's single
selected policy answers, and ``None`` means "use the default".
"""

from __future__ import annotations

import pluggy

PROJECT = "spfcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# ------------------------------------------------------------------ setup


@hookspec
def spfcore_cache_configured(num_blocks, block_size):
    """The cache the policy will manage. Called once when a run's
    PolicyRuntime is built (and after each cache reset).

    Args:
        num_blocks: Blocks in the pool (vLLM ``num_gpu_blocks``, null block included).
        block_size: Tokens per block.
    """


# ------------------------------------------------------------------ future


@hookspec
def spfcore_future_requests(requests):
    """Give the whole future request stream to policies that declare
    ``needs-future`` (the Belady oracle). Called once by the runner before the
    first arrival of a run (and again after each cache reset).

    Args:
        requests: Iterable[RequestView] in arrival order, to be consumed once
            (the simulator streams it from the trace); ``arrival_index``
            equals the position in the stream. Keep only what is needed
            (the oracle's index is linear in block references by nature).
    """


# -------------------------------------------------------------- observation


@hookspec
def spfcore_request_arrived(request, now):
    """A request arrived, before its prefix-cache lookup.

    Called by the simulator when a request is admitted to the cache model, by
    the adapter from ``Scheduler.add_request``. One call per request.

    Args:
        request: RequestView.
        now: seconds.
    """


@hookspec
def spfcore_blocks_hit(request, blocks, now):
    """The request's prefix-cache lookup hit these blocks (a contiguous chain
    from depth 0). Called once per request right after the lookup, also with
    an empty sequence on a miss.

    Args:
        request: RequestView.
        blocks: BlockBatch, depth 0..k-1 in order; access counts
            already include this hit.
        now: seconds.
    """


@hookspec
def spfcore_blocks_stored(request, blocks, now):
    """The request computed and cached these new full blocks (prompt or
    decode). Called once per scheduling step that fills blocks, in chain order.

    Args:
        request: RequestView.
        blocks: BlockBatch; ``access_count`` is 1.
        now: seconds.
    """


@hookspec
def spfcore_request_finished(request, now):
    """The request finished; its blocks are released (tail first) right
    after this call.

    Args:
        request: RequestView.
        now: seconds.
    """


@hookspec
def spfcore_blocks_evicted(keys, now):
    """These cached blocks were evicted (their block hashes dropped from the
    prefix cache) to make room for an allocation. One call per allocation.

    Args:
        keys: Sequence of block hashes, in eviction order.
        now: seconds.
    """


# ----------------------------------------------------------------- decisions


@hookspec(firstresult=True)
def spfcore_score_blocks(blocks, now):
    """Retention priority of blocks that become evictable (ref count reaches
    0) or whose previous score expired. Lowest is evicted first.

    Called by the evictor once per release batch (a finished request's blocks,
    tail first) and once per batch of expired scores before victims are chosen.

    Args:
        blocks: BlockBatch.
        now: seconds.

    Returns:
        One of: a :class:`~spfcore.views.Scores` (batch form: values and
        optional expiries and pins, arrays of ``len(blocks)`` or scalars); a
        numpy array of ``len(blocks)`` real values; a sequence of the same
        length of ``float`` or :class:`~spfcore.views.Score` (per-block form);
        or ``None`` for vLLM's order (release order: least recently released
        first). NaN, non-real values, a wrong length or a pin without an
        expiry raise :class:`spfcore.runtime.PolicyError`.
    """


@hookspec(firstresult=True)
def spfcore_admit_blocks(blocks, now):
    """Whether blocks that become evictable are retained. A block that is not
    admitted stays cached but is evicted before any admitted block (among
    themselves, lowest score first). Called with the same batches as
    :func:`spfcore_score_blocks`, before it.

    Args:
        blocks: BlockBatch.
        now: seconds.

    Returns:
        A numpy bool array or a sequence of ``bool`` of ``len(blocks)``, or
        ``None`` to admit all.
    """


@hookspec(firstresult=True)
def spfcore_choose_victims(candidates, n, now):
    """Retention override: choose ``n`` victims among the lowest-ranked
    evictable blocks. Called once per allocation that evicts cached blocks,
    only if a policy implements it.

    Args:
        candidates: BlockBatch, the ``min(len, 4 * n)`` lowest-ranked
            evictable cached blocks, lowest first.
        n: blocks to evict (1 <= n <= len(candidates)).
        now: seconds.

    Returns:
        ``n`` distinct indices into ``candidates`` (a sequence of ``int`` or an
        integer numpy array), or ``None`` for the first ``n``.
    """


@hookspec(firstresult=True)
def spfcore_evict_blocks(n, free, now):
    """Policy-ordered mode: the policy keeps its own eviction order and names
    the victims, as libCacheSim's ``evict`` does (ARC's adaptive target,
    S3-FIFO's queues, LIRS's stack: orders a score cannot express).

    A policy that implements this hook runs in policy-ordered mode: the
    evictor keeps no order of its own and never calls
    :func:`spfcore_score_blocks`, :func:`spfcore_admit_blocks` or
    :func:`spfcore_choose_victims` (a policy implementing one of them as well
    is refused when it is loaded), and prefetch hints pin nothing. The policy
    learns what is cached from :func:`spfcore_blocks_stored` (physical ids in
    ``blocks.ids``), :func:`spfcore_blocks_hit` and its own answers here, and
    must keep its order itself. Hashless free blocks are still reused first;
    this hook is called once per allocation that needs cached victims, in
    the simulator and in the engine alike (both allocate through
    :meth:`spfcore.runtime.PolicyRuntime.evict`).

    :func:`spfcore_choose_victims` is a different thing: a re-ranking of the
    ``4 * n`` lowest blocks of the score order, for policies that score.

    Args:
        n: Cached blocks to evict (1 <= n <= ``len(free)``).
        free: Read-only set of the physical ids of the free cached blocks
            (ref count 0): ``i in free`` (O(1)) and ``len(free)``. Only these
            may be named; a block a request holds is not in it.
        now: seconds.

    Returns:
        ``n`` distinct physical block ids, each in ``free``, in eviction
        order (a sequence of ``int`` or an integer numpy array). Anything
        else raises :class:`spfcore.runtime.PolicyError`. Prefix-aware
        policies name a chain's tail before its head (a block whose child is
        cached can never be hit through the child once it is gone).
    """


@hookspec(firstresult=True)
def spfcore_rescore_keys(request, now):
    """Blocks whose retention priority changed because of this arrival (e.g.
    the blocks of a session that just became active again). Called once per
    arrival, after :func:`spfcore_request_arrived`; the resident free blocks
    among them are re-scored at once in one :func:`spfcore_score_blocks` call.

    Args:
        request: RequestView that just arrived.
        now: seconds.

    Returns:
        Sequence of block hashes, or ``None``.
    """


@hookspec(firstresult=True)
def spfcore_prefetch_hints(request, now):
    """Blocks to protect or promote ahead of a predicted request. Called once
    per arrival, after :func:`spfcore_request_arrived`.

    Resident free blocks named by a hint are pinned (subject to the pin cap)
    until the hint expires; a hint counts as *used* if one of its blocks is hit
    before it expires, else as *wasted*. With a slower tier (see
    :func:`spfcore_tier_admit`), hinted blocks that are in the tier but not on
    the GPU are promoted (loaded to the GPU and pinned) now, in chain order
    while each block's parent is on the GPU; the bytes moved are counted.

    Args:
        request: RequestView that just arrived.
        now: seconds.

    Returns:
        Sequence[:class:`~spfcore.views.Hint`] or ``None``.
    """


# ------------------------------------------------------- slower tier (1.2)
#
# A slower KV tier (CPU memory) behind the GPU prefix cache: vLLM's KV
# offloading connector (``vllm/v1/kv_offload/``), LMCache, SGLang HiCache. The
# tier is *write-through*, as vLLM's ``OffloadingConnector`` is: each newly
# computed full prompt block is offered to the tier when it is computed
# (``OffloadingManager.prepare_store``), so a block evicted from the GPU
# stays in the tier. A lookup that misses the GPU continues in the tier
# (consecutive blocks from the GPU hit, ``OffloadingManager.lookup``); those
# blocks are loaded instead of recomputed. A tier that is full evicts its
# lowest-ranked free chunk (``CachePolicy.evict``). Prefetch hints
# (:func:`spfcore_prefetch_hints`) whose blocks are in the tier but not on the
# GPU are *promoted* (loaded to the GPU) at the hint, ahead of the predicted
# request. Without a tier these two hooks are never called.


@hookspec(firstresult=True)
def spfcore_tier_admit(request, keys, now):
    """Which newly computed blocks the slower tier keeps (vLLM: the keys the
    offloading manager's ``prepare_store`` is offered). Called once per
    request that computes new full prompt blocks, in chain order; blocks
    already in the tier are not offered again.

    Args:
        request: RequestView of the request that computed them.
        keys: Sequence of block hashes, chain order.
        now: seconds.

    Returns:
        A numpy bool array or a sequence of ``bool`` of ``len(keys)``, or
        ``None`` to admit all (vLLM's default). A block not admitted is not
        copied to the tier (no bytes move). Anything else raises
        :class:`spfcore.runtime.PolicyError`.
    """


@hookspec(firstresult=True)
def spfcore_tier_score(request, keys, now):
    """Retention priority of blocks in the slower tier; lowest is evicted
    from the tier first. Called once per request that used the tier, at its
    end (vLLM: ``CachePolicy.on_request_finished``, which vLLM signals in the
    next request's first scheduler step), with the request's tier blocks:
    loaded, offered and already there, or offered and admitted. Blocks
    entering the tier rank by arrival until then (vLLM: ``insert``).

    Args:
        request: RequestView of the request that used them.
        keys: Sequence of block hashes, chain order (some may have been
            evicted from the tier since; their values are ignored).
        now: seconds.

    Returns:
        A numpy array or sequence of ``len(keys)`` real numbers (not NaN), or
        ``None`` for vLLM's ``LRUCachePolicy`` order (least recently stored or
        reused first; a reused chain's head counts as the most recent). Ties
        go to the least recently scored block.
    """


#: Names of every hook in this contract, in definition order (derived, never listed by hand).
HOOK_NAMES: tuple[str, ...] = tuple(n for n, f in list(globals().items())
                                    if n.startswith("spfcore_") and callable(f))
