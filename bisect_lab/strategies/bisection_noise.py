"""The noise model of the noisy bisection (``bisection.BisectionStrategy``): pure functions.

Readings are worked on as ``u = sign * log(value)``. The likelihood of a reading is a contaminated
normal (a gross outlier counts as a far less precise sample), optionally with a skew-normal body;
endpoint stalls are dropped before the confirm step's robust Welch comparison.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special as _special

from ..stats import winsorize as _winsorize

# Robustness: observations are weighted as in EM for a contaminated normal,
# (1 - OUT_EPS) N(loc, scale) + OUT_EPS N(loc, OUT_K * scale), so that a gross outlier (beyond ~4
# sd) counts as a far less precise sample instead of dragging the fit and the posterior. The body
# stays normal: a Student-t of the same spread is more peaked and overstated the evidence of an
# ordinary sample by ~50% in simulation, which made "95%" mean 84%.
OUT_EPS = 0.01
OUT_K = 10.0
# The outlier share is learned from the campaign's readings (issue #23: a fixed 1% read 5% of
# stalls as body, whose spread they then inflated ~3x, so most of them were not even discounted):
# the EM responsibilities' mean, under a prior worth EPS_PRIOR_N readings at OUT_EPS (clean data
# keep it near 1%), capped at EPS_MAX (beyond that, stalls are no longer "the few").
EPS_PRIOR_N = 50.0
EPS_MAX = 0.2
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

def _log_mix(eps: float) -> tuple[float, float]:
    """log weights (with the normal constants) of the body and of the outlier component."""
    return (math.log(1 - eps) - 0.5 * math.log(2 * math.pi),
            math.log(eps) - 0.5 * math.log(2 * math.pi) - math.log(OUT_K))



def _noise_logpdf(x: np.ndarray, loc: float, scale: float, eps: float = OUT_EPS) -> np.ndarray:
    log_core, log_out = _log_mix(eps)
    r2 = ((x - loc) / scale) ** 2
    return np.logaddexp(log_core - 0.5 * r2, log_out - 0.5 * r2 / OUT_K**2) - math.log(scale)


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


def _shape_logpdf(r: np.ndarray, sn: tuple[float, float, float], eps: float = OUT_EPS) -> np.ndarray:
    """log density of standardized residuals under the skew-normal body ``sn`` with the same
    gross-outlier contamination as ``_noise_logpdf`` (so an outlier stays an outlier)."""
    shape, loc, scale = sn
    log_out = _log_mix(eps)[1]
    z = (r - loc) / scale
    body = (math.log(2 * (1 - eps)) - 0.5 * math.log(2 * math.pi) - math.log(scale)
            - 0.5 * z * z + _special.log_ndtr(shape * z))
    return np.logaddexp(body, log_out - 0.5 * r * r / OUT_K**2)


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


def _core_share(r: np.ndarray, eps: float = OUT_EPS) -> np.ndarray:
    """EM responsibility of the body for each standardized residual (1 - P(outlier))."""
    log_core, log_out = _log_mix(eps)
    r2 = r * r
    lc = log_core - 0.5 * r2
    lo = log_out - 0.5 * r2 / OUT_K**2
    return np.exp(lc - np.logaddexp(lc, lo))


def _side_mixture_weight(x: np.ndarray, w: np.ndarray, a: float, sg: float, b: float, sb: float,
                         eps: float) -> np.ndarray:
    """Precision weight of new readings ``x`` under a fit (good level ``a``, bad ``b``) when each
    one's side is only known as P(bad) = ``w``: the body responsibility of the whole mixture, so a
    reading at an undecided position that sits on either level is body, and one far from both is
    an outlier (the per-side average of weights would halve the first)."""
    log_core, log_out = _log_mix(eps)
    zg, zb = (x - a) / sg, (x - b) / sb
    with np.errstate(divide="ignore"):
        lg, lb = np.log(np.maximum(1 - w, 0.0)) - math.log(sg), np.log(np.maximum(w, 0.0)) - math.log(sb)
    body = np.logaddexp(lg - 0.5 * zg * zg, lb - 0.5 * zb * zb) + log_core
    out = np.logaddexp(lg - 0.5 * zg * zg / OUT_K**2, lb - 0.5 * zb * zb / OUT_K**2) + log_out
    core = np.exp(body - np.logaddexp(body, out))
    return _weight_of(core)


def _weight_of(core: np.ndarray) -> np.ndarray:
    """EM precision weight from a body responsibility (``_core_share``) under the contaminated
    normal: ~1 in the body, 1/K^2 for a gross outlier (a crashed-then-retried run, a throttled
    GPU). Only gross ones: in simulation, down-weighting the ordinary skewed tail of the H200 data
    (+2.7 sd) shrank the fitted scale more than it removed misleading samples, and cost accuracy."""
    return core + (1 - core) / OUT_K**2


def _learned_eps(outlier_share: np.ndarray) -> float:
    """The outlier share from the readings' outlier responsibilities (M step of the EM), shrunk
    toward OUT_EPS by a prior worth EPS_PRIOR_N readings, floored at OUT_EPS, capped at EPS_MAX.
    Only the readings called outliers (responsibility > 1/2) count: the body's own tail (a few
    hundredths each) would lift eps off its floor on clean data, and a clean campaign should fit
    exactly as it did with the fixed share (its tuning and tests stand)."""
    k = float(np.sum(outlier_share[outlier_share > 0.5]))
    eps = (k + EPS_PRIOR_N * OUT_EPS) / (outlier_share.size + EPS_PRIOR_N)
    # Never below OUT_EPS: the fixed 1% was the floor of robustness the rest was tuned with, and
    # a clean campaign gains nothing from a thinner tail (it only makes the next stall count more).
    return min(max(eps, OUT_EPS), EPS_MAX)



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
