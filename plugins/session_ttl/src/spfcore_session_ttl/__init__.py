"""The ``session_ttl`` arm: protect the blocks of recently active sessions.

The seed's "trivial baseline to beat": a session is *active* for a TTL after
its latest request; the free blocks of active sessions are pinned ahead of
every other block, the rest are evicted in vLLM's LRU order. Pins are capped
(a share of the pool), so the pool can never wedge.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from itertools import chain, compress, repeat

import attrs
import numpy as np
from attrs import validators as v

from spfcore import NEVER_ARRIVAL, Scores, hookimpl

_FEW = 8  # blocks up to which a store or an eviction goes hash by hash (numpy calls cost more there)


def _finite(inst, attr, value) -> None:
    """An infinite TTL would pin forever, but a pin needs an expiry (a long TTL: ``ttl_arrivals``)."""
    if not math.isfinite(value):
        raise ValueError(f"'{attr.name}' must be finite: {value}")

@attrs.frozen
class SessionTTLParams:
    """Parameters of ``session_ttl``.

    Attributes:
        ttl_arrivals: TTL in arrivals (int >= 1): a session whose latest request
            had arrival index ``i`` is active at arrivals ``i .. i + ttl_arrivals - 1``.
            Deterministic, so the simulator and the engine agree.
        ttl_seconds: TTL in seconds (float > 0) or ``None``. When set it replaces
            ``ttl_arrivals``: a session is active while ``now < t + ttl_seconds``
            where ``t`` is the ``now`` of its latest request. Wall clocks differ
            between simulator and engine, so decisions may differ too.
        pin_cap_fraction: Most pinned free blocks, as a share of the pool
            (0..1); the runtime hands it to the evictor as its pin cap.
    """

    ttl_arrivals: int = attrs.field(default=8, validator=[v.instance_of(int), v.ge(1)])
    ttl_seconds: float | None = attrs.field(
        default=None, validator=v.optional([v.instance_of((int, float)), v.gt(0), _finite]))
    pin_cap_fraction: float = attrs.field(
        default=0.5, validator=[v.instance_of((int, float)), v.ge(0), v.le(1)])


class SessionTTLPolicy:
    """Pin the free blocks of sessions active within the TTL; LRU among the rest.

    A block belongs to every session that stored or hit it. Per block hash the
    policy keeps ``until``: the clock value (arrival index, or seconds with
    ``ttl_seconds``) at which its latest owning session stops being active.
    Touching a block (store, hit) and any arrival of an owning session push
    ``until`` to ``clock + TTL``. The score of a free block is
    ``Score(0.0, pinned=True, expires_at_arrival=until)`` (``expires_at=until``
    in seconds mode) while ``until`` lies ahead, else ``Score(0.0)``: unprotected
    blocks tie, so the evictor's tie-break (release order) makes them LRU.

    The state of a hash lives in numpy arrays indexed by its *slot*: the id of
    the block that stored it (a hash that block ``i`` stores gets slot ``i``),
    kept while any cached block holds the hash. A hash cached in two blocks has
    one slot, shared (one ``until`` and one owner set, as per hash); a block
    whose own slot is still held that way gets a spare slot (``>= num_blocks``)
    and is *displaced*; while no block is, slot and block id coincide and a
    score is one gather by ``blocks.ids``. ``slot`` (hash -> slot, every cached
    hash, with a session or not) is the only dict keyed by hash: one pass over
    a store's hashes, one over an eviction's. Owners are a group id per slot
    (``_groups``: group id -> sessions, a tuple in first-touch order).

    Costs: O(1) numpy work per scored block; a store or an eviction of ``n``
    blocks one dict pass over their hashes and O(n) numpy work; an arrival of
    session ``s`` costs O(entries ``s`` made since its last arrival) and
    returns the still cached hashes it touched (first-touch order) through
    ``spfcore_rescore_keys`` so that its free blocks are re-pinned in one batch.
    Pins beyond the evictor's cap (``pin_cap_fraction`` of the pool) are
    refused; those blocks stay in LRU order.

    State is bounded by the cache, not by the trace: per cached block hash
    its slot, ``until`` and owner group (at most twice as many groups as
    slots: unused ones are collected); per session the entries of the hashes
    it touched (those of evicted hashes until its next arrival compacts them),
    for at most ``num_blocks`` sessions (the least recently active
    session beyond that is forgotten: a later request of it re-protects only
    what it touches anew). A session whose blocks were all evicted is dropped.
    """

    name = "session_ttl"
    contract = "1.3"  # the spfcore contract version this policy is written for (1.3: keys-only)
    # keys-only: the hooks read blocks.keys and blocks.ids alone, so the runtime writes no other column
    capabilities = frozenset({"sessions", "pins", "scoring", "keys-only"})
    Params = SessionTTLParams

    def __init__(self, params: SessionTTLParams | None = None) -> None:
        self.params = params or SessionTTLParams()
        self.max_sessions = 1 << 20
        self._n = 64  # block ids (own slots); spfcore_cache_configured sets the pool's, stores grow it
        self._reset()

    def _reset(self) -> None:
        self.arrival = 0
        n = self._n
        m = n + 8 + n // 8  # own slots, then spare ones
        self.slot: dict[object, int] = {}  # block hash -> its slot, for every hash a cached block holds
        self._slot_of = np.arange(n, dtype=np.intp)  # block id -> the slot of the hash it stored last
        self._displaced = 0  # block ids whose slot is not their own (0: slot_of is the identity)
        self._spare = list(range(m - 1, n - 1, -1))  # free spare slots, a stack
        self._until = np.full(m, -math.inf)  # slot -> end of protection (-inf: none)
        self._refs = np.zeros(m, np.intp)  # slot -> cached blocks holding its hash (0: free)
        self._gen = np.zeros(m, np.int64)  # slot -> evictions of its hash so far (older entries are dead)
        self._grp = np.zeros(m, np.intp)  # slot -> owner group (0: no owner)
        self._groups: list[tuple] = [()]  # owner group -> sessions, a tuple in first-touch order
        self._gids: dict[tuple, int] = {(): 0}
        # session -> [count, key lists, slot arrays, gen arrays]: the hashes it touched in first-touch
        # order as entries (key, slot, gen), alive while gen is the slot's (count of them); the re-pin
        # order decides which pins the cap refuses, so it is kept exact (set order would follow
        # PYTHONHASHSEED). An OrderedDict in activity order: at most max_sessions, the least recently
        # active is forgotten.
        self.session_keys: OrderedDict[str, list] = OrderedDict()
        self._arrival_keys: list = []
        self._max_end = -math.inf  # the largest ``until`` ever set

    # ------------------------------------------------------------ slots

    def _more_spares(self) -> None:
        m = len(self._until)
        k = max(8, m // 4)
        self._until = np.concatenate([self._until, np.full(k, -math.inf)])
        self._refs, self._gen, self._grp = (np.concatenate([a, np.zeros(k, a.dtype)])
                                            for a in (self._refs, self._gen, self._grp))
        self._spare[:0] = range(m + k - 1, m - 1, -1)

    def _more_ids(self, n2: int) -> None:
        """Block ids up to ``n2`` (a policy whose hooks are called without a configured pool):
        the own slots grow and the spare ones move up by as many."""
        n, d = self._n, n2 - self._n
        up = lambda a: np.where(a >= n, a + d, a)  # noqa: E731
        self._until = np.concatenate([self._until[:n], np.full(d, -math.inf), self._until[n:]])
        self._refs, self._gen, self._grp = (np.concatenate([a[:n], np.zeros(d, a.dtype), a[n:]])
                                            for a in (self._refs, self._gen, self._grp))
        self._slot_of = np.concatenate([up(self._slot_of), np.arange(n, n2, dtype=np.intp)])
        self.slot = {k: s + d if s >= n else s for k, s in self.slot.items()}
        self._spare = [s + d for s in self._spare]
        for rec in self.session_keys.values():
            rec[2] = [up(a) for a in rec[2]]
        self._n = n2

    def _place(self, ids: np.ndarray, sl: np.ndarray) -> None:
        """Blocks ``ids`` hold hashes of slots ``sl`` now."""
        old = self._slot_of[ids]
        self._displaced += int(np.count_nonzero(sl != ids)) - int(np.count_nonzero(old != ids))
        self._slot_of[ids] = sl

    def _slots(self, ids: np.ndarray) -> np.ndarray:
        return self._slot_of[ids] if self._displaced else ids

    def _intern(self, owners: tuple) -> int:
        g = self._gids.get(owners)
        if g is None:
            g = self._gids[owners] = len(self._groups)
            self._groups.append(owners)
        return g

    def _collect_groups(self) -> None:
        """Drop owner groups no cached hash has (they pile up as sessions come and go)."""
        live = np.union1d([0], self._grp)  # (group 0, no owner, stays 0)
        remap = np.zeros(len(self._groups), np.intp)
        remap[live] = np.arange(len(live))
        self._groups = [self._groups[g] for g in live.tolist()]
        self._gids = {t: g for g, t in enumerate(self._groups)}
        self._grp = remap[self._grp]

    def _disown(self, owners: tuple, n: int) -> None:
        """``n`` hashes owned by each session of ``owners`` left the cache."""
        session_keys = self.session_keys
        for s in owners:
            rec = session_keys.get(s)
            if rec is not None:
                rec[0] -= n
                if rec[0] <= 0:  # a session with no cached hash left is forgotten
                    del session_keys[s]

    def _entries(self, rec: list) -> tuple:
        """A session's alive entries (keys, slots), compacted into one chunk of each."""
        keys, slots, gens = rec[1], rec[2], rec[3]
        if len(slots) > 1:
            keys, slots, gens = [list(chain.from_iterable(keys))], [np.concatenate(slots)], [np.concatenate(gens)]
        ks, sl, g = keys[0], slots[0], gens[0]
        alive = self._gen[sl] == g
        if not alive.all():
            ks, sl, g = list(compress(ks, alive.tolist())), sl[alive], g[alive]
        rec[1], rec[2], rec[3] = [ks], [sl], [g]
        return ks, sl

    # ------------------------------------------------------------ views (tests, debugging)

    def touched(self, session_id) -> list:
        """The cached hashes session ``session_id`` touched, in first-touch order (empty if none)."""
        rec = self.session_keys.get(session_id)
        return list(self._entries(rec)[0]) if rec is not None and rec[0] else []

    @property
    def until(self) -> dict:
        """Block hash -> end of protection, for the cached hashes that have one (a copy)."""
        u = self._until
        return {k: float(u[s]) for k, s in self.slot.items() if u[s] > -math.inf}

    @property
    def key_sessions(self) -> dict:
        """Block hash -> sessions that touched it (a tuple in first-touch order), where any (a copy)."""
        grp, groups = self._grp, self._groups
        return {k: groups[grp[s]] for k, s in self.slot.items() if grp[s]}

    # ------------------------------------------------------------ hooks

    def _end(self, request, now) -> float:
        """End of protection for blocks touched now by ``request`` (arrivals or seconds)."""
        p = self.params
        return now + p.ttl_seconds if p.ttl_seconds is not None else request.arrival_index + p.ttl_arrivals

    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        self.max_sessions = max(1, num_blocks)
        self._n = max(1, num_blocks)
        self._reset()

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self.arrival = request.arrival_index
        self._arrival_keys = []
        if request.session_id is None:
            return
        rec = self.session_keys.get(request.session_id)
        if rec is not None and rec[0]:
            self.session_keys.move_to_end(request.session_id)
            end = self._end(request, now)
            keys, sl = self._entries(rec)
            self._until[sl] = end  # clocks only grow, so this is the max
            self._max_end = max(self._max_end, end)
            self._arrival_keys = keys

    @hookimpl
    def spfcore_rescore_keys(self, request, now):
        return self._arrival_keys

    def _forget(self, old, rec) -> None:
        """Forget session ``old`` (beyond max_sessions): it leaves its hashes' owners."""
        grp, groups = self._grp, self._groups
        for s in self._entries(rec)[1].tolist():
            grp[s] = self._intern(tuple(x for x in groups[grp[s]] if x != old))

    def _store(self, keys: list, ids: np.ndarray) -> None:
        """Blocks ``ids`` now hold hashes ``keys``: a new hash gets the block's own slot (a spare one
        if a hash cached elsewhere still has it), a hash cached in another block shares that one's."""
        if int(ids.max()) >= self._n:
            self._more_ids(max(2 * self._n, int(ids.max()) + 1))
        refs, slot, lst = self._refs, self.slot, ids.tolist()
        if len(lst) > _FEW and not refs[ids].any():  # the blocks' own slots are free
            got = list(map(slot.setdefault, keys, lst))  # one pass: each hash computed once
            if got == lst:  # the usual: hashes no cached block holds, each in its block's own slot
                refs[ids] = 1
                if self._displaced:
                    self._place(ids, ids)
                return
            sl = np.array(got, np.intp)  # a hash cached in another block (or twice here): shared
            np.add.at(refs, sl, 1)
            self._place(ids, sl)
            return
        sl = []
        for k, i in zip(keys, lst):  # a few blocks, or a block's own slot is held: hash by hash
            s = slot.get(k)
            if s is None:
                if refs[i]:
                    if not self._spare:
                        self._more_spares()
                        refs = self._refs
                    s = self._spare.pop()
                else:
                    s = i
                slot[k] = s
            refs[s] += 1
            sl.append(s)
        if self._displaced or sl != lst:
            self._place(ids, np.array(sl, np.intp))

    def _touch(self, request, blocks, now) -> None:
        sid = request.session_id
        if sid is None or not len(blocks):  # no session, no protection; a miss touches nothing
            return
        session_keys = self.session_keys
        rec = session_keys.get(sid)
        if rec is None:
            rec = session_keys[sid] = [0, [], [], []]
            if len(session_keys) > self.max_sessions:  # forget the least recently active session
                self._forget(*session_keys.popitem(last=False))
        else:
            session_keys.move_to_end(sid)
        if len(self._groups) > 2 * len(self._grp):
            self._collect_groups()
        end, until = self._end(request, now), self._until
        ids = blocks.ids
        sl = self._slots(ids)
        if end >= self._max_end:  # no block is protected beyond ``end``: the max is ``end`` itself
            self._max_end = end
            until[sl] = end
        else:  # (a request served after a later arrival, under continuous batching)
            until[sl] = np.maximum(until[sl], end)
        grp, groups, one = self._grp, self._groups, (sid,)
        g = grp[sl]
        g0 = int(g[0])
        keys = blocks.keys
        if (g == g0).all():  # one owner group (a store: none yet)
            if sid in groups[g0]:  # hashes this session touched already
                return
            grp[sl] = self._intern(groups[g0] + one)
            new = sl.copy() if sl is ids else sl
        else:  # owner groups grow one distinct group at a time
            u, inv = np.unique(g, return_inverse=True)
            add = [sid not in groups[x] for x in u.tolist()]
            grp[sl] = np.array([self._intern(groups[x] + one) if a else x for x, a in zip(u.tolist(), add)],
                               np.intp)[inv]
            pick = np.array(add)[inv]
            if not pick.any():
                return
            new, keys = sl[pick], list(compress(keys, pick.tolist()))
        if self._displaced:  # a slot twice in the batch (a hash cached in two of its blocks) counts once
            _, first = np.unique(new, return_index=True)
            if len(first) < len(new):
                first.sort()
                new, keys = new[first], [keys[j] for j in first.tolist()]
        rec[0] += len(new)
        rec[1].append(keys)
        rec[2].append(new)
        rec[3].append(self._gen[new])

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        self._touch(request, blocks, now)

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        if len(blocks):
            self._store(blocks.keys, blocks.ids)
            self._touch(request, blocks, now)

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        n = len(keys)
        if n > _FEW:
            self._evict_many(keys)
        else:
            self._evict_few(keys)

    def _evict_few(self, keys: list) -> None:
        """:meth:`spfcore_blocks_evicted` hash by hash (a few, or a hash cached in two blocks)."""
        slot, refs, grp, groups = self.slot, self._refs, self._grp, self._groups
        for k in keys:  # a slot lives on while another block holds its hash
            s = slot.get(k)
            if s is None:
                continue
            x = int(grp[s])
            grp[s] = 0
            self._until[s] = -math.inf
            self._gen[s] += 1
            if x:
                self._disown(groups[x], 1)
            refs[s] -= 1
            if refs[s] <= 0:
                refs[s] = 0
                del slot[k]
                if s >= self._n:
                    self._spare.append(s)

    def _evict_many(self, keys: list) -> None:
        """:meth:`spfcore_blocks_evicted` in numpy, where each hash is in one block (else hash by hash)."""
        n = len(keys)
        slot, refs, grp, groups = self.slot, self._refs, self._grp, self._groups
        sl = np.fromiter(map(slot.pop, keys, repeat(-1)), np.intp, n)  # one pass, in C
        if sl.min() >= 0 and (not self._displaced or refs[sl].max() == 1):  # each hash in one block
            g = grp[sl]
            grp[sl] = 0
            self._until[sl] = -math.inf
            self._gen[sl] += 1  # the entries naming these hashes die
            refs[sl] = 0
            if self._displaced:
                self._spare.extend(sl[sl >= self._n].tolist())
            g0 = int(g[0])
            if (g == g0).all():  # the usual: keys of one owner group
                if g0:
                    self._disown(groups[g0], n)
            else:
                u, c = np.unique(g, return_counts=True)
                for x, m in zip(u.tolist(), c.tolist()):
                    if x:
                        self._disown(groups[x], m)
            return
        for k, s in zip(keys, sl.tolist()):  # put back and go hash by hash
            if s >= 0:
                slot[k] = s
        self._evict_few(keys)

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        seconds = self.params.ttl_seconds is not None
        clock = now if seconds else self.arrival
        if self._max_end <= clock:  # no protection lies ahead: every block unprotected (value 0, as ``None``)
            return None
        u = self._until[self._slots(blocks.ids)]
        pinned = u > clock
        if not pinned.any():
            return Scores(0.0)
        if seconds:
            return Scores(0.0, expires_at=np.where(pinned, u, math.inf), pinned=pinned)
        return Scores(0.0, expires_at_arrival=np.where(pinned, u, NEVER_ARRIVAL).astype(np.int64), pinned=pinned)


__all__ = ["SessionTTLPolicy", "SessionTTLParams"]
