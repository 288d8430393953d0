# Frozen copy of bisect_lab/strategies/bisection.py before model checking and the stall model: the
# baseline that benchmarks/simulate_bisection.py prints side by side with the current strategy
# (method "before"). Not used by the product.
"""Noise-aware bisection over an ordered list of candidates (issue 5).

Positions ``0 .. n-1`` are in history order; position 0 is the known-good endpoint, position ``n-1``
the known-bad one. The unknown is the change position ``c`` (``1 <= c <= n-1``): positions ``< c``
perform like good, positions ``>= c`` like bad.

Method, in the order it runs (docs/bisection.md has the figures):

1. **Confirm.** Measure both endpoints, alternating in a seeded random order, until a robust Welch
   test on log values says either "bad is worse than good" (go on) or "they differ by less than
   ``min_effect``" (``no-regression``). A noisy 1-vs-1 comparison is the classic way bisection goes
   wrong, so nothing is bisected before this holds.
2. **Posterior.** A distribution over ``c`` and over "no regression of ``min_effect`` or more",
   recomputed from every observation (endpoints included). Noise: normal on log values, with the
   two levels and the scale *integrated out* (flat / Jeffreys priors; the step has a half-normal
   prior either side of ``-min_effect``), so a handful of endpoint samples cannot make it
   overconfident; gross outliers are down-weighted by contaminated-normal EM weights; a shared
   linear drift, fitted on the endpoint samples only, is removed first. The body of the noise is
   skewed to match the data: its skewness is learned from the residuals (shrunk toward normal) and
   the normal body is swapped for a skew-normal one at the fitted levels and scale of each split.
   One scale per side (and no skew) when the endpoints clearly differ in variance.
3. **Next position.** The one with the largest expected information (mutual information between
   its next measurement and ``c``), from the fitted noise model. A position whose measurement was
   ambiguous keeps the highest information and is simply chosen again: repeats are adaptive, not
   fixed. With ``parallel=k`` the batch is completed greedily by joint information (a
   binary-channel approximation), adding speculative positions only while each adds at least a
   fifth of what the best single one would.
4. **Endpoints again.** Every ``REMEASURE_EVERY`` trials an endpoint is re-measured (drift guard;
   the levels are also the main remaining uncertainty), and whenever the best split is next to an
   endpoint.
5. **Stop** when one position holds ``confidence`` posterior mass and would still hold
   ``LOO_MASS`` without any one reading of it or of the position before it (``culprit``; a final
   check: if it fails and nothing else is informative, the fragile position is measured again);
   when "no regression" does, or the endpoints alone show a difference below ``min_effect``
   (``no-regression``); when the smallest range holding ``confidence`` cannot be split because its
   inner positions are untestable (``inconclusive``, reason ``untestable``, with the range); or at
   ``max_trials`` (``inconclusive``, reason ``budget``, with the remaining range).

Untestable positions (``tell(pos, None)``) are like ``git bisect skip``: never treated as bad, never
proposed again. Everything here is pure and seeded: the same seed and the same sequence of ``tell``
calls give the same decisions, so a campaign resumes by replaying its stored trials.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
from scipy import special as _special
from scipy import stats as _stats

from bisect_lab.stats import winsorize as _winsorize

__all__ = ["BisectVerdict", "BisectionStrategy", "bisect_sequence"]

# Robustness: observations are weighted as in EM for a contaminated normal,
# (1 - OUT_EPS) N(loc, scale) + OUT_EPS N(loc, OUT_K * scale), so that a gross outlier (beyond ~4
# sd) counts as a far less precise sample instead of dragging the fit and the posterior. The body
# stays normal: a Student-t of the same spread is more peaked and overstated the evidence of an
# ordinary sample by ~50% in simulation, which made "95%" mean 84%.
OUT_EPS = 0.01
OUT_K = 10.0
# Endpoint samples per side before the confirm test may decide; fewer gives a Welch df near 1.
MIN_ENDPOINT = 3
# Endpoint samples per side before the endpoints alone may answer no-regression.
NULL_MIN_ENDPOINT = 5
# Re-measure an endpoint after this many trials without one. A drift guard, and the endpoint levels
# are what the posterior is least sure of: in simulation every 12 trials beat every 30 (and never)
# on accuracy, mean and p95 trials at once.
REMEASURE_EVERY = 12
# EM iterations per observation; warm-started, so a few suffice.
EM_ITERS = 2
# Prior sd of the linear drift slope, in log units per trial: 1% per 100 trials is typical drift
# (clocks, temperature), so the ridge keeps a slope fitted on few endpoint points from running away.
DRIFT_PRIOR_SD = 1e-4
# A speculative batch member must add at least this share of the best single test's information.
SPECULATE_MIN_GAIN = 0.2
# Prior probability, when bisection starts, that there is no regression of min_effect or more (the
# confirm step can be fooled by noise); the data then decide.
NULL_PRIOR = 0.5
# Two-sided F-test p-value on the endpoint variances below which each side gets its own scale.
# Strict: skewed noise (the H200 eager tail) fakes variance differences between 4-sample groups
# often enough at 1%, and the separate-scale model is less efficient and has no "no regression"
# hypothesis. A variance ratio over 25 (5x the CV; losing CUDA graphs is 0.6% -> 14%) is no skew
# artefact: then p < 0.01 suffices.
SEPARATE_P = 1e-4
# Noise shape: the body of the likelihood is a skew-normal whose skewness is learned from the
# residuals of the observations whose side is sure (posterior SKEW_SURE; endpoints always), shrunk
# toward 0 (normal) as an estimate of sampling variance 6/N under a N(0, SKEW_PRIOR_SD) prior and
# capped at SKEW_MAX. The benchmark's noise has the heavy right tail of the H200 data: a normal body
# reads a bad position's high sample as strong evidence of "good". In simulation the learned skew
# saved ~4 trials at equal accuracy; a prior sd of 0.5 instead of 1 gave +0.8 points for +1 trial.
SKEW_PRIOR_SD = 1.0
SKEW_SURE = 0.95
SKEW_MAX = 0.9
# Final check before naming a culprit: without any one reading of the named position or of the one
# before it (the readings that tell it from its neighbours), the posterior must still give it at
# least this mass. With skewed noise a single strong-looking reading is weaker than the model says:
# in simulation over half of the wrong answers came from runs stopping in under 25 trials, right only
# 55% of the time. 0.5 and 0.8 both pay; 0.8 buys ~1 point of accuracy for ~1 more trial on average.
LOO_MASS = 0.5
# When the final check fails but no position carries this much expected information (nats) under
# the model (a huge step, very unequal noise), the fragile position is simply measured again.
RECHECK_MI = 1e-3
# Scale (log units) of the half-normal prior on the step beyond -min_effect, either way.
DELTA_SCALE = 0.1
# Pseudo-samples pulling each side's noise scale toward the pooled one.
SCALE_PRIOR_N = 8.0

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


# --------------------------------------------------------------------------- verdict
@dataclass(frozen=True)
class BisectVerdict:
    """Answer of a noisy bisection.

    status:     "culprit" | "no-regression" | "inconclusive".
    index:      the first bad position (culprit only), else None.
    mass:       posterior probability of ``index`` (culprit), else None.
    trials:     number of measurements made (== measure calls, untestable ones included).
    effect:     ratio bad/good of the metric (e.g. 0.95 = 5% lower), None if never estimated.
    effect_ci:  (lo, hi) interval of that ratio at ``confidence``.
    range:      smallest (lo, hi) position range holding >= confidence posterior mass, e.g.
                (499, 500) when 499 is untestable, or (1, n-1) when no range does (much mass on
                "no regression"); None for no-regression and before the confirm step ends.
    range_mass: posterior mass of ``range``.
    confidence: the stop confidence used.
    reason:     short machine-readable why: "posterior" (culprit); "endpoints-equal",
                "posterior-null" (no-regression); "untestable", "budget", "endpoints-undecided",
                "endpoint-untestable" (inconclusive); "running" (provisional, before done).
    path:       every trial in order, as (position, value) with value None for untestable.
    n:          number of positions.
    """

    status: str
    index: int | None
    mass: float | None
    trials: int
    effect: float | None
    effect_ci: tuple[float, float] | None
    range: tuple[int, int] | None
    range_mass: float | None
    confidence: float
    reason: str
    path: tuple[tuple[int, float | None], ...]
    n: int

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (tuples become lists)."""
        return {
            "status": self.status,
            "index": self.index,
            "mass": self.mass,
            "trials": self.trials,
            "effect": self.effect,
            "effect_ci": list(self.effect_ci) if self.effect_ci is not None else None,
            "range": list(self.range) if self.range is not None else None,
            "range_mass": self.range_mass,
            "confidence": self.confidence,
            "reason": self.reason,
            "path": [[p, v] for p, v in self.path],
            "n": self.n,
        }


# --------------------------------------------------------------------------- robust two-sample
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


# --------------------------------------------------------------------------- strategy
class BisectionStrategy:
    """Seeded ask/tell state machine for noisy bisection (see the module docstring for the method).

    Parameters: ``n`` positions (>= 2); ``higher_is_better`` for the metric; ``seed``;
    ``max_trials`` budget counting every tell (untestable included); ``confidence`` the posterior
    mass needed to name a culprit; ``min_effect`` the smallest relative regression of interest
    (endpoints closer than that give ``no-regression``); ``parallel`` how many positions may be
    outstanding at once (hosts).

    Protocol: ``ask()`` returns new positions to measure (up to the free slots); measure each once
    and ``tell(position, value)`` (``value=None`` = untestable). ``ask()`` returns ``[]`` only when
    ``done``; if every slot is already outstanding it returns the outstanding positions again. A tell
    for a position that was not asked is accepted as data (replay). Tells after ``done`` are recorded
    in ``trials``/``path`` but do not change the decision.
    """

    def __init__(
        self,
        n: int,
        *,
        higher_is_better: bool = True,
        seed: int = 0,
        max_trials: int = 300,
        confidence: float = 0.95,
        min_effect: float = 0.02,
        parallel: int = 1,
    ) -> None:
        if int(n) != n or n < 2:
            raise ValueError(f"n must be an integer >= 2 (good and bad endpoints), got {n!r}")
        if not 0.5 < confidence < 1:
            raise ValueError(f"confidence must be in (0.5, 1), got {confidence!r}")
        if not 0 < min_effect < 1:
            raise ValueError(f"min_effect must be in (0, 1), got {min_effect!r}")
        if max_trials < 2 * MIN_ENDPOINT:
            raise ValueError(f"max_trials must be >= {2 * MIN_ENDPOINT}, got {max_trials!r}")
        if int(parallel) != parallel or parallel < 1:
            raise ValueError(f"parallel must be an integer >= 1, got {parallel!r}")
        self.n = int(n)
        self.higher_is_better = bool(higher_is_better)
        self.seed = int(seed)
        self.max_trials = int(max_trials)
        self.confidence = float(confidence)
        self.min_effect = float(min_effect)
        self.parallel = int(parallel)
        # Work in u = sign * log(value) so that "good" is always the larger u, and the regression
        # size d = u_good - u_bad > 0 whatever the metric's direction.
        self._sign = 1.0 if higher_is_better else -1.0
        self._d_min = (-math.log(1 - min_effect)) if higher_is_better else math.log(1 + min_effect)
        self._path: list[tuple[int, float | None]] = []
        self._obs_pos: list[int] = []
        self._obs_u: list[float] = []
        self._obs_t: list[int] = []
        self._untestable: set[int] = set()
        self._outstanding: list[int] = []
        self._phase = "confirm"
        self._verdict: BisectVerdict | None = None
        self._last_endpoint_t = 0
        self._params: tuple[float, float, float, float, float] | None = None  # a, b, sg, sb, beta
        self._post: np.ndarray | None = None     # P(c = i), i = 0..n-1 (index 0 always 0)
        self._n_eff = (0.0, 0.0)                 # soft sample counts of the good and bad sides
        self._p_null = 0.0
        self._skew = 0.0                         # learned skewness of the noise (of u)
        self._recheck: int | None = None         # position the final check wants measured again
        # Scale of the half-normal prior on the step (log units): regressions of interest are a
        # few percent to tens of percent.
        self._delta_scale = max(DELTA_SCALE, 5 * self._d_min)

    # ------------------------------------------------------------------ public protocol
    @property
    def done(self) -> bool:
        """True once a verdict is reached (or the budget is spent)."""
        return self._verdict is not None

    @property
    def trials(self) -> int:
        """Number of tells so far (untestable ones included)."""
        return len(self._path)

    @property
    def posterior(self) -> np.ndarray | None:
        """Copy of P(change position = i) for i in 0..n-1, or None before the confirm step ends.
        Sums to 1 - ``p_no_regression``."""
        return None if self._post is None else self._post.copy()

    @property
    def p_no_regression(self) -> float:
        """Posterior probability of no regression of ``min_effect`` or more (0 before bisecting)."""
        return self._p_null

    def ask(self) -> list[int]:
        """Next positions to measure (at most ``parallel`` outstanding); [] only when done."""
        if self.done:
            return []
        free = self.parallel - len(self._outstanding)
        if free <= 0:
            return list(self._outstanding)
        if self._phase == "confirm":
            new = self._ask_confirm(free)
        else:
            new = self._ask_bisect(free)
        self._outstanding.extend(new)
        return list(new)

    def tell(self, position: int, value: float | None) -> None:
        """Record one trial of ``position``: its metric value, or None if it was untestable."""
        if isinstance(position, bool) or int(position) != position or not 0 <= position < self.n:
            raise ValueError(f"position must be an integer in 0..{self.n - 1}, got {position!r}")
        position = int(position)
        if value is not None:
            value = float(value)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"value for position {position} must be a finite positive number "
                    f"(effects are ratios), got {value!r}; pass None if it was untestable"
                )
        if position in self._outstanding:
            self._outstanding.remove(position)
        self._path.append((position, value))
        if self.done:
            self._verdict = _replace_trials(self._verdict, self._path)
            return
        t = len(self._path)
        if value is None:
            self._untestable.add(position)
            if position in (0, self.n - 1):
                self._finish("inconclusive", reason="endpoint-untestable")
                return
        else:
            self._obs_pos.append(position)
            self._obs_u.append(self._sign * math.log(value))
            self._obs_t.append(t)
            if position in (0, self.n - 1):
                self._last_endpoint_t = t
        if self._phase == "confirm":
            self._update_confirm()
        else:
            self._update_bisect()
        if not self.done and len(self._path) >= self.max_trials:
            self._finish("inconclusive", reason="budget")

    def verdict(self) -> BisectVerdict:
        """The verdict; before ``done`` a provisional ``inconclusive`` one describing the state."""
        if self._verdict is not None:
            return self._verdict
        return self._make_verdict("inconclusive", reason="running")

    # ------------------------------------------------------------------ confirm phase
    def _endpoint_samples(self) -> tuple[np.ndarray, np.ndarray]:
        pos = np.asarray(self._obs_pos, dtype=np.int64)
        u = np.asarray(self._obs_u, dtype=float)
        return u[pos == 0], u[pos == self.n - 1]

    def _ask_confirm(self, free: int) -> list[int]:
        pos = np.asarray(self._obs_pos, dtype=np.int64)
        counts = {0: int(np.sum(pos == 0)), self.n - 1: int(np.sum(pos == self.n - 1))}
        for p in self._outstanding:
            if p in counts:
                counts[p] += 1
        out: list[int] = []
        for _ in range(free):
            g, b = counts[0], counts[self.n - 1]
            if g != b:
                nxt = 0 if g < b else self.n - 1
            else:
                # Seeded random order within each good/bad pair: a drift over the campaign then
                # cannot line up with one side.
                rng = np.random.default_rng([self.seed, g])
                nxt = 0 if rng.random() < 0.5 else self.n - 1
            counts[nxt] += 1
            out.append(nxt)
        return out

    def _endpoint_test(self) -> tuple[float, float, float] | None:
        """(d, lower, upper): regression size u_good - u_bad of the endpoints and its two-sided
        interval at ``confidence``; None while a side has fewer than MIN_ENDPOINT samples."""
        good, bad = self._endpoint_samples()
        if good.size < MIN_ENDPOINT or bad.size < MIN_ENDPOINT:
            return None
        d, se, df = _welch(good, bad)
        q = float(_stats.t.ppf(1 - (1 - self.confidence) / 2, df))
        return d, d - q * se, d + q * se

    def _endpoints_equal(self) -> bool:
        """The endpoints differ by less than min_effect, at ``confidence``. Needs NULL_MIN_ENDPOINT
        samples a side: a scale estimated from 3 samples is too often far too small."""
        good, bad = self._endpoint_samples()
        if min(good.size, bad.size) < NULL_MIN_ENDPOINT:
            return False
        test = self._endpoint_test()
        return test is not None and test[2] < self._d_min

    def _update_confirm(self) -> None:
        test = self._endpoint_test()
        if test is None:
            return
        d, lo, _ = test
        good, bad = self._endpoint_samples()
        _, se, df = _welch(good, bad)
        # One-sided at 1 - confidence: a lenient gate on purpose. Looking after every pair makes
        # any per-look test leaky (~20% false starts with no step in simulation), and the
        # posterior below carries an explicit "no change" hypothesis that catches false starts;
        # a strict gate would instead cost every real regression several trials.
        lo1 = d - float(_stats.t.ppf(self.confidence, df)) * se
        cap = max(4 * MIN_ENDPOINT, self.max_trials // 3)
        if lo1 > 0 and d >= self._d_min / 2:
            self._start_bisect()
        elif self._endpoints_equal():
            self._finish("no-regression", reason="endpoints-equal")
        elif len(self._path) >= cap:
            # The endpoints alone cannot decide within a third of the budget: bisect if the
            # regression is at least significant, otherwise call it by the size of the estimate.
            if lo > 0:
                self._start_bisect()
            elif d < self._d_min / 2:
                self._finish("no-regression", reason="endpoints-equal")
            else:
                self._finish("inconclusive", reason="endpoints-undecided")

    def _start_bisect(self) -> None:
        self._phase = "bisect"
        good, bad = self._endpoint_samples()
        a, b = float(np.median(good)), float(np.median(bad))
        sg = max(float(np.std(_winsorize(good), ddof=1)), 1e-5)
        sb = max(float(np.std(_winsorize(bad), ddof=1)), 1e-5)
        self._params = (a, b, sg, sb, 0.0)
        self._update_bisect()

    # ------------------------------------------------------------------ bisection phase
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.asarray(self._obs_pos, dtype=np.int64)
        u = np.asarray(self._obs_u, dtype=float)
        t = np.asarray(self._obs_t, dtype=float)
        return pos, u, t

    def _drift_slope(self, pos: np.ndarray, u: np.ndarray, t: np.ndarray) -> float:
        """Linear drift per trial, from the endpoints only (their labels are known, so the slope
        cannot be confused with the change position), ridge-shrunk toward 0."""
        num = den = 0.0
        resid: list[np.ndarray] = []
        for p in (0, self.n - 1):
            m = pos == p
            if m.sum() < 4:
                return 0.0
            tt, uu = t[m] - t[m].mean(), u[m] - u[m].mean()
            num += float((tt * uu).sum())
            den += float((tt * tt).sum())
            resid.append(uu)
        var = float(np.var(np.concatenate(resid)))
        return num / (den + var / DRIFT_PRIOR_SD**2) if den > 0 else 0.0

    def _log_marginal(self, pos: np.ndarray, u: np.ndarray, omega: np.ndarray,
                      separate: bool) -> tuple[np.ndarray, np.ndarray]:
        """log P(data, regression >= min_effect | c) and log P(data, smaller or none | c), every c.

        Normal noise with unknown level (flat prior) and unknown scale (Jeffreys prior, integrated
        numerically on a log grid), shared by both sides; observation j has variance
        sigma^2 / omega_j (omega < 1 for samples the robust fit calls outliers). The step
        delta = bad - good (log units) has a half-normal prior of scale ``self._delta_scale`` on
        each side of -d_min: below it is a regression of interest, above it (including no change
        and improvements) is "no regression". That second hypothesis is what lets a bisection
        that the confirm step started on noise end in ``no-regression`` rather than name a culprit.
        Integrating the parameters out, rather than plugging in estimates from a handful of
        endpoint samples, keeps the posterior honest early on: plug-in estimates made "95%" mean
        ~75% in simulation.

        With ``separate`` (the endpoints clearly differ in variance) each side has its own scale and
        flat priors on both levels, and "no regression" is ruled out (-inf).

        Every c between two consecutive measured positions splits the data the same way, so the
        work is done once per such segment (a few dozen) and spread over its positions.
        """
        n = self.n
        xs, inv = np.unique(pos, return_inverse=True)
        W = np.cumsum(np.bincount(inv, weights=omega))
        U = np.cumsum(np.bincount(inv, weights=omega * u))
        Q = np.cumsum(np.bincount(inv, weights=omega * u * u))
        C = np.cumsum(np.bincount(inv)).astype(float)
        # Segment k: xs[k] < c <= xs[k+1]; good side = measured positions <= xs[k].
        Wg, Ug, Qg, Cg = W[:-1], U[:-1], Q[:-1], C[:-1]
        Wb, Ub, Qb, Cb = W[-1] - Wg, U[-1] - Ug, Q[-1] - Qg, C[-1] - Cg
        Sg = np.maximum(Qg - Ug * Ug / Wg, 0.0)
        Sb = np.maximum(Qb - Ub * Ub / Wb, 0.0)
        floor = 1e-10
        lengths = np.diff(xs)
        if separate:
            seg1 = (
                -0.5 * np.log(Wg) + _special.gammaln((Cg - 1) / 2) - (Cg - 1) / 2 * np.log(Sg + floor)
                - 0.5 * np.log(Wb) + _special.gammaln((Cb - 1) / 2) - (Cb - 1) / 2 * np.log(Sb + floor)
            )
            seg0 = np.full_like(seg1, -np.inf)
        else:
            N = C[-1]
            S = Sg + Sb + floor
            # Distance of the observed step from the -d_min boundary between the hypotheses.
            D = Ub / Wb - Ug / Wg + self._d_min
            h = 1 / Wg + 1 / Wb
            s2 = self._delta_scale**2
            lo = math.sqrt(float(S.min()) / max(N - 2, 1.0)) / 4
            hi = math.sqrt(float(S.max() + (D * D / h).max()) / max(N - 2, 1.0)) * 3
            sig = np.exp(np.linspace(math.log(lo), math.log(max(hi, lo * 1.01)), 32))
            v2 = sig * sig
            sh = v2[None, :] * h[:, None]
            v = sh + s2
            z = D[:, None] * np.sqrt(s2 / (v * sh))  # posterior mean / sd of the step, standardized
            common = (
                -(N - 1) * np.log(sig)[None, :]
                - S[:, None] / (2 * v2[None, :])
                + 0.5 * np.log(sh / v)
                - D[:, None] ** 2 / (2 * v)
            )
            seg1 = _logsumexp_rows(common + _special.log_ndtr(-z))
            seg0 = _logsumexp_rows(common + _special.log_ndtr(z))
            if self._skew != 0.0:
                c1, c0 = self._shape_correction(pos, u, xs, Ug / Wg, Ub / Wb)
                seg1, seg0 = seg1 + c1, seg0 + c0
        out1 = np.full(n, -np.inf)
        out0 = np.full(n, -np.inf)
        out1[1:] = np.repeat(seg1, lengths)
        out0[1:] = np.repeat(seg0, lengths)
        return out1, out0

    def _update_bisect(self) -> None:
        pos, u, t = self._arrays()
        beta = self._drift_slope(pos, u, t)
        u = u - beta * (t - t.mean())
        # Centre so that the sufficient statistics keep their precision.
        u = u - float(np.median(u))
        good, bad = u[pos == 0], u[pos == self.n - 1]
        # One scale per side only when the endpoints clearly disagree on it (a regression that
        # loses CUDA graphs turns CV 0.6% into 14%); otherwise one shared scale is more efficient.
        f = float(np.var(good, ddof=1) / max(np.var(bad, ddof=1), 1e-300))
        cdf = float(_special.fdtr(good.size - 1, bad.size - 1, f))
        p_var = 2 * min(cdf, 1 - cdf)
        separate = bool(p_var < SEPARATE_P or (p_var < 0.01 and max(f, 1 / max(f, 1e-300)) > 25))
        self._skew = 0.0 if separate else self._learn_skew(pos, u)
        self._recheck = None
        omega = np.ones_like(u)
        log_prior_c = math.log(1 / (self.n - 1))
        for it in range(EM_ITERS):
            logml, logml0 = self._log_marginal(pos, u, omega, separate)
            post, p0 = _normalized(logml, logml0, log_prior_c)
            # Soft fit given the posterior: w = P(position is bad) = P(c <= position).
            w = np.cumsum(post)[pos]
            og, ob = (1 - w) * omega, w * omega
            a = float((og * u).sum() / og.sum())
            b = float((ob * u).sum() / max(ob.sum(), 1e-12))
            sg2 = float((og * (u - a) ** 2).sum() / max((1 - w).sum() - 1, 1.0))
            sb2 = float((ob * (u - b) ** 2).sum() / max(w.sum() - 1, 1.0))
            if not separate:
                sg2 = sb2 = float(
                    ((og * (u - a) ** 2).sum() + (ob * (u - b) ** 2).sum()) / max(len(u) - 2, 1)
                )
            sg, sb = math.sqrt(max(sg2, 1e-10)), math.sqrt(max(sb2, 1e-10))
            self._params = (a, b, sg, sb, beta)
            self._n_eff = (float((1 - w).sum()), float(w.sum()))
            if it == EM_ITERS - 1:
                break
            # Robustness: a sample far from the side it probably belongs to counts less.
            omega = (1 - w) * _precision_weight((u - a) / sg) + w * _precision_weight((u - b) / sb)
        self._post = post
        self._p_null = p0
        i = int(np.argmax(post))
        if post[i] >= self.confidence and self._robust_to_one_reading(i, pos, u, omega, separate):
            self._finish("culprit", reason="posterior")
            return
        if p0 >= self.confidence:
            self._finish("no-regression", reason="posterior-null")
            return
        if self._endpoints_equal():
            self._finish("no-regression", reason="endpoints-equal")
            return
        lo, hi, mass = self._hpd_range()
        if mass >= self.confidence and hi > lo and all(
            p in self._untestable for p in range(lo, hi)
        ):
            self._finish("inconclusive", reason="untestable")

    def _learn_skew(self, pos: np.ndarray, u: np.ndarray) -> float:
        """Skewness of the noise from the residuals of the observations whose side the current
        posterior is sure of (endpoints always; inner positions at 1 - SKEW_SURE), each against its
        side's mean, clipped at 4 sd (gross outliers are the contamination's business) and shrunk
        toward 0 as a normal estimate of sampling variance 6/N under a N(0, SKEW_PRIOR_SD) prior.
        Uncertain positions are left out: a point put on the wrong side is a step away from its
        level, which would read as skew."""
        if self._post is None or self._post.sum() <= 0:
            return 0.0
        w = (np.cumsum(self._post) / float(self._post.sum()))[pos]
        g_side, b_side = w <= 1 - SKEW_SURE, w >= SKEW_SURE
        ug, ub = u[g_side], u[b_side]
        if ug.size < 3 or ub.size < 3:
            return 0.0
        e = np.concatenate([ug - ug.mean(), ub - ub.mean()])
        sd = math.sqrt(float((e * e).sum()) / (e.size - 2))
        if sd <= 0:
            return 0.0
        r = np.clip(e / sd, -4.0, 4.0)
        r = r - r.mean()
        v = float((r * r).mean())
        g = float((r**3).mean()) / v**1.5 if v > 0 else 0.0
        g *= SKEW_PRIOR_SD**2 / (SKEW_PRIOR_SD**2 + 6.0 / e.size)
        return min(max(g, -SKEW_MAX), SKEW_MAX)

    def _robust_to_one_reading(self, i: int, pos: np.ndarray, u: np.ndarray, omega: np.ndarray,
                               separate: bool) -> bool:
        """Final check before naming ``i``: dropping any one reading of ``i`` or ``i - 1`` (the
        readings that tell ``i`` from its neighbours) still leaves it LOO_MASS of the posterior."""
        worst, worst_pos = 1.0, None
        for j in np.flatnonzero((pos == i) | (pos == i - 1)):
            keep = np.ones(len(pos), dtype=bool)
            keep[j] = False
            post, _ = _normalized(*self._log_marginal(pos[keep], u[keep], omega[keep], separate))
            mass = float(post[i])
            if mass < worst:
                worst, worst_pos = mass, int(pos[j])
        if worst < LOO_MASS:
            self._recheck = worst_pos
            return False
        return True

    def _shape_correction(self, pos: np.ndarray, u: np.ndarray, xs: np.ndarray, mg: np.ndarray,
                          mb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per segment, log(skew-normal body) - log(normal body) summed over the observations,
        with the levels of that split plugged in (for "no regression" the step is held at the
        boundary -d_min when the split's own step is larger) and the fitted scale."""
        sn = _skewnormal_params(self._skew)
        sig = self._params[2] if self._params is not None else 1.0  # type: ignore[index]
        good = pos[None, :] <= xs[:-1, None]  # segments x observations
        out = []
        for step in (mb - mg, np.maximum(mb - mg, -self._d_min)):
            lev = np.where(good, mg[:, None], (mg + step)[:, None])
            r = (u[None, :] - lev) / sig
            out.append((_shape_logpdf(r, sn) - _noise_logpdf(r, 0.0, 1.0)).sum(axis=1))
        return out[0], out[1]

    def _hpd_range(self) -> tuple[int, int, float]:
        """Smallest contiguous [lo, hi] whose posterior mass >= confidence (first one on ties)."""
        post = self._post
        assert post is not None
        c = np.concatenate([[0.0], np.cumsum(post)])  # c[k] = mass of positions < k
        best = (1, self.n - 1, float(c[-1] - c[1]))
        # For each lo, the first hi with c[hi+1] - c[lo] >= confidence (c is non-decreasing).
        los = np.arange(1, self.n)
        his = np.searchsorted(c, c[los] + self.confidence - 1e-12, side="left") - 1
        ok = his <= self.n - 1
        if ok.any():
            widths = np.where(ok, his - los, self.n + 1)
            k = int(np.argmin(widths))
            lo, hi = int(los[k]), int(his[k])
            best = (lo, hi, float(c[hi + 1] - c[lo]))
        return best

    def _noise_densities(self) -> tuple[np.ndarray, np.ndarray, float]:
        a, b, sg, sb, _ = self._params  # type: ignore[misc]
        n_g, n_b = self._n_eff
        sg_e = sg * math.sqrt(1 + 1 / max(n_g, 1.0))
        sb_e = sb * math.sqrt(1 + 1 / max(n_b, 1.0))
        lo = min(a - 12 * sg_e, b - 12 * sb_e)
        hi = max(a + 12 * sg_e, b + 12 * sb_e)
        y = np.linspace(lo, hi, 256)
        dy = float(y[1] - y[0])
        fg = np.exp(_noise_logpdf(y, a, sg_e))
        fb = np.exp(_noise_logpdf(y, b, sb_e))
        return fg, fb, dy

    def _mi(self, q: np.ndarray) -> np.ndarray:
        """Mutual information (nats) between one measurement and its bad/good label, for each
        prior probability ``q`` of "bad", under the fitted noise model."""
        fg, fb, dy = self._noise_densities()
        q = np.asarray(q, dtype=float)[:, None]
        f = np.maximum(q * fb[None, :] + (1 - q) * fg[None, :], 1e-300)
        tb = fb * np.log(np.maximum(fb, 1e-300) / f)
        tg = fg * np.log(np.maximum(fg, 1e-300) / f)
        mi = (q * tb + (1 - q) * tg).sum(axis=1) * dy
        return np.maximum(mi, 0.0)

    def _channel_errors(self) -> tuple[float, float]:
        """(P(reads bad | good), P(reads good | bad)) for the likelihood-ratio threshold."""
        fg, fb, dy = self._noise_densities()
        bad_region = fb > fg
        eg = float(fg[bad_region].sum() * dy)
        eb = float(fb[~bad_region].sum() * dy)
        return min(max(eg, 1e-6), 0.5), min(max(eb, 1e-6), 0.5)

    def _ask_bisect(self, free: int) -> list[int]:
        post = self._post
        assert post is not None
        # F[x] = P(c <= x | a regression): the chance that position x reads bad. Conditioned on
        # a regression, because under "no regression" every position reads alike, so a test's
        # information is about where the step is; without this, the last position (F ~ 1 - P(no
        # regression) ~ 0.5) looked maximally informative and was measured hundreds of times.
        F = np.cumsum(post) / max(float(post.sum()), 1e-300)
        testable = np.ones(self.n, dtype=bool)
        for p in self._untestable:
            testable[p] = False
        testable[0] = testable[self.n - 1] = False  # endpoints carry no information about c
        new: list[int] = []
        t = len(self._path)
        ends_busy = any(p in (0, self.n - 1) for p in self._outstanding)
        if t - self._last_endpoint_t >= REMEASURE_EVERY and not ends_busy:
            pos = np.asarray(self._obs_pos, dtype=np.int64)
            ng, nb = int(np.sum(pos == 0)), int(np.sum(pos == self.n - 1))
            new.append(0 if ng <= nb else self.n - 1)
            # Count the re-measure as the latest endpoint trial so the next one waits again.
            self._last_endpoint_t = t
        # When the best candidate is an endpoint's neighbour (c = 1 or c = n-1), one side of the
        # split is that endpoint alone, so its level is the open question and only the endpoint
        # answers it: measuring the neighbour again cannot tell "a step right here" from "no
        # step at all" (a confirm step fooled by noise ends up exactly here).
        top = int(np.argmax(post))
        if not new and not ends_busy and top in (1, self.n - 1):
            pos = np.asarray(self._obs_pos, dtype=np.int64)
            end, nb = (0, 1) if top == 1 else (self.n - 1, self.n - 2)
            if np.sum(pos == end) <= np.sum(pos == nb) or nb in self._untestable:
                new.append(end)
        if len(new) >= free:
            return new
        # Information is a unimodal function of q = P(bad) (peak near 0.5, shifted when the two
        # sides have different noise), so only the testable positions nearest 0.5 need scoring.
        mi = np.full(self.n, -1.0)
        idx = np.flatnonzero(testable)
        if idx.size:
            near = idx[np.argsort(np.abs(F[idx] - 0.5), kind="stable")[:16]]
            mi[near] = self._mi(F[near])
        busy = [p for p in self._outstanding + new if p not in (0, self.n - 1)]
        if not busy:
            best = int(np.argmax(mi))  # first maximum: deterministic tie-break
            if mi[best] < 0:
                # Nothing testable is left inside (0, n-1): re-measure an endpoint rather than stall.
                return new or [0]
            if self._recheck is not None and mi[best] < RECHECK_MI:
                # The final check wants a second reading that the model deems uninformative.
                best = self._recheck
            new.append(best)
            busy.append(best)
            if len(new) >= free:
                return new
        return new + self._speculate(F, testable, busy, free - len(new), float(mi.max()))

    def _speculate(self, F, testable, busy, slots, best_single) -> list[int]:
        """Greedy batch completion by joint information under a binary-channel approximation."""
        eg, eb = self._channel_errors()
        # Candidates: positions at posterior quantiles plus the busy ones (repeats are allowed).
        levels = np.linspace(0.0, 1.0, 66)[1:-1]
        cand = set(int(x) for x in np.searchsorted(F, levels, side="left"))
        cand |= set(busy)
        cand = sorted(p for p in cand if 0 < p < self.n - 1 and testable[p])
        if not cand:
            return [] if busy else [0]
        chosen = list(busy)
        base = _joint_mi(F, chosen, eg, eb)
        single = _joint_mi(F, [int(np.argmax(np.where(testable, -np.abs(F - 0.5), -9)))], eg, eb)
        out: list[int] = []
        for _ in range(slots):
            gains = [(_joint_mi(F, chosen + [p], eg, eb) - base, -p) for p in cand]
            g, negp = max(gains)
            if g < SPECULATE_MIN_GAIN * max(single, 1e-12) and (out or busy):
                break
            chosen.append(-negp)
            out.append(-negp)
            base += g
        if not out and not busy:
            out.append(cand[0])
        return out

    # ------------------------------------------------------------------ verdicts
    def _finish(self, status: str, *, reason: str) -> None:
        self._verdict = self._make_verdict(status, reason=reason)
        self._outstanding.clear()

    def _effect(self, split: int | None) -> tuple[float | None, tuple[float, float] | None]:
        """Ratio bad/good and its interval; with ``split``, positions < split are good."""
        pos, u, _ = self._arrays()
        if split is None:
            good, bad = u[pos == 0], u[pos == self.n - 1]
        else:
            good, bad = u[pos < split], u[pos >= split]
        if good.size < 2 or bad.size < 2:
            return None, None
        d, se, df = _welch(good, bad)
        q = float(_stats.t.ppf(1 - (1 - self.confidence) / 2, df))
        # u = sign * log(value): log(bad/good) = -sign * d
        s = self._sign
        lo, hi = sorted((math.exp(-s * (d - q * se)), math.exp(-s * (d + q * se))))
        return math.exp(-s * d), (lo, hi)

    def _make_verdict(self, status: str, *, reason: str) -> BisectVerdict:
        index = mass = None
        rng = rmass = None
        if self._post is not None:
            lo, hi, rmass = self._hpd_range()
            rng = (lo, hi)
        if status == "culprit":
            assert self._post is not None
            index = int(np.argmax(self._post))
            mass = float(self._post[index])
            effect, ci = self._effect(index)
        elif status == "no-regression":
            rng = rmass = None
            effect, ci = self._effect(None)
        else:
            effect, ci = self._effect(None)
        return BisectVerdict(
            status=status,
            index=index,
            mass=mass,
            trials=len(self._path),
            effect=effect,
            effect_ci=ci,
            range=rng,
            range_mass=rmass,
            confidence=self.confidence,
            reason=reason,
            path=tuple(self._path),
            n=self.n,
        )


def _replace_trials(v: BisectVerdict, path: list) -> BisectVerdict:
    return replace(v, trials=len(path), path=tuple(path))


def _joint_mi(F: np.ndarray, positions: list[int], eg: float, eb: float) -> float:
    """I(c; readings) for binary readings at ``positions`` (repeats allowed) on a binary channel.

    The c-space is cut by the distinct positions into intervals; within one interval every reading
    has a known label, so only interval masses matter. Readings at one position are summarised by
    their count of "bad" reads (binomial), which keeps the outcome space small.
    """
    xs, reps = np.unique(np.asarray(positions, dtype=np.int64), return_counts=True)
    m = xs.size
    # Interval j (0..m): c <= xs[0] for j=0 ... xs[j-1] < c <= xs[j] ... c > xs[-1] for j=m.
    Fx = F[xs]
    edges = np.concatenate([[0.0], Fx, [1.0]])
    mass = np.clip(np.diff(edges), 0.0, None)
    if mass.sum() <= 0:
        return 0.0
    mass = mass / mass.sum()
    # P(outcome | interval) as a product over positions; position l is good in interval j iff j > l.
    table = np.ones((m + 1, 1))
    for l, r in enumerate(reps):
        k = np.arange(r + 1)
        p_bad_if_good = _stats.binom.pmf(k, r, eg)
        p_bad_if_bad = _stats.binom.pmf(k, r, 1 - eb)
        rows = np.where((np.arange(m + 1) > l)[:, None], p_bad_if_good[None, :], p_bad_if_bad[None, :])
        table = (table[:, :, None] * rows[:, None, :]).reshape(m + 1, -1)
    py = mass @ table
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(table > 0, np.log(table / np.maximum(py[None, :], 1e-300)), 0.0)
    return float(np.maximum((mass[:, None] * table * ratio).sum(), 0.0))


# --------------------------------------------------------------------------- library entry
def bisect_sequence(
    n: int,
    measure: Callable[[int], float | None],
    *,
    higher_is_better: bool = True,
    seed: int = 0,
    max_trials: int = 300,
    confidence: float = 0.95,
    min_effect: float = 0.02,
) -> BisectVerdict:
    """Find the first bad position among ``n`` ordered candidates by noisy bisection.

    ``measure(index) -> float | None`` runs one trial of candidate ``index`` (0 = known good,
    ``n-1`` = known bad) and returns its metric, or None when the candidate cannot be tested (build
    failure, patch does not apply). ``verdict.trials`` equals the number of ``measure`` calls.
    """
    strategy = BisectionStrategy(
        n,
        higher_is_better=higher_is_better,
        seed=seed,
        max_trials=max_trials,
        confidence=confidence,
        min_effect=min_effect,
        parallel=1,
    )
    while not strategy.done:
        for position in strategy.ask():
            strategy.tell(position, measure(position))
    return strategy.verdict()
