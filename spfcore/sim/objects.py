"""Object-cache replay: each request is one block, for cross-checks against
object caches such as libCacheSim.

A classic cache simulator (libCacheSim, the papers of ARC, S3-FIFO, SIEVE,
LIRS, 2Q, GDSF) serves a stream of object ids: an id is a hit if cached, else
it is inserted, evicting when the cache is full. :func:`replay_objects` serves
such a stream through the same :class:`~spfcore.runtime.PolicyRuntime` and
:class:`~spfcore.evictor.Evictor` the simulator and the vLLM adapter use, with
every request a single full block (depth 0, no partial block, no decode
block) and a pool of exactly ``capacity`` blocks, so a policy's hit count can
be compared with another simulator's for the same algorithm and capacity.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView


@attrs.frozen
class ObjectResult:
    """Outcome of :func:`replay_objects`.

    Attributes:
        requests: Objects requested (one block each).
        hits: Requests whose block was cached.
        evictions: Cached blocks evicted.
    """

    requests: int
    hits: int
    evictions: int

    @property
    def hit_ratio(self) -> float:
        """``hits / requests`` (0.0 for an empty stream)."""
        return self.hits / self.requests if self.requests else 0.0


def replay_objects(keys: Iterable, policy: str | PolicyRuntime, capacity: int, *,
                   options: dict[str, str] | None = None, env=None) -> ObjectResult:
    """Serve ``keys`` (object ids, any hashable; equal ids are the same object)
    one at a time through a cache of ``capacity`` blocks run by ``policy``.

    Per request, the runtime sees what a one-block request in the simulator
    makes it see: ``arrived`` (``RequestView.block_keys == (key,)``, arrival
    time = arrival index, seconds), ``hit`` with the cached block or nothing,
    on a miss one allocation (``evict(1)``: a never-used block while the pool
    is not full, else a victim named by the policy) and ``stored`` at depth 0,
    then ``finished`` and the release of the block (its ref count back to 0).

    Args:
        keys: The object ids, in request order.
        policy: An installed policy's name, or a ready runtime of ``capacity`` blocks.
        capacity: Cache size, blocks (objects), >= 1.
        options: Policy options (``{"key": "value"}``) when ``policy`` is a name.

    Returns:
        The counts as an :class:`ObjectResult`.

    Raises:
        ValueError: ``capacity`` < 1 or differs from the runtime's size.
        spfcore.registry.PolicyConfigError: unknown policy or bad option.
        spfcore.runtime.PolicyError: a policy hook failed.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1 block, got {capacity}")
    if isinstance(policy, PolicyRuntime):
        rt = policy
        if rt.num_blocks != capacity:
            raise ValueError(f"the runtime has {rt.num_blocks} blocks, capacity is {capacity}")
    else:
        rt = PolicyRuntime.for_policy(policy, capacity, 1, options, env)
    block_of, touch = rt.block_of, rt.touch
    arrived, hit, evict, stored, finished, release = rt.arrived, rt.hit, rt.evict, rt.stored, rt.finished, rt.release
    release([], list(range(capacity)), 0.0)  # every block free, hashless
    n = hits = 0
    for n, k in enumerate(keys, 1):
        now = float(n - 1)
        view = RequestView(f"r{n - 1}", None, n - 1, now, 1, (k,))
        arrived(view, now)
        i = block_of(k)
        if i is not None:
            hit(view, [i], now)
            touch((i,))  # ref count 0 -> 1
            hits += 1
        else:
            hit(view, [], now)
            i = evict(1, now)[0]
            stored(view, [i], [k], 0, None, 1, now)
        finished(view, now)
        release([i], [], now)
    return ObjectResult(n, hits, rt.evictions)
