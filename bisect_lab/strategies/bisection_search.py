"""Where the noisy bisection measures next: the position whose next reading carries the most
information about the change position, batches completed by joint information, and the endpoint
re-measurements (drift guard).

A mixin of ``bisection.BisectionStrategy``: it reads and sets that class's state.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as _stats

from .bisection_noise import _noise_logpdf

# Re-measure an endpoint after this many trials without one. A drift guard, and the endpoint levels
# are what the posterior is least sure of: in simulation every 12 trials beat every 30 (and never)
# on accuracy, mean and p95 trials at once. Counted in trial durations: with ``parallel`` trials at
# once, every REMEASURE_EVERY x parallel trials. Drift goes with time; counted in trials, 4 hosts
# re-measured 4x as often per hour, and that endpoint slot often pushed the end game into one more
# round (simulated 1,000 commits on 4 nodes: 0.35x -> 0.34x of one node's wall time, 1.34x -> 1.27x
# its trials, benchmarks/simulate_fleet.py).
REMEASURE_EVERY = 12
# Several hosts: a batch grows by one position only while that adds at least this share of the
# information of the best single reading (the joint optimum of each size is compared).
PARALLEL_MIN_GAIN = 0.3
# Several hosts: once one position holds this posterior mass, it and its predecessor are read side by
# side until each has END_READS readings (what the final check needs to pass).
END_MASS = 0.25
END_READS = 2
# When the final check fails but no position carries this much expected information (nats) under
# the model (a huge step, very unequal noise), the fragile position is simply measured again.
RECHECK_MI = 1e-3


class NextPosition:
    """Expected information of a reading, and the choice of the next positions."""

    def _noise_densities(self) -> tuple[np.ndarray, np.ndarray, float]:
        a, b, sg, sb, _ = self._params  # type: ignore[misc]
        n_g, n_b = self._n_eff
        sg_e = sg * math.sqrt(1 + 1 / max(n_g, 1.0))
        sb_e = sb * math.sqrt(1 + 1 / max(n_b, 1.0))
        lo = min(a - 12 * sg_e, b - 12 * sb_e)
        hi = max(a + 12 * sg_e, b + 12 * sb_e)
        y = np.linspace(lo, hi, 256)
        dy = float(y[1] - y[0])
        fg = np.exp(_noise_logpdf(y, a, sg_e, self._eps))
        fb = np.exp(_noise_logpdf(y, b, sb_e, self._eps))
        return fg, fb, dy

    def _mi(self, q: np.ndarray) -> np.ndarray:
        """Mutual information (nats) between one measurement and its bad/good label, for each
        prior probability ``q`` of "bad", under the fitted noise model."""
        fg, fb, dy = self._noise_densities()
        q = np.asarray(q, dtype=float)[:, None]
        f = np.maximum(q * fb[None, :] + (1 - q) * fg[None, :], 1e-300)
        tb = fb * np.log(np.maximum(fb, 1e-300) / f)
        tg = fg * np.log(np.maximum(fg, 1e-300) / f)
        mi = (q * tb + (1 - q) * tg).sum(axis=1) * dy
        return np.maximum(mi, 0.0)

    def _channel_errors(self) -> tuple[float, float]:
        """(P(reads bad | good), P(reads good | bad)) for the likelihood-ratio threshold."""
        fg, fb, dy = self._noise_densities()
        bad_region = fb > fg
        eg = float(fg[bad_region].sum() * dy)
        eb = float(fb[~bad_region].sum() * dy)
        return min(max(eg, 1e-6), 0.5), min(max(eb, 1e-6), 0.5)

    def _ask_bisect(self, free: int) -> list[int]:
        post = self._post
        assert post is not None
        # F[x] = P(c <= x | a regression): the chance that position x reads bad. Conditioned on
        # a regression, because under "no regression" every position reads alike, so a test's
        # information is about where the step is; without this, the last position (F ~ 1 - P(no
        # regression) ~ 0.5) looked maximally informative and was measured hundreds of times.
        F = np.cumsum(post) / max(float(post.sum()), 1e-300)
        testable = np.ones(self.n, dtype=bool)
        for p in self._untestable:
            testable[p] = False
        testable[0] = testable[self.n - 1] = False  # endpoints carry no information about c
        new: list[int] = []
        t = len(self._path)
        ends_busy = any(p in (0, self.n - 1) for p in self._outstanding)
        if t - self._last_endpoint_t >= REMEASURE_EVERY * self.parallel and not ends_busy:
            pos = np.asarray(self._obs_pos, dtype=np.int64)
            ng, nb = int(np.sum(pos == 0)), int(np.sum(pos == self.n - 1))
            new.append(0 if ng <= nb else self.n - 1)
            # Count the re-measure as the latest endpoint trial so the next one waits again.
            self._last_endpoint_t = t
        # When the best candidate is an endpoint's neighbour (c = 1 or c = n-1), one side of the
        # split is that endpoint alone, so its level is the open question and only the endpoint
        # answers it: measuring the neighbour again cannot tell "a step right here" from "no
        # step at all" (a confirm step fooled by noise ends up exactly here).
        top = int(np.argmax(post))
        if not new and not ends_busy and top in (1, self.n - 1):
            pos = np.asarray(self._obs_pos, dtype=np.int64)
            end, nb = (0, 1) if top == 1 else (self.n - 1, self.n - 2)
            if np.sum(pos == end) <= np.sum(pos == nb) or nb in self._untestable:
                new.append(end)
        if len(new) >= free:
            return new
        if self.parallel > 1:
            busy = [p for p in self._outstanding + new if p not in (0, self.n - 1)]
            return new + self._parallel_batch(F, testable, busy, free - len(new))
        # Information is a unimodal function of q = P(bad) (peak near 0.5, shifted when the two
        # sides have different noise), so only the testable positions nearest 0.5 need scoring.
        mi = np.full(self.n, -1.0)
        idx = np.flatnonzero(testable)
        if idx.size:
            near = idx[np.argsort(np.abs(F[idx] - 0.5), kind="stable")[:16]]
            mi[near] = self._mi(F[near])
        if not new:
            best = int(np.argmax(mi))  # first maximum: deterministic tie-break
            if mi[best] < 0:
                # Nothing testable is left inside (0, n-1): re-measure an endpoint rather than stall.
                return new or [0]
            if self._recheck is not None and mi[best] < RECHECK_MI:
                # The final check wants a second reading that the model deems uninformative.
                best = self._recheck
            new.append(best)
        return new

    def _parallel_batch(self, F, testable, busy, slots) -> list[int]:
        """The batch for several hosts: the end game when one position is likely, otherwise the
        batch size and positions that maximise the joint information, cut where one more
        position adds too little (an idle host costs no trial; a near-useless reading does)."""
        if slots <= 0:
            return []
        post = self._post
        top = int(np.argmax(post))
        out: list[int] = []
        if post[top] >= END_MASS:
            out = self._end_game(top, busy, slots)
            if post[top] >= self.confidence or len(out) >= slots:
                # Only the final check is open: nothing else is worth a trial.
                return out or ([top] if not busy and testable[top] else [])
        eg, eb = self._channel_errors()
        cand = self._candidates(F, testable, busy + out, top)
        if not cand:
            return out or ([] if busy else [0])
        fixed = list(busy) + out
        base = _joint_mi(F, fixed, eg, eb) if fixed else 0.0
        batch: list[int] = []
        best = base
        single = None
        for size in range(1, slots - len(out) + 1):
            trial = _best_batch(F, fixed, batch, cand, eg, eb)
            j = _joint_mi(F, fixed + trial, eg, eb)
            if single is None:
                single = max(j - base, 1e-12)
            elif j - best < PARALLEL_MIN_GAIN * single:
                break
            batch, best = trial, j
        if not batch and not out and not busy:
            batch = [cand[0]]
        return out + batch

    def _end_game(self, top: int, busy: list[int], slots: int) -> list[int]:
        """A likely culprit ``top``: its readings and its predecessor's are what the final check
        leans on (each must survive losing any one reading), so both are read side by side, on
        different hosts, until each has END_READS readings (and the one the check found fragile, one more)."""
        pair = [p for p in (top, top - 1) if p not in self._untestable and 0 <= p < self.n]
        pos = np.asarray(self._obs_pos, dtype=np.int64)
        reads = {p: int(np.sum(pos == p)) + busy.count(p) for p in pair}
        want = {p: max(END_READS, reads[p] + (p == self._recheck)) for p in pair}
        out: list[int] = []
        while len(out) < slots:
            short = [p for p in pair if reads[p] < want[p]]
            if not short:
                break
            # ABBA over the hosts: the culprit and its predecessor alternate which host reads first
            p = min(short, key=lambda q: (reads[q] - want[q], (len(out) // 2 + pair.index(q)) % 2))
            out.append(p)
            reads[p] += 1
        return out

    def _candidates(self, F, testable, busy, top) -> list[int]:
        """Positions worth scoring: posterior quantiles, the likely culprit's neighbours, the busy ones."""
        levels = np.linspace(0.0, 1.0, 66)[1:-1]
        cand = set(int(x) for x in np.searchsorted(F, levels, side="left"))
        cand |= set(busy) | set(range(top - 2, top + 2))
        return sorted(p for p in cand if 0 < p < self.n - 1 and testable[p])


def _best_batch(F, fixed, prev, cand, eg, eb) -> list[int]:
    """A batch one larger than ``prev``: the greedy best addition, then coordinate ascent (each
    member moved to its best candidate while the joint information grows)."""
    gains = [(_joint_mi(F, fixed + prev + [p], eg, eb), -p) for p in cand]
    batch = list(prev) + [-max(gains)[1]]
    cur = _joint_mi(F, fixed + batch, eg, eb)
    for _ in range(2):
        moved = False
        for k in range(len(batch)):
            rest = batch[:k] + batch[k + 1:]
            j, negp = max((_joint_mi(F, fixed + rest + [p], eg, eb), -p) for p in cand)
            if j > cur + 1e-9:
                batch, cur, moved = rest[:k] + [-negp] + rest[k:], j, True
        if not moved:
            break
    return batch


def _joint_mi(F: np.ndarray, positions: list[int], eg: float, eb: float) -> float:
    """I(c; readings) for binary readings at ``positions`` (repeats allowed) on a binary channel.

    The c-space is cut by the distinct positions into intervals; within one interval every reading
    has a known label, so only interval masses matter. Readings at one position are summarised by
    their count of "bad" reads (binomial), which keeps the outcome space small.
    """
    xs, reps = np.unique(np.asarray(positions, dtype=np.int64), return_counts=True)
    m = xs.size
    # Interval j (0..m): c <= xs[0] for j=0 ... xs[j-1] < c <= xs[j] ... c > xs[-1] for j=m.
    Fx = F[xs]
    edges = np.concatenate([[0.0], Fx, [1.0]])
    mass = np.clip(np.diff(edges), 0.0, None)
    if mass.sum() <= 0:
        return 0.0
    mass = mass / mass.sum()
    # P(outcome | interval) as a product over positions; position l is good in interval j iff j > l.
    table = np.ones((m + 1, 1))
    for l, r in enumerate(reps):
        k = np.arange(r + 1)
        p_bad_if_good = _stats.binom.pmf(k, r, eg)
        p_bad_if_bad = _stats.binom.pmf(k, r, 1 - eb)
        rows = np.where((np.arange(m + 1) > l)[:, None], p_bad_if_good[None, :], p_bad_if_bad[None, :])
        table = (table[:, :, None] * rows[:, None, :]).reshape(m + 1, -1)
    py = mass @ table
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(table > 0, np.log(table / np.maximum(py[None, :], 1e-300)), 0.0)
    return float(np.maximum((mass[:, None] * table * ratio).sum(), 0.0))
