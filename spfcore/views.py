"""Read-only views and value types exchanged between the core and policies.

Policies never see vLLM objects: the simulator and the vLLM adapter both
describe blocks and requests with these frozen attrs classes.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from operator import itemgetter

import attrs
import numpy as np

#: ``expires_at_arrival`` of a score that never expires (arrival index; any value >= it means never).
NEVER_ARRIVAL = 2**62


@attrs.frozen(slots=True)
class BlockView:
    """One full KV-cache block, as a policy sees it.

    Attributes:
        key: The block hash: identifies the block's tokens *and* all of its
            ancestors (a chained hash, see :func:`spfcore.keys.chain_keys`).
            Equal keys mean an identical prefix up to and including this block.
        depth: 0-based position of the block in its chain (block 0 holds
            tokens ``[0, block_size)``).
        parent: Key of the block at ``depth - 1``; ``None`` for depth 0.
        num_tokens: Tokens held by the block (the block size).
        session_id: Session of the request that stored the block, or ``None``.
        request_id: Request that stored (computed) the block.
        access_count: Times the block was stored or hit (>= 1).
        last_access: ``now`` (seconds) of the last store or hit.
        stored_at: ``now`` (seconds) when the block was stored.
    """

    key: Hashable
    depth: int
    parent: Hashable | None
    num_tokens: int
    session_id: str | None
    request_id: str
    access_count: int
    last_access: float
    stored_at: float


@attrs.frozen(slots=True)
class RequestView:
    """One request, as a policy sees it.

    Attributes:
        request_id: Unique id within a run.
        session_id: Conversation/session id, or ``None`` if the workload has none.
        arrival_index: 0-based position in the run's arrival order; the
            deterministic clock that the simulator and the engine share.
        arrival_time: Arrival time, seconds (engine: monotonic clock; sim:
            the trace's virtual clock).
        num_prompt_tokens: Prompt length, tokens.
        block_keys: Block hashes of the prompt's *full* blocks, in chain
            order (length ``num_prompt_tokens // block_size``).
        prefix_group: Workload label of the shared prefix (e.g. persona id),
            or ``None``. Informational; policies must not need it.
    """

    request_id: str
    session_id: str | None
    arrival_index: int
    arrival_time: float
    num_prompt_tokens: int
    block_keys: tuple = ()
    prefix_group: str | None = None


@attrs.frozen(slots=True)
class Score:
    """A retention priority with optional expiry and pin.

    The evictor evicts the lowest ``(tier, value)`` first; tiers, lowest
    first: hashless blocks, blocks the policy did not admit, ordinary blocks,
    pinned blocks. Ties go to the block released first (vLLM's LRU order).

    Attributes:
        value: Retention priority; lower is evicted sooner. Unitless float.
        expires_at: ``now`` (seconds) after which the block is re-scored
            (``math.inf``: never).
        expires_at_arrival: Arrival index at (or after) which the block is
            re-scored (``2**62``: never). Use this clock when the simulator
            and the engine must make identical decisions.
        pinned: Ask to protect the block ahead of every unpinned block until
            it expires. The evictor refuses pins beyond its cap (a share of the
            pool) and evicts pinned blocks only when nothing else is left, so a
            policy can never wedge the pool. A pin must carry an expiry.
    """

    value: float
    expires_at: float = math.inf
    expires_at_arrival: int = NEVER_ARRIVAL
    pinned: bool = False

    def __attrs_post_init__(self) -> None:
        """Raises ValueError for a pin without an expiry (it could hold its block forever)."""
        if self.pinned and self.expires_at == math.inf and self.expires_at_arrival >= NEVER_ARRIVAL:
            raise ValueError("Score(pinned=True) needs an expiry (expires_at or expires_at_arrival)")


@attrs.frozen(slots=True)
class Hint:
    """A prefetch hint: blocks a policy predicts a coming request will hit.

    Attributes:
        keys: Block hashes to protect (resident, free blocks are pinned) or to
            promote (not on the GPU but in the slower tier, when the run has
            one: loaded to the GPU now, then pinned; see
            :func:`spfcore.hookspecs.spfcore_tier_admit`).
        expires_at_arrival: Arrival index after which the protection lapses.
    """

    keys: tuple
    expires_at_arrival: int


def gather(column: list, ids: list) -> list:
    """``[column[i] for i in ids]`` in one C-level call (``itemgetter``)."""
    if len(ids) > 1:
        return list(itemgetter(*ids)(column))
    return [column[i] for i in ids]


class BlockTable:
    """Per-block metadata of one cache, as columns indexed by physical block id.

    The runtime owns it and writes it; policies read it through
    :class:`BlockBatch`. Numeric columns are numpy arrays of length
    ``num_blocks`` so that a batch reads a column with one fancy-index
    operation; keys and request ids stay Python objects (block hashes are
    ints: 128-bit in the simulator, :mod:`spfcore.keys`; vLLM's whole hash in
    the engine, :func:`spfcore.engine.vllm_adapter.vllm_keys`).

    Attributes:
        key: list, block hash per block id, ``None`` if the block holds no hash.
        parent: list, key of the block at ``depth - 1`` (``None`` at depth 0).
        request_id: list, id of the request that stored the block.
        depth: int64 array, 0-based chain position.
        num_tokens: int64 array, tokens held (the block size).
        session: int64 array, interned session id (``-1``: no session);
            :attr:`sessions` maps it back to the session string.
        access_count: int64 array, stores + hits (>= 1 while cached).
        last_access: float64 array, ``now`` (seconds) of the last store or hit.
        stored_at: float64 array, ``now`` (seconds) of the store.
        sessions: list of session strings, indexed by interned id.
        keys_only: the runtime keeps only ``key`` current (the policy declared
            the ``keys-only`` capability): a :class:`BlockBatch` then refuses
            every column but ``keys`` and ``ids``, rather than hand out stale
            values.
        kept: the columns the runtime keeps current, or ``None`` (all):
            ``{"key"}`` with ``keys_only``, ``{"key", "parent", "depth"}``
            with ``chain_only`` (capability ``chain-only``); a
            :class:`BlockBatch` refuses the others.
        capability: the capability that restricts the columns
            (``"keys-only"``, ``"chain-only"``), or ``None``.
    """

    __slots__ = ("key", "parent", "request_id", "depth", "num_tokens", "session", "access_count",
                 "last_access", "stored_at", "sessions", "_session_ids", "keys_only", "_keys_view", "kept",
                 "capability")

    def __init__(self, num_blocks: int, keys_only: bool = False, chain_only: bool = False) -> None:
        self.keys_only = keys_only
        if keys_only:
            self.kept, self.capability = frozenset({"key"}), "keys-only"
        elif chain_only:
            self.kept, self.capability = frozenset({"key", "parent", "depth"}), "chain-only"
        else:
            self.kept = self.capability = None
        self._keys_view = _PartialTable(self) if self.kept is not None else None
        self.key: list = [None] * num_blocks
        self.parent: list = [None] * num_blocks
        self.request_id: list = [None] * num_blocks
        self.depth = np.zeros(num_blocks, np.int64)
        self.num_tokens = np.zeros(num_blocks, np.int64)
        self.session = np.full(num_blocks, -1, np.int64)
        self.access_count = np.zeros(num_blocks, np.int64)
        self.last_access = np.zeros(num_blocks, np.float64)
        self.stored_at = np.zeros(num_blocks, np.float64)
        self.sessions: list[str] = []
        self._session_ids: dict[str, int] = {}

    def session_id(self, session: str | None) -> int:
        """Interned id of ``session`` (``-1`` for ``None``), allocated on first use."""
        if session is None:
            return -1
        sid = self._session_ids.get(session)
        if sid is None:
            sid = self._session_ids[session] = len(self.sessions)
            self.sessions.append(session)
        return sid

    def view(self, i: int) -> BlockView:
        """The frozen :class:`BlockView` of block ``i`` (a copy: later events do not change it)."""
        s = int(self.session[i])
        return BlockView(self.key[i], int(self.depth[i]), self.parent[i], int(self.num_tokens[i]),
                         self.sessions[s] if s >= 0 else None, self.request_id[i],
                         int(self.access_count[i]), float(self.last_access[i]), float(self.stored_at[i]))


class _PartialTable:
    """What a ``keys-only`` or ``chain-only`` policy sees as
    :attr:`BlockBatch.table`: the columns the runtime keeps current
    (:attr:`BlockTable.kept`: ``key``; with ``chain-only`` also ``parent`` and
    ``depth``), ``keys_only`` and ``kept``; every other column or method of
    :class:`BlockTable` raises ``AttributeError`` naming it and the
    capability, since the runtime does not keep them current for such a
    policy (they would read stale values)."""

    __slots__ = ("_t",)

    def __init__(self, table: BlockTable) -> None:
        self._t = table

    @property
    def key(self) -> list:
        return self._t.key

    @property
    def keys_only(self) -> bool:
        return self._t.keys_only

    @property
    def kept(self) -> frozenset:
        return self._t.kept

    def __getattr__(self, name: str):  # called only for names not found above: the table's other columns
        t = object.__getattribute__(self, "_t") if name != "_t" else None  # (_t unset: a copy being built)
        if t is not None and name in t.kept:
            return getattr(t, name)
        if t is not None and not name.startswith("__") and hasattr(t, name):
            raise AttributeError(f"BlockBatch.table.{name}: the policy declared capability {t.capability!r}, so the "
                                 f"runtime keeps only {_kept_names(t)} (drop the capability to read other columns)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


#: Backward-compatible name of :class:`_PartialTable`.
_KeysOnlyTable = _PartialTable


def _kept_names(t: BlockTable) -> str:
    return "keys and ids" if t.keys_only else "keys, ids, depth and parents"


class BlockBatch:
    """The blocks of one hook call, in the batch form: columns as arrays.

    The batch form costs one numpy fancy-index per column a policy reads
    (columns are computed on first access and cached); nothing is built per
    block unless the policy iterates. The per-block form is the same object
    used as a sequence: ``len(batch)``, ``batch[j]`` and ``for b in batch``
    give frozen :class:`BlockView` objects (built on demand, about a
    microsecond each), so a policy written against ``Sequence[BlockView]``
    keeps working.

    Attributes (all of length ``len(batch)``, in the batch's order):
        ids: int64 array, physical block ids (stable while the block is cached).
        keys: list of block hashes (Python ints; hashable dict keys).
        parents: list of parent block hashes (``None`` at depth 0).
        parent_index: int64 array, position in this batch of each block's
            parent, ``-1`` if the parent is not in the batch.
        depth, num_tokens, session, access_count: int64 arrays (see
            :class:`BlockTable`; ``session`` is an interned id, ``-1`` none).
        last_access, stored_at: float64 arrays, seconds.
        request_ids: list of request ids.
        table: the :class:`BlockTable` (e.g. ``table.sessions[sid]``). With
            ``keys-only`` a view of it that has ``key`` only: its other
            columns are not kept, and reading one raises ``AttributeError``.

    Do not keep a batch beyond the hook call: the runtime reuses block ids.

    A policy that declares the ``keys-only`` capability (its hooks read
    ``keys``, ``ids`` and ``len`` only) spares the runtime every other
    column's bookkeeping; reading another column, or a :class:`BlockView`,
    then raises ``AttributeError`` (a :class:`~spfcore.runtime.PolicyError`
    naming the policy and the hook, once the runtime has wrapped it).
    """

    __slots__ = ("_table", "_ids", "_arr", "_cols")

    def __init__(self, table: BlockTable, ids, ids_array: np.ndarray | None = None,
                 keys: list | None = None) -> None:
        """``ids``: the physical block ids, a sequence or an int64 array;
        ``ids_array``: the same ids as an int64 array, when the caller has
        both forms (neither is then converted); ``keys``: the list
        ``table.key[i] for i in ids``, when the caller has it (the runtime's
        store: not gathered again; the batch owns the list)."""
        self._table = table
        if type(ids) is np.ndarray:  # an int64 array of ids: the list is made if needed
            self._arr, self._ids = ids.astype(np.int64, copy=False), None
        else:
            self._ids = ids  # list (or sequence) of physical block ids
            self._arr = ids_array
        self._cols: dict = {} if keys is None else {"keys": keys}

    @classmethod
    def of(cls, views) -> BlockBatch:
        """A batch holding copies of ``views`` (a sequence of :class:`BlockView`),
        on a table of its own: for calling a policy's hooks directly in tests."""
        views = list(views)
        t = BlockTable(len(views))
        for i, b in enumerate(views):
            t.key[i], t.parent[i], t.request_id[i] = b.key, b.parent, b.request_id
            t.depth[i], t.num_tokens[i], t.session[i] = b.depth, b.num_tokens, t.session_id(b.session_id)
            t.access_count[i], t.last_access[i], t.stored_at[i] = b.access_count, b.last_access, b.stored_at
        return cls(t, list(range(len(views))))

    def _refuse(self, what: str):
        """Raise for a column the runtime does not keep (:attr:`BlockTable.kept`)."""
        t = self._table
        raise AttributeError(f"BlockBatch.{what}: the policy declared capability {t.capability!r}, so the runtime "
                             f"keeps only {_kept_names(t)} (drop the capability to read other columns)")

    def _need(self, column: str, what: str) -> None:
        """Refuse ``what`` unless the runtime keeps table column ``column``."""
        kept = self._table.kept
        if kept is not None and column not in kept:
            self._refuse(what)

    def _list(self):
        ids = self._ids
        if ids is None:
            ids = self._ids = self._arr.tolist()
        return ids

    @property
    def table(self):
        """The runtime's :class:`BlockTable` (a keys-only view of it for a ``keys-only`` policy)."""
        t = self._table
        return t if t._keys_view is None else t._keys_view

    def __len__(self) -> int:
        return len(self._arr) if self._ids is None else len(self._ids)

    def __iter__(self):
        if self._table.kept is not None:
            self._refuse("__iter__ (per-block views)")
        view = self._table.view
        return (view(i) for i in self._list())

    def __getitem__(self, j):
        if self._table.kept is not None:
            self._refuse("__getitem__ (per-block views)")
        if isinstance(j, slice):
            return [self._table.view(i) for i in list(self._list())[j]]
        return self._table.view(self._list()[j])

    def __repr__(self) -> str:
        return f"BlockBatch({len(self)} blocks)"

    @property
    def ids(self):
        a = self._arr
        if a is None:
            ids = self._ids
            t = type(ids)
            a = self._arr = np.fromiter(ids, np.int64, len(ids)) if t is list or t is tuple else \
                np.asarray(ids, dtype=np.int64)
        return a

    def _col(self, name: str):
        c = self._cols.get(name)
        if c is None:
            kept = self._table.kept
            if kept is not None and name not in kept:
                self._refuse(name)
            c = self._cols[name] = getattr(self._table, name)[self.ids]
        return c

    @property
    def keys(self) -> list:
        c = self._cols.get("keys")
        if c is None:
            c = self._cols["keys"] = gather(self._table.key, self._list())
        return c

    @property
    def parents(self) -> list:
        self._need("parent", "parents")
        return gather(self._table.parent, self._list())

    @property
    def request_ids(self) -> list:
        self._need("request_id", "request_ids")
        return gather(self._table.request_id, self._list())

    @property
    def parent_index(self):
        self._need("parent", "parent_index")
        pos = {k: j for j, k in enumerate(self.keys)}
        return np.fromiter((pos.get(p, -1) for p in self.parents), np.int64, len(self))

    depth = property(lambda self: self._col("depth"))
    num_tokens = property(lambda self: self._col("num_tokens"))
    session = property(lambda self: self._col("session"))
    access_count = property(lambda self: self._col("access_count"))
    last_access = property(lambda self: self._col("last_access"))
    stored_at = property(lambda self: self._col("stored_at"))


@attrs.frozen(slots=True)
class Scores:
    """Retention priorities of a whole batch (the batch form of :class:`Score`).

    Each field is an array-like of one entry per block (numpy arrays or
    lists) or a scalar applied to every block.

    Attributes:
        values: Retention priority per block (float; lower is evicted sooner).
        expires_at: Seconds after which each block is re-scored (``math.inf``: never).
        expires_at_arrival: Arrival index at which each block is re-scored
            (``2**62`` or more: never).
        pinned: Whether each block asks for a pin (see :class:`Score`); a
            pinned block needs a finite expiry.
    """

    values: object
    expires_at: object = math.inf
    expires_at_arrival: object = NEVER_ARRIVAL
    pinned: object = False
