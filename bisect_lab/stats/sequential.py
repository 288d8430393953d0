"""Sequential decision on whether the regression exists (good arm vs bad arm).

Evaluated after every new good/bad measurement, so it stops as soon as the answer is clear:

* ``regression`` when the one-sided ``1-alpha/2`` lower confidence bound of the regression (Hsu's
  conservative degrees of freedom) exceeds a margin (``margin_frac`` x min_effect): a real,
  material regression, not just a significant 0.3%;
* ``no-regression`` when the one-sided ``1-alpha_no`` upper bound (default alpha/5) is below
  ``min_effect``: whatever the difference is, it is smaller than what the user said matters;
* ``continue`` otherwise.

The two bounds use different one-sided levels. A wrongly confirmed regression sends the search
hunting a culprit that does not exist (the attribution strategy still refuses to name one unless
the posterior and the confirmation step agree), while a wrongly declared "no regression" hides a
real one, so the latter is held to a stricter level. With repeated looks each one-sided level is
not the overall error rate; tests/test_calibration.py measures the overall rates by simulation.

Information bound worth knowing: telling a 0.5% difference from a 2% one at 3% CV with 5%/5%
errors needs about 80 trials (Wald's SPRT expected sample size), whatever the design.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats as _st

from ._util import as_positive_array
from .compare import Comparison, compare, yuen_log


# The regression must clear this share of min_effect (the lower bound's margin, see the module
# docstring).
MARGIN_FRAC = 0.25
# "no regression" ends a campaign, so it is held to alpha / this per look (see the module docstring).
NO_REGRESSION_ALPHA_DIVISOR = 5


@dataclass(frozen=True)
class GateResult:
    decision: str            # "regression" | "no-regression" | "continue"
    comparison: Comparison   # bad relative to good, at the caller's alpha
    regression_log: float    # estimated regression on log scale (> 0 = worse)
    lower_log: float
    upper_log: float
    discounted: int = 0      # readings left out as stalls (robust=True)


def gate_decision(lo: float, hi: float, *, min_effect: float, margin_frac: float, n: int,
                  min_n_no: int) -> str:
    """The gate's verdict from the regression's interval ``[lo, hi]`` (log units, positive =
    worse): ``regression`` once ``lo`` passes ``margin_frac`` of ``log1p(min_effect)``,
    ``no-regression`` once ``hi`` is below it with ``n >= min_n_no`` readings per arm ("no
    regression" ends a campaign: not on two values per arm), else ``continue``."""
    thr = math.log1p(min_effect)
    if lo > margin_frac * thr:
        return "regression"
    if hi < thr and n >= min_n_no:
        return "no-regression"
    return "continue"


def regression_gate(good, bad, *, higher_is_better: bool = True, min_effect: float = 0.02,
                    alpha: float = 0.05, margin_frac: float = MARGIN_FRAC, min_n: int = 2,
                    alpha_no: float | None = None, min_n_no: int = 4, trim: float = 0.0,
                    robust: bool = False) -> GateResult:
    """Decide regression / no-regression / continue from the good and bad arms' measurements.

    ``trim`` > 0 uses Yuen's trimmed means (``stats.yuen_log``) instead of plain log means: one
    arm's heavy tail (14% CV without CUDA graphs) then stops diluting the shift of its centre.
    ``robust``: the readings the contamination model of ``stats.robust`` discounts as stalls are
    left out first (``GateResult.discounted`` counts them)."""
    g = as_positive_array(good, "good")
    b = as_positive_array(bad, "bad")
    dropped = 0
    cmp = compare(g, b, higher_is_better=higher_is_better, min_effect=min_effect, alpha=alpha,
                  robust=robust)
    if robust and g.size >= 2 and b.size >= 2:
        from .robust import robust_log
        d, se, df, df_lo, dropped = robust_log(g, b)
    else:
        d, se, df, df_lo = yuen_log(g, b, trim)  # d = log(bad/good)
    reg = -d if higher_is_better else d  # > 0: bad is worse
    nan = float("nan")
    if min(g.size, b.size) < min_n or not math.isfinite(se):
        return GateResult("continue", cmp, reg, nan, nan, dropped)
    a_no = alpha / NO_REGRESSION_ALPHA_DIVISOR if alpha_no is None else alpha_no
    if se == 0:
        lo = hi = reg
    else:
        # conservative df (Hsu's n - 1 of the arm carrying the variance, see yuen_log): Welch df
        # are optimistic at 2-4 values per arm, exactly where a sequential look is most tempted;
        # alpha/2 per look keeps the overall A/A rate of a wrongly confirmed regression near
        # alpha (test_calibration.py)
        lo = reg - _st.t.ppf(1 - alpha / 2, df_lo) * se
        hi = reg + _st.t.ppf(1 - a_no, df) * se
    decision = gate_decision(lo, hi, min_effect=min_effect, margin_frac=margin_frac,
                             n=min(g.size, b.size), min_n_no=min_n_no)
    return GateResult(decision, cmp, reg, lo, hi, dropped)
