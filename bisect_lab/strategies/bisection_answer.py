"""Building the noisy bisection's verdict (``BisectVerdict``) from its state: the effect and its
interval, the flat runs of readings either side of a step, the most likely positions.

A mixin of ``bisection.BisectionStrategy``: it reads that class's state.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from scipy import stats as _stats

from ..verdicts import BisectVerdict
from .bisection_noise import _welch

# An undecided campaign lists the fewest positions holding TOP_MASS of the posterior (at most TOP_MAX).
TOP_MASS = 0.8
TOP_MAX = 8
# A second step is only a step when its local |t| exceeds this (flat-segment effects).
FLAT_T = 3.0


class VerdictBuilder:
    """The verdict, its effect estimates and its list of likely positions."""

    def _finish(self, status: str, *, reason: str) -> None:
        self._verdict = self._make_verdict(status, reason=reason)
        self._outstanding.clear()

    def _effect(self, split: int | None) -> tuple[float | None, tuple[float, float] | None]:
        """Ratio bad/good and its interval; with ``split``, from the flat runs of readings either
        side of it (``_flat_run``: a second change further out must not pull it), else the
        endpoints."""
        pos, u, _ = self._arrays()
        if split is None:
            return self._effect_of(u[pos == 0], u[pos == self.n - 1])
        keep = self._kept()
        lo = self._flat_run(pos, u, keep & (pos < split), -1)
        hi = self._flat_run(pos, u, keep & (pos >= split), +1)
        return self._effect_of(u[keep & (pos >= lo) & (pos < split)], u[keep & (pos >= split) & (pos <= hi)])

    def _flat_run(self, pos: np.ndarray, u: np.ndarray, side: np.ndarray, direction: int) -> int:
        """Farthest position (going ``direction`` away from the step) up to which the readings of
        ``side`` stay at one level: cut at the most significant further change (|t| > FLAT_T
        and at least half of min_effect), if any."""
        xs = np.unique(pos[side])
        end = 0 if direction < 0 else self.n - 1
        if xs.size < 2:
            return end
        if direction < 0:
            xs = xs[::-1]
        vals = [u[side & (pos == x)] for x in xs]
        # The side's overall spread: conservative (a real further change inflates it), and defined
        # when every position was read once.
        allv = np.concatenate(vals)
        if allv.size < 4:
            return end
        sd = max(float(np.std(allv, ddof=1)), 1e-6)
        best_t, cut = 0.0, None
        for k in range(xs.size - 1):
            near, far = np.concatenate(vals[:k + 1]), np.concatenate(vals[k + 1:])
            diff = float(near.mean() - far.mean())
            t = abs(diff) / (sd * math.sqrt(1 / near.size + 1 / far.size))
            if t > best_t and abs(diff) >= self._d_min / 2:
                best_t, cut = t, k
        return int(xs[cut]) if (cut is not None and best_t > FLAT_T) else end

    def _effect_of(self, good: np.ndarray, bad: np.ndarray) -> tuple[float | None, tuple[float, float] | None]:
        """Ratio bad/good of the metric from two sets of u readings, and its interval."""
        if good.size < 2 or bad.size < 2:
            return None, None
        d, se, df = _welch(good, bad)
        q = float(_stats.t.ppf(1 - (1 - self.confidence) / 2, df))
        # u = sign * log(value): log(bad/good) = -sign * d
        s = self._sign
        lo, hi = sorted((math.exp(-s * (d - q * se)), math.exp(-s * (d + q * se))))
        return math.exp(-s * d), (lo, hi)

    def _make_verdict(self, status: str, *, reason: str) -> BisectVerdict:
        index = mass = None
        rng = rmass = None
        if self._post is not None:
            lo, hi, rmass = self._hpd_range()
            rng = (lo, hi)
        steps: tuple = ()
        top: tuple = ()
        if status == "culprit" and self._answer.get("culprit") is not None:
            # named by a sub-bisection of the model check (the search's own step was none)
            index, mass, rng = self._answer["culprit"], self._answer.get("mass"), self._answer["range"]
            effect, ci = self._effect(index)
        elif status == "culprit":
            assert self._post is not None
            index = int(np.argmax(self._post))
            mass = float(self._post[index])
            effect, ci = self._effect(index)
        elif status in ("gradual", "several"):
            a = self._answer
            index, effect, ci, rng, rmass = a.get("index"), a["effect"], a["ci"], a["range"], None
            steps = a.get("steps", ())
        elif status == "no-regression":
            rng = rmass = None
            effect, ci = self._effect(None)
        else:
            effect, ci = self._effect(None)
            if self._post is not None:
                top = self._top_mass()
        discounted = tuple(sorted({self._obs_pathi[j] for j in np.flatnonzero(~self._kept())}
                                  | set(self._burst_held())))
        return BisectVerdict(
            status=status,
            index=index,
            mass=mass,
            trials=len(self._path),
            effect=effect,
            effect_ci=ci,
            range=rng,
            range_mass=rmass,
            confidence=self.confidence,
            reason=reason,
            path=tuple(self._path),
            n=self.n,
            steps=steps,
            top=top,
            discounted=discounted,
            bursts=tuple(dict(b, trials=list(b["trials"])) for b in self._bursts),
            check=dict(self._check) if self._check is not None else None,
        )

    def _top_mass(self) -> tuple[tuple[int, float], ...]:
        """The fewest positions holding TOP_MASS of the posterior, at most TOP_MAX of them."""
        post = self._post
        assert post is not None
        order = np.argsort(-post, kind="stable")[:TOP_MAX]
        out, acc = [], 0.0
        for i in order:
            if post[i] <= 0:
                break
            out.append((int(i), float(post[i])))
            acc += float(post[i])
            if acc >= TOP_MASS:
                break
        return tuple(out)


def _replace_trials(v: BisectVerdict, path: list) -> BisectVerdict:
    return replace(v, trials=len(path), path=tuple(path))
