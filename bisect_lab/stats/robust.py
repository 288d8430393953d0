"""Readings a contamination model discounts as stalls (a shared box, a page-cache miss, a tail draw).

Model, on the log scale: a reading of an arm is ``(1 - eps) N(mu_arm, s_arm^2) + eps wide`` where
the wide component is ``WIDE`` times the arm's spread. A reading whose posterior odds of being wide
pass 1 is *discounted*: left out of the gate, the posterior and the effect intervals, and reported
(never silently: the verdict lists the trials). Why a mixture and not a t likelihood everywhere:
the gate and the intervals are Welch on logs, whose calibration is measured (tests/test_calibration.py);
leaving out what the mixture calls wide keeps that machinery and its Gaussian figures (of Gaussian
readings about 1 in 200 is discounted, most in arms of 8-11 readings whose spread is least known), while a stall
50% slower no longer drags an arm's mean or inflates its variance.

What is learned from the campaign's own readings: each arm's spread (a robust one, from the
distance of every reading to the median of the *other* readings of its arm, so a stall cannot hide
itself) and ``eps``, by EM over all readings, held near a small prior (``EPS_PRIOR`` with the weight
of ``EPS_PRIOR_N`` readings): a campaign whose readings stall often discounts at a lower threshold.
Arms with fewer than ``MIN_N`` readings are never judged: their spread is unknown.
"""
from __future__ import annotations

import math

import numpy as np

from ._util import welch_difference

EPS_PRIOR = 0.01
EPS_PRIOR_N = 50.0
EPS_MAX = 0.2
WIDE = 20.0
MIN_N = 8
# an arm's own spread is trusted alone from this many readings; below it, never
# below the campaign's pooled spread (a few agreeing readings prove no tight arm)
OWN_N = 12


def _median_var_factor(m: int) -> float:
    """Variance of the median of m normal readings, in units of sigma^2 (small m exactly enough)."""
    table = {1: 1.0, 2: 0.5, 3: 0.449, 4: 0.298, 5: 0.287, 6: 0.215, 7: 0.210}
    return table.get(m, math.pi / (2 * m))


def _loo(y: np.ndarray) -> np.ndarray:
    """Each reading's distance to the median of the others, standardised to the reading's sd."""
    n = y.size
    out = np.empty(n)
    for i in range(n):
        others = np.delete(y, i)
        out[i] = (y[i] - np.median(others)) / math.sqrt(1.0 + _median_var_factor(n - 1))
    return out


def discount(groups, *, eps: float | None = None, wide: float = WIDE, min_n: int = MIN_N):
    """Which readings of each group (log values of one arm) the contamination model discounts.

    Returns ``(masks, eps)``: one bool array per group (True = discounted), and the contamination
    share used (learned by EM unless given)."""
    groups = [np.asarray(g, dtype=float) for g in groups]
    masks = [np.zeros(g.size, bool) for g in groups]
    resid = {k: _loo(g) for k, g in enumerate(groups) if g.size >= min_n}
    if not resid:
        return masks, (EPS_PRIOR if eps is None else eps)
    own = {k: 1.4826 * float(np.median(np.abs(r))) for k, r in resid.items()}
    pooled = float(np.median(np.concatenate([np.abs(r) for r in resid.values()]))) * 1.4826
    z = {}
    for k, r in resid.items():
        s = own[k] if groups[k].size >= OWN_N else max(own[k], pooled)
        if s > 0:
            z[k] = r / s
    if not z:
        return masks, (EPS_PRIOR if eps is None else eps)
    zz = np.concatenate(list(z.values()))
    lw = math.log(wide)

    def p_wide(e: float) -> np.ndarray:
        l1 = math.log(1 - e) - 0.5 * zz ** 2
        l2 = math.log(e) - lw - 0.5 * (zz / wide) ** 2
        return 1.0 / (1.0 + np.exp(l1 - l2))

    e = EPS_PRIOR if eps is None else float(eps)
    if eps is None:
        for _ in range(20):
            new = float(np.clip((p_wide(e).sum() + EPS_PRIOR * EPS_PRIOR_N) / (zz.size + EPS_PRIOR_N),
                                1e-4, EPS_MAX))
            if abs(new - e) < 1e-5:
                e = new
                break
            e = new
    p = p_wide(e)
    at = 0
    for k in z:
        n = z[k].size
        masks[k] = p[at:at + n] > 0.5
        at += n
    return masks, e


def kept(values, *, eps: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One arm's positive values without what :func:`discount` discounts; (kept, discounted)."""
    v = np.asarray(values, dtype=float)
    (m,), _ = discount([np.log(v)], eps=eps)
    return v[~m], v[m]


def kept_pair(a, b, *, eps: float | None = None):
    """Two arms judged together (one eps, a pooled spread for arms of 5-7 readings)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    (ma, mb), _ = discount([np.log(a), np.log(b)], eps=eps)
    return a[~ma], b[~mb], int(ma.sum() + mb.sum())


def _arm_parts(y: np.ndarray, m: np.ndarray) -> tuple[float, float, int]:
    """(centre, variance of the centre, effective n) of one arm's logs with ``m`` discounted.

    The centre is the mean of the kept readings; its variance comes from the *winsorized* readings
    (each discounted one set to the nearest kept value on its side), over h, the kept count. The
    kept readings' own variance would be too small: they were kept for lying near the centre, and
    on Gaussian readings that selection alone had lifted the A/A "different" rate from 5.1% to 6.4%;
    Yuen's (n - 1) / (h (h - 1)), made for trimming the same distribution, over-covered stalls
    (96.7%), which are another distribution.
    """
    n = y.size
    keep = y[~m]
    h = keep.size
    if not m.any():
        return float(y.mean()), float(y.var(ddof=1)) / n, n
    if h < 2:
        return float("nan"), float("nan"), h
    lo, hi = float(keep.min()), float(keep.max())
    w = np.clip(y, lo, hi)
    return float(keep.mean()), float(w.var(ddof=1)) / h, h


def robust_log(a, b, *, eps: float | None = None):
    """Like ``compare.yuen_log`` on two arms of positive values, with the discounted readings as the
    trimmed ones: (difference of centres b - a on logs, its se, Welch df, conservative df, discounted)."""
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    nan = float("nan")
    if la.size < 2 or lb.size < 2:
        return nan, nan, nan, nan, 0
    (ma, mb), _ = discount([la, lb], eps=eps)
    (ca, va, ha), (cb, vb, hb) = _arm_parts(la, ma), _arm_parts(lb, mb)
    dropped = int(ma.sum() + mb.sum())
    if min(ha, hb) < 2 or not (math.isfinite(va) and math.isfinite(vb)):
        return nan, nan, nan, nan, dropped
    return (*welch_difference(ca, va, ha, cb, vb, hb), dropped)
