"""PolicyRuntime: the event façade both drivers (simulator, vLLM adapter) call.

It keeps per-block metadata (key, depth, session, access count, ...), turns
events into hook calls with read-only views, owns the :class:`Evictor`, counts
prefetch hints, and times every hook call. Drivers report physical block ids;
policies only ever see :class:`~spfcore.views.BlockView` and
:class:`~spfcore.views.RequestView`.
"""

from __future__ import annotations

import functools
import numbers
import time
from collections.abc import Sequence

import pluggy

from spfcore.evictor import Evictor
from spfcore.views import BlockView, RequestView, Score


class PolicyError(RuntimeError):
    """A policy hook raised or returned something invalid.

    The message names the policy and the hook; the original exception is
    chained as ``__cause__``.
    """


class _Meta:
    """Mutable metadata of one cached block; ``view()`` caches its frozen
    BlockView until the next hit changes the block."""

    __slots__ = ("key", "depth", "parent", "num_tokens", "session_id", "request_id",
                 "access_count", "last_access", "stored_at", "_view")

    def __init__(self, key, depth, parent, num_tokens, session_id, request_id, now):
        self.key, self.depth, self.parent, self.num_tokens = key, depth, parent, num_tokens
        self.session_id, self.request_id = session_id, request_id
        self.access_count, self.last_access, self.stored_at = 1, now, now
        self._view = None

    def view(self) -> BlockView:
        v = self._view
        if v is None:
            v = self._view = BlockView(self.key, self.depth, self.parent, self.num_tokens, self.session_id,
                                       self.request_id, self.access_count, self.last_access, self.stored_at)
        return v


def _first_bad_score(scores) -> int | None:
    """Position of the first score that is not a real number, ``None`` or a
    :class:`Score` with a real value, or that is NaN (NaN has no order, so
    the eviction order would be undefined); ``None`` if all are good."""
    for j, x in enumerate(scores):
        if x is None:
            continue
        if type(x) is Score:
            x = x.value
        if type(x) is float:
            if x != x:
                return j
        elif type(x) is bool or not isinstance(x, numbers.Real) or x != x:
            return j
    return None


def _timed(method):
    """Add the wall time of a runtime event (hooks, evictor bookkeeping,
    re-scoring) to ``self.policy_seconds``."""
    @functools.wraps(method)
    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.policy_seconds += time.perf_counter() - t
    return timed


class PolicyRuntime:
    """Drives one policy (a pluggy PluginManager holding it) over one cache.

    Args:
        pm: PluginManager with the hook specs and the selected policy
            registered (see :func:`spfcore.registry.plugin_manager`).
        num_blocks: Cache size, blocks (sets the pin cap).
        policy_name: For error messages.
        needs_future: The policy declared ``needs-future``; the first arrival
            raises :class:`PolicyError` unless :meth:`set_future` was called.
        pin_cap_fraction: Most pinned free blocks, share of ``num_blocks``.
    """

    def __init__(self, pm: pluggy.PluginManager, num_blocks: int, block_size: int, *,
                 policy_name: str = "?", needs_future: bool = False,
                 pin_cap_fraction: float = 0.5) -> None:
        self.pm, self.hook, self.policy_name = pm, pm.hook, policy_name
        self.num_blocks, self.block_size = num_blocks, block_size
        self.needs_future, self._future_set = needs_future, False
        self.meta: dict[int, _Meta] = {}
        self.by_key: dict[object, int] = {}  # block hash -> physical id of the cached block
        self.arrival = 0
        self.hook_seconds = 0.0
        self.hook_calls = 0
        self.policy_seconds = 0.0  # wall time in the events marked @_timed, hooks included
        self.evictions = 0
        self.evict_seconds = 0.0  # wall time in evict(), hooks included (per-allocation cost)
        self.evict_calls = 0
        self.hints_issued = 0
        self.hints_used = 0
        self._hints: dict[object, list] = {}  # key -> [hint record [expiry, used]]

        def has(name: str) -> bool:
            return bool(getattr(pm.hook, name).get_hookimpls())

        self._has = {n: has(n) for n in (
            "spfcore_request_arrived", "spfcore_blocks_hit", "spfcore_blocks_stored",
            "spfcore_request_finished", "spfcore_blocks_evicted", "spfcore_score_blocks",
            "spfcore_admit_blocks", "spfcore_choose_victims", "spfcore_prefetch_hints",
            "spfcore_rescore_keys")}
        meta = self.meta
        score = admit = choose = None
        if self._has["spfcore_score_blocks"]:
            def score(ids, now):
                res = self._call("spfcore_score_blocks", len(ids), blocks=[meta[i].view() for i in ids], now=now)
                if res:
                    bad = _first_bad_score(res)
                    if bad is not None:
                        raise PolicyError(
                            f"policy {self.policy_name!r}: hook spfcore_score_blocks returned {res[bad]!r} "
                            f"at position {bad}: a score must be a real number (not NaN), None or a Score")
                return res
        if self._has["spfcore_admit_blocks"]:
            def admit(ids, now):
                return self._call("spfcore_admit_blocks", len(ids), blocks=[meta[i].view() for i in ids], now=now)
        if self._has["spfcore_choose_victims"]:
            def choose(ids, n, now):
                return self._call("spfcore_choose_victims", None, candidates=[meta[i].view() for i in ids], n=n, now=now)
        self.evictor = Evictor(num_blocks, score=score, admit=admit, choose=choose,
                               pin_cap_fraction=pin_cap_fraction)
        self._call("spfcore_cache_configured", None, num_blocks=num_blocks, block_size=block_size)

    @classmethod
    def for_policy(cls, name: str, num_blocks: int, block_size: int,
                   options: dict[str, str] | None = None, env=None) -> PolicyRuntime:
        """Build a runtime for the installed policy ``name`` with string options.

        Raises:
            spfcore.registry.PolicyConfigError: unknown/broken policy or bad option.
        """
        from spfcore import registry

        info = registry.get(name, env)
        pm, instance = registry.plugin_manager(info, options)
        cap = getattr(instance.params, "pin_cap_fraction", 0.5)
        return cls(pm, num_blocks, block_size, policy_name=name,
                   needs_future="needs-future" in info.capabilities, pin_cap_fraction=cap)

    # ------------------------------------------------------------ plumbing
    def _call(self, name: str, expect_len: int | None, **kw):
        t = time.perf_counter()
        try:
            res = getattr(self.hook, name)(**kw)
        except Exception as exc:
            raise PolicyError(f"policy {self.policy_name!r} failed in hook {name}: {exc!r}") from exc
        finally:
            self.hook_seconds += time.perf_counter() - t
            self.hook_calls += 1
        if expect_len is not None and res is not None and len(res) != expect_len:
            raise PolicyError(f"policy {self.policy_name!r}: hook {name} returned {len(res)} "
                              f"results for {expect_len} blocks")
        return res

    def stats(self) -> dict:
        """Counters of this run: hook time (s) and calls, policy time (s: every
        runtime event, hooks, evictor bookkeeping and re-scoring included),
        evictions, hints, refused pins."""
        return {"hook_seconds": self.hook_seconds, "hook_calls": self.hook_calls,
                "policy_seconds": self.policy_seconds,
                "evictions": self.evictions, "evict_seconds": self.evict_seconds,
                "evict_calls": self.evict_calls, "hints_issued": self.hints_issued,
                "hints_used": self.hints_used, "pins_refused": self.evictor.pins_refused}

    # ------------------------------------------------------------ events
    def set_future(self, requests: Sequence[RequestView]) -> None:
        """Hand the future request stream to policies that need it."""
        self._future_set = True
        self._call("spfcore_future_requests", None, requests=list(requests))

    @_timed
    def arrived(self, request: RequestView, now: float) -> None:
        """A request arrived (before its cache lookup)."""
        if self.needs_future and not self._future_set:
            raise PolicyError(f"policy {self.policy_name!r} needs the future request stream "
                              "(capability needs-future) but the runner supplied none")
        self.arrival = request.arrival_index
        if self._has["spfcore_request_arrived"]:
            self._call("spfcore_request_arrived", None, request=request, now=now)
        # Re-score expired scores now (the policy has seen this arrival), not
        # only at the next eviction, so expired pins free their share of the
        # pin cap before new releases.
        self.evictor.rescore_expired(now, self.arrival)
        if self._has["spfcore_rescore_keys"]:
            keys = self._call("spfcore_rescore_keys", None, request=request, now=now)
            if keys:
                by_key = self.by_key
                self.evictor.rescore([by_key[k] for k in keys if k in by_key], now)
        if self._has["spfcore_prefetch_hints"]:
            hints = self._call("spfcore_prefetch_hints", None, request=request, now=now) or ()
            self._apply_hints(hints)

    def _apply_hints(self, hints) -> None:
        if not hints:
            return
        by_key = self.by_key
        for h in hints:
            self.hints_issued += 1
            rec = [h.expires_at_arrival, False]
            ids = []
            for k in h.keys:
                self._hints[k] = rec
                i = by_key.get(k)
                if i is not None and i in self.evictor:
                    ids.append(i)
            if ids and not self.evictor.fifo:
                self.evictor.pin(ids, h.expires_at_arrival)

    @_timed
    def hit(self, request: RequestView, ids: Sequence[int], now: float) -> None:
        """The request's lookup hit these blocks (depth order). The driver
        takes them out of the evictor itself (ref count 0 -> 1)."""
        meta = self.meta
        for i in ids:
            m = meta[i]
            m.access_count += 1
            m.last_access = now
            m._view = None
        if self._hints:
            for i in ids:
                rec = self._hints.pop(meta[i].key, None)
                if rec is not None and not rec[1] and rec[0] >= self.arrival:
                    rec[1] = True
                    self.hints_used += 1
        if self._has["spfcore_blocks_hit"]:
            self._call("spfcore_blocks_hit", None, request=request, blocks=[meta[i].view() for i in ids], now=now)

    @_timed
    def stored(self, request: RequestView, ids: Sequence[int], keys: Sequence, first_depth: int,
               parent, num_tokens: int, now: float) -> None:
        """The request cached new full blocks ``ids`` with block hashes ``keys``
        at depths ``first_depth ...``; ``parent`` is the key before them."""
        meta = self.meta
        sid, rid = request.session_id, request.request_id
        d = first_depth
        by_key = self.by_key
        for i, k in zip(ids, keys):
            meta[i] = _Meta(k, d, parent, num_tokens, sid, rid, now)
            by_key[k] = i
            parent = k
            d += 1
        if self._has["spfcore_blocks_stored"]:
            self._call("spfcore_blocks_stored", None, request=request, blocks=[meta[i].view() for i in ids], now=now)

    @_timed
    def finished(self, request: RequestView, now: float) -> None:
        """The request finished; the driver releases its blocks next."""
        if self._has["spfcore_request_finished"]:
            self._call("spfcore_request_finished", None, request=request, now=now)

    @_timed
    def release(self, cached_ids: Sequence[int], hashless_ids: Sequence[int], now: float) -> None:
        """Blocks whose ref count reached 0: cached ones (release order,
        deepest first for a finished request) and hashless ones."""
        if hashless_ids:
            self.evictor.push_hashless(hashless_ids)
        if cached_ids:
            self.evictor.push_cached(cached_ids, now)

    @_timed
    def evict(self, n: int, now: float) -> list[int]:
        """Take ``n`` free blocks for an allocation; cached victims lose their
        metadata and are reported through ``spfcore_blocks_evicted``.

        Raises:
            ValueError: if fewer than ``n`` blocks are free.
        """
        t = time.perf_counter()
        ids = self.evictor.pop(n, now, self.arrival)
        self.evict_seconds += time.perf_counter() - t
        self.evict_calls += 1
        meta, by_key = self.meta, self.by_key
        gone = []
        for i in ids:
            m = meta.pop(i, None)
            if m is not None:
                gone.append(m.key)
                if by_key.get(m.key) == i:  # a recomputed duplicate may own the key now
                    del by_key[m.key]
        if gone:
            self.evictions += len(gone)
            if self._has["spfcore_blocks_evicted"]:
                self._call("spfcore_blocks_evicted", None, keys=gone, now=now)
        return ids

    def forget(self, ids: Sequence[int]) -> None:
        """Drop metadata of blocks whose hashes were dropped outside eviction
        (prefix-cache reset)."""
        for i in ids:
            m = self.meta.pop(i, None)
            if m is not None and self.by_key.get(m.key) == i:
                del self.by_key[m.key]
