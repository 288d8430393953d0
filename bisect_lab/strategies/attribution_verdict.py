"""The one-stage attribution's verdict (``AttributionVerdict``): the culprits and the hypothesis,
their effects from a log-linear decomposition, the confirmation checks, the noise plan and the
warnings.

A mixin of ``attribution.AttributionStrategy``: it reads and sets that class's state.
"""
from __future__ import annotations

import math

import numpy as np

from .. import stats
from ..verdicts import AttributionVerdict, ConfirmationCheck, Interaction, PlanEstimate, RatioEstimate
from .decomposition import loglinear_effects, reference_contrast, synergy
from .hypotheses import AND, FAMILY_NAMES, OR


class AttributionVerdictBuilder:
    """The verdict and what goes into it."""

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
