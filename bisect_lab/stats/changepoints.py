"""Change points in a performance series: E-divisive means with a permutation test.

Method (Matteson & James 2014, "A nonparametric approach for multiple change point analysis of
multivariate data"; the method MongoDB's ``signal-processing-algorithms`` and Apache Otava / Hunter
use on nightly performance series). For a segment ``x[s:e]`` and a split ``t`` the statistic is

    Q(t) = m*k/(m+k) * ( 2/(m*k) sum_{i<t<=j} |x_i - x_j|^a
                         - 1/C(m,2) sum_{i<i'<t} |x_i - x_i'|^a - 1/C(k,2) sum_{t<=j<j'} |x_j - x_j'|^a )

(``m = t - s``, ``k = e - t``, ``a = 1``; the end ``e`` is searched too): the energy distance between the two sides, large when they
differ in location *or* spread, with no normality assumption. The best split of the best segment is
tested by permuting that segment (``permutations`` times, seeded): its p-value is the share of
permutations whose best Q is at least the observed one. Accepted splits divide the series and the
search repeats on the pieces (hierarchically) until no split is significant.

Why not a package: ``signal-processing-algorithms`` pins numpy < 2 and pulls in gevent, and
``apache-otava`` pulls BigQuery, Postgres and Slack clients and pins older numpy/scipy; ``ruptures``
has no significance test (a penalty must be tuned per series). This is ~80 lines of numpy, pure and
deterministic for a given seed, and tests/test_sweep.py checks it on planted and on change-free series.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ChangePoint", "e_divisive"]


@dataclass(frozen=True)
class ChangePoint:
    """A split before ``index`` (``x[index]`` is the first value of the new level)."""

    index: int
    p_value: float
    q: float
    before_median: float
    after_median: float

    @property
    def ratio(self) -> float:
        """after / before, on the medians of the two adjacent segments."""
        return self.after_median / self.before_median if self.before_median else float("nan")

    def to_dict(self) -> dict:
        return {"index": self.index, "p_value": self.p_value, "q": self.q, "before_median": self.before_median,
                "after_median": self.after_median, "ratio": self.ratio}


def _prefix(d: np.ndarray) -> np.ndarray:
    p = np.zeros((d.shape[0] + 1, d.shape[1] + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    return p


def _rect(p: np.ndarray, a: int, b: int, c: int, d: int) -> float:
    return p[b, d] - p[a, d] - p[b, c] + p[a, c]


def _best_split(d: np.ndarray, min_size: int) -> tuple[int, float]:
    """(split t, statistic) maximising Q(t, k) over ``min_size <= t`` and ``t + min_size <= k <= n``.

    The end ``k`` is searched as in Matteson & James: with ``k = n`` only, a level that goes down and
    comes back up (a bump) is hidden, because the right side mixes both levels.
    """
    n = d.shape[0]
    p = _prefix(d)
    best_t, best_q = -1, -np.inf
    for t in range(min_size, n - min_size + 1):
        m = t
        within_l = _rect(p, 0, t, 0, t) / (m * (m - 1)) if m > 1 else 0.0     # mean over pairs i<i'
        for k in range(t + min_size, n + 1):
            r = k - t
            between = _rect(p, 0, t, t, k) / (m * r)
            within_r = _rect(p, t, k, t, k) / (r * (r - 1)) if r > 1 else 0.0
            q = m * r / (m + r) * (2 * between - within_l - within_r)
            if q > best_q:
                best_t, best_q = t, q
    return best_t, float(best_q)


def e_divisive(values, *, alpha: float = 0.05, permutations: int = 199, min_size: int = 2,
               seed: int = 0, exponent: float = 1.0, max_points: int = 20) -> list[ChangePoint]:
    """Significant change points of a 1-D series, in index order.

    ``alpha``: permutation-test level for accepting a split. ``min_size``: fewest points on each
    side of a split. ``max_points``: stop after that many change points. Series shorter than
    ``2 * min_size`` have none. Deterministic for a given ``seed``.
    """
    x = np.asarray(list(values), dtype=float)
    n = x.size
    if n < 2 * min_size or not np.all(np.isfinite(x)):
        return []
    rng = np.random.default_rng(seed)
    cuts = [0, n]
    found: list[tuple[int, float, float]] = []
    while len(found) < max_points:
        best = None
        for s, e in zip(cuts[:-1], cuts[1:]):
            if e - s < 2 * min_size:
                continue
            seg = x[s:e]
            d = np.abs(seg[:, None] - seg[None, :]) ** exponent
            t, q = _best_split(d, min_size)
            if t > 0 and (best is None or q > best[2]):
                best = (s, e, q, s + t)
        if best is None or best[2] <= 0:
            break
        s, e, q, idx = best
        seg = x[s:e]
        exceed = 0
        for _ in range(permutations):
            ps = rng.permutation(seg)
            _, qp = _best_split(np.abs(ps[:, None] - ps[None, :]) ** exponent, min_size)
            if qp >= q:
                exceed += 1
        p = (exceed + 1) / (permutations + 1)
        if p > alpha:
            break
        found.append((idx, p, q))
        cuts = sorted(cuts + [idx])
    out = []
    cuts = sorted([0, n] + [i for i, _, _ in found])
    for idx, p, q in sorted(found):
        k = cuts.index(idx)
        before, after = x[cuts[k - 1]:idx], x[idx:cuts[k + 1]]
        out.append(ChangePoint(idx, float(p), float(q), float(np.median(before)), float(np.median(after))))
    return out
