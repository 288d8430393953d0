"""Was an old reading real? Where it lies in today's launch-to-launch distribution (layer 2, pure)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as st

from .sessions import components


@dataclass(frozen=True)
class LaunchCheck:
    """An old value against today's sessions of the same arm.

    ``today``: the geometric mean of today's session means; ``low`` / ``high``: the interval that
    holds one launch like the old one (its readings per launch) with probability ``level``;
    ``sd_away``: how many predictive sds the old value lies from today's mean (signed, log scale);
    ``p``: two-sided; ``inside``: the old value lies in the interval. ``between_cv`` /
    ``within_cv``: today's variance components (NaN where not measurable)."""

    old: float
    old_readings: int
    today: float
    low: float
    high: float
    sd_away: float
    p: float
    inside: bool
    sessions: int
    readings: int
    between_cv: float
    within_cv: float
    level: float

    @property
    def ratio(self) -> float:
        """old / today."""
        return self.old / self.today


def check_launch(old: float, old_readings: int, sessions: list[list[float]], *, level: float = 0.95) -> LaunchCheck:
    """Where ``old`` (the mean of ``old_readings`` readings of one launch) lies among ``sessions``
    (today's launches of the same arm, each a list of readings).

    A new launch's mean varies by the launch-to-launch variance plus the within-launch variance over
    its readings; today's mean adds its own uncertainty. Student's t, with Satterthwaite's df when
    the old launch had another number of readings than today's."""
    logs = [np.log(np.asarray(s, dtype=float)) for s in sessions if len(s)]
    if len(logs) < 2:
        raise ValueError("need at least two sessions of today's measurements")
    if not (old > 0 and math.isfinite(old)):
        raise ValueError(f"the old value must be a positive number, got {old!r}")
    means = np.array([x.mean() for x in logs])
    n = len(means)
    mu = float(means.mean())
    s2 = float(means.var(ddof=1))
    comp = components([list(np.exp(x)) for x in logs])
    m_today = float(np.mean([x.size for x in logs]))
    # today's session means vary by between + within / (readings per launch today); the old
    # launch had its own number of readings: the within part moves to it. Satterthwaite's df for
    # the sum of the two estimated parts (the session means' with n-1 df, the within one's).
    a_part = s2 * (1.0 + 1.0 / n)
    b_part, df_b = 0.0, comp.df_within
    w = comp.within_var
    if df_b and math.isfinite(w):
        b_part = w * (1.0 / max(1, old_readings) - 1.0 / m_today)
    total = a_part + b_part
    if total <= 0 and df_b and math.isfinite(w):
        total = w / max(1, old_readings) + s2 / n       # (fewer readings today than then, little spread)
    se = math.sqrt(total)
    d = math.log(old) - mu
    den = a_part ** 2 / (n - 1) + (b_part ** 2 / df_b if df_b else 0.0)
    # (with more readings then than today the parts are a difference, for which Satterthwaite's df
    # run low: the interval is then conservative, about 99% at 10 readings then and 4 today;
    # recheck itself takes as many readings per launch as the old launch had, where this is exact)
    df = min(float(n - 1 + (df_b or 0)), (a_part + b_part) ** 2 / den) if den > 0 else float(n - 1)
    df = max(df, 1.0)
    t = float(st.t.ppf(0.5 + level / 2, df))
    z = d / se if se > 0 else (0.0 if d == 0 else math.copysign(math.inf, d))
    p = float(2 * st.t.sf(abs(z), df)) if math.isfinite(z) else 0.0
    return LaunchCheck(old=float(old), old_readings=int(old_readings), today=math.exp(mu),
                       low=math.exp(mu - t * se), high=math.exp(mu + t * se), sd_away=float(z), p=p,
                       inside=abs(z) <= t, sessions=n, readings=int(sum(x.size for x in logs)),
                       between_cv=comp.between_cv, within_cv=comp.within_cv, level=level)
