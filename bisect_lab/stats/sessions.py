"""Statistics on two levels: readings nested in sessions (one server launch, several readings).

Why: two launches of the same tree differ more than two readings inside one launch (a launch
settles into its own regime: memory layout, graph capture, clocks). Readings of one session are
therefore not independent, and an interval that counts them as such is too narrow. The unit of an
arm's evidence is the session; its readings only make the session's own value more precise.

Model, on the log scale (noise is multiplicative): ``log y_ij = mu_arm + s_i + e_ij`` with a session
effect ``s_i ~ (0, between_var)`` and a reading effect ``e_ij ~ (0, within_var)``. The components are
estimated by the method of moments for unbalanced one-way random effects (ANOVA), pooled across
arms: the launch-to-launch variance is a property of the machine and the stack, so every arm's
sessions inform it.

Comparisons use the session means (the geometric mean of each session's readings) as the units.
With one reading per session this is exactly :func:`stats.compare.compare`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import stats as _st

from ._util import as_positive_array
from .compare import Comparison, compare, from_log

__all__ = ["VarianceComponents", "components", "compare_sessions", "session_means", "choose_readings", "combine_blocks",
           "ReadingsChoice", "information_per_second", "PRIOR_WITHIN_TO_BETWEEN",
           "search_floor_var", "SEARCH_FLOOR_SD_PER_MIN_EFFECT"]

# Before a campaign has measured both levels: assume a reading inside a launch is as noisy as the
# launch-to-launch variation (variance ratio 1). Neither level dominates a priori; the choice moves
# to the campaign's own estimates as soon as there are any.
PRIOR_WITHIN_TO_BETWEEN = 1.0


def _cv(var: float) -> float:
    """CV of a lognormal whose log variance is ``var`` (about sqrt(var) for small values)."""
    return float(math.sqrt(math.expm1(var))) if math.isfinite(var) and var >= 0 else float("nan")


@dataclass(frozen=True)
class VarianceComponents:
    """Between-session and within-session variance of the log metric.

    ``between_var`` / ``within_var``: variances on the log scale (``between_var`` is NaN when no arm
    has two sessions, ``within_var`` when no session has two readings); ``between_cv`` /
    ``within_cv``: the same as CVs ("launch-to-launch CV 1.8%, within a launch 0.4%").
    ``ms_between``, ``df_between``, ``ms_within``, ``df_within``, ``n0``: the ANOVA pieces
    (``between_var = (ms_between - ms_within) / n0``, truncated at 0), for Satterthwaite's df.
    """

    between_var: float
    within_var: float
    sessions: int
    readings: int
    arms: int
    ms_between: float
    df_between: int
    ms_within: float
    df_within: int
    n0: float

    @property
    def between_cv(self) -> float:
        return _cv(self.between_var)

    @property
    def within_cv(self) -> float:
        return _cv(self.within_var)

    def to_dict(self) -> dict:
        d = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        d["between_cv"] = None if not math.isfinite(self.between_cv) else self.between_cv
        d["within_cv"] = None if not math.isfinite(self.within_cv) else self.within_cv
        return d


def _as_arms(groups) -> list[list[np.ndarray]]:
    """Sessions grouped by arm, as log arrays: ``groups`` is one arm's list of sessions, or a
    mapping (or list) of arms, each a list of sessions."""
    if isinstance(groups, Mapping):
        arms = list(groups.values())
    else:
        groups = list(groups)
        first = next((s for g in groups for s in g), None)    # first session (several arms) or reading
        arms = [groups] if first is None or np.isscalar(first) else groups
    out = []
    for arm in arms:
        sessions = [np.log(as_positive_array(s, "readings")) for s in arm]
        out.append([s for s in sessions if s.size])
    return out


def components(groups) -> VarianceComponents:
    """Variance components of readings grouped by session (ANOVA / method of moments, unbalanced).

    ``groups``: one arm's sessions (a list of lists of readings), or several arms' (a mapping arm ->
    sessions, or a list of such lists): then the arm means are removed first and the components
    are pooled across arms. Raw readings in, log-scale components out.
    """
    arms = _as_arms(groups)
    ssw = ssb = d_coef = 0.0
    df_w = df_b = n_sessions = n_readings = 0
    for sessions in arms:
        if not sessions:
            continue
        sizes = np.array([s.size for s in sessions], dtype=float)
        means = np.array([s.mean() for s in sessions])
        n_arm = sizes.sum()
        grand = float((sizes * means).sum() / n_arm)
        ssw += float(sum(((s - m) ** 2).sum() for s, m in zip(sessions, means)))
        df_w += int(n_arm - len(sessions))
        ssb += float((sizes * (means - grand) ** 2).sum())
        df_b += len(sessions) - 1
        d_coef += float(n_arm - (sizes ** 2).sum() / n_arm)
        n_sessions += len(sessions)
        n_readings += int(n_arm)
    msw = ssw / df_w if df_w else float("nan")
    msb = ssb / df_b if df_b else float("nan")
    n0 = d_coef / df_b if df_b else float("nan")
    if df_b and df_w:
        between = max(0.0, (msb - msw) / n0)
    elif df_b:
        between = msb          # one reading per session: the session-to-session variance is all there is
    else:
        between = float("nan")
    return VarianceComponents(float(between), float(msw), n_sessions, n_readings, sum(1 for a in arms if a),
                              float(msb), df_b, float(msw), df_w, float(n0))


def session_means(sessions) -> np.ndarray:
    """The geometric mean of each session's readings (the value a strategy is told per session)."""
    return np.array([float(np.exp(np.log(as_positive_array(s, "readings")).mean())) for s in sessions if len(s)])


def compare_sessions(a_groups, b_groups, *, higher_is_better: bool = True, min_effect: float = 0.02,
                     alpha: float = 0.05, pooled: VarianceComponents | None = None) -> Comparison:
    """Arm ``b`` relative to arm ``a``, each a list of sessions (a list of readings each).

    The units are the session means (geometric means), so the interval carries the launch-to-launch
    variation as well as the within-launch one, never readings as if independent: Welch's t on the
    log session means (each arm its own variance). With one reading per session this is exactly
    :func:`~bisect_lab.stats.compare.compare`.

    ``pooled``: the campaign's :func:`components` (pooled across its arms). Used where an arm has
    too few sessions for a variance of its own (fewer than 4) and the data allow it (readings
    inside sessions, between-session df, and the two arms' session spreads not significantly
    different): the variance of each arm's mean is then ``(between_var + within_var * mean(1/n_i)) / k``
    from the pooled components, with Satterthwaite's df from their mean squares.
    ``Comparison.n_a`` / ``n_b`` count sessions.
    """
    ma, mb = session_means(a_groups), session_means(b_groups)
    base = compare(ma, mb, higher_is_better=higher_is_better, min_effect=min_effect, alpha=alpha)
    if pooled is None or not _pool_ok(a_groups, b_groups, ma, mb, pooled):
        return base
    d = float(np.log(mb).mean() - np.log(ma).mean())
    ha = float(np.mean([1.0 / len(s) for s in a_groups if len(s)]))
    hb = float(np.mean([1.0 / len(s) for s in b_groups if len(s)]))
    c_b = 1.0 / ma.size + 1.0 / mb.size
    c_w = ha / ma.size + hb / mb.size
    a1, a2 = c_b / pooled.n0, c_w - c_b / pooled.n0
    se2 = a1 * pooled.ms_between + a2 * pooled.ms_within
    if se2 < c_w * pooled.ms_within:          # between-variance estimate below 0: truncated, within only
        se2, df = c_w * pooled.ms_within, float(pooled.df_within)
    else:
        df = se2 ** 2 / ((a1 * pooled.ms_between) ** 2 / pooled.df_between
                         + (a2 * pooled.ms_within) ** 2 / pooled.df_within)
    return _from_log(d, math.sqrt(se2), df, ma.size, mb.size, higher_is_better, min_effect, alpha)


def _pool_ok(a_groups, b_groups, ma, mb, pooled: VarianceComponents) -> bool:
    if not (pooled.df_within > 0 and pooled.df_between > 0 and math.isfinite(pooled.n0) and pooled.n0 > 0):
        return False
    if ma.size == 0 or mb.size == 0 or min(ma.size, mb.size) >= 4:
        return False            # enough sessions for each arm's own variance (no equal-variance assumption)
    if ma.size >= 2 and mb.size >= 2:
        va, vb = np.log(ma).var(ddof=1), np.log(mb).var(ddof=1)
        if va > 0 and vb > 0:
            f = va / vb
            p = 2 * min(_st.f.sf(f, ma.size - 1, mb.size - 1), _st.f.cdf(f, ma.size - 1, mb.size - 1))
            if p < 0.05:
                return False    # the two arms' launches spread differently: no common variance
    return True


def _from_log(d, se, df, na, nb, higher_is_better, min_effect, alpha) -> Comparison:
    return from_log(d, se, df, na, nb, higher_is_better=higher_is_better, min_effect=min_effect, alpha=alpha)


@dataclass(frozen=True)
class ReadingsChoice:
    """How many readings per launch, and why (``readings``: the number; ``why``: one sentence;
    ``prior``: True when a variance was not measured yet and the prior stood in for it)."""

    readings: int
    why: str
    optimum: float
    prior: bool

    def __int__(self) -> int:
        return self.readings


def choose_readings(launch_s: float, reading_s: float, within_var: float | None, between_var: float | None,
                    *, lo: int = 1, hi: int = 20, floor_var: float = 0.0) -> ReadingsChoice:
    """Readings per launch that minimise the variance of an arm's mean per unit of cost.

    The classic two-stage optimum: with a launch costing ``launch_s`` and a reading ``reading_s``,
    ``m* = sqrt(launch_s / reading_s * within_var / between_var)``, rounded and clamped to
    ``[lo, hi]``. A variance not measured yet (``None`` / NaN) is replaced by the prior (within
    equal to between, :data:`PRIOR_WITHIN_TO_BETWEEN`; at least 2 readings while the within-launch
    noise is not measured, so that it gets measured), and the sentence says so. A between-launch
    variance of 0 (launches indistinguishable) gives ``hi``: then every reading is as good as a
    launch and readings are the cheap ones.

    ``floor_var`` is for a search (attribution, bisection) rather than one comparison: a search
    needs a floor of launches of distinct arms whatever their precision, and the launches it needs
    fall with the variance ``v`` of a launch's mean only above that, about as ``N0 + c v``.
    Minimising ``(launch + m readings) x (N0 + c v)`` gives the same optimum with the launch-to-launch
    variance raised by ``floor_var = N0 / c``, the variance of a launch's mean at which the search
    spends as many launches on noise as on its floor (``m* = sqrt(cost x within / (between +
    floor_var))``): more readings per launch stop paying once a launch is that precise.
    """
    if not (launch_s >= 0 and reading_s > 0):
        raise ValueError("launch_s must be >= 0 and reading_s > 0")
    lo, hi = max(1, int(lo)), max(1, int(hi))
    if hi < lo:
        raise ValueError("hi must be >= lo")
    w = float(within_var) if within_var is not None and math.isfinite(within_var) else float("nan")
    b = float(between_var) if between_var is not None and math.isfinite(between_var) else float("nan")
    prior = not (math.isfinite(w) and math.isfinite(b))
    floor = max(0.0, float(floor_var or 0.0))
    if prior:
        ratio = PRIOR_WITHIN_TO_BETWEEN
        if floor > 0 and math.isfinite(w):
            ratio = w / (w / PRIOR_WITHIN_TO_BETWEEN + floor)
    elif b + floor <= 0:
        ratio = math.inf if w > 0 else PRIOR_WITHIN_TO_BETWEEN
    else:
        ratio = w / (b + floor)
    cost = launch_s / reading_s
    opt = math.sqrt(cost * ratio) if math.isfinite(ratio) else math.inf
    if math.isfinite(opt):
        # the integer side of the optimum with the smaller cost x variance of a session mean
        f = lambda k: (cost + k) * (1.0 + ratio / k)        # noqa: E731  (in units of a reading, between_var)
        m = min((max(lo, min(hi, k)) for k in (math.floor(opt), math.ceil(opt)) if k >= 1), key=f, default=lo)
    else:
        m = hi
    if prior and not math.isfinite(w) and hi >= 2:
        m = max(m, 2)          # two readings at least, or the within-launch noise is never measured
    noun = "reading" if m == 1 else "readings"
    if prior and math.isfinite(w):
        why = (f"{m} {noun} per launch: a launch costs {cost:.3g} readings; within-launch noise measured, "
               f"launch-to-launch variation not yet, assumed as large (prior)")
    elif prior:
        why = (f"{m} {noun} per launch: a launch costs {cost:.3g} readings; launch-to-launch variation not "
               f"measured yet, assumed as large as within a launch (prior; at least 2 readings, so that "
               f"the within-launch noise gets measured)")
    elif b + floor <= 0:
        why = (f"{m} {noun} per launch (the most allowed): launches measured indistinguishable, "
               f"a launch costs {cost:.3g} readings")
    elif floor > 0:
        why = (f"{m} {noun} per launch: a launch costs {cost:.3g} readings, within-launch sd "
               f"{math.sqrt(w / b) if b > 0 else math.inf:.2g}x launch-to-launch, and the search's "
               f"launches stop falling once a launch's mean is within about {math.sqrt(floor):.1%}")
    else:
        why = (f"{m} {noun} per launch: a launch costs {cost:.3g} readings, within-launch sd "
               f"{math.sqrt(ratio):.2g}x launch-to-launch")
    if math.isfinite(opt) and (opt < lo - 0.5 or opt > hi + 0.5):
        why += f" (optimum {opt:.3g}, kept within {lo}..{hi})"
    return ReadingsChoice(m, why, float(opt), prior)


# The floor of a search, as the sd of a launch's mean in units of its min_effect (the variance at
# which the search spends as many launches on noise as on its floor; choose_readings' floor_var).
# Measured on the story's attribution (benchmarks/simulate_sessions.py, 24 repetitions per cell):
# launches = 34 + 1.37 v (v: a launch mean's variance in %^2) at L = 2 and 8, so N0 / c = 25 %^2 =
# (2.5 x the 2% min_effect)^2. The multiple is assumed to carry over to other min_effects and to
# bisection (whose floor, like attribution's, is the distinct arms its answer has to name).
SEARCH_FLOOR_SD_PER_MIN_EFFECT = 2.5


def search_floor_var(min_effect: float) -> float:
    """``floor_var`` for :func:`choose_readings` in a search whose smallest effect of interest is
    ``min_effect`` (log scale, as the variance components)."""
    return (SEARCH_FLOOR_SD_PER_MIN_EFFECT * math.log1p(max(0.0, float(min_effect)))) ** 2


def information_per_second(sessions: int, launch_s: float, reading_s: float, within_var: float,
                           between_var: float, readings: int | None = None) -> float:
    """Expected reduction of the variance of an arm's mean (log scale) per second spent on one
    more launch of it with ``readings`` readings (default: :func:`choose_readings`'s choice), the
    arm having ``sessions`` sessions so far. The arm to launch next is the one with the most."""
    if readings is None:
        readings = choose_readings(launch_s, reading_s, within_var, between_var).readings
    w = within_var if math.isfinite(within_var) else 0.0
    b = between_var if math.isfinite(between_var) else w * (1.0 / PRIOR_WITHIN_TO_BETWEEN)
    per_session = b + w / max(1, int(readings))
    now = per_session / sessions if sessions > 0 else math.inf
    after = per_session / (sessions + 1)
    cost = launch_s + readings * reading_s
    if cost <= 0:
        return math.inf
    return float((now - after) / cost) if math.isfinite(now) else math.inf


def combine_blocks(parts: Sequence[Comparison], weights: Sequence[float] | None = None, *,
                   higher_is_better: bool = True, min_effect: float = 0.02, alpha: float = 0.05) -> Comparison:
    """One effect from the same comparison made within several blocks (hosts): the weighted mean of
    the blocks' log ratios, its variance from theirs, Satterthwaite's df. ``weights`` are fixed by
    the design (default: the harmonic session counts ``1 / (1/n_a + 1/n_b)``), not by the noise, so
    a block whose variance happened to come out small does not take over. Blocks without a
    standard error are left out; ``n_a`` / ``n_b`` are summed."""
    use = [(c, w) for c, w in zip(parts, weights or [1.0 / (1.0 / max(c.n_a, 1) + 1.0 / max(c.n_b, 1)) for c in parts])
           if math.isfinite(c.se_log) and math.isfinite(c.df) and c.ratio > 0 and w > 0]
    na, nb = sum(c.n_a for c, _ in use), sum(c.n_b for c, _ in use)
    if not use:
        return Comparison(float("nan"), float("nan"), float("nan"), 1.0, "unknown", na, nb, False, False,
                          higher_is_better, min_effect, alpha)
    total = sum(w for _, w in use)
    d = sum(w * math.log(c.ratio) for c, w in use) / total
    terms = [((w / total) ** 2 * c.se_log ** 2, c.df) for c, w in use]
    var = sum(t for t, _ in terms)
    den = sum(t ** 2 / df for t, df in terms if df > 0)
    df = var ** 2 / den if den > 0 else float(sum(df for _, df in terms))
    return _from_log(d, math.sqrt(var), df, na, nb, higher_is_better, min_effect, alpha)
