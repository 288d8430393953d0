"""Statistics: numbers in, decisions out (layer 2, docs/DEVELOPING.md). No I/O.

Public API:
  compare(a, b, ...) -> Comparison       two arms, ratio b/a with a CI and a 3-way verdict
  summarize(values) -> Summary           one arm
  plan_trials(values_or_cv, ...) -> int  trials per arm to resolve min_effect
  regression_gate(good, bad, ...)        sequential good-vs-bad decision
  welch_log / yuen_log                  log-scale Welch (trimmed: Yuen) difference, se, df
  detect_drift / within_group_trend / within_group_step / outliers   diagnostics
  robust_sd / winsorize                  MAD-based spread, clipping at median +- k of it
  adjust_pvalues(p, method="holm")       multiple-comparison control
  discount / kept / kept_pair            readings a contamination model discounts as stalls
  components(groups) -> VarianceComponents   launch-to-launch and within-launch variance (sessions)
  compare_sessions(a, b, ...) -> Comparison  two arms measured in sessions (session means as units)
  choose_readings(...) / information_per_second(...)   readings per launch, which arm to launch next
  NoisePrior / pooled_prior(groups) / prior_fit / known_noise_gate   earlier campaigns' noise as a prior
"""
from .compare import Comparison, compare, welch_log, yuen_log
from .diagnostics import (Drift, Step, detect_drift, outliers, robust_sd, winsorize, within_group_step,
                          within_group_trend)
from .multiple import adjust_pvalues
from .noise_prior import NoisePrior, PriorFit, known_noise_gate, pooled_prior, prior_fit
from .planning import log_cv, plan_trials
from .robust import discount, kept, kept_pair
from .sequential import MARGIN_FRAC, NO_REGRESSION_ALPHA_DIVISOR, GateResult, regression_gate
from .sessions import (ReadingsChoice, VarianceComponents, choose_readings, combine_blocks, compare_sessions, components,
                       information_per_second, session_means)
from .summary import Summary, median_ci, summarize

__all__ = [
    "Comparison", "compare", "welch_log", "yuen_log", "Summary", "summarize", "median_ci", "plan_trials",
    "log_cv", "Drift", "detect_drift", "within_group_trend", "outliers", "robust_sd", "winsorize",
    "Step", "within_group_step", "adjust_pvalues", "discount", "kept", "kept_pair",
    "GateResult", "MARGIN_FRAC", "NO_REGRESSION_ALPHA_DIVISOR", "regression_gate",
    "VarianceComponents", "components", "compare_sessions", "session_means", "ReadingsChoice", "choose_readings",
    "information_per_second", "combine_blocks",
    "NoisePrior", "PriorFit", "pooled_prior", "prior_fit", "known_noise_gate",
]
