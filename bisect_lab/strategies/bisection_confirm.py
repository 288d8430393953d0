"""The confirm step of the noisy bisection: measure both endpoints until they differ (go on
bisecting) or are equal within ``min_effect`` (``no-regression``).

A mixin of ``bisection.BisectionStrategy``: it reads and sets that class's state.
"""
from __future__ import annotations

import numpy as np
from scipy import stats as _stats

from ..stats import winsorize as _winsorize
from .bisection_noise import _drop_stalls, _welch

# Endpoint samples per side before the confirm test may decide; fewer gives a Welch df near 1.
MIN_ENDPOINT = 3
# Endpoint samples per side before the endpoints alone may answer no-regression.
NULL_MIN_ENDPOINT = 5


class ConfirmPhase:
    """Endpoint measurements, the endpoint test and the start of bisection."""

    def _endpoint_samples(self) -> tuple[np.ndarray, np.ndarray]:
        pos = np.asarray(self._obs_pos, dtype=np.int64)
        u = np.asarray(self._obs_u, dtype=float)
        return _drop_stalls(u[pos == 0]), _drop_stalls(u[pos == self.n - 1])

    def _ask_confirm(self, free: int) -> list[int]:
        pos = np.asarray(self._obs_pos, dtype=np.int64)
        counts = {0: int(np.sum(pos == 0)), self.n - 1: int(np.sum(pos == self.n - 1))}
        for p in self._outstanding:
            if p in counts:
                counts[p] += 1
        out: list[int] = []
        if self.hosts > 1 and free == self.hosts:
            # one per host: every host measures both endpoints, alternately (ABAB within a host)
            r = len(self._obs_pos) // self.hosts + int(np.random.default_rng([self.seed, 1]).integers(2))
            out = [0 if (h + r) % 2 == 0 else self.n - 1 for h in range(free)]
            return self._confirm_with_probes(out, counts)
        for _ in range(free):
            g, b = counts[0], counts[self.n - 1]
            if g != b:
                nxt = 0 if g < b else self.n - 1
            else:
                # Seeded random order within each good/bad pair: a drift over the campaign then
                # cannot line up with one side.
                rng = np.random.default_rng([self.seed, g])
                nxt = 0 if rng.random() < 0.5 else self.n - 1
            counts[nxt] += 1
            out.append(nxt)
        return out

    def _confirm_with_probes(self, out: list[int], counts: dict[int, int]) -> list[int]:
        """Several hosts: the batch that brings both endpoints to MIN_ENDPOINT readings need not
        be all endpoints. Its surplus slots (hosts that have read an endpoint already) go to the
        search's first split (the uniform prior's quantiles): the test can only pass on this
        batch, and if it does, those readings are the bisection's first round, one round early.
        Later confirm batches (the test undecided) stay all endpoints."""
        need = {p: MIN_ENDPOINT - counts[p] for p in counts}
        if min(need.values()) <= 0 or len(self._obs_pos) < self.hosts:
            return out
        keep: list[int] = []
        spare: list[int] = []
        for h, p in enumerate(out):
            if need[p] > 0:
                need[p] -= 1
                keep.append(p)
            else:
                keep.append(-1)
                spare.append(h)
        if max(need.values()) > 0:
            return out
        inner = [p for p in range(1, self.n - 1) if p not in self._untestable]
        m = len(spare)
        probes = [inner[min(len(inner) - 1, (j + 1) * len(inner) // (m + 1))] for j in range(m)] if inner else []
        for h, p in zip(spare, probes):
            keep[h] = p
        return [p if p >= 0 else out[h] for h, p in enumerate(keep)]

    def _endpoint_test(self) -> tuple[float, float, float] | None:
        """(d, lower, upper): regression size u_good - u_bad of the endpoints and its two-sided
        interval at ``confidence``; None while a side has fewer than MIN_ENDPOINT samples."""
        good, bad = self._endpoint_samples()
        if good.size < MIN_ENDPOINT or bad.size < MIN_ENDPOINT:
            return None
        d, se, df = _welch(good, bad)
        q = float(_stats.t.ppf(1 - (1 - self.confidence) / 2, df))
        return d, d - q * se, d + q * se

    def _endpoints_equal(self) -> bool:
        """The endpoints differ by less than min_effect, at ``confidence``. Needs NULL_MIN_ENDPOINT
        samples a side: a scale estimated from 3 samples is too often far too small."""
        good, bad = self._endpoint_samples()
        if min(good.size, bad.size) < NULL_MIN_ENDPOINT:
            return False
        test = self._endpoint_test()
        return test is not None and test[2] < self._d_min

    def _endpoints_differ(self) -> bool:
        """The endpoints differ by more than min_effect, at ``confidence`` (the interval's low end)."""
        test = self._endpoint_test()
        return test is not None and test[1] > self._d_min

    def _update_confirm(self) -> None:
        test = self._endpoint_test()
        if test is None:
            return
        d, lo, _ = test
        good, bad = self._endpoint_samples()
        _, se, df = _welch(good, bad)
        # One-sided at 1 - confidence: a lenient gate on purpose. Looking after every pair makes
        # any per-look test leaky (~20% false starts with no step in simulation), and the
        # posterior below carries an explicit "no change" hypothesis that catches false starts;
        # a strict gate would instead cost every real regression several trials.
        lo1 = d - float(_stats.t.ppf(self.confidence, df)) * se
        # (A sub-bisection is first told the readings already taken in its stretch: those are no
        # trials of its own confirm step.)
        cap = max(4 * MIN_ENDPOINT, self.max_trials // 3) + self._replayed
        if lo1 > 0 and d >= self._d_min / 2:
            self._start_bisect()
        elif self._endpoints_equal():
            self._finish("no-regression", reason="endpoints-equal")
        elif len(self._path) >= cap:
            # The endpoints alone cannot decide within a third of the budget: bisect if the
            # regression is at least significant, otherwise call it by the size of the estimate.
            if lo > 0:
                self._start_bisect()
            elif d < self._d_min / 2:
                self._finish("no-regression", reason="endpoints-equal")
            else:
                self._finish("inconclusive", reason="endpoints-undecided")

    def _start_bisect(self) -> None:
        self._phase = "bisect"
        self._confirm_obs = len(self._obs_u)
        good, bad = self._endpoint_samples()
        a, b = float(np.median(good)), float(np.median(bad))
        sg = max(float(np.std(_winsorize(good), ddof=1)), 1e-5)
        sb = max(float(np.std(_winsorize(bad), ddof=1)), 1e-5)
        self._params = (a, b, sg, sb, 0.0)
        self._update_bisect()
