"""Screening designs: every trial informs every factor, in a fixed plan decided up front.

Full factorial (2^N arms) for a handful of factors; a regular fractional factorial for more (the
highest resolution that fits in ``max_runs`` arms: resolution V keeps two-factor interactions
apart from main effects and from each other, resolution IV keeps main effects clear of them);
Plackett-Burman beyond that (main effects only, N + 1 rounded up to a multiple of four arms).
Designs come from pyDOE (``ff2n``, ``fracfact_by_res``, ``pbdesign``).

Each round measures every design arm plus the good and the bad reference in random order; the
campaign is ``repeats`` rounds. The analysis is one log-linear OLS fit on +-1 coded factors (main
effects, and every two-factor interaction the design resolves), heteroscedasticity-robust (HC3)
errors, Holm's correction across all terms. A culprit is a factor whose main effect, or a
two-factor interaction it belongs to, is significant and points the way of the regression. Effects
and shares are then reported on the 0/1 (good/bad value) scale like the adaptive strategy's.

This is the non-adaptive alternative to :mod:`attribution`: it spends a known number of trials
whatever the data say (``bisect-lab attribute --strategy screening``), which suits a nightly
sweep with a fixed budget; the simulation benchmark runs it beside the adaptive default.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import stats
from ..verdicts import AttributionVerdict, Interaction, PlanEstimate, RatioEstimate
from .decomposition import loglinear_effects, reference_contrast, synergy
from .base import StrategyBase

DESIGNS = ("auto", "full", "fractional", "plackett-burman")


def screening_design(n: int, design: str = "auto", max_runs: int = 32) -> tuple[np.ndarray, str, bool]:
    """The design as a bool matrix (rows = arms, True = the factor takes its bad value), its name,
    and whether it resolves two-factor interactions (full factorial or resolution V)."""
    import pydoe

    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}; one of {', '.join(DESIGNS)}")
    if n < 1:
        raise ValueError("a screening design needs at least one factor")
    if design == "full" or (design == "auto" and 2 ** n <= max_runs):
        return pydoe.ff2n(n) > 0, f"full factorial 2^{n}", n >= 2
    if design in ("auto", "fractional"):
        # resolution III only when asked for a fractional design: Plackett-Burman does main effects
        # in fewer runs (24 for 20 factors against 32)
        for res in ((5, 4) if design == "auto" else (5, 4, 3)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    m = pydoe.fracfact_by_res(n, res)
            except (ValueError, IndexError):
                continue
            if len(m) <= max_runs:
                return m > 0, f"fractional factorial 2^({n}-{n - int(math.log2(len(m)))}), resolution {res}", res >= 5
    try:
        m = pydoe.pbdesign(n)
    except ValueError:
        # pyDOE builds Plackett-Burman from Hadamard matrices of order 12, 20 or a power of two
        # (times those); beyond, Sylvester's Hadamard matrix of the next power of two does the job
        from scipy.linalg import hadamard
        m = hadamard(2 ** math.ceil(math.log2(n + 1)))[:, 1:n + 1]
    return m > 0, f"Plackett-Burman, {len(m)} runs", False


class ScreeningStrategy(StrategyBase):
    """Fixed screening design with ``repeats`` randomised rounds (see module docstring)."""

    name = "screening"

    def __init__(self, factors, *, higher_is_better: bool = True, seed: int = 0, max_trials: int = 100_000,
                 design: str = "auto", repeats: int = 2, max_runs: int = 32, min_effect: float = 0.02,
                 alpha: float = 0.05):
        super().__init__(factors, higher_is_better=higher_is_better, seed=seed, max_trials=max_trials)
        self.repeats = max(1, int(repeats))
        self.min_effect = float(min_effect)
        self.alpha = float(alpha)
        self.good = frozenset()
        self.bad = frozenset(self.factors)
        rows, self.design_name, self.resolves_pairs = screening_design(len(self.factors), design, max_runs)
        arms = [self.good, self.bad]
        for r in rows:
            a = frozenset(f for f, on in zip(self.factors, r) if on)
            if a not in arms:
                arms.append(a)
        self._arms = arms

    def arms(self) -> list[frozenset[str]]:
        """The arms of one round: good, bad, then the design's (duplicates of the references dropped)."""
        return list(self._arms)

    @property
    def planned_trials(self) -> int:
        return self.repeats * len(self._arms)

    def _plan(self):
        if self.trials >= self.planned_trials:
            return []
        done = self.trials % len(self._arms)
        order = [self._arms[k] for k in self.rng.permutation(len(self._arms))]
        # a round cut short (a failed trial is still a trial) is completed, not restarted
        return order[: len(self._arms) - done] if done else order

    def estimated_total(self) -> int:
        return min(self.max_trials, self.planned_trials)

    def progress(self) -> dict:
        return {"trials": self.trials, "failed": self.failed, "design": self.design_name,
                "planned": self.planned_trials}

    # ------------------------------------------------------------------ analysis
    def verdict(self) -> AttributionVerdict:
        obs = [o for o in self.observations if o.ok]
        g, b = self.values(self.good), self.values(self.bad)
        base = dict(strategy=self.name, factors=self.factors, failed_trials=self.failed,
                    higher_is_better=self.higher_is_better, min_effect=self.min_effect, alpha=self.alpha,
                    extra={"design": self.design_name, "planned_trials": self.planned_trials})
        if len(g) >= 2 and len(b) >= 2:
            n_arm = stats.plan_trials([g, b], min_effect=self.min_effect, alpha=self.alpha)
            base["plan"] = PlanEstimate(stats.log_cv(g), stats.log_cv(b), self.min_effect, n_arm)
        y = np.log([o.value for o in obs]) if obs else np.zeros(0)
        X = np.array([[1.0 if f in o.active else -1.0 for f in self.factors] for o in obs]).reshape(len(obs), -1)
        terms = [(f"{f}", (k,)) for k, f in enumerate(self.factors)]
        if self.resolves_pairs:
            terms += [(f"{self.factors[i]}*{self.factors[j]}", (i, j))
                      for i in range(len(self.factors)) for j in range(i + 1, len(self.factors))]
        cols = [np.prod(X[:, list(idx)], axis=1) for _, idx in terms]
        D = np.column_stack([np.ones(len(y))] + cols) if len(y) else np.zeros((0, len(terms) + 1))
        if len(y) <= D.shape[1] or np.linalg.matrix_rank(D) < D.shape[1]:
            return AttributionVerdict("inconclusive", [], self.trials, warnings=(
                f"not enough measurements to fit the design's effects ({self.design_name}, "
                f"{self.planned_trials} trials planned)",), **base)
        import statsmodels.api as sm
        from scipy import stats as st
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sm.OLS(y, D).fit(cov_type="HC3")
        beta, pvals = np.asarray(fit.params)[1:], np.nan_to_num(np.asarray(fit.pvalues)[1:], nan=1.0)
        # bad vs good from every run of the design (not from the two reference arms alone): the
        # all-bad minus the all-good prediction, 2 x the sum of the main effects (+-1 coding; the
        # two-factor terms cancel)
        c = np.array([0.0] + [2.0 if len(idx) == 1 else 0.0 for _, idx in terms])
        cov = np.nan_to_num(np.asarray(fit.cov_params()), nan=0.0)
        d, se = float(c @ np.asarray(fit.params)), float(math.sqrt(max(c @ cov @ c, 0.0)))
        q = st.t.ppf(1 - self.alpha / 2, max(1, len(y) - D.shape[1]))
        with np.errstate(over="ignore"):
            lo, mid, hi = (float(v) for v in np.exp([d - q * se, d, d + q * se]))
        p = float(2 * st.t.sf(abs(d) / se, max(1, len(y) - D.shape[1]))) if se > 0 else float("nan")
        base["regression"] = RatioEstimate(mid, lo, hi, p, len(g), len(b))
        reject, _ = stats.adjust_pvalues(list(pvals), "holm", self.alpha)
        # the regression's direction on the log scale: a culprit's bad value moves the metric that way
        worse = -1.0 if self.higher_is_better else 1.0
        culprits: set[str] = set()
        pairs = []
        for (label, idx), b_, r in zip(terms, beta, reject):
            if not r or b_ * worse <= 0:
                continue
            if len(idx) == 1:
                culprits.add(self.factors[idx[0]])
            else:
                pairs.append(idx)
                culprits.update(self.factors[k] for k in idx)
        if not culprits:
            # a significant term (Holm over all of them) is the evidence of a regression; without
            # one, "no regression" needs the whole bad-vs-good contrast inside +-min_effect
            me = math.log1p(self.min_effect)
            same = lo > 0 and math.log(lo) > -me and math.log(hi) < me
            shown = (hi < 1) if self.higher_is_better else (lo > 1)
            why = ("a regression, but no factor's effect is significant in this design" if shown else
                   "the design could not tell whether there is a regression")
            return AttributionVerdict("no-regression" if same else "inconclusive", [], self.trials,
                                      warnings=() if same else (
                                          f"{why}: more rounds (--repeats) or the adaptive strategy",), **base)
        names = sorted(culprits)
        idx = {f: k for k, f in enumerate(self.factors)}
        Z = np.array([[1.0 if f in o.active else 0.0 for f in self.factors] for o in obs])
        cols01, labels, kinds = [], [], []
        for f in names:
            cols01.append(Z[:, idx[f]])
            labels.append(f)
            kinds.append("main")
        for i, j in pairs:
            cols01.append(Z[:, i] * Z[:, j])
            labels.append(f"{self.factors[i]}*{self.factors[j]}")
            kinds.append("interaction")
        # shares of the regression the two reference arms show (the design's own estimate is the
        # sum of the same terms: every share would read 100% of it)
        effects = loglinear_effects(y, cols01, labels, kinds, alpha=self.alpha, seed=self.seed + 1,
                                    shares_of="references",
                                    whole=reference_contrast([o.active for o in obs], self.good, self.bad))
        interactions = []
        own = {e.name: e for e in effects if e.kind == "main"}
        total = sum(math.log(e.effect.ratio) for e in effects)
        for (i, j), e in zip(pairs, [e for e in effects if e.kind == "interaction"]):
            a, c = self.factors[i], self.factors[j]
            # "and" unless a member causes a material regression of its own (partner at the good
            # value): significant, worse by min_effect (as the staged re-fit reads its pairs)
            material = [n for n in (a, c) if own[n].effect.p_value < self.alpha
                        and worse * math.log(own[n].effect.ratio) >= math.log1p(self.min_effect)]
            if not material:
                interactions.append(Interaction((a, c), "and", e.effect,
                                                f"the regression appears only when {a} and {c} are both bad"))
            else:
                interactions.append(synergy([a, c], e.effect, total))
        return AttributionVerdict("culprits", names, self.trials, effects=tuple(effects),
                                  interactions=tuple(interactions), hypothesis="screening", **base)
