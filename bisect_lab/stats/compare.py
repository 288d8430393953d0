"""Two-arm comparison: the effect of arm b relative to arm a as a ratio with a confidence interval.

Method (why): performance noise is multiplicative and the two arms may have very different spread
(an H200 decode loop: CV 0.6% with CUDA graphs, 14% with a heavy right tail without). We therefore
compare on the log scale with Welch's t (no equal-variance assumption, Satterthwaite df). On logs a
right-skewed metric becomes close to symmetric, the effect is a ratio of geometric means, and the
interval back-transforms to a ratio interval. The calibration tests (tests/test_calibration.py) hold
its A/A false-positive rate and its coverage on Gaussian, skewed and heteroscedastic noise.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as _st

from ._util import as_positive_array, welch_difference

VERDICTS = ("different", "same", "unknown")


@dataclass(frozen=True)
class Comparison:
    """Arm b relative to arm a.

    ``ratio`` is the ratio of geometric means b/a, ``ci_low``/``ci_high`` its ``1-alpha`` interval.
    ``verdict``: "different" when the interval excludes 1; "same" when the interval lies inside
    ``[1-min_effect, 1+min_effect]``; otherwise "unknown" (more trials needed).
    ``regression``: different and worse for the metric's direction.
    """

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str
    n_a: int
    n_b: int
    regression: bool
    improvement: bool
    higher_is_better: bool
    min_effect: float
    alpha: float
    df: float = float("nan")
    se_log: float = float("nan")

    @property
    def change(self) -> float:
        """Relative change b/a - 1 (e.g. -0.05 = 5% lower)."""
        return self.ratio - 1.0

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def welch_log(a, b) -> tuple[float, float, float]:
    """(difference of log means b-a, its standard error, Welch df). NaNs when not estimable."""
    la, lb = np.log(a), np.log(b)
    if la.size < 2 or lb.size < 2:
        return (float(lb.mean() - la.mean()) if la.size and lb.size else float("nan"), float("nan"), float("nan"))
    d, se, df, _ = yuen_log(a, b, 0.0)
    return d, se, df


def yuen_log(a, b, trim: float = 0.2) -> tuple[float, float, float, float]:
    """Yuen's trimmed-mean Welch test on log values: (difference of trimmed log means b-a, its
    standard error from the winsorized variances, Welch df, a conservative df).

    The conservative df is Hsu's ``h - 1`` (h = n - 2g, the effective size) of the arm that
    contributes most of the variance, and never more than Welch's: Welch-Satterthwaite df are
    optimistic at 2-4 values per arm, while Hsu's plain ``min(h) - 1`` would let a tight arm
    measured 4 times (CV 0.6%) make a noisy one measured 30 times (CV 14%) look like 3 df.

    Robust where one arm has a heavy tail (a run that lost CUDA graphs, a throttled trial): the
    ``trim`` share of each end is set aside instead of stretching the interval. With ``trim=0`` it is
    :func:`welch_log`. Same statistic as ``scipy.stats.ttest_ind(..., equal_var=False, trim=trim)``
    (tested), but returning the pieces a sequential bound needs.
    """
    parts = []
    for x in (a, b):
        lx = np.log(np.asarray(x, dtype=float))
        n = lx.size
        g = int(math.floor(trim * n))
        h = n - 2 * g
        if n < 2 or h < 2:
            return float("nan"), float("nan"), float("nan"), float("nan")
        if g == 0:                       # plain Welch, in Welch's own arithmetic
            parts.append((float(lx.mean()), float(lx.var(ddof=1)) / n, h))
            continue
        lx = np.sort(lx)
        w = lx.copy()
        w[:g] = lx[g]
        w[n - g:] = lx[n - g - 1]
        sw2 = float(w.var(ddof=1))
        parts.append((float(lx[g:n - g].mean()), (n - 1) * sw2 / (h * (h - 1)), h))
    (ma, va, ha), (mb, vb, hb) = parts
    return welch_difference(ma, va, ha, mb, vb, hb)


def compare(a, b, *, higher_is_better: bool = True, min_effect: float = 0.02,
            alpha: float = 0.05, seed: int = 0, robust: bool = False) -> Comparison:
    """Compare arm ``b`` to arm ``a`` (both: positive measurements of one metric).

    Welch's t on log values: no equal-variance or normality assumption on the raw metric.
    ``robust``: the readings a contamination model discounts as stalls (``stats.robust``) are
    treated as Yuen's trimmed ones: left out of the centre, winsorized into the variance.
    ``seed`` is accepted for API stability (the method is deterministic).
    """
    del seed
    a = as_positive_array(a, "a")
    b = as_positive_array(b, "b")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    na, nb = int(a.size), int(b.size)
    if robust and na >= 2 and nb >= 2:
        from .robust import robust_log
        d, se, df, _, _ = robust_log(a, b)
    else:
        d, se, df = welch_log(a, b)
    return from_log(d, se, df, na, nb, higher_is_better=higher_is_better, min_effect=min_effect, alpha=alpha)


def from_log(d: float, se: float, df: float, na: int, nb: int, *, higher_is_better: bool = True,
             min_effect: float = 0.02, alpha: float = 0.05) -> Comparison:
    """The comparison of a log difference ``d`` with standard error ``se`` on ``df`` degrees of
    freedom (``na`` / ``nb`` units per arm): interval, p, verdict. Shared by :func:`compare` and
    the session-blocked comparisons (``stats.sessions``)."""
    if not math.isfinite(se):
        ratio = math.exp(d) if math.isfinite(d) else float("nan")
        return Comparison(ratio, 0.0 if na and nb else float("nan"), float("inf") if na and nb else float("nan"),
                          1.0, "unknown", na, nb, False, False, higher_is_better, min_effect, alpha, df, se)
    if se == 0.0:
        lo = hi = d
        p = 1.0 if d == 0 else 0.0
    else:
        q = _st.t.ppf(1 - alpha / 2, df)
        lo, hi = d - q * se, d + q * se
        p = float(2 * _st.t.sf(abs(d) / se, df))
    ratio, cl, ch = math.exp(d), math.exp(lo), math.exp(hi)
    if cl > 1.0 or ch < 1.0:
        verdict = "different"
    elif cl >= 1.0 - min_effect and ch <= 1.0 + min_effect:
        verdict = "same"
    else:
        verdict = "unknown"
    worse = ratio < 1.0 if higher_is_better else ratio > 1.0
    diff = verdict == "different"
    return Comparison(ratio, cl, ch, p, verdict, na, nb, diff and worse, diff and not worse,
                      higher_is_better, min_effect, alpha, df, se)
