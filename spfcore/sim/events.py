"""A debug recorder of the events a policy is shown, for comparing drivers.

The simulator and the engine adapter both drive a policy through
:class:`spfcore.runtime.PolicyRuntime` (``arrived``, ``hit``, ``touch``,
``stored``, ``finished``, ``release``, ``evict``). :func:`record_events`
patches those methods for the duration of a ``with`` block and keeps, per
runtime built meanwhile, the stream of events it received, in a form that
does not depend on the driver: block hashes of prompt blocks as they are
(:func:`spfcore.keys.chain_keys`, equal in both), decode blocks, whose hashes
differ (the engine hashes its own output tokens), as ``("decode",
request_id, depth)``, physical block ids beside them. :func:`first_difference`
finds where two streams part. Used by ``benchmarks/sim_engine_events.py``;
not on any run's path.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import attrs

from spfcore.runtime import PolicyRuntime

_EVENTS = ("arrived", "hit", "touch", "stored", "finished", "release", "evict")


@attrs.define
class EventLog:
    """The events one runtime received.

    Attributes:
        policy: The runtime's policy name.
        driver: ``"engine"`` (called from :mod:`spfcore.engine.vllm_adapter`) or ``"sim"``.
        events: Tuples ``(kind, ...)``, in call order: ``("arrived", request_id,
            arrival_index)``, ``("hit", request_id, labels, ids)``, ``("touch",
            ids)``, ``("stored", request_id, first_depth, labels, ids)``,
            ``("finished", request_id)``, ``("release", labels, ids, hashless_ids)``,
            ``("evict", n, labels, ids)``. A label is a prompt block's hash,
            ``("decode", request_id, depth)`` for a decode block, ``None``
            for a hashless block.
    """

    policy: str
    driver: str
    events: list = attrs.field(factory=list)
    labels: dict = attrs.field(factory=dict, repr=False)  # block hash -> label, set at its store

    def requests(self) -> int:
        """Arrivals recorded."""
        return sum(1 for e in self.events if e[0] == "arrived")

    def to_json(self) -> dict:
        """``{"policy", "driver", "events"}`` (tuples as lists)."""
        return {"policy": self.policy, "driver": self.driver, "events": self.events}

    @classmethod
    def from_json(cls, d: dict) -> EventLog:
        """The log :meth:`to_json` wrote (decode labels back to tuples)."""
        def lab(x):
            return tuple(x) if isinstance(x, list) else x

        events = []
        for e in d["events"]:
            kind = e[0]
            if kind in ("hit", "stored", "release", "evict"):
                at = 1 if kind == "release" else 2 if kind in ("hit", "evict") else 3
                e = e[:at] + [[lab(x) for x in e[at]]] + e[at + 1:]
            events.append(tuple(e))
        return cls(d["policy"], d["driver"], events)


def _driver() -> str:
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename.endswith("vllm_adapter.py"):
            return "engine"
        f = f.f_back
    return "sim"


@contextlib.contextmanager
def record_events() -> Iterator[list[EventLog]]:
    """Record every runtime's events inside the block.

    Yields:
        A list that gets one :class:`EventLog` per runtime that receives an
        event, in order of its first event. The patch is undone on exit.
    """
    logs: list[EventLog] = []
    orig = {name: getattr(PolicyRuntime, name) for name in _EVENTS}

    def log_of(rt) -> EventLog:
        log = rt.__dict__.get("_event_log")
        if log is None:
            log = rt._event_log = EventLog(rt.policy_name, _driver())
            logs.append(log)
        return log

    def label(log, rt, i):
        k = rt.table.key[i]
        return None if k is None else log.labels.get(k, k)

    def arrived(self, request, now):
        log_of(self).events.append(("arrived", request.request_id, request.arrival_index))
        return orig["arrived"](self, request, now)

    def hit(self, request, ids, now):
        log = log_of(self)
        log.events.append(("hit", request.request_id, [label(log, self, i) for i in ids], list(ids)))
        return orig["hit"](self, request, ids, now)

    def touch(self, ids):
        ids = list(ids)
        log_of(self).events.append(("touch", ids))
        return orig["touch"](self, ids)

    def stored(self, request, ids, keys, first_depth, parent, num_tokens, now):
        log = log_of(self)
        prompt = set(request.block_keys)
        labs = []
        for d, k in enumerate(keys, first_depth):
            lab = k if k in prompt else ("decode", request.request_id, d)
            log.labels.setdefault(k, lab)
            labs.append(log.labels[k])
        log.events.append(("stored", request.request_id, first_depth, labs, list(ids)))
        return orig["stored"](self, request, ids, keys, first_depth, parent, num_tokens, now)

    def finished(self, request, now):
        log_of(self).events.append(("finished", request.request_id))
        return orig["finished"](self, request, now)

    def release(self, cached_ids, hashless_ids, now):
        log = log_of(self)
        log.events.append(("release", [label(log, self, i) for i in cached_ids], list(cached_ids),
                           list(hashless_ids)))
        return orig["release"](self, cached_ids, hashless_ids, now)

    def evict(self, n, now):
        log = log_of(self)
        before = list(self.table.key)
        ids = orig["evict"](self, n, now)
        log.events.append(("evict", n, [None if before[i] is None else log.labels.get(before[i], before[i])
                                        for i in ids], list(ids)))
        return ids

    patched = dict(arrived=arrived, hit=hit, touch=touch, stored=stored, finished=finished, release=release,
                   evict=evict)
    for name, fn in patched.items():
        setattr(PolicyRuntime, name, fn)
    try:
        yield logs
    finally:
        for name, fn in orig.items():
            setattr(PolicyRuntime, name, fn)


def _short(x):
    if isinstance(x, int):
        return f"{x:x}"[:6]
    if isinstance(x, (list, tuple)):
        return type(x)(_short(y) for y in x)
    return x


def first_difference(a: EventLog, b: EventLog, *, ids: bool = False, context: int = 6) -> str | None:
    """Where two streams part, as text (``None`` if they are equal).

    Args:
        a, b: The two logs (e.g. engine and simulator).
        ids: Compare physical block ids too (``a``'s mapped onto ``b``'s by
            their places in the first release, the whole free pool), else
            labels only. Touches are left out (not a hook, implied by the
            hit; the engine touches before the hit, the simulator after), and
            consecutive releases are merged (vLLM frees a request's hashless
            and cached blocks in two calls).
        context: Events shown before the first difference.
    """
    # physical ids: a's mapped onto b's by position in the first release (every block, hashless: an
    # engine's free queue after a reset need not run 1 .. n-1 as the simulator's does)
    first = [e for e in (a.events[:1], b.events[:1]) if e and e[0][0] == "release"]
    pos = dict(zip(a.events[0][3], b.events[0][3])) if len(first) == 2 else {}

    def mapped(e):
        m = lambda xs: [pos.get(i, i) for i in xs]  # noqa: E731
        kind = e[0]
        if kind == "touch":
            return (kind, m(e[1]))
        if kind in ("hit", "stored", "evict"):
            return e[:-1] + (m(e[-1]),)
        if kind == "release":
            return (kind, e[1], m(e[2]), m(e[3]))
        return e

    def norm(e):
        if ids:
            return e
        kind = e[0]
        if kind in ("hit", "stored", "evict"):
            return e[:-1]
        if kind == "release":
            return (kind, e[1], len(e[3]))
        return e

    def merged(events):  # vLLM frees hashless and cached blocks in two calls (prepend_n, append_n)
        out = []
        for e in map(norm, events):
            if e[0] == "touch":  # not a hook, and implied by the hit: the engine touches before it, the simulator after
                continue
            if out and e[0] == "release" == out[-1][0]:
                out[-1] = ("release",) + tuple(x + y for x, y in zip(out[-1][1:], e[1:]))
            else:
                out.append(e)
        return out

    na, nb = merged([mapped(e) for e in a.events]), merged(b.events)
    for j, (x, y) in enumerate(zip(na, nb)):
        if x != y:
            break
    else:
        if len(na) == len(nb):
            return None
        j = min(len(na), len(nb))
    lines = [f"first difference at event {j} of {len(na)} ({a.driver}) / {len(nb)} ({b.driver}):"]
    for k in range(max(0, j - context), j):
        lines.append(f"  both  {_short(na[k])}")
    for k in range(j, min(j + context, max(len(na), len(nb)))):
        lines.append(f"  {a.driver:6s}{_short(na[k]) if k < len(na) else '-'}")
        lines.append(f"  {b.driver:6s}{_short(nb[k]) if k < len(nb) else '-'}")
    return "\n".join(lines)
