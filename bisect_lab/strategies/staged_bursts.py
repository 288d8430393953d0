"""The staged strategy's guard against bursts of host contention (a mixin of ``StagedAttribution``).

Before the answer names its culprits: if the readings show the mark of a burst
(``paired_check.burst_evidence``), each named factor is measured in adjacent pairs and named only
when the pairs confirm it (``paired_check.PairedCheck``); see that module for why adjacent pairs.
With several hosts the pairs would run at once on different hosts, whose bursts are their own: the
guard is then off.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..verdicts import AttributionVerdict
from .paired_check import BURST_Z, PairedCheck, burst_evidence


class BurstGuard:
    """Reads and sets ``StagedAttribution`` state: ``_check`` (None: not decided yet, False: off)."""

    _check = None
    burst_guard = True     # False: the strategy as it was before this guard (the benchmark's side by side)

    def _stage_of(self, f: str) -> int:
        return next(k for k, v in enumerate(self.verdicts) if f in self._named(v, k))

    def _guarded_answer(self) -> list[frozenset[str]]:
        """The guard's next pair, or [] with ``_final`` set: the answer as it stands when the guard
        does not run (decided once, when the answer is first ready), else the answer less the factors
        the pairs did not confirm, once they are done."""
        if self._check is None:
            self._check = False
            v = self._combine()
            self._check = self._start_check(v)
            if not self._check:
                self._final = v
                return []
        more = self._check.next_arms(self.observations, self.max_trials - self.trials)
        if more:
            return more
        self._final = self._guarded(self._combine())
        return []

    def _start_check(self, v: AttributionVerdict) -> "PairedCheck | bool":
        """The adjacent-pair check of ``v``'s culprits when the readings show the mark of a burst;
        False when the guard does not run."""
        if not (self.burst_guard and self.robust and self.hosts == 1 and v.status == "culprits" and v.culprits):
            return False
        z, at, noise = burst_evidence(self.observations, v.culprits, higher_is_better=self.higher_is_better)
        if z < BURST_Z:
            return False
        bad = frozenset(self.factors)
        arms, effects = {}, {}
        for f in v.culprits:
            k = self._stage_of(f)
            base = self.stages[k][0]
            if self.verdicts[k].hypothesis == "or":    # either member suffices: add it to the good arm
                arms[f] = (base, base | {f})
            else:                                      # remove it from the bad arm
                arms[f] = (bad - {f}, bad)
            sizes = [abs(math.log(e.effect.ratio)) for e in v.effects
                     if f in e.name.split("*") and e.effect.ratio > 0]
            effects[f] = max(sizes) if sizes else 0.0
        # the spread of repeated arms is the truer noise when the answer's cells mix levels
        own = self._noise()
        return PairedCheck(arms, effects, noise=min(noise, own) if own > 0 else noise,
                           start=len(self.observations), higher_is_better=self.higher_is_better,
                           min_effect=self.min_effect, seed=self.seed, trigger=(z, at))

    def _guarded(self, v: AttributionVerdict) -> AttributionVerdict:
        """The answer less the factors the adjacent pairs did not confirm."""
        if not self._check:
            return v
        z, at = self._check.trigger
        lines = [f"trial {at} read far below the other readings of its kind (robust z {z:.1f}): host "
                 "contention in bursts suspected, so each named factor was measured again in adjacent "
                 "pairs (with and without it, one right after the other) before being named"]
        failed = self._check.unconfirmed(self.observations)
        # a member of a pattern that its pairs confirm stands on its own: "bad minus it" (an OR
        # member: "good plus it") was shown to differ, whatever its named partner did
        drop = set(failed)
        for f, d in failed.items():
            mean = sum(d) / len(d) if d else float("nan")
            lines.append(f"{f}: not named: the adjacent pairs did not confirm it ({len(d)} pair(s), "
                         f"mean difference {math.expm1(mean):+.1%})" if d else
                         f"{f}: not named: the budget ran out before its adjacent pairs")
        keep = [c for c in v.culprits if c not in drop]
        warn = tuple(v.warnings) + tuple(lines)
        extra = dict(v.extra, paired_check={f: ("confirmed" if f not in failed else "not confirmed")
                                            for f in self._check.arms})
        if not drop:
            return replace(v, warnings=warn, extra=extra)
        if not keep:
            top = ", ".join(f"{n} ({p:.0%})" for n, p in list(v.candidates)[:3])
            warn += (f"no factor is named; where the probability sits: {top}",)
            return replace(v, status="inconclusive", culprits=[], effects=(), interactions=(),
                           confirmation=(), warnings=warn, extra=extra)
        return replace(v, culprits=keep, warnings=warn, extra=extra,
                       effects=tuple(e for e in v.effects if set(e.name.split("*")) <= set(keep)),
                       interactions=tuple(i for i in v.interactions if set(i.factors) <= set(keep)))
