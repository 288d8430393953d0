"""The staged strategy's last rules on its answer (a mixin of ``StagedAttribution``): no culprit whose
own measured effect is confidently below the minimum effect, and none named without a confirmation
step of its own whose own measured effect does not show at all.

A regression spread over many small factors (ten of 0.3%, 3% in all, at CV 1%) is confirmed as a
whole, and then one of its 0.3% parts can reach posterior 0.99: the hypotheses are one culprit or
one pair, so "one factor of 3%" and "ten factors of 0.3%" are not told apart by the posterior.
The factor's own effect, estimated over every measurement, does tell them apart: its interval
lies well inside the minimum effect. Such a factor is not named; when nothing is left, the answer
is inconclusive with the confirmed regression reported as unattributed (spread over factors too
small to name, or a pattern the search does not model), and the candidates listed.

A first stage that hands over (its soft limit, or its share of the budget) names the factors it
is sure of at posterior 0.99 without their confirmation step, because the residual check after it
("good plus those" against "bad") looks at what is left. That check cannot see a culprit that is
not one: when the regression itself was a heavy-tailed draw, "good plus f" reads like "bad" for
any no-op f. So such a factor is named only when its own effect, estimated over every measurement
but those discounted as stalls, excludes no change (an interval that holds 1.0 is no evidence at
all); otherwise it is a candidate,
as issue #23 asks of a stage that ran out of budget (a no-op named with its effect at -0.5%, 95% CI
-3.9% .. +3.0%, in 1 of 40 simulated null campaigns at Student-t CV 14%).

The rules read only the answer's effects: they measure nothing, so trial counts do not move.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace

from ..verdicts import AttributionVerdict


def term_factors(name: str) -> set[str]:
    """The factors of an effect term: ``a``, ``a*b`` (AND), ``a|b``, ``a|(b*c)`` (OR groups)."""
    return {p for p in re.split(r"[*|()]", name) if p}


def _reach(e) -> float:
    """How far from "no change" a term's interval reaches, on the log scale (its larger end)."""
    lo, hi = e.effect.ci_low, e.effect.ci_high
    if not (0 < lo <= hi < math.inf):
        return math.inf                     # no usable interval: never confidently small
    return max(abs(math.log(lo)), abs(math.log(hi)))


class SmallEffectRule:
    """Reads ``min_effect`` (and the answer's effects): see module docstring."""

    small_effect_rule = True    # False: the answer as before this rule (the benchmark's side by side)

    def _too_small(self, v: AttributionVerdict) -> dict[str, float]:
        """Each named culprit whose terms together reach less than ``min_effect`` (every end of every
        interval of a term that involves it, summed: conservative), with that reach as a change."""
        # robust=False is the strategy before robust noise handling, kept as it was for the side by side
        if not (self.small_effect_rule and self.robust and v.status == "culprits" and v.culprits and v.effects):
            return {}
        bound = -math.log1p(-self.min_effect)
        small = {}
        for c in v.culprits:
            terms = [e for e in v.effects if c in term_factors(e.name)]
            if not terms:
                continue                    # no estimate of its own: nothing to judge it by
            reach = sum(_reach(e) for e in terms)
            if reach < bound:
                small[c] = math.expm1(reach)
        return small

    def _unshown(self, v: AttributionVerdict) -> list[str]:
        """Named culprits without a confirmation step of their own (``_unconfirmed``) every one of
        whose effect terms has an interval that holds "no change"."""
        if not (self.small_effect_rule and self.robust and v.status == "culprits" and v.effects):
            return []
        out = []
        for c in sorted(set(v.culprits) & set(getattr(self, "_unconfirmed", ()))):
            terms = [e for e in v.effects if c in term_factors(e.name)]
            if terms and all(e.effect.ci_low <= 1.0 <= e.effect.ci_high for e in terms):
                out.append(c)
        return out

    def _without_small(self, v: AttributionVerdict) -> AttributionVerdict:
        """``v`` less the culprits whose own effect is confidently below ``min_effect``, and less
        those named without their own confirmation whose own effect does not show."""
        small = self._too_small(v)
        unshown = [c for c in self._unshown(v) if c not in small]
        if not small and not unshown:
            return v
        drop = set(small) | set(unshown)
        keep = [c for c in v.culprits if c not in drop]

        def own(names):
            return "; ".join(
                f"{c}: {e.effect.ratio - 1:+.1%} ({e.effect.ci_low - 1:+.1%} to {e.effect.ci_high - 1:+.1%})"
                for c in sorted(names) for e in v.effects if term_factors(e.name) == {c})
        lines = []
        if small:
            o = own(small)
            lines.append(f"{', '.join(sorted(small))}: not named: its own effect is confidently below the "
                         f"minimum effect of {self.min_effect:.0%} (at most {max(small.values()):.1%} by its "
                         f"interval" + (f"; {o}" if o else "") + ")")
        if unshown:
            o = own(unshown)
            lines.append(f"{', '.join(unshown)}: not named: no confirmation step of its own (its stage handed "
                         f"over unconfirmed) and its own effect's interval holds no change"
                         + (f" ({o})" if o else ""))
        extra = dict(v.extra)
        if small:
            extra["below_min_effect"] = sorted(small)
        if unshown:
            extra["unshown"] = list(unshown)
        if keep:
            kept = set(keep)
            for key in ("drop_alone", "partners"):
                if key in extra:
                    extra[key] = [d for d in extra[key] if d.get("factor") in kept]
            if "structure" in extra:
                st = dict(extra["structure"])
                st["groups"] = [g for g in st.get("groups", []) if set(g["factors"]) <= kept]
                st["text"] = "; ".join(g["text"] for g in st["groups"])
                extra["structure"] = st
            return replace(v, culprits=keep, warnings=tuple(v.warnings) + tuple(lines), extra=extra,
                           effects=tuple(e for e in v.effects if term_factors(e.name) <= kept),
                           interactions=tuple(i for i in v.interactions if set(i.factors) <= kept))
        for key in ("structure", "drop_alone", "partners", "model_check"):
            extra.pop(key, None)
        whole = ""
        if v.regression is not None:
            r = v.regression
            worse = (r.ratio < 1) == v.higher_is_better
            whole = f" ('bad' {abs(r.ratio - 1):.1%} {'worse' if worse else 'better'} than 'good')"
        top = ", ".join(f"{n} ({p:.0%})" for n, p in list(v.candidates)[:5])
        if small:
            why = (f"no factor's own effect reaches {self.min_effect:.0%}, so it looks spread over several "
                   "factors too small to name (or a pattern the search does not model)")
        else:
            why = ("the factor the search was sure of shows no effect of its own (the regression may be "
                   "noise the gate took for one, or a pattern the search does not model)")
        lines.append(f"the regression{whole} is confirmed but not attributed: {why}; where the probability "
                     f"sits: {top}")
        # drop what only a named answer carries: the "named by a stage" and model-check lines
        warnings = tuple(w for w in v.warnings
                         if not any(w.startswith(f"{c}: named by") or w.startswith(f"model check: dropping {c} ")
                                    for c in drop))
        return replace(v, status="inconclusive", culprits=[], effects=(), interactions=(), confirmation=(),
                       confidence=float("nan"), hypothesis="", warnings=warnings + tuple(lines), extra=extra)
