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

Code: ``AttributionStrategy`` (here) is put together from its parts, each a mixin in its own
module: the model of the readings (gate and posterior, ``attribution_model``), the design of the
next arms (``attribution_design``), the stop rules (``attribution_stop``) and the verdict
(``attribution_verdict``). ``attribute_one_stage`` runs it to the end; the staged search that
``bisect_lab.attribute_factors`` and the CLI run is ``staged.py``.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np

from ..verdicts import AttributionVerdict
from .attribution_design import ArmDesign
from .attribution_model import AttributionModel
from .attribution_stop import StopRules
from .attribution_verdict import AttributionVerdictBuilder
from .base import Observation, StrategyBase, drive
from .hypotheses import HypothesisSpace

# The tuning constants, where each part keeps them; importable from here as before the split.
from .attribution_design import FAST_EXTRA, FAST_START, LEVELS_APART_Z, MAX_ARM_FAILURES  # noqa: F401
from .attribution_stop import FUTILITY_MIN_REFS, FUTILITY_NOISE_BUDGETS, OUTLYING  # noqa: F401

__all__ = ["AttributionStrategy", "attribute_one_stage"]


class AttributionStrategy(AttributionModel, ArmDesign, StopRules, AttributionVerdictBuilder, StrategyBase):
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
      batch_size: arms per ask() (several hosts in parallel; the driver pins item i of a batch to
        host i % batch_size): the first batch has every host measure good and bad, later ones are
        chosen by greedy joint information (``attribution_design.conditional_information``).
      hosts: how many hosts the driver spreads a batch over (item i on host i % hosts); with
        several, the first batch has every host measure good and bad once each.
      futility_trials: the budget the futility stop measures against (default ``max_trials``; a
        stage of a staged campaign passes the whole campaign's).
      rhos: the additive pairs' split grid (default ``hypotheses.RHO_GRID``).
      robust: leave out of every decision (gate, posterior, effects) the readings a contamination
        model discounts as stalls (``stats.robust``), and say which in the verdict; False is the
        Gaussian behaviour before it, kept for the benchmark's side by side.
      arm_cost: ``cost(arm) -> float``, the relative cost of measuring an arm (a frozenset of this
        strategy's factors; ``arm_costs.ArmCosts`` for serving launches): search arms are then
        chosen by expected information per unit of cost. None: by information alone.
      noise_prior: a ``stats.NoisePrior`` (the noise of earlier campaigns of the same experiment on
        the same host): while today's readings fit it (an F test after every trial), the gate, the
        posterior and the significance guard use the scale it and today's residuals give
        together; once rejected it is dropped (``prior_status()`` says at which trial and why).
        None: the noise is learned from today's readings alone.
    """

    name = "attribution"

    def __init__(self, factors: Iterable[str], *, higher_is_better: bool = True, seed: int = 0,
                 max_trials: int = 400, min_effect: float = 0.02, alpha: float = 0.05,
                 stop_probability: float = 0.99, initial_repeats: int | None = None,
                 reference_every: int = 8, confirm_repeats: int = 1, batch_size: int = 1,
                 n_random_candidates: int = 30, drift_alpha: float = 0.01,
                 set_probability: float = 0.9, miss_probability: float = 0.05,
                 family_prior=None, search_per_reference: int = 1, confirm_bonus: float = 0.3,
                 futility_trials: int | None = None, rhos=None, robust: bool = True, hosts: int = 1,
                 arm_cost=None, noise_prior=None):
        super().__init__(factors, higher_is_better=higher_is_better, seed=seed, max_trials=max_trials)
        if not 0 < min_effect < 1:
            raise ValueError("min_effect must be in (0, 1)")
        self.min_effect = float(min_effect)
        self.alpha = float(alpha)
        self.stop_probability = float(stop_probability)
        # one trial at a time: one pair first (a large culprit may need no more references); with
        # several hosts two pairs fill the first batch anyway
        # several hosts: every host measures good and bad first (its level is learned from them)
        self.hosts = max(1, int(hosts))
        self.initial_repeats = max(1, int(initial_repeats if initial_repeats is not None
                                          else (1 if batch_size <= 1 else max(2, self.hosts))))
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
        self.arm_cost = arm_cost
        # campaign trial number of each told observation, when a driver (a residual stage) tells
        # this strategy only part of the campaign; None: the observation's own index
        self.trial_numbers: list[int] | None = None
        self._discounted: list[Observation] = []
        self._raw: tuple = ([], np.zeros(0))      # every reading of the last _log_values
        self._kept: tuple = ([], np.zeros(0))     # ... and those left after the stall discount
        self.noise_prior = noise_prior            # stats.NoisePrior or None (attribution_prior.py)
        self._step = None                         # a machine step found by the last _log_values

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


def attribute_one_stage(factors, measure: Callable[[frozenset[str]], float | None],
                        higher_is_better: bool = True, seed: int = 0, max_trials: int = 400,
                        **kw) -> AttributionVerdict:
    """Find which factors explain the difference between the good and the bad arm, in one stage.

    One stage names one culprit or a pair; ``bisect_lab.attribute_factors`` (the staged search,
    ``staged.attribute_staged``) runs this strategy as its first stage and attributes what is left.

    ``measure(active)`` runs one trial of the arm in which exactly the factors in ``active`` take
    their bad value and returns the metric (``None`` = failed trial). ``verdict.trials`` equals the
    number of ``measure`` calls. Extra keyword arguments go to :class:`AttributionStrategy`.
    """
    strategy = AttributionStrategy(factors, higher_is_better=higher_is_better, seed=seed,
                                   max_trials=max_trials, **kw)
    return drive(strategy, measure)
