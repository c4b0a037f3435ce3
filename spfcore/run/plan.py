"""The plan of a run: which cells it holds and the order the engine runs them.

A cell is keyed ``(kind, arm, seed)`` (``(kind, arm, seed, repeat)`` for a
further pass): kind ``sim`` (a simulator arm), ``ceilings`` (the simulator's
Belady and infinite-cache ceilings of a seed, arm ``"*"``) or ``engine``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def sim_units(arms: Sequence[str], seeds: Sequence[int]) -> list[tuple]:
    """The simulator's cells: every arm per seed, then the ceilings per seed
    (after the arms: a sequential run's Belady ceiling is the ``belady_oracle``
    arm's cell)."""
    return [("sim", a, s) for s in seeds for a in arms] + [("ceilings", "*", s) for s in seeds]


def engine_units(arms: Sequence[str], seeds: Sequence[int], repeat: int = 0) -> list[tuple]:
    """The engine's cells of pass ``repeat`` (0: the first)."""
    return [("engine", a, s) + ((repeat,) if repeat else ()) for a in arms for s in seeds]


def interleaved(arms: Sequence[str], seeds: Sequence[int], repeat: int = 0) -> Iterator[tuple[str, int]]:
    """The engine's order in pass ``repeat``: for each seed every arm in turn,
    the arm order rotated by one per seed and one further per pass, so a slow
    spell of the machine hits every arm alike and no arm always runs first.

    >>> list(interleaved(["a", "b"], [1, 2]))
    [('a', 1), ('b', 1), ('b', 2), ('a', 2)]
    """
    arms = list(arms)
    for k, seed in enumerate(seeds):
        k = (k + repeat) % len(arms)
        for arm in arms[k:] + arms[:k]:
            yield arm, seed
