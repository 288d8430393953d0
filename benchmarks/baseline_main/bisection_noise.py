# Frozen copy of bisect_lab/strategies/bisection_noise.py as on main at 760128a (before the learned outlier share, issue #23 stalls):
# the baseline simulate_bisection.py runs as method "main". Not used by the product.
"""The noise model of the noisy bisection (``bisection.BisectionStrategy``): pure functions.

Readings are worked on as ``u = sign * log(value)``. The likelihood of a reading is a contaminated
normal (a gross outlier counts as a far less precise sample), optionally with a skew-normal body;
endpoint stalls are dropped before the confirm step's robust Welch comparison.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special as _special

from bisect_lab.stats import winsorize as _winsorize

# Robustness: observations are weighted as in EM for a contaminated normal,
# (1 - OUT_EPS) N(loc, scale) + OUT_EPS N(loc, OUT_K * scale), so that a gross outlier (beyond ~4
# sd) counts as a far less precise sample instead of dragging the fit and the posterior. The body
# stays normal: a Student-t of the same spread is more peaked and overstated the evidence of an
# ordinary sample by ~50% in simulation, which made "95%" mean 84%.
OUT_EPS = 0.01
OUT_K = 10.0
# Prior probability, when bisection starts, that there is no regression of min_effect or more (the
# confirm step can be fooled by noise); the data then decide.
NULL_PRIOR = 0.5
# Noise shape: the body of the likelihood is a skew-normal whose skewness is learned from the
# residuals of the observations whose side is sure (posterior SKEW_SURE; endpoints always), shrunk
# toward 0 (normal) as an estimate of sampling variance 6/N under a N(0, SKEW_PRIOR_SD) prior and
# capped at SKEW_MAX. The benchmark's noise has the heavy right tail of the H200 data: a normal body
# reads a bad position's high sample as strong evidence of "good". In simulation the learned skew
# saved ~4 trials at equal accuracy; a prior sd of 0.5 instead of 1 gave +0.8 points for +1 trial.
SKEW_PRIOR_SD = 1.0
SKEW_SURE = 0.95
SKEW_MAX = 0.9
# Confirm step: an endpoint reading this many robust sd (MAD) from its side's median is a stall.
STALL_MADS = 6.0

_LOG_CORE = math.log(1 - OUT_EPS) - 0.5 * math.log(2 * math.pi)
_LOG_OUT = math.log(OUT_EPS) - 0.5 * math.log(2 * math.pi) - math.log(OUT_K)


def _noise_logpdf(x: np.ndarray, loc: float, scale: float) -> np.ndarray:
    r2 = ((x - loc) / scale) ** 2
    return np.logaddexp(_LOG_CORE - 0.5 * r2, _LOG_OUT - 0.5 * r2 / OUT_K**2) - math.log(scale)


def _skewnormal_params(g: float) -> tuple[float, float, float]:
    """(shape, loc, scale) of the skew-normal with mean 0, sd 1 and skewness ``g``."""
    g = min(max(g, -SKEW_MAX), SKEW_MAX)
    if abs(g) < 1e-6:
        return 0.0, 0.0, 1.0
    # skewness = (4 - pi)/2 * m^3 / (1 - m^2)^1.5 with m = delta * sqrt(2/pi): solve for m.
    t = (2 * abs(g) / (4 - math.pi)) ** (2 / 3)
    m = math.sqrt(t / (1 + t))
    delta = math.copysign(m / math.sqrt(2 / math.pi), g)
    shape = delta / math.sqrt(1 - delta * delta)
    scale = 1 / math.sqrt(1 - m * m)
    return shape, -scale * delta * math.sqrt(2 / math.pi), scale


def _shape_logpdf(r: np.ndarray, sn: tuple[float, float, float]) -> np.ndarray:
    """log density of standardized residuals under the skew-normal body ``sn`` with the same
    gross-outlier contamination as ``_noise_logpdf`` (so an outlier stays an outlier)."""
    shape, loc, scale = sn
    z = (r - loc) / scale
    body = (math.log(2 * (1 - OUT_EPS)) - 0.5 * math.log(2 * math.pi) - math.log(scale)
            - 0.5 * z * z + _special.log_ndtr(shape * z))
    return np.logaddexp(body, _LOG_OUT - 0.5 * r * r / OUT_K**2)


def _mad(x: np.ndarray) -> float:
    """Normal-consistent median absolute deviation (the sd for normal data)."""
    return 1.4826 * float(np.median(np.abs(x - np.median(x)))) if x.size else 0.0


def _drop_stalls(x: np.ndarray) -> np.ndarray:
    """An endpoint's readings without gross outliers (beyond STALL_MADS robust sd of its median):
    a stall among a handful of endpoint readings otherwise decides the confirm step (a good
    endpoint that stalled once read as equal to the bad one: no-regression)."""
    if x.size < 3:
        return x
    med = float(np.median(x))
    mad = _mad(x)
    if mad <= 0:
        return x
    return x[np.abs(x - med) <= STALL_MADS * mad]


def _normalized(logml: np.ndarray, logml0: np.ndarray, log_prior_c: float = 0.0) -> tuple[np.ndarray, float]:
    """(P(c = i), P(no regression)) from the log marginals of "a regression at c" and "none at
    c" (see ``_log_marginal``), with NULL_PRIOR on "no regression"; together they sum to 1."""
    logp = logml + log_prior_c + math.log(1 - NULL_PRIOR)
    logp0 = logml0 + log_prior_c + math.log(NULL_PRIOR)
    top = max(float(logp[1:].max()), float(logp0[1:].max()))
    post = np.exp(logp - top)
    p0 = float(np.exp(logp0 - top).sum())
    z = post.sum() + p0
    return post / z, p0 / z


def _logsumexp_rows(x: np.ndarray) -> np.ndarray:
    # scipy.special.logsumexp costs more in argument handling than in arithmetic at this size.
    m = x.max(axis=1)
    return m + np.log(np.exp(x - m[:, None]).sum(axis=1))


def _precision_weight(r: np.ndarray) -> np.ndarray:
    """EM weight of a standardized residual under the contaminated normal: ~1 in the body, 1/K^2
    for a gross outlier (a crashed-then-retried run, a throttled GPU). Only gross ones: in
    simulation, down-weighting the ordinary skewed tail of the H200 data (+2.7 sd) shrank the
    fitted scale more than it removed misleading samples, and cost accuracy."""
    r2 = r * r
    lc = _LOG_CORE - 0.5 * r2
    lo = _LOG_OUT - 0.5 * r2 / OUT_K**2
    core = np.exp(lc - np.logaddexp(lc, lo))
    return core + (1 - core) / OUT_K**2



def _welch(good: np.ndarray, bad: np.ndarray) -> tuple[float, float, float]:
    """(mean(good) - mean(bad), standard error, Welch df) on winsorized samples."""
    g, b = _winsorize(good), _winsorize(bad)
    vg = float(np.var(g, ddof=1)) / g.size
    vb = float(np.var(b, ddof=1)) / b.size
    # Floor: identical repeated values (a cached result, a quantised metric) must not give se = 0.
    floor = 1e-12 + (1e-4) ** 2 / min(g.size, b.size)
    se2 = max(vg + vb, floor)
    denom = 0.0
    if g.size > 1:
        denom += vg * vg / (g.size - 1)
    if b.size > 1:
        denom += vb * vb / (b.size - 1)
    df = se2 * se2 / denom if denom > 0 else float(g.size + b.size - 2)
    df = max(1.0, min(df, float(g.size + b.size - 2)))
    return float(np.mean(g) - np.mean(b)), math.sqrt(se2), df
