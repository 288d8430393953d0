"""When the one-stage attribution may stop: the standard of proof for naming culprits (posterior,
confirmation arms, significance guard) and the stops without one (futility, broken references).

A mixin of ``attribution.AttributionStrategy``: it reads and sets that class's state.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import stats

# A confirmation arm's single reading further than this (in level spans) beyond good or bad is
# measured again before it may confirm anything.
OUTLYING = 0.6
# Futility: with this many good and bad readings each, a campaign whose references could not reach
# either answer of the gate within the whole budget (per arm, at the noise and difference seen so
# far) stops `inconclusive` at once. With the H200's 14% heavy-tailed noise on both arms and no
# regression, "no regression" needs about 270 readings per arm: two runs in three spent the whole
# 400-trial budget (mean 302) to end there anyway. Not before 20 readings each: the difference
# seen is the estimate the judgement rests on, and at 10 readings a side with Student-t noise at CV
# 14% its standard error is about 6%, so a real 10% culprit read near 0 and was given up at 22-34
# trials in 6 of 100 runs (benchmarks/simulate_attribution.py --robust --only t3h: 87% right at
# 10, 95% at 20, for 8 more trials; no other cell of the benchmark moves).
FUTILITY_MIN_REFS = 20
# ... when each arm would need more than the whole budget to reach the nearer answer from the
# estimate so far, and the noise is extreme: settling *any* difference against the gate's margin
# and min_effect would take more than this many budgets per arm (at CV 3% it takes about 150, so
# ordinary campaigns never stop this way). The estimate itself is noisy: at CV 3% and a 150-trial
# budget, a 0.5% estimate "needed" 151 trials per arm in one A/A run that then said "no
# regression" at 45 trials.
FUTILITY_NOISE_BUDGETS = 4


def known_noise_significant(y: np.ndarray, cols: list[np.ndarray], sigma: float, df: float,
                            level: float) -> bool:
    """The significance guard with the noise known (a noise prior in use): least squares on the
    same log-linear model, the covariance ``sigma^2 (X'X)^-1`` at the combined scale rather than
    HC3 from today's residuals; a t test of one culprit's main effect, for a pair the joint test
    of each member's main effect with the interaction (F with 2 and ``df`` degrees of freedom)."""
    from scipy import stats as st

    D = np.column_stack([np.ones(len(y))] + cols + ([cols[0] * cols[1]] if len(cols) == 2 else []))
    if np.linalg.matrix_rank(D) < D.shape[1]:
        return False
    XtX_inv = np.linalg.inv(D.T @ D)
    beta = XtX_inv @ D.T @ y
    cov = sigma ** 2 * XtX_inv
    if len(cols) == 1:
        return bool(2 * st.t.sf(abs(beta[1]) / np.sqrt(cov[1, 1]), df) < level)
    for main in (1, 2):
        idx = [main, 3]
        b = beta[idx]
        w = float(b @ np.linalg.solve(cov[np.ix_(idx, idx)], b))
        if not st.f.sf(w / 2, 2, df) < level:
            return False
    return True


class StopRules:
    """The standard of proof, and the stops that name nothing."""

    def _significant(self, obs, y, best_set) -> bool:
        """Frequentist guard against naming noise. In a log-linear model of all measurements
        (heteroscedasticity-robust HC3 errors): one culprit's main effect, or for a pair each
        member's main effect and the interaction jointly (Wald test), must differ from zero at
        level alpha / (number of factors) (Bonferroni: the search looked at all of them)."""
        import statsmodels.api as sm

        names = [self.factors[k] for k in best_set]
        cols = [np.array([1.0 if nm in o.active else 0.0 for o in obs]) for nm in names]
        level = self.alpha / len(self.factors)
        yy = np.asarray(y, dtype=float)
        known = self._known_noise()
        if known is not None:
            return known_noise_significant(yy, cols, *known, level)
        try:
            if len(cols) == 1:
                # one culprit: its main effect at alpha / N. Skipped when the references show
                # unequal noise: with a noisy bad level (14% CV) a mean-difference test would waste
                # the information in how tight the good level is (the gate and the confirmation
                # arms still apply there)
                refs = {self.good: list(self._arm_values(obs, y, self.good)),
                        self.bad: list(self._arm_values(obs, y, self.bad))}
                if self._heteroscedastic(refs):
                    return True
                D = np.column_stack([np.ones(len(yy)), cols[0]])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fit = sm.OLS(yy, D).fit(cov_type="HC3")
                return bool(fit.pvalues[1] < level)
            D = np.column_stack([np.ones(len(yy)), cols[0], cols[1], cols[0] * cols[1]])
            if np.linalg.matrix_rank(D) < 4:
                return False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # HC3 on a leverage-1 point: p-value NaN -> not significant
                fit = sm.OLS(yy, D).fit(cov_type="HC3")
            for main in (1, 2):
                R = np.zeros((2, 4))
                R[0, main] = 1.0
                R[1, 3] = 1.0
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    p = float(np.asarray(fit.wald_test(R, scalar=True).pvalue))
                if not p < level:
                    return False
            return True
        except (ValueError, np.linalg.LinAlgError):
            return False

    def _consistent(self, obs, y, post, best_set) -> bool:
        """Do the confirmation arms sit on the side of the midpoint the named hypothesis predicts?
        (bad minus culprits near good, good plus culprits near bad, and for and/or pairs each
        culprit alone near good/bad respectively)."""
        h = self._leading(post, best_set)
        if h is None:
            return False
        lv = post.levels
        span = lv.mu_bad - lv.mu_good
        if span == 0:
            return False
        C = frozenset(self.factors[k] for k in best_set)
        for arm in self._runnable(self.confirmation_arms(C)):
            expect = float(post.space.positions(self._matrix([arm]))[0, h])
            if 0.2 < expect < 0.8:
                continue                      # additive split: no side to check
            v = self._arm_values(obs, y, arm)
            if v.size == 0:
                return False
            position = (float(np.mean(v)) - lv.mu_good) / span
            if self._nearer_bad(v, lv) != (expect > 0.5):
                return False
            if v.size == 1 and not -OUTLYING <= position <= 1 + OUTLYING:
                # one reading far beyond both levels (a stalled trial) confirms nothing: the demo once
                # "confirmed" oea-topk without its env var from a single reading 75% past "bad"
                return False
        return True

    @staticmethod
    def _nearer_bad(v: np.ndarray, lv) -> bool:
        """Are these log values likelier at the bad level than at the good one, each level with
        its own noise? With equal noise this is "the mean is past the midpoint"; with a tight good
        level (CV 0.6%) and a noisy bad one (14%), one reading 5% above the bad level's centre is
        still plainly bad, where the midpoint rule would call it good half the time."""
        (mg, sg), (mb, sb) = (lv.at(0.0), lv.at(1.0))
        ll_g = float(np.sum(-0.5 * ((v - mg) / sg) ** 2) - v.size * math.log(sg))
        ll_b = float(np.sum(-0.5 * ((v - mb) / sb) ** 2) - v.size * math.log(sb))
        return ll_b > ll_g

    def judged_now(self):
        """``(gate, posterior)`` on every reading told so far, as :meth:`verdict` reads them; the
        ``posterior`` and ``gate_decision`` properties are those of the last ``ask``, a batch
        behind. ``(None, None)`` before two arms were measured. For a caller that decides between
        asks (the staged strategy's hand-over, the sessions genie floor)."""
        obs, y, _ = self._log_values()
        if len({o.active for o in obs}) < 2:
            return None, None
        return self._gate(obs, y), self._posterior(obs, y)

    def proven(self) -> tuple[str, ...] | None:
        """The culprit set that the standard of proof names on the measurements so far, or None:
        the posterior stop rule (``stop_probability``, ``set_probability``, ``miss_probability``)
        and the significance guard, but not the regression gate or the confirmation arms. For
        designs driven from outside (the genie floor in benchmarks/attribution_floor.py)."""
        obs, y, _ = self._log_values()
        if len({o.active for o in obs}) < 2:
            return None
        post = self._posterior(obs, y)
        best_set, best_p = post.best_set()
        if not best_set:
            return None
        if self._sure(post, best_set, best_p) and self._significant(obs, y, best_set):
            return tuple(self.factors[k] for k in best_set)
        return None

    def _sure(self, post, best_set, best_p) -> bool:
        """Stop rule. Every named factor must be a culprit with posterior probability >=
        ``stop_probability``, every other factor must be one with probability <= ``miss_probability``,
        and the named set itself must hold ``set_probability``. Per-factor control: the residual
        doubt may be spread over "f plus a weak partner" alternatives without blocking the answer."""
        if not best_set or best_p < self.set_probability:
            return False
        marg = post.factor_marginals()
        named = np.zeros(marg.size, bool)
        named[list(best_set)] = True
        return bool(marg[named].min() >= self.stop_probability
                    and (marg[~named].max() if (~named).any() else 0.0) <= self.miss_probability)

    def _refs_broken(self) -> bool:
        # the references failing again and again: nothing can be concluded
        for arm in (self.good, self.bad):
            if self.failures(arm) >= 3 and self.failures(arm) > 2 * len(self.values(arm)):
                return True
        return False

    def _futile(self, obs, y, gate) -> bool:
        """Could the references reach neither of the gate's answers within the whole budget?

        Readings per arm that the gate would need, at the noise and the difference seen so far, to
        confirm the regression (its lower bound past the margin) or to rule it out (its upper bound
        below min_effect); futile when even the nearer answer needs more than the campaign's budget
        per arm (``_futility_budget``), and the noise is extreme (see ``FUTILITY_NOISE_BUDGETS``).
        Records the estimate for the verdict's warning."""
        from scipy import stats as st

        g = self._arm_values(obs, y, self.good)
        b = self._arm_values(obs, y, self.bad)
        if gate is None or min(g.size, b.size) < FUTILITY_MIN_REFS:
            return False
        var = float(g.var(ddof=1) + b.var(ddof=1))
        thr = math.log1p(self.min_effect)
        margin = stats.MARGIN_FRAC * thr
        reg = gate.regression_log
        # the gate's own levels: alpha / 2 per look for a regression, a stricter one for "no regression"
        z_reg = st.norm.ppf(1 - self.alpha / 2)
        z_no = st.norm.ppf(1 - self.alpha / stats.NO_REGRESSION_ALPHA_DIVISOR)
        need = [var * (z / d) ** 2 for d, z in ((reg - margin, z_reg), (thr - reg, z_no)) if d > 0]
        n = min(need, default=math.inf)
        budget = self._futility_budget
        any_answer = var * ((z_reg + z_no) / (thr - margin)) ** 2
        if n <= budget or any_answer <= FUTILITY_NOISE_BUDGETS * budget:
            return False
        self._futile_per_arm = n
        return True

    @property
    def _futility_budget(self) -> int:
        return self.futility_trials or self.max_trials
