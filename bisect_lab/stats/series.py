"""Judging a performance series night by night: step test and change points (layer 2, pure).

A *series* is one arm's metric over the nights of a sweep. The newest night is judged twice:

1. **Step test** against the last good run: the trials of the baseline nights (the nights since
   the last change point or the last alert, at most ``baseline_nights``) versus the new night's,
   with :func:`bisect_lab.stats.compare.compare` (Welch on logs). A regression needs a significant
   difference, a slowdown of at least ``min_effect``, and (with 3+ baseline nights) a step larger
   than ``noise_k`` times the night-to-night spread of the baseline medians, so that a machine whose
   nights differ more than its trials do does not page anyone.
2. **Change points** over the whole history of night medians (E-divisive means, permutation test;
   :mod:`bisect_lab.stats.changepoints`). A significant change to a worse level that started after
   the last alert and still holds on the new night is a regression too (slow drifts that no single
   step shows).

An alerted night starts a new level: the next night is compared with it, so one planted regression
alerts once, not every night after it.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

__all__ = ["Detect", "Night", "judge_series"]


@dataclass(frozen=True)
class Detect:
    """Alert settings of a sweep (see the module docstring)."""

    min_effect: float | None = None
    alpha: float = 0.05
    cp_alpha: float = 0.01
    permutations: int = 199
    noise_k: float = 3.0
    baseline_nights: int = 5
    seed: int = 0


@dataclass
class Night:
    """One night of a sweep: its campaign, commit and the ok values per arm."""

    campaign: str
    created: float
    commit: str | None
    values: dict[str, list[float]]
    judgement: dict | None
    failed: int = 0

    def median(self, arm: str) -> float | None:
        v = self.values.get(arm)
        return statistics.median(v) if v else None


def _alerted(night: Night, arm: str) -> bool:
    for s in (night.judgement or {}).get("series", []):
        if s.get("arm") == arm and s.get("status") == "regression":
            return True
    return False


def judge_series(nights: list[Night], arm: str, *, higher_is_better: bool, min_effect: float,
                 detect: Detect = Detect()) -> dict:
    """Judge the newest night of one series (``nights[-1]``) against its own history.

    Returns a JSON-able dict: ``status`` ("regression" | "improvement" | "ok" | "no-history" |
    "no-data"), ``reason``, the ``comparison`` with the baseline, the baseline nights and commit
    (``last_good_commit``), ``change_points`` over the night medians, and the series itself.
    """
    from .compare import compare
    from .changepoints import e_divisive
    series = [(i, n) for i, n in enumerate(nights) if n.values.get(arm)]
    out: dict = {"arm": arm, "status": "no-data", "reason": "", "comparison": None, "change_points": [],
                 "baseline": [], "last_good_commit": None, "new_commit": nights[-1].commit if nights else None,
                 "medians": [n.median(arm) for n in nights]}
    if not nights or not nights[-1].values.get(arm):
        out["reason"] = "no successful trial of this arm tonight"
        return out
    new_i = len(nights) - 1
    hist = [(i, n) for i, n in series if i < new_i]
    meds = [n.median(arm) for _, n in series]
    idx_of = [i for i, _ in series]
    cps = e_divisive(meds, alpha=detect.cp_alpha, permutations=detect.permutations, min_size=2, seed=detect.seed)
    out["change_points"] = [dict(cp.to_dict(), night=idx_of[cp.index], commit=nights[idx_of[cp.index]].commit)
                            for cp in cps]
    if not hist:
        out.update(status="no-history", reason="first night of this series: nothing to compare with yet")
        return out
    last_alert = max((i for i, n in hist if _alerted(n, arm)), default=-1)
    last_cp = max((idx_of[cp.index] for cp in cps if idx_of[cp.index] < new_i), default=-1)
    start = max(last_alert, last_cp, 0)
    base = [(i, n) for i, n in hist if i >= start][-max(1, detect.baseline_nights):]
    if not base:
        base = hist[-1:]
    out["baseline"] = [n.campaign for _, n in base]
    out["last_good_commit"] = base[-1][1].commit
    a = [v for _, n in base for v in n.values[arm]]
    b = nights[-1].values[arm]
    reasons = []
    status = "ok"
    if len(a) >= 2 and len(b) >= 2:
        c = compare(a, b, higher_is_better=higher_is_better, min_effect=min_effect, alpha=detect.alpha)
        out["comparison"] = c.to_dict()
        step = math.log(c.ratio)
        # "Beyond min_effect with confidence": the interval's bound nearest to 1 is itself a change
        # of at least min_effect (a significant 0.5% shift of a 1%-noise machine is not an alert).
        near = c.ci_high if step < 0 else c.ci_low
        big = (near <= 1 - min_effect) if step < 0 else (near >= 1 + min_effect)
        beyond_noise, why_not = True, ""
        if len(base) >= 3:
            # Nights differ more than trials do (builds, clocks, machine state): the new night's median
            # must also fall outside the prediction interval of the baseline nights' medians.
            from scipy import stats as _st
            bm = [math.log(statistics.median(n.values[arm])) for _, n in base]
            sd = statistics.stdev(bm)
            q = _st.t.ppf(1 - detect.alpha / 2, len(bm) - 1)
            half = q * sd * math.sqrt(1 + 1 / len(bm))
            new_m = math.log(statistics.median(b))
            out["night_noise"] = sd
            out["prediction_interval"] = [math.exp(statistics.fmean(bm) - half), math.exp(statistics.fmean(bm) + half)]
            beyond_noise = abs(new_m - statistics.fmean(bm)) > half
            why_not = (f"within the night-to-night spread of the last {len(bm)} nights "
                       f"(prediction interval {out['prediction_interval'][0]:.4g} .. {out['prediction_interval'][1]:.4g})")
        if c.verdict == "different" and big and beyond_noise:
            status = "regression" if c.regression else "improvement"
            reasons.append(f"{abs(c.ratio - 1) * 100:.1f}% {'worse' if c.regression else 'better'} than the last "
                           f"good run ({len(base)} night(s), 95% CI {(c.ci_low - 1) * 100:+.1f}% .. "
                           f"{(c.ci_high - 1) * 100:+.1f}%, p={c.p_value:.2g})")
        elif c.verdict == "different" and big:
            reasons.append(f"{(c.ratio - 1) * 100:+.1f}% vs the last good run, but {why_not}: no alert")
        else:
            words = {"same": f"the same within ±{min_effect * 100:g}%", "unknown": "undecided: noisy",
                     "different": "significant, but not beyond the minimum effect"}[c.verdict]
            reasons.append(f"{(c.ratio - 1) * 100:+.1f}% vs the last good run ({words})")
    # Change points: a significant shift to a worse level that started after the last alert and holds tonight.
    for cp in reversed(cps):
        night = idx_of[cp.index]
        if night <= last_alert or night > new_i:
            continue
        worse = (cp.ratio - 1) * (1 if not higher_is_better else -1) > 0
        big = abs(math.log(cp.ratio)) >= -math.log(1 - min_effect)
        if worse and big and status != "regression":
            status = "regression"
            reasons.append(f"change point at night {night + 1} (commit {str(nights[night].commit)[:12]}): level "
                           f"{(cp.ratio - 1) * 100:+.1f}%, permutation p={cp.p_value:.3f}")
            out["last_good_commit"] = nights[night - 1].commit if night > 0 else out["last_good_commit"]
        break
    out["status"] = status
    out["reason"] = "; ".join(reasons)
    return out
