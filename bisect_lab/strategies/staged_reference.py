"""The staged attribution's first line against bursts of host contention: the reference arm tells a
burst from a slow arm, as the reading comes in (a mixin of ``StagedAttribution``).

A burst makes every reading slow for a few minutes, whatever the arm. The adjacent-pair check
(``staged_bursts``) only vets the answer's culprits at the end; a burst early in a stage sends its
search the wrong way first, and the stage then ends ``inconclusive`` or spends the budget (issue
#23: a 5% culprit with bursts named in 85% of runs). Here: a reading far below both references
(the good arm, nothing applied, and the bad arm, everything) is held back, and the good arm is read
next. If it reads at its level, the slow arm is slow: its reading goes in and the search goes on
(one extra reading, and the arm is not held again). If the good arm is slow too, the host is: the
held reading and the slow reference readings are left out, the good arm is read until it is back
at its level, and the held arm is measured again. A good arm that stays slow for
``MAX_REF_READS`` readings is a machine that changed: the readings go in (the stages' drift and
machine-step models see them) and the guard stops.

One host only (with several, a burst is one host's, and host levels are fitted), robust mode only.
Pure: the decisions depend on the told readings alone, so a campaign resumes by replaying them.
"""
from __future__ import annotations

import math

import numpy as np

from .. import stats

# A reading this many noise sd below both references is suspect, and a reference reading this many
# below its own level is slow; never less than MIN_GAP (log units, ~10%): a burst is a large shift,
# and the campaign's noise is barely known early on.
HOLD_K = 5.0
REF_K = 4.0
MIN_GAP = 0.105
# ... and never less than this many times the campaign's noise as ``_noise`` reads it (from pairs
# of readings before any arm has three): loose, since two readings say little about a spread.
PAIR_K = 3.0
# References read before the guard holds anything (each side), and good-arm readings before it
# calls the reference slow.
MIN_REF = 1
MIN_REF_BURST = 2
# A burst takes this many slow good-arm readings in a row (a burst lasts minutes): one was, under
# Student-t(3) noise at CV 14%, a heavy-tail draw twice in 40 campaigns, and its "burst" moved
# their answers. One is taken in with the held reading, as a lone stall is.
MIN_SLOW_REFS = 2
# A good arm slow this many times in a row: a changed machine, not a burst.
MAX_REF_READS = 20


class ReferenceWatch:
    """Reads and sets ``StagedAttribution`` state; ``reference_guard = False`` is the strategy as it
    was before this guard (the benchmark's side by side)."""

    reference_guard = True

    def _ref_init(self) -> None:
        self._ref_open: dict | None = None       # {"held": [(seq, active, value, block)], "refs": n}
        self._ref_bursts: list[dict] = []        # {"trials": [1-based], "arm": held arm, "refs": n, "kept"}
        self._ref_cleared: set = set()           # arms once held whose slowness the reference cleared
        self._ref_off = False
        self._seq: list[int] = []                # per told reading: its 0-based number among all tells
        self._tells = 0

    def _ref_held(self) -> int:
        """Readings told but left out (closed bursts and an open one): trials all the same."""
        left = sum(len(b["trials"]) for b in self._ref_bursts if not b["kept"])
        return left + (len(self._ref_open["held"]) if self._ref_open else 0)

    def _ref_asks(self) -> list | None:
        """The reference arm while a burst is suspected, else None."""
        return [frozenset()] if self._ref_open is not None else None

    def _ref_filter(self, active: frozenset, value: float | None, block) -> list[tuple]:
        """The readings to take in now, in order, given the one just told: [] while it is held."""
        seq = self._tells
        self._tells += 1
        here = [(seq, active, value, block)]
        if (not self.reference_guard or self._ref_off or not self.robust or self.hosts > 1
                or value is None):
            return self._ref_flush(here) if self._ref_open else here
        levels = self._ref_levels()
        if levels is None:
            return here
        g, b, hold_gap, ref_gap = levels
        y = self._oriented(value)
        if self._ref_open is None:
            if y < min(g, b) - hold_gap and active not in self._ref_cleared:
                self._ref_open = {"held": here, "refs": 0}
                return []
            return here
        ref = active == frozenset()
        # A reference reading as far below both references as a held one is slow too, whatever its
        # own gap says: with one good reading before it (gap not yet set) a burst that began on the
        # good arm itself read as "the arm is slow", and the reference arm was cleared for good
        # (two culprits under bursts answered no-regression: the good arm's level came from
        # burst readings)
        slow = (y < g - ref_gap or y < min(g, b) - hold_gap) if ref else y < min(g, b) - hold_gap
        op = self._ref_open
        if slow:
            op["held"].extend(here)
            op["refs"] += ref
            if op["refs"] < MAX_REF_READS:
                return []
            self._ref_bursts.append(self._ref_closed(kept=True))
            self._ref_off = True
            return self._ref_flush([])
        if op["refs"] < MIN_SLOW_REFS:
            if op["held"][0][1]:
                self._ref_cleared.add(op["held"][0][1])  # slow arm, normal host: not held again
            # (the reference itself is never cleared: a slow good reading is the host's, or a stall)
            return self._ref_flush(here)
        self._ref_bursts.append(self._ref_closed(kept=False))
        self._ref_open = None
        return here

    def _ref_flush(self, here: list) -> list:
        out = (self._ref_open["held"] if self._ref_open else []) + here
        self._ref_open = None
        return out

    def _ref_closed(self, *, kept: bool) -> dict:
        op = self._ref_open
        return {"trials": [s + 1 for s, *_ in op["held"]], "arm": sorted(op["held"][0][1]),
                "refs": int(op["refs"]), "kept": kept}

    def _oriented(self, value: float) -> float:
        return math.log(value) if self.higher_is_better else -math.log(value)

    def _ref_levels(self) -> tuple[float, float, float, float] | None:
        """(good level, bad level, hold gap, reference gap) on the oriented log scale, from the
        readings taken in so far; None while a reference has fewer than MIN_REF readings."""
        bad_arm = frozenset(self.factors)
        g = [self._oriented(o.value) for o in self.observations if o.ok and o.active == frozenset()]
        b = [self._oriented(o.value) for o in self.observations if o.ok and o.active == bad_arm]
        if len(g) < MIN_REF or len(b) < MIN_REF:
            return None
        # A reading below both is judged by the spread of the lower reference too (from its second
        # reading on), a slow reference by its own: where the regression brings its own noise (the
        # H200 eager path: 14% against 0.6%) its heavy tail is not a burst (held, it cost the H200
        # cells a reference reading in most runs). Not the wider of the two: two readings of the
        # good arm 8% apart at CV 3% then hid a burst of 20% (and named a wrong factor).
        # The reference is called slow against the campaign's noise with its pair fallback
        # (``_noise``): a burst is declared on it, and at CV 15% two good readings 10% apart are
        # common (a Gaussian campaign had a "burst" left out and its answer changed). Holding costs
        # one reading, so the hold gap is the keener: the arms' noise only once one is read three
        # times.
        mg, mb = float(np.median(g)), float(np.median(b))
        low = max(self._arm_noise(), _spread(b if mb <= mg else g))
        campaign = self._noise()
        # the good arm's plain sd, not a robust one: a burst is declared on it, and at CV 15% the
        # median spreads of arms read three or four times came out at 5% (a "burst" was declared)
        ref = max(campaign, float(np.std(g, ddof=1)) if len(g) >= 2 else 0.0)
        # the campaign's noise with its pair fallback bounds the hold gap too, at PAIR_K: a CV-15%
        # campaign otherwise held a reading every few trials before any arm was read three times
        hold = max(HOLD_K * low, PAIR_K * campaign, MIN_GAP)
        # a burst is declared on the reference only once its level rests on two readings: one good
        # reading 15% high (CV 15%) made every later one read "slow" and a Gaussian campaign lose
        # readings to a burst that was not there
        return mg, mb, hold, (max(REF_K * ref, MIN_GAP) if len(g) >= MIN_REF_BURST else math.inf)

    def _arm_noise(self) -> float:
        """The campaign's noise as the guard reads it: the median robust spread of the arms read three
        times or more; 0 before any is (then MIN_GAP decides). Not the campaign's pair fallback
        (``_noise``): one pair of good-arm readings 8% apart at CV 3% put the gap at 29% and let a
        20% burst through."""
        sds = self._arm_spreads(self._arm_logs())     # a spread is the same either way up
        return float(np.median(sds)) if sds else 0.0

    def _ref_lines(self) -> list[str]:
        """One warning per burst the guard left out, and the changed machine if it stopped."""
        out = []
        for bu in self._ref_bursts:
            t = bu["trials"]
            arm = ", ".join(bu["arm"]) or "none"
            if bu["kept"]:
                out.append(f"the reference arm (nothing applied) stayed slow from trial {t[0]} for {bu['refs']} "
                           "readings: the machine changed rather than a burst; those readings are kept and the "
                           "burst guard is off")
            else:
                out.append(f"trials {t[0]}-{t[-1]}: {len(t)} reading(s) left out as a burst of host contention "
                           f"(an arm read far below both references and the reference arm, nothing applied, "
                           f"read slow {bu['refs']} time(s) right after it); the arm ({arm}) was measured again")
        return out


def _spread(v: list[float]) -> float:
    """A reference's own spread: robust from three readings, the plain sd of two, 0 of one."""
    if len(v) >= 3:
        return float(stats.robust_sd(v))
    return float(np.std(v, ddof=1)) if len(v) == 2 else 0.0
