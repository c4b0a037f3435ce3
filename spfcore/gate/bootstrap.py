"""Confidence intervals of the gate's criteria: the percentile bootstrap of
paired, stratified samples, Student's t-interval of per-unit deltas, and
the passes likely to settle an interval."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import attrs
import numpy as np

BOOTSTRAP_RESAMPLES, BOOTSTRAP_LEVEL, BOOTSTRAP_SEED = 2000, 0.95, 20240607


@attrs.frozen
class CI:
    """A bootstrap confidence interval.

    Attributes:
        low, high: Interval bounds, in the unit of the criterion's value.
        level: Confidence level (0.95).
        resamples: Bootstrap resamples drawn.
        method: ``"paired-requests"`` (requests resampled within each seed,
            the same indices for both arms) or ``"paired-seeds"`` (seeds
            resampled, both arms together) or ``"seeds"`` (one arm's
            per-seed values resampled).
    """

    low: float
    high: float
    level: float
    resamples: int
    method: str

    def to_json(self) -> dict:
        return attrs.asdict(self)


def bootstrap_ci(statistic: Callable[[list[np.ndarray]], np.ndarray], samples: Sequence[np.ndarray], *,
                 resamples: int = BOOTSTRAP_RESAMPLES, level: float = BOOTSTRAP_LEVEL,
                 seed: int = BOOTSTRAP_SEED, method: str = "paired-requests") -> CI:
    """Percentile bootstrap interval of a statistic of paired, stratified samples.

    Each stratum ``samples[g]`` (shape ``(n_g, k)``: ``n_g`` paired units, e.g.
    the requests of one seed, with ``k`` columns, e.g. candidate and baseline
    values) is resampled with replacement, rows kept whole (pairing), strata
    independently (stratification). ``statistic`` gets the list of resampled
    strata, each of shape ``(resamples, n_g, k)``, and returns ``resamples``
    values. The RNG is ``numpy.random.default_rng(seed)``: same input, same
    interval. Source: Efron & Tibshirani, *An Introduction to the Bootstrap*
    (1993), ch. 13 (percentile interval).

    Args:
        statistic: Vectorised statistic, see above.
        samples: Strata, each a 2-D array with at least one row.
        resamples: Bootstrap resamples (> 0).
        level: Confidence level in (0, 1).
        seed: RNG seed.
        method: Label stored in the result.

    Returns:
        :class:`CI` with the ``(1-level)/2`` and ``(1+level)/2`` quantiles.

    Raises:
        ValueError: on an empty stratum, no strata, or bad ``resamples``/``level``.
    """
    if resamples <= 0 or not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap needs resamples > 0 and 0 < level < 1, got {resamples}, {level}")
    if not samples or any(len(s) == 0 for s in samples):
        raise ValueError("bootstrap needs at least one non-empty stratum")
    rng = np.random.default_rng(seed)
    drawn = []
    for s in samples:
        s = np.asarray(s, dtype=float)
        idx = rng.integers(0, len(s), size=(resamples, len(s)))
        drawn.append(s[idx])
    stats = np.asarray(statistic(drawn), dtype=float)
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return CI(float("nan"), float("nan"), level, resamples, method)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return CI(float(lo), float(hi), level, resamples, method)




_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom
    (table to 30, then ``z + (z^3 + z) / (4 df) + (5 z^5 + 16 z^3 + 3 z) / (96 df^2)``,
    Abramowitz & Stegun 26.7.5, z = 1.959964)."""
    if df < 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def units_t_interval(deltas: Sequence[float]) -> tuple[float, float]:
    """95% t-interval of the mean of per-unit paired deltas (one per
    (seed, pass): the arms of a unit ran back to back, so machine spells
    and workload draws hit both): ``mean +- t975(n - 1) * sd / sqrt(n)``
    (Student 1908). ``(-inf, inf)`` with fewer than 2 units."""
    d = np.asarray([x for x in deltas if x is not None and np.isfinite(x)], dtype=float)
    if d.size < 2:
        return -math.inf, math.inf
    half = t975(d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    return float(d.mean() - half), float(d.mean() + half)
