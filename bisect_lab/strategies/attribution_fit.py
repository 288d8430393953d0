"""Lack of fit of a stage's hypotheses: do the arms it measured fit *any* one-stage explanation?

One stage explains the readings by one culprit or a pair (``hypotheses.py``). When the truth is
more than that (the story: a culprit beside an AND pair), no hypothesis fits the arm means, the
posterior keeps moving between "culprit plus some partner", and the stage used to measure until
its soft limit (100 trials) before handing over, however precise its readings were: 110 trials at
a reading CV of 0.25% as at 4%. The classic lack-of-fit F test says so as soon as the readings
can: the arm means against the best-fitting hypothesis's two levels, over the within-arm (pure)
error. It is taken against the hypothesis that fits best, so it is conservative: it rejects only
when *every* hypothesis misfits.
"""
from __future__ import annotations

import math

import numpy as np

from .hypotheses import level_fits

# Reject the stage's model at this p (it is looked at after every reading: strict), and only
# when the best fit misses some replicated arm by at least min_effect (a misfit smaller than
# what the campaign resolves is not worth a stage of its own).
MISFIT_P = 1e-4
MISFIT_MIN_ARMS = 5          # arm means to fit (two levels: K - 2 >= 3 df of lack of fit)
MISFIT_MIN_PURE_DF = 6       # within-arm degrees of freedom behind the error estimate


def lack_of_fit(space, X: np.ndarray, y_by_arm: list[np.ndarray], *, var_ratio: float = 1.0):
    """``(p, miss)`` for the best-fitting hypothesis of ``space``: the F test's p-value of its
    lack of fit, and its largest miss (log scale) on an arm read at least twice. ``(1.0, 0.0)``
    when there are too few arms or replicates to judge."""
    n = np.array([v.size for v in y_by_arm], float)
    K, N = n.size, float(n.sum())
    pure_df = N - K
    if K < MISFIT_MIN_ARMS or pure_df < MISFIT_MIN_PURE_DF:
        return 1.0, 0.0
    means = np.array([v.mean() for v in y_by_arm])
    within = np.array([((v - v.mean()) ** 2).sum() for v in y_by_arm])
    pos = space.positions(X)                                   # K x H
    w = np.exp(-pos * math.log(var_ratio))                      # the posterior's weights
    *_, mg, mb = level_fits(pos, w, n[:, None], np.array([v.sum() for v in y_by_arm])[:, None])
    fit = mg[None, :] + pos * (mb - mg)[None, :]
    lof = (w * n[:, None] * (means[:, None] - fit) ** 2).sum(0)
    pe = (w * within[:, None]).sum(0)
    F = (lof / (K - 2)) / np.maximum(pe / pure_df, 1e-300)
    h = int(np.argmin(F))
    from scipy import stats as st
    p = float(st.f.sf(F[h], K - 2, pure_df))
    replicated = n >= 2
    miss = float(np.abs(means - fit[:, h])[replicated].max()) if replicated.any() else 0.0
    return p, miss


def stage_misfit(stage) -> tuple[float, float]:
    """``lack_of_fit`` of one ``AttributionStrategy`` stage's readings (the views its posterior
    reads: detrended, without discounted stalls, the same bad/good variance ratio)."""
    obs, y, _ = stage._log_values()
    arms: dict[frozenset, list[float]] = {}
    for o, v in zip(obs, y):
        arms.setdefault(o.active, []).append(float(v))
    if len(arms) < MISFIT_MIN_ARMS:
        return 1.0, 0.0
    keys = list(arms)
    return lack_of_fit(stage.space, stage._matrix(keys), [np.asarray(arms[a]) for a in keys],
                       var_ratio=stage._var_ratio(arms))


def stage_misfits(stage) -> bool:
    """Does no one-stage hypothesis fit the stage's readings, by ``min_effect`` or more somewhere?"""
    p, miss = stage_misfit(stage)
    return p < MISFIT_P and miss >= math.log1p(stage.min_effect)
