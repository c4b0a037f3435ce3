"""The ``session_ttl`` arm: protect the blocks of recently active sessions.

The seed's "trivial baseline to beat": a session is *active* for a TTL after
its latest request; the free blocks of active sessions are pinned ahead of
every other block, the rest are evicted in vLLM's LRU order. Pins are capped
(a share of the pool), so the pool can never wedge.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from itertools import groupby, repeat
from operator import itemgetter

import attrs
import numpy as np
from attrs import validators as v

from spfcore import NEVER_ARRIVAL, Scores, hookimpl

_FIRST, _SECOND = itemgetter(0), itemgetter(1)


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

    Costs: O(1) per scored block; an arrival of session ``s`` costs
    O(blocks ``s`` touched that are still cached) and returns them through
    ``spfcore_rescore_keys`` so that its free blocks are re-pinned in one batch.
    Pins beyond the evictor's cap (``pin_cap_fraction`` of the pool) are
    refused; those blocks stay in LRU order.

    State is bounded by the cache, not by the trace: per cached block hash
    its ``until`` and owning sessions; per session the cached hashes it
    touched, for at most ``num_blocks`` sessions (the least recently active
    session beyond that is forgotten: a later request of it re-protects only
    what it touches anew). A session whose blocks were all evicted is dropped.
    """

    name = "session_ttl"
    contract = "1.3"  # the spfcore contract version this policy is written for (1.3: keys-only)
    # keys-only: the hooks read blocks.keys alone, so the runtime writes no other column
    capabilities = frozenset({"sessions", "pins", "scoring", "keys-only"})
    Params = SessionTTLParams

    def __init__(self, params: SessionTTLParams | None = None) -> None:
        self.params = params or SessionTTLParams()
        self.max_sessions = 1 << 20
        self._reset()

    def _reset(self) -> None:
        self.arrival = 0
        self.until: dict[object, float] = {}  # block hash -> end of protection
        # session -> cached hashes it touched, in first-touch order (a dict's keys, not a set: the
        # re-pin order decides which pins the cap refuses, and set order follows
        # PYTHONHASHSEED, so a set made runs irreproducible)
        # (an OrderedDict in activity order: at most max_sessions, the least recently active is forgotten)
        self.session_keys: OrderedDict[str, dict] = OrderedDict()
        # block hash -> sessions that touched it, a tuple in first-touch order, shared by the keys
        # of one touch (no object per key; eviction drops a run of keys that share one in a C-level pass)
        self.key_sessions: dict[object, tuple] = {}
        self._arrival_keys: list = []
        self._max_end = -math.inf  # the largest ``until`` ever set

    def _end(self, request, now) -> float:
        """End of protection for blocks touched now by ``request`` (arrivals or seconds)."""
        p = self.params
        return now + p.ttl_seconds if p.ttl_seconds is not None else request.arrival_index + p.ttl_arrivals

    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        self.max_sessions = max(1, num_blocks)
        self._reset()

    @hookimpl
    def spfcore_request_arrived(self, request, now):
        self.arrival = request.arrival_index
        self._arrival_keys = []
        if request.session_id is None:
            return
        keys = self.session_keys.get(request.session_id)
        if keys:
            self.session_keys.move_to_end(request.session_id)
            end = self._end(request, now)
            self.until.update(dict.fromkeys(keys, end))  # clocks only grow, so this is the max
            self._max_end = max(self._max_end, end)
            self._arrival_keys = list(keys)

    @hookimpl
    def spfcore_rescore_keys(self, request, now):
        return self._arrival_keys

    def _touch(self, request, blocks, now) -> None:
        sid = request.session_id
        if sid is None or not len(blocks):  # no session, no protection; a miss touches nothing
            return
        session_keys, key_sessions = self.session_keys, self.key_sessions
        mine = session_keys.get(sid)
        if mine is None:
            mine = session_keys[sid] = {}
            if len(session_keys) > self.max_sessions:  # forget the least recently active session
                old, old_keys = session_keys.popitem(last=False)
                for k in old_keys:
                    owners = key_sessions.get(k)
                    if owners is not None and old in owners:
                        rest = tuple(s for s in owners if s != old)
                        if rest:
                            key_sessions[k] = rest
                        else:
                            del key_sessions[k]
        else:
            session_keys.move_to_end(sid)
        end, until, keys = self._end(request, now), self.until, blocks.keys
        touched = dict.fromkeys(keys, end)  # each hash computed once: the dict updates below reuse them
        fresh = False  # whether no hash of the touch was known (``key_sessions`` holds hashes of ``until`` only)
        if end >= self._max_end:  # no block is protected beyond ``end``: the max is ``end`` itself
            self._max_end = end
            known = len(until)
            until.update(touched)
            fresh = len(until) - known == len(touched)
        else:  # (a request served after a later arrival, under continuous batching)
            get = until.get
            for k in keys:
                if get(k, -math.inf) < end:
                    until[k] = end
        mine.update(touched)  # first-touch order kept (the values are not read)
        one = (sid,)
        if fresh or key_sessions.keys().isdisjoint(touched):  # the usual touch: hashes no session touched yet
            key_sessions.update(dict.fromkeys(touched, one))
            return
        owners = list(map(key_sessions.setdefault, keys, repeat(one)))  # a new hash: this session's alone
        if owners.count(one) == len(owners):  # hashes this session alone touched
            return
        grown: dict = {}  # owners before -> owners with this session added (one tuple per distinct owners)
        for o, run in groupby(zip(keys, owners), _SECOND):  # runs of keys with equal owners
            if sid not in o:
                g = grown.get(o)
                if g is None:
                    g = grown[o] = o + one
                key_sessions.update(zip(map(_FIRST, run), repeat(g)))

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        self._touch(request, blocks, now)

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        self._touch(request, blocks, now)

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        if not self.until:  # no session ever touched a cached block (a trace without sessions): nothing to drop
            return
        session_keys = self.session_keys
        deque(map(self.until.pop, keys, repeat(None)), maxlen=0)  # in C
        owners = list(map(self.key_sessions.pop, keys, repeat(())))
        if not owners:
            return
        if owners.count(owners[0]) == len(owners):  # the usual: keys of one owner group
            runs = ((owners[0], keys),)
        else:  # runs of keys with equal owners
            runs = ((o, list(map(_FIRST, run))) for o, run in groupby(zip(keys, owners), _SECOND))
        for ss, run in runs:  # the keys of a run are distinct, and each of its owners holds every one
            for s in ss:
                mine = session_keys.get(s)
                if mine is not None:
                    if len(mine) > len(run):
                        deque(map(mine.pop, run, repeat(None)), maxlen=0)  # in C
                    else:  # the run is every key the session holds: a session with none left is forgotten
                        del session_keys[s]

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        seconds = self.params.ttl_seconds is not None
        clock = now if seconds else self.arrival
        if self._max_end <= clock:  # no protection lies ahead: every block unprotected (value 0, as ``None``)
            return None
        get = self.until.get
        u = np.fromiter(map(get, blocks.keys, repeat(-math.inf)), np.float64, len(blocks))
        pinned = u > clock
        if not pinned.any():
            return Scores(0.0)
        if seconds:
            return Scores(0.0, expires_at=np.where(pinned, u, math.inf), pinned=pinned)
        return Scores(0.0, expires_at_arrival=np.where(pinned, u, NEVER_ARRIVAL).astype(np.int64), pinned=pinned)


__all__ = ["SessionTTLPolicy", "SessionTTLParams"]
