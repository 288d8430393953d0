"""One-factor-at-a-time baselines with fixed repeats: leave-one-out and add-one-in.

These are what people do by hand (and what asv-style tools automate). They are kept as strategies
so the simulation benchmark can show, in the same run, what the adaptive attribution saves.

* leave-one-out: measure good, bad and every "bad minus f" arm ``repeats`` times, in randomised
  rounds; f is a culprit when "bad minus f" is significantly better than bad (Welch on logs,
  Holm-corrected across factors).
* add-one-in: the same with "good plus f" compared to good.
"""
from __future__ import annotations


from .. import stats
from ..verdicts import AttributionVerdict, FactorEffect, RatioEstimate
from .base import StrategyBase


class _OneFactorStrategy(StrategyBase):
    name = "ofat"

    def __init__(self, factors, *, higher_is_better: bool = True, seed: int = 0, max_trials: int = 100_000,
                 repeats: int = 10, min_effect: float = 0.02, alpha: float = 0.05):
        super().__init__(factors, higher_is_better=higher_is_better, seed=seed, max_trials=max_trials)
        self.repeats = int(repeats)
        self.min_effect = float(min_effect)
        self.alpha = float(alpha)
        self.good = frozenset()
        self.bad = frozenset(self.factors)

    def _arm_for(self, f: str) -> frozenset[str]:
        raise NotImplementedError

    def _reference_for_factor(self) -> frozenset[str]:
        raise NotImplementedError

    def arms(self) -> list[frozenset[str]]:
        return [self.good, self.bad] + [self._arm_for(f) for f in self.factors]

    def _plan(self):
        arms = self.arms()
        if self.trials >= self.repeats * len(arms):
            return []
        return [arms[k] for k in self.rng.permutation(len(arms))]   # one randomised round

    def verdict(self) -> AttributionVerdict:
        g, b = self.values(self.good), self.values(self.bad)
        if len(g) < 2 or len(b) < 2:
            return AttributionVerdict("inconclusive", [], self.trials, strategy=self.name, factors=self.factors)
        reg = stats.compare(g, b, higher_is_better=self.higher_is_better, min_effect=self.min_effect,
                            alpha=self.alpha)
        regression = RatioEstimate(reg.ratio, reg.ci_low, reg.ci_high, reg.p_value, reg.n_a, reg.n_b)
        if not reg.regression:
            status = "no-regression" if reg.verdict != "different" or reg.improvement or reg.verdict == "same" else "inconclusive"
            if reg.verdict == "unknown":
                status = "no-regression"     # what a fixed-n one-factor study would report
            return AttributionVerdict(status, [], self.trials, regression=regression,
                                      strategy=self.name, factors=self.factors)
        ref = self._reference_for_factor()
        rv = self.values(ref)
        comps, pvals = [], []
        for f in self.factors:
            c = stats.compare(rv, self.values(self._arm_for(f)), higher_is_better=self.higher_is_better,
                              min_effect=self.min_effect, alpha=self.alpha)
            comps.append(c)
            pvals.append(c.p_value)
        reject, _ = stats.adjust_pvalues(pvals, "holm", self.alpha)
        culprits, effects = [], []
        for f, c, r in zip(self.factors, comps, reject):
            # leave-one-out: removing f must make bad better; add-one-in: adding f makes good worse
            hit = r and (c.improvement if self._is_loo else c.regression)
            if hit:
                culprits.append(f)
                effects.append(FactorEffect(f, "main", RatioEstimate(c.ratio, c.ci_low, c.ci_high, c.p_value,
                                                                     c.n_a, c.n_b), float("nan"), float("nan"), float("nan")))
        status = "culprits" if culprits else "inconclusive"
        return AttributionVerdict(status, sorted(culprits), self.trials, regression=regression,
                                  effects=tuple(effects), strategy=self.name, factors=self.factors)


class LeaveOneOutStrategy(_OneFactorStrategy):
    """Good, bad and every "bad minus f" arm, ``repeats`` times each (baseline)."""

    name = "leave-one-out"
    _is_loo = True

    def _arm_for(self, f):
        return self.bad - {f}

    def _reference_for_factor(self):
        return self.bad


class AddOneInStrategy(_OneFactorStrategy):
    """Good, bad and every "good plus f" arm, ``repeats`` times each (baseline)."""

    name = "add-one-in"
    _is_loo = False

    def _arm_for(self, f):
        return frozenset({f})

    def _reference_for_factor(self):
        return self.good
