"""What a campaign expects to cost, said before and while it runs (layer 5).

:func:`stored_plan` reads earlier measurements of the same arms (any campaign, same experiment, same
host) before any trial; :class:`PlanProgress` logs a strategy's own estimate as it moves.
"""
from __future__ import annotations

from ..model import Arm
from .session import Session, experiment_key


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def stored_plan(session: Session, arms: list[Arm], note: str, labels: list[str] | None = None, *,
                commits: list[str] | None = None) -> str:
    """One line, before any trial: what earlier measurements of the arms (same experiment, same
    host, any campaign: a `run`, an earlier attribution) say resolving ``min_effect`` between them
    costs. ``note`` ends the line (the budget, or what this run measures); ``labels`` name the arms'
    noise (default: their specs). With ``commits`` (a bisection's good and bad ends), the one arm's
    trials at each of those commits are compared instead, and the estimate is per commit."""
    from .. import stats
    from ..summaries import positive_metric
    from ..verdicts import PlanEstimate

    exp, d = session.experiment, session.experiment.design
    host = session.workers[0].host.name
    if commits:
        groups = [(arms[0].spec, c) for c in commits]
        names = [f"{arms[0].spec!r} at {commits[0][:12]}"] + [c[:12] for c in commits[1:]]
    else:
        groups = [(a.spec, None) for a in arms]
        names = [repr(a.spec) for a in arms]
    values: dict[tuple, list[float]] = {g: [] for g in groups}
    for t in session.store.arm_trials(sorted({spec for spec, _ in groups}), experiment=experiment_key(exp),
                                      host=host):
        v = positive_metric(t.metrics.get(session.metric))
        if v is None:
            continue
        for spec, commit in groups:
            if t.arm == spec and (commit is None or t.commit == commit):
                values[(spec, commit)].append(v)
    known = [v for v in values.values() if len(v) >= 2]
    if not known:
        return f"planning: no earlier measurements of {_and(names)} on {host} to plan from ({note})"
    n = stats.plan_trials(known, min_effect=d.min_effect, alpha=d.alpha)
    counts = [f"{len(v)} {'at' if commits and k else 'of'} {name}"
              for k, (name, v) in enumerate(zip(names, values.values()))]
    counts[0] = counts[0].replace(" of ", " stored trial(s) of ", 1)
    labels = labels or names
    cv = ", ".join(f"{label} {stats.log_cv(v):.1%}" for label, v in zip(labels, values.values()) if len(v) >= 2)
    text = PlanEstimate(float("nan"), float("nan"), d.min_effect, n).describe("commit" if commits else "arm")
    return (f"planning from {_and(counts)} on {host} (CV {cv}): {text} ({note})"
            + _seen_plan(known if len(known) == 2 == len(values) else [], d, "commit" if commits else "arm",
                         (commits[0][:12], commits[-1][:12]) if commits else (names[0], names[-1]),
                         exp.benchmark.higher_is_better))


def _seen_plan(groups: list[list[float]], d, unit: str, names: tuple[str, str], higher_is_better: bool,
               who: str = "the stored trials show") -> str:
    """What settling the difference ``who`` (the stored trials, this campaign's readings) already
    shows between the two groups costs, when it is larger than ``min_effect`` (a 15% search is not
    planned from the 2% it could also find), in the campaign's words: ``'all' 49.5% slower than
    'none'``."""
    import math

    from .. import stats
    from ..summaries import speed_words
    if len(groups) != 2:
        return ""
    means = [sum(math.log(v) for v in g) / len(g) for g in groups]
    seen = math.exp(abs(means[0] - means[1])) - 1       # plan_trials' scale: log1p(min_effect)
    if seen <= d.min_effect:
        return ""
    n = stats.plan_trials(groups, min_effect=seen, alpha=d.alpha)
    words = speed_words(math.exp(means[1] - means[0]), higher_is_better)
    return f"; {who} {names[1]} {words} than {names[0]}: about {n} trials per {unit} settle that"


class PlanProgress:
    """Logs a strategy's planning estimate as the campaign goes: when it first exists, then when
    it moves by a quarter or more (at most every ``every`` trials). With ``arms`` (the good and bad
    specs) the line also says what the difference this campaign already reads between them costs,
    so an 80% regression is not planned from the 2% ``min_effect`` alone."""

    def __init__(self, session: Session, strategy, every: int = 5, arms: tuple[str, str] | None = None):
        self.session, self.strategy, self.every, self.arms = session, strategy, every, arms
        self.last: int | None = None
        self.at = 0

    def update(self) -> None:
        get = getattr(self.strategy, "plan_estimate", None)
        if not callable(get):
            return
        if getattr(self.strategy, "done", False):
            return                  # the campaign has its answer: no estimate of what is left to spend
        plan = get()
        n, t = plan.trials_per_arm, self.strategy.trials
        if n is None or (self.last is not None and (abs(n - self.last) < 0.25 * self.last
                                                     or t - self.at < self.every)):
            return
        self.last, self.at = n, t
        head = f"planning after {t} trials (CV good {plan.cv_good:.1%}, bad {plan.cv_bad:.1%}): "
        seen = self._seen()
        if seen:
            # the difference in hand first; min_effect's count is what a further, smaller culprit costs
            self.session.log(f"{head}{seen}; {plan.text} (a further, smaller culprit)")
        else:
            self.session.log(f"{head}{plan.text}")

    def _seen(self) -> str:
        """``so far bad 35.4% slower than good: about 2 trials per arm settle that`` from this
        campaign's good and bad readings ("" below ``min_effect`` or without two of each)."""
        if not self.arms:
            return ""
        from ..summaries import positive_metric
        s = self.session
        groups: list[list[float]] = [[], []]
        for t in s.store.trials(s.campaign):
            v = positive_metric(t.metrics.get(s.metric))
            if t.ok and v is not None and t.arm in self.arms:
                groups[self.arms.index(t.arm)].append(v)
        if min(len(g) for g in groups) < 2:
            return ""
        return _seen_plan(groups, s.experiment.design, "arm", ("good", "bad"),
                          s.experiment.benchmark.higher_is_better, "so far").removeprefix("; ")
