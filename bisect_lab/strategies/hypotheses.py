"""Posterior over culprit hypotheses, and expected information of candidate arms.

Every hypothesis says, for any arm, where its metric sits on the log scale between the good level
(position 0) and the bad level (position 1):

* ``single f``: 1 when f is bad, else 0;
* ``and i,j``: 1 only when both are bad (an interaction: a patch that hurts only when an env var
  is set);
* ``or i,j``: 1 when either is bad (each alone causes the whole regression);
* ``add i,j,rho``: two additive culprits, i alone at ``rho``, j alone at ``1-rho``, both at 1. The
  grid of ``rho`` (0.35, 0.5, 0.65) is further restricted so that both culprits are at least
  ``min_effect`` strong: a factor worth less than the minimum effect of interest, or less than a
  third of the regression, is not named (it shows up in the decomposition as unexplained share);
  allowing it would make "one culprit" impossible to tell from "one culprit plus a negligible one"
  at any budget.

The good and bad levels and their noise are estimated from the reference arms (which are measured
first and re-measured during the campaign); the noise may differ between the two levels
(heteroscedastic: e.g. 0.6% CV with CUDA graphs, 14% without) and is interpolated on the log scale
in between. Each observation is scored with a Student-t likelihood (heavy tails: one wild value
must not decide a culprit), whose scale includes the uncertainty of the estimated level. The
posterior is recomputed from all observations after every trial.

The next arm is the candidate with the largest mutual information between its outcome and the
hypothesis; hypotheses are grouped by the position they predict for the candidate (at most a
handful of positions), so the information is that of a small Gaussian mixture, computed by
Gauss-Hermite quadrature.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln, logsumexp

SINGLE, AND, OR, ADD = 0, 1, 2, 3
FAMILY_NAMES = ("single", "and", "or", "add")
# prior mass per family: one culprit is the common case; two-factor patterns must earn their place
DEFAULT_FAMILY_PRIOR = (0.6, 0.15, 0.1, 0.15)
RHO_GRID = (0.35, 0.5, 0.65)
# The thorough mode's grid: also a culprit beside one four times stronger (a 20% and a 5% culprit
# read as "add i,j,0.8"). Not the default: telling "one culprit" from "one culprit plus a partner
# of a fifth" costs a lone 25% culprit about a trial more, beyond the issue's log2(N) + 4.
EXTENDED_RHO_GRID = (0.2, 0.35, 0.5, 0.65, 0.8)

_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(20)   # probabilists' Hermite: E over N(0,1)
_GH_W = _GH_W / _GH_W.sum()


@dataclass(frozen=True)
class Levels:
    """Good and bad levels (log scale) with noise and the uncertainty of each level's mean."""

    mu_good: float
    mu_bad: float
    sd_good: float
    sd_bad: float
    se_good: float
    se_bad: float
    dof: float

    def at(self, p):
        """Location and t-scale at position(s) p (0 = good, 1 = bad)."""
        p = np.asarray(p, dtype=float)
        mu = self.mu_good + p * (self.mu_bad - self.mu_good)
        sd = np.exp(np.log(self.sd_good) + p * (np.log(self.sd_bad) - np.log(self.sd_good)))
        se = np.exp(np.log(self.se_good) + p * (np.log(self.se_bad) - np.log(self.se_good)))
        return mu, np.sqrt(sd ** 2 + se ** 2)


class HypothesisSpace:
    """Single, and, or and additive-pair hypotheses over ``n`` factors (indices 0..n-1)."""

    def __init__(self, n: int, rhos=RHO_GRID, family_prior=DEFAULT_FAMILY_PRIOR, max_pair_factors: int = 60):
        self.n = n
        fam, ii, jj, rr = [SINGLE] * n, list(range(n)), [-1] * n, [1.0] * n
        if 2 <= n <= max_pair_factors:
            iu, ju = np.triu_indices(n, 1)
            m = len(iu)
            for f in (AND, OR):
                fam += [f] * m
                ii += list(iu)
                jj += list(ju)
                rr += [1.0] * m
            for rho in rhos:
                fam += [ADD] * m
                ii += list(iu)
                jj += list(ju)
                rr += [rho] * m
        self.family = np.asarray(fam, dtype=int)
        self.i = np.asarray(ii, dtype=int)
        self.j = np.asarray(jj, dtype=int)
        self.rho = np.asarray(rr, dtype=float)
        self.family_prior = np.asarray(family_prior, dtype=float)
        self.size = len(self.family)
        self.log_prior = self.prior(np.ones(self.size, dtype=bool))

    def prior(self, allowed: np.ndarray) -> np.ndarray:
        """Log prior: each family's mass shared equally by its allowed hypotheses."""
        counts = np.bincount(self.family[allowed], minlength=4).astype(float)
        fp = np.where(counts > 0, self.family_prior, 0.0)
        fp = fp / fp.sum()
        with np.errstate(divide="ignore"):
            lp = np.log(fp[self.family] / np.maximum(counts[self.family], 1))
        return np.where(allowed, lp, -np.inf)

    def culprits(self, h: int) -> tuple[int, ...]:
        return (int(self.i[h]),) if self.family[h] == SINGLE else (int(self.i[h]), int(self.j[h]))

    def label(self, h: int, names) -> str:
        return FAMILY_NAMES[self.family[h]] + " " + ",".join(names[k] for k in self.culprits(h))

    def positions(self, X: np.ndarray) -> np.ndarray:
        """Position (0 good .. 1 bad) of each arm (rows of bool X, K x n) under each hypothesis."""
        X = np.asarray(X, dtype=bool)
        xi = X[:, self.i]
        xj = np.where(self.j >= 0, X[:, np.maximum(self.j, 0)], False)
        fam = self.family[None, :]
        rho = self.rho[None, :]
        add = np.where(xi & xj, 1.0, np.where(xi, rho, np.where(xj, 1.0 - rho, 0.0)))
        two = np.where(fam == SINGLE, xi, np.where(fam == AND, xi & xj, xi | xj)).astype(float)
        return np.where(fam == ADD, add, two)

    def allowed(self, delta_log: float, min_effect_log: float) -> np.ndarray:
        """Mask of hypotheses whose culprits are each at least ``min_effect`` strong."""
        ok = np.ones(self.size, dtype=bool)
        if delta_log > 0:
            lo = min(0.5, min_effect_log / delta_log)
            add = self.family == ADD
            ok &= ~add | ((self.rho >= lo - 1e-9) & (1 - self.rho >= lo - 1e-9))
            # keep the even split when nothing else is allowed: a regression made of two small parts
            if not np.any(add & ok):
                ok |= add & np.isclose(self.rho, 0.5)
        return ok


def student_t_logpdf(y, loc, scale, dof):
    z = (y - loc) / scale
    return (gammaln((dof + 1) / 2) - gammaln(dof / 2) - 0.5 * np.log(dof * np.pi) - np.log(scale)
            - (dof + 1) / 2 * np.log1p(z * z / dof))


@dataclass
class Posterior:
    space: HypothesisSpace
    log_post: np.ndarray
    levels: Levels

    @property
    def weights(self) -> np.ndarray:
        return np.exp(self.log_post)

    def factor_marginals(self) -> np.ndarray:
        """P(factor is among the culprits), per factor."""
        w = self.weights
        m = np.bincount(self.space.i, w, minlength=self.space.n)
        jm = self.space.j >= 0
        m += np.bincount(self.space.j[jm], w[jm], minlength=self.space.n)
        return np.minimum(m, 1.0)

    def culprit_sets(self) -> dict[tuple[int, ...], float]:
        w = self.weights
        out: dict[tuple[int, ...], float] = {}
        for h in np.flatnonzero(w > 1e-7):
            c = self.space.culprits(int(h))
            out[c] = out.get(c, 0.0) + float(w[h])
        return out

    def best_set(self) -> tuple[tuple[int, ...], float]:
        """The most probable culprit set and its probability; ``((), 0.0)`` when none is left."""
        sets = self.culprit_sets()
        return max(sets.items(), key=lambda kv: kv[1]) if sets else ((), 0.0)

    def expected_information(self, X: np.ndarray, keep: float = 0.99999) -> np.ndarray:
        """Mutual information (nats) between the outcome of each candidate arm (rows of X) and the
        hypothesis, grouping hypotheses by the position they predict."""
        w = self.weights
        top = np.flatnonzero(w > (1 - keep) / max(1, w.size))
        wt = w[top] / w[top].sum()
        pos = self.space.positions(X)[:, top]                          # M x T
        grid = np.unique(np.round(pos, 6))
        idx = np.searchsorted(grid, np.round(pos, 6))
        M, G = X.shape[0], grid.size
        W = np.zeros((M, G))
        for g in range(G):
            W[:, g] = ((idx == g) * wt[None, :]).sum(1)
        mu, scale = self.levels.at(grid)
        dof = self.levels.dof
        sd = scale * (math.sqrt(dof / (dof - 2)) if dof > 2.5 else 2.0)
        # E_{y ~ component g}[log p_g(y) - log p_mix(y)], Gaussian components
        y = mu[:, None] + sd[:, None] * _GH_X[None, :]                         # G x Q
        z = (y[:, None, :] - mu[None, :, None]) / sd[None, :, None]              # G x G x Q
        logpdf = -0.5 * z ** 2 - np.log(sd)[None, :, None] - 0.5 * math.log(2 * math.pi)
        own = np.stack([logpdf[g, g] for g in range(G)])                         # G x Q
        with np.errstate(divide="ignore"):
            logW = np.log(W)                                                     # M x G
        log_mix = logsumexp(logpdf[None, :, :, :] + logW[:, None, :, None], axis=2)   # M x G x Q
        kl = ((own[None] - log_mix) * _GH_W).sum(-1)                             # M x G
        return np.maximum(np.where(W > 0, W * kl, 0.0).sum(1), 0.0)


def level_fits(pos: np.ndarray, w: np.ndarray, n: np.ndarray, s: np.ndarray):
    """Each hypothesis's good and bad levels by weighted least squares: arms' positions ``pos``
    (K x H), weights ``w`` (K x H), reading counts ``n`` and sums ``s`` (K x 1). Returns the
    normal equations ``a00, a01, a11, b0, b1``, their determinant and the levels ``mg, mb`` (H)."""
    a00 = (w * n * (1 - pos) ** 2).sum(0)
    a01 = (w * n * (1 - pos) * pos).sum(0)
    a11 = (w * n * pos ** 2).sum(0)
    b0 = (w * (1 - pos) * s).sum(0)
    b1 = (w * pos * s).sum(0)
    det = np.maximum(a00 * a11 - a01 ** 2, 1e-300)
    return a00, a01, a11, b0, b1, det, (a11 * b0 - a01 * b1) / det, (a00 * b1 - a01 * b0) / det


def posterior(space: HypothesisSpace, X: np.ndarray, y_by_arm: list[np.ndarray], *,
              var_ratio: float = 1.0, s0: float, nu0: float = 2.0,
              allowed: np.ndarray | None = None, positions: np.ndarray | None = None,
              outlier_prob: float = 0.05, outlier_scale: float = 4.0) -> Posterior:
    """Posterior given distinct arms X (K x n bool) and each arm's log values.

    Under hypothesis h an observation of arm k is ``mu_good + p_hk (mu_bad - mu_good) + noise``,
    with ``p_hk`` the position h predicts. The two levels are fitted *per hypothesis* by weighted
    least squares (flat prior), the noise variance is ``sigma^2 / w(p)`` with
    ``w(p) = var_ratio^-p`` (heteroscedastic levels, ratio bad/good from the references) and
    ``sigma^2`` integrated out against a scaled-inverse-chi-square prior (``nu0``, ``s0``). So
    every hypothesis has the same two free levels: no hypothesis can fit noise better by having
    more parameters, and unlucky reference values cannot create phantom intermediate levels.
    """
    pos = space.positions(X) if positions is None else positions               # K x H
    n = np.array([v.size for v in y_by_arm], float)[:, None]
    s = np.array([v.sum() for v in y_by_arm])[:, None]
    q = np.array([(v * v).sum() for v in y_by_arm])[:, None]
    lw = -pos * math.log(var_ratio)                                             # log weight
    w = np.exp(lw)
    a00, a01, a11, b0, b1, det, mg, mb = level_fits(pos, w, n, s)
    yy = (w * q).sum(0)
    rss = np.maximum(yy - mg * b0 - mb * b1, 0.0)
    ntot = float(n.sum())
    sig2 = (nu0 * s0 ** 2 + rss) / (nu0 + ntot - 2)
    if outlier_prob > 0:
        # contaminated normal per observation: a wild value costs a bounded amount, so one heavy
        # tail draw cannot decide between hypotheses
        k = np.concatenate([np.full(v.size, r) for r, v in enumerate(y_by_arm)])
        yo = np.concatenate(y_by_arm)[:, None]
        po = pos[k]
        var = sig2[None, :] / np.exp(lw[k])
        r2 = (yo - mg[None, :] - po * (mb - mg)[None, :]) ** 2
        c = 0.5 * math.log(2 * math.pi)
        l1 = math.log(1 - outlier_prob) - 0.5 * r2 / var - 0.5 * np.log(var) - c
        l2 = math.log(outlier_prob) - 0.5 * r2 / (outlier_scale ** 2 * var) - 0.5 * np.log(outlier_scale ** 2 * var) - c
        ll = np.logaddexp(l1, l2).sum(0) - 0.5 * np.log(det) + np.log(sig2)   # Laplace over the 2 levels: |A / sigma^2|^-1/2
    else:
        ll = (-0.5 * np.log(det) + 0.5 * (n * lw).sum(0)
              - 0.5 * (nu0 + ntot - 2) * np.log(nu0 * s0 ** 2 + rss))
    lp = (space.log_prior if allowed is None else space.prior(allowed)) + ll
    lp = lp - logsumexp(lp)
    wts = np.exp(lp)
    # levels for prediction: posterior-weighted fits
    mu_g = float(wts @ mg)
    mu_b = float(wts @ mb)
    sig2m = float(wts @ sig2)
    sg = math.sqrt(max(sig2m, 1e-12))
    sb = sg * math.sqrt(var_ratio)
    se_g = float(np.sqrt(wts @ (sig2 * a11 / det)))
    se_b = float(np.sqrt(wts @ (sig2 * a00 / det)))
    dof = float(min(30.0, nu0 + ntot - 2))
    levels = Levels(mu_g, mu_b, sg, sb, max(se_g, 1e-9), max(se_b, 1e-9), max(dof, 2.0))
    post = Posterior(space, lp, levels)
    post.fits = (mg, mb)
    return post
