"""Decomposition of a regression into the terms that explain it.

A log-linear model of every measurement (``log value ~ 1 + factors + interaction terms``, OLS with
heteroscedasticity-robust HC3 errors) gives each culprit's multiplicative effect with an interval;
each term's *share* is its log effect over the regression that the good and bad arms' own readings
show, with an interval from the joint distribution of the two (both are linear in the same
readings). Used by the adaptive attribution, its staged driver and the screening designs, so that
all three report effects and shares the same way.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np

from .. import stats
from ..verdicts import FactorEffect, Interaction, RatioEstimate


def synergy(names, term: RatioEstimate, total_log: float) -> Interaction:
    """A significant interaction term that is not an all-or-nothing pattern: synergy when it
    pushes the same way as the whole regression (``total_log``), antagonism otherwise."""
    same_dir = (math.log(term.ratio) * total_log) > 0
    return Interaction(tuple(names), "synergy" if same_dir else "antagonism", term,
                       f"joint effect of {' and '.join(names)} is "
                       f"{'larger' if same_dir else 'smaller'} than the sum of their effects")


def loglinear_effects(y, cols, labels, kinds, *, alpha: float = 0.05, seed: int = 0,
                      shares_of: str = "terms", whole=None) -> list[FactorEffect]:
    """Fit ``log value ~ 1 + cols`` (OLS, heteroscedasticity-robust HC3 errors) and return one
    :class:`FactorEffect` per column: the term as a ratio with a t interval, and its share.

    ``shares_of="terms"``: each share is the term over all terms together. ``"references"``: over
    the regression the good and bad arms' own readings show, ``whole`` (``reference_contrast``: a
    weight per observation whose sum with ``y`` is that regression), with an interval from their
    joint distribution (both are linear in the same readings: classical covariance); without
    ``whole``, or when those readings show no regression, shares are of the terms, and a lone
    term's (100% by construction) has no interval (NaN bounds)."""
    import statsmodels.api as sm
    from scipy import stats as st

    if shares_of not in ("terms", "references"):
        raise ValueError(f"shares_of must be 'terms' or 'references', not {shares_of!r}")
    y = np.asarray(y, dtype=float)
    D = np.column_stack([np.ones(len(y))] + list(cols))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ols = sm.OLS(y, D).fit()
        fit = ols.get_robustcov_results(cov_type="HC3")
        pooled = np.asarray(ols.cov_params())[1:, 1:]
    beta = np.asarray(fit.params)[1:]
    cov = np.asarray(fit.cov_params())[1:, 1:]
    if not np.all(np.isfinite(cov)):
        cov = np.nan_to_num(cov, nan=0.0)
    # HC3 guards against arms of unequal noise, but an arm measured twice carries a variance
    # estimate of one degree of freedom: two close values made a -4.5% term look certain. The
    # pooled (classical) error is the floor.
    pooled = np.nan_to_num(pooled, nan=0.0)
    # a near-singular fit (few arms, wild values) can put inf in either: no warning on the console
    with np.errstate(over="ignore", invalid="ignore"):
        se = np.sqrt(np.maximum(np.maximum(np.diag(cov), np.diag(pooled)), 0))
        if np.trace(pooled) > np.trace(cov):
            cov = pooled
    dfree = max(1, len(y) - D.shape[1])
    q = st.t.ppf(1 - alpha / 2, dfree)
    total = beta.sum()
    rng = np.random.default_rng(seed)       # local: a verdict must not move a strategy's rng
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        draws = rng.multivariate_normal(beta, cov, size=4000, check_valid="ignore")
        tot = draws.sum(1, keepdims=True)
        shares = draws / tot
    joint = (_shares_of_whole(y, D, ols, whole, alpha, rng)
             if shares_of == "references" and whole is not None else None)
    effects = []
    for k, (lab, kind) in enumerate(zip(labels, kinds)):
        p = float(2 * st.t.sf(abs(beta[k]) / se[k], dfree)) if se[k] > 0 else float("nan")
        # a near-singular fit on a few wild values can put the bounds past exp's range: inf, not a crash
        with np.errstate(over="ignore"):
            lo_r, mid, hi_r = (float(x) for x in np.exp([beta[k] - q * se[k], beta[k], beta[k] + q * se[k]]))
        est = RatioEstimate(mid, lo_r, hi_r, p)
        if joint is not None:
            point, lo, hi = joint[k]
        else:
            sh = shares[:, k][np.isfinite(shares[:, k])]
            lo, hi = (np.quantile(sh, [alpha / 2, 1 - alpha / 2]) if sh.size else (np.nan, np.nan))
            point = float(beta[k] / total) if total else float("nan")
            if shares_of == "references" and len(labels) == 1:
                lo = hi = float("nan")       # 100% by construction: no interval to show
        effects.append(FactorEffect(lab, kind, est, point, float(lo), float(hi)))
    return effects


def reference_contrast(actives, good: frozenset, bad: frozenset) -> np.ndarray | None:
    """Weights over observations (by their active sets) whose sum with the log values is mean(bad
    readings) - mean(good readings); None with fewer than two readings of either."""
    ng = sum(1 for a in actives if a == good)
    nb = sum(1 for a in actives if a == bad)
    if ng < 2 or nb < 2:
        return None
    return np.array([1.0 / nb if a == bad else (-1.0 / ng if a == good else 0.0) for a in actives])


def _shares_of_whole(y, D, ols, c, alpha, rng):
    """(share, low, high) per term of the fit ``ols`` (design ``D``) over the reference contrast
    ``c``, or None when the contrast shows no regression at ``alpha``."""
    from scipy import stats as st
    c = np.asarray(c, dtype=float)
    n, p = D.shape
    if c.shape != (n,) or n <= p:
        return None
    r = float(c @ y)
    A = np.linalg.pinv(D)[1:]                   # beta (terms only) = A @ y
    s2 = float(np.sum(np.asarray(ols.resid) ** 2) / (n - p))
    if not (s2 > 0 and math.isfinite(s2)):
        return None
    L = np.vstack([A, c])
    cov = s2 * (L @ L.T)
    q = st.t.ppf(1 - alpha / 2, n - p)
    if abs(r) <= q * math.sqrt(cov[-1, -1]):
        return None                              # the references show no regression to share
    beta = A @ y
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        draws = rng.multivariate_normal(np.append(beta, r), cov, size=4000, check_valid="ignore")
        ratio = draws[:, :-1] / draws[:, -1:]
    out = []
    for k in range(len(beta)):
        v = ratio[:, k][np.isfinite(ratio[:, k])]
        lo, hi = (np.quantile(v, [alpha / 2, 1 - alpha / 2]) if v.size else (np.nan, np.nan))
        out.append((float(beta[k] / r), float(lo), float(hi)))
    return out


def reference_ratio(good, bad, *, higher_is_better: bool = True, alpha: float = 0.05) -> RatioEstimate | None:
    """``bad`` against ``good`` (metric values) as a ratio with its interval; None with fewer than
    two readings of either."""
    good, bad = np.asarray(good, dtype=float), np.asarray(bad, dtype=float)
    if good.size < 2 or bad.size < 2:
        return None
    c = stats.compare(good, bad, higher_is_better=higher_is_better, alpha=alpha)
    return RatioEstimate(c.ratio, c.ci_low, c.ci_high, c.p_value, c.n_a, c.n_b)


def shares_of_regression(effects, regression: RatioEstimate | None, *, alpha: float = 0.05,
                         seed: int = 0) -> tuple[FactorEffect, ...]:
    """Each term's share of the whole regression as the good and bad arms measured it
    (``regression``: see ``reference_ratio``): log effect over log regression, with an interval
    drawn from both estimates' intervals independently (the reference readings are part of the
    term's contrast too, so the interval is on the wide side). For effects that no single fit
    produced (several stages' own decompositions); a fit's own terms get their shares from
    ``loglinear_effects(..., shares_of="references")``, which knows the joint distribution.

    Without two readings of each reference, or without a regression they show (an interval
    excluding 1), the shares are kept (a lone term's without an interval: NaN bounds)."""
    effects = tuple(effects)
    r = regression
    if (not effects or r is None or not (0 < r.ci_low <= r.ratio <= r.ci_high < math.inf)
            or r.ci_low <= 1 <= r.ci_high):
        if len(effects) == 1:            # 100% by construction: no interval to show
            return (replace(effects[0], share_low=float("nan"), share_high=float("nan")),)
        return effects
    from statistics import NormalDist
    z = NormalDist().inv_cdf(1 - alpha / 2)
    lr = math.log(r.ratio)
    rng = np.random.default_rng(seed)       # local: a verdict must not move a strategy's rng
    total = lr + (math.log(r.ci_high) - math.log(r.ci_low)) / (2 * z) * rng.standard_normal(4000)
    out = []
    for e in effects:
        ef = e.effect
        if not (0 < ef.ci_low <= ef.ratio <= ef.ci_high < math.inf):
            out.append(replace(e, share=math.log(ef.ratio) / lr if ef.ratio > 0 else float("nan"),
                               share_low=float("nan"), share_high=float("nan")))
            continue
        b = math.log(ef.ratio)
        draws = (b + (math.log(ef.ci_high) - math.log(ef.ci_low)) / (2 * z) * rng.standard_normal(4000)) / total
        lo, hi = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
        out.append(replace(e, share=b / lr, share_low=float(lo), share_high=float(hi)))
    return tuple(out)
