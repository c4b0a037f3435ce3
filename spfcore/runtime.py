"""PolicyRuntime: the event façade both drivers (simulator, vLLM adapter) call.

It keeps per-block metadata (key, depth, session, access count, ...), turns
events into hook calls with read-only views, owns the :class:`Evictor`, counts
prefetch hints, and times every hook call. Drivers report physical block ids;
policies only ever see :class:`~spfcore.views.BlockView` and
:class:`~spfcore.views.RequestView`.
"""

from __future__ import annotations

import math
import numbers
import signal
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from itertools import repeat
from operator import is_not

import numpy as np
import pluggy

try:  # pluggy's plain hook executor; a PluginManager still using it has no call monitoring
    from pluggy._callers import _multicall as _PLAIN_EXEC
except ImportError:  # pragma: no cover - another pluggy layout: every call goes through pluggy
    _PLAIN_EXEC = None

from spfcore import hookspecs
from spfcore.evictor import NEVER_ARRIVAL, Evictor
from spfcore.hookspecs import HOOK_NAMES
from spfcore.views import BlockBatch, BlockTable, BlockView, RequestView, Score, Scores, gather

_perf = time.perf_counter
#: ``ids`` (a list, tuple or int64 array of block ids) as an int64 array, in one pass.
_id_array = Evictor._ids


#: Blocks up to which :meth:`PolicyRuntime.stored` writes the table with scalar stores.
_SMALL = 8
#: Victims above which :meth:`PolicyRuntime.evict` drops their keys from the key map in bulk.
_BULK = 16
#: Hooks that read a block's columns (depth, access count, ...) through a
#: :class:`~spfcore.views.BlockBatch`; a policy with none of them (lru) needs
#: only the keys kept.
_READS_BLOCKS = ("spfcore_blocks_hit", "spfcore_blocks_stored", "spfcore_score_blocks", "spfcore_admit_blocks",
                 "spfcore_choose_victims", "spfcore_evict_blocks")
#: ``_HELD(x)``: ``x is not None`` (a C-level filter predicate).
_HELD = partial(is_not, None)
#: The type of a block id as the evictor hands it out.
_INT = frozenset({int})
#: Python scalar types of a :class:`~spfcore.views.Scores` field given for every block.
_SCALARS = frozenset({float, int, bool})
#: Each hook's argument names, in the spec's order (:meth:`PolicyRuntime._fire` passes them positionally).
_SPEC_ARGS = {n: tuple(getattr(hookspecs, n).__code__.co_varnames[:getattr(hookspecs, n).__code__.co_argcount])
              for n in HOOK_NAMES}
#: The numpy columns of :class:`~spfcore.views.BlockTable`.
_NUMERIC = ("depth", "num_tokens", "session", "access_count", "last_access", "stored_at")


class PolicyError(RuntimeError):
    """A policy hook raised, returned something invalid or overran its time
    budget.

    The message names the policy and the hook; ``policy`` and ``hook`` hold
    them (``None`` where unknown) and the original exception is chained as
    ``__cause__``.
    """

    def __init__(self, message: str, *, policy: str | None = None, hook: str | None = None) -> None:
        super().__init__(message)
        self.policy, self.hook = policy, hook

    def to_json(self) -> dict:
        """``{"policy", "hook", "message"}`` for a results cell."""
        return {"policy": self.policy, "hook": self.hook, "message": str(self)}


class HookTimeout(BaseException):
    """Raised inside a hook by the SIGALRM timer of a time budget. A
    ``BaseException``, so a hook's ``except Exception`` does not swallow it."""


#: Environment variable: default per-call hook budget, milliseconds (unset: none).
BUDGET_ENV = "SPFCORE_HOOK_BUDGET_MS"


def _bad(policy: str, hook: str, what: str) -> PolicyError:
    return PolicyError(f"policy {policy!r}: hook {hook} returned {what}", policy=policy, hook=hook)


def _column(x, n: int, default, policy: str, field: str, arrays: bool = False):
    """One :class:`Scores` field as a list of ``n`` entries, or ``None`` when
    it is the default for every block. ``arrays``: a numeric numpy array is
    kept as it is (checked for shape and, for reals, NaN by the caller)."""
    if type(x) in _SCALARS or np.ndim(x) == 0:  # (np.ndim converts a Python scalar first: ~2 us)
        if x == default or (x != x and default != default):
            return None
        return [x.item() if isinstance(x, np.generic) else x] * n
    if arrays and isinstance(x, np.ndarray) and x.dtype.kind in ("fiub" if field == "pinned" else "fiu") \
            and x.ndim == 1:
        if len(x) != n:
            raise _bad(policy, "spfcore_score_blocks", f"Scores.{field} of length {len(x)} for {n} blocks")
        return x
    lst = x.tolist() if isinstance(x, np.ndarray) else list(x)
    if len(lst) != n:
        raise _bad(policy, "spfcore_score_blocks", f"Scores.{field} of length {len(lst)} for {n} blocks")
    return lst


def score_columns(res, n: int, policy: str = "?"):
    """Normalize an answer of ``spfcore_score_blocks`` for ``n`` blocks to the
    evictor's columns ``(values, expires_at, expires_at_arrival, pinned)``
    (lists, or ``None`` for a field at its default for every block).

    The runtime itself uses :func:`score_arrays` (the same checks; numpy
    fields stay numpy arrays).

    Accepted answers: ``None`` (vLLM's order); a :class:`~spfcore.views.Scores`;
    a numpy array of reals; a sequence of ``float``, ``int``, ``None`` (0.0) or
    :class:`~spfcore.views.Score` (the per-block form).

    Raises:
        PolicyError: wrong length, a value that is not a real number or is
            NaN (NaN has no order), or a pin without an expiry; the message
            names the policy, the hook and the position.
    """
    cols = _score_cols(res, n, policy, False)
    if cols is None:
        return None
    return tuple(c.tolist() if isinstance(c, np.ndarray) else c for c in cols)


def score_arrays(res, n: int, policy: str = "?"):
    """:func:`score_columns` with numpy fields kept as numpy arrays (values
    float64; expiries, pins as the policy gave them; lists elsewhere): the
    form the runtime hands its :class:`Evictor`, with no per-block Python
    work for a policy answering :class:`~spfcore.views.Scores` of arrays.

    Raises:
        PolicyError: as :func:`score_columns`.
    """
    return _score_cols(res, n, policy, True)


def _score_cols(res, n: int, policy: str, arrays: bool):
    hook = "spfcore_score_blocks"
    if res is None:
        return None
    if isinstance(res, Scores):
        v = res.values
        if type(v) is float:  # one value for every block (the usual Scores(0.0))
            if v != v and n:
                raise _bad(policy, hook, f"{v!r} at position 0: a score must be a real number (not NaN)")
            values = np.empty(n, np.float64)
            values.fill(v)
        else:
            vals = np.asarray(v)
            if vals.ndim == 0:
                vals = np.full(n, vals)
            values = _values(vals, n, policy)
        exp_t = _column(res.expires_at, n, math.inf, policy, "expires_at", arrays)
        exp_a = _column(res.expires_at_arrival, n, NEVER_ARRIVAL, policy, "expires_at_arrival", arrays)
        if exp_t is not None:
            _reals(exp_t, policy, "expires_at")
        if exp_a is not None:
            _reals(exp_a, policy, "expires_at_arrival")
            if isinstance(exp_a, np.ndarray):
                if exp_a.dtype.kind == "f":
                    if np.isneginf(exp_a).any():
                        raise OverflowError("cannot convert float infinity to integer")
                    exp_a = np.where(exp_a >= NEVER_ARRIVAL, float(NEVER_ARRIVAL), np.trunc(exp_a))
                elif exp_a.dtype.kind == "u":  # clipped before the cast (a uint64 above 2**63 would wrap)
                    exp_a = np.minimum(exp_a, np.uint64(NEVER_ARRIVAL)).astype(np.int64)
                else:  # int8..int64: widened first (2**62 does not fit a narrower int)
                    exp_a = np.minimum(exp_a.astype(np.int64, copy=False), NEVER_ARRIVAL)
            else:
                exp_a = [NEVER_ARRIVAL if x >= NEVER_ARRIVAL else int(x) for x in exp_a]
        pins = _column(res.pinned, n, False, policy, "pinned", arrays)
        if isinstance(pins, np.ndarray):
            pins = pins.astype(np.bool_, copy=False)
            bad = pins
            if exp_t is not None:
                bad = bad & (np.asarray(exp_t, np.float64) == math.inf)
            if exp_a is not None:
                bad = bad & (np.asarray(exp_a) >= NEVER_ARRIVAL)
            if bad.any():
                raise _bad(policy, hook, f"a pin without an expiry at position {int(bad.argmax())} "
                           "(it could hold its block forever)")
        elif pins is not None:
            for j, p in enumerate(pins):
                if p and (exp_t is None or exp_t[j] == math.inf) and (exp_a is None or exp_a[j] >= NEVER_ARRIVAL):
                    raise _bad(policy, hook, f"a pin without an expiry at position {j} (it could hold its block forever)")
        return values, exp_t, exp_a, pins
    if isinstance(res, np.ndarray):
        return _values(res, n, policy), None, None, None
    if isinstance(res, (str, bytes, Mapping)):
        raise _bad(policy, hook, f"a {type(res).__name__}: need one score per block")
    res = list(res)
    if len(res) != n:
        raise _bad(policy, hook, f"{len(res)} results for {n} blocks")
    values = []
    exp_t = exp_a = pins = None
    for j, x in enumerate(res):
        t = type(x)
        if t is float:
            if x != x:
                raise _bad(policy, hook, f"{x!r} at position {j}: a score must be a real number (not NaN), None or a Score")
            values.append(x)
            continue
        if t is Score:
            v = x.value
            if (type(v) is bool or not isinstance(v, numbers.Real)) or v != v:
                raise _bad(policy, hook, f"{x!r} at position {j}: a score must be a real number (not NaN), None or a Score")
            values.append(float(v))
            if x.expires_at != math.inf:
                _reals((x.expires_at,), policy, "expires_at", j)
                if exp_t is None:
                    exp_t = [math.inf] * n
                exp_t[j] = x.expires_at
            if x.expires_at_arrival != NEVER_ARRIVAL:
                _reals((x.expires_at_arrival,), policy, "expires_at_arrival", j)
            if x.expires_at_arrival < NEVER_ARRIVAL:
                if exp_a is None:
                    exp_a = [NEVER_ARRIVAL] * n
                exp_a[j] = x.expires_at_arrival
            if x.pinned:
                if pins is None:
                    pins = [False] * n
                pins[j] = True
            continue
        if x is None:
            values.append(0.0)
            continue
        if t is bool or not isinstance(x, numbers.Real) or x != x:
            raise _bad(policy, hook, f"{x!r} at position {j}: a score must be a real number (not NaN), None or a Score")
        values.append(float(x))
    return values, exp_t, exp_a, pins


def _reals(xs, policy: str, field: str, at: int = 0) -> None:
    """Raise :class:`PolicyError` unless every ``xs`` is a real number, not NaN."""
    if isinstance(xs, np.ndarray):  # numeric (see _column): only NaN to find
        if xs.dtype.kind == "f":
            nan = np.isnan(xs)
            if nan.any():
                j = int(nan.argmax())
                raise _bad(policy, "spfcore_score_blocks",
                           f"{field}={float(xs[j])!r} at position {at + j}: an expiry must be a real number (not NaN)")
        return
    for j, x in enumerate(xs):
        t = type(x)
        if (t is float or t is int) and x == x:
            continue
        if t is bool or not isinstance(x, numbers.Real) or x != x:
            raise _bad(policy, "spfcore_score_blocks",
                       f"{field}={x!r} at position {at + j}: an expiry must be a real number (not NaN)")


def admit_column(res, n: int, policy: str = "?"):
    """Normalize an answer of ``spfcore_admit_blocks`` for ``n`` blocks to a
    list of ``n`` bools, or ``None`` (admit all).

    Raises:
        PolicyError: not a sequence of ``n`` bools (the message names the
            policy, the hook and what came back).
    """
    if res is None:
        return None
    hook = "spfcore_admit_blocks"
    if isinstance(res, np.ndarray) and res.dtype == np.bool_ and res.ndim == 1:
        if len(res) != n:
            raise _bad(policy, hook, f"{len(res)} results for {n} blocks")
        return res.tolist()  # bools already: no per-entry check
    try:
        out = res.tolist() if isinstance(res, np.ndarray) else list(res)
    except Exception as exc:
        raise _bad(policy, hook, f"{res!r:.80}: need {n} bools") from exc
    if len(out) != n:
        raise _bad(policy, hook, f"{len(out)} results for {n} blocks")
    for j, x in enumerate(out):
        if not isinstance(x, (bool, np.bool_)):
            raise _bad(policy, hook, f"{x!r} at position {j}: admission answers are bools")
    return [bool(x) for x in out]


def _values(a: np.ndarray, n: int, policy: str) -> np.ndarray:
    hook = "spfcore_score_blocks"
    if a.shape != (n,):
        raise _bad(policy, hook, f"an array of shape {a.shape} for {n} blocks")
    if a.dtype.kind not in "fiu":
        raise _bad(policy, hook, f"an array of dtype {a.dtype}: scores must be real numbers")
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if nan.any():
            j = int(nan.argmax())
            raise _bad(policy, hook, f"{float(a[j])!r} at position {j}: a score must be a real number (not NaN)")
    return a.astype(np.float64, copy=False)


def _budgeted(hook, kw: dict, budget: float):
    """``hook(**kw)`` under a SIGALRM timer of ``budget`` seconds (raising
    :class:`HookTimeout` in the hook) where one can be used, else plainly.
    A timer that rang inside a C call which turned its :class:`HookTimeout`
    into another exception (a numba function's dispatcher raises
    ``SystemError``) still raises :class:`HookTimeout`."""
    if (not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL)[0]):
        return hook(**kw)
    armed, rang = [True], [False]

    def ring(signum, frame):
        if armed[0]:
            rang[0] = True
            raise HookTimeout

    old = signal.signal(signal.SIGALRM, ring)
    try:
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            return hook(**kw)
        except HookTimeout:
            raise
        except BaseException as exc:
            if rang[0]:  # the timer's HookTimeout came out of a C call as another error (a numba function
                raise HookTimeout from exc  # returns SystemError "returned a result with an exception set")
            raise
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old)


def _direct_call(pm: pluggy.PluginManager, name: str):
    """A plain function calling hook ``name``'s single implementation as
    pluggy would (``hook(**kw)``: the result of a ``firstresult`` hook, else
    the list of non-``None`` results), without pluggy's per-call dispatch
    (about 2 us a call, the bulk of a small hook's cost); ``None`` where
    pluggy must dispatch (no or several implementations, a wrapper, or a
    PluginManager with call monitoring)."""
    if _PLAIN_EXEC is None or getattr(pm, "_inner_hookexec", None) is not _PLAIN_EXEC:
        return None
    hc = getattr(pm.hook, name)
    impls = hc.get_hookimpls()
    if len(impls) != 1 or impls[0].hookwrapper or impls[0].wrapper or hc.spec is None:
        return None
    fn, names = impls[0].function, tuple(impls[0].argnames)
    spec_names = tuple(hc.spec.argnames)
    first = bool(hc.spec.opts.get("firstresult"))
    if first and names == spec_names:
        return fn  # keyword call, as pluggy's positional one: the names are the spec's
    if first:
        return lambda **kw: fn(*[kw[a] for a in names])

    def call(**kw):
        res = fn(*[kw[a] for a in names])
        return [] if res is None else [res]
    return call


def _positional_call(pm: pluggy.PluginManager, name: str):
    """A plain function calling hook ``name``'s single implementation with
    the spec's arguments *positionally*, in the spec's order, returning what
    the implementation returns (for a ``firstresult`` hook: pluggy's answer;
    for an observation hook: the raw result, which the runtime ignores);
    ``None`` where :func:`_direct_call` is ``None``. No keyword dict is built
    per call: the cheapest call of a hook that Python allows."""
    if _direct_call(pm, name) is None:
        return None
    hc = getattr(pm.hook, name)
    impl = hc.get_hookimpls()[0]
    fn, names, spec_names = impl.function, tuple(impl.argnames), tuple(hc.spec.argnames)
    if names == spec_names:
        return fn
    pick = [spec_names.index(a) for a in names]  # an implementation takes a subset, in any order
    return lambda *a: fn(*[a[j] for j in pick])


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
        hook_budget_s: Most wall time of one hook call, seconds, or ``None``
            (no budget). A call over it raises :class:`PolicyError`; see
            :meth:`_call` for how a hook that never returns is stopped.
        keys_only: The policy declared capability ``keys-only``: its hooks
            read only ``keys``, ``ids`` and ``len`` of a
            :class:`~spfcore.views.BlockBatch`, so the table keeps keys alone
            (no parent, request id or numeric column is written; the batch
            refuses them).
        chain_only: The policy declared capability ``chain-only``: its hooks
            read only ``keys``, ``ids``, ``len``, ``depth``, ``parents`` and
            ``parent_index`` of a :class:`~spfcore.views.BlockBatch` (and
            ``table.key``, ``table.parent``, ``table.depth``), so the table
            keeps those columns alone (no request id, session, token count,
            access count or time is written; the batch refuses them).
            ``keys_only`` wins when both are given.
        key_map: Keep :attr:`by_key` (block hash -> block id) current for the
            driver (:meth:`block_of`, :meth:`cached_keys`). A driver that keeps
            its own prefix-cache map (the simulator, the vLLM adapter) passes
            ``False``: a store and an eviction then write no dict entry per
            block (do-nothing policies' runtime cost 0.6-0.8x on the seed's
            workload, results/issue11-s20-floor). The map is kept all the
            same for a policy whose hooks name blocks by hash
            (``spfcore_rescore_keys``, ``spfcore_prefetch_hints``), so
            decisions do not depend on it.
    """

    #: The keys :meth:`stored` takes: block keys (``False``), or, for a
    #: compiled engine runtime (:mod:`spfcore.engine.compiled`), vLLM's
    #: ``BlockHash`` bytes themselves (the adapter then builds no keys).
    wants_block_hashes = False

    def __init__(self, pm: pluggy.PluginManager, num_blocks: int, block_size: int, *,
                 policy_name: str = "?", needs_future: bool = False,
                 pin_cap_fraction: float = 0.5, hook_budget_s: float | None = None,
                 keys_only: bool = False, chain_only: bool = False, key_map: bool = True) -> None:
        self.pm, self.hook, self.policy_name = pm, pm.hook, policy_name
        self.hook_budget_s = hook_budget_s
        self.num_blocks, self.block_size = num_blocks, block_size
        self.needs_future, self._future_set = needs_future, False
        self.table = BlockTable(num_blocks, keys_only=keys_only, chain_only=chain_only and not keys_only)
        self.by_key: dict[object, int] = {}  # block hash -> physical id of the cached block (if keyed)
        self.arrival = 0
        self.hook_seconds = 0.0
        self.hook_calls = 0
        self.policy_seconds = 0.0  # wall time in the events (arrived .. evict, touch), hooks included
        self.evictions = 0
        self.evict_seconds = 0.0  # wall time in evict(), hooks included (per-allocation cost)
        self.evict_calls = 0
        self.hints_issued = 0
        self.hints_used = 0
        #: pins refused by a driver that decided for the evictor (the simulator's compiled
        #: session_ttl replay), counted in :meth:`stats` beside the evictor's own
        self.pins_refused_replayed = 0
        self._hints: dict[object, list] = {}  # key -> [hint record [expiry, used]]

        def has(name: str) -> bool:
            return bool(getattr(pm.hook, name).get_hookimpls())

        self._has = {n: has(n) for n in HOOK_NAMES}
        #: Whether the table keeps every column (else keys only: no hook of the policy reads a block, or
        #: the policy declared it reads keys alone).
        self.track = any(self._has[n] for n in _READS_BLOCKS) and not keys_only
        #: The table keeps keys, parents and depths only (capability ``chain-only``).
        self._chain_only = self.track and chain_only
        self._evicted_hook = self._has["spfcore_blocks_evicted"]
        #: Whether :attr:`by_key` is kept (see ``key_map``): else it stays empty.
        self.keyed = key_map or self._has["spfcore_rescore_keys"] or self._has["spfcore_prefetch_hints"]
        #: An arrival has nothing to do but its ``spfcore_request_arrived`` call: no score to expire
        #: (no decision hook, or policy-ordered mode), no re-score or hint hook.
        self._arrival_only = not any(self._has[n] for n in ("spfcore_rescore_keys", "spfcore_prefetch_hints",
                                                            "spfcore_score_blocks", "spfcore_admit_blocks",
                                                            "spfcore_choose_victims"))
        self._quiet_arrival = self._arrival_only and not self._has["spfcore_request_arrived"]
        self._direct = {n: d for n in HOOK_NAMES if (d := _direct_call(pm, n)) is not None}
        self._pos = {n: f for n in HOOK_NAMES if (f := _positional_call(pm, n)) is not None}
        table = self.table
        score = admit = choose = None
        shared = [None, None]  # (ids, batch) of the last admission call: its score call reuses the batch
        #: (ids array, ids list) of the release in progress (:meth:`release`): its batches get both forms
        self._released = released = [None, None]

        def batch_of(ids):
            if released[0] is ids:
                return BlockBatch(table, released[1], ids_array=ids)
            return BlockBatch(table, ids)

        if self._has["spfcore_score_blocks"]:
            def score(ids, now):
                if shared[0] is ids:  # the same release: one batch (columns read once) for both hooks
                    batch = shared[1]
                    shared[0] = shared[1] = None
                else:
                    batch = batch_of(ids)
                res = self._fire("spfcore_score_blocks", batch, now)
                try:
                    return score_arrays(res, len(ids), self.policy_name)
                except (TypeError, ValueError, OverflowError) as exc:  # e.g. a bare number: not a sequence
                    raise _bad(self.policy_name, "spfcore_score_blocks", f"{res!r:.80}: {exc}") from exc
        if self._has["spfcore_admit_blocks"]:
            def admit(ids, now):
                batch = batch_of(ids)
                shared[0], shared[1] = ids, batch
                res = self._fire("spfcore_admit_blocks", batch, now)
                if isinstance(res, np.ndarray) and res.dtype == np.bool_ and res.shape == (len(ids),):
                    return res  # bools already, as the evictor takes them
                return admit_column(res, len(ids), self.policy_name)
        if self._has["spfcore_choose_victims"]:
            def choose(ids, n, now):
                # validated here, so a bad answer is a PolicyError naming the policy
                # and the hook before the evictor sees it
                hook = "spfcore_choose_victims"
                res = self._fire(hook, BlockBatch(table, ids), n, now)
                if res is None:
                    return None
                try:
                    if isinstance(res, (str, bytes, Mapping)):
                        raise TypeError(type(res).__name__)
                    idx = res.tolist() if isinstance(res, np.ndarray) else list(res)
                except TypeError:
                    raise _bad(self.policy_name, hook, f"{res!r}: need a sequence of {n} indices") from None
                if (len(idx) != n or not all(isinstance(k, numbers.Integral) and not isinstance(k, bool)
                                             and 0 <= k < len(ids) for k in idx) or len(set(idx)) != n):
                    raise _bad(self.policy_name, hook, f"{idx!r}: need {n} distinct int indices < {len(ids)}")
                return [int(k) for k in idx]
        evict = None
        if self._has["spfcore_evict_blocks"]:  # policy-ordered mode (hookspecs.spfcore_evict_blocks)
            if score or admit or choose:
                raise PolicyError(f"policy {policy_name!r} implements spfcore_evict_blocks (policy-ordered mode) "
                                  "and a score, admit or choose_victims hook: implement one mode",
                                  policy=policy_name, hook="spfcore_evict_blocks")

            def evict(n, free, now):
                hook = "spfcore_evict_blocks"
                res = self._fire(hook, n, free, now)
                try:
                    if res is None or isinstance(res, (str, bytes, Mapping)):
                        raise TypeError(type(res).__name__)
                    ids = res.tolist() if isinstance(res, np.ndarray) else list(res)
                except TypeError:
                    raise _bad(self.policy_name, hook, f"{res!r:.80}: need a sequence of {n} block ids") from None
                plain = set(map(type, ids)) <= _INT  # the usual answer: plain ints, checked in C
                if (len(ids) != n or len(set(ids)) != n
                        or not (plain or all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in ids))
                        or not all(map(free.__contains__, ids))):
                    raise _bad(self.policy_name, hook, f"{ids!r:.200}: need {n} distinct ids of free cached blocks")
                return ids if plain else [int(i) for i in ids]
        self.evictor = Evictor(num_blocks, score=score, admit=admit, choose=choose, evict=evict,
                               pin_cap_fraction=pin_cap_fraction, score_arrays=True)
        self._call("spfcore_cache_configured", None, num_blocks=num_blocks, block_size=block_size)

    @classmethod
    def for_policy(cls, name: str, num_blocks: int, block_size: int,
                   options: dict[str, str] | None = None, env=None,
                   hook_budget_ms: float | None = None, key_map: bool = True) -> PolicyRuntime:
        """Build a runtime for the installed policy ``name`` with string options.

        Args:
            key_map: see :class:`PolicyRuntime` (``False``: the driver keeps
                its own hash map; :meth:`block_of` then raises).
            hook_budget_ms: Per-call hook budget, milliseconds; ``None``: the
                environment's ``SPFCORE_HOOK_BUDGET_MS`` (``env``, default
                ``os.environ``), else no budget.

        Raises:
            spfcore.registry.PolicyConfigError: unknown/broken policy, bad
                option or bad budget.
            PolicyError: the policy's constructor raised (hook ``__init__``)
                or its ``spfcore_cache_configured`` hook failed.
        """
        import os

        from spfcore import registry

        info = registry.get(name, env)
        if hook_budget_ms is None:
            raw = (os.environ if env is None else env).get(BUDGET_ENV, "").strip()
            try:
                hook_budget_ms = float(raw) if raw else None
            except ValueError:
                raise registry.PolicyConfigError(f"{BUDGET_ENV}={raw!r}: expected milliseconds > 0") from None
        if hook_budget_ms is not None and not hook_budget_ms > 0:
            raise registry.PolicyConfigError(f"hook budget {hook_budget_ms!r} ms: must be > 0")
        pm, instance = registry.plugin_manager(info, options)
        cap = getattr(instance.params, "pin_cap_fraction", 0.5)  # params: checked at discovery
        if not (isinstance(cap, numbers.Real) and 0 <= cap <= 1):
            raise registry.PolicyConfigError(f"policy {name!r}: pin_cap_fraction must be in [0, 1], got {cap!r}")
        return cls(pm, num_blocks, block_size, policy_name=name,
                   needs_future="needs-future" in info.capabilities, pin_cap_fraction=cap,
                   keys_only="keys-only" in info.capabilities, chain_only="chain-only" in info.capabilities,
                   key_map=key_map, hook_budget_s=None if hook_budget_ms is None else hook_budget_ms / 1e3)

    # ------------------------------------------------------------ plumbing
    def _call(self, name: str, expect_len: int | None, **kw):
        """Call hook ``name``; every fault becomes a :class:`PolicyError`
        naming the policy and the hook.

        Time budget (``hook_budget_s``): a call that returns after more than
        the budget fails. A call that does not return is interrupted by a
        SIGALRM timer at the budget, only where Python can do that: in the
        main thread, on a platform with ``signal.setitimer``, when no other
        interval timer is running, and only between bytecodes (a hook stuck
        in one long C call is stopped when that call returns). Elsewhere the
        budget is checked after the call returns.

        Raises:
            PolicyError: the hook raised, was interrupted or overran the
                budget, or returned ``expect_len`` mismatching results.
        """
        budget, pol = self.hook_budget_s, self.policy_name
        hook = self._direct.get(name)
        if hook is None or self.pm._inner_hookexec is not _PLAIN_EXEC:  # e.g. hook-call monitoring added
            hook = getattr(self.hook, name)
        t = _perf()
        try:
            if budget is None:
                res = hook(**kw)
            else:
                res = _budgeted(hook, kw, budget)
        except HookTimeout:
            ms = (time.perf_counter() - t) * 1e3
            raise PolicyError(f"policy {pol!r}: hook {name} interrupted after {ms:.1f} ms, over its budget of "
                              f"{budget * 1e3:g} ms", policy=pol, hook=name) from None
        except (Exception, SystemExit) as exc:  # a plugin's sys.exit() is its fault, not the run's end
            raise PolicyError(f"policy {pol!r} failed in hook {name}: {exc!r}", policy=pol, hook=name) from exc
        finally:
            dt = _perf() - t
            self.hook_seconds += dt
            self.hook_calls += 1
        if budget is not None and dt > budget:
            raise PolicyError(f"policy {pol!r}: hook {name} took {dt * 1e3:.1f} ms, over its budget of "
                              f"{budget * 1e3:g} ms", policy=pol, hook=name)
        if expect_len is not None and res is not None and len(res) != expect_len:
            raise _bad(pol, name, f"{len(res)} results for {expect_len} blocks")
        return res

    def _fire(self, name: str, *args):
        """:meth:`_call` of hook ``name`` with the spec's arguments given
        positionally, in the spec's order (see :mod:`spfcore.hookspecs`): the
        events' path. With no budget and pluggy's plain executor it calls the
        implementation itself (no keyword dict, no pluggy dispatch), timed and
        with faults turned into :class:`PolicyError` as :meth:`_call` does;
        else it is :meth:`_call`. Returns the hook's answer (an observation
        hook's answer is the implementation's raw result: ignore it).

        Raises:
            PolicyError: as :meth:`_call`.
        """
        fn = self._pos.get(name)
        if fn is None or self.hook_budget_s is not None or self.pm._inner_hookexec is not _PLAIN_EXEC:
            return self._call(name, None, **dict(zip(_SPEC_ARGS[name], args)))
        t = _perf()
        try:
            return fn(*args)
        except (Exception, SystemExit) as exc:  # a plugin's sys.exit() is its fault, not the run's end
            pol = self.policy_name
            raise PolicyError(f"policy {pol!r} failed in hook {name}: {exc!r}", policy=pol, hook=name) from exc
        finally:
            self.hook_seconds += _perf() - t
            self.hook_calls += 1

    def stats(self) -> dict:
        """Counters of this run: hook time (s) and calls, policy time (s: every
        runtime event, hooks, evictor bookkeeping and re-scoring included),
        evictions, hints, refused pins."""
        return {"hook_seconds": self.hook_seconds, "hook_calls": self.hook_calls,
                "policy_seconds": self.policy_seconds,
                "evictions": self.evictions, "evict_seconds": self.evict_seconds,
                "evict_calls": self.evict_calls, "hints_issued": self.hints_issued,
                "hints_used": self.hints_used, "pins_refused": self.evictor.pins_refused + self.pins_refused_replayed}

    # ------------------------------------------------------------ events
    def set_future(self, requests: Iterable[RequestView]) -> None:
        """Hand the future request stream (arrival order; an iterable the
        policy consumes once, e.g. a generator over a trace) to policies that
        need it."""
        self._future_set = True
        self._call("spfcore_future_requests", None, requests=requests)

    def arrived(self, request: RequestView, now: float) -> Sequence[tuple]:
        """A request arrived (before its cache lookup).

        Every hook of the arrival is called (and its answer checked) before
        anything changes, so a hook that raises or answers wrongly leaves the
        runtime as before the call.

        Returns:
            The prefetch hints the policy issued at this arrival (already
            applied to resident blocks), as ``(keys, expires_at_arrival)``
            pairs; empty if none. A driver with a slower tier promotes from them.
        """
        t0 = _perf()
        try:
            if self.needs_future and not self._future_set:
                raise PolicyError(f"policy {self.policy_name!r} needs the future request stream "
                                  "(capability needs-future) but the runner supplied none",
                                  policy=self.policy_name, hook="spfcore_future_requests")
            arrival = request.arrival_index
            if self._quiet_arrival:  # no arrival hook, no score to expire (lru, policy-ordered mode)
                self.arrival = arrival
                return ()
            if self._has["spfcore_request_arrived"]:
                self._fire("spfcore_request_arrived", request, now)
                if self._arrival_only:  # (an observation-only policy)
                    self.arrival = arrival
                    return ()
            # Re-score expired scores now (the policy has seen this arrival), not
            # only at the next eviction, so expired pins free their share of the
            # pin cap before new releases.
            ev = self.evictor
            plans = [ev.plan_expired(now, arrival)]
            if self._has["spfcore_rescore_keys"]:
                keys = self._fire("spfcore_rescore_keys", request, now)
                if keys:
                    by_key = self.by_key
                    try:
                        if isinstance(keys, (str, bytes, Mapping)):
                            raise TypeError(f"a {type(keys).__name__} is not a sequence of block keys")
                        ids = [*filter(_HELD, map(by_key.get, keys))]  # cached ones, in order (in C)
                    except TypeError as exc:
                        raise PolicyError(f"policy {self.policy_name!r}: hook spfcore_rescore_keys returned "
                                          f"{keys!r:.80}: need an iterable of block keys",
                                          policy=self.policy_name, hook="spfcore_rescore_keys") from exc
                    plans.append(ev.plan_rescore(ids, now))
            hints = ()
            if self._has["spfcore_prefetch_hints"]:
                hints = self._fire("spfcore_prefetch_hints", request, now) or ()
                hints = self._check_hints(hints)
            self.arrival = arrival  # nothing fails from here on
            for plan in plans:
                ev.commit(plan)
            self._apply_hints(hints)
            return hints
        finally:
            self.policy_seconds += _perf() - t0

    def _check_hints(self, hints) -> list:
        """The answer of ``spfcore_prefetch_hints`` as a list of ``(keys,
        expires_at_arrival)`` pairs; :class:`PolicyError` if it is not one."""
        try:
            if isinstance(hints, (str, bytes, Mapping)):
                raise TypeError(f"a {type(hints).__name__} is not a sequence of Hint objects")
            out = [(list(h.keys), h.expires_at_arrival) for h in hints]
            for keys, x in out:
                if type(x) is bool or not isinstance(x, numbers.Real) or x != x or x in (math.inf, -math.inf):
                    raise TypeError(f"expires_at_arrival={x!r} is not a finite number (a hint must lapse)")
                for k in keys:
                    hash(k)  # raises TypeError for an unhashable key, before anything changes
        except Exception as exc:
            raise PolicyError(f"policy {self.policy_name!r}: hook spfcore_prefetch_hints returned "
                              f"{hints!r:.80}: need Hint objects ({exc})",
                              policy=self.policy_name, hook="spfcore_prefetch_hints") from exc
        return out

    def _apply_hints(self, hints: list) -> None:
        if not hints:
            return
        by_key = self.by_key
        for keys, expiry in hints:
            self.hints_issued += 1
            rec = [expiry, False]
            ids = []
            for k in keys:
                self._hints[k] = rec
                i = by_key.get(k)
                if i is not None and i in self.evictor:
                    ids.append(i)
            if ids and not self.evictor.fifo:
                self.evictor.pin(ids, expiry)

    def hit(self, request: RequestView, ids: Sequence[int], now: float) -> None:
        """The request's lookup hit these blocks (depth order). The driver
        takes them out of the evictor itself (ref count 0 -> 1).

        If ``spfcore_blocks_hit`` raises, the access counts, access times and
        hint records are put back: the runtime is as before the call.
        """
        t0 = _perf()
        try:
            table = self.table
            track = self.track and not self._chain_only and ids  # (chain-only: no access counts kept)
            arr = old_last = None
            if track:
                if len(ids) <= _SMALL:  # numpy scalar stores beat fancy indexing on a few blocks
                    acc, last = table.access_count, table.last_access
                    if self._has["spfcore_blocks_hit"]:
                        old_last = [last[i] for i in ids]
                    for i in ids:  # (a hit's blocks are distinct)
                        acc[i] += 1
                        last[i] = now
                else:
                    arr = _id_array(ids)
                    table.access_count[arr] += 1
                    old_last = table.last_access[arr] if self._has["spfcore_blocks_hit"] else None
                    table.last_access[arr] = now
            used = []
            if self._hints:
                key = table.key
                for i in ids:
                    k = key[i]
                    rec = self._hints.pop(k, None)
                    if rec is not None:
                        used.append((k, rec, rec[1]))
                        if not rec[1] and rec[0] >= self.arrival:
                            rec[1] = True
                            self.hints_used += 1
            if self._has["spfcore_blocks_hit"]:
                try:
                    self._fire("spfcore_blocks_hit", request, BlockBatch(table, ids), now)
                except BaseException:
                    if arr is not None:
                        table.access_count[arr] -= 1  # a fancy += adds once per distinct id, so does -=
                        table.last_access[arr] = old_last
                    elif track:
                        for i, x in zip(ids, old_last):
                            acc[i] -= 1
                            last[i] = x
                    for k, rec, was in reversed(used):
                        if rec[1] and not was:
                            rec[1] = False
                            self.hints_used -= 1
                        self._hints[k] = rec
                    raise
        finally:
            self.policy_seconds += _perf() - t0

    def stored(self, request: RequestView, ids: Sequence[int], keys: Sequence, first_depth: int,
               parent, num_tokens: int, now: float) -> None:
        """The request cached new full blocks ``ids`` with block hashes ``keys``
        at depths ``first_depth ...``; ``parent`` is the key before them.

        If ``spfcore_blocks_stored`` raises, the blocks' keys are put back
        (the rows of blocks without a key are dead: their other columns are
        not restored) and the key map was not touched yet (it is written after
        the hook): the runtime is as before the call.
        """
        t0 = _perf()
        try:
            t = self.table
            n = len(ids)
            key = t.key
            undo = arr = None
            by_key = self.by_key
            if self._has["spfcore_blocks_stored"]:  # a hook that may fail follows: keep what is overwritten
                # (list.count tests identity first: quick on the usual all-None rows)
                held = () if n > _SMALL and gather(key, ids).count(None) == n else \
                    [i for i in ids if key[i] is not None]
                par, req = t.parent, t.request_id
                undo = (len(t.sessions), [(i, key[i], par[i], req[i], [getattr(t, c)[i] for c in _NUMERIC])
                                          for i in held] if held else held)
            if not self.track:  # no hook reads a block's other columns: keys only
                if undo is None and not self.keyed:  # no stored hook, no key map (lru in a driver)
                    for i, k in zip(ids, keys):
                        key[i] = k
                    return
                if undo is None:  # and no stored hook (lru): the key map in the same pass
                    for i, k in zip(ids, keys):
                        key[i] = k
                        by_key[k] = i
                    return
                for i, k in zip(ids, keys):  # a keys-only policy
                    key[i] = k
            elif self._chain_only:  # chain-only: keys, parents and depths
                if n:
                    par = t.parent
                    for i, k in zip(ids, keys):
                        key[i] = k
                        par[i] = parent
                        parent = k
                    if n <= _SMALL:
                        depth = t.depth
                        d = first_depth
                        for i in ids:
                            depth[i] = d
                            d += 1
                    else:
                        arr = _id_array(ids)
                        t.depth[arr] = np.arange(first_depth, first_depth + n)
            elif n:
                par, req = t.parent, t.request_id
                rid = request.request_id
                for i, k in zip(ids, keys):
                    key[i] = k
                    par[i] = parent
                    req[i] = rid
                    parent = k
                sid = t.session_id(request.session_id)
                if n <= _SMALL:  # numpy scalar stores beat fancy indexing on a few blocks (decode: one)
                    depth, ntok, sess, acc, last, st = (t.depth, t.num_tokens, t.session, t.access_count,
                                                        t.last_access, t.stored_at)
                    d = first_depth
                    for i in ids:
                        depth[i] = d
                        ntok[i] = num_tokens
                        sess[i] = sid
                        acc[i] = 1
                        last[i] = now
                        st[i] = now
                        d += 1
                else:
                    arr = _id_array(ids)
                    t.depth[arr] = np.arange(first_depth, first_depth + n)
                    t.num_tokens[arr] = num_tokens
                    t.session[arr] = sid
                    t.access_count[arr] = 1
                    t.last_access[arr] = now
                    t.stored_at[arr] = now
            if undo is not None:
                try:
                    self._fire("spfcore_blocks_stored", request, BlockBatch(t, ids, ids_array=arr, keys=list(keys)),
                               now)
                except BaseException:
                    self._unstore(ids, *undo)
                    raise
            # the key map last (no hook reads it): nothing to undo there
            if self.keyed:
                if n > _SMALL:  # a key twice: the later block owns it, as one by one
                    by_key.update(zip(keys, ids))
                else:
                    for i, k in zip(ids, keys):
                        by_key[k] = i
        finally:
            self.policy_seconds += _perf() - t0

    def _unstore(self, ids, nsessions, live) -> None:
        """Undo :meth:`stored`'s table writes (see there)."""
        t = self.table
        for i in ids:
            t.key[i] = None
        for i, k, p, r, vals in live:  # blocks that held a key before (not vLLM's protocol; restored all the same)
            t.key[i], t.parent[i], t.request_id[i] = k, p, r
            for c, x in zip(_NUMERIC, vals):
                getattr(t, c)[i] = x
        del t.sessions[nsessions:]
        for s in [s for s, sid in t._session_ids.items() if sid >= nsessions]:
            del t._session_ids[s]

    def finished(self, request: RequestView, now: float) -> None:
        """The request finished; the driver releases its blocks next."""
        t0 = _perf()
        try:
            if self._has["spfcore_request_finished"]:
                self._fire("spfcore_request_finished", request, now)
        finally:
            self.policy_seconds += _perf() - t0

    def release(self, cached_ids: Sequence[int], hashless_ids: Sequence[int], now: float) -> None:
        """Blocks whose ref count reached 0: cached ones (release order,
        deepest first for a finished request) and hashless ones.

        The cached blocks go in first (their admission and score hooks are
        called before anything changes), so a hook that raises or answers
        wrongly leaves the runtime as before the call.
        """
        t0 = _perf()
        try:
            if cached_ids:
                ev = self.evictor
                if ev.fifo or ev.ordered:
                    ev.push_cached(cached_ids, now)
                else:  # the id array made once, the hooks' batches given the list too (no conversion back)
                    rel = self._released
                    rel[0] = arr = ev._ids(cached_ids)
                    rel[1] = cached_ids
                    try:
                        ev.push_cached(arr, now)
                    finally:
                        rel[0] = rel[1] = None
            if hashless_ids:
                self.evictor.push_hashless(hashless_ids)
        finally:
            self.policy_seconds += _perf() - t0

    def evict(self, n: int, now: float) -> list[int]:
        """Take ``n`` free blocks for an allocation; cached victims lose their
        metadata and are reported through ``spfcore_blocks_evicted``.

        A hook that raises or answers wrongly leaves the runtime as before the
        call, except that expired scores re-scored first stay re-scored (see
        :meth:`Evictor.pop <spfcore.evictor.Evictor.pop>`).
        ``spfcore_blocks_evicted`` (which sees only the victims' keys) is
        called before the victims lose their metadata; if it fails, they go
        back where they were in the evictor.

        Raises:
            ValueError: if fewer than ``n`` blocks are free.
        """
        t0 = _perf()
        try:
            ids = self.evictor.pop(n, now, self.arrival)
            self.evict_seconds += _perf() - t0
            self.evict_calls += 1
            key, by_key = self.table.key, self.by_key
            if not self.keyed:  # no key map: each victim's key is dropped, the hook sees the held ones
                old = gather(key, ids)
                gone = None
                if self._evicted_hook:
                    gone = [*filter(_HELD, old)]
                    if gone:
                        try:
                            self._fire("spfcore_blocks_evicted", gone, now)
                        except BaseException:
                            self.evictor.unpop(ids)
                            raise
                for i in ids:
                    key[i] = None
                self.evictions += len(gone) if gone is not None else len(old) - old.count(None)
                return ids
            nh = self.evictor.hashless_popped(ids) if len(ids) > _BULK else None
            if nh is not None and len(ids) - nh > _BULK:  # a large allocation: each cached victim holds
                held = ids[nh:] if nh else ids  # the key it owns (hashless ones come first); in C
                gone = gather(key, held)
                owner = list(map(by_key.pop, gone, repeat(None)))  # a None key pops None
                if owner == held and (not nh or gather(key, ids[:nh]).count(None) == nh):
                    if self._evicted_hook:  # the hook sees only the keys; if it fails, undo the pop
                        try:
                            self._fire("spfcore_blocks_evicted", gone, now)
                        except BaseException:
                            self._unpop_keys(gone, owner)
                            self.evictor.unpop(ids)
                            raise
                    for i in held:
                        key[i] = None
                    self.evictions += len(gone)
                    return ids
                self._unpop_keys(gone, owner)  # a hashless victim holds a key, or a duplicate: one by one
            if self._evicted_hook:  # first: the hook sees only the keys; if it fails, undo the pop
                gone = [k for i in ids if (k := key[i]) is not None]
                if gone:
                    try:
                        self._fire("spfcore_blocks_evicted", gone, now)
                    except BaseException:
                        self.evictor.unpop(ids)
                        raise
            n = 0
            for i in ids:
                k = key[i]
                if k is not None:
                    key[i] = None
                    n += 1
                    if by_key.get(k) == i:  # a recomputed duplicate may own the key now
                        del by_key[k]
            self.evictions += n
            return ids
        finally:
            self.policy_seconds += _perf() - t0

    def _unpop_keys(self, keys: list, owners: list) -> None:
        """Put back what ``map(by_key.pop, keys, repeat(None))`` returned as
        ``owners`` (in reverse: a key popped twice gets its first owner)."""
        by_key = self.by_key
        for k, i in zip(reversed(keys), reversed(owners)):
            if i is not None:
                by_key[k] = i

    def forget(self, ids: Sequence[int]) -> None:
        """Drop metadata of blocks whose hashes were dropped outside eviction
        (prefix-cache reset)."""
        key, by_key = self.table.key, self.by_key
        for i in ids:
            k = key[i]
            if k is not None:
                key[i] = None
                if self.keyed and by_key.get(k) == i:
                    del by_key[k]

    # ------------------------------------------------- driver steps and queries
    # The drivers (simulator, tiered simulator, engine adapter, MiniCache,
    # object replay) call only these and the events above, never the evictor
    # or the hook relay directly.
    def touch(self, ids: Iterable[int]) -> None:
        """Hit blocks that were free leave the free queue (vLLM's ``touch``:
        ref count 0 -> 1). A driver calls it for the free blocks among a
        request's hits (a block another request holds is not free); the
        order of this call and :meth:`hit` does not matter to the policy.

        Timed into ``policy_seconds`` (the engine's free-queue work is spfcore's time too).

        Raises:
            KeyError: a block is not free (a driver bug; the blocks before it
                have left the free queue).
        """
        t0 = _perf()
        try:
            if not isinstance(ids, (list, tuple)):
                ids = list(ids)
            if len(ids) == 1:
                self.evictor.remove(ids[0])
            else:
                self.evictor.remove_many(ids)
        finally:
            self.policy_seconds += _perf() - t0

    @property
    def num_free(self) -> int:
        """Free blocks now (hashless and cached), blocks."""
        return len(self.evictor)

    def free_ids(self) -> list[int]:
        """Every free block id: hashless first, then cached in no fixed order. O(blocks)."""
        return self.evictor.free_ids()

    def is_free(self, block_id: int) -> bool:
        """Whether physical block ``block_id`` is free (in the free queue)."""
        return block_id in self.evictor

    def block_of(self, key) -> int | None:
        """The physical id of the cached block with block hash ``key``, or
        ``None`` if no block holds it.

        Raises:
            RuntimeError: the runtime keeps no key map (built with ``key_map=False``).
        """
        if not self.keyed:
            raise RuntimeError("block_of(): this runtime keeps no key map (built with key_map=False)")
        return self.by_key.get(key)

    def key_of(self, block_id: int):
        """The block hash of physical block ``block_id``, or ``None`` (hashless
        or evicted)."""
        return self.table.key[block_id]

    def cached_keys(self) -> list:
        """Block hashes of every cached block now (free or held), in no fixed order. O(blocks).

        Raises:
            RuntimeError: the runtime keeps no key map (built with ``key_map=False``).
        """
        if not self.keyed:
            raise RuntimeError("cached_keys(): this runtime keeps no key map (built with key_map=False)")
        return list(self.by_key)

    def implements(self, hook: str) -> bool:
        """Whether the policy implements hook ``hook`` (a name in
        :data:`spfcore.hookspecs.HOOK_NAMES`).

        Raises:
            KeyError: ``hook`` is not an spfcore hook.
        """
        return self._has[hook]

    @property
    def vllm_order(self) -> bool:
        """Whether this runtime's eviction order is vLLM's own free-queue order
        and nothing else: the policy implements no hook at all (the built-in
        ``lru``) and needs no future. The evictor's default order then is
        exactly what vLLM's ``FreeKVCacheBlockQueue`` holds (hashless blocks
        first, ``blocks[0]`` of a prepend first; then cached blocks, least
        recently released first), so the vLLM adapter serves such a policy
        with that queue itself and calls no runtime event (see
        :meth:`spfcore.engine.vllm_adapter.PolicyFreeQueue.serve_vllm_order`).
        """
        return not self.needs_future and not any(self._has.values())

    def call_hook(self, hook: str, **kwargs):
        """Call hook ``hook`` of the policy with keyword arguments, timed and
        budgeted like every event's hooks, and return its raw answer (the
        driver checks it). For hooks a driver owns outside the block events:
        the tier hooks ``spfcore_tier_admit`` / ``spfcore_tier_score``.

        Raises:
            PolicyError: the hook raised or overran its budget (names the
                policy and the hook).
        """
        return self._call(hook, None, **kwargs)

    def pin(self, ids: Iterable[int], expires_at_arrival: int) -> int:
        """Pin free cached blocks until arrival index ``expires_at_arrival``,
        as a prefetch hint does (the pin cap applies). Does nothing for a
        policy with no decision hook (vLLM's order) or in policy-ordered mode.

        Returns:
            Blocks pinned.
        """
        if self.evictor.fifo:
            return 0
        return self.evictor.pin(ids, expires_at_arrival)

    @property
    def num_pinned(self) -> int:
        """Pinned free blocks now."""
        return self.evictor.num_pinned

    @property
    def pin_cap(self) -> int:
        """Most pinned free blocks, blocks (``pin_cap_fraction x num_blocks``)."""
        return self.evictor.pin_cap

    #: Attributes :meth:`checkpoint` saves: spfcore's state (the stats counters
    #: are left to count failed work too).
    _STATE = ("table", "by_key", "_hints", "arrival", "_future_set", "evictions", "hints_issued",
              "hints_used", "evictor")

    def checkpoint(self) -> dict:
        """A deep copy of spfcore's state of this runtime, for :meth:`restore`
        (O(blocks): for tests and transactional drivers, not a hot path).
        Hook callbacks held by the evictor are functions, shared, not copied;
        the policy's own state is not saved."""
        import copy

        return copy.deepcopy({a: getattr(self, a) for a in self._STATE})

    def restore(self, saved: dict) -> None:
        """Put a :meth:`checkpoint` back, in place (the table and evictor stay
        the same objects: the evictor's callbacks and drivers hold them)."""
        for a, v in saved.items():
            if a == "table":
                for slot in type(v).__slots__:
                    setattr(self.table, slot, getattr(v, slot))
            elif a == "evictor":
                self.evictor.__dict__.clear()
                self.evictor.__dict__.update(v.__dict__)
            else:
                setattr(self, a, v)

    def snapshot(self) -> dict:
        """spfcore's whole state of this runtime as plain values, for tests
        that compare it before and after a failed call: the table rows of the
        cached blocks (every column; a row without a key is dead), the
        session interning, the key map, hint records, arrival, eviction and
        hint counters and :meth:`Evictor.snapshot
        <spfcore.evictor.Evictor.snapshot>`. Left out: the policy's own state
        and the time and call counters of :meth:`stats`, which count failed
        calls too. O(blocks).
        """
        t = self.table
        cols = [getattr(t, c).tolist() for c in _NUMERIC]
        rows = {i: (k, t.parent[i], t.request_id[i], *(c[i] for c in cols))
                for i, k in enumerate(t.key) if k is not None}
        return {"rows": rows, "sessions": list(t.sessions), "session_ids": dict(t._session_ids),
                "by_key": dict(self.by_key), "hints": {k: tuple(r) for k, r in self._hints.items()},
                "arrival": self.arrival, "future_set": self._future_set, "evictions": self.evictions,
                "hints_issued": self.hints_issued, "hints_used": self.hints_used,
                "evictor": self.evictor.snapshot()}

    @property
    def meta(self) -> dict[int, BlockView]:
        """Cached blocks now: physical id -> a frozen :class:`BlockView`
        (built on each access, O(blocks); for tests and debugging). With
        :attr:`track` false (the policy implements no hook that reads blocks,
        e.g. ``lru``, or it declared ``keys-only``) only the views' ``key`` is
        kept current; with ``chain-only`` the ``key``, ``parent`` and ``depth``."""
        key, view = self.table.key, self.table.view
        return {i: view(i) for i, k in enumerate(key) if k is not None}
