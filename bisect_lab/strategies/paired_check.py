"""The adjacent-pair check a named factor must pass when the readings show bursts of contention.

A burst of host contention (minutes long, every reading 20-35% slower, invisible to loadavg) spans
several consecutive trials, so it shifts *neighbouring* readings alike. The search compares arms
measured far apart in time, and a burst that happens to fall on the arms holding some factor makes
that factor look like a culprit (the CPU demo once named its no-op patch at posterior 0.993).
Two readings taken one right after the other share the burst, so their difference cancels it.

So, before the staged strategy names its culprits, :func:`burst_evidence` looks for the mark a
burst leaves: a reading far below the others of its cell (the arms holding the same named
culprits, which the answer says read alike). When there is one, every named factor is measured in
adjacent pairs, "bad" and "bad minus it" in random order (for an OR pair, whose members each suffice:
the stage's good arm and "good plus it"), and named only when a sequential probability-ratio test on
the pairs' differences says its effect is there. A no-op factor passes with probability at most
``1 / ACCEPT_ODDS`` over all the factors checked; a factor that does not pass is not named (the
answer says why; a member of an and/or pair that its own pairs confirm still is), and when none is
left the answer is ``inconclusive`` with the candidates saying where the probability sits.
Readings are never thrown away: the check adds readings, it does not discount the old ones.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from ..stats.robust import _median_var_factor
from .base import Observation

# A reading this many (robust) standard deviations worse than the median of the other readings of
# its cell is the mark of a burst. On Gaussian readings the largest such z of a campaign passes 5
# in about 2% of simulated campaigns (then the check only costs trials); a burst 20% slower at CV 5%
# reads about 4.5-7 (a demo-shaped run at 4.98 had named a no-op with 5).
BURST_Z = 4.5
# cells are judged from this many readings; a cell's own spread is trusted alone from OWN_N
# readings, below that never smaller than the pooled spread of all cells (eight agreeing readings
# can make a cell look tighter than it is)
MIN_CELL = 3
NEAR, NEAR_Z = 1, 3.0      # ... and a burst's mark has a neighbour (within NEAR trials) this far worse
OWN_N = 20
PAIRS_MIN = 2              # one pair can straddle a burst's edge
PAIRS_MAX = 16             # undecided after this many pairs: not confirmed
ACCEPT_ODDS = 50.0         # SPRT: a no-op passes with probability <= 1 / (50 x the factors checked)
REJECT_ODDS = 0.05 / 0.98  # ... and a real culprit of the assumed size fails with probability <= 5%
CLIP = 2.0                 # one pair's difference counts at most this many sd from the SPRT's midpoint


def _cell_residuals(observations: Iterable[Observation], named: frozenset[str], sign: float):
    """Per cell (arms grouped by the named factors they hold): each reading's distance below the
    median of the others of its cell, on logs, standardised to the reading's sd (worse = positive)."""
    cells: dict[frozenset, list[tuple[int, float]]] = {}
    for o in observations:
        if o.ok:
            cells.setdefault(o.active & named, []).append((o.index, math.log(o.value)))
    out = {}
    for cell, rows in cells.items():
        if len(rows) < MIN_CELL:
            continue
        y = np.array([v for _, v in rows])
        r = np.array([sign * (float(np.median(np.delete(y, i))) - y[i]) for i in range(y.size)])
        out[cell] = ([i for i, _ in rows], r / math.sqrt(1.0 + _median_var_factor(y.size - 1)))
    return out


def burst_evidence(observations, named, *, higher_is_better: bool = True):
    """(z, trial, noise): the largest robust z of a reading worse than its cell *with a neighbour
    that reads worse too* (within NEAR trials, z >= NEAR_Z), the trial it was taken in (None when
    there is none), and the pooled robust log-scale spread. A burst spans consecutive trials; a
    heavy-tail draw (the H200's eager path) stands alone, and the check it would start cannot
    confirm a 10% culprit at CV 14% in PAIRS_MAX pairs."""
    sign = 1.0 if higher_is_better else -1.0
    res = _cell_residuals(observations, frozenset(named), sign)
    if not res:
        return 0.0, None, 0.0
    pooled = 1.4826 * float(np.median(np.abs(np.concatenate([r for _, r in res.values()]))))
    z: dict[int, float] = {}
    for idx, r in res.values():
        own = 1.4826 * float(np.median(np.abs(r)))
        s = own if r.size >= OWN_N else max(own, pooled)
        if s > 0:
            z.update(zip(idx, (r / s).tolist()))
    best, at = 0.0, None
    for i, zi in z.items():
        near = max((z.get(j, 0.0) for j in range(i - NEAR, i + NEAR + 1) if j != i), default=0.0)
        if near >= NEAR_Z and zi > best:
            best, at = zi, i
    return best, at, pooled


class PairedCheck:
    """The pairs of every factor to check, and their verdicts, from the readings since ``start``.

    ``arms[f] = (better, worse)``: the arm without f's effect and the arm with it. ``effects[f]``:
    the log-scale size the answer gives f's effect (the SPRT's alternative, never below
    ``min_effect``). Pure: everything is recomputed from the observations, so a replay decides alike.
    """

    def __init__(self, arms: dict[str, tuple[frozenset, frozenset]], effects: dict[str, float], *,
                 noise: float, start: int, higher_is_better: bool = True, min_effect: float = 0.02,
                 seed: int = 0, trigger: tuple[float, int | None] = (0.0, None)):
        self.arms = dict(arms)
        me = -math.log1p(-min_effect)
        # the answer's own estimate may be inflated by the very burst (or by the search's selection):
        # the alternatives are min_effect, half of it and all of it; the futility bound uses the half
        est = {f: abs(effects.get(f, 2 * me)) for f in self.arms}
        self.half = {f: max(me, 0.5 * est[f]) for f in self.arms}
        self.delta = {f: sorted({me, self.half[f], max(me, est[f])}) for f in self.arms}
        self.noise = float(noise)
        self.start = int(start)
        self.sign = 1.0 if higher_is_better else -1.0
        self.seed = seed
        self.trigger = trigger

    def _pairs(self, observations) -> dict[str, list[float]]:
        """Adjacent readings of each factor's two arms (either order), as better-minus-worse logs."""
        out: dict[str, list[float]] = {f: [] for f in self.arms}
        obs = list(observations)[self.start:]
        k = 0
        while k + 1 < len(obs):
            a, b = obs[k], obs[k + 1]
            hit = None
            if a.ok and b.ok:
                for f, (better, worse) in self.arms.items():
                    if {a.active, b.active} == {better, worse}:
                        hit = f
                        break
            if hit is None:
                k += 1
                continue
            lb = math.log(a.value if a.active == self.arms[hit][0] else b.value)
            lw = math.log(b.value if a.active == self.arms[hit][0] else a.value)
            out[hit].append(self.sign * (lb - lw))
            k += 2
        return out

    def states(self, observations) -> dict[str, tuple[str, list[float]]]:
        """Per factor: "confirmed", "rejected" or "open", with its pairs' differences.

        The test is a mixture SPRT: the likelihood ratio of "the effect is min_effect / half / all of
        what the answer says" against "no effect", averaged over the three, with the
        pairs' noise known. Confirmed when it passes ACCEPT_ODDS times the number of factors
        checked (a no-op's chance <= 1/ACCEPT_ODDS over them all, however long it runs); rejected
        when half the effect (at least min_effect) is 1 / REJECT_ODDS times less likely than none.
        The noise: the campaign's (sqrt 2 x its spread) until four pairs, then the pairs' own robust
        spread (an edge pair, half in a burst, does not inflate it), never below half the campaign's.
        """
        out = {}
        for f, d in self._pairs(observations).items():
            s = math.sqrt(2.0) * self.noise
            if len(d) >= 4:
                s = max(0.5 * s, 1.4826 * float(np.median(np.abs(np.asarray(d) - np.median(d)))))
            s = max(s, 1e-6)
            def llr(dl):
                return float(np.sum(dl * (np.clip(d, dl / 2 - CLIP * s, dl / 2 + CLIP * s) - dl / 2))) / s ** 2

            mix = float(np.mean([math.exp(min(llr(dl), 50.0)) for dl in self.delta[f]]))
            if len(d) >= PAIRS_MIN and mix >= ACCEPT_ODDS * len(self.arms):   # Bonferroni: all checked
                out[f] = ("confirmed", d)
            elif len(d) >= PAIRS_MIN and llr(self.half[f]) <= math.log(REJECT_ODDS) or len(d) >= PAIRS_MAX:
                out[f] = ("rejected", d)
            else:
                out[f] = ("open", d)
        return out

    def next_arms(self, observations, left: int) -> list[frozenset]:
        """The next adjacent pair (the open factor with fewest pairs), in random order; [] when done.
        A factor whose arms keep failing is given up after 2 x PAIRS_MAX + 4 trials."""
        if left < 2:
            return []
        st = self.states(observations)
        since = list(observations)[self.start:]
        open_ = [f for f in self.arms if st[f][0] == "open"
                 and sum(1 for o in since if o.active in self.arms[f]) < 2 * PAIRS_MAX + 4]
        if not open_:
            return []
        f = min(open_, key=lambda g: (len(st[g][1]), list(self.arms).index(g)))
        rng = np.random.default_rng([int(self.seed) % (2 ** 32), len(observations), 71])
        pair = list(self.arms[f])
        return pair if rng.random() < 0.5 else pair[::-1]

    def unconfirmed(self, observations) -> dict[str, list[float]]:
        """The factors that did not pass (rejected, or still open when the check had to end)."""
        return {f: d for f, (s, d) in self.states(observations).items() if s != "confirmed"}
