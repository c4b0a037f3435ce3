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
* one exception: when no free block is a leaf, which happens only with a
  block hash cached in two blocks (children are counted per hash), a free
  block whose hash another resident block also holds counts as a leaf for
  that victim (evicting it orphans nothing; vLLM would evict it too):
  :meth:`ClassicPolicy._victim_among_copies`.

In the object-cache mode (:func:`spfcore.sim.objects.replay_objects`: each
request one block at depth 0, every block free at eviction) nothing is ever
skipped, and each policy makes libCacheSim's decisions exactly (the test
``plugins/classic/tests/test_libcachesim.py``).
"""

from __future__ import annotations

from collections import Counter, OrderedDict

import attrs

from spfcore import hookimpl
from spfcore_classic._ring import ParkingRing, Ring


class NoEvictable(RuntimeError):
    """A policy's ``victim()`` found no evictable block (every free block
    is a parent of a cached block, by hash). Raised before the policy
    changes anything for that victim; :meth:`ClassicPolicy.spfcore_evict_blocks`
    then retries among blocks whose hash another block also holds (see
    :meth:`ClassicPolicy._victim_among_copies`) and re-raises if none."""


@attrs.frozen
class NoParams:
    """No parameters."""


class ClassicPolicy:
    """Base of the classic policies: policy-ordered mode (capability
    ``ordered``), chain bookkeeping, and the per-request event mapping.

    Subclasses implement ``configure(capacity)``, ``on_hits(ids)``,
    ``on_miss(keys)``, ``on_inserts(ids, keys, depths)`` and ``victim() -> id``
    (which must forget the victim in the subclass's own structures). The
    batch methods get one request's blocks deepest first (``ids`` physical
    block ids, ``keys`` their hashes, ``depths`` their chain positions, or
    ``None`` unless the class sets ``uses_depth``). A victim is found with
    :meth:`walk` (a queue or LRU list: a :class:`~spfcore_classic._ring.Ring`)
    or :meth:`evictable` (one block); the subclass may read ``self.key[i]``
    and ``self.n_req``.

    Costs: one loop over a request's blocks per event, with O(1)
    dictionary work per block, plus the walk past unevictable blocks at
    eviction (amortized O(1) per victim: see :meth:`walk`).

    The simulator's sequential replay of each shipped subclass (the class
    itself, not a subclass of it) is compiled
    (``spfcore.sim._replay_<name>_nb``, listed in
    ``spfcore.sim.simulator.KERNELS``): a change to the event mapping, the
    walk or an algorithm's rules needs the same change there
    (``tests/test_sim_compiled_<name>.py`` compares every decision).
    """

    capabilities = frozenset({"ordered", "chain-only"})  # hooks read ids, keys, parents, depths
    contract = "1.4"  # the spfcore contract version this policy is written for (capability chain-only)
    Params = NoParams
    uses_depth = False  # on_inserts gets the blocks' depths (else None)
    # walk()'s memory of orders without an evictable block outlives an eviction call (see walk: only
    # for a class whose walked orders gain blocks, outside victim(), only as ids of on_hits/on_inserts)
    memo_across_calls = False

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
        # id(order) -> [order, its length, busy ids, wait hashes, call number] for each order that
        # :meth:`walk` found without an evictable block (see there)
        self._stuck: dict[int, list] = {}
        self._calls = 0  # spfcore_evict_blocks calls so far
        # block hash -> [(order, id)] of the blocks with that hash that a walk parked (Ring.take) because
        # the hash had a cached child; woken when it loses the last one (entries may be stale: checked then)
        self._parked: dict[object, list] = {}
        self.configure(capacity)

    def configure(self, capacity: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def evictable(self, i: int) -> bool:
        """Block ``i`` is free and no cached block hangs below it."""
        return i in self._free and not self.kids.get(self.key[i])

    def walk(self, order: Ring) -> int | None:
        """The first evictable id of ``order`` (its eviction end), or ``None``
        if it has none; :meth:`first_evictable` with :meth:`evictable`, the
        blocks passed over moved to the newest end by one rotation (O(1)).

        In a :class:`~spfcore_classic._ring.ParkingRing` (S3-FIFO's queues), a
        block passed over because its hash has a cached child is *parked*
        (:meth:`ParkingRing.take <spfcore_classic._ring.ParkingRing.take>`): later walks
        skip it until that hash loses its last child, when
        :meth:`spfcore_evict_blocks` wakes it (:meth:`ParkingRing.wake
        <spfcore_classic._ring.ParkingRing.wake>`) at its place in the order. The
        roots of long-lived prefixes keep a child for ever, and S3-FIFO's
        small queue, walked lap after lap, passed ~14 of them per victim on
        issue 19's 150k-request trace (more the longer the trace: cells grew
        faster than their evictions); parked, each is passed once. The order,
        and so every victim, is the same.

        An order found without an evictable block is remembered, with what
        could wake it, and not walked again until then (without this, a list
        full of blocks in use or with cached children made every victim walk
        the whole list: quadratic; ARC's T2 on long traces, where most of T2
        are parents of T1 blocks). A block of such an order is evictable only
        once it is free and has no cached child, so the memory keeps
        ``busy``, its blocks not free when walked (and every block that has
        entered an order since), and ``wait``, the hashes of its free blocks
        with children (each with those blocks). Within one
        ``spfcore_evict_blocks`` call the free set is fixed: a ``wait`` hash
        that loses its last cached child wakes its blocks, and a block that
        enters the order (its length grows) drops the memory. With
        ``memo_across_calls`` the memory also outlives the call: at the next
        call the ``busy`` blocks now free are looked at (a leaf wakes, a
        parent joins ``wait``), and the blocks of every later hit or store
        join ``busy``; that is exact only for a class that puts blocks into
        its walked orders, outside :meth:`victim`, solely in ``on_hits`` /
        ``on_inserts`` and solely blocks of their ``ids``.

        The woken blocks are the only ones of the order that may be evictable,
        so an order in which a few woke is not walked again: the first of them
        in the order that is evictable is the victim (:meth:`Ring.first_of`),
        and the order is rotated to it, as the walk would have moved the
        blocks before it. The memory stays, less that block, which the caller
        must take out of the order (else, the order's length being off, the
        memory is dropped at the next walk).
        """
        stuck = self._stuck
        if stuck:
            memo = stuck.get(id(order))
            if memo is not None:
                if memo[4] != self._calls:  # a later call: blocks were released since
                    memo[4] = self._calls
                    memo[1] = len(order)
                    self._recheck(order, memo)
                if memo[1] == len(order):
                    if not memo[5]:
                        return None
                    if len(memo[5]) <= 8:  # a few woken blocks: found without a walk
                        return self._woken(order, memo)
                del stuck[id(order)]  # a block entered it, or many woke: walked from its end
        free, kids, key = self._free, self.kids, self.key
        if type(order) is ParkingRing:  # those passed with a cached child are parked
            i = order.take(free, kids, key, self._parked)
            if i is not None:
                return i
            # every active block is a leaf in use now (the others are parked, waiting on their hashes)
            # [order, its length, busy ids, wait hash -> its ids, the call it was last checked in, woken ids]
            stuck[id(order)] = [order, len(order), set(order.active()), {}, self._calls, set()]
            return None
        for i in order:
            if i in free and not kids.get(key[i]):
                order.rotate_to(i)  # the blocks passed over go to the newest end
                return i
        busy, wait = set(), {}
        for j in order:
            if j in free:
                wait.setdefault(key[j], []).append(j)
            else:
                busy.add(j)
        stuck[id(order)] = [order, len(order), busy, wait, self._calls, set()]
        return None

    def _woken(self, order: Ring, memo: list) -> int | None:
        """:meth:`walk` of a remembered order with woken blocks (``memo[5]``):
        the first of them in ``order`` that is evictable (the others are not,
        nor is any other block of the order), or ``None``; the same victim,
        and the same order after it, as a walk from the eviction end."""
        free, kids, key, busy, wait = self._free, self.kids, self.key, memo[2], memo[3]
        ready = set()
        for j in memo[5]:
            if j not in order:
                continue
            if j not in free:  # taken by a hit since it woke
                busy.add(j)
            elif kids.get(key[j]):  # a child stored below it since it woke
                wait.setdefault(key[j], []).append(j)
            else:
                ready.add(j)
        memo[5] = ready
        if not ready:
            return None
        i = order.first_of(ready)
        order.rotate_to(i)  # the blocks before it go to the newest end, as a walk moves them
        ready.discard(i)
        memo[1] = len(order) - 1  # the caller takes i out
        return i

    def _recheck(self, order, memo) -> None:
        """At a new call, the ``busy`` blocks of a remembered order that are
        now free: a leaf wakes, a parent joins ``wait``."""
        free, kids, key, busy, wait, woken = self._free, self.kids, self.key, memo[2], memo[3], memo[5]
        gone = [j for j in busy if j in free or j not in order]
        for j in gone:
            busy.discard(j)
            if j in order:  # free now
                k = key[j]
                if kids.get(k):
                    wait.setdefault(k, []).append(j)
                else:
                    woken.add(j)

    @staticmethod
    def first_evictable(order, ok) -> int | None:
        """The first id of ``order`` (its eviction end) that ``ok`` accepts, or
        ``None`` if none does. Blocks passed over are moved to the other end
        (treated as just used: a block in use or with a cached child is one),
        so a walk never meets them again before the rest: O(1) amortized.
        When none is accepted, every block would move once, in order: the
        order is left as it is (the same order), without moving any.

        The long way (one move per block passed over), for an ``OrderedDict``
        or a :class:`Ring`: the reference the tests hold :meth:`walk` to."""
        skipped = []
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
        ids.reverse()  # deepest first: the head ends up the most recent
        self.on_hits(ids)
        if self._stuck:
            self._entered(ids)
        self.on_miss(request.block_keys[len(ids):])

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        ids, keys, parents = blocks.ids.tolist(), blocks.keys, blocks.parents
        self.key.update(zip(ids, keys))
        self.parent.update(zip(ids, parents))
        kids = self.kids
        once = dict.fromkeys(parents, 1)
        if len(once) == len(parents) and kids.keys().isdisjoint(once):  # a chain: each parent new, once
            once.pop(None, None)
            kids.update(once)
        else:
            get = kids.get
            for p in parents:
                if p is not None:
                    kids[p] = get(p, 0) + 1
        ids.reverse()  # deepest first
        depths = blocks.depth.tolist()[::-1] if self.uses_depth else None
        self.on_inserts(ids, keys[::-1], depths)
        if self._stuck:
            self._entered(ids)

    def _wake(self, pk: list, p) -> None:
        """The parked blocks ``pk`` (``[(order, id)]``) of hash ``p``, which lost its last cached child:
        those still parked there under ``p`` become active again (and woken in their order's memory)."""
        key, stuck = self.key, self._stuck
        for order, j in pk:
            node = order.get(j)
            if node is not None and node[3] is None and key.get(j) == p:  # still parked there, with hash p
                order.wake(j)
                if stuck:
                    m = stuck.get(id(order))
                    if m is not None:
                        m[5].add(j)

    def _entered(self, ids) -> None:
        """Blocks that may have entered a remembered order (:meth:`walk`) join its ``busy`` set; a
        memory whose ``busy`` outgrows its order is dropped (a walk then costs no more than its recheck)."""
        stuck = self._stuck
        for o, memo in list(stuck.items()):
            busy = memo[2]
            busy.update(ids)
            if len(busy) > len(memo[0]):
                del stuck[o]

    @hookimpl
    def spfcore_evict_blocks(self, n, free, now):
        self._free = free
        self._calls += 1
        stuck = self._stuck
        if not self.memo_across_calls:
            stuck.clear()  # the free set changed since the last call
        out = []
        kids, key, parent, victim, parked = self.kids, self.key, self.parent, self.victim, self._parked
        for _ in range(n):
            try:
                i = victim()
            except NoEvictable:
                i = self._victim_among_copies()
            out.append(i)
            del key[i]
            p = parent.pop(i)
            if p is not None:
                c = kids[p] - 1
                if c:
                    kids[p] = c
                else:
                    del kids[p]
                    if stuck:  # blocks with hash p became leaves: they wake in the orders waiting on them
                        for m in stuck.values():
                            if p in m[3]:
                                m[5].update(m[3].pop(p))
                    pk = parked.pop(p, None)
                    if pk is not None:
                        self._wake(pk, p)
        if not self.memo_across_calls:
            stuck.clear()
        elif stuck:  # an order that gained blocks in this call (its length changed) is walked again
            for o in [o for o, m in stuck.items() if m[1] != len(m[0])]:
                del stuck[o]
        return out

    def _victim_among_copies(self) -> int:
        """The victim when ``victim()`` found no evictable block, which
        happens only when a block hash is cached in two blocks (vLLM caches
        a recomputed block's hash again when its parent was evicted but the
        block itself was not): :attr:`kids` counts children per hash, so a
        free copy of a hash whose other copy a request holds, with that
        request's next block below it, counts as a parent. Evicting such a
        copy orphans nothing (the hash stays cached in the other), as vLLM,
        which evicts any free block, would. So ``victim()`` runs again with
        the hashes held by two or more resident blocks not counted as
        parents: the algorithm's own choice among those copies and the
        leaves. Costs O(resident blocks), only on this path; the ordinary
        path is unchanged (the same decisions wherever a free leaf exists).

        Raises:
            NoEvictable: no hash is cached twice, or still no evictable
                block (a policy bug: a free leaf then always exists).
        """
        dup = {h for h, c in Counter(self.key.values()).items() if c > 1}
        if not dup:
            raise NoEvictable(f"{self.name}: no evictable block (free, without a cached child) among "
                              f"{len(self.key)} resident blocks")
        kids = self.kids
        self.kids = {h: c for h, c in kids.items() if h not in dup}
        self._stuck.clear()  # the walks' memory assumed the counted parents
        for h in dup & self._parked.keys():  # copies parked as parents (ParkingRing): active again
            self._wake(self._parked.pop(h), h)
        try:
            return self.victim()
        finally:
            self.kids = kids
            self._stuck.clear()


def fifo_add(ghost: OrderedDict, k, cap: int) -> None:
    """libCacheSim's ``FIFO->get`` on a ghost queue: insert ``k`` unless
    present, dropping the oldest entries beyond ``cap``."""
    if k in ghost:
        return
    ghost[k] = None
    while len(ghost) > cap:
        ghost.popitem(last=False)
