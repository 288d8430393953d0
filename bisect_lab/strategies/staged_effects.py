"""The staged strategy's final effects (a mixin of ``StagedAttribution``): the joint re-fit of every
named culprit over all measurements, and the answer's structure (``structure.py``): additive, or
groups of factors that act only together (AND) or each do the whole damage (OR), chosen by the
measured arms; "bad minus X" predicted for each named X and checked against that arm's readings;
a factor the readings require beside a named one (a gate beside its gated patch) named with it.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .. import stats
from ..verdicts import AttributionVerdict, Interaction, RatioEstimate
from .decomposition import loglinear_effects, synergy
from . import structure as shapes


LACK_OF_FIT_P = 0.01      # an undecided search's structure must fit every measured arm at least this well


def _pct(ratio: float) -> str:
    return f"{ratio - 1:+.0%}"


class StructuredEffects:
    """Reads ``StagedAttribution`` state: ``observations``, ``stages``, ``_seq``, ``factors``,
    ``alpha``, ``min_effect``, ``higher_is_better``, ``_contrast``. ``structure = False``: the
    answer as it was before the structure was chosen (the benchmark's side by side)."""

    structure = True

    def _kept_obs(self) -> list:
        """The usable readings less those a stage discounted as stalls: its warning says they are
        left out of every decision, and the structure fit had still read them (one stall made its
        arm look noisy enough to name a false partner, stall5c seed 62)."""
        gone: set[int] = set()
        for _, stage in self.stages:
            gone |= {stage._trial_number(o) - 1 for o in stage._discounted}
        return [o for o in self.observations if o.ok and self._seq[o.index] not in gone]

    def _joint(self, culprits: list[str]):
        """Effects and interactions of every named culprit, re-fitted together on all measurements.

        Each stage saw only its own factors, so its interaction terms can be artefacts of what it
        did not model (stage 1 of the story may read "mla x OEA_ENABLE" into a pattern that is
        really "oea-topk x OEA_ENABLE"). Here: log value ~ main effects + every estimable pairwise
        interaction (HC3); interactions kept when significant after Holm's correction over the
        pairs, then re-fitted with the mains (dropping terms that lose significance). A kept pair
        whose members cause no material regression of their own (less than min_effect or a quarter
        of the joint term, or not significant) is reported as "and" (the regression appears only
        when both are bad)."""
        obs = self._kept_obs()
        k = len(culprits)
        if k < 2 or len(obs) < 3 * k + 4:
            return None
        y = np.log([o.value for o in obs])
        X = {c: np.array([1.0 if c in o.active else 0.0 for o in obs]) for c in culprits}

        def full_rank(cols):
            D = np.column_stack([np.ones(len(y))] + cols)
            return np.linalg.matrix_rank(D) == D.shape[1] and len(y) > D.shape[1] + 2

        mains = [X[c] for c in culprits]
        if not full_rank(mains):
            return None
        pairs = []
        for i in range(k):
            for j in range(i + 1, k):
                col = X[culprits[i]] * X[culprits[j]]
                if full_rank(mains + [X[a] * X[b] for a, b in pairs] + [col]):
                    pairs.append((culprits[i], culprits[j]))
        kinds = ["main"] * k + ["interaction"] * len(pairs)
        labels = list(culprits) + [f"{a}*{b}" for a, b in pairs]
        fit = loglinear_effects(y, mains + [X[a] * X[b] for a, b in pairs], labels, kinds, alpha=self.alpha)
        me = math.log1p(self.min_effect)
        keep = []
        if pairs:
            pv = [fit[k + n].effect.p_value for n in range(len(pairs))]
            pv = [p if math.isfinite(p) else 1.0 for p in pv]
            reject, _ = stats.adjust_pvalues(pv, method="holm", alpha=self.alpha)
            keep = [pr for pr, r in zip(pairs, reject) if r]
        whole = self._contrast(obs)
        while True:
            labels = list(culprits) + [f"{a}*{b}" for a, b in keep]
            effects = loglinear_effects(y, mains + [X[a] * X[b] for a, b in keep], labels,
                                        ["main"] * k + ["interaction"] * len(keep), alpha=self.alpha,
                                        shares_of="references", whole=whole)
            # re-fitted with the mains only, a term may lose its significance: drop the weakest;
            # and one smaller than min_effect is not worth reporting (a -1.7% "synergy" at p 0.007
            # on the toy story), as a culprit must be worth min_effect
            weak = [(e.effect.p_value, n) for n, e in enumerate(effects[k:])
                    if e.effect.ci_low <= 1 <= e.effect.ci_high or abs(math.log(e.effect.ratio)) < me]
            if not weak:
                break
            keep.pop(max(weak)[1])
        by_name = {e.name: e for e in effects}
        total = sum(math.log(e.effect.ratio) for e in effects)

        def own_regression(m: str, joint: float) -> bool:
            """Does factor m, alone, make things materially and significantly worse? Material: at
            least min_effect and at least a quarter of the joint term (a -2% main effect beside a
            -16% interaction, as on the CPU demo, still reads as "only when both")."""
            e = by_name[m].effect
            worse = -math.log(e.ratio) if self.higher_is_better else math.log(e.ratio)
            return worse >= max(me, 0.25 * joint) and not (e.ci_low <= 1 <= e.ci_high)

        interactions = []
        for a, b in keep:
            term = by_name[f"{a}*{b}"].effect
            worse = term.ratio < 1 if self.higher_is_better else term.ratio > 1
            joint = abs(math.log(term.ratio))
            if worse and not own_regression(a, joint) and not own_regression(b, joint):
                interactions.append(Interaction((a, b), "and", term,
                                                f"the regression appears only when {a} and {b} are both bad"))
            else:
                interactions.append(synergy((a, b), term, total))
        return tuple(effects), tuple(interactions), {frozenset(p) for p in pairs}


    # ------------------------------------------------------------------ structure
    def _with_structure(self, v: AttributionVerdict) -> AttributionVerdict:
        """``v`` with its effects in the structure the measured arms choose, its drop-alone
        predictions and model check in ``extra``, and any partner the readings require named."""
        if self.structure and v.status == "inconclusive":
            v = self._rescued(v) or v
        if not self.structure or v.status != "culprits" or not v.culprits:
            return v
        obs = self._kept_obs()
        actives = [o.active for o in obs]
        y = np.log([o.value for o in obs])
        culprits = sorted(v.culprits)
        culprits, chosen, additive, partners = self._with_partners(culprits, actives, y)
        if chosen is None:
            return v
        notes = []
        if partners:
            for f, c in sorted(partners.items()):
                notes.append(f"{f} named with {c}: the readings need both (the arms with {c} bad but {f} "
                             f"good do not read as {c} alone would make them)")
        effects, interactions = tuple(v.effects), tuple(v.interactions)
        if not shapes.is_additive(chosen.groups) or partners or not effects:    # (rescued: none yet)
            effects, interactions = self._group_effects(chosen, obs, y)
        bad = frozenset(self.factors)
        drop = shapes.drop_alone(chosen, culprits, bad, actives, y, alpha=self.alpha, min_effect=self.min_effect)
        groups = [self._group_row(g, chosen, obs, y) for g in chosen.groups]
        text = "; ".join(r["text"] for r in groups)
        for d in drop:
            if d["agrees"] is False:
                notes.append(f"model check: dropping {d['factor']} alone should give {d['predicted_change']:+.0%} "
                             f"from 'bad' by the answer's model ({text}), but 'bad minus {d['factor']}' measured "
                             f"{d['measured'] / math.exp(chosen.predict(bad)[0]) - 1:+.0%} ({d['n']} readings): "
                             "the answer does not fit that arm")
        kinds = {g["kind"] for g in groups} - {"main", "interaction", "together"}
        extra = dict(v.extra)
        extra["structure"] = {"kind": "additive" if not kinds else kinds.pop() if len(kinds) == 1 else "mixed",
                              "groups": groups, "text": text,
                              "bic": {"chosen": chosen.bic, "additive": additive.bic if additive else None}}
        extra["drop_alone"] = drop
        extra["partners"] = [{"factor": f, "with": c} for f, c in sorted(partners.items())]
        extra["model_check"] = [d["factor"] for d in drop if d["agrees"] is False]
        return replace(v, culprits=culprits, effects=tuple(effects), interactions=tuple(interactions),
                       warnings=tuple(dict.fromkeys(tuple(v.warnings) + tuple(notes))), extra=extra)

    def _with_partners(self, culprits, actives, y):
        """``(culprits, chosen, additive, partners)``: the structure over ``culprits`` and every
        factor its readings require beside them, added until none is (a 3-way AND named by one
        member needs two rounds)."""
        culprits = sorted(culprits)
        partners: dict[str, str] = {}
        chosen, additive = shapes.choose(culprits, actives, y, min_effect=self.min_effect)
        while chosen is not None and len(culprits) < shapes.MAX_FACTORS:
            more = shapes.required_partners(chosen, culprits, sorted(set(self.factors) - set(culprits)),
                                            actives, y, min_effect=self.min_effect)
            if not more:
                break
            partners.update(more)
            culprits = sorted(set(culprits) | set(more))
            chosen, additive = shapes.choose(culprits, actives, y, min_effect=self.min_effect)
        return culprits, chosen, additive, partners

    def _rescued(self, v: AttributionVerdict) -> AttributionVerdict | None:
        """An answer no one-stage hypothesis could hold (a 3-way AND ran to the budget with its
        members the leading candidates): named when, after a confirmed regression, a structure
        over the likely factors (probability >= 0.5) and any partner their readings require has
        every term material and significant, and fits every measured arm (lack of fit p > 0.01)."""
        if not self.robust or (v.extra or {}).get("gate") != "regression" or getattr(self, "_check", None):
            return None         # the burst guard's pairs, where they ran, have the last word
        top = sorted(f for f, p in v.candidates if p >= 0.5)
        if not 1 <= len(top) <= shapes.MAX_FACTORS:
            return None
        obs = self._kept_obs()
        actives = [o.active for o in obs]
        y = np.log([o.value for o in obs])
        top, chosen, _, _ = self._with_partners(top, actives, y)
        if (chosen is None or not shapes.material_groups(chosen, alpha=self.alpha, min_effect=self.min_effect)
                or shapes.lack_of_fit_p(chosen, actives, y) <= LACK_OF_FIT_P):
            return None
        text = "; ".join(self._group_text(g, math.exp(float(b)), obs, y, self._kind_in(g, chosen.groups))
                         for g, b in zip(chosen.groups, chosen.beta[1:]))
        note = (f"{', '.join(top)}: named by the structure fit after the search ended undecided (no one- or "
                f"two-factor hypothesis holds them): every measured arm fits '{text}'")
        warnings = tuple(w for w in v.warnings if not w.startswith("budget ran out before one explanation"))
        return replace(v, status="culprits", culprits=top, hypothesis="structure", warnings=warnings + (note,))

    def _group_effects(self, chosen, obs, y):
        """Effects of the chosen structure's groups (shares of the whole regression) and an
        interaction line for each group of several factors."""
        labels = [shapes.group_label(g) for g in chosen.groups]
        kinds = [{"main": "main", "and": "interaction", "or": "or"}[shapes.group_kind(g)] for g in chosen.groups]
        cols = [np.array([shapes.indicator(g, o.active) for o in obs]) for g in chosen.groups]
        effects = loglinear_effects(y, cols, labels, kinds, alpha=self.alpha, shares_of="references",
                                    whole=self._contrast(obs))
        interactions = []
        total = sum(math.log(e.effect.ratio) for e in effects if e.effect.ratio > 0)
        for g, e in zip(chosen.groups, effects):
            kind = self._kind_in(g, chosen.groups)
            names = shapes.group_factors(g)
            if kind == "interaction":
                interactions.append(synergy(names, e.effect, total))
            elif kind in ("and", "or"):       # "together": told in its OR group's line
                interactions.append(Interaction(names, kind, e.effect, self._group_text(g, e.effect.ratio, obs, y)))
        return effects, interactions

    def _together(self, g, obs, y) -> float | None:
        """"Good plus the group's factors" against "good", measured (geometric means), or None."""
        arm = frozenset(shapes.group_factors(g))
        a = [v for o, v in zip(obs, y) if o.active == arm]
        b = [v for o, v in zip(obs, y) if not o.active]
        return math.exp(float(np.mean(a)) - float(np.mean(b))) if a and b else None

    @staticmethod
    def _kind_in(g, groups) -> str:
        """A group's kind in its structure: an AND term beside its members' own main effects is an
        "interaction"; beside an OR group of the same factors, "together" (what all of them bad
        add to the OR's damage)."""
        kind = shapes.group_kind(g)
        if kind == "and" and shapes.is_additive(groups):
            return "interaction"
        if kind == "and" and any(shapes.group_kind(o) == "or" and shapes.group_factors(o) == shapes.group_factors(g)
                                 for o in groups):
            return "together"
        return kind

    def _group_text(self, g, ratio: float, obs, y, kind: str | None = None) -> str:
        kind = kind or shapes.group_kind(g)
        names = shapes.group_factors(g)
        if kind == "interaction":
            return f"{' x '.join(names)} beyond their own effects: {_pct(ratio)}"
        if kind == "together":
            return f"{' and '.join(names)} all bad add {_pct(ratio)} to that"
        if kind == "main":
            return f"{names[0]}: {_pct(ratio)}"
        if kind == "and":
            return f"only {' and '.join(names)} together do the damage ({_pct(ratio)}); alone none"
        either = ", ".join(c[0] if len(c) == 1 else f"{' and '.join(c)} together" for c in g)
        together = self._together(g, obs, y)
        return (f"either of {either} does the whole damage ({_pct(ratio)})"
                + (f"; together {_pct(together)}" if together is not None else ""))

    def _group_row(self, g, chosen, obs, y) -> dict:
        k = chosen.groups.index(g) + 1
        se = math.sqrt(max(float(chosen.cov[k, k]), 0.0))
        from scipy import stats as st
        q = float(st.t.ppf(1 - self.alpha / 2, max(1, chosen.dof)))
        b = float(chosen.beta[k])
        together = self._together(g, obs, y)
        kind = self._kind_in(g, chosen.groups)
        return {"factors": list(shapes.group_factors(g)), "kind": kind,
                "label": shapes.group_label(g),
                "clauses": [list(c) for c in g],
                "effect": RatioEstimate(math.exp(b), math.exp(b - q * se), math.exp(b + q * se)).to_dict(),
                "together": together, "text": self._group_text(g, math.exp(b), obs, y, kind)}
