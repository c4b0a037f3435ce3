"""Record the event stream a driver feeds a policy, and replay it.

The engine adapter (:mod:`spfcore.engine.vllm_adapter`) and the simulator
drive a policy through the same :class:`~spfcore.runtime.PolicyRuntime`
calls: ``set_future``, ``arrived`` (arrivals), ``hit`` (the lookup, when the
request is first scheduled), ``stored`` (blocks cached), ``finished``,
``release`` (frees, preemptions included: a preempted request's blocks are
released without ``finished``), ``evict`` (allocations that need free
blocks; the answer is the policy's victims) and ``forget``; plus the
driver's own ``Evictor.remove`` (a free block touched by a hit). Under
load the engine's order of these events (vLLM's scheduler, its batching,
its preemptions) differs from the simulator's model; recording it and
replaying it into a fresh runtime of the same policy reproduces the
policy's decisions exactly, so a difference between engine and simulator
under load is the scheduling model's, not the policy's.

:func:`record_runtime_calls` patches the two classes for the duration of a
``with`` block (every runtime created or used inside is recorded, keyed by
the runtime); :func:`replay` feeds one runtime's events to a fresh one and
compares every ``evict`` answer.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

import attrs

from spfcore.runtime import PolicyRuntime

#: PolicyRuntime methods a driver calls, in the order of its contract.
RECORDED = ("set_future", "arrived", "touch", "hit", "stored", "finished", "release", "evict", "forget")


@attrs.define
class EventLog:
    """Recorded calls, per runtime.

    Attributes:
        events: ``{id(runtime): [(method, args, result), ...]}`` in call
            order; ``method`` is a :data:`RECORDED` name; ``args``
            are copied (sequences as tuples, ``set_future``'s iterable as a
            tuple); ``result`` is ``evict``'s victim ids, else None.
        runtimes: ``{id(runtime): runtime}`` (kept alive, so ids stay unique).
        drivers: ``{id(runtime): "engine" | "sim"}``: ``"engine"`` when its
            first recorded call came from :mod:`spfcore.engine` (the vLLM
            adapter), else ``"sim"``.
    """

    events: dict = attrs.field(factory=dict)
    runtimes: dict = attrs.field(factory=dict)
    drivers: dict = attrs.field(factory=dict)

    def of(self, runtime: PolicyRuntime) -> list[tuple]:
        """The events of ``runtime``.

        Raises:
            KeyError: nothing was recorded for it.
        """
        return self.events[id(runtime)]


def _frozen(x):
    if isinstance(x, (list, tuple)):
        return tuple(x)
    if hasattr(x, "tolist") and not isinstance(x, (int, float)):
        return tuple(x.tolist())
    return x


def _driver() -> str:
    f = sys._getframe(2)
    while f is not None:
        if f"spfcore{os.sep}engine{os.sep}" in f.f_code.co_filename:
            return "engine"
        f = f.f_back
    return "sim"


_recording = False


def recording() -> bool:
    """Whether :func:`record_runtime_calls` is recording now (then the
    engine serves every arm through :class:`PolicyRuntime`, whose calls it
    records, not a compiled runtime: :func:`spfcore.engine.compiled.compiled_runtime`)."""
    return _recording


@contextlib.contextmanager
def record_runtime_calls() -> Iterator[EventLog]:
    """Record every :data:`RECORDED` call on any :class:`PolicyRuntime`
    while the block runs (class attributes patched, restored on exit; not
    re-entrant). A call that raised is recorded too (its result is None), since the
    runtime's state after it is part of the stream. Engines started or reset
    inside run the hooks, not a compiled runtime (:func:`recording`)."""
    global _recording
    log = EventLog()
    originals = {name: PolicyRuntime.__dict__[name] for name in RECORDED}

    def wrap(name, fn):
        def method(self, *args, **kwargs):
            if name == "set_future":
                reqs = tuple(kwargs.pop("requests", args[0] if args else ()))
                args = (reqs,)
            key = id(self)
            if key not in log.runtimes:
                log.drivers[key] = _driver()
            log.runtimes[key] = self
            rec = [name, tuple(_frozen(a) for a in args) + tuple(_frozen(v) for v in kwargs.values()), None]
            log.events.setdefault(key, []).append(rec)
            out = fn(self, *args, **kwargs)
            if name == "evict":
                rec[2] = tuple(out)
            return out

        method.__wrapped__ = fn
        return method

    try:
        for name, fn in originals.items():
            setattr(PolicyRuntime, name, wrap(name, fn))
        _recording = True
        yield log
    finally:
        _recording = False
        for name, fn in originals.items():
            setattr(PolicyRuntime, name, fn)


def replay(events: Sequence[tuple], arm: str, *, num_blocks: int, block_size: int,
           options: dict | None = None) -> dict:
    """Feed recorded ``events`` (:meth:`EventLog.of`) to a fresh runtime of
    ``arm`` and compare the victims of every ``evict``.

    Args:
        events: One runtime's recorded calls, in order.
        arm: The policy that runtime ran (an installed ``spfcore.policies`` name).
        num_blocks, block_size: The recorded runtime's cache (null block included).
        options: The arm's string options.

    Returns:
        ``{"events": n, "evict_calls": e, "victims": v (blocks), "mismatches":
        [(event index, recorded ids, replayed ids)], "policy_seconds": s,
        "hook_seconds": s}`` (the fresh runtime's timers over the replay: what
        the stream costs on this machine); the replay stops at
        the first differing decision (the recorded events after it assume
        the recorded victims); an empty ``mismatches`` means every decision
        was identical.

    Raises:
        spfcore.registry.PolicyConfigError: unknown arm or bad option.
        spfcore.runtime.PolicyError: the policy failed during the replay.
    """
    rt = PolicyRuntime.for_policy(arm, num_blocks, block_size, options, env={}, key_map=False)
    calls = 0
    victims = 0
    bad = []
    for k, (name, args, result) in enumerate(events):
        out = getattr(rt, name)(*args)
        if name == "evict":
            calls += 1
            victims += len(out)
            if tuple(out) != tuple(result or ()):
                bad.append((k, tuple(result or ()), tuple(out)))
                break  # the recorded stream continues from the recorded victims: the rest would not apply
    return {"events": len(events), "evict_calls": calls, "victims": victims, "mismatches": bad,
            "policy_seconds": rt.policy_seconds, "hook_seconds": rt.hook_seconds}


__all__ = ["EventLog", "RECORDED", "record_runtime_calls", "replay"]
