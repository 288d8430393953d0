"""The shape of an answer: which named factors act alone, which only together (AND), which each
do the whole damage (OR), chosen by the measured arms.

A named set of culprits can be explained by independent main effects (additive on the log scale),
or by groups: an AND group hurts only when all its members are bad (a patch that is gated by an
env var), an OR group hurts as soon as *any* member is bad (a forgotten sync and an env-gated check
that each send decoding off CUDA graphs: -82% alone, -83% together). Each group is a formula in
disjunctive form: a tuple of clauses, each clause a set of factors that must all be bad, the group
bad when some clause is. ``((a,), (b,))`` is "a or b", ``((a, b),)`` is "a and b",
``((a,), (b, c))`` is "a, or b and c together". An OR group may come with an AND group of the
same factors: what all of them bad together add (the H200 story: -82% either alone, -83% both).

Every structure over the named factors (a partition into groups, each of the shapes above) is
fitted by least squares to the log readings (one column per group), and the one with the lowest
BIC is kept; a structure with groups must beat the additive one by ``BIC_MARGIN`` and predict
some measured arm differently by half the minimum effect, so that a shape the arms cannot tell
apart from independent effects is never reported on the strength of parsimony alone. The
chosen fit then predicts "bad minus X" for every named X (``drop_alone``), with an interval, and
is checked against the readings of that arm when it was measured.

Pure: numbers in, values out.
"""
from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass

import numpy as np

BIC_MARGIN = 2.0          # a structure with groups needs at least "positive" evidence over additive
PARTNER_BIC = 10.0        # ... and a partner the answer did not name, "very strong" evidence
MAX_FACTORS = 4           # structures are enumerated for at most this many named factors

Group = tuple[tuple[str, ...], ...]          # clauses (AND inside), OR between them


def group_label(g: Group) -> str:
    """``a|b`` (OR), ``a*b`` (AND, as the interaction terms are named), ``a|(b*c)``."""
    if len(g) == 1:
        return "*".join(g[0])
    return "|".join(c[0] if len(c) == 1 else f"({'*'.join(c)})" for c in g)


def group_kind(g: Group) -> str:
    """"main" (one factor), "and" (one clause of several), "or" (several clauses)."""
    if len(g) > 1:
        return "or"
    return "main" if len(g[0]) == 1 else "and"


def group_factors(g: Group) -> tuple[str, ...]:
    return tuple(sorted({f for c in g for f in c}))


def indicator(g: Group, active) -> float:
    """1 when the group is bad on an arm whose bad factors are ``active``."""
    return 1.0 if any(all(f in active for f in c) for c in g) else 0.0


def _shapes(block: tuple[str, ...]) -> list[tuple[Group, ...]]:
    """The groups one block of a partition can form: AND, OR, OR with a term of its own for all
    members bad together (-82% either alone, -83% together), and for three: a, or b and c."""
    if len(block) == 1:
        return [((block,),)]
    either: Group = tuple((f,) for f in block)
    shapes: list[tuple[Group, ...]] = [((block,),), (either,), (either, (block,))]
    if len(block) == 3:
        for a in block:
            rest = tuple(f for f in block if f != a)
            shapes.append((((a,), rest),))
    return shapes


def _partitions(items: list[str]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [(first,)] + part
        for k in range(len(part)):
            yield part[:k] + [tuple(sorted((first,) + part[k]))] + part[k + 1:]


def structures(factors) -> list[tuple[Group, ...]]:
    """Every structure over ``factors`` (the all-singletons one, additive, first)."""
    factors = sorted(factors)
    out = []
    for part in _partitions(factors):
        for combo in itertools.product(*(_shapes(b) for b in part)):
            # a group's own terms together, its OR line before what all of it adds
            out.append(tuple(sorted((g for shape in combo for g in shape),
                                    key=lambda g: (group_factors(g), group_kind(g) != "or"))))
    out.sort(key=lambda s: (any(len(g) > 1 or len(g[0]) > 1 for g in s), [group_label(g) for g in s]))
    return out


def is_additive(s: tuple[Group, ...]) -> bool:
    """Every factor has a main effect of its own (pairwise interaction terms may come beside)."""
    mains = {g[0][0] for g in s if group_kind(g) == "main"}
    return all(f in mains for g in s for f in group_factors(g))


def additive_family(factors) -> list[tuple[Group, ...]]:
    """The additive structures: main effects alone, with one pairwise interaction term, with all
    (what the joint re-fit reports): a synergy beside an AND pair is not a structure of groups."""
    factors = sorted(factors)
    mains = tuple(((c,),) for c in factors)
    pairs = [((a, b),) for a, b in itertools.combinations(factors, 2)]
    out = [mains] + [mains + (p,) for p in pairs]
    if len(pairs) > 1:
        out.append(mains + tuple(pairs))
    return out


@dataclass(frozen=True)
class Fit:
    """A structure fitted to the log readings: coefficients (intercept first), their covariance,
    residual sd, BIC and the design over the readings."""

    groups: tuple[Group, ...]
    beta: np.ndarray
    cov: np.ndarray
    sd: float
    bic: float
    dof: int

    def row(self, active) -> np.ndarray:
        return np.array([1.0] + [indicator(g, active) for g in self.groups])

    def predict(self, active) -> tuple[float, float]:
        """Log level of an arm and its standard error."""
        x = self.row(active)
        return float(x @ self.beta), float(math.sqrt(max(float(x @ self.cov @ x), 0.0)))


def fit(groups: tuple[Group, ...], actives, y, weights=None) -> Fit | None:
    """Least squares of ``y`` (log readings) on one column per group; None when the arms cannot
    estimate every group (rank) or leave fewer than three residual degrees of freedom. With
    ``weights`` (one per reading, inverse variances): weighted least squares, its BIC comparable
    only between fits with the same weights."""
    y = np.asarray(y, dtype=float)
    D = np.array([[1.0] + [indicator(g, a) for g in groups] for a in actives])
    if weights is not None:
        sw = np.sqrt(np.asarray(weights, dtype=float))
        D, y = D * sw[:, None], y * sw
    n, p = D.shape
    if n < p + 3 or np.linalg.matrix_rank(D) < p:
        return None
    beta, *_ = np.linalg.lstsq(D, y, rcond=None)
    resid = y - D @ beta
    rss = float(resid @ resid)
    s2 = max(rss / (n - p), 1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inv = np.linalg.pinv(D.T @ D)
    cov = s2 * inv
    # HC3 where it is wider: an arm of its own noise (the H200's eager bad arm) must not be
    # predicted with the good arm's precision
    h = np.einsum("ij,jk,ik->i", D, inv, D)
    w = resid ** 2 / np.maximum(1 - h, 1e-6) ** 2
    hc3 = inv @ (D.T * w) @ D @ inv
    if np.all(np.isfinite(hc3)) and np.trace(hc3) > np.trace(cov):
        cov = hc3
    bic = n * math.log(max(rss, 1e-300) / n) + (p + 1) * math.log(n)
    return Fit(groups, beta, cov, math.sqrt(s2), bic, n - p)


def _distinct(a: Fit, b: Fit, arms, tol: float) -> bool:
    """Do two fits predict some measured arm differently by at least ``tol`` (log scale)?"""
    return any(abs(a.predict(arm)[0] - b.predict(arm)[0]) >= tol for arm in arms)


def _or_holds(f: Fit, min_effect: float) -> bool:
    """An OR group means each member alone does the (material) damage: its term at least the
    minimum effect, and what all members bad add beside it smaller than that term (-2% each and
    -16% together is an AND pair with small own effects, not "either does the whole damage")."""
    me = math.log1p(min_effect)
    for k, g in enumerate(f.groups):
        if group_kind(g) != "or":
            continue
        b = abs(float(f.beta[k + 1]))
        if b < me:
            return False
        for j, o in enumerate(f.groups):
            if group_kind(o) == "and" and group_factors(o) == group_factors(g) and abs(float(f.beta[j + 1])) >= b:
                return False
    return True


def _own_effects_immaterial(f: Fit, min_effect: float) -> bool:
    """Does an additive fit with interaction terms give every member of each interaction an own
    effect too small to matter (under the minimum effect or a quarter of the interaction, or not
    significant)? Then it is an AND pattern read with noise in its main terms (the joint re-fit's
    rule: -2% each beside -16% together reads as "only when both")."""
    from scipy import stats as st
    q = float(st.t.ppf(0.975, max(1, f.dof)))
    me = math.log1p(min_effect)
    col = {group_label(g): k + 1 for k, g in enumerate(f.groups)}
    inter = [(g, k + 1) for k, g in enumerate(f.groups) if group_kind(g) == "and"]
    if not inter:
        return False
    for g, k in inter:
        joint = abs(float(f.beta[k]))
        for m in g[0]:
            j = col[m]
            b, se = abs(float(f.beta[j])), math.sqrt(max(float(f.cov[j, j]), 0.0))
            if b >= max(me, 0.25 * joint) and b > q * se:
                return False
    return True


def choose(culprits, actives, y, *, min_effect: float = 0.02) -> tuple[Fit | None, Fit | None]:
    """``(chosen, additive)``: the lowest-BIC structure over ``culprits`` and the best additive fit
    (main effects, with pairwise interaction terms or without).

    A structure with groups is chosen only when it also beats main effects alone by ``BIC_MARGIN``
    and the two predict some measured arm apart by half the minimum effect: an OR pair is
    "a, b and their interaction" with the two effects equal, and is told by the fewer terms."""
    culprits = sorted(culprits)
    family = additive_family(culprits) if len(culprits) <= MAX_FACTORS else additive_family(culprits)[:1]
    fits = [f for f in (fit(s, actives, y) for s in family) if f is not None]
    if not fits:
        return None, None
    mains = fits[0] if fits[0].groups == family[0] else None
    additive = min(fits, key=lambda f: f.bic)
    if len(culprits) > MAX_FACTORS or mains is None:
        return additive, additive
    arms = set(map(frozenset, actives))
    tol = 0.5 * math.log1p(min_effect)
    grouped = []
    for s in structures(culprits):
        if is_additive(s):
            continue
        f = fit(s, actives, y)
        # against independent effects, more than parsimony: evidence, and an arm read apart
        if (f is not None and mains.bic - f.bic >= BIC_MARGIN and _distinct(f, mains, arms, tol)
                and _or_holds(f, min_effect)):
            grouped.append(f)
    if not grouped:
        return additive, additive
    best = min(grouped, key=lambda f: f.bic)
    # the groups unless each further term of the additive fit earns BIC_MARGIN: an OR pair and
    # "a, b and their interaction" fit an OR truth alike, and an AND pair "a, b and their
    # interaction" with own effects of +-3% (noise): the extra terms had won on noise. So does an
    # additive fit that predicts no measured arm apart from the groups by the minimum effect: its
    # further terms bought their BIC on noise (an OR pair read -50%/-51%/+99% from one reading of
    # each member alone: 7 of 200 toy runs before, 1 since)
    extra = len(additive.groups) - len(best.groups)
    if (best.bic < additive.bic or (extra > 0 and best.bic <= additive.bic + BIC_MARGIN * extra)
            or (extra > 0 and not _distinct(best, additive, arms, math.log1p(min_effect)))
            or _own_effects_immaterial(additive, min_effect)):
        return best, additive
    return additive, additive


def required_partners(chosen: Fit, culprits, others, actives, y, *, min_effect: float = 0.02) -> dict[str, str]:
    """Factors the answer did not name that its readings require beside a named one: for a named
    ``c`` and an unnamed ``f``, every clause with ``c`` made ``c and f``; ``{f: c}`` when that fits
    better by ``PARTNER_BIC`` and predicts some measured arm apart by the minimum effect (a gated
    patch named without its gate: the arms with the patch but not the gate read good). At most
    one, the best: the caller asks again with it added."""
    out: dict[str, str] = {}
    if len(culprits) >= MAX_FACTORS:
        return out
    arms = set(map(frozenset, actives))
    tol = math.log1p(min_effect)
    # at unequal noise each reading counts at its arm's own: under one pooled variance a few
    # right-tail readings of the eager path's arms had made some unnamed factor a "partner"
    w = arm_weights(chosen, actives, y, tol)
    ref = chosen if w is None else fit(chosen.groups, actives, y, w)
    if ref is None:
        return out
    best = None
    for c in sorted(culprits):
        for f in sorted(others):
            groups = tuple(tuple(tuple(sorted(cl + (f,))) if c in cl else cl for cl in g) for g in chosen.groups)
            alt = fit(groups, actives, y, w)
            if (alt is not None and ref.bic - alt.bic >= PARTNER_BIC and _distinct(alt, ref, arms, tol)
                    and (best is None or alt.bic < best[0])):
                best = (alt.bic, f, c)
    # one at a time (the best): a second must then improve on the structure with the first
    if best is not None:
        out[best[1]] = best[2]
    return out


# The readings at the good level and those away from it are weighed each at their own noise only
# when their within-arm scatters differ this plainly (F test, two-sided): otherwise one pooled
# variance, as before
LEVEL_NOISE_P = 0.01
# Prior degrees of freedom of an arm's level noise when its own scatter is shrunk toward it (on the
# log-variance scale)
ARM_PRIOR_DF = 2.0


def arm_weights(chosen: Fit, actives, y, tol: float) -> np.ndarray | None:
    """Inverse-variance weights per reading when the arms the answer ``chosen`` places at the good
    level (within half ``tol`` of its intercept) and the others scatter with plainly different
    within-arm variances (LEVEL_NOISE_P; the H200's eager path: 0.5% against 14% with a right
    tail); None otherwise, or with under two degrees of freedom on either side.

    Each arm's variance is its own scatter shrunk toward its side's pooled one (ARM_PRIOR_DF, on
    the log scale); an arm read once takes its side's. Its own scatter is what tells a gate's arms
    (read at the good level with the good level's 0.5% scatter) from a slow arm whose few readings
    came out of the right tail: weighed by the side the answer puts them on, the gate's readings
    counted at the slow side's noise and the gate was lost."""
    from scipy import stats as st
    y = np.asarray(y, dtype=float)
    by: dict[frozenset, list[int]] = {}
    for i, a in enumerate(actives):
        by.setdefault(frozenset(a), []).append(i)
    good_arm = {k: abs(chosen.predict(k)[0] - float(chosen.beta[0])) < tol / 2 for k in by}
    # each repeated arm's own scatter (degrees of freedom, variance), read once for both uses
    spread = {k: (len(idx) - 1, float(y[idx].var(ddof=1))) for k, idx in by.items() if len(idx) >= 2}
    ss = {True: 0.0, False: 0.0}
    df = {True: 0, False: 0}
    for k, (d, s2) in spread.items():
        ss[good_arm[k]] += d * s2
        df[good_arm[k]] += d
    if df[True] < 2 or df[False] < 2:
        return None
    vg, va = max(ss[True] / df[True], 1e-12), max(ss[False] / df[False], 1e-12)
    ratio = va / vg
    p = 2 * min(float(st.f.sf(ratio, df[False], df[True])), float(st.f.cdf(ratio, df[False], df[True])))
    if p >= LEVEL_NOISE_P:
        return None
    out = np.empty(len(y))
    for k, idx in by.items():
        vc = vg if good_arm[k] else va
        if k in spread:
            d, s2 = spread[k]
            vc = math.exp((d * math.log(max(s2, 1e-12)) + ARM_PRIOR_DF * math.log(vc)) / (d + ARM_PRIOR_DF))
        out[idx] = 1 / vc
    return out


def pure_error(actives, y, alpha: float = 0.05) -> float | None:
    """The pooled within-arm standard deviation, at its upper ``1 - alpha/2`` confidence bound (a
    few repeated arms under-read it: 1.7% for a true 3% on 25 readings); None with fewer than 3
    degrees of freedom."""
    from scipy import stats as st
    arms: dict[frozenset, list[float]] = {}
    for a, v in zip(actives, y):
        arms.setdefault(frozenset(a), []).append(float(v))
    ss = sum(float(((np.asarray(v) - np.mean(v)) ** 2).sum()) for v in arms.values())
    df = sum(len(v) - 1 for v in arms.values())
    return math.sqrt(ss / float(st.chi2.ppf(alpha / 2, df))) if df >= 3 and ss > 0 else None


def drop_alone(chosen: Fit, culprits, bad: frozenset, actives, y, *, alpha: float = 0.05,
               min_effect: float = 0.02) -> list[dict]:
    """For each named factor X: the metric the fit predicts for "bad minus X" (with its interval),
    the change from "bad" it implies, and, when that arm was measured, its measured mean and
    whether the two agree (within the combined interval at ``alpha`` over the number of named
    factors, at the readings' own noise; or closer than the minimum effect)."""
    from scipy import stats as st
    q = float(st.t.ppf(1 - alpha / 2, max(1, chosen.dof)))
    ybad, _ = chosen.predict(bad)
    y = np.asarray(y, dtype=float)
    pure = pure_error(actives, y, alpha)
    # one check per named factor: Bonferroni over them, so that a 2.3-sd reading among three arms
    # is not called a misfit
    qc = float(st.t.ppf(1 - alpha / (2 * max(1, len(culprits))), max(1, chosen.dof)))
    out = []
    for x in sorted(culprits):
        arm = bad - {x}
        mu, se = chosen.predict(arm)
        row = {"factor": x, "arm": sorted(arm), "predicted": math.exp(mu),
               "predicted_low": math.exp(mu - q * se), "predicted_high": math.exp(mu + q * se),
               "predicted_change": math.expm1(mu - ybad), "measured": None, "n": 0, "agrees": None}
        vals = np.array([v for a, v in zip(actives, y) if frozenset(a) == arm])
        if vals.size:
            m = float(vals.mean())
            # judged at the readings' own noise (within arms), not the fit's residual spread: a
            # model that misfits has a wide residual spread that would excuse its own misses
            scale = min(1.0, pure / chosen.sd) if pure is not None and chosen.sd > 0 else 1.0
            se_m = (pure if pure is not None else chosen.sd) / math.sqrt(vals.size)
            gap = abs(m - mu)
            row.update(measured=math.exp(m), n=int(vals.size),
                       agrees=bool(gap <= qc * math.hypot(se * scale, se_m) or gap < math.log1p(min_effect)))
        out.append(row)
    return out


def lack_of_fit_p(f: Fit, actives, y) -> float:
    """The F test of ``f`` against the arm means (pure error within arms); 1.0 when too few arms
    or repeats to judge."""
    from scipy import stats as st
    y = np.asarray(y, dtype=float)
    arms: dict[frozenset, list[int]] = {}
    for i, a in enumerate(actives):
        arms.setdefault(frozenset(a), []).append(i)
    n, k, p = len(y), len(arms), len(f.groups) + 1
    pure = sum(float(((y[ix] - y[ix].mean()) ** 2).sum()) for ix in map(np.array, arms.values()))
    resid = y - np.array([f.row(a) @ f.beta for a in actives])
    rss = float(resid @ resid)
    if k <= p or n <= k or pure <= 0:
        return 1.0
    F = ((rss - pure) / (k - p)) / (pure / (n - k))
    return float(st.f.sf(F, k - p, n - k))


def material_groups(f: Fit, *, alpha: float = 0.05, min_effect: float = 0.02) -> bool:
    """Is every group's term at least the minimum effect, its interval excluding no change?"""
    from scipy import stats as st
    q = float(st.t.ppf(1 - alpha / 2, max(1, f.dof)))
    me = math.log1p(min_effect)
    for k in range(1, len(f.groups) + 1):
        b, se = float(f.beta[k]), math.sqrt(max(float(f.cov[k, k]), 0.0))
        if abs(b) < me or abs(b) <= q * se:
            return False
    return True

