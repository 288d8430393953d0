"""Readings per serving session for ``[server] readings = "auto"``, from the campaign's own costs
and noise (layer 5).

Before each launch the campaign's measured costs (a launch: until ready, plus its stop; a reading:
its duration) and its variance components (launch-to-launch and within a launch, pooled over its
arms) give the classic two-stage optimum (``stats.sessions.choose_readings``). Until a launch is
measured and enough launches show their spread (:data:`TRUST_DF_BETWEEN`) the choice rests on a
prior, and says so. Every change of the choice is
logged with its reason; a user-given integer is never touched (this is used only for "auto").
"""
from __future__ import annotations

import statistics
import threading
from typing import Callable

from ..runner import TrialSpec

# Before any launch is measured: readings per launch (the prior's choice is at least 2 anyway).
FIRST_READINGS = 3
# Launch-to-launch variance is trusted from this many degrees of freedom between sessions (pooled
# over arms) on; before that the prior stands in (a variance from 2-3 launches is mostly noise).
TRUST_DF_BETWEEN = 4
# Within-launch variance is trusted from this many degrees of freedom on (until then at least two
# readings per launch, so that it gets measured).
TRUST_DF_WITHIN = 3
# A launch-to-launch variance estimated as zero from a handful of launches is not zero: it is
# floored at this share of the within-launch variance (at most sqrt(cost / 0.05) readings).
BETWEEN_FLOOR = 0.05


def auto_readings(launch_s: float | None, reading_s: float | None, groups, *, hi: int = 20,
                  floor_var: float = 0.0) -> tuple[int, str]:
    """``(readings per launch, why)`` from the costs measured so far (None: not yet) and the
    counted readings so far (``groups``: per arm, per session; ``stats.sessions.components``):
    the rule ``readings = "auto"`` follows, pure (the session simulation calls it too)."""
    from ..stats.sessions import choose_readings, components
    if launch_s is None or reading_s is None:
        return FIRST_READINGS, (f"{FIRST_READINGS} readings per launch until a launch and a reading "
                                "have been measured (readings = \"auto\")")
    comp = components(groups)
    within = comp.within_var if comp.df_within >= TRUST_DF_WITHIN else None
    between = None
    if within is not None and comp.df_between >= TRUST_DF_BETWEEN:
        between = max(comp.between_var, BETWEEN_FLOOR * within)
    choice = choose_readings(launch_s, reading_s, within, between, hi=hi, floor_var=floor_var)
    return choice.readings, (f"{choice.why} (launch {launch_s:.1f} s until ready and stopped, "
                             f"reading {reading_s:.1f} s)")


class AutoReadings:
    """``readings_for(spec) -> int`` for the executor: the cost-aware choice, re-made before each
    launch from what the campaign has stored so far."""

    def __init__(self, store, campaign: str, metric: str, log: Callable[[str], None], *, hi: int = 20,
                 floor_var: float = 0.0):
        self.store, self.campaign, self.metric, self.log, self.hi = store, campaign, metric, log, hi
        # A search (attribute, bisect) has a floor of launches whatever their precision: past it
        # more readings per launch buy nothing (stats.sessions.search_floor_var); `run` has none.
        self.floor_var = floor_var
        self._last: int | None = None
        self._lock = threading.Lock()
        self.why = ""

    def costs(self) -> tuple[float | None, float | None]:
        """(launch seconds, reading seconds) measured so far in this campaign, medians."""
        launches = [r.ready_s + float((r.stop or {}).get("stop_s") or 0.0)
                    for r in self.store.sessions(self.campaign) if r.ended and r.ready_s]
        readings = [t.duration_s for t in self.store.trials(self.campaign)
                    if t.session and t.ok and t.tag != "warmup" and t.duration_s > 0]
        return (statistics.median(launches) if launches else None,
                statistics.median(readings) if readings else None)

    def groups(self) -> dict[str, list[list[float]]]:
        """Counted readings of the primary metric, per arm, per ended session."""
        ended = {r.session for r in self.store.sessions(self.campaign) if r.ended}
        by: dict[str, dict[str, list[float]]] = {}
        for t in self.store.trials(self.campaign):
            v = t.metrics.get(self.metric) if t.ok else None
            if t.session in ended and t.tag != "warmup" and isinstance(v, (int, float)) and v > 0:
                by.setdefault(t.arm, {}).setdefault(t.session, []).append(float(v))
        return {arm: list(s.values()) for arm, s in by.items()}

    def __call__(self, spec: TrialSpec) -> int:
        launch_s, reading_s = self.costs()
        m, why = auto_readings(launch_s, reading_s, self.groups(), hi=self.hi, floor_var=self.floor_var)
        with self._lock:
            if m != self._last:
                self.log(f"readings per launch: {why}")
                self._last = m
            self.why = why
        return m


class LaunchCosts:
    """The attribution's launch-cost model (``strategies.arm_costs.ArmCosts``) fed from the
    campaign's ended sessions after every batch, its account logged whenever it changes. The
    strategy gets ``costs`` as its ``arm_cost`` and picks search arms by information per second."""

    def __init__(self, store, campaign: str, factors, log: Callable[[str], None]):
        from ..strategies.arm_costs import ArmCosts
        self.store, self.campaign, self.log = store, campaign, log
        self.costs = ArmCosts(factors)
        self.active_of: dict[str, frozenset] = {}     # arm spec -> the strategy's factor set
        self._seen: set[str] = set()
        self._said: tuple = ("few",)      # nothing said until the model has its launches

    def update(self) -> None:
        for r in self.store.sessions(self.campaign):
            if r.session in self._seen or r.status != "ok" or not r.finished or r.arm not in self.active_of:
                continue
            self._seen.add(r.session)
            self.costs.add(self.active_of[r.arm], r.finished - r.started)
        # a line when the account changes in kind (too few launches / alike / which factors
        # differ), not at every launch's new figures
        key = self.costs.account()
        if key != self._said:
            self._said = key
            self.log(self.costs.describe())
