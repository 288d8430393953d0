"""The one-stage attribution's use of a noise prior (``stats.noise_prior``): while today's readings
fit it, the gate, the posterior and the significance guard all work at the scale the prior and
today's within-arm residuals give together; once the fit check rejects it, it is dropped for the
rest of the campaign and the strategy is what it is without a prior.

A mixin of ``attribution.AttributionStrategy``: it reads and sets that class's state.
"""
from __future__ import annotations

import numpy as np

from .. import stats
from ..stats.noise_prior import NoisePrior, PriorFit, combined, prior_fit, within_arms

# The prior is used only once today's within-arm residuals have this many degrees of freedom to
# check it with: before that, a prior of CV 1% on a machine now at 3% could not be rejected
# (F test at 1-3 df) and its over-confident gate named a factor in 8% of simulated A/A campaigns.
MIN_CHECK_DF = 4


class NoisePriorUse:
    """Whether the prior is in use, the check that drops it, and the combined scale."""

    noise_prior: NoisePrior | None = None
    _prior_checked = 0                              # observations whose prefixes were checked
    _prior_dropped: tuple[int, PriorFit] | None = None
    _prior_df = 0                                   # today's within-arm df at the last check

    def _prior_in_use(self) -> bool:
        """Is the prior used at this plan: checked against enough of today's readings
        (``MIN_CHECK_DF``) and not rejected at any trial so far."""
        return (self.noise_prior is not None and self._prior_dropped is None
                and self._prior_df >= MIN_CHECK_DF)

    def _check_prior(self) -> None:
        """Check the prior against today's readings after every trial so far, not only at this
        plan: the trial at which it is dropped is then a function of the readings alone, and a
        resumed campaign (its trials replayed, then one plan) drops it where the live one did."""
        if self.noise_prior is None or self._prior_dropped is not None:
            return
        obs = self._ok()
        for k in range(max(self._prior_checked, 1), len(obs) + 1):
            fit = prior_fit(self.noise_prior, *self._within(obs[:k]))
            self._prior_df = fit.df
            if fit.rejected:
                self._prior_dropped = (self._trial_number(obs[k - 1]), fit)
                break
        self._prior_checked = len(obs)

    def _within(self, obs) -> tuple[float, int]:
        """Today's pooled within-arm sum of squares and df of the log values, without what the
        stall model discounts (a stall is not the machine's noise)."""
        by_arm: dict[frozenset, list[float]] = {}
        for o in obs:
            by_arm.setdefault(o.active, []).append(float(np.log(o.value)))
        groups = [np.asarray(v) for v in by_arm.values()]
        if self.robust:
            masks, _ = stats.discount(groups)
            groups = [g[~m] for g, m in zip(groups, masks)]
        return within_arms(groups)

    def _known_noise(self) -> tuple[float, int] | None:
        """``(sigma, df)`` from the prior and today's residuals, or None without a prior in use."""
        if not self._prior_in_use():
            return None
        obs, _ = self._kept
        return combined(self.noise_prior, *self._within(obs))

    def prior_status(self) -> dict | None:
        """What became of the noise prior (JSON-able): the prior, whether it is ``used`` at the last
        plan (checked against ``checked_df`` of today's within-arm degrees of freedom, at least
        ``MIN_CHECK_DF``, and not rejected), and when it was dropped, at which trial and why
        (``dropped_at``, ``ratio``, ``p``, ``note``). None without a prior."""
        if self.noise_prior is None:
            return None
        out = dict(self.noise_prior.to_dict(), used=self._prior_in_use(), checked_df=self._prior_df,
                   dropped_at=None)
        if self._prior_dropped is not None:
            trial, fit = self._prior_dropped
            out.update(dropped_at=trial, ratio=fit.ratio, p=fit.p, note=fit.describe(trial))
        return out
