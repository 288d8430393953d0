"""Small shared helpers for the stats package (private)."""
from __future__ import annotations

import numpy as np


def as_positive_array(values, name: str = "values") -> np.ndarray:
    """Finite float array; performance metrics are ratios of positive numbers, so we require > 0."""
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float).ravel()
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: non-finite value")
    if arr.size and np.any(arr <= 0):
        raise ValueError(f"{name}: every value must be > 0 (effects are ratios, computed on logs)")
    return arr
