"""A model of vLLM v1's paged prefix cache, driving a policy through
:class:`~spfcore.runtime.PolicyRuntime`.

What is modelled, and where vLLM 0.32 does it (``vllm/v1/core/``):

* **Pool.** ``num_blocks`` is vLLM's ``num_gpu_blocks``; block 0 is the null
  block (``BlockPool.__init__`` pops it), so ids ``1 .. num_blocks-1`` are
  usable. At start they are all hashless free blocks, id 1 first.
* **Lookup** (``KVCacheManager.get_computed_blocks`` /
  ``FullAttentionManager.find_longest_cache_hit``): the longest chain of cached
  block hashes from block 0, at most ``(prompt_len - 1) // block_size`` blocks
  (the last prompt token is always computed, so a fully cached prompt whose
  length is a multiple of the block size recomputes its whole last block).
  Hit blocks that are free leave the free queue (``BlockPool.touch``); every
  hit raises the block's ref count.
* **Allocation** (``allocate_slots``): a request holds ``cdiv(tokens, block_size)``
  blocks for the tokens whose KV it computes. Prefill needs ``cdiv(P, bs)``
  blocks; decode step ``k`` (``k = 1 .. O-1``, ``O`` output tokens) computes
  position ``P + k - 1``, so a request ends holding ``cdiv(P + O - 1, bs)``
  blocks. The last output token's KV is never computed. A prompt longer
  than the step's token budget (``max_num_batched_tokens``) is allocated
  chunk by chunk, one step each (chunked prefill), in both modes
  (sequential: with ``token_budget`` given).
* **Caching** (``cache_blocks`` -> ``BlockPool.cache_full_blocks``): after a
  step, the full blocks of ``min(computed + new, num_tokens)`` tokens carry a
  hash: ``P // bs`` after prefill, ``(P + k) // bs`` after decode step ``k``,
  ``(P + O - 1) // bs`` at the end. A block that becomes full and whose hash
  is already cached (the last-token case, or two running requests computing
  the same prefix) is cached *as well*: vLLM does not de-duplicate
  (``BlockHashToBlockMap`` keeps several blocks per hash; a lookup returns the
  earliest inserted one still cached; evicting one keeps the others).
* **Decode-block keys** continue the chain: from the workload's output tokens
  when it defines them (``Request.output_token_ids``, e.g. ``multiturn``, so
  the next turn can hit them), else unique content
  :func:`spfcore.keys.decode_key` ``(parent, request_id, depth)``. (The engine generates its
  own output tokens, so there decode blocks never match workload outputs; only
  prompt hits take part in the engine agreement test.)
* **Release** (``SingleTypeKVCacheManager.free`` -> ``BlockPool.free_blocks``):
  a finished request's blocks in reverse order (tail first); blocks whose ref
  count reaches 0 go to the free queue: hashed ones appended (LRU tail),
  hashless ones prepended (reused first).

Streaming: the sequential replay consumes an iterable of per-request plans
(:attr:`Prepared.plans`, or :func:`iter_plans`, which keys one request at a
time), so :func:`simulate_stream` replays a trace read lazily
(:class:`~spfcore.workloads.traces.TraceStream`) with memory bounded by the
cache and the policy's state; :func:`scan` sizes and checks a stream in one
pass without keeping keys. Concurrent mode holds the prepared workload.

Compiled replays: in sequential mode, an arm whose policy implements no hook
(``lru``: vLLM's own order), the shipped ``belady_oracle`` and the shipped
``session_ttl`` in arrivals mode (``ttl_seconds`` unset), the shipped
``frequency`` (any ``min_count``, ``ghost_factor``) and the policy classes of
:data:`KERNELS` (the shipped ``spf_expected_utility``, variant ``utility``,
``count_weight`` 0; the classic plugin's arms) run as one
numba-compiled loop over interned int arrays (:mod:`spfcore.sim._replay_nb`,
:mod:`spfcore.sim._replay_ttl_nb`, :mod:`spfcore.sim._replay_freq_nb`, each
:data:`KERNELS` module): the same decisions, per-request records
and counters as the reference loop :func:`_run_sequential` through the
policy's hooks (tests compare every field and the victim sequence), 6-20x
faster (CPU seconds, Mooncake trace: see results/sim-speed-compiled,
results/sim-speed-session-ttl-compiled, results/sim-speed-frequency-compiled
and results/sim-speed-spf-compiled); the interned keys are kept on the
:class:`Prepared`. ``SPFCORE_SIM_REPLAY=python`` (:data:`REPLAY_ENV`) runs the
reference loop instead. Their cells' ``policy_seconds`` and ``evict_seconds``
are the compiled loop's whole time, and ``hook_seconds`` stays the policy's
construction (its hooks are not called).

Time: sequential mode uses a virtual clock of one second per request
(``now = arrival index``); policies should decide by arrival index anyway.

Concurrent mode (continuous batching, a model of vLLM's ``Scheduler.schedule``
with the FCFS policy, vLLM 0.24 and 0.32 alike): steps on a virtual clock. A
step that schedules ``n`` tokens lasts ``step_overhead_s + n * per_token_s``
seconds (:func:`spfcore.sim.calibrate.fit_timing` fits both on an engine
run). Requests enter the waiting queue at ``arrival_s`` (``runtime.arrived``
then). In each step the running requests are served first, in admission
order: each gets ``min(num_tokens - computed, budget)`` tokens (a prefill
chunk, or 1 decode token), with ``num_tokens`` = prompt + outputs so far.
Then, unless a request was preempted in this step (vLLM admits none then),
waiting requests are admitted FIFO while fewer than ``max_running``
(``max_num_seqs``) run and budget (``max_num_batched_tokens``) is left; a
request is admitted only if its *whole* sequence fits in the free blocks
(vLLM's ``scheduler_reserve_full_isl``, on by default), counting its free
hit blocks; else it and those behind it wait. A running request that needs
a block when none is free preempts the most recently admitted running
request (``running.pop()``); if that is itself, no further running request
is scheduled in this step. A preempted request's blocks are released tail
first (no ``finished`` event); it goes back to the front of the waiting
queue, keeps its outputs so far and recomputes prompt + outputs from its
prefix-cache hit (vLLM's recompute preemption). A step ending a request's
prefill (``computed == num_tokens``) samples one output token. A request's
cached tokens are those of its first admission (vLLM ``num_cached_tokens``),
and so is the policy's one ``hit`` event (:mod:`spfcore.engine.vllm_adapter`
reports a request's lookup once; admitted again after a preemption, it takes
its cached blocks without one).
Blocks are hashed when scheduled, as vLLM's ``allocate_slots`` ->
``cache_blocks`` does: the full blocks of ``computed + new`` tokens. Per
request: TTFT = end of the step that samples its first token - ``arrival_s``;
queue = first admission - ``arrival_s``; e2e = end of its last step -
``arrival_s``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import time
from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from functools import partial
from itertools import chain, compress, islice, takewhile
from operator import is_not

import attrs
import numpy as np

from spfcore.hookspecs import HOOK_NAMES
from spfcore.keys import chain_keys, decode_key
from spfcore.run.cell import SimRecord
from spfcore.sim.prepared import PreparedStream
from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView, gather
from spfcore.workloads.model import Workload, block_keys, request_view


@attrs.frozen
class Prepared:
    """A workload with everything the simulator needs precomputed, once per
    block size (keys are the expensive part).

    Attributes:
        workload: The source workload.
        block_size: Tokens per block.
        views: RequestView per request (arrival_time = arrival index, s).
        full_keys: Per request, the block hashes of the prompt's full blocks.
        decode_keys: Per request, keys of the blocks that become full during
            decode (depths ``P // bs .. (P + O - 1) // bs - 1``).
        prompt_tokens, output_tokens: Per request, tokens.
        plans: Per request ``(view, lookup_keys, full_keys, decode_keys,
            prompt_blocks, total_blocks, arrival_s)``: ``lookup_keys`` = the
            first ``min(F, (P - 1) // bs)`` full keys (the last-token rule),
            ``prompt_blocks = cdiv(P, bs)``, ``total_blocks = cdiv(P + O - 1, bs)``,
            ``arrival_s`` the request's own arrival time (s). The sequential
            replay consumes any iterable of such plans (:func:`iter_plans`
            yields them one request at a time).
    """

    workload: Workload
    block_size: int
    views: tuple
    full_keys: tuple
    decode_keys: tuple
    prompt_tokens: tuple
    output_tokens: tuple
    plans: tuple
    #: The compiled replay's interned arrays of these plans, built on first use.
    _flat: list = attrs.field(factory=list, init=False, eq=False, repr=False)
    #: :meth:`_needs`' array, built on first use.
    _need: list = attrs.field(factory=list, init=False, eq=False, repr=False)
    #: :meth:`_records`' templates, one dict per request (~0.3 KB each), built on first use.
    _rec: list = attrs.field(factory=list, init=False, eq=False, repr=False)

    @property
    def blocks_needed(self) -> list[int]:
        """Per request, blocks held at the end: ``cdiv(P + O - 1, bs)``."""
        return self._needs().tolist()

    def _needs(self) -> np.ndarray:
        """:attr:`blocks_needed` as an int64 array, shape ``(requests,)``,
        blocks (each plan's ``total_blocks``); computed once and kept (read-only)."""
        if not self._need:
            need = np.fromiter((pl[5] for pl in self.plans), np.int64, len(self.plans))
            need.flags.writeable = False
            self._need.append(need)
        return self._need[0]

    def _records(self, hits: np.ndarray) -> list[dict]:
        """The per-request records of a sequential replay (a cell's
        ``requests``, as :func:`_cell` builds them from rows): per request
        ``{request_id, session_id, prefix_group, arrival_s, prompt_tokens,
        cached_tokens}``, ``cached_tokens = hits[i] * block_size`` (``hits``:
        hit blocks per request, int array of shape ``(requests,)``).
        Each record is a fresh copy of a template kept on the Prepared (the
        five fields the replay does not change, and a placeholder for the
        sixth, so that setting it keeps the key order and never resizes)."""
        if not self._rec:
            self._rec.append([{"request_id": v.request_id, "session_id": v.session_id,
                               "prefix_group": v.prefix_group, "arrival_s": pl[6],
                               "prompt_tokens": v.num_prompt_tokens, "cached_tokens": 0}
                              for pl in self.plans for v in (pl[0],)])
        recs = [t.copy() for t in self._rec[0]]
        for d, c in zip(recs, (hits * self.block_size).tolist(), strict=True):
            d["cached_tokens"] = c
        return recs


def _plan(r, i: int, block_size: int) -> tuple:
    """The replay plan of request ``r`` at arrival index ``i`` (see
    :attr:`Prepared.plans`), keys computed here.

    Raises:
        ValueError: keys not computable at this block size, no prompt or
            output token, or ``output_token_ids`` given but fewer than the
            ``output_tokens - 1`` the decode blocks are keyed from.
    """
    keys = block_keys(r, block_size)
    p, o = r.num_prompt_tokens, r.output_tokens
    if p < 1 or o < 1:
        raise ValueError(f"request {r.request_id}: needs >= 1 prompt and output token (got {p}, {o})")
    if r.output_token_ids and len(r.output_token_ids) < o - 1:  # (else fewer decode keys than decode blocks)
        raise ValueError(f"request {r.request_id}: {len(r.output_token_ids)} output_token_ids for "
                         f"output_tokens = {o} (need >= {o - 1}, or none)")
    f = min(len(keys), p // block_size)
    nf = (p + o - 1) // block_size
    if r.output_token_ids and r.prompt_token_ids:
        toks = r.prompt_token_ids + r.output_token_ids[: o - 1]
        dec = chain_keys(toks[f * block_size: nf * block_size], block_size, keys[f - 1] if f else None)
    else:
        dec, parent = [], keys[f - 1] if f else None
        for d in range(f, nf):
            parent = decode_key(parent, r.request_id, d)
            dec.append(parent)
    view = RequestView(r.request_id, r.session_id, i, float(i), p, keys, r.prefix_group)
    fk = keys[:f]
    return (view, fk[: min(f, (p - 1) // block_size)], fk, tuple(dec), -(-p // block_size),
            -(-(p + o - 1) // block_size), r.arrival_s)


def prepare(workload: Workload | Prepared, block_size: int) -> Prepared:
    """Precompute keys and views of ``workload`` at ``block_size`` (no-op for
    a :class:`Prepared` of the same block size). Memory: every request's keys
    at once; :func:`iter_plans` is the streaming alternative.

    Raises:
        ValueError: bad block size, a request whose keys cannot be computed at
            this block size (hash-id traces need block size 512), or a
            :class:`Prepared` of another block size.
    """
    if isinstance(workload, Prepared):
        if workload.block_size != block_size:
            raise ValueError(f"workload prepared at block size {workload.block_size}, asked for {block_size}")
        return workload
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    plans = tuple(_plan(r, i, block_size) for i, r in enumerate(workload.requests))
    return Prepared(workload, block_size, tuple(pl[0] for pl in plans), tuple(pl[2] for pl in plans),
                    tuple(pl[3] for pl in plans), tuple(pl[0].num_prompt_tokens for pl in plans),
                    tuple(r.output_tokens for r in workload.requests), plans)


def _too_big(request_id, need: int, block_size: int, num_blocks: int) -> ValueError:
    return ValueError(f"request {request_id} needs {need} blocks of {block_size} tokens but the cache has "
                      f"{num_blocks - 1} usable (num_blocks={num_blocks} includes the null block)")


def iter_plans(requests: Iterable, block_size: int, num_blocks: int | None = None) -> Iterator[tuple]:
    """Replay plans (see :attr:`Prepared.plans`) of ``requests``, computed one
    request at a time: memory holds one request's keys, not the trace's.

    Args:
        requests: Requests in arrival order (any iterable, e.g. a
            :class:`~spfcore.workloads.traces.TraceStream`).
        block_size: Tokens per block (>= 1).
        num_blocks: When given, a request needing more than ``num_blocks - 1``
            blocks raises (when it is reached) with :func:`simulate`'s message.

    Raises:
        ValueError: bad block size, a request whose keys cannot be computed,
            or (with ``num_blocks``) a request that does not fit.
        spfcore.workloads.traces.TraceError: a malformed trace line, from a
            streamed trace.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    for i, r in enumerate(requests):
        pl = _plan(r, i, block_size)
        if num_blocks is not None and pl[5] > num_blocks - 1:
            raise _too_big(r.request_id, pl[5], block_size, num_blocks)
        yield pl


@attrs.frozen
class Scan:
    """What one pass over a request stream tells before a replay (no keys kept).

    Attributes:
        num_requests: Requests in the stream.
        blocks_total: Sum over requests of the blocks held at the end,
            ``cdiv(P + O - 1, bs)``; :func:`infinite_blocks` is this + 1.
        worst_blocks: The largest such count (0 for an empty stream).
        worst_request: The request id of the first request that needs
            ``worst_blocks`` (None for an empty stream).
    """

    num_requests: int
    blocks_total: int
    worst_blocks: int
    worst_request: str | None

    @property
    def infinite_blocks(self) -> int:
        """A never-evicting cache size, null block included (see :func:`infinite_blocks`)."""
        return self.blocks_total + 1

    def check_fits(self, block_size: int, num_blocks: int) -> None:
        """Raise :func:`simulate`'s "does not fit" ``ValueError`` if the worst
        request needs more than ``num_blocks - 1`` blocks."""
        if self.worst_request is not None and self.worst_blocks > num_blocks - 1:
            raise _too_big(self.worst_request, self.worst_blocks, block_size, num_blocks)


def scan(requests: Iterable, block_size: int) -> Scan:
    """One streaming pass over ``requests`` at ``block_size``: sizes, and the
    checks :func:`prepare` makes (keys computable, >= 1 prompt and output
    token) without computing keys. Memory: one request at a time.

    Raises:
        ValueError: bad block size, a request without tokens at a foreign
            block size, or without prompt or output tokens.
        spfcore.workloads.traces.TraceError: a malformed trace line.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    n = total = worst = 0
    worst_id = None
    for r in requests:
        if not r.prompt_token_ids and not (r.hash_ids is not None and block_size == r.hash_block_tokens):
            block_keys(r, block_size)  # raises its message
        p, o = r.num_prompt_tokens, r.output_tokens
        if p < 1 or o < 1:
            raise ValueError(f"request {r.request_id}: needs >= 1 prompt and output token (got {p}, {o})")
        need = -(-(p + o - 1) // block_size)
        total += need
        if need > worst or worst_id is None:
            worst, worst_id = need, r.request_id
        n += 1
    return Scan(n, total, worst, worst_id)


class _Cache:
    """Block-hash -> block-id map with vLLM's duplicate semantics, plus the
    per-block key and ref count."""

    __slots__ = ("first", "dups", "key_of", "ref")

    def __init__(self, num_blocks: int) -> None:
        self.first: dict = {}  # key -> earliest-inserted cached block id
        self.dups: dict = {}  # key -> later block ids with the same key, insertion order
        self.key_of: list = [None] * num_blocks
        self.ref: list[int] = [0] * num_blocks

    def insert(self, i: int, k) -> None:
        self.key_of[i] = k
        if k in self.first:
            self.dups.setdefault(k, []).append(i)
        else:
            self.first[k] = i

    def drop(self, ids) -> None:
        """Forget the hashes of reused blocks (vLLM ``_maybe_evict_cached_block``)."""
        key_of, first = self.key_of, self.first
        for i in ids:
            k = key_of[i]
            if k is None:
                continue
            key_of[i] = None
            if first[k] == i:
                more = self.dups.get(k)
                if more:
                    first[k] = more.pop(0)
                    if not more:
                        del self.dups[k]
                else:
                    del first[k]
            else:
                more = self.dups[k]
                more.remove(i)
                if not more:
                    del self.dups[k]


def _cell(arm, seed, mode: str, num_blocks: int, bs: int, totals: tuple, runtime: PolicyRuntime,
          wall_seconds: float, rows: list | None, extra: dict | None = None, concurrent: dict | None = None,
          records: list | None = None) -> dict:
    """A cell record (:class:`spfcore.run.cell.SimRecord`, as a dict) from the
    replay's totals ``(requests, prompt tokens, block refs, hit blocks)``
    and, when given, per-request rows ``(request_id, session_id,
    prefix_group, arrival_s, prompt_tokens, hit_blocks)`` (any iterable of
    them), their ``extra`` columns (per column name, one value per row) and
    concurrent mode's ``max_running``, ``token_budget``, ``step_overhead_s``,
    ``per_token_s`` (sequential mode: ``token_budget`` alone, when given).
    ``records``: the per-request records already built
    (:meth:`Prepared._records`), used as they are, instead of ``rows``.

    Raises:
        TypeError, spfcore.run.cell.CellFormatError: a missing, unknown or
            ill-typed field (named): a bug in the simulator, not in the policy.
    """
    n, prompt, refs, hit_blocks = totals
    ctok = hit_blocks * bs
    reqs = records
    if rows is not None:
        reqs = [{"request_id": rid, "session_id": sid, "prefix_group": group, "arrival_s": arr,
                 "prompt_tokens": p, "cached_tokens": h * bs} for rid, sid, group, arr, p, h in rows]
        for k, vals in (extra or {}).items():  # after the others, in extra's order
            for d, v in zip(reqs, vals, strict=True):
                d[k] = v
    return SimRecord(arm=arm, seed=seed, mode=mode, num_blocks=num_blocks, block_size=bs, num_requests=n,
                     prompt_tokens=prompt, cached_tokens=ctok, token_hit_rate=ctok / prompt if prompt else 0.0,
                     block_refs=refs, hit_blocks=hit_blocks, block_hit_rate=hit_blocks / refs if refs else 0.0,
                     prefill_tokens_recomputed=prompt - ctok, **runtime.stats(), wall_seconds=wall_seconds,
                     requests=reqs, **(concurrent or {})).to_json()


def _check_fits(prep: Prepared, num_blocks: int) -> None:
    """Raise :func:`simulate`'s "does not fit" ``ValueError``, naming the
    first request that needs the most blocks, if it needs more than
    ``num_blocks - 1`` (from :meth:`Prepared._needs`, kept on ``prep``)."""
    need = prep._needs()
    if len(need):
        worst = int(need.argmax())  # the first of the largest, as max() over the indices
        if need[worst] > num_blocks - 1:
            raise _too_big(prep.views[worst].request_id, int(need[worst]), prep.block_size, num_blocks)


def _run_sequential(plans: Iterable[tuple], rt: PolicyRuntime, num_blocks: int, bs: int,
                    rows: list | None = None, cache: _Cache | None = None,
                    token_budget: int | None = None) -> tuple[int, int, int, int]:
    """The sequential replay of ``plans`` (any iterable of
    :attr:`Prepared.plans` tuples, consumed once, in order); returns
    ``(requests, prompt tokens, block refs, hit blocks)`` and, if ``rows`` is
    a list, appends one row per request (see :func:`_cell`). Written for
    speed: local bindings, no per-block objects, the cache map inlined.

    ``token_budget`` (vLLM ``max_num_batched_tokens``, tokens; ``None``: no
    limit) chunks a prefill as vLLM does when it runs one request alone: each
    step computes at most ``token_budget`` prompt tokens from the cache hit
    on, its allocation (``cdiv(computed + new, bs)`` blocks held, an
    ``evict`` for the missing ones, none when none is missing) followed by
    the store of the full blocks it completes (``allocate_slots`` ->
    ``cache_blocks``), before the next step's allocation. A policy whose order
    the stores change (the classic policy-ordered arms) evicts otherwise than
    with the whole prompt allocated at once.

    A runtime call that raises (a policy fault) leaves the pool as before
    that call: the driver changes its own maps (``cache``, a fresh
    :class:`_Cache` if not given) and ref counts only after the call returns,
    and the runtime undoes its own changes (see :class:`PolicyRuntime`). Every
    block stays either free in the evictor or referenced. One request runs at
    a time, so between requests every block is free: a hit block has ref
    count 0 before its lookup, and each block a request holds has ref count 1
    when it is released (``cache`` must start with every ref count 0)."""
    c = _Cache(num_blocks) if cache is None else cache
    first, dups, key_of, ref = c.first, c.dups, c.key_of, c.ref
    first_get, first_set, first_pop, slow_drop = first.get, first.setdefault, first.pop, c.drop
    touch = rt.touch
    cached = partial(is_not, None)
    arrived, hit, evict, stored, finished, release = rt.arrived, rt.hit, rt.evict, rt.stored, rt.finished, rt.release
    rt.release([], list(range(1, num_blocks)), 0.0)
    keep = rows.append if rows is not None else None
    n_req = prompt_total = refs_total = hits_total = 0
    now = -1.0
    for view, lookup, fk, dk, n_prompt, n_total, arrival_s in plans:
        now += 1.0
        arrived(view, now)
        blocks = list(takewhile(cached, map(first_get, lookup)))  # the longest cached chain, <= (P - 1) // bs
        hit(view, blocks, now)  # first: if it fails, the blocks stay where they are
        if blocks:  # sequential: no other request holds a block, so each is free (ref 0) and leaves the free queue
            touch(blocks)
            for b in blocks:
                ref[b] = 1
        h = len(blocks)
        n_req += 1
        prompt_total += view.num_prompt_tokens
        refs_total += len(view.block_keys)
        hits_total += h
        if keep is not None:
            keep((view.request_id, view.session_id, view.prefix_group, arrival_s, view.num_prompt_tokens, h))
        nf = len(fk)
        p_tok = view.num_prompt_tokens
        computed, done = h * bs, h  # prompt tokens computed; blocks 0..done-1 hold a hash
        while computed < p_tok:  # one prefill step (chunk) at a time; one step without a budget
            end = p_tok if token_budget is None else min(p_tok, computed + token_budget)
            need = -(-end // bs) - len(blocks)  # vLLM allocate_new_blocks: none missing, no allocation
            new = evict(need, now) if need > 0 else []
            old = [*filter(cached, gather(key_of, new))]  # the victims' old hashes leave the prefix cache
            if not old or not dups or dups.keys().isdisjoint(old):  # each is its block's alone: in C
                deque(map(first_pop, old), maxlen=0)
                for b in new:
                    ref[b] = 1
                    key_of[b] = None
            else:
                for b in new:
                    ref[b] = 1
                slow_drop(new)
            blocks += new
            full = min(end // bs, nf)
            if full > done:  # newly computed full prompt blocks (the last-token case may duplicate a hash)
                ids = blocks[done:full]
                keys = fk[done:full]
                stored(view, ids, keys, done, fk[done - 1] if done else None, bs, now)
                for b, k in zip(ids, keys):
                    key_of[b] = k
                owner = list(map(first_set, keys, ids))  # in C; a block whose hash another holds is a duplicate
                if owner != ids:
                    for b, k, o in zip(ids, keys, owner):
                        if o != b:
                            dups.setdefault(k, []).append(b)
                done = full
            computed = end
        if n_total > n_prompt or dk:  # decode: block j-1 fills (is cached), then block j is allocated
            nf_all = nf + len(dk)
            parent = fk[-1] if fk else None
            for j in range(n_prompt, n_total + 1):
                if done < j and done < nf_all:
                    k = dk[done - nf]
                    b = blocks[done]
                    stored(view, (b,), (k,), done, parent, bs, now)
                    key_of[b] = k
                    if first_set(k, b) != b:
                        dups.setdefault(k, []).append(b)
                    parent = k
                    done += 1
                if j < n_total:
                    got = evict(1, now)
                    b = got[0]
                    k = key_of[b]
                    if k is not None:
                        if not dups or k not in dups:  # the hash's only block
                            del first[k]
                            key_of[b] = None
                        else:
                            slow_drop(got)
                    ref[b] = 1
                    blocks.append(b)
        finished(view, now)
        rev = blocks[::-1]  # tail first, as vLLM's free_blocks(reversed(blocks)); each ref count 1 -> 0
        tail = len(blocks) - done  # the hashless blocks come first in rev
        release(rev[tail:] if tail else rev, rev[:tail], now)
        for b in blocks:  # after the release: if it fails, the request still holds its blocks
            ref[b] = 0
    return n_req, prompt_total, refs_total, hits_total


#: Environment variable choosing the sequential replay of the arms that have a
#: compiled one (:mod:`spfcore.sim._replay_nb`, :mod:`spfcore.sim._replay_ttl_nb`,
#: :mod:`spfcore.sim._replay_freq_nb`, :mod:`spfcore.sim._replay_spf_nb`): ``auto`` (default) runs it,
#: ``python`` the reference loop :func:`_run_sequential` through the policy's
#: hooks (same decisions and counts, 13-20x slower).
REPLAY_ENV = "SPFCORE_SIM_REPLAY"
_nb = None  # spfcore.sim._replay_nb, once loaded
_nbf = None  # spfcore.sim._replay_freq_nb, once loaded
_ttl_nb = None  # spfcore.sim._replay_ttl_nb, once loaded
#: Compiled replays written to one protocol, by the policy class they stand in
#: for (the class itself, not a subclass): ``(class module, class qualname) ->
#: (kind, kernel module)``. A kernel module offers:
#:
#: * ``params_of(rt) -> tuple | None``: the configured policy's parameters the
#:   kernel takes, or ``None`` where it does not stand in (the hooks run);
#: * ``new_state(num_blocks, params, nkeys) -> dict``: a fresh pool, every
#:   usable block hashless and free, room for ``nkeys`` key ids; ``st["c"]``
#:   the int64 counters (:mod:`spfcore.sim._replay_nb`'s ``EVICTIONS``,
#:   ``EVICT_CALLS``, ``NVICT`` and the module's ``HOOK_CALLS``, ``TWICE``, ``AT``);
#: * ``grow(st, nkeys)``: room for key ids below ``nkeys``;
#: * ``run(st, flat, first_arrival, hits, victims) -> status``: one chunk
#:   (:func:`_flatten`'s arrays), hit blocks per request into ``hits``, every
#:   block handed out into ``victims`` unless it is empty; ``DONE``,
#:   ``TOO_BIG`` (request ``c[AT]`` needs more blocks than are free, nothing
#:   of it replayed) or ``FOUND_TWICE`` (a lookup found block ``c[TWICE]`` twice);
#: * ``keep_keys(st) -> bool array`` (the key ids the state still names) and
#:   ``remap(st, keep) -> int64 array`` (renumber those densely, old -> new, -1
#:   forgotten), between chunks;
#: * ``ghost_cap(st) -> int``: key ids it may name beyond the cached blocks';
#: * ``warm()``: compile (or load numba's cache) now.
KERNELS = {
    ("spfcore_spf_expected_utility", "ExpectedUtilityPolicy"): ("spf", "spfcore.sim._replay_spf_nb"),
    ("spfcore_classic.sieve", "Sieve"): ("sieve", "spfcore.sim._replay_sieve_nb"),
    ("spfcore_classic.twoq", "TwoQ"): ("twoq", "spfcore.sim._replay_twoq_nb"),
    ("spfcore_classic.s3fifo", "S3FIFO"): ("s3fifo", "spfcore.sim._replay_s3fifo_nb"),
    ("spfcore_classic.gdsf", "GDSF"): ("gdsf", "spfcore.sim._replay_gdsf_nb"),
    ("spfcore_classic.arc", "ARC"): ("arc", "spfcore.sim._replay_arc_nb"),
    ("spfcore_classic.lirs", "LIRS"): ("lirs", "spfcore.sim._replay_lirs_nb"),
}
_KERNEL_KINDS = {kind: mod for kind, mod in KERNELS.values()}
_kernels: dict = {}  # kind -> its kernel module, once loaded and warmed


def _kernel(kind: str):
    """The kernel module of ``kind`` (a :data:`KERNELS` kind), imported and
    warmed once a process."""
    mod = _kernels.get(kind)
    if mod is None:
        _load_nb()
        mod = importlib.import_module(_KERNEL_KINDS[kind])
        mod.warm()
        _kernels[kind] = mod
    return mod


def replay_mode() -> str:
    """:data:`REPLAY_ENV`'s value: ``"auto"`` (also when unset or blank) or ``"python"``.

    Raises:
        ValueError: any other value (the variable and the value named).
    """
    mode = os.environ.get(REPLAY_ENV, "auto").strip() or "auto"
    if mode not in ("auto", "python"):
        raise ValueError(f"{REPLAY_ENV}={mode!r}: expected 'auto' or 'python'")
    return mode


def _compiled_kind(rt: PolicyRuntime) -> str | None:
    """Which compiled sequential replay may stand in for ``rt``'s policy:
    ``"lru"`` for a policy implementing no hook but ``spfcore_cache_configured``
    (vLLM's own order, nothing to observe), ``"belady"`` for the shipped
    ``belady_oracle`` plugin (its decisions in :func:`~spfcore.sim._replay_nb.replay_belady`),
    ``"session_ttl"`` for the shipped ``session_ttl`` plugin in arrivals mode
    (``ttl_seconds`` None, ``ttl_arrivals`` < 2**52; its decisions in
    :func:`~spfcore.sim._replay_ttl_nb.replay_ttl`), ``"frequency"`` for the
    shipped ``frequency`` plugin's own class (not a subclass) with params the
    replay takes (:func:`_frequency_params`; its decisions in
    :func:`~spfcore.sim._replay_freq_nb.replay_frequency`), ``"spf"`` for the
    shipped ``spf_expected_utility`` plugin's own class with variant
    ``"utility"`` and params the replay takes (its module's ``params_of``; its
    decisions in :func:`~spfcore.sim._replay_spf_nb.replay_spf`), the kind of a
    :data:`KERNELS` entry for its class whose module's ``params_of`` takes the
    configured policy, else ``None``;
    always ``None`` with :data:`REPLAY_ENV` = ``python``, with hook calls
    monitored (``SPFCORE_TRACE_HOOKS``), and ``None`` but for ``"lru"`` under
    a hook budget (``rt.hook_budget_s``: it bounds hook calls, and a compiled
    replay makes none, so the hooks run and the budget holds, as in the engine).

    Raises:
        ValueError: :data:`REPLAY_ENV` is neither ``auto`` nor ``python``.
    """
    from spfcore.runtime import _PLAIN_EXEC

    mode = replay_mode()
    if mode == "python" or getattr(rt.pm, "_inner_hookexec", None) is not _PLAIN_EXEC:
        return None
    if not rt.needs_future and not any(rt.implements(h) for h in HOOK_NAMES if h != "spfcore_cache_configured"):
        return "lru"
    if rt.hook_budget_s is not None:
        return None
    plugins = rt.pm.get_plugins()
    inst = next(iter(plugins)) if len(plugins) == 1 else None
    cls = type(inst) if inst is not None else None
    if cls is not None and (cls.__module__, cls.__qualname__) == ("spfcore_belady_oracle", "BeladyOraclePolicy"):
        return "belady"
    if (cls is not None and (cls.__module__, cls.__qualname__) == ("spfcore_session_ttl", "SessionTTLPolicy")
            and inst.params.ttl_seconds is None and inst.params.ttl_arrivals < 2**52):
        return "session_ttl"  # arrivals mode, ``until`` exact in float64 (seconds mode: the Python loop)
    if cls is not None and (cls.__module__, cls.__qualname__) == ("spfcore_frequency", "FrequencyPolicy"):
        return "frequency" if _frequency_params(rt) is not None else None
    entry = KERNELS.get((cls.__module__, cls.__qualname__)) if cls is not None else None
    if entry is not None:  # (numba: imported only for the arm that runs it)
        return entry[0] if importlib.import_module(entry[1]).params_of(rt) is not None else None
    return None


def _frequency_params(rt: PolicyRuntime) -> tuple[int, int] | None:
    """``(min_count, ghost_cap)`` of ``rt``'s shipped ``frequency`` policy:
    its params' ``min_count`` and ``ghost_factor * num_blocks`` (the ghost
    list's bound, entries), or ``None`` for values the compiled replay does
    not take (not plain ints, ``min_count < 1``, ``ghost_factor < 0``, or
    beyond int64)."""
    p = getattr(next(iter(rt.pm.get_plugins())), "params", None)
    m, g = getattr(p, "min_count", None), getattr(p, "ghost_factor", None)
    if type(m) is not int or type(g) is not int or m < 1 or g < 0 or m >= 2**62 or g * rt.num_blocks >= 2**62:
        return None
    return m, g * rt.num_blocks


def _load_nb():
    """:mod:`spfcore.sim._replay_nb` (numba loaded, its kernels compiled or
    read from numba's cache), once a process."""
    global _nb
    if _nb is None:
        from spfcore.evictor import _scannable_llvmlite
        from spfcore.sim import _replay_nb
        _scannable_llvmlite()
        _replay_nb.warm()
        _nb = _replay_nb
    return _nb


def _load_kernels(kind: str | None):
    """The compiled replay of ``kind`` (see :func:`_compiled_kind`), its
    kernels compiled or loaded from numba's cache once a process: returns
    :mod:`spfcore.sim._replay_nb` (:func:`_load_nb`); for ``"frequency"``
    also loads :mod:`spfcore.sim._replay_freq_nb` (kept in ``_nbf``), for
    ``"session_ttl"`` :mod:`spfcore.sim._replay_ttl_nb` (kept in ``_ttl_nb``),
    for a :data:`KERNELS` kind its kernel module (:func:`_kernel`)."""
    global _nbf, _ttl_nb
    nb = _load_nb()
    if kind in _KERNEL_KINDS:
        _kernel(kind)
    if kind == "frequency" and _nbf is None:
        from spfcore.sim import _replay_freq_nb
        _replay_freq_nb.warm()
        _nbf = _replay_freq_nb
    if kind == "session_ttl" and _ttl_nb is None:
        from spfcore.sim import _replay_ttl_nb
        _replay_ttl_nb.warm()
        _ttl_nb = _replay_ttl_nb
    return nb


def _flatten(plans, ids: dict) -> tuple:
    """The compiled replay's input for ``plans``: keys interned through
    ``ids`` (key -> dense id, new keys numbered ``len(ids)`` on), as int64
    arrays ``(bk, bk_off, nf, n_look, dk, dk_off, n_prompt, n_total)`` (see
    :func:`spfcore.sim._replay_nb.replay`): every prompt block key
    (``RequestView.block_keys``), of which the first ``nf`` are full."""
    i64 = np.int64
    n = len(plans)
    sd = ids.setdefault  # one dict operation per key (cheaper than building the unique keys first)
    bk = np.fromiter((sd(k, len(ids)) for k in chain.from_iterable(pl[0].block_keys for pl in plans)), i64)
    dk = np.fromiter((sd(k, len(ids)) for k in chain.from_iterable(pl[3] for pl in plans)), i64)
    bk_off = np.zeros(n + 1, i64)
    np.cumsum(np.fromiter((len(pl[0].block_keys) for pl in plans), i64, n), out=bk_off[1:])
    dk_off = np.zeros(n + 1, i64)
    np.cumsum(np.fromiter(map(len, (pl[3] for pl in plans)), i64, n), out=dk_off[1:])
    return (bk, bk_off, np.fromiter(map(len, (pl[2] for pl in plans)), i64, n),
            np.fromiter(map(len, (pl[1] for pl in plans)), i64, n), dk, dk_off,
            np.fromiter((pl[4] for pl in plans), i64, n), np.fromiter((pl[5] for pl in plans), i64, n))


def _flatten_sessions(plans, sids: dict) -> np.ndarray:
    """Per plan its request's session id interned through ``sids`` (session id
    -> dense int, new ones numbered ``len(sids)`` on), -1 for ``None``, as an
    int64 array (the ``session_ttl`` replay's ``sid``)."""
    sd = sids.setdefault
    return np.fromiter((-1 if (s := pl[0].session_id) is None else sd(s, len(sids)) for pl in plans), np.int64,
                       len(plans))


def _future_index(bk: np.ndarray, bk_off: np.ndarray, nkeys: int) -> tuple[np.ndarray, np.ndarray]:
    """Belady's future index of a whole workload, its prompt block key ids
    ``bk`` (request ``i``'s at ``bk[bk_off[i]:bk_off[i+1]]``, arrival index
    ``i``): per key id the arrival indices of the requests whose prompt holds
    it, ascending, once per request, as ``(uses, uses_off)`` (CSR by key id;
    8 bytes per use, as the plugin's)."""
    n = len(bk_off) - 1
    span = n + 1
    code = np.repeat(np.arange(n, dtype=np.int64), np.diff(bk_off))
    code += bk * span
    code.sort()  # by key id, then arrival (in place: fewer temporaries than np.unique)
    keep = np.empty(len(code), np.bool_)
    keep[:1] = True
    np.not_equal(code[1:], code[:-1], out=keep[1:])  # one use per (key, request)
    code = code[keep]
    del keep
    uses_off = np.zeros(nkeys + 1, np.int64)
    np.cumsum(np.bincount(code // span, minlength=nkeys), out=uses_off[1:])
    np.remainder(code, span, out=code)
    return code, uses_off


def _future_of_stream(requests: Iterable, block_size: int, ids: dict) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_future_index` of a request stream, in one pass over its views
    (:func:`iter_views`), the prompt keys interned into ``ids``. Memory: the
    interned keys and 8 bytes per use, linear in the trace (Belady's index is)."""
    sd = ids.setdefault
    lens = array("q")
    bk = np.fromiter((sd(k, len(ids)) for v in iter_views(requests, block_size)
                      for k in (lens.append(len(v.block_keys)) or v.block_keys)), np.int64)
    bk_off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(np.frombuffer(lens, np.int64), out=bk_off[1:])
    del lens
    return _future_index(bk, bk_off, len(ids))


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only plain-ndarray view of ``a`` (a memory map included): the
    compiled replays' input arrays always have this type, so numba compiles
    (and caches) one signature for fresh arrays and prepared streams alike."""
    v = a.view(np.ndarray)
    v.flags.writeable = False
    return v


class _CompiledReplay:
    """The pool of a compiled replay (see :mod:`spfcore.sim._replay_nb`), fed
    chunk by chunk; ``victims``, when a list, receives every block id handed
    out, in order (as ``PolicyRuntime.evict`` returns them). ``kind``:
    ``"lru"``, ``"belady"`` with its future index ``(uses, uses_off)``, or
    ``"session_ttl"`` with ``params = (ttl_arrivals, pin cap in blocks,
    max_sessions)`` (its state in :mod:`spfcore.sim._replay_ttl_nb`), or
    ``"frequency"`` with ``params = (min_count, ghost_cap)``
    (:func:`_frequency_params`), or a :data:`KERNELS` kind with its module's
    ``params_of(rt)`` (its state the module's); ``nkeys``, when known (a whole
    :class:`Prepared` or prepared stream), sizes a kernel's per-key-id state
    for key ids below it at once (the arrays :meth:`run` would grow it to)."""

    def __init__(self, num_blocks: int, kind: str = "lru", victims: list | None = None,
                 future: tuple | None = None, params: tuple | None = None, nkeys: int = 0) -> None:
        if num_blocks >= 2**31:
            raise ValueError(f"num_blocks must be < 2**31 for the compiled replay, got {num_blocks}")
        self.nb = nb = _load_kernels(kind)
        self.mod = _kernel(kind) if kind in _KERNEL_KINDS else None  # a kernel module (KERNELS)
        self.ghost_cap = 0  # (frequency) the ghost list's bound: key ids it may keep beyond the cache's
        i64 = np.int64
        self.num_blocks, self.kind, self.victims = num_blocks, kind, victims
        self.key_of, self.dn, self.dp = (np.full(num_blocks, -1, i64) for _ in range(3))
        self.ln, self.lp, self.hs = (np.zeros(num_blocks, i64) for _ in range(3))
        # per key id, its first and last cached block: int32 (block ids < 2**31), half the memory of int64 for
        # the whole key space of a prepared stream (1M Mooncake requests: 8.3M key ids, 66 MB for both)
        self.kh = self.kt = np.empty(0, np.int32)
        self.c = np.zeros(nb.NCOUNTERS_B, i64)
        nb.init(num_blocks, self.ln, self.lp, self.hs, self.c)
        if kind == "belady":
            self.uses, self.uses_off = future
            self.depth, self.ordr, self.ver, self.inn = (np.zeros(num_blocks, i64) for _ in range(4))
            self.mark = np.empty(0, i64)  # per key id: the arrival index whose request waits holding it (-2: none)
            cap = 4 * num_blocks + 1024
            self.heaps = [np.zeros(cap, i64) for _ in range(8)]  # order heap and expiry heap (see replay_belady)
        elif kind == "session_ttl":
            self.ttl_arrivals, self.pin_cap, self.max_sessions = params
            self.st = _ttl_nb.new_state(num_blocks, self.ttl_arrivals, 1024, 256, 4 * num_blocks)
        elif kind == "frequency":
            self.min_count, self.ghost_cap = params
            st = _nbf.state(num_blocks, 0)
            self.key_of, self.kh, self.kt, self.dn, self.dp, self.hs, self.inn, self.ordr = st[:8]
            self.cnt, self.gv, self.gn, self.gp = st[8:12]  # per key id: count, ghost count, ghost list links
            self.heaps, self.c = list(st[12:16]), st[16]
        elif self.mod is not None:  # room for nkeys key ids from the start: as grow's first doubling, no copy
            self.st = self.mod.new_state(num_blocks, params, max(nkeys, 1024) if nkeys else 0)
            self.ghost_cap = self.mod.ghost_cap(self.st)
            self.c = self.st["c"]

    def run(self, flat: tuple, nkeys: int, first_id: int = 0, sid: np.ndarray | None = None,
            nsessions: int = 0) -> np.ndarray:
        """Replay one chunk (:func:`_flatten`'s arrays, key ids < ``nkeys``;
        its first request at arrival index ``first_id``; ``session_ttl``: ``sid``
        its requests' session ids < ``nsessions``, -1 none); returns hit blocks
        per request.

        Raises:
            ValueError: a request needs more blocks than the cache has
                (its arrival index named); (frequency) ``nkeys >= 2**31``.
            KeyError: a lookup found a block twice (a prompt whose block
                keys repeat), as the reference loop's ``touch``.
        """
        if self.kind == "session_ttl":
            return self._run_ttl(flat, nkeys, first_id, sid, nsessions)
        if self.mod is not None:
            return self._run_kernel(flat, nkeys, first_id)
        if self.kind == "frequency" and nkeys >= 2**31:  # (its ghost list links key ids as int32)
            raise ValueError(f"{nkeys} key ids: the compiled frequency replay takes < 2**31")
        if nkeys > len(self.kh):  # room for every key id of the chunk
            grow = max(nkeys, 2 * len(self.kh), 1024) - len(self.kh)

            def more(a: np.ndarray, fill: int, dtype) -> np.ndarray:
                """``a`` and ``grow`` more entries ``fill`` (the first time, ``a`` empty: no copy)."""
                tail = np.full(grow, fill, dtype)
                return np.concatenate([a, tail]) if len(a) else tail
            self.kh, self.kt = more(self.kh, -1, np.int32), more(self.kt, -1, np.int32)
            if self.kind == "belady":
                self.mark = more(self.mark, -2, np.int64)
            elif self.kind == "frequency":
                self.cnt, self.gv = more(self.cnt, 0, np.int64), more(self.gv, 0, np.int64)
                self.gn, self.gp = more(self.gn, -1, np.int32), more(self.gp, -1, np.int32)
        n_total = flat[7]
        n = len(n_total)
        hits = np.empty(n, np.int64)
        if not n:
            return hits
        rec = self.victims is not None
        victims = np.empty(int(n_total.sum()) if rec else 0, np.int64)
        nb, c = self.nb, self.c
        c[nb.NVICT] = 0
        blocks = np.empty(int(n_total.max()), np.int64)
        flat = tuple(map(_readonly, flat))  # one compiled signature for maps (read-only) and fresh arrays
        if self.kind == "frequency":
            bad = _nbf.replay_frequency(*flat, self.min_count, self.ghost_cap, self.key_of, self.kh, self.kt,
                                        self.dn, self.dp, self.hs, self.inn, self.ordr, self.cnt, self.gv,
                                        self.gn, self.gp, *self.heaps, c, blocks, hits, victims)
        elif self.kind == "belady":
            bad = nb.replay_belady(*flat, _readonly(self.uses), _readonly(self.uses_off), first_id, self.key_of,
                                   self.kh, self.kt, self.dn, self.dp, self.hs, self.depth, self.ordr, self.ver,
                                   self.inn, self.mark, *self.heaps, c, blocks, np.empty(self.num_blocks, np.int64),
                                   hits, victims)
        else:
            bad = nb.replay(*flat, self.key_of, self.kh, self.kt, self.dn, self.dp, self.ln, self.lp, self.hs, c,
                            blocks, hits, victims)
        if rec:
            self.victims.extend(victims[: c[nb.NVICT]].tolist())
        if bad < -1:  # a lookup found a block twice: the reference loop's touch raises
            raise KeyError(f"block {int(c[_nbf.TWICE if self.kind == 'frequency' else nb.TWICE])} is not free")
        if bad >= 0:
            raise self._too_big(first_id + bad, int(n_total[bad]))
        return hits

    def _too_big(self, arrival: int, need: int) -> ValueError:
        """The error of a request (arrival index ``arrival``) needing ``need`` blocks, more than the cache has."""
        return ValueError(f"request #{arrival} needs {need} blocks but the cache has "
                          f"{self.num_blocks - 1} usable (num_blocks={self.num_blocks} includes the null block)")

    def _run_ttl(self, flat: tuple, nkeys: int, first_id: int, sid: np.ndarray, nsessions: int) -> np.ndarray:
        tn, st = _ttl_nb, self.st
        tn.grow(st, nkeys, nsessions, 0)
        n_total = flat[7]
        n = len(n_total)
        hits = np.empty(n, np.int64)
        if not n:
            return hits
        rec = self.victims is not None
        victims = np.empty(int(n_total.sum()) if rec else 0, np.int64)
        c = st["c"]
        c[tn.NVICT] = 0
        bad = tn.run(st, tuple(map(_readonly, flat)), _readonly(sid), first_id, self.ttl_arrivals, self.pin_cap,
                     self.max_sessions, hits, victims)
        if rec:
            self.victims.extend(victims[: c[tn.NVICT]].tolist())
        if bad >= 0:
            raise self._too_big(first_id + bad, int(n_total[bad]))
        return hits

    def _run_kernel(self, flat: tuple, nkeys: int, first_id: int) -> np.ndarray:
        sn, st = self.mod, self.st
        sn.grow(st, nkeys)
        n_total = flat[7]
        hits = np.empty(len(n_total), np.int64)
        rec = self.victims is not None
        victims = np.empty(int(n_total.sum()) if rec else 0, np.int64)
        c = self.c
        c[sn.NVICT] = 0
        status = sn.run(st, tuple(map(_readonly, flat)), first_id, hits, victims)
        if rec:
            self.victims.extend(victims[: c[sn.NVICT]].tolist())
        if status == sn.FOUND_TWICE:  # the reference loop's touch raises here
            raise KeyError(f"block {int(c[sn.TWICE])} is not free")
        if status == sn.TOO_BIG:
            at = int(c[sn.AT])
            raise self._too_big(first_id + at, int(n_total[at]))
        if status != sn.DONE:
            raise RuntimeError(f"compiled {self.kind} replay: no room in its state (status {status})")
        return hits

    def _ttl_keep(self) -> tuple[np.ndarray, np.ndarray]:
        """(``session_ttl``) The key ids and session ids the state still names."""
        tn, st = _ttl_nb, self.st
        kk = st["kk"]
        return (kk[tn.KH] >= 0) | (kk[tn.UNTIL] >= 0) | (kk[tn.OH] >= 0), st["ss"][tn.ALIVE] != 0

    def compact_ttl(self, ids: dict, sids: dict) -> tuple[dict, dict]:
        """(``session_ttl``) :meth:`compact` of the key ids and the session
        ids: those the state no longer names (keys not cached, sessions not
        live) are forgotten, the others renumbered densely; returns the new
        ``(ids, sids)`` maps."""
        km, sm = _ttl_nb.remap(self.st, *self._ttl_keep())

        def renumber(names: dict, m: np.ndarray) -> dict:
            new = m[np.fromiter(names.values(), np.int64, len(names))]
            kept = new >= 0
            return dict(zip(compress(names, kept.tolist()), new[kept].tolist()))
        return renumber(ids, km), renumber(sids, sm)

    def run_mapped(self, flat: tuple, sid: np.ndarray, nkeys: int, nnames: int, chunk: int = 4096,
                   limit: int | None = None) -> np.ndarray:
        """(``session_ttl``) Replay a prepared stream's arrays (key ids <
        ``nkeys``, session ids indices < ``nnames`` into its name table, -1
        none), ``chunk`` requests at a time, its ids renumbered through maps
        (8 bytes per key id, per name) so that the state stays bounded by the
        cache: once more than ``limit`` key ids or session ids are held, those
        no longer named are forgotten. Returns hit blocks per request.

        Raises:
            ValueError: as :meth:`run`.
        """
        bk, bk_off, nf, n_look, dk, dk_off, n_prompt, n_total = flat
        limit = 4 * self.num_blocks + 65536 if limit is None else limit
        n = len(n_total)
        hits = np.empty(n, np.int64)
        gk, gs = np.full(nkeys, -1, np.int64), np.full(max(nnames, 1), -1, np.int64)  # global -> local id
        lk, ls = np.empty(0, np.int64), np.empty(0, np.int64)  # local -> global id

        def local(g: np.ndarray, gmap: np.ndarray, back: np.ndarray) -> np.ndarray:
            new = np.unique(g[gmap[g] < 0])
            gmap[new] = np.arange(len(back), len(back) + len(new))
            return np.concatenate([back, new])
        for s0 in range(0, n, chunk):
            s1 = min(n, s0 + chunk)
            b0, b1, d0, d1 = int(bk_off[s0]), int(bk_off[s1]), int(dk_off[s0]), int(dk_off[s1])
            cbk, cdk, csid = np.asarray(bk[b0:b1]), np.asarray(dk[d0:d1]), np.asarray(sid[s0:s1])
            lk = local(np.concatenate([cbk, cdk]), gk, lk)
            has = csid >= 0
            ls = local(csid[has], gs, ls)
            lsid = np.full(s1 - s0, -1, np.int64)
            lsid[has] = gs[csid[has]]
            part = (gk[cbk], np.asarray(bk_off[s0:s1 + 1]) - b0, nf[s0:s1], n_look[s0:s1], gk[cdk],
                    np.asarray(dk_off[s0:s1 + 1]) - d0, n_prompt[s0:s1], n_total[s0:s1])
            hits[s0:s1] = self.run(part, len(lk), s0, lsid, len(ls))
            if len(lk) > limit or len(ls) > limit:
                km, sm = _ttl_nb.remap(self.st, *self._ttl_keep())
                for m, back, gmap in ((km, lk, gk), (sm, ls, gs)):
                    m = m[: len(back)]
                    gmap[back[m < 0]] = -1
                    gmap[back[m >= 0]] = m[m >= 0]
                lk, ls = lk[km[: len(lk)] >= 0], ls[sm[: len(ls)] >= 0]
        return hits

    def compact(self, ids: dict) -> dict:
        """(``lru``, ``frequency``, a :data:`KERNELS` kind) Renumber the keys
        still cached (and, for ``frequency``, those counted or on the ghost
        list; for a kernel those its ``keep_keys`` names) densely from 0 and
        forget the others (bounds ``ids`` by the cache and the ghost list,
        not the trace); returns the new key -> id map."""
        if self.mod is not None:
            keep = self.mod.keep_keys(self.st)
            live = {k: i for k, i in ids.items() if keep[i]}
            km = self.mod.remap(self.st, keep)
            return dict(zip(live, km[np.fromiter(live.values(), np.int64, len(live))].tolist()))
        kh = self.kh
        keep = kh >= 0
        if self.kind == "frequency":
            keep |= (self.cnt > 0) | (self.gv > 0)
        live = {k: i for k, i in ids.items() if keep[i]}
        old = np.fromiter(live.values(), np.int64, len(live))
        remap = np.full(len(kh), -1, np.int64)
        remap[old] = np.arange(len(old))
        held = self.key_of >= 0
        self.key_of[held] = remap[self.key_of[held]]
        m = len(old)

        def moved(a: np.ndarray, fill: int, links: bool = False) -> np.ndarray:
            b = np.full(len(a), fill, a.dtype)
            v = a[old]
            b[:m] = np.where(v >= 0, remap[v], -1) if links else v
            return b
        self.kh, self.kt = moved(kh, -1), moved(self.kt, -1)
        if self.kind == "frequency":
            self.cnt, self.gv = moved(self.cnt, 0), moved(self.gv, 0)
            self.gn, self.gp = moved(self.gn, -1, True), moved(self.gp, -1, True)
            c, f = self.c, _nbf
            for j in (f.GHEAD, f.GTAIL):
                if c[j] >= 0:
                    c[j] = remap[c[j]]
        return dict(zip(live, range(m)))

    def stats(self, rt: PolicyRuntime, seconds: float) -> None:
        """Put the replay's counts into ``rt`` as the reference replay would
        have: ``evictions``, ``evict_calls`` and ``hook_calls``: (belady) its
        arrival, hit and score calls and the future hand-over
        (``spfcore_future_requests``); (session_ttl) ``hook_calls`` (arrival,
        re-score keys, hit, store, evicted and score calls) and the pins the
        cap refused (``rt.pins_refused_replayed``, in ``rt.stats()``); (frequency) its hit, stored, evicted, admit and score
        calls (see :mod:`spfcore.sim._replay_freq_nb`). ``policy_seconds`` and
        ``evict_seconds`` get the compiled replay's whole time (the pool's,
        the free queue's and the policy's work are one loop there);
        ``hook_seconds`` stays what ``rt``'s construction took."""
        c, nb = self.c, self.nb
        rt.evictions += int(c[nb.EVICTIONS])
        rt.evict_calls += int(c[nb.EVICT_CALLS])
        if self.kind == "belady":
            rt.hook_calls += int(c[nb.HOOK_CALLS]) + 1
        elif self.kind == "session_ttl":  # its counters, and the pins the evictor's cap refused
            c = self.st["c"]
            rt.evictions += int(c[nb.EVICTIONS])
            rt.evict_calls += int(c[nb.EVICT_CALLS])
            rt.hook_calls += int(c[nb.HOOK_CALLS])
            rt.pins_refused_replayed += int(c[_ttl_nb.REFUSED])
        elif self.kind == "frequency":
            rt.hook_calls += int(c[_nbf.HOOK_CALLS])
        elif self.mod is not None:
            rt.hook_calls += int(c[self.mod.HOOK_CALLS])
        rt.policy_seconds += seconds
        rt.evict_seconds += seconds


def _replay_compiled(plans, rt: PolicyRuntime, num_blocks: int, kind: str = "lru", rows: list | None = None,
                     victims: list | None = None, chunk: int = 4096, limit: int | None = None,
                     stream_future: tuple | None = None, hits: list | None = None) -> tuple[int, int, int, int]:
    """:func:`_run_sequential` of a policy that has a compiled replay (see
    :func:`_compiled_kind`): same return value, same ``rows``, same ``rt``
    counters (:meth:`_CompiledReplay.stats`); ``rt``'s block table is not
    kept. ``hits``, when a list, receives the hit blocks per request as int64
    arrays, one per replayed chunk in arrival order (one for a
    :class:`Prepared`: the input of :meth:`Prepared._records`). ``plans``:
    a :class:`Prepared` (its keys interned once and kept on it) or an
    iterable of plans, read ``chunk`` requests at a time. ``lru``,
    ``frequency`` and ``spf`` keep the interned keys bounded by the cache (and
    the ghost list): once more than ``limit`` (default ``4 *
    num_blocks + ghost_cap + 65536``) are held, those no longer cached (nor
    counted, nor with a record, nor parents of cached blocks) are forgotten
    (:meth:`_CompiledReplay.compact`);
    ``session_ttl`` its key ids and session ids alike
    (:meth:`_CompiledReplay.compact_ttl`: keys not cached, sessions not live).
    ``frequency``, ``session_ttl`` and ``spf`` read their params from ``rt``'s policy. ``belady`` on a stream needs
    ``stream_future = (ids, (uses, uses_off))`` of :func:`_future_of_stream`.
    A :class:`~spfcore.sim.prepared.PreparedStream` is replayed in one call
    over its mapped key ids (and, for ``belady``, its mapped future index);
    ``session_ttl`` reads them ``chunk`` requests at a time, renumbered
    (:meth:`_CompiledReplay.run_mapped`), so that its state stays bounded by the cache.

    Raises:
        ValueError: a request does not fit in the cache (as :func:`_run_sequential`).
    """
    t0 = time.perf_counter()
    totals = [0, 0, 0, 0]
    params = _frequency_params(rt) if kind == "frequency" else None

    def account(pls, flat: tuple, got: np.ndarray, prompt: int | None = None) -> None:
        """Add one replayed chunk to ``totals``: ``pls`` its plans, ``flat``
        their :func:`_flatten` arrays (``flat[1]``, ``bk_off``, ends at the
        chunk's prompt block refs), ``got`` its hit blocks per request
        (shape ``(len(pls),)``), ``prompt`` its prompt tokens when known (else
        summed over the views); its hits to ``hits`` and its rows to ``rows``
        when kept."""
        totals[0] += len(pls)
        totals[1] += sum(pl[0].num_prompt_tokens for pl in pls) if prompt is None else prompt
        totals[2] += int(flat[1][-1])
        totals[3] += int(got.sum())
        if hits is not None:
            hits.append(got)
        if rows is not None:
            keep = rows.append
            for pl, h in zip(pls, got.tolist()):
                v = pl[0]
                keep((v.request_id, v.session_id, v.prefix_group, pl[6], v.num_prompt_tokens, h))

    if kind in _KERNEL_KINDS:  # the configured policy's parameters (and tables), as its hooks read them
        params = _kernel(kind).params_of(rt)
    ttl = None
    if kind == "session_ttl":  # the policy's parameters, as its hooks read them
        inst = next(iter(rt.pm.get_plugins()))
        ttl = (inst.params.ttl_arrivals, rt.pin_cap, inst.max_sessions)
        params = ttl
    sids: dict = {}  # (session_ttl) session id -> dense int
    if isinstance(plans, Prepared):
        if not plans._flat:
            ids: dict = {}
            plans._flat.append((_flatten(plans.plans, ids), len(ids)))
        flat, nkeys = plans._flat[0]
        future = None
        if kind == "belady":
            if len(plans._flat) == 1:
                plans._flat.append(_future_index(flat[0], flat[1], nkeys))
            future = plans._flat[1]
        st = _CompiledReplay(num_blocks, kind, victims, future, params, nkeys)
        sid = _flatten_sessions(plans.plans, sids) if ttl else None
        got = st.run(flat, nkeys, 0, sid, len(sids))
        account(plans.plans, flat, got, sum(plans.prompt_tokens))
    elif isinstance(plans, PreparedStream):
        st = _CompiledReplay(num_blocks, kind, victims, plans.future() if kind == "belady" else None, params,
                             plans.num_keys)
        if ttl:
            a = plans.arrays
            got = st.run_mapped(plans.flat(), a["sid"], plans.num_keys, len(a["name_off"]) - 1, chunk, limit)
        else:
            got = st.run(plans.flat(), plans.num_keys)
        totals[:3] = plans.totals()
        totals[3] = int(got.sum())
        if rows is not None:
            rows.extend(plans.rows(got))
        if hits is not None:
            hits.append(got)
    else:
        ids, future = stream_future if kind == "belady" else ({}, None)
        st = _CompiledReplay(num_blocks, kind, victims, future, params)
        it = iter(plans)
        first = 0
        limit = 4 * num_blocks + st.ghost_cap + 65536 if limit is None else limit
        while pls := list(islice(it, chunk)):
            sid = _flatten_sessions(pls, sids) if ttl else None
            flat = _flatten(pls, ids)
            account(pls, flat, st.run(flat, len(ids), first, sid, len(sids)))
            first += len(pls)
            if (kind in ("lru", "frequency") or kind in _KERNEL_KINDS) and len(ids) > limit:
                ids = st.compact(ids)
            elif ttl and (len(ids) > limit or len(sids) > limit):  # keys not cached, sessions not live
                ids, sids = st.compact_ttl(ids, sids)
    st.stats(rt, time.perf_counter() - t0)
    return tuple(totals)


class _Req:
    __slots__ = ("j", "blocks", "computed", "outputs", "done_hash", "first_lookup", "first_token", "mark")

    def __init__(self, j):
        self.j, self.blocks, self.computed, self.outputs, self.done_hash = j, [], 0, 0, 0
        self.first_lookup = self.first_token = self.mark = None


def _run_concurrent(prep: Prepared, rt: PolicyRuntime, num_blocks: int, views, max_running: int,
                    token_budget: int, step_overhead_s: float, per_token_s: float,
                    cache: _Cache | None = None, step_time=None):
    """The concurrent replay (vLLM's ``Scheduler.schedule``, see the module
    doc); returns per-request lists ``(hit blocks, TTFT s, e2e s, queue s,
    spans)``: queue = first admission - arrival (vLLM's ``scheduled_ts -
    queued_ts``); ``spans[j] = (kp, np, kd, nd)``: the steps and the tokens
    those steps scheduled (all requests) from the request's first admission to
    its first token (``kp``, ``np``) and from then to its end (``kd``, ``nd``),
    so its prefill time (TTFT - queue) is ``kp * step_overhead_s + np *
    per_token_s`` and its decode time ``kd * step_overhead_s + nd * per_token_s``
    (:mod:`spfcore.sim.calibrate` fits the two costs on them).
    ``step_time``, when given, replaces that cost model: ``step_time(t, n)``
    is the seconds of a step starting at virtual time ``t`` that schedules
    ``n`` tokens (:class:`spfcore.sim.calibrate.EngineClock`: the engine's own
    step log); if it also has ``next_start(t)`` (the start of the engine's
    first step at or after ``t``, s), an idle model waits for that step, not
    just for the next arrival (the engine takes the arrivals of its idle spell
    when it wakes).
    A runtime call that raises leaves the pool (``cache``, ref counts, the
    runtime) as before that call, as in :func:`_run_sequential`."""
    bs = prep.block_size
    c = _Cache(num_blocks) if cache is None else cache
    first, key_of, ref = c.first, c.key_of, c.ref
    rt.release([], list(range(1, num_blocks)), 0.0)
    P, O, FK, DK = prep.prompt_tokens, prep.output_tokens, prep.full_keys, prep.decode_keys
    arr = [r.arrival_s for r in prep.workload.requests]
    n = len(views)
    hits = [0] * n
    ttft, e2e, queue = [0.0] * n, [0.0] * n, [0.0] * n
    spans: list = [None] * n
    steps = step_tokens = 0  # steps done and tokens they scheduled, for the spans
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    nxt, finished_n, t = 0, 0, 0.0
    next_start = getattr(step_time, "next_start", None)

    def key_at(j, d):
        fk = FK[j]
        return fk[d] if d < len(fk) else DK[j][d - len(fk)]

    def cache_upto(r: _Req, ntok: int, now: float):
        nfull = ntok // bs
        if nfull <= r.done_hash:
            return
        j, d0 = r.j, r.done_hash
        ids = r.blocks[d0:nfull]
        keys = [key_at(j, d) for d in range(d0, nfull)]
        rt.stored(views[j], ids, keys, d0, key_at(j, d0 - 1) if d0 else None, bs, now)
        for b, k in zip(ids, keys):
            c.insert(b, k)
        r.done_hash = nfull

    def grab(r: _Req, ntok: int, now: float) -> bool:
        need = -(-ntok // bs) - len(r.blocks)
        while need > rt.num_free:
            victim = running[-1]
            preempt(victim, now)
            if victim is r:
                return False
        if need > 0:
            new = rt.evict(need, now)
            c.drop(new)
            for b in new:
                ref[b] = 1
            r.blocks += new
        return True

    def free(r: _Req, now: float):
        cached_ids, hashless = [], []
        for b in reversed(r.blocks):
            if ref[b] == 1:
                (hashless if key_of[b] is None else cached_ids).append(b)
        rt.release(cached_ids, hashless, now)
        for b in r.blocks:
            ref[b] -= 1
        r.blocks, r.computed, r.done_hash = [], 0, 0

    def preempt(r: _Req, now: float):  # vLLM _preempt_request: recompute, the outputs so far are kept
        nonlocal preempted
        free(r, now)
        running.remove(r)
        waiting.appendleft(r)
        preempted = True

    while finished_n < n:
        while nxt < n and arr[nxt] <= t:
            rt.arrived(views[nxt], arr[nxt])
            waiting.append(_Req(nxt))
            nxt += 1
        if not running and not waiting:  # idle until the next arrival (an engine clock: its next step)
            t = arr[nxt] if next_start is None else max(arr[nxt], next_start(arr[nxt]))
            continue
        budget = token_budget
        preempted = False
        sched: list[tuple[_Req, int]] = []
        for r in list(running):
            if budget <= 0:
                break
            if r not in running:  # preempted by an earlier request this step
                continue
            num_tokens = P[r.j] + r.outputs
            ntok = min(num_tokens - r.computed, budget)  # a prefill chunk, or 1 decode token
            if not grab(r, r.computed + ntok, t):
                break  # vLLM: the request preempted itself, scheduling of running requests stops
            cache_upto(r, r.computed + ntok, t)
            sched.append((r, ntok))
            budget -= ntok
        while not preempted and waiting and len(running) < max_running and budget > 0:
            r = waiting[0]
            j = r.j
            num_tokens = P[j] + r.outputs  # a preempted request recomputes its outputs too
            hb = []
            for d in range((num_tokens - 1) // bs):  # the last token is always computed
                b = first.get(key_at(j, d))
                if b is None:
                    break
                hb.append(b)
            h = len(hb)
            ntok = min(num_tokens - h * bs, budget)
            # vLLM scheduler_reserve_full_isl: the whole sequence must fit, not just the first chunk
            need = -(-num_tokens // bs) - h + sum(1 for b in hb if not ref[b])
            if need > rt.num_free:
                break
            if r.first_lookup is None:  # as the engine: one hit per request (the adapter's hit_done),
                rt.hit(views[j], hb, t)  # not again when a preempted request is admitted again
            waiting.popleft()
            for b in hb:
                if not ref[b]:
                    rt.touch((b,))
                ref[b] += 1
            if r.first_lookup is None:
                r.first_lookup = h
                hits[j] = h
                r.mark = (steps, step_tokens)
                queue[j] = t - arr[j]
            r.blocks = hb
            r.computed, r.done_hash = h * bs, h
            running.append(r)
            grab(r, r.computed + ntok, t)
            cache_upto(r, r.computed + ntok, t)
            sched.append((r, ntok))
            budget -= ntok
        ntoks = token_budget - budget
        t_end = t + (step_overhead_s + ntoks * per_token_s if step_time is None else step_time(t, ntoks))
        steps += 1
        step_tokens += ntoks
        for r, ntok in sched:
            if r not in running:
                continue
            j = r.j
            r.computed += ntok
            if r.computed < P[j] + r.outputs:  # a prefill chunk short of the end samples nothing
                continue
            r.outputs += 1
            if r.first_token is None:
                r.first_token = t_end
                ttft[j] = t_end - arr[j]
                k0, n0 = r.mark
                r.mark = (steps, step_tokens, steps - k0, step_tokens - n0)
            if r.outputs >= O[j]:
                rt.finished(views[j], t_end)
                free(r, t_end)
                running.remove(r)
                finished_n += 1
                e2e[j] = t_end - arr[j]
                spans[j] = r.mark[2:] + (steps - r.mark[0], step_tokens - r.mark[1])
        t = t_end
    return hits, ttft, e2e, queue, spans


@contextlib.contextmanager
def _no_gc():
    """Pause the cyclic garbage collector during a replay: the loop creates no
    reference cycles (refcounting frees everything), while collections that
    walk a large prepared workload cost more than the replay itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def simulate(workload: Workload | Prepared, arm: str, *, num_blocks: int, block_size: int,
             options: dict | None = None, mode: str = "sequential", max_running: int = 16,
             token_budget: int | None = None, seed: int = 0, step_overhead_s: float = 0.01,
             per_token_s: float = 1e-5, env: dict | None = None, hook_budget_ms: float | None = None,
             step_time=None) -> dict:
    """Replay ``workload`` through the prefix-cache model under policy ``arm``.

    Args:
        workload: Requests in arrival order (or a :func:`prepare` result).
        arm: Installed policy name (see ``spfcore list-policies``).
        num_blocks: vLLM ``num_gpu_blocks``, null block included (usable:
            ``num_blocks - 1``).
        block_size: Tokens per block.
        options: The arm's string options (``{"key": "value"}``).
        mode: ``"sequential"`` (one request at a time) or ``"concurrent"``
            (continuous batching, see the module doc).
        max_running: Concurrent mode: most requests running at once.
        token_budget: vLLM ``max_num_batched_tokens``, tokens per step.
            Concurrent mode: tokens scheduled per step (chunked prefill;
            ``None``: 8192). Sequential mode: a prefill runs in steps of at
            most this many tokens, each step's allocation and stores before
            the next (:func:`_run_sequential`; the engine's sequential runs
            chunk a prompt longer than its ``max_num_batched_tokens``);
            ``None``: a prompt in one step.
        seed: Recorded in the result (the workload's own seed decides its content).
        step_overhead_s, per_token_s: Concurrent mode cost model: a step that
            schedules ``n`` tokens lasts ``step_overhead_s + n * per_token_s``
            seconds; :func:`spfcore.sim.calibrate.fit_timing` fits both (and
            ``max_running``, ``token_budget``) on an engine run. The defaults
            are no engine's: on the H200 (Llama-3.2-3B, vLLM 0.24, eager) the
            fit gives 12-19 ms + 12-14 us/token.
        step_time: Concurrent mode: ``step_time(t, n)`` -> seconds of a step
            that starts at virtual time ``t`` (s) and schedules ``n`` tokens,
            replacing the two costs above (e.g. an engine run's own step log,
            :class:`spfcore.sim.calibrate.EngineClock`).
        env: Environment for the allow/block lists and ``SPFCORE_HOOK_BUDGET_MS``.
        hook_budget_ms: Most wall time of one hook call, ms (a call over it
            fails the arm with a PolicyError), or None: see
            :meth:`PolicyRuntime.for_policy`.

    Sequential ``lru`` (any policy implementing no hook), ``belady_oracle``,
    ``frequency``, ``session_ttl`` (arrivals mode) and every policy class with
    a :data:`KERNELS` entry (the kernel module's ``params_of`` says which
    params it takes: ``spf_expected_utility``'s variant ``utility``, the
    classic plugin's arms) run compiled unless ``SPFCORE_SIM_REPLAY=python``
    or ``hook_budget_ms`` is set (see the module doc and
    :func:`_compiled_kind`; same results), or ``token_budget`` is below the
    longest prompt (the compiled replays allocate a prompt in one step; the
    reference loop chunks it).

    Returns:
        A cell record: ``arm, seed, status`` (``"ok"``), ``mode, num_blocks, block_size, num_requests,
        prompt_tokens, cached_tokens, token_hit_rate`` (cached prompt tokens /
        prompt tokens), ``block_refs, hit_blocks, block_hit_rate`` (hit blocks /
        prompt block references; a reference is a ``RequestView.block_keys``
        entry), ``prefill_tokens_recomputed`` (prompt - cached tokens),
        ``evictions`` and the other :meth:`PolicyRuntime.stats` fields, and
        ``wall_seconds`` (the replay loop alone, s: no preparation, no
        future hand-over), and ``requests``: per request ``request_id,
        session_id, prefix_group, arrival_s, prompt_tokens, cached_tokens``
        (+ ``ttft_s``, ``e2e_s``, ``queue_s`` in concurrent mode, whose cell
        also records ``max_running, token_budget, step_overhead_s, per_token_s``).

    Raises:
        spfcore.registry.PolicyConfigError: unknown/broken arm or bad option.
        spfcore.runtime.PolicyError: the policy failed during the run.
        ValueError: bad mode or sizes, a request that does not fit in the
            cache, or a bad ``SPFCORE_SIM_REPLAY``.
    """
    if mode not in ("sequential", "concurrent"):
        raise ValueError(f"mode must be 'sequential' or 'concurrent', got {mode!r}")
    if num_blocks < 2:
        raise ValueError(f"num_blocks must be >= 2 (null block + 1), got {num_blocks}")
    prep = prepare(workload, block_size)
    _check_fits(prep, num_blocks)
    rt = PolicyRuntime.for_policy(arm, num_blocks, block_size, options, env=env, hook_budget_ms=hook_budget_ms,
                                  key_map=False)  # the replay keeps its own hash map
    if token_budget is not None and token_budget < 1:
        raise ValueError(f"token_budget must be >= 1 or None, got {token_budget}")
    if mode == "sequential":
        chunked = token_budget is not None and max(prep.prompt_tokens, default=0) > token_budget
        kind = None if chunked else _compiled_kind(rt)
        if rt.needs_future and kind is None:  # the compiled belady replay builds its own future index
            rt.set_future(prep.views)
        rows: list = []  # (the reference loop) one row per request
        hits: list = []  # (a compiled replay) the hit blocks per request, one array
        if kind is not None:
            _load_kernels(kind)  # numba and the cached kernels load outside the timed replay (~1 s, once a process)
        with _no_gc():
            t = time.perf_counter()
            if kind is not None:
                totals = _replay_compiled(prep, rt, num_blocks, kind, hits=hits)
            else:
                totals = _run_sequential(prep.plans, rt, num_blocks, block_size, rows,
                                         token_budget=token_budget if chunked else None)
            wall = time.perf_counter() - t
        budget = None if token_budget is None else {"token_budget": token_budget}
        if kind is not None:  # the same records as from rows, from the templates kept on prep
            return _cell(arm, seed, mode, num_blocks, block_size, totals, rt, wall, None,
                         records=prep._records(hits[0]), concurrent=budget)
        return _cell(arm, seed, mode, num_blocks, block_size, totals, rt, wall, rows, concurrent=budget)
    if token_budget is None:
        token_budget = 8192
    if max_running < 1:
        raise ValueError(f"max_running and token_budget must be >= 1, got {max_running}, {token_budget}")
    arr = [r.arrival_s for r in prep.workload.requests]
    if any(b < a for a, b in zip(arr, arr[1:])):
        raise ValueError("concurrent mode needs requests in arrival order (arrival_s non-decreasing)")
    views = [attrs.evolve(v, arrival_time=a) for v, a in zip(prep.views, arr)]
    if rt.needs_future:
        rt.set_future(views)
    with _no_gc():
        t = time.perf_counter()
        hits, ttft, e2e, queue, _ = _run_concurrent(prep, rt, num_blocks, views, max_running, token_budget,
                                                    step_overhead_s, per_token_s, step_time=step_time)
        wall = time.perf_counter() - t
    rows = [(v.request_id, v.session_id, v.prefix_group, a, v.num_prompt_tokens, h)
            for v, a, h in zip(prep.views, arr, hits)]
    totals = (len(rows), sum(prep.prompt_tokens), sum(len(v.block_keys) for v in prep.views), sum(hits))
    return _cell(arm, seed, mode, num_blocks, block_size, totals, rt, wall, rows,
                 {"ttft_s": ttft, "e2e_s": e2e, "queue_s": queue},
                 dict(max_running=max_running, token_budget=token_budget, step_overhead_s=step_overhead_s,
                      per_token_s=per_token_s))


def iter_views(requests: Iterable, block_size: int) -> Iterator[RequestView]:
    """The policy-facing views of ``requests`` (arrival_time = arrival index),
    as :attr:`Prepared.views` but computed one request at a time: the future
    stream handed to ``needs-future`` policies by :func:`simulate_stream`.

    Raises:
        ValueError: a request whose keys cannot be computed at ``block_size``.
    """
    for i, r in enumerate(requests):
        yield request_view(r, i, float(i), block_keys(r, block_size))


def simulate_stream(requests: Iterable, arm: str, *, num_blocks: int, block_size: int,
                    options: dict | None = None, seed: int = 0, env: dict | None = None,
                    per_request: bool = False, hook_budget_ms: float | None = None) -> dict:
    """Sequential replay of a request *stream*: the same model, loop and
    results as :func:`simulate` in sequential mode, but requests are read and
    keyed one at a time, so memory is bounded by the cache and the policy's
    state, not by the trace length.

    Args:
        requests: Requests in arrival order. Any iterable; it must be
            re-iterable (e.g. a :class:`~spfcore.workloads.traces.TraceStream`
            or a tuple) for a ``needs-future`` arm, whose future stream is a
            second pass (a generator of :class:`RequestView`, handed to
            :meth:`PolicyRuntime.set_future`). Or a
            :class:`~spfcore.sim.prepared.PreparedStream` of the requests
            at ``block_size``: the same replay and record, without reading
            or keying the trace (the compiled arms read its mapped key ids).
        arm, num_blocks, block_size, options, seed, env, hook_budget_ms: As :func:`simulate`.
        per_request: Keep the per-request records (``requests`` in the
            result; memory then grows by one record per request).

    The arms :func:`simulate` runs compiled (``lru``, ``belady_oracle``,
    ``frequency``, ``session_ttl`` in arrivals mode, the policies of
    :data:`KERNELS`) run compiled here too, unless
    ``SPFCORE_SIM_REPLAY=python`` or ``hook_budget_ms`` is set (see the
    module doc; same results): ``lru``'s interned keys and ``session_ttl``'s key and
    session ids are bounded by the cache, ``frequency``'s by the cache and its
    ghost list (``ghost_factor * num_blocks`` keys; 32 bytes of arrays per key
    id), a kernel's by the cache and its ``ghost_cap``; ``belady_oracle``
    builds its future index in one pass first.

    Returns:
        :func:`simulate`'s sequential cell record (``requests`` only with
        ``per_request``). ``wall_seconds``: the replay loop's wall time, s,
        reading and keying the stream included (it is interleaved with the
        replay), the future hand-over excluded.

    Raises:
        spfcore.registry.PolicyConfigError: unknown/broken arm or bad option.
        spfcore.runtime.PolicyError: the policy failed during the run.
        ValueError: bad sizes, a one-shot iterator for a ``needs-future`` arm,
            a request whose keys cannot be computed, a request that does
            not fit in the cache (same message as :func:`simulate`; raised
            when that request is reached, with nothing returned), or a
            prepared stream of another block size.
        spfcore.workloads.traces.TraceError: a malformed line of a streamed
            trace (file, line and field named), when it is reached.
    """
    if num_blocks < 2:
        raise ValueError(f"num_blocks must be >= 2 (null block + 1), got {num_blocks}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    prepared = isinstance(requests, PreparedStream)
    if prepared and requests.block_size != block_size:
        raise ValueError(f"{requests.path}: prepared at block size {requests.block_size}, asked for {block_size}")
    rt = PolicyRuntime.for_policy(arm, num_blocks, block_size, options, env=env, hook_budget_ms=hook_budget_ms,
                                  key_map=False)  # the replay keeps its own hash map
    kind = _compiled_kind(rt)
    future = None
    if rt.needs_future and prepared:
        if kind is None:  # the compiled belady replay reads the stream's own future index
            rt.set_future(requests.views())
    elif rt.needs_future:
        if iter(requests) is requests:
            raise ValueError(f"arm {arm!r} needs the future request stream: give a re-iterable request "
                             "source (a TraceStream, a tuple), not a one-shot iterator")
        if kind == "belady":  # the compiled replay's own future index (one pass, as the plugin's)
            ids: dict = {}
            future = (ids, _future_of_stream(requests, block_size, ids))
        else:
            rt.set_future(iter_views(requests, block_size))
    rows: list | None = [] if per_request else None
    if kind is not None:
        _load_kernels(kind)  # outside the timed replay, as in simulate
    with _no_gc():
        t = time.perf_counter()
        if prepared and kind is not None:  # the compiled replay reads the maps; the request iter_plans stops at:
            if (bad := requests.first_too_big(num_blocks)) is not None:
                raise _too_big(requests.rid(bad), int(requests.arrays["n_total"][bad]), block_size, num_blocks)
            plans = requests
        else:
            plans = requests.plans(num_blocks) if prepared else iter_plans(requests, block_size, num_blocks)
        if kind is not None:
            totals = _replay_compiled(plans, rt, num_blocks, kind, rows, stream_future=future)
        else:
            totals = _run_sequential(plans, rt, num_blocks, block_size, rows)
        wall = time.perf_counter() - t
    return _cell(arm, seed, "sequential", num_blocks, block_size, totals, rt, wall, rows)


def infinite_blocks(workload: Workload | Prepared, block_size: int) -> int:
    """A cache size (null block included) at which nothing is ever evicted in
    sequential mode: every block a request ever holds, plus the null block.
    For a stream, :attr:`Scan.infinite_blocks` of :func:`scan` is the same."""
    return int(prepare(workload, block_size)._needs().sum()) + 1


_CEILING_KEYS = ("token_hit_rate", "block_hit_rate", "prefill_tokens_recomputed", "cached_tokens")


def _ceilings(run, infinite: int, num_blocks: int, belady: str, belady_record: dict | None) -> dict:
    """Both ceilings through ``run(arm, num_blocks) -> cell record``."""
    from spfcore.registry import PolicyConfigError
    from spfcore.runtime import PolicyError

    inf = run("lru", infinite)
    if inf["evictions"]:
        raise RuntimeError(f"infinite-cache run evicted {inf['evictions']} blocks (simulator bug)")
    out = {"infinite": {k: inf[k] for k in _CEILING_KEYS}}
    try:
        bel = belady_record or run(belady, num_blocks)
        out["belady"] = {k: bel[k] for k in _CEILING_KEYS}
    except (PolicyConfigError, PolicyError) as exc:
        out["belady"] = {"error": str(exc)}
    return out


def ceilings(workload: Workload | Prepared, *, num_blocks: int, block_size: int,
             belady: str = "belady_oracle", belady_record: dict | None = None) -> dict:
    """Upper bounds for ``workload`` in sequential mode.

    Returns:
        ``{"infinite": {...}, "belady": {...}}``, each with ``token_hit_rate``,
        ``block_hit_rate``, ``prefill_tokens_recomputed``, ``cached_tokens``.
        ``infinite`` is LRU on a cache that never evicts; ``belady`` is the
        ``belady_oracle`` arm at ``num_blocks`` (``{"error": ...}`` if that
        plugin is not installed or fails); ``belady_record``, a sequential
        :func:`simulate` result of that arm on the same input, is reused
        instead of a new run.
    """
    prep = prepare(workload, block_size)
    # ceilings are measurements, not arms: they ignore SPFCORE_POLICIES / SPFCORE_DISABLE_POLICIES
    return _ceilings(lambda arm, nb: simulate(prep, arm, num_blocks=nb, block_size=block_size, env={}),
                     infinite_blocks(prep, block_size), num_blocks, belady, belady_record)


def ceilings_stream(requests: Iterable, *, num_blocks: int, block_size: int, belady: str = "belady_oracle",
                    belady_record: dict | None = None, infinite: int | None = None) -> dict:
    """:func:`ceilings` of a re-iterable request stream, through
    :func:`simulate_stream` (same results). The infinite cache holds every
    block of the trace, so that run's memory grows with the trace by nature;
    so does the Belady run's future index.

    Args:
        infinite: The never-evicting size (:attr:`Scan.infinite_blocks`), if
            already known; else one :func:`scan` pass computes it.

    Raises:
        ValueError, spfcore.workloads.traces.TraceError: as :func:`simulate_stream`.
    """
    if infinite is None:
        sc = requests.scan if isinstance(requests, PreparedStream) else scan(requests, block_size)
        infinite = sc.infinite_blocks
    return _ceilings(lambda arm, nb: simulate_stream(requests, arm, num_blocks=nb, block_size=block_size, env={}),
                     infinite, num_blocks, belady, belady_record)
