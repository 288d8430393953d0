"""Small shared helpers for the stats package (private)."""
from __future__ import annotations

import math

import numpy as np


def as_positive_array(values, name: str = "values") -> np.ndarray:
    """Finite float array; performance metrics are ratios of positive numbers, so we require > 0."""
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float).ravel()
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: non-finite value")
    if arr.size and np.any(arr <= 0):
        raise ValueError(f"{name}: every value must be > 0 (effects are ratios, computed on logs)")
    return arr


def welch_difference(ma: float, va: float, ha: int, mb: float, vb: float, hb: int):
    """(difference mb - ma, its standard error, Welch-Satterthwaite df, df used for the interval).

    ``va``/``vb`` are the variances of the two means, ``ha``/``hb`` the effective counts. The arm
    carrying the variance sets the df used; only when the other arm's small variance rests on at
    least 4 values (two values that happen to agree say nothing), and 2x counts as a tie.
    """
    se2 = va + vb
    d = mb - ma
    if se2 <= 0:
        return d, 0.0, float(ha + hb - 2), float(min(ha, hb) - 1)
    df = se2 ** 2 / (va ** 2 / (ha - 1) + vb ** 2 / (hb - 1))
    h = min(ha, hb)
    if va > 2 * vb and hb >= 4:
        h = ha
    elif vb > 2 * va and ha >= 4:
        h = hb
    return d, math.sqrt(se2), float(df), float(min(df, h - 1))
