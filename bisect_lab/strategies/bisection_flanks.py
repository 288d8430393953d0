"""The flank test of the noisy bisection (issue #23): once a step at ``c`` is located, is it the
whole change?

Under one step, every position before ``c`` reads like the good endpoint and every position from
``c`` on like the bad one. A second step on the good flank (``0 .. c-1``) makes the readings next to
``c`` differ from the good endpoint's; one on the bad flank (``c .. n-1``) makes those at ``c``
differ from the bad endpoint's. The test is a mixture sequential probability ratio: on each flank,
for every split between two measured positions (weighted by the commits it stands for), the
likelihood ratio of "the two groups differ by a step" against "one level", the levels integrated
out (Student-t densities of the contrast, the noise sd pooled within the two groups). The mixture
over both flanks, splits, step sizes and signs is a likelihood ratio of "a second step somewhere"
against "none" (the second step uniform over the commits), so it may be looked at after every
reading (a mixture ratio stays a martingale under the null; approximately, the sd being estimated).
The FLANK_NEAR commits either side of ``c`` weigh more than their share (a slide through ``c`` shows
there first): the mixture's weights sum to 1.5, so its expectation under one step is 1.5 and a
false "second step" at FLANK_REJECT stays under 1.5 / 1000.
While it is undecided the next reading goes where it tells most: the endpoint or the position next
to ``c``, whichever is the smaller group of the split that weighs most.

``flank_ratio`` is pure; ``FlankCheck`` is a mixin of ``bisection.BisectionStrategy`` (it reads and
sets that class's state), called by ``bisection_check.ModelCheck``.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["FlankCheck", "flank_ratio"]


# The flank test's alternative: a second step of FLANK_DELTA x min_effect (log units), either way,
# or a few times that (multiple, weight).
FLANK_DELTA = 1.5
FLANK_SIZES = ((1.0, 0.85), (2.0, 0.05), (4.0, 0.05), (8.0, 0.05))
# Stop: a second step when the mixture ratio reaches FLANK_REJECT (log), one step when it falls
# to FLANK_NULL. Truncated: after FLANK_MAX readings for the test (in the whole campaign: looks
# included), one step unless the ratio is
# above FLANK_MID + FLANK_RISE per reading beyond FLANK_MAX (a second step keeps it climbing; a
# ratio that only hovers, held up by a few readings the probes do not repeat, is not worth more),
# and a second step at FLANK_MAX_HIGH readings if it still is.
FLANK_REJECT = math.log(1000.0)
FLANK_NULL = math.log(0.55)
FLANK_MAX = 6
FLANK_MID = 0.5
FLANK_MAX_HIGH = 40
FLANK_RISE = 0.1
# A flank whose noise sd (at its best split) exceeds FLANK_SD_MAX x the alternative's step is not
# tested: one reading there carries under 0.06 nats about it (a regression that loses CUDA graphs,
# CV 0.6% -> 14%, cost every run the test's 6 readings before).
FLANK_SD_MAX = 3.0
# A second step within FLANK_NEAR commits of the step found, on either side, weighs
# FLANK_NEAR_SHARE on top of the uniform spread over all commits (weight 1). A slide through c
# shows as c's neighbours reading off their endpoint's level; spread uniformly over a thousand
# commits, the dozen next to c weighed too little to tell (a slide of 1% per commit over 10 was
# named as one commit in a third of the runs). Close to c, the step is at least 1/FLANK_NEAR_DIV
# of the step found: a slide's neighbour reads a share of its total, and a 25% step must not wait
# on a 3% alternative next to it (it cost the 25% step 2 trials a run).
FLANK_NEAR = 16
FLANK_NEAR_SHARE = 0.5
FLANK_NEAR_DIV = 3.0


def flank_ratio(pos: np.ndarray, u: np.ndarray, lo: int, hi: int, delta: float,
                sd_max: float = math.inf, window: tuple[int, int] | None = None
                ) -> tuple[float, int, int, int]:
    """log of the mixture likelihood ratio "a step of +-delta somewhere inside [lo, hi]" against
    "one level over [lo, hi]", from the readings ``u`` at positions ``pos`` inside it; the step
    falls uniformly on ``lo + 1 .. hi`` (or on the commits ``window`` = (a, b) of them). Each
    split's ratio is that of Student-t densities of its contrast (left mean - right mean), the
    noise sd pooled within its two groups; the step is +-delta times each multiple of
    FLANK_SIZES, with its weight. Also (k, n_left, n_right) of the split that weighs most in the
    mixture: a step between the k-th and the (k+1)-th measured position.
    Returns (0.0, -1, 0, 0) when fewer than two positions, or four readings, were read there, or
    when even the best split leaves a noise sd over ``sd_max`` (too noisy to tell delta cheaply)."""
    inside = (pos >= lo) & (pos <= hi)
    p, y = pos[inside], u[inside]
    xs, inv = np.unique(p, return_inverse=True)
    m = xs.size
    if m < 2 or y.size < 4:
        return 0.0, -1, 0, 0
    y = y - float(y.mean())                  # precision of the sums of squares
    cnt = np.bincount(inv, minlength=m).astype(float)
    s = np.bincount(inv, weights=y, minlength=m)
    cl, sl = np.cumsum(cnt)[:-1], np.cumsum(s)[:-1]
    cr, sr = cnt.sum() - cl, s.sum() - sl
    d = sl / cl - sr / cr                    # left mean - right mean, per split
    neff = 1.0 / (1.0 / cl + 1.0 / cr)
    df = float(y.size - 2)
    ss = np.maximum(float((y * y).sum()) - sl * sl / cl - sr * sr / cr, 0.0)
    sd = np.sqrt(ss / df)
    if float(sd.min()) > sd_max:
        return 0.0, -1, 0, 0
    se = np.maximum(sd / np.sqrt(neff), 1e-12)

    def lt(z):
        return -(df + 1) / 2 * np.log1p(z * z / df)

    # Weight of each split: the commits a step between xs[k] and xs[k + 1] could be. A step at
    # lo + 1 .. xs[0] or after xs[-1] splits none of these readings: ratio 1.
    if window is None:
        w = np.diff(xs).astype(float) / max(float(hi - lo), 1.0)
        w_none = (xs[0] - lo + hi - xs[-1]) / max(float(hi - lo), 1.0)
    else:                                    # only the commits a .. b of ``window`` can be the step
        a, b = window
        first, last = np.append(xs[:-1] + 1, [lo + 1, xs[-1] + 1]), np.append(xs[1:], [xs[0], hi])
        share = np.maximum(np.minimum(last, b) - np.maximum(first, a) + 1, 0) / float(b - a + 1)
        w, w_none = share[:-2], float(share[-2:].sum())
    # The step: +-delta, or (weights FLANK_SIZES) a few times larger: a point alternative alone
    # gains little from a step far larger than delta once the sd is estimated (Student tails).
    lr = np.full(d.shape, -np.inf)
    for mult, wt in FLANK_SIZES:
        dm = delta * mult
        lr = np.logaddexp(lr, math.log(wt / 2) + np.logaddexp(lt((d - dm) / se), lt((d + dm) / se)))
    lr = lr - lt(d / se)
    terms = np.log(np.maximum(w, 1e-300)) + lr
    k = int(np.argmax(terms))
    tot = float(np.logaddexp.reduce(terms))
    if w_none > 0:
        tot = float(np.logaddexp(tot, math.log(w_none)))
    return tot, k, int(cl[k]), int(cr[k])


class FlankCheck:
    """The flank test as a mixin of ``bisection.BisectionStrategy`` (reads and sets its state)."""

    def _flank_check(self) -> str:
        """'one' (no second step: the culprit stands), 'probe' (undecided: ``_probe`` is read
        next) or 'rejected' (a second step on one flank: phase 'models', or finished)."""
        c = int(np.argmax(self._post))
        pos, u = self._fit_data(after_confirm=False)   # every kept reading, the confirm step's too
        delta = FLANK_DELTA * self._d_min
        n = self.n
        below = pos[(pos < c)]
        near_g = int(below.max()) if below.size else 0
        flanks = []
        step = abs(self._params[0] - self._params[1]) if self._params is not None else 0.0
        d_near = max(delta, step / FLANK_NEAR_DIV)
        windows = {"good": (max(1, c - FLANK_NEAR), c - 1), "bad": (c + 1, min(n - 1, c + FLANK_NEAR))}
        for side, lo, hi, weight in (("good", 0, near_g, c - 1), ("bad", c, n - 1, n - 1 - c)):
            if weight < 1:
                continue
            L, k, nl, nr = flank_ratio(pos, u, lo, hi, delta, FLANK_SD_MAX * delta)
            if k < 0:
                continue       # nothing to split, or too noisy for a second step to be told cheaply
            term = math.log(weight / (n - 2)) + L
            Ln, kn, nln, nrn = flank_ratio(pos, u, lo, hi, d_near, FLANK_SD_MAX * d_near, windows[side])
            near = math.log(FLANK_NEAR_SHARE / 2) + Ln
            if near > term:
                k, nl, nr = kn, nln, nrn
            flanks.append((side, float(np.logaddexp(term, near)), k, nl, nr, lo, hi))
        if not flanks:
            return "one"
        total = float(np.logaddexp.reduce([f[1] for f in flanks]))
        self._check = {"p_one_step": 1.0, "model": "one", **(self._check or {}), "flank": total,
                       "flank_extra": self._flank_extra, "extra": self._extra}
        if total <= FLANK_NULL:
            return "one"
        side, _, k, nl, nr, lo, hi = max(flanks, key=lambda f: f[1])
        spent = self._flank_extra
        if total < FLANK_REJECT and (
                self._no_more or len(self._path) >= self.max_trials - 1
                or (spent >= FLANK_MAX and total < FLANK_MID + FLANK_RISE * (spent - FLANK_MAX))):
            return "one"
        # A ratio still over the rising bar after FLANK_MAX_HIGH readings (about 50 by then, which
        # one step reaches with probability under 2%, by Ville's inequality) is a second step
        # too: these runs had been answered with one culprit (5 of 200 two steps of 3% then 4%,
        # 2 of 200 slides; none of 400 one-step runs read that far).
        if total >= FLANK_REJECT or spent >= FLANK_MAX_HIGH:
            xs = np.unique(pos[(pos >= lo) & (pos <= hi)])
            self._flank = {"side": side, "c": c, "near": near_g, "lo": int(xs[k]), "hi": int(xs[k + 1])}
            return "rejected"
        # Read the smaller group of the split that weighs most: the endpoint or the position
        # next to the step (the two are on opposite sides of every split of the flank).
        # With several hosts, both in one batch (a round each would cost wall time).
        ends = (0, near_g) if side == "good" else (c, n - 1)
        probes = [ends[0] if nl <= nr else ends[1]]
        if self.parallel > 1:
            probes.append(ends[1] if probes[0] == ends[0] else ends[0])
        self._probe, self._probe_more = probes[0], probes[1:]
        self._flank_extra += len(probes)
        self._extra += len(probes)
        return "probe"
