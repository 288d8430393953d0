"""Per-arm summary: central value with a distribution-free interval."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as _st

from ._util import as_positive_array


@dataclass(frozen=True)
class Summary:
    """``ci_low``/``ci_high`` bound the median (order-statistic interval, no distribution assumed;
    with few values it is as wide as the data, which is honest). ``cv`` is std/mean."""

    n: int
    median: float
    mean: float
    std: float
    cv: float
    ci_low: float
    ci_high: float
    geomean: float
    min: float
    max: float

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def median_ci(sorted_values: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    """Distribution-free interval for the median from binomial order statistics."""
    n = sorted_values.size
    if n == 0:
        return float("nan"), float("nan")
    # largest k with P(Binom(n, .5) < k) <= alpha/2: [x_(k), x_(n-k+1)] covers >= 1-alpha
    k = int(_st.binom.ppf(alpha / 2, n, 0.5))
    if k >= 1 and _st.binom.cdf(k - 1, n, 0.5) > alpha / 2:
        k -= 1
    if k < 1:
        return float(sorted_values[0]), float(sorted_values[-1])
    return float(sorted_values[k - 1]), float(sorted_values[n - k])


def summarize(values, alpha: float = 0.05) -> Summary:
    """n, median, mean, std, cv, and a ``1-alpha`` interval of the median."""
    v = np.sort(np.asarray(list(values), dtype=float).ravel())
    n = int(v.size)
    if n == 0:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, nan, nan, nan, nan, nan)
    mean = float(v.mean())
    std = float(v.std(ddof=1)) if n > 1 else float("nan")
    lo, hi = median_ci(v, alpha)
    geo = float(np.exp(np.log(as_positive_array(v)).mean())) if np.all(v > 0) else float("nan")
    return Summary(n, float(np.median(v)), mean, std, std / mean if mean else float("nan"),
                   lo, hi, geo, float(v[0]), float(v[-1]))
