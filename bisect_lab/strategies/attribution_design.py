"""What the one-stage attribution measures next: the initial references, the confirmation arms, the
re-measured references (drift guard, Neyman allocation) and, otherwise, the candidate arm with
the largest expected information about the culprit hypothesis.

A mixin of ``attribution.AttributionStrategy``: it reads and sets that class's state.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

# Standard errors by which the good and bad levels fitted on all measurements must clear
# min_effect before the search stops interleaving references 1:1 (see _levels_apart).
LEVELS_APART_Z = 2.0
MAX_ARM_FAILURES = 3
# After one good and one bad measurement, a difference this many times min_effect starts the search
# at once: a large culprit is then found and confirmed by the split and confirmation arms, whose
# values count for the gate under the named hypothesis (two more references would be spent on
# what the splits show anyway). Smaller differences wait for the usual 2 + 2 references.
FAST_START = 4.0
# ... and only for as many trials as a large culprit's splits and confirmation need (plus this many)
FAST_EXTRA = 2


# Outcomes drawn per batch slot to score the slot's candidates (common draws for every candidate)
JOINT_SAMPLES = 12


def conditional_information(post, cand: np.ndarray, chosen: list[np.ndarray], rng,
                            samples: int = JOINT_SAMPLES) -> np.ndarray:
    """Expected information of each candidate arm (rows of ``cand``) given the outcomes of the arms
    already ``chosen`` for this batch: greedy joint information. The chosen arms' outcomes are
    drawn from the posterior predictive (a hypothesis, then its predicted levels plus the noise),
    each draw leaves a posterior, and a candidate scores its expected information under those
    posteriors, averaged over the draws; every candidate sees the same draws. A second copy of an
    arm whose outcome is nearly certain to decide adds next to nothing, an arm that splits what the
    first leaves open adds most; when one reading decides little (a 5% effect at 3% noise), the
    draws leave the posterior nearly as it was and the slots go to the arms informative on their
    own. (Grouping the hypotheses by the chosen arms' predicted levels, as if those outcomes were
    exact, sent such batches to weak arms: 1.32-1.36x one node's trials on 4 nodes, against
    1.26-1.30x this way; docs/fleet.md.)"""
    if not chosen:
        return post.expected_information(cand)
    pos = post.space.positions(np.array(chosen))              # C x H
    mu, scale = post.levels.at(pos)
    w = post.weights
    w = w / w.sum()
    total = np.zeros(len(cand))
    for h in rng.choice(w.size, size=samples, p=w):
        y = mu[:, h] + scale[:, h] * rng.standard_normal(mu.shape[0])
        lp = post.log_post + (-0.5 * ((y[:, None] - mu) / scale) ** 2 - np.log(scale)).sum(0)
        total += replace(post, log_post=lp - np.logaddexp.reduce(lp)).expected_information(cand)
    return total / samples


class ArmDesign:
    """The plan of the next batch of arms."""

    def _plan(self) -> list[frozenset[str]]:
        ng, nb = len(self.values(self.good)), len(self.values(self.bad))
        if self._refs_broken():
            self._outcome = "inconclusive"
            return []
        if ng < self.initial_repeats or nb < self.initial_repeats:
            if ng == nb == 0 and self.hosts > 1 and self.initial_repeats >= self.hosts:
                return self._first_batch_by_host()
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
        searched: list[np.ndarray] = []     # this batch's search arms, as rows
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
            mi = conditional_information(post, cand, searched, self.rng)
            # among nearly equally informative arms prefer a confirmation arm of a likely single
            # culprit (f alone, or all but f): it is measured at the end anyway
            size = cand.sum(1)
            marg = post.factor_marginals()
            conf = np.zeros(len(cand))
            one = size == 1
            conf[one] = (cand[one] * marg).sum(1)
            allbut = size == len(self.factors) - 1
            conf[allbut] = ((~cand[allbut]) * marg).sum(1)
            score = mi * (1 + self.confirm_bonus * conf)
            if self.arm_cost is not None:
                # information per second of launch: an arm whose launch costs twice as much must
                # tell twice as much (references and confirmation arms are measured regardless).
                # A later stage's arms leave out the factors it stands on: with costs multiplying
                # per factor that scales every candidate alike, so the choice is unchanged.
                score = score / np.array([max(1e-6, self.arm_cost(
                    frozenset(self.factors[f] for f in np.flatnonzero(row)))) for row in cand])
            best = int(np.argmax(score))
            arm = frozenset(self.factors[f] for f in np.flatnonzero(cand[best]))
            batch.append(arm)
            searched.append(cand[best])
            self._since_reference += 1
        return batch

    def _first_batch_by_host(self) -> list[frozenset[str]]:
        """The first batch on ``hosts`` hosts (the driver pins item i to host i % k): every
        host measures good and bad, half of them good first (its level is learned from them)."""
        k = self.hosts
        first = [self.good if (h + int(self.rng.integers(2))) % 2 == 0 else self.bad for h in range(k)]
        return first + [self.bad if a == self.good else self.good for a in first]

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

    def _gave_up(self, arm: frozenset[str]) -> bool:
        """Failed MAX_ARM_FAILURES times and never ran: an arm that cannot run (a patch that only
        breaks without its partner, say) must not eat the budget, as a search candidate or as a
        confirmation arm (the answer is then confirmed by the arms that can run)."""
        return not self.values(arm) and self.failures(arm) >= MAX_ARM_FAILURES

    def _runnable(self, arms: list[frozenset[str]]) -> list[frozenset[str]]:
        return [a for a in arms if not self._gave_up(a)]

    def _levels_apart(self, post) -> bool:
        """Do the good and bad levels, as fitted on every measurement under the posterior, already
        differ by more than ``min_effect`` (2 standard errors)? Then the references are not the
        bottleneck and the search may go on between drift checks."""
        if post is None:
            return False
        lv = post.levels
        span = (lv.mu_good - lv.mu_bad) if self.higher_is_better else (lv.mu_bad - lv.mu_good)
        return span - LEVELS_APART_Z * math.hypot(lv.se_good, lv.se_bad) > math.log1p(self.min_effect)

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
