"""What every classic policy shares: the policy-ordered mode's bookkeeping
and the mapping of prefix chains onto an object cache.

A classic algorithm (libCacheSim's ``find`` / ``insert`` / ``evict``) sees one
object at a time. Here each cached block is an object, identified by its
physical block id while resident and by its block hash once evicted (ghost
entries). The chain mapping, shared by all six:

* a request's hit blocks are touched, and its new blocks inserted, **deepest
  first**, so in every recency or insertion order the head of a chain is
  newer than its tail;
* a block is *evictable* only if it is free (``free`` of
  :func:`~spfcore.hookspecs.spfcore_evict_blocks`) and no cached block has it
  as parent (a leaf of the cached tree). Where the algorithm's own victim is
  not evictable, the policy walks on in the algorithm's order to the next
  evictable block; a queue or LRU list moves the skipped block to its
  newest end (it is in use, or its chain is), so a chain's tail always leaves
  before its head and a walk costs O(1) amortized.

In the object-cache mode (:func:`spfcore.sim.objects.replay_objects`: each
request one block at depth 0, every block free at eviction) nothing is ever
skipped, and each policy makes libCacheSim's decisions exactly (the test
``plugins/classic/tests/test_libcachesim.py``).
"""

from __future__ import annotations

from collections import OrderedDict

import attrs

from spfcore import hookimpl


@attrs.frozen
class NoParams:
    """No parameters."""


class ClassicPolicy:
    """Base of the classic policies: policy-ordered mode (capability
    ``ordered``), chain bookkeeping, and the per-request event mapping.

    Subclasses implement ``configure(capacity)``, ``on_hit(i)``,
    ``on_miss(keys)``, ``on_insert(i, key, depth)`` and ``victim() -> id``
    (which must forget the victim in the subclass's own structures), and may
    read ``self.evictable(i)``, ``self.key[i]`` and ``self.n_req``.
    Costs: O(1) dictionary work per block per event plus the walk past
    unevictable blocks at eviction.
    """

    capabilities = frozenset({"ordered"})
    contract = "1.1"  # the spfcore contract version this policy is written for (spfcore_evict_blocks)
    Params = NoParams

    def __init__(self, params=None) -> None:
        self.params = params if params is not None else self.Params()
        self._reset(0)

    def _reset(self, capacity: int) -> None:
        self.capacity = capacity
        self.key: dict[int, object] = {}      # resident block id -> block hash
        self.parent: dict[int, object] = {}   # resident block id -> parent hash (None at depth 0)
        self.kids: dict[object, int] = {}     # block hash -> cached blocks whose parent it is
        self.n_req = 0
        self._free = {}
        self.configure(capacity)

    def configure(self, capacity: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def evictable(self, i: int) -> bool:
        """Block ``i`` is free and no cached block hangs below it."""
        return i in self._free and not self.kids.get(self.key[i])

    @staticmethod
    def first_evictable(order: OrderedDict, ok) -> int | None:
        """The first id of ``order`` (its eviction end) that ``ok`` accepts, or
        ``None`` if none does. Blocks passed over are moved to the other end
        (treated as just used: a block in use or with a cached child is one),
        so a walk never meets them again before the rest: O(1) amortized.
        When none is accepted, every block would move once, in order: the
        order is left as it is (the same order), without moving any."""
        skipped = []
        pol = getattr(ok, "__self__", None)
        if getattr(ok, "__func__", None) is ClassicPolicy.evictable and isinstance(pol, ClassicPolicy):
            free, kids, key = pol._free, pol.kids, pol.key  # ``evictable`` inlined: the walk's cost
            for i in order:
                if i in free and not kids.get(key[i]):
                    break
                skipped.append(i)
            else:
                return None
        else:
            for i in order:
                if ok(i):
                    break
                skipped.append(i)
            else:
                return None
        move = order.move_to_end
        for j in skipped:
            move(j)
        return i

    # ------------------------------------------------------------ hooks
    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        self._reset(num_blocks)

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self.n_req += 1

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        ids = blocks.ids.tolist()
        for i in reversed(ids):  # deepest first: the head ends up the most recent
            self.on_hit(i)
        self.on_miss(request.block_keys[len(ids):])

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        ids, keys, parents, depth = blocks.ids.tolist(), blocks.keys, blocks.parents, blocks.depth.tolist()
        kids, key, parent = self.kids, self.key, self.parent
        for i, k, p in zip(ids, keys, parents):
            key[i], parent[i] = k, p
            if p is not None:
                kids[p] = kids.get(p, 0) + 1
        for j in range(len(ids) - 1, -1, -1):  # deepest first
            self.on_insert(ids[j], keys[j], depth[j])

    @hookimpl
    def spfcore_evict_blocks(self, n, free, now):
        self._free = free
        out = []
        kids, key, parent = self.kids, self.key, self.parent
        for _ in range(n):
            i = self.victim()
            out.append(i)
            del key[i]
            p = parent.pop(i)
            if p is not None:
                c = kids[p] - 1
                if c:
                    kids[p] = c
                else:
                    del kids[p]
        return out


def fifo_add(ghost: OrderedDict, k, cap: int) -> None:
    """libCacheSim's ``FIFO->get`` on a ghost queue: insert ``k`` unless
    present, dropping the oldest entries beyond ``cap``."""
    if k in ghost:
        return
    ghost[k] = None
    while len(ghost) > cap:
        ghost.popitem(last=False)
