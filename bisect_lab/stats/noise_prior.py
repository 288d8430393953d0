"""A noise prior learned from earlier campaigns: the within-arm log spread of the same experiment on
the same host, pooled with its degrees of freedom, and how today's readings are checked against it.

With the noise known, a good-vs-bad decision needs no degrees of freedom from today's readings: a
z rather than a t test (with 2 readings per arm the t quantile at 1 df is 12.7, the z 1.96). The
prior is an informative scaled-inverse-chi-square scale prior (``sigma``, ``df``); today's
within-arm residuals are pooled with it (:func:`combined`). The machine may have changed since the
earlier campaigns, so the prior is used only while today's residual variance is compatible with
it (:func:`prior_fit`, an F test); a caller drops it for good once that test rejects it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from .compare import compare
from .sequential import MARGIN_FRAC, NO_REGRESSION_ALPHA_DIVISOR, GateResult, gate_decision

# The prior's weight is capped: 60 df of earlier readings already make the t quantile a z (2.00
# against 1.96), and more would only make today's evidence against a changed machine weigh less.
MAX_PRIOR_DF = 60
# The fit check rejects the prior when today's residual variance differs from it at this two-sided
# level. It is looked at after every trial: at 0.01 a right prior was dropped in 5 of 60 simulated
# campaigns; at 0.001 a prior of CV 1% on a machine now at 3% (variance 9x) is still dropped by
# the fourth degree of freedom of today's residuals.
FIT_ALPHA = 0.001
# ... and a prior that today's readings say is too tight is rejected at this many times FIT_ALPHA:
# a wider machine makes a kept prior over-confident, a quieter one only wastes the prior's trials.
NOISIER_FACTOR = 10


@dataclass(frozen=True)
class NoisePrior:
    """The log-scale noise (``sigma`` ~ CV) of earlier readings, with its pooled degrees of
    freedom ``df`` (capped at ``MAX_PRIOR_DF``), how many ``readings`` and ``campaigns`` it comes
    from, and on which ``host``."""

    sigma: float
    df: int
    readings: int = 0
    campaigns: int = 0
    host: str = ""

    def __post_init__(self):
        if not (self.sigma > 0 and math.isfinite(self.sigma)) or self.df < 1:
            raise ValueError("a noise prior needs sigma > 0 and df >= 1")

    @property
    def cv(self) -> float:
        """The noise as a coefficient of variation (log-normal)."""
        return math.sqrt(math.expm1(self.sigma ** 2))

    def describe(self) -> str:
        """``noise prior: CV 2.9% from 46 readings in 3 earlier campaigns on HOST``."""
        where = f" on {self.host}" if self.host else ""
        n = self.campaigns
        return (f"noise prior: CV {self.cv:.1%} from {self.readings} readings in {n} earlier "
                f"campaign{'s' if n != 1 else ''}{where}")

    def to_dict(self) -> dict:
        return {"cv": self.cv, "sigma_log": self.sigma, "df": self.df, "readings": self.readings,
                "campaigns": self.campaigns, "host": self.host}


def within_arms(groups) -> tuple[float, int]:
    """Pooled within-group sum of squares and degrees of freedom of log values (one array per
    arm); groups with fewer than 2 values add nothing."""
    ss, df = 0.0, 0
    for g in groups:
        g = np.asarray(g, dtype=float)
        if g.size >= 2:
            ss += float(((g - g.mean()) ** 2).sum())
            df += g.size - 1
    return ss, df


def pooled_prior(groups, *, campaigns: int = 1, host: str = "", max_df: int = MAX_PRIOR_DF) -> NoisePrior | None:
    """A prior from earlier readings: ``groups`` are positive values, one list per arm and
    campaign (an arm's readings in two campaigns are two groups: a level may move between
    campaigns). None when fewer than 2 degrees of freedom remain."""
    logs = [np.log(np.asarray(g, dtype=float)) for g in groups if len(g) >= 2]
    ss, df = within_arms(logs)
    if df < 2 or ss <= 0:
        return None
    return NoisePrior(math.sqrt(ss / df), int(min(df, max_df)), readings=sum(len(g) for g in logs),
                      campaigns=campaigns, host=host)


@dataclass(frozen=True)
class PriorFit:
    """Today's residual variance against the prior's: ``ratio`` (today / prior), the two-sided
    F-test ``p``, and whether it ``rejected`` the prior."""

    ratio: float
    p: float
    df: int
    rejected: bool

    def describe(self, trial: int) -> str:
        """``noise prior dropped at trial 9: today's readings scatter 2.4x more (p=0.003)``."""
        f = math.sqrt(self.ratio)
        words = f"scatter {f:.1f}x more" if f >= 1 else f"scatter {1 / f:.1f}x less"
        return f"noise prior dropped at trial {trial}: today's readings {words} (p={self.p:.2g})"


def prior_fit(prior: NoisePrior, ss: float, df: int, alpha: float = FIT_ALPHA) -> PriorFit:
    """F test of today's within-arm variance ``ss / df`` against the prior's ``sigma^2`` (with
    ``prior.df``), two-sided: a machine may have become noisier or quieter."""
    if df < 1:
        return PriorFit(float("nan"), 1.0, df, False)
    ratio = (ss / df) / prior.sigma ** 2
    p = float(min(1.0, 2 * min(_st.f.cdf(ratio, df, prior.df), _st.f.sf(ratio, df, prior.df))))
    # a noisier machine is the dangerous side (every decision over-confident): tested at
    # NOISIER_FACTOR x the level
    level = alpha * (NOISIER_FACTOR if ratio > 1 else 1)
    return PriorFit(ratio, p, df, p < level)


def combined(prior: NoisePrior, ss: float, df: int) -> tuple[float, int]:
    """The scale today's readings and the prior give together: the posterior mode of the
    scaled-inverse-chi-square prior updated with today's within-arm residuals, ``(sigma, df)``."""
    dof = prior.df + df
    return math.sqrt((prior.df * prior.sigma ** 2 + ss) / dof), dof


def known_noise_gate(good, bad, sigma: float, df: float, *, higher_is_better: bool = True,
                     min_effect: float = 0.02, alpha: float = 0.05, margin_frac: float = MARGIN_FRAC,
                     min_n: int = 2, min_n_no: int = 4) -> GateResult:
    """``stats.regression_gate``'s decision with the noise known to be ``sigma`` (log scale, from
    ``df`` degrees of freedom): the same bounds, levels and margins, but the standard error from
    ``sigma`` and the readings' counts, and the quantiles at ``df`` rather than at today's few
    readings per arm. ``good``, ``bad``: positive values."""
    g = np.log(np.asarray(good, dtype=float))
    b = np.log(np.asarray(bad, dtype=float))
    cmp = compare(np.exp(g), np.exp(b), higher_is_better=higher_is_better, min_effect=min_effect,
                  alpha=alpha) if min(g.size, b.size) >= 2 else None
    nan = float("nan")
    if min(g.size, b.size) < max(1, min_n):
        return GateResult("continue", cmp, nan, nan, nan)
    d = float(b.mean() - g.mean())
    reg = -d if higher_is_better else d
    se = sigma * math.sqrt(1 / g.size + 1 / b.size)
    lo = reg - _st.t.ppf(1 - alpha / 2, df) * se
    hi = reg + _st.t.ppf(1 - alpha / NO_REGRESSION_ALPHA_DIVISOR, df) * se
    decision = gate_decision(lo, hi, min_effect=min_effect, margin_frac=margin_frac,
                             n=min(g.size, b.size), min_n_no=min_n_no)
    return GateResult(decision, cmp, reg, lo, hi)
