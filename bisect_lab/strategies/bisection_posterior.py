"""The posterior of the noisy bisection: a distribution over the change position and over "no
regression of ``min_effect`` or more", recomputed from every reading, and the stop decisions it
drives (culprit, no-regression, untestable range).

A mixin of ``bisection.BisectionStrategy``: it reads and sets that class's state.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special as _special

from .bisection_check import CHECK_EVERY, CHECK_FROM
from .bisection_noise import (OUT_EPS, OUT_K, SKEW_MAX, SKEW_PRIOR_SD, SKEW_SURE, STALL_MADS, _core_share, _learned_eps,
                              _logsumexp_rows, _mad, _noise_logpdf, _normalized, _weight_of,
                              _shape_logpdf, _side_mixture_weight, _skewnormal_params)

# EM iterations per observation; warm-started (the last fit's outlier calls), so a few suffice. The
# first fit after the confirm step, when it starts with a stall among the endpoint readings, iterates
# until the weights settle.
EM_ITERS = 2
EM_ITERS_COLD = 6
# Inner readings the fit calls outliers but whose own spread is at most LEVEL_SDS body sd, that
# are LEVEL_MIN or more and most of their position's readings are a level, not stalls
# (``_levels_are_not_stalls``): stalls of 1.2x to 3x at CV 3% spread over ~5-7 body sd. With the
# outlier calls carried from fit to fit, a middle level of two steps otherwise read as stalls (a test
# of two steps went from 120/120 'several' to 36/120); at two readings, a pair of stalls at one position
# read as a step in 1 of 40 stall runs without one.
LEVEL_SDS = 3.0
LEVEL_MIN = 3
# ... unless they look like a burst of host contention (every reading slow for a few minutes,
# whatever its position): all within BURST_SPAN consecutive trials, with a reading of another
# position in that window also called an outlier although that position reads normally at other
# times. In the end game a burst hits the culprit and its predecessor alike, and the level rule
# then read it as a step (issue #23, bisection burst cells).
BURST_SPAN = 8
# The outlier calls (the weights) use the fixed OUT_EPS; the learned share (self._eps) only shapes
# the predictive noise (search, skew correction). Calls at the learned share fed back on it (more
# calls, a higher share, a lower threshold) and measured no better (cells 10/11/12/13, 40 seeds).
# Prior sd of the linear drift slope, in log units per trial: 1% per 100 trials is typical drift
# (clocks, temperature), so the ridge keeps a slope fitted on few endpoint points from running away.
DRIFT_PRIOR_SD = 1e-4
# Two-sided F-test p-value on the endpoint variances below which each side gets its own scale.
# Strict: skewed noise (the H200 eager tail) fakes variance differences between 4-sample groups
# often enough at 1%, and the separate-scale model is less efficient and has no "no regression"
# hypothesis. A variance ratio over 25 (5x the CV; losing CUDA graphs is 0.6% -> 14%) is no skew
# artefact: then p < 0.01 suffices.
SEPARATE_P = 1e-4
# Final check before naming a culprit: without any one reading of the named position or of the one
# before it (the readings that tell it from its neighbours), the posterior must still give it at
# least this mass. With skewed noise a single strong-looking reading is weaker than the model says:
# in simulation over half of the wrong answers came from runs stopping in under 25 trials, right only
# 55% of the time. 0.5 and 0.8 both pay; 0.8 buys ~1 point of accuracy for ~1 more trial on average.
LOO_MASS = 0.5
# Scale (log units) of the half-normal prior on the step beyond -min_effect, either way.
DELTA_SCALE = 0.1
# Pseudo-samples pulling each side's noise scale toward the pooled one.
SCALE_PRIOR_N = 8.0


class Posterior:
    """Fitting the readings: drift, levels, scales, skew, and the posterior over the change."""

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.asarray(self._obs_pos, dtype=np.int64)
        u = np.asarray(self._obs_u, dtype=float)
        t = np.asarray(self._obs_t, dtype=float)
        return pos, u, t

    def _drift_slope(self, pos: np.ndarray, u: np.ndarray, t: np.ndarray) -> float:
        """Linear drift per trial, from the endpoints only (their labels are known, so the slope
        cannot be confused with the change position), ridge-shrunk toward 0."""
        num = den = 0.0
        resid: list[np.ndarray] = []
        for p in (0, self.n - 1):
            m = pos == p
            if m.sum() < 4:
                return 0.0
            tt, uu = t[m] - t[m].mean(), u[m] - u[m].mean()
            num += float((tt * uu).sum())
            den += float((tt * tt).sum())
            resid.append(uu)
        var = float(np.var(np.concatenate(resid)))
        return num / (den + var / DRIFT_PRIOR_SD**2) if den > 0 else 0.0

    def _log_marginal(self, pos: np.ndarray, u: np.ndarray, omega: np.ndarray,
                      separate: bool) -> tuple[np.ndarray, np.ndarray]:
        """log P(data, regression >= min_effect | c) and log P(data, smaller or none | c), every c.

        Normal noise with unknown level (flat prior) and unknown scale (Jeffreys prior, integrated
        numerically on a log grid), shared by both sides; observation j has variance
        sigma^2 / omega_j (omega < 1 for samples the robust fit calls outliers). The step
        delta = bad - good (log units) has a half-normal prior of scale ``self._delta_scale`` on
        each side of -d_min: below it is a regression of interest, above it (including no change
        and improvements) is "no regression". That second hypothesis is what lets a bisection
        that the confirm step started on noise end in ``no-regression`` rather than name a culprit.
        Integrating the parameters out, rather than plugging in estimates from a handful of
        endpoint samples, keeps the posterior honest early on: plug-in estimates made "95%" mean
        ~75% in simulation.

        With ``separate`` (the endpoints clearly differ in variance) each side has its own scale and
        flat priors on both levels, and "no regression" is ruled out (-inf).

        Every c between two consecutive measured positions splits the data the same way, so the
        work is done once per such segment (a few dozen) and spread over its positions.
        """
        n = self.n
        xs, inv = np.unique(pos, return_inverse=True)
        W = np.cumsum(np.bincount(inv, weights=omega))
        U = np.cumsum(np.bincount(inv, weights=omega * u))
        Q = np.cumsum(np.bincount(inv, weights=omega * u * u))
        C = np.cumsum(np.bincount(inv)).astype(float)
        # Segment k: xs[k] < c <= xs[k+1]; good side = measured positions <= xs[k].
        Wg, Ug, Qg, Cg = W[:-1], U[:-1], Q[:-1], C[:-1]
        Wb, Ub, Qb, Cb = W[-1] - Wg, U[-1] - Ug, Q[-1] - Qg, C[-1] - Cg
        Sg = np.maximum(Qg - Ug * Ug / Wg, 0.0)
        Sb = np.maximum(Qb - Ub * Ub / Wb, 0.0)
        floor = 1e-10
        lengths = np.diff(xs)
        if separate:
            seg1 = (
                -0.5 * np.log(Wg) + _special.gammaln((Cg - 1) / 2) - (Cg - 1) / 2 * np.log(Sg + floor)
                - 0.5 * np.log(Wb) + _special.gammaln((Cb - 1) / 2) - (Cb - 1) / 2 * np.log(Sb + floor)
            )
            seg0 = np.full_like(seg1, -np.inf)
        else:
            N = C[-1]
            S = Sg + Sb + floor
            # Distance of the observed step from the -d_min boundary between the hypotheses.
            D = Ub / Wb - Ug / Wg + self._d_min
            h = 1 / Wg + 1 / Wb
            s2 = self._delta_scale**2
            lo = math.sqrt(float(S.min()) / max(N - 2, 1.0)) / 4
            hi = math.sqrt(float(S.max() + (D * D / h).max()) / max(N - 2, 1.0)) * 3
            sig = np.exp(np.linspace(math.log(lo), math.log(max(hi, lo * 1.01)), 32))
            v2 = sig * sig
            sh = v2[None, :] * h[:, None]
            v = sh + s2
            z = D[:, None] * np.sqrt(s2 / (v * sh))  # posterior mean / sd of the step, standardized
            common = (
                -(N - 1) * np.log(sig)[None, :]
                - S[:, None] / (2 * v2[None, :])
                + 0.5 * np.log(sh / v)
                - D[:, None] ** 2 / (2 * v)
            )
            seg1 = _logsumexp_rows(common + _special.log_ndtr(-z))
            seg0 = _logsumexp_rows(common + _special.log_ndtr(z))
            if self._skew != 0.0:
                c1, c0 = self._shape_correction(pos, u, xs, Ug / Wg, Ub / Wb)
                seg1, seg0 = seg1 + c1, seg0 + c0
        out1 = np.full(n, -np.inf)
        out0 = np.full(n, -np.inf)
        out1[1:] = np.repeat(seg1, lengths)
        out0[1:] = np.repeat(seg0, lengths)
        return out1, out0

    def _update_bisect(self) -> None:
        pos, u_raw, t = self._arrays()
        omega = self._warm_omega(pos, u_raw, t)
        body = omega >= 0.5
        beta = self._drift_slope(pos, u_raw, t)
        u = u_raw - beta * (t - t.mean())
        # Centre so that the sufficient statistics keep their precision.
        centre = float(np.median(u))
        u = u - centre
        self._frame = (beta, float(t.mean()), centre)
        good, bad = u[(pos == 0) & body], u[(pos == self.n - 1) & body]
        if good.size < 3 or bad.size < 3:
            good, bad = u[pos == 0], u[pos == self.n - 1]
        # One scale per side only when the endpoints clearly disagree on it (a regression that
        # loses CUDA graphs turns CV 0.6% into 14%); otherwise one shared scale is more efficient.
        # Robust spreads (MAD), of the readings the contamination calls body: one stall at an
        # endpoint must not pass for a change of noise level.
        f = float((_mad(good) / max(_mad(bad), 1e-150)) ** 2)
        cdf = float(_special.fdtr(good.size - 1, bad.size - 1, f))
        p_var = 2 * min(cdf, 1 - cdf)
        separate = bool(p_var < SEPARATE_P or (p_var < 0.01 and max(f, 1 / max(f, 1e-300)) > 25))
        self._skew = 0.0 if separate else self._learn_skew(pos, u, body)
        self._recheck = None
        log_prior_c = math.log(1 / (self.n - 1))
        iters = EM_ITERS_COLD if self._omega is None and not body.all() else EM_ITERS
        for it in range(iters):
            logml, logml0 = self._log_marginal(pos, u, omega, separate)
            post, p0 = _normalized(logml, logml0, log_prior_c)
            # Soft fit given the posterior: w = P(position is bad) = P(c <= position).
            w = np.cumsum(post)[pos]
            og, ob = (1 - w) * omega, w * omega
            a = float((og * u).sum() / og.sum())
            b = float((ob * u).sum() / max(ob.sum(), 1e-12))
            sg2 = float((og * (u - a) ** 2).sum() / max((1 - w).sum() - 1, 1.0))
            sb2 = float((ob * (u - b) ** 2).sum() / max(w.sum() - 1, 1.0))
            if not separate:
                sg2 = sb2 = float(
                    ((og * (u - a) ** 2).sum() + (ob * (u - b) ** 2).sum()) / max(len(u) - 2, 1)
                )
            sg, sb = math.sqrt(max(sg2, 1e-10)), math.sqrt(max(sb2, 1e-10))
            self._params = (a, b, sg, sb, beta)
            self._n_eff = (float((1 - w).sum()), float(w.sum()))
            if it == iters - 1:
                break
            # Robustness: a sample far from the side it probably belongs to counts less; the share
            # of such samples is learned from their responsibilities (stalls: a few percent).
            rg, rb = (u - a) / sg, (u - b) / sb
            cg, cb = _core_share(rg, OUT_EPS), _core_share(rb, OUT_EPS)
            out = (1 - w) * (1 - cg) + w * (1 - cb)
            # The share of stalls: slow-side outliers only (the fast tail is the body's business).
            self._eps = _learned_eps(np.where((1 - w) * rg + w * rb < 0, out, 0.0))
            omega = (1 - w) * _weight_of(cg) + w * _weight_of(cb)
            omega = self._levels_are_not_stalls(pos, u, t, omega, min(sg, sb))
        self._post = post
        self._p_null = p0
        self._omega = omega
        self._u_fit = u
        i = int(np.argmax(post))
        if post[i] >= self.confidence and self._robust_to_one_reading(i, pos, u, omega, separate):
            if not self._check_models or self._model_check(final=True) == "one":
                self._finish("culprit", reason="posterior")
            return
        if self._check_models and (self._flank_look or (len(self._path) >= CHECK_FROM
                                                      and len(self._path) - self._last_check_t >= CHECK_EVERY)):
            if self._model_check(final=False) != "one":
                return
        if p0 >= self.confidence:
            if not self._endpoints_differ():
                doubt = self._machine_doubt()
                if doubt is not None:
                    self._probe = doubt          # one endpoint hints at a slower machine: read the other
                    return
                self._finish("no-regression", reason="posterior-null")
                return
            # The endpoints themselves differ by more than min_effect: a "no change" posterior is
            # the one-step model failing (two steps: 2% of clean runs said no-regression), never
            # the answer. The model check says what the readings fit; else the search reads on.
            if self._check_models and self._model_check(final=True) != "one":
                return
        if self._endpoints_equal():
            self._finish("no-regression", reason="endpoints-equal")
            return
        lo, hi, mass = self._hpd_range()
        if mass >= self.confidence and hi > lo and all(
            p in self._untestable for p in range(lo, hi)
        ):
            self._finish("inconclusive", reason="untestable")

    def _warm_omega(self, pos: np.ndarray, u_raw: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``_warm_start``, with the burst guard's lone stalls starting as outliers."""
        return self._lone_weights(self._warm_start(pos, u_raw, t), t, 1 / OUT_K**2)

    def _warm_start(self, pos: np.ndarray, u_raw: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Robustness weights to start the EM from: the last fit's, and for the readings since,
        their weights under that fit (its levels, scales, outlier share and posterior, in its drift
        and centring frame). From all ones, a stall inflated the first iteration's scale so much
        (5% stalls: ~3x) that it and later ones looked like body and were never discounted (#23).
        The first fit after the confirm step starts from the confirm step's own rule: an endpoint
        reading STALL_MADS robust sd (pooled over both endpoints) from its side's median."""
        omega = np.ones(pos.size)
        if self._omega is None or self._params is None or self._post is None:
            ends = np.flatnonzero((pos == 0) | (pos == self.n - 1))
            e = np.zeros(pos.size)
            for p in (0, self.n - 1):
                m = pos == p
                if m.any():
                    e[m] = u_raw[m] - float(np.median(u_raw[m]))
            # Against the spread of the other endpoint readings (leave one out): a MAD of a
            # handful of readings is often near 0 and called ordinary ones stalls. Slow side only
            # (u is "higher is better"): a stall is slowness, and the fast tail of skewed noise
            # (the H200 eager data) is body, whose flagging changed clean 5%-step runs.
            if ends.size >= 4:
                tot = float((e[ends] ** 2).sum())
                for j in ends:
                    sd = math.sqrt(max(tot - e[j] ** 2, 0.0) / (ends.size - 1))
                    if sd > 0 and -e[j] > STALL_MADS * sd:
                        omega[j] = 1 / OUT_K**2
            return omega
        # Only the outlier calls on the slow side carry over (below both fitted levels: a stall
        # is slowness); everything else restarts at 1 as each fit always did. The fast tail of
        # skewed noise (H200 eager) is body: carried, its calls changed clean 5%-step runs.
        a, b, sg, sb, _ = self._params
        beta, t_mean, centre = self._frame
        slow = u_raw - beta * (t - t_mean) - centre < min(a, b)
        m = min(pos.size, self._omega.size)
        omega[:m] = np.where((self._omega[:m] < 0.5) & slow[:m], self._omega[:m], 1.0)
        if m < pos.size:
            x = u_raw[m:] - beta * (t[m:] - t_mean) - centre
            w = (np.cumsum(self._post) / max(float(self._post.sum()), 1e-300))[pos[m:]]
            new = _side_mixture_weight(x, w, a, sg, b, sb, OUT_EPS)
            omega[m:] = np.where((new < 0.5) & slow[m:], new, 1.0)
        return omega

    def _levels_are_not_stalls(self, pos: np.ndarray, u: np.ndarray, t: np.ndarray, omega: np.ndarray,
                               sd: float) -> np.ndarray:
        """Readings of one inner position that the one-step fit calls outliers but that agree with
        each other (spread within LEVEL_SDS sd) and are most of that position's readings are a
        level of their own (a middle step, a slide), not stalls: they stay in, at full weight, so
        the model check sees the structure. Stalls strike readings at random: three of one position
        that agree and outnumber its other readings are rare. Endpoints are left out:
        their side is known, so nothing there is structure."""
        out = omega < 0.5
        inner = out & (pos != 0) & (pos != self.n - 1)
        if not inner.any():
            return omega
        omega = omega.copy()
        for p in np.unique(pos[inner]):
            m = pos == p
            k = out & m
            nk = int(k.sum())
            if nk >= LEVEL_MIN and 2 * nk > int(m.sum()) and float(np.std(u[k])) <= LEVEL_SDS * sd:
                if not self._a_burst(pos, t, out, k):
                    omega[k] = 1.0
        return omega

    def _a_burst(self, pos: np.ndarray, t: np.ndarray, out: np.ndarray, k: np.ndarray) -> bool:
        """Whether the outlier readings ``k`` of one position look like a burst (BURST_SPAN)."""
        lo, hi = float(t[k].min()), float(t[k].max())
        if hi - lo >= BURST_SPAN:
            return False
        p = int(pos[k][0])
        near = out & (pos != p) & (t >= lo - 2) & (t <= hi + 2)
        return any(bool((~out & (pos == q)).any()) for q in np.unique(pos[near]))

    def _learn_skew(self, pos: np.ndarray, u: np.ndarray, body: np.ndarray) -> float:
        """Skewness of the noise from the residuals of the observations whose side the current
        posterior is sure of (endpoints always; inner positions at 1 - SKEW_SURE), each against its
        side's mean, clipped at 4 sd (gross outliers are the contamination's business) and shrunk
        toward 0 as a normal estimate of sampling variance 6/N under a N(0, SKEW_PRIOR_SD) prior.
        Uncertain positions are left out: a point put on the wrong side is a step away from its
        level, which would read as skew."""
        if self._post is None or self._post.sum() <= 0:
            return 0.0
        w = (np.cumsum(self._post) / float(self._post.sum()))[pos]
        # Only readings the contamination model calls body: stalls are its business, and left in
        # they pushed the skew to its cap (a long slow tail) and mis-shaped the body (#23).
        g_side, b_side = (w <= 1 - SKEW_SURE) & body, (w >= SKEW_SURE) & body
        ug, ub = u[g_side], u[b_side]
        if ug.size < 3 or ub.size < 3:
            return 0.0
        e = np.concatenate([ug - ug.mean(), ub - ub.mean()])
        sd = math.sqrt(float((e * e).sum()) / (e.size - 2))
        if sd <= 0:
            return 0.0
        r = np.clip(e / sd, -4.0, 4.0)
        r = r - r.mean()
        v = float((r * r).mean())
        g = float((r**3).mean()) / v**1.5 if v > 0 else 0.0
        g *= SKEW_PRIOR_SD**2 / (SKEW_PRIOR_SD**2 + 6.0 / e.size)
        return min(max(g, -SKEW_MAX), SKEW_MAX)

    def _robust_to_one_reading(self, i: int, pos: np.ndarray, u: np.ndarray, omega: np.ndarray,
                               separate: bool) -> bool:
        """Final check before naming ``i``: dropping any one reading of ``i`` or ``i - 1`` (the
        readings that tell ``i`` from its neighbours) still leaves it LOO_MASS of the posterior."""
        worst, worst_pos = 1.0, None
        for j in np.flatnonzero((pos == i) | (pos == i - 1)):
            keep = np.ones(len(pos), dtype=bool)
            keep[j] = False
            post, _ = _normalized(*self._log_marginal(pos[keep], u[keep], omega[keep], separate))
            mass = float(post[i])
            if mass < worst:
                worst, worst_pos = mass, int(pos[j])
        if worst < LOO_MASS:
            self._recheck = worst_pos
            return False
        return True

    def _shape_correction(self, pos: np.ndarray, u: np.ndarray, xs: np.ndarray, mg: np.ndarray,
                          mb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per segment, log(skew-normal body) - log(normal body) summed over the observations,
        with the levels of that split plugged in (for "no regression" the step is held at the
        boundary -d_min when the split's own step is larger) and the fitted scale."""
        sn = _skewnormal_params(self._skew)
        sig = self._params[2] if self._params is not None else 1.0  # type: ignore[index]
        good = pos[None, :] <= xs[:-1, None]  # segments x observations
        out = []
        for step in (mb - mg, np.maximum(mb - mg, -self._d_min)):
            lev = np.where(good, mg[:, None], (mg + step)[:, None])
            r = (u[None, :] - lev) / sig
            out.append((_shape_logpdf(r, sn, self._eps) - _noise_logpdf(r, 0.0, 1.0, self._eps)).sum(axis=1))
        return out[0], out[1]

    def _hpd_range(self) -> tuple[int, int, float]:
        """Smallest contiguous [lo, hi] whose posterior mass >= confidence (first one on ties)."""
        post = self._post
        assert post is not None
        c = np.concatenate([[0.0], np.cumsum(post)])  # c[k] = mass of positions < k
        best = (1, self.n - 1, float(c[-1] - c[1]))
        # For each lo, the first hi with c[hi+1] - c[lo] >= confidence (c is non-decreasing).
        los = np.arange(1, self.n)
        his = np.searchsorted(c, c[los] + self.confidence - 1e-12, side="left") - 1
        ok = his <= self.n - 1
        if ok.any():
            widths = np.where(ok, his - los, self.n + 1)
            k = int(np.argmin(widths))
            lo, hi = int(los[k]), int(his[k])
            best = (lo, hi, float(c[hi + 1] - c[lo]))
        return best
