"""The compiled-runtime tests' paired driver call: one event made on a hook
runtime and on a compiled one, their answers and errors compared."""

from __future__ import annotations

from collections.abc import Callable


def paired(hooks, comp, where: str) -> Callable:
    """``both(name, *args)``: ``getattr(rt, name)(*args)`` on ``hooks`` and on
    ``comp``; returns the hooks' answer.

    Raises:
        AssertionError: one raised and the other did not, or the answers
            differ (the message starts with ``where``)."""

    def both(name, *args):
        ra = rb = ea = eb = None
        try:
            ra = getattr(hooks, name)(*args)
        except Exception as e:  # noqa: BLE001
            ea = e
        try:
            rb = getattr(comp, name)(*args)
        except Exception as e:  # noqa: BLE001
            eb = e
        if (ea is None) != (eb is None) or ra != rb:
            raise AssertionError(f"{where}: {name}{args!r:.300}: hooks {ra!r:.200}/{ea!r} "
                                 f"vs compiled {rb!r:.200}/{eb!r}")
        return ra

    return both
