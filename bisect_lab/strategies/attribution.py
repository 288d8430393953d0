"""Adaptive Bayesian attribution: which factors explain the difference between a good and a bad arm.

How it works (docs/attribution.md has the long version):

1. **Confirm the regression.** The good and bad arms are measured first (randomised order) and
   re-measured throughout; a sequential Welch-on-logs gate (``stats.regression_gate``) decides
   ``regression`` / ``no-regression`` / ``continue`` after each new reference measurement. While
   it is undecided the search interleaves with the references, unless the levels fitted on all
   measurements are already clearly apart.
2. **Search.** A posterior over culprit hypotheses (single factors, AND / OR pairs, free pairs;
   ``hypotheses.py``) is updated after every trial; the next arm is the candidate subset with the
   largest expected information about the hypothesis. Every trial informs every hypothesis
   (adaptive group testing with a noise model, not one factor at a time).
3. **Guard against drift.** References are re-measured every ``reference_every`` trials; a within-arm
   linear trend is estimated and removed when it is significant.
4. **Confirm the answer.** When one culprit set holds ``stop_probability`` of the posterior, the arms
   "bad minus culprits" and "good plus culprits" must have been measured; the posterior is checked
   again with them, and the regression gate must say ``regression``: on the references, or, once
   the posterior is sure, on every measurement the named hypothesis puts at the good or bad level
   ("bad minus f" is another good measurement, "good plus f" another bad one).
5. **Decompose.** A log-linear model with heteroscedasticity-robust (HC3) errors gives each culprit's
   effect, the interaction term, and the share of the regression each explains, with intervals.

Answers ``no-regression`` when the gate says the difference is below ``min_effect``, and
``inconclusive`` when the budget runs out first: a culprit is never named without both the gate and
the posterior agreeing.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, Iterable

import numpy as np

from .. import stats
from ..verdicts import AttributionVerdict, ConfirmationCheck, Interaction, PlanEstimate, RatioEstimate
from .base import Observation, StrategyBase, drive
from .decomposition import loglinear_effects, reference_contrast, synergy
from .hypotheses import AND, FAMILY_NAMES, OR, HypothesisSpace, posterior


# Standard errors by which the good and bad levels fitted on all measurements must clear
# min_effect before the search stops interleaving references 1:1 (see _levels_apart).
LEVELS_APART_Z = 2.0
# A confirmation arm's single reading further than this (in level spans) beyond good or bad is
# measured again before it may confirm anything.
OUTLYING = 0.6
MAX_ARM_FAILURES = 3
# After one good and one bad measurement, a difference this many times min_effect starts the search
# at once: a large culprit is then found and confirmed by the split and confirmation arms, whose
# values count for the gate under the named hypothesis (two more references would be spent on
# what the splits show anyway). Smaller differences wait for the usual 2 + 2 references.
FAST_START = 4.0
# ... and only for as many trials as a large culprit's splits and confirmation need (plus this many)
FAST_EXTRA = 2
# Futility: with this many good and bad readings each, a campaign whose references could not reach
# either answer of the gate within the whole budget (per arm, at the noise and difference seen so
# far) stops `inconclusive` at once. With the H200's 14% heavy-tailed noise on both arms and no
# regression, "no regression" needs about 270 readings per arm: two runs in three spent the whole
# 400-trial budget (mean 302) to end there anyway.
FUTILITY_MIN_REFS = 10
# ... when each arm would need more than the whole budget to reach the nearer answer from the
# estimate so far, and the noise is extreme: settling *any* difference against the gate's margin
# and min_effect would take more than this many budgets per arm (at CV 3% it takes about 150, so
# ordinary campaigns never stop this way). The estimate itself is noisy: at CV 3% and a 150-trial
# budget, a 0.5% estimate "needed" 151 trials per arm in one A/A run that then said "no
# regression" at 45 trials.
FUTILITY_NOISE_BUDGETS = 4


class AttributionStrategy(StrategyBase):
    """Seeded ask/tell attribution strategy (see module docstring).

    Parameters beyond the protocol:
      min_effect: smallest relative regression of interest (0.02 = 2%).
      alpha: error level of the good-vs-bad gate and of reported intervals.
      stop_probability: posterior probability a culprit set needs before confirmation.
      initial_repeats: good and bad measurements each before anything else (>= 1; default 1 when
        ``batch_size`` is 1, else 2; with 1, the
        search starts at once only when they differ by ``FAST_START`` x min_effect, else a second
        pair of references comes first).
      reference_every: once the regression is confirmed, re-measure a reference arm every this
        many trials (drift guard).
      confirm_repeats: measurements of each confirmation arm required at the end.
      batch_size: arms per ask() once the initial batch is done (several hosts in parallel).
      futility_trials: the budget the futility stop measures against (default ``max_trials``; a
        stage of a staged campaign passes the whole campaign's).
      rhos: the additive pairs' split grid (default ``hypotheses.RHO_GRID``).
      robust: leave out of every decision (gate, posterior, effects) the readings a contamination
        model discounts as stalls (``stats.robust``), and say which in the verdict; False is the
        Gaussian behaviour before it, kept for the benchmark's side by side.
    """

    name = "attribution"

    def __init__(self, factors: Iterable[str], *, higher_is_better: bool = True, seed: int = 0,
                 max_trials: int = 400, min_effect: float = 0.02, alpha: float = 0.05,
                 stop_probability: float = 0.99, initial_repeats: int | None = None,
                 reference_every: int = 8, confirm_repeats: int = 1, batch_size: int = 1,
                 n_random_candidates: int = 30, drift_alpha: float = 0.01,
                 set_probability: float = 0.9, miss_probability: float = 0.05,
                 family_prior=None, search_per_reference: int = 1, confirm_bonus: float = 0.3,
                 futility_trials: int | None = None, rhos=None, robust: bool = True):
        super().__init__(factors, higher_is_better=higher_is_better, seed=seed, max_trials=max_trials)
        if not 0 < min_effect < 1:
            raise ValueError("min_effect must be in (0, 1)")
        self.min_effect = float(min_effect)
        self.alpha = float(alpha)
        self.stop_probability = float(stop_probability)
        # one trial at a time: one pair first (a large culprit may need no more references); with
        # several hosts two pairs fill the first batch anyway
        self.initial_repeats = max(1, int(initial_repeats if initial_repeats is not None
                                          else (1 if batch_size <= 1 else 2)))
        self.reference_every = max(2, int(reference_every))
        self.confirm_repeats = max(1, int(confirm_repeats))
        self.batch_size = max(1, int(batch_size))
        self.n_random_candidates = int(n_random_candidates)
        self.drift_alpha = float(drift_alpha)
        self.search_per_reference = max(1, int(search_per_reference))
        self.confirm_bonus = float(confirm_bonus)
        self.futility_trials = futility_trials
        self.set_probability = float(set_probability)
        self.miss_probability = float(miss_probability)
        self.index = {f: k for k, f in enumerate(self.factors)}
        space_kw = {}
        if family_prior is not None:
            space_kw["family_prior"] = family_prior
        if rhos is not None:
            space_kw["rhos"] = tuple(rhos)
        self.space = HypothesisSpace(len(self.factors), **space_kw)
        self.good = frozenset()
        self.bad = frozenset(self.factors)
        self._since_reference = 0      # recomputed from the observations at every plan
        self._state: dict = {}
        self._outcome: str | None = None
        self._futile_per_arm: float | None = None
        self.robust = bool(robust)
        # campaign trial number of each told observation, when a driver (a residual stage) tells
        # this strategy only part of the campaign; None: the observation's own index
        self.trial_numbers: list[int] | None = None
        self._discounted: list[Observation] = []
        self._raw: tuple = ([], np.zeros(0))      # every reading of the last _log_values
        self._step = None                         # a machine step found by the last _log_values

    # ------------------------------------------------------------------ data views
    def _ok(self) -> list[Observation]:
        return [o for o in self.observations if o.ok]

    def _log_values(self) -> tuple[list[Observation], np.ndarray, object]:
        """Observations and their log values, detrended when a within-arm trend is significant;
        without the readings discounted as stalls (robust)."""
        obs = self._ok()
        y = np.log([o.value for o in obs]) if obs else np.zeros(0)
        drift = None
        groups = [o.active for o in obs]
        if len(obs) >= 8 and len(set(groups)) < len(groups):
            keys = [",".join(sorted(g)) for g in groups]
            values = [o.value for o in obs]
            drift = stats.within_group_trend([o.index for o in obs], values, keys,
                                             alpha=self.drift_alpha)
            if drift.drifting and math.isfinite(drift.slope):
                t = np.array([o.index for o in obs], dtype=float)
                y = y - drift.slope * (t - t.mean())
        self._raw = (obs, y)
        if self.robust and obs:
            keep = self._without_stalls(obs)
            if len(keep) < len(obs):
                idx = {o.index for o in keep}
                y = np.array([v for o, v in zip(obs, y) if o.index in idx])
                obs = keep
        return obs, y, drift

    def _machine_step(self, obs) -> None:
        """Did every arm's level change at one trial (another job on the box, a clock change)?
        Seen by the re-measured arms, the references first. Reported, not removed: the step's
        size is the largest of many places tried, so it comes out too large (a 4% step read as 8%
        once), and removing that had named a second, false culprit."""
        self._step = None
        groups = [o.active for o in obs]
        if not self.robust or len(obs) < 16 or len(set(groups)) == len(groups):
            return
        keys = [",".join(sorted(g)) for g in groups]
        step = stats.within_group_step([o.index for o in obs], [o.value for o in obs], keys,
                                       alpha=self.drift_alpha)
        if step.found:
            self._step = step

    def _without_stalls(self, obs: list[Observation]) -> list[Observation]:
        """Drop what the contamination model of ``stats.robust`` discounts, arm by arm; remembered
        for the verdict's warning."""
        by_arm: dict[frozenset, list[Observation]] = {}
        for o in obs:
            by_arm.setdefault(o.active, []).append(o)
        arms = list(by_arm.values())
        masks, _ = stats.discount([np.log([o.value for o in a]) for a in arms])
        out = {o.index for a, m in zip(arms, masks) for o, d in zip(a, m) if d}
        self._discounted = [o for o in obs if o.index in out]
        return [o for o in obs if o.index not in out] if out else obs

    def _trial_number(self, o: Observation) -> int:
        """1-based number of the trial in the campaign, as progress lines count them."""
        tn = self.trial_numbers
        return (tn[o.index] if tn is not None and o.index < len(tn) else o.index) + 1

    @property
    def regression_confirmed(self) -> bool:
        """Did the good-vs-bad gate on the references say ``regression`` at the last plan?"""
        gate = self._state.get("gate")
        return gate is not None and gate.decision == "regression"

    def _arm_values(self, obs, y, arm) -> np.ndarray:
        return np.array([v for o, v in zip(obs, y) if o.active == arm])

    def _gate(self, obs, y):
        if self.robust:
            # every reading, the discounted ones as Yuen's trimmed ones: dropping them outright
            # would leave variances too small (they were dropped for lying far out)
            obs, y = self._raw
        g = np.exp(self._arm_values(obs, y, self.good))
        b = np.exp(self._arm_values(obs, y, self.bad))
        if len(g) < 2 or len(b) < 2:
            return None
        return stats.regression_gate(g, b, higher_is_better=self.higher_is_better,
                                     min_effect=self.min_effect, alpha=self.alpha, robust=self.robust)

    def _matrix(self, arms) -> np.ndarray:
        """Arms as rows of a bool matrix over the factors (what hypothesis positions take)."""
        arms = list(arms)
        X = np.zeros((len(arms), len(self.factors)), dtype=bool)
        for r, a in enumerate(arms):
            X[r, [self.index[f] for f in a]] = True
        return X

    def _leading(self, post, best_set) -> int | None:
        """The most probable hypothesis whose culprits are ``best_set``."""
        w = post.weights
        members = [h for h in np.flatnonzero(w > 1e-9) if post.space.culprits(int(h)) == tuple(best_set)]
        return max(members, key=lambda k: w[k]) if members else None

    def _level_values(self, obs, y, post, best_set) -> tuple[np.ndarray, np.ndarray] | None:
        """Log values the named hypothesis places at the good level (position 0) and at the bad
        level (position 1)."""
        h = self._leading(post, best_set) if best_set else None
        if h is None or not obs:
            return None
        pos = self.space.positions(self._matrix(o.active for o in obs))[:, h]
        return np.asarray(y)[pos < 0.01], np.asarray(y)[pos > 0.99]

    def _level_gate(self, obs, y, post, best_set, levels=None):
        """The good-vs-bad gate on every measurement the named hypothesis places at the good level
        (position 0) or the bad level (position 1), not only on the two reference arms: under
        "f is the culprit", "bad minus f" is another good measurement and "good plus f" another
        bad one. The hypothesis was chosen by looking at the data, so this gate alone never names
        anything: the posterior, the confirmation arms and the significance guard at alpha / N
        (which corrects for that choice) must agree. Measured cost of that choice: about 1.5% of
        A/A runs name a culprit (tests/test_calibration.py), against 0-1% on the references alone."""
        if self.robust:
            # every reading at the two levels, the discounted ones as Yuen's trimmed ones (see _gate)
            levels = self._level_values(*self._raw, post, best_set)
        elif levels is None:
            levels = self._level_values(obs, y, post, best_set)
        if levels is None:
            return None
        g, b = np.exp(levels[0]), np.exp(levels[1])
        if len(g) < 2 or len(b) < 2:
            return None
        return stats.regression_gate(g, b, higher_is_better=self.higher_is_better,
                                     min_effect=self.min_effect, alpha=self.alpha, robust=self.robust)

    def _posterior(self, obs, y):
        """Posterior over hypotheses from every measurement so far (see hypotheses.posterior)."""
        arms: dict[frozenset, list[float]] = {}
        for o, v in zip(obs, y):
            arms.setdefault(o.active, []).append(float(v))
        keys = list(arms)
        X = self._matrix(keys)
        ys = [np.asarray(arms[a]) for a in keys]
        # noise scale: pooled within-arm variance of the replicated arms, expressed at the good
        # level; the bad/good variance ratio only when the references differ significantly
        g = np.asarray(arms.get(self.good, []))
        b = np.asarray(arms.get(self.bad, []))
        ratio = 1.0
        if self._heteroscedastic(arms):
            ratio = float(np.clip(b.var(ddof=1) / g.var(ddof=1), 1e-4, 1e4))
        ss, df = 0.0, 0
        pos_ref = {self.good: 0.0, self.bad: 1.0}
        for a, vals in arms.items():
            if len(vals) > 1:
                # scale each arm's variance to the good level (unknown position: geometric middle)
                p = pos_ref.get(a, 0.5)
                ss += float(np.var(vals, ddof=1)) * (len(vals) - 1) / ratio ** p
                df += len(vals) - 1
        s0 = math.sqrt(max(ss / df, 1e-10)) if df else 0.5 * math.log1p(self.min_effect)
        me = math.log1p(self.min_effect)
        pos = self.space.positions(X)
        post = posterior(self.space, X, ys, var_ratio=ratio, s0=s0, nu0=float(min(df, 4) or 1),
                         positions=pos)
        lv = post.levels
        # a partner must be worth min_effect even if the regression is at the low end of its
        # interval: an overestimated span must not admit "culprit plus a sub-threshold partner"
        delta = max(abs(lv.mu_bad - lv.mu_good) - math.hypot(lv.se_good, lv.se_bad), 0.0)
        allowed = self.space.allowed(delta, me)
        return posterior(self.space, X, ys, var_ratio=ratio, s0=s0, nu0=float(min(df, 4) or 1),
                         allowed=allowed, positions=pos)

    def _heteroscedastic(self, arms: dict) -> bool:
        """Do the good and bad references have significantly different noise (F test)?"""
        g = np.asarray(arms.get(self.good, []))
        b = np.asarray(arms.get(self.bad, []))
        if g.size < 3 or b.size < 3:
            return False
        vg, vb = g.var(ddof=1), b.var(ddof=1)
        if vg <= 0 or vb <= 0:
            return False
        from scipy import stats as st
        f = vb / vg
        p = 2 * min(st.f.cdf(f, b.size - 1, g.size - 1), st.f.sf(f, b.size - 1, g.size - 1))
        return bool(p < 0.05)

    # ------------------------------------------------------------------ planning
    def _plan(self) -> list[frozenset[str]]:
        ng, nb = len(self.values(self.good)), len(self.values(self.bad))
        if self._refs_broken():
            self._outcome = "inconclusive"
            return []
        if ng < self.initial_repeats or nb < self.initial_repeats:
            batch = ([self.good] * (self.initial_repeats - ng) + [self.bad] * (self.initial_repeats - nb))
            order = self.rng.permutation(len(batch))
            return [batch[k] for k in order]
        self._since_reference = self._trials_since_reference()
        obs, y, drift = self._log_values()
        gate = self._gate(obs, y)
        post = self._posterior(obs, y)
        best_set, best_p = post.best_set()
        sure = self._sure(post, best_set, best_p)
        self._state = {"gate": gate, "posterior": post, "best": best_set, "best_p": best_p,
                       "drift": drift}
        decision = gate.decision if gate else "continue"
        if decision == "continue" and self._futile(obs, y, gate):
            self._outcome = "inconclusive"
            return []
        # once the posterior is sure, every measurement it places at a level counts for the gate
        lgate = self._level_gate(obs, y, post, best_set) if decision == "continue" and sure else None
        self._state["level_gate"] = lgate
        if lgate is not None and lgate.decision == "regression":
            decision = "regression"
        if decision == "no-regression":
            self._outcome = "no-regression"
            return []
        C = frozenset(self.factors[k] for k in best_set)
        confirm = self._runnable(self.confirmation_arms(C))
        confirmed = all(len(self.values(a)) >= self.confirm_repeats for a in confirm)
        if sure and confirmed and not self._significant(obs, y, best_set):
            sure = False
        if sure and confirmed and not self._consistent(obs, y, post, best_set):
            # the confirmation arms disagree with the answer: keep measuring them (they are the
            # most informative arms now) rather than trust a model that the data contradict
            sure = False
            batch = [a for a in confirm]
            lone = [a for a in batch if len(self.values(a)) == 1]
            return [lone[0] if lone and len(lone) < len(batch) else batch[int(self.rng.integers(len(batch)))]]
        if sure and confirmed and decision == "regression":
            self._outcome = "culprits"
            return []
        batch: list[frozenset[str]] = []
        k = 0
        while len(batch) < self.batch_size:
            k += 1
            if self._reference_due(gate, decision, post):
                batch.append(self._take_reference())
                continue
            if sure and not confirmed:
                missing = [a for a in confirm if len(self.values(a)) + batch.count(a) < self.confirm_repeats]
                if missing:
                    batch.append(missing[0])
                    self._since_reference += 1
                    continue
            if sure and decision != "regression":
                batch.append(self._take_reference())
                continue
            cand = self._candidates(post, exclude=batch)
            mi = post.expected_information(cand)
            # among nearly equally informative arms prefer a confirmation arm of a likely single
            # culprit (f alone, or all but f): it is measured at the end anyway
            size = cand.sum(1)
            marg = post.factor_marginals()
            conf = np.zeros(len(cand))
            one = size == 1
            conf[one] = (cand[one] * marg).sum(1)
            allbut = size == len(self.factors) - 1
            conf[allbut] = ((~cand[allbut]) * marg).sum(1)
            best = int(np.argmax(mi * (1 + self.confirm_bonus * conf)))
            arm = frozenset(self.factors[f] for f in np.flatnonzero(cand[best]))
            batch.append(arm)
            self._since_reference += 1
        return batch

    def confirmation_arms(self, C: frozenset) -> list[frozenset[str]]:
        """Arms that must have been measured before ``C`` is named: bad minus C (must look good)
        and good plus C (must look bad); for a pair also each culprit alone, which tells the pair
        apart from a single culprit (and / or / additive all predict something different there)."""
        arms = [self.bad - C, C]
        if len(C) > 1:
            arms += [frozenset({c}) for c in sorted(C)]
        out = []
        for a in arms:
            if a not in out:
                out.append(a)
        return out

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

    def _gave_up(self, arm: frozenset[str]) -> bool:
        """Failed MAX_ARM_FAILURES times and never ran: an arm that cannot run (a patch that only
        breaks without its partner, say) must not eat the budget, as a search candidate or as a
        confirmation arm (the answer is then confirmed by the arms that can run)."""
        return not self.values(arm) and self.failures(arm) >= MAX_ARM_FAILURES

    def _runnable(self, arms: list[frozenset[str]]) -> list[frozenset[str]]:
        return [a for a in arms if not self._gave_up(a)]

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

    def _levels_apart(self, post) -> bool:
        """Do the good and bad levels, as fitted on every measurement under the posterior, already
        differ by more than ``min_effect`` (2 standard errors)? Then the references are not the
        bottleneck and the search may go on between drift checks."""
        if post is None:
            return False
        lv = post.levels
        span = (lv.mu_good - lv.mu_bad) if self.higher_is_better else (lv.mu_bad - lv.mu_good)
        return span - LEVELS_APART_Z * math.hypot(lv.se_good, lv.se_bad) > math.log1p(self.min_effect)

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

    def _reference_due(self, gate, decision: str, post) -> bool:
        """``decision``: the gate's, or "regression" when the pooled gate has decided it."""
        if gate is None:
            return not self._fast_start()
        if decision == "continue":
            # undecided: interleave references with the search; when the regression does not
            # (yet) look like min_effect, spend on the references only (searching a
            # non-regression is waste). When the levels fitted on all measurements are already
            # clearly apart, the references are not what is missing: search between drift checks.
            if gate.regression_log < math.log1p(self.min_effect):
                return True
            if not self._levels_apart(post):
                return self._since_reference >= self.search_per_reference
        if self._reference_starved():
            return True
        return self._since_reference >= self.reference_every

    def _fast_start(self) -> bool:
        """One good and one bad measurement so far, differing by ``FAST_START`` x min_effect in
        the regression's direction: search before measuring the references again."""
        g, b = self.values(self.good), self.values(self.bad)
        if not g or not b or min(len(g), len(b)) >= 2 or self._reference_starved():
            return False
        # only as long as a large culprit would need (splits plus the confirmation arms): noisy
        # arms (the H200's 14% CV) must not be searched for long with no noise estimate
        if self.trials >= 2 + math.ceil(math.log2(len(self.factors) + 1)) + FAST_EXTRA:
            return False
        d = math.log(np.mean(g)) - math.log(np.mean(b))
        if not self.higher_is_better:
            d = -d
        return d >= FAST_START * math.log1p(self.min_effect)

    def _reference_starved(self) -> bool:
        """An arm measured much more often than a reference is compared to a level that is
        known less well than the arm itself: measure the references too."""
        counts: dict[frozenset, int] = {}
        for o in self.observations:
            if o.ok:
                counts[o.active] = counts.get(o.active, 0) + 1
        ref = min(counts.get(self.good, 0), counts.get(self.bad, 0))
        other = max((c for a, c in counts.items() if a not in (self.good, self.bad)), default=0)
        return other > 2 * ref

    def _trials_since_reference(self) -> int:
        k = 0
        for o in reversed(self.observations):
            if o.active in (self.good, self.bad):
                break
            k += 1
        return k

    def _last_reference_was_bad(self) -> bool:
        for o in reversed(self.observations):
            if o.active in (self.good, self.bad):
                return o.active == self.bad
        return False

    def _take_reference(self) -> frozenset[str]:
        """The reference whose next measurement shrinks the good-vs-bad standard error most
        (Neyman allocation: the noisier arm gets more trials); alternate on ties."""
        g, b = np.log(self.values(self.good)), np.log(self.values(self.bad))
        ng, nb = g.size, b.size
        vg = g.var(ddof=1) if ng > 1 else 0.0
        vb = b.var(ddof=1) if nb > 1 else 0.0
        gain_g = vg / ng - vg / (ng + 1) if ng else np.inf
        gain_b = vb / nb - vb / (nb + 1) if nb else np.inf
        if self._reference_starved():
            arm = self.good if ng <= nb else self.bad
        elif ng < 3 and ng <= nb:
            arm = self.good          # three each first: the noise of both levels must be known
        elif nb < 3:
            arm = self.bad
        elif gain_g > 1.5 * gain_b or (ng + 2 < nb and not gain_b > 1.5 * gain_g):
            arm = self.good
        elif gain_b > 1.5 * gain_g or nb + 2 < ng:
            arm = self.bad
        else:
            arm = self.good if self._last_reference_was_bad() else self.bad
        self._since_reference = 0
        return arm

    def _candidates(self, post, exclude=()) -> np.ndarray:
        """Candidate arms (rows, bool over factors): random subsets of several densities, splits
        of the posterior mass, and the confirmation arms of the leading hypotheses."""
        n = len(self.factors)
        rows: list[np.ndarray] = []
        for p in (0.2, 0.35, 0.5, 0.65, 0.8):
            for _ in range(max(1, self.n_random_candidates // 5)):
                rows.append(self.rng.random(n) < p)
        marg = post.factor_marginals()
        noise = self.rng.random(n) * 1e-9
        order = np.argsort(-(marg + noise))
        cum = np.cumsum(marg[order]) / max(marg.sum(), 1e-12)
        for frac in (0.3, 0.5, 0.7):
            cut = int(np.searchsorted(cum, frac)) + 1
            r = np.zeros(n, bool)
            r[order[:cut]] = True
            rows.append(r)
            rows.append(~r)
        alt = np.zeros(n, bool)
        alt[order[::2]] = True
        rows += [alt, ~alt]
        w = post.weights
        for h in np.argsort(-w)[:8]:
            c = list(post.space.culprits(int(h)))
            r = np.zeros(n, bool)
            r[c] = True
            rows += [r, ~r]
            if len(c) == 2:
                for f in c:
                    s = np.zeros(n, bool)
                    s[f] = True
                    rows += [s, ~s]
        for f in order[:4]:
            s = np.zeros(n, bool)
            s[f] = True
            rows += [s, ~s]
        X = np.unique(np.array(rows), axis=0)
        # failures do not move the posterior: an arm that cannot run would be chosen for ever
        ex = {frozenset(a) for a in exclude} | {o.active for o in self.observations
                                                if not o.ok and self._gave_up(o.active)}
        if ex:
            keep = [r for r in X if frozenset(self.factors[f] for f in np.flatnonzero(r)) not in ex]
            if keep:
                X = np.array(keep)
        return X

    # ------------------------------------------------------------------ verdict
    def verdict(self) -> AttributionVerdict:
        obs, y, drift = self._log_values()
        self._machine_step(obs)
        gate = self._gate(obs, y)
        outcome = self._outcome
        if outcome is None:
            # stopped from outside (budget): the gate may still have settled the question
            outcome = "no-regression" if gate is not None and gate.decision == "no-regression" else "inconclusive"
        warnings: list[str] = []
        culprits: list[str] = []
        effects: tuple = ()
        interactions: tuple = ()
        confirmation: tuple = ()
        confidence = float("nan")
        hyp = ""
        candidates: tuple = ()
        level_gate = levels = None
        if len({o.active for o in obs}) >= 1 and (gate is not None or outcome == "culprits"):
            post = self._posterior(obs, y)
            marg = post.factor_marginals()
            candidates = tuple(sorted(((self.factors[k], round(float(marg[k]), 4))
                                       for k in range(len(self.factors))), key=lambda t: -t[1]))
            best_set, best_p = post.best_set()
            w = post.weights
            members = [h for h in range(post.space.size) if post.space.culprits(h) == best_set]
            best_h = max(members, key=lambda h: w[h])
            if outcome == "culprits":
                culprits = sorted(self.factors[k] for k in best_set)
                confidence = float(best_p)
                hyp = FAMILY_NAMES[post.space.family[best_h]]
                effects, interactions = self._decompose(obs, y, best_set, int(post.space.family[best_h]))
                levels = self._level_values(obs, y, post, best_set)
                confirmation = self._confirmation(obs, y, frozenset(culprits), levels)
                if gate is None:
                    # a fast start (one good, one bad measurement): the regression as the named
                    # hypothesis sees it, every measurement at the good level against every one
                    # at the bad level (what the gate decided on)
                    level_gate = self._level_gate(obs, y, post, best_set, levels)
            elif outcome == "inconclusive" and gate is not None and gate.decision == "regression":
                warnings.append("budget ran out before one explanation was clear; leading candidates: "
                                + ", ".join(f"{n} ({p:.0%})" for n, p in candidates[:3]))
            elif outcome == "inconclusive" and self.robust and candidates and candidates[0][1] >= 0.5:
                warnings.append("the good-vs-bad comparison never confirmed a regression, so no factor is "
                                "named; where the probability sits: "
                                + ", ".join(f"{n} ({p:.0%})" for n, p in candidates[:3] if p >= 0.05))
        decider = gate or level_gate
        regression = None
        if decider is not None:
            c = decider.comparison
            regression = RatioEstimate(c.ratio, c.ci_low, c.ci_high, c.p_value, c.n_a, c.n_b)
        plan = self._plan_estimate(obs, y, levels)
        warnings += self._warnings(obs, y, drift, plan)
        if self._refs_broken():
            warnings.append("the good or bad arm keeps failing; no conclusion possible")
        if outcome == "inconclusive" and self.budget_left <= 0:
            warnings.append(f"budget of {self.max_trials} trials exhausted")
        futile = self._futile_per_arm
        if outcome == "inconclusive" and futile is not None:
            per_arm = "more than 100000" if not math.isfinite(futile) else f"about {futile:,.0f}"
            warnings.append(f"stopped early: at this noise (CV good {plan.cv_good:.1%}, bad "
                            f"{plan.cv_bad:.1%}) the good-vs-bad comparison needs {per_arm} trials "
                            f"per arm to confirm or rule out a {self.min_effect:.0%} regression, more "
                            f"than {self._futility_budget} (the budget) for each arm; reduce the "
                            "noise (warm-up, pinned clocks, CUDA graphs) or raise max_trials")
        return AttributionVerdict(
            status=outcome, culprits=culprits, trials=self.trials, regression=regression,
            effects=effects, interactions=interactions, confirmation=confirmation,
            confidence=confidence, hypothesis=hyp, candidates=candidates, plan=plan,
            warnings=tuple(warnings), failed_trials=self.failed,
            higher_is_better=self.higher_is_better, min_effect=self.min_effect, alpha=self.alpha,
            strategy=self.name, factors=self.factors,
            extra={"gate": decider.decision if decider is not None else None,
                   "discounted_trials": [self._trial_number(o) for o in self._discounted],
                   "machine_step": ({"at_trial": self._step.at + 1, "change": math.expm1(self._step.size)}
                                    if self._step is not None else None),
                   "drift_per_100_trials": (drift.slope * 100 if drift is not None and drift.drifting else 0.0)})

    def _decompose(self, obs, y, cset, family):
        """Log-linear model with HC3 errors: main effects (and the interaction for pairs)."""
        names = [self.factors[k] for k in cset]
        X = np.array([[1.0 if nm in o.active else 0.0 for nm in names] for o in obs])
        cols, labels, kinds = [], [], []
        if len(names) == 1:
            cols, labels, kinds = [X[:, 0]], names, ["main"]
        else:
            inter = X[:, 0] * X[:, 1]
            full = [X[:, 0], X[:, 1], inter]
            D = np.column_stack([np.ones(len(y))] + full)
            if np.linalg.matrix_rank(D) == 4 and len(y) > 5:
                cols, labels, kinds = full, names + ["*".join(names)], ["main", "main", "interaction"]
            elif family == AND:
                cols, labels, kinds = [inter], ["*".join(names)], ["interaction"]
            else:
                cols, labels, kinds = [X[:, 0], X[:, 1]], names, ["main", "main"]
        # shares of the regression the references' own readings show (the gate may also count arms
        # a sure hypothesis places at a level: the culprit's own contrast)
        effects = loglinear_effects(y, cols, labels, kinds, alpha=self.alpha, seed=self.seed + 1,
                                    shares_of="references",
                                    whole=reference_contrast([o.active for o in obs], self.good, self.bad))
        interactions = []
        if len(names) == 2:
            term = next((e.effect for e in effects if e.kind == "interaction"), None)
            if family in (AND, OR):
                kind = "and" if family == AND else "or"
                desc = (f"the regression appears only when {names[0]} and {names[1]} are both bad"
                        if family == AND else
                        f"either {names[0]} or {names[1]} alone causes the whole regression")
                interactions.append(Interaction(tuple(names), kind, term or RatioEstimate(float("nan"), float("nan"), float("nan")), desc))
            elif term is not None and (term.ci_low > 1 or term.ci_high < 1):
                total = sum(math.log(e.effect.ratio) for e in effects)
                interactions.append(synergy(names, term, total))
        return tuple(effects), tuple(interactions)

    def _reference_values(self, obs, y, levels=None) -> tuple[np.ndarray, np.ndarray]:
        """Log values of the good and bad references; after a fast start (fewer than two of
        either) the levels as the named hypothesis places them, when given."""
        g = self._arm_values(obs, y, self.good)
        b = self._arm_values(obs, y, self.bad)
        if (g.size < 2 or b.size < 2) and levels is not None:
            return levels
        return g, b

    def _confirmation(self, obs, y, C: frozenset, levels=None) -> tuple:
        g, b = self._reference_values(obs, y, levels)
        span = b.mean() - g.mean()
        out = []
        for arm, expect in ((self.bad - C, "good"), (C, "bad")):
            v = self._arm_values(obs, y, arm)
            if v.size == 0 or span == 0:
                continue
            pos = (v.mean() - g.mean()) / span
            sd = v.std(ddof=1) if v.size > 1 else max(g.std(ddof=1), b.std(ddof=1))
            se = math.sqrt(sd ** 2 / v.size + g.var(ddof=1) / g.size) / abs(span)
            ok = pos < 0.5 if expect == "good" else pos > 0.5
            out.append(ConfirmationCheck(tuple(sorted(arm)), expect, int(v.size), float(pos),
                                         float(pos - 1.96 * se), float(pos + 1.96 * se), bool(ok)))
        return tuple(out)

    def plan_estimate(self) -> PlanEstimate:
        """What resolving ``min_effect`` between the good and bad arms costs at the noise their
        measurements show so far (cheap: for progress output as the campaign goes)."""
        obs, y, _ = self._log_values()
        return self._plan_estimate(obs, y)

    def _plan_estimate(self, obs, y, levels=None) -> PlanEstimate:
        g, b = (np.exp(v) for v in self._reference_values(obs, y, levels))
        cg = stats.log_cv(g) if g.size >= 2 else float("nan")
        cb = stats.log_cv(b) if b.size >= 2 else float("nan")
        n = None
        if g.size >= 2 and b.size >= 2:
            # Welch with unequal variances: the per-arm n for the pooled root-mean-square noise
            n = stats.plan_trials([g, b], min_effect=self.min_effect, alpha=self.alpha)
        return PlanEstimate(cg, cb, self.min_effect, n)

    def _warnings(self, obs, y, drift, plan) -> list[str]:
        w = []
        if drift is not None and drift.drifting:
            w.append(f"drift: {drift.slope * 100:+.2%} per 100 trials (p={drift.p_value:.2g}); "
                     "removed with a within-arm trend before deciding")
        if plan.trials_per_arm is not None and plan.trials_per_arm > 30:
            w.append(f"noisy arms (CV good {plan.cv_good:.1%}, bad {plan.cv_bad:.1%}): {plan.text}")
        refs = {self.good: list(self._arm_values(obs, y, self.good)), self.bad: list(self._arm_values(obs, y, self.bad))}
        if self._heteroscedastic(refs):
            w.append(f"the good and bad arms have very different noise (CV {plan.cv_good:.1%} vs "
                     f"{plan.cv_bad:.1%}); compared without assuming equal variances")
        for arm, label in ((self.good, "good"), (self.bad, "bad")):
            v = np.exp(self._arm_values(obs, y, arm))
            out = stats.outliers(v) if v.size >= 5 else []
            if out:
                w.append(f"{len(out)} outlier(s) in the {label} arm (kept: heavy tails are real behaviour)")
        if self.failed:
            w.append(f"{self.failed} failed trial(s), not counted as measurements")
        step = self._step
        if step is not None:
            first = next((o for o in obs if o.index >= step.at), None)
            at = self._trial_number(first) if first is not None else step.at + 1
            w.append(f"the machine changed at about trial {at}: every arm read {math.expm1(step.size):+.1%} "
                     f"from then on (p={step.p_value:.2g}, seen on the re-measured arms); readings from "
                     "before and after compare two machines, so the answer may not hold on either")
        if self._discounted:
            nums = [self._trial_number(o) for o in self._discounted]
            shown = ", ".join(str(k) for k in nums[:12]) + (", ..." if len(nums) > 12 else "")
            w.append(f"{len(nums)} reading(s) discounted as stalls (far outside their arm's spread; "
                     f"left out of every decision): trial {shown}")
        return w

    # ------------------------------------------------------------------ progress
    def estimated_total(self) -> int:
        """Rough total number of trials this campaign will take, for progress display: what the
        good-vs-bad gate still needs at the noise seen so far, plus about two trials per remaining
        bit of uncertainty about the culprits (more when the effect is small against the noise)."""
        if self.done:
            return self.trials
        st_ = self._state
        gate = st_.get("gate")
        post = st_.get("posterior")
        if gate is None or post is None:
            return min(self.max_trials, self.trials + 4 + 3 * math.ceil(math.log2(len(self.factors) + 1)))
        lv = post.levels
        snr = abs(lv.mu_bad - lv.mu_good) / max(lv.sd_good, lv.sd_bad, 1e-9)
        per_bit = float(np.clip(4.0 / max(snr, 0.2) ** 2, 1.0, 40.0))
        w = post.weights
        entropy_bits = float(-(w[w > 0] * np.log2(w[w > 0])).sum())
        more = per_bit * (entropy_bits + 2)
        if gate.decision == "continue":
            more += 10
        return int(min(self.max_trials, self.trials + math.ceil(more)))

    @property
    def gate_decision(self) -> str | None:
        """The good-vs-bad gate's decision at the last ``ask`` (None before it could decide)."""
        gate = self._state.get("gate")
        return gate.decision if gate is not None else None

    @property
    def posterior(self):
        """The posterior over hypotheses after the last ``ask`` (None before the first fit)."""
        return self._state.get("posterior")

    def progress(self) -> dict:
        """A small JSON-able snapshot for progress display: trials, gate, leading candidates."""
        st_ = self._state
        gate = st_.get("gate")
        best = st_.get("best", ())
        return {"trials": self.trials, "failed": self.failed,
                "gate": gate.decision if gate else None,
                "leading": sorted(self.factors[k] for k in best), "probability": st_.get("best_p")}


def attribute_factors(factors, measure: Callable[[frozenset[str]], float | None], higher_is_better: bool = True,
                      seed: int = 0, max_trials: int = 400, **kw) -> AttributionVerdict:
    """Find which factors explain the difference between the good and the bad arm (DESIGN 3.5).

    ``measure(active)`` runs one trial of the arm in which exactly the factors in ``active`` take
    their bad value and returns the metric (``None`` = failed trial). ``verdict.trials`` equals the
    number of ``measure`` calls. Extra keyword arguments go to :class:`AttributionStrategy`.
    """
    strategy = AttributionStrategy(factors, higher_is_better=higher_is_better, seed=seed,
                                   max_trials=max_trials, **kw)
    return drive(strategy, measure)
