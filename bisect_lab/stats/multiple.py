"""Multiple-comparison control across factors and metrics (statsmodels' implementation)."""
from __future__ import annotations

import numpy as np
from statsmodels.stats.multitest import multipletests


def adjust_pvalues(p_values, method: str = "holm", alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Return (reject, adjusted p-values). ``method``: "holm" (family-wise error, the default:
    a wrongly named culprit is the expensive mistake) or "fdr_bh" (Benjamini-Hochberg)."""
    p = np.asarray(list(p_values), dtype=float)
    if p.size == 0:
        return np.zeros(0, dtype=bool), np.zeros(0)
    reject, adj, _, _ = multipletests(p, alpha=alpha, method=method)
    return reject, adj
