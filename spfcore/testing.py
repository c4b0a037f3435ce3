"""A tiny sequential prefix cache for policy tests: drives a real
:class:`~spfcore.runtime.PolicyRuntime` through the per-request event protocol.

It is not the simulator (:mod:`spfcore.sim`): no timing, no decode blocks, one
request at a time, so every block is free between requests. Keys are whatever
the test passes (readable strings such as ``"A0", "A1"``); equal keys must mean
equal prefixes, as with real block hashes.
"""

from __future__ import annotations

from collections.abc import Sequence

from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView


class MiniCache:
    """A pool of ``num_blocks`` blocks of ``block_size`` tokens run by the
    installed policy named ``policy`` (or by a ready PolicyRuntime, whose own
    size is used).

    Every request's prompt is its full blocks plus ``extra_tokens`` (default 1)
    tokens in a partial, hashless block, so the vLLM cap on hits (at most
    ``prompt_len - 1`` tokens) never cuts the full-block chain.

    ``transactional=False`` skips the copy of the runtime's state that
    :meth:`serve` takes to undo a failed request (O(blocks) per request; for
    long streams whose cache is dropped on a failure anyway).

    Attributes:
        rt: The runtime (every call goes through its public methods).
        evicted: Keys of evicted cached blocks, in eviction order, all requests.
        hits: Per request, the number of full blocks hit.

    Raises:
        spfcore.registry.PolicyConfigError: unknown policy or bad option.
    """

    def __init__(self, policy: str | PolicyRuntime, num_blocks: int, *, block_size: int = 4,
                 options: dict[str, str] | None = None, env=None, transactional: bool = True) -> None:
        if isinstance(policy, PolicyRuntime):  # a runtime built by the test itself
            self.rt = policy
            num_blocks, block_size = policy.num_blocks, policy.block_size
        else:
            self.rt = PolicyRuntime.for_policy(policy, num_blocks, block_size, options, env)
        self.block_size = block_size
        self.transactional = transactional
        self.next_index = 0
        self.evicted: list = []
        self.hits: list[int] = []
        self.rt.release([], list(range(num_blocks)), 0.0)  # step 0: every block free, hashless

    def view(self, keys: Sequence, session: str | None = None, *, index: int | None = None,
             extra_tokens: int = 1) -> RequestView:
        """The RequestView of a prompt with full-block ``keys`` (arrival index
        ``index``, default the next one; arrival time = index seconds)."""
        i = self.next_index if index is None else index
        return RequestView(f"r{i}", session, i, float(i),
                           len(keys) * self.block_size + extra_tokens, tuple(keys))

    def set_future(self, prompts: Sequence[tuple[str | None, Sequence]]) -> list[RequestView]:
        """Give ``(session, keys)`` prompts, in arrival order from the next
        index, to a ``needs-future`` policy; returns their views."""
        views = [self.view(k, s, index=self.next_index + j) for j, (s, k) in enumerate(prompts)]
        self.rt.set_future(views)
        return views

    def cached(self) -> set:
        """Keys of the cached (resident) full blocks."""
        return set(self.rt.cached_keys())

    def serve(self, keys: Sequence, session: str | None = None, *, extra_tokens: int = 1) -> list:
        """Run one request through the protocol (arrive, lookup + hit, allocate,
        store, finish, release tail first).

        A request that does not fit is refused before anything happens; if a
        policy hook fails midway, the runtime and this cache are put back as
        they were before the call (the policy's own state is its business;
        not with ``transactional=False``).

        Returns:
            Keys evicted by this request's allocation, in eviction order.

        Raises:
            ValueError: if the pool has too few free blocks (nothing changed).
            spfcore.runtime.PolicyError: a policy hook failed (nothing changed).
        """
        rt, bs = self.rt, self.block_size
        req = self.view(keys, session, extra_tokens=extra_tokens)
        cap = (req.num_prompt_tokens - 1) // bs
        hit_ids: list[int] = []
        for k in keys[:cap]:
            i = rt.block_of(k)
            if i is None:
                break
            hit_ids.append(i)
        h = len(hit_ids)
        partial = 1 if req.num_prompt_tokens % bs else 0
        need = len(keys) - h + partial
        if need > rt.num_free - h:  # every block is free between requests, hit blocks included
            raise ValueError(f"cannot take {need} blocks: only {rt.num_free - h} free "
                             f"beside the {h} hit blocks of a {len(keys)}-block request")
        saved = rt.checkpoint() if self.transactional else None
        try:
            gone = self._serve(req, keys, hit_ids, need)
        except BaseException:
            if saved is not None:
                rt.restore(saved)
            raise
        self.next_index += 1
        self.hits.append(h)
        self.evicted.extend(gone)
        return gone

    def _serve(self, req: RequestView, keys: Sequence, hit_ids: list[int], need: int) -> list:
        rt, bs, now, h = self.rt, self.block_size, req.arrival_time, len(hit_ids)
        rt.arrived(req, now)
        rt.touch(hit_ids)  # vLLM touch: ref count 0 -> 1
        rt.hit(req, hit_ids, now)
        key_of = [rt.key_of(i) for i in range(rt.num_blocks)]  # before eviction drops the victims' keys
        new = rt.evict(need, now)
        gone = [key_of[i] for i in new if key_of[i] is not None]
        full, hashless = new[: len(keys) - h], new[len(keys) - h:]
        if full:
            rt.stored(req, full, keys[h:], h, keys[h - 1] if h else None, bs, now)
        rt.finished(req, now)
        rt.release(list(reversed(hit_ids + full)), hashless, now)
        return gone

