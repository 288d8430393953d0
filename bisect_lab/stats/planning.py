"""Power planning: how many trials per arm resolve ``min_effect`` at the noise seen so far."""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as _st

from ._util import as_positive_array


def log_cv(values) -> float:
    """Noise as the standard deviation of log values (~ CV for small CVs), robust to scale."""
    v = as_positive_array(values)
    if v.size < 2:
        return float("nan")
    return float(np.log(v).std(ddof=1))


def plan_trials(values_or_cv, min_effect: float = 0.02, alpha: float = 0.05,
                power: float = 0.8, max_n: int = 100_000) -> int:
    """Trials per arm for a two-sided Welch comparison (on logs) to detect ``min_effect``.

    ``values_or_cv``: a CV (float, e.g. 0.03), a sequence of measurements of one arm, or a
    sequence of such sequences (noise = root-mean-square of the arms' log-sd). Uses the
    noncentral t, so small answers are not optimistic. Always at least 2.
    """
    if isinstance(values_or_cv, (int, float)):
        sigma = float(values_or_cv)
    else:
        seq = list(values_or_cv)
        if seq and hasattr(seq[0], "__len__"):
            sds = [log_cv(s) for s in seq if len(s) >= 2]
            sigma = float(np.sqrt(np.mean(np.square(sds)))) if sds else float("nan")
        else:
            sigma = log_cv(seq)
    if not math.isfinite(sigma) or sigma < 0:
        raise ValueError("need a CV or at least two measurements to plan")
    if sigma == 0:
        return 2
    delta = math.log1p(min_effect)
    # normal approximation as the starting point, then walk up with the noncentral t
    z = _st.norm.ppf(1 - alpha / 2) + _st.norm.ppf(power)
    n = max(2, int(math.ceil(2 * (z * sigma / delta) ** 2)))
    n = max(2, n - 2)
    while n < max_n:
        df = 2 * n - 2
        nc = delta / (sigma * math.sqrt(2.0 / n))
        tq = _st.t.ppf(1 - alpha / 2, df)
        if _st.nct.sf(tq, df, nc) >= power:
            return n
        n += 1
    return max_n
