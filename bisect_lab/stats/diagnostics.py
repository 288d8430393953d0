"""Drift and outlier diagnostics. Pure functions over measurements in run order."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from ._util import as_positive_array


@dataclass(frozen=True)
class Drift:
    """A trend in one arm's (or, with groups, all arms') values over run order.

    ``slope`` is the relative change per trial (0.0002 = 2% per 100 trials), ``p_value`` tests
    slope = 0, ``drifting`` is ``p_value < alpha``. ``change`` is slope x span of trial indices.
    """

    slope: float
    se: float
    p_value: float
    drifting: bool
    change: float
    n: int

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in self.__dict__.items()}


def within_group_trend(times, values, groups=None, alpha: float = 0.05) -> Drift:
    """Slope of log(value) on time, with one intercept per group (arm).

    Arm fixed effects make the slope use only within-arm variation, so differences between arms
    cannot masquerade as drift (and, with randomised arm order, drift cannot masquerade as an arm
    effect once removed). Ordinary least squares on logs.
    """
    y = np.log(as_positive_array(values))
    t = np.asarray(list(times), dtype=float)
    g = np.zeros(y.size, dtype=int) if groups is None else np.unique(np.asarray(list(groups), dtype=object).astype(str), return_inverse=True)[1]
    nan = float("nan")
    if y.size != t.size or y.size == 0:
        return Drift(nan, nan, nan, False, nan, int(y.size))
    # demean within group
    ng = g.max() + 1
    cnt = np.bincount(g, minlength=ng).astype(float)
    ty = t - (np.bincount(g, t, ng) / cnt)[g]
    yy = y - (np.bincount(g, y, ng) / cnt)[g]
    sxx = float(ty @ ty)
    df = y.size - ng - 1
    if sxx <= 0 or df < 1:
        return Drift(nan, nan, nan, False, nan, int(y.size))
    b = float(ty @ yy) / sxx
    resid = yy - b * ty
    s2 = float(resid @ resid) / df
    se = math.sqrt(s2 / sxx) if s2 > 0 else 0.0
    p = float(2 * _st.t.sf(abs(b) / se, df)) if se > 0 else (0.0 if b else 1.0)
    span = float(t.max() - t.min())
    return Drift(b, se, p, p < alpha, b * span, int(y.size))


def detect_drift(values_in_run_order, alpha: float = 0.05) -> Drift:
    """Drift of one arm measured repeatedly, values in the order they were run."""
    v = list(values_in_run_order)
    return within_group_trend(range(len(v)), v, None, alpha)


def outliers(values, threshold: float = 3.5) -> list[int]:
    """Indices of outliers by the modified z-score on logs (median/MAD, Iglewicz-Hoaglin 3.5).

    Reported, never silently dropped: a heavy tail is often the real behaviour of the arm.
    """
    y = np.log(as_positive_array(values))
    if y.size < 3:
        return []
    med = np.median(y)
    mad = np.median(np.abs(y - med))
    if mad == 0:
        return [int(i) for i in np.flatnonzero(y != med)] if np.sum(y != med) <= y.size // 4 else []
    z = 0.6745 * (y - med) / mad
    return [int(i) for i in np.flatnonzero(np.abs(z) > threshold)]


def robust_sd(x) -> float:
    """1.4826 x the median absolute deviation: the standard deviation a normal sample would have,
    unmoved by a stalled trial in a heavy tail."""
    x = np.asarray(x, dtype=float)
    return 1.4826 * float(np.median(np.abs(x - np.median(x))))


def winsorize(x, k: float = 2.5, min_n: int = 4) -> np.ndarray:
    """Clip at median +- ``k`` robust sd (values already on the scale to clip, e.g. logs); fewer
    than ``min_n`` values, or no spread, are returned as they are."""
    x = np.asarray(x, dtype=float)
    if x.size < min_n:
        return x
    sd = robust_sd(x)
    if sd <= 0:
        return x
    med = float(np.median(x))
    return np.clip(x, med - k * sd, med + k * sd)


@dataclass(frozen=True)
class Step:
    """A change of every arm's level at one trial (a machine that changed mid-campaign).

    ``at``: the first trial index of the new level; ``size``: the change of the log level from
    then on (-0.04: everything about 4% lower); ``p_value``: Bonferroni over the places tried."""

    at: int
    size: float
    se: float
    p_value: float
    found: bool


def within_group_step(times, values, groups, alpha: float = 0.01, min_side: int = 4,
                      max_places: int = 60) -> Step:
    """The likeliest single step shared by all arms, with one intercept per arm (as
    :func:`within_group_trend`): at each place with ``min_side`` readings of a repeated arm on
    either side, the step's t statistic on within-arm variation; the largest, Bonferroni over the
    places tried. Arms measured once carry no within-arm information and are left out."""
    y = np.log(as_positive_array(values))
    t = np.asarray(list(times), dtype=float)
    keys = np.unique(np.asarray(list(groups), dtype=object).astype(str), return_inverse=True)[1]
    nan = float("nan")
    none = Step(-1, nan, nan, 1.0, False)
    cnt = np.bincount(keys)
    rep = cnt[keys] > 1
    y, t, keys = y[rep], t[rep], keys[rep]
    if y.size < 2 * min_side + 2:
        return none
    ng = int(keys.max()) + 1
    c = np.bincount(keys, minlength=ng).astype(float)
    c[c == 0] = 1
    yy = y - (np.bincount(keys, y, ng) / c)[keys]
    cuts = np.unique(t)[min_side:-min_side + 1] if np.unique(t).size > 2 * min_side else np.array([])
    if cuts.size > max_places:           # cost: a look after every trial of a 400-trial campaign
        cuts = cuts[np.linspace(0, cuts.size - 1, max_places).round().astype(int)]
    best = None
    df = y.size - int((np.bincount(keys) > 0).sum()) - 1
    if df < 2:
        return none
    for at in cuts:
        x = (t >= at).astype(float)
        xx = x - (np.bincount(keys, x, ng) / c)[keys]
        sxx = float(xx @ xx)
        if sxx <= 0:
            continue
        b = float(xx @ yy) / sxx
        r = yy - b * xx
        s2 = float(r @ r) / df
        if s2 <= 0:
            continue
        z = abs(b) / math.sqrt(s2 / sxx)
        if best is None or z > best[0]:
            best = (z, int(at), b, math.sqrt(s2 / sxx))
    if best is None:
        return none
    z, at, b, se = best
    p = min(1.0, float(2 * _st.t.sf(z, df)) * len(cuts))
    return Step(at, b, se, p, p < alpha)
