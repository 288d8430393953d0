# Frozen copy of bisect_lab/strategies/bisection_models.py as on main at 760128a (before the learned outlier share, issue #23 stalls):
# the baseline simulate_bisection.py runs as method "main". Not used by the product.
"""Does a bisection's data fit one step? (pure; used by ``bisection.BisectionStrategy``).

The bisection posterior assumes the truth is one clean level change. Before it names a commit, the
readings are fitted, by least squares on the measured positions, with three models:

- **one step**: level ``a`` before a split between two measured positions, ``b`` after;
- **slide**: flat ``a`` up to a measured position, a straight line to ``b`` at a later measured
  position, flat after (a change spread over a range of commits);
- **two steps**: three flat levels (two regressions, a regression and a fix, ...).

Both alternatives contain the one step, so they always fit at least as well; the question is
whether they fit *significantly* better. The null distribution of the statistic
``N log(RSS_one / RSS_alternative)`` is taken from a residual bootstrap of the one-step fit (its own
residuals resampled, so skewed or heavy-tailed noise is kept; seeded), because the split points of
the alternatives are chosen after seeing the data and the design is adaptive, which no textbook
F distribution allows for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Fits", "fit_models", "check_one_step", "predict"]


@dataclass(frozen=True)
class Fits:
    """Best fits of the three models on one data set (indices into ``xs``)."""

    xs: np.ndarray            # sorted distinct measured positions
    rss_one: float
    one: int                  # one step between xs[one] and xs[one + 1]
    rss_slide: float
    slide: tuple[int, int]    # flat up to xs[lo], line to xs[hi], flat from xs[hi]
    slide_levels: tuple[float, float]
    rss_two: float
    two: tuple[int, int]      # steps between xs[k] and xs[k + 1], xs[l] and xs[l + 1]
    two_levels: tuple[float, float, float]
    one_levels: tuple[float, float]
    n: int                    # readings
    two_counts: tuple[int, int, int] = (0, 0, 0)  # readings in each of the two-step fit's groups


def _pairs(m: int, gap: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(m, k=gap)
    return i, j


def _fit_all(xs: np.ndarray, W: np.ndarray, S: np.ndarray, Q: np.ndarray, anchor: int | None = None):
    """RSS of the best one-step, slide and two-step fits for each row of S (bootstrap replicates).
    W: (m,) reading counts per position; S: (B, m) sums; Q: (B,) sums of squares. With ``anchor``
    (a one-step split), only alternatives that keep a change at that split are fitted."""
    m = xs.size
    cW, cS = np.cumsum(W), np.cumsum(S, axis=1)
    Wt, St = cW[-1], cS[:, -1:]
    # one step: good = xs[0..k], k = 0..m-2
    Wg, Sg = cW[:-1], cS[:, :-1]
    rss1 = Q[:, None] - Sg**2 / Wg - (St - Sg) ** 2 / (Wt - Wg)
    # two steps: groups [0..k], [k+1..l], [l+1..m-1], 0 <= k < l <= m-2
    k, l = _pairs(m - 1, 1)
    if anchor is not None:
        sel = (k == anchor) | (l == anchor)
        k, l = k[sel], l[sel]
    W1, W2, W3 = cW[k], cW[l] - cW[k], Wt - cW[l]
    G1, G2 = cS[:, k], cS[:, l] - cS[:, k]
    G3 = St - cS[:, l]
    rss2 = Q[:, None] - G1**2 / W1 - G2**2 / W2 - G3**2 / W3
    # slide: flat to xs[lo], linear to xs[hi], flat after; hi >= lo + 2 (lo + 1 is the one step)
    lo, hi = _pairs(m, 2)
    if anchor is not None:
        sel = (lo <= anchor) & (hi > anchor)
        lo, hi = lo[sel], hi[sel]
    g = np.clip((xs[None, :] - xs[lo][:, None]) / (xs[hi] - xs[lo])[:, None], 0.0, 1.0)  # (P, m)
    A11 = ((1 - g) ** 2 * W).sum(axis=1)
    A12 = (g * (1 - g) * W).sum(axis=1)
    A22 = (g**2 * W).sum(axis=1)
    r1 = S @ (1 - g).T
    r2 = S @ g.T
    det = np.maximum(A11 * A22 - A12**2, 1e-300)
    a = (A22 * r1 - A12 * r2) / det
    b = (A11 * r2 - A12 * r1) / det
    rss_s = Q[:, None] - a * r1 - b * r2
    return rss1, (k, l, rss2), (lo, hi, rss_s, a, b)


def fit_models(pos: np.ndarray, y: np.ndarray, anchor: int | None = None) -> Fits | None:
    """Best fits of the three models to readings ``y`` at positions ``pos``; None when fewer than
    four distinct positions were measured (no alternative can be told from one step)."""
    xs, inv = np.unique(pos, return_inverse=True)
    m = xs.size
    if m < 4:
        return None
    W = np.bincount(inv, minlength=m).astype(float)
    S = np.bincount(inv, weights=y, minlength=m)[None, :]
    Q = np.array([float((y * y).sum())])
    rss1, (k, l, rss2), (lo, hi, rss_s, a, b) = _fit_all(xs.astype(float), W, S, Q, anchor)
    if anchor is not None:
        rss1 = np.where(np.arange(rss1.shape[1]) == anchor, rss1, np.inf)
    i1, i2, i3 = int(np.argmin(rss1[0])), int(np.argmin(rss2[0])), int(np.argmin(rss_s[0]))
    cW, cS = np.cumsum(W), np.cumsum(S[0])
    kk, ll = int(k[i2]), int(l[i2])
    two_levels = (cS[kk] / cW[kk], (cS[ll] - cS[kk]) / (cW[ll] - cW[kk]),
                  (cS[-1] - cS[ll]) / (cW[-1] - cW[ll]))
    one_levels = (cS[i1] / cW[i1], (cS[-1] - cS[i1]) / (cW[-1] - cW[i1]))
    floor = 1e-12 * max(y.size, 1)
    return Fits(xs=xs, rss_one=float(rss1[0, i1]) + floor, one=i1,
                rss_slide=float(rss_s[0, i3]) + floor, slide=(int(lo[i3]), int(hi[i3])),
                slide_levels=(float(a[0, i3]), float(b[0, i3])),
                rss_two=float(rss2[0, i2]) + floor, two=(kk, ll),
                two_levels=tuple(float(v) for v in two_levels),  # type: ignore[arg-type]
                one_levels=(float(one_levels[0]), float(one_levels[1])), n=int(y.size),
                two_counts=(int(cW[kk]), int(cW[ll] - cW[kk]), int(cW[-1] - cW[ll])))


def predict(f: Fits, model: str, x: np.ndarray) -> np.ndarray:
    """Level each model predicts at positions ``x`` (NaN where a step could be on either side)."""
    xs = f.xs
    x = np.asarray(x, dtype=float)
    out = np.full(x.shape, np.nan)
    if model == "slide":
        lo, hi = xs[f.slide[0]], xs[f.slide[1]]
        g = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
        return f.slide_levels[0] * (1 - g) + f.slide_levels[1] * g
    if model == "one":
        cuts, levels = [f.one], f.one_levels
    else:
        cuts, levels = list(f.two), f.two_levels
    edges = [-math.inf] + [float(xs[c]) for c in cuts] + [math.inf]
    nxt = [-math.inf] + [float(xs[c + 1]) for c in cuts] + [math.inf]
    for j, lev in enumerate(levels):
        # group j certainly holds positions from xs[cut_{j-1} + 1] through xs[cut_j]
        inside = (x >= nxt[j]) & (x <= edges[j + 1])
        out[inside] = lev
    return out


def check_one_step(pos: np.ndarray, y: np.ndarray, *, seed, reps: int = 300) -> tuple[Fits | None, float]:
    """(fits, p): p is the bootstrap p-value of "one step fits" against the better alternative
    (slide or two steps) that keeps the best one-step split; 1.0 when there are too few positions
    to tell. Anchoring on that split (the commit about to be named) asks the question that
    matters, "does this step explain everything?", and leaves far fewer alternatives to search
    than all pairs of splits, which is most of the power against a second step."""
    f = fit_models(pos, y)
    if f is None:
        return None, 1.0
    n = y.size
    f = fit_models(pos, y, anchor=f.one)
    assert f is not None
    t_obs = n * math.log(f.rss_one / min(f.rss_slide, f.rss_two))
    xs, inv = np.unique(pos, return_inverse=True)
    m = xs.size
    good = inv <= f.one
    fitted = np.where(good, f.one_levels[0], f.one_levels[1])
    e = y - fitted
    e = (e - e.mean()) * math.sqrt(n / max(n - 3, 1))
    rng = np.random.default_rng(seed)
    ystar = fitted[None, :] + e[rng.integers(0, n, size=(reps, n))]
    W = np.bincount(inv, minlength=m).astype(float)
    onehot = np.zeros((n, m))
    onehot[np.arange(n), inv] = 1.0
    S = ystar @ onehot
    Q = (ystar * ystar).sum(axis=1)
    rss1, (_, _, rss2), (_, _, rss_s, _, _) = _fit_all(xs.astype(float), W, S, Q, f.one)
    floor = 1e-12 * n
    r1 = rss1[:, f.one] + floor
    ralt = np.minimum(rss2.min(axis=1), rss_s.min(axis=1)) + floor
    t_star = n * np.log(r1 / ralt)
    p = (1.0 + float(np.sum(t_star >= t_obs))) / (reps + 1.0)
    return f, p
