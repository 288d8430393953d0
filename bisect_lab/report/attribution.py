"""The report of an ``attribute`` campaign: the culprits, each factor's effect, how sure."""
from __future__ import annotations

import math

from ..model import TrialResult
from ..results import AttributionResult, result_from_dict
from ..store import Campaign, Store
from ..strategies.staged_small import term_factors
from .document import Figure, Report, Section, Table, code, num, pct
from .sections import (arms_table, evidence_section, go_on, higher_is_better_of, metric_of, ok_values,
                       setup_section, trust_sections)

__all__ = ["attribution_report"]


def _answer(c: Campaign, res: AttributionResult, status: str, good, bad, min_effect: float) -> tuple[str, str]:
    """The one-sentence answer and its colour, from the result's ``status``, ``culprits``,
    ``regression``, ``confidence``, ``candidates`` and ``plan``."""
    from ..summaries import speed_interval, speed_words
    reg = res.regression or {}
    hib = higher_is_better_of(c)
    # in words ("`all` is 34.3% slower than `none`", "97% sure"); the signed ratios and the
    # posterior stay in the detail sections
    regtxt = (f"`{bad}` is {speed_words(reg.get('ratio'), hib)} than `{good}` "
              f"(95% CI {speed_interval(reg.get('ci_low'), reg.get('ci_high'), hib)})"
              if isinstance(reg, dict) and reg.get("ratio") is not None else "")
    if status == "culprits":
        conf = res.confidence
        return (f"The regression is explained by **{', '.join(res.culprits)}**"
                + (f" ({'>99%' if conf >= 0.995 else f'{conf:.0%}'} sure)"
                   if isinstance(conf, (int, float)) and math.isfinite(conf) else "")
                + (f". {regtxt}." if regtxt else ".") + _shape_sentence(res)), "bad"
    if status == "no-regression":
        return f"No regression: `{bad}` performs like `{good}`" + (f" ({regtxt})" if regtxt else "") + ".", "good"
    if c.status != "done":
        return f"The campaign did not finish (status {c.status}); resume it with --resume {c.id}.", "unknown"
    answer = ("Inconclusive within the budget: no factor set explains the difference with enough confidence"
              + (f" ({regtxt})" if regtxt else "") + ".")
    likely = [f"**{f}** ({p:.2f})" for f, p in sorted(res.candidates or [], key=lambda x: -x[1]) if p >= 0.5]
    if likely:
        answer += f" Most likely involved so far: {', '.join(likely)}."
    plan = res.plan
    cv = _worst_cv(plan)
    if isinstance(plan, dict) and plan.get("trials_per_arm") and cv is not None:
        answer += (f" The noise seen (CV {cv * 100:.0f}%) "
                   f"needs about {plan['trials_per_arm']} trials per arm to resolve {min_effect * 100:g}%.")
    return answer, "unknown"


def _shape_sentence(res: AttributionResult) -> str:
    """" Structure: either of a, b does the whole damage ..." when the answer is not additive."""
    st = (res.extra or {}).get("structure") if isinstance(res.extra, dict) else None
    if isinstance(st, dict) and st.get("kind") not in (None, "additive") and st.get("text"):
        return f" Structure: {st['text']}."
    return ""


def _worst_cv(plan) -> float | None:
    """The larger of the plan's two CVs; None when neither is a number (one reading has no CV)."""
    if not isinstance(plan, dict):
        return None
    cvs = [c for c in (plan.get("cv_good"), plan.get("cv_bad")) if isinstance(c, (int, float)) and math.isfinite(c)]
    return max(cvs) if cvs else None


def _cv_pct(cv) -> str:
    return f"{cv * 100:.1f}%" if isinstance(cv, (int, float)) and math.isfinite(cv) else "- (one reading)"


def _reads_as(x: dict) -> str:
    """A confirmation arm's measured position in words: like good (0), like bad (1), in between,
    or unclear when its interval reaches both; the numbers follow in brackets."""
    pos, lo, hi = x.get("position"), x.get("position_low"), x.get("position_high")
    if not isinstance(pos, (int, float)) or not math.isfinite(pos):
        return "-"
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo <= 0.25 and hi >= 0.75:
        word = "unclear"
    else:
        word = "like good" if pos < 0.25 else "like bad" if pos > 0.75 else "in between"
    return f"{word} ({num(pos)}; {num(lo)} .. {num(hi)})"


def _effects_section(res: AttributionResult, metric: str, min_effect: float) -> Section:
    from .. import report_plots as plots
    culprits = res.culprits or []
    s = Section("Effect of each factor")
    rows, frows = [], []
    over = False
    for e in res.effects or []:
        eff = e.get("effect") if isinstance(e.get("effect"), dict) else e
        name = e.get("name") or e.get("factor")
        r = {"name": name, "ratio": eff.get("ratio"), "ci_low": eff.get("ci_low"), "ci_high": eff.get("ci_high"),
             "culprit": bool(term_factors(str(name)) & set(culprits))}
        frows.append(r)
        share = e.get("share")
        over = over or (isinstance(share, (int, float)) and share > 1.005)
        rows.append([code(name), e.get("kind", "main"), pct(r["ratio"]), f"{pct(r['ci_low'])} .. {pct(r['ci_high'])}",
                     "-" if share is None else f"{share * 100:.0f}%"
                     + (f" ({e['share_low'] * 100:.0f}..{e['share_high'] * 100:.0f}%)"
                        if e.get("share_low") is not None and e.get("share_high") is not None else "")])
    png = plots.effects(frows, min_effect=min_effect, title=f"Effect of switching each factor from good to bad ({metric})")
    if png:
        s.add(Figure(png, "Each factor's effect on the metric when switched from its good to its bad value, with its "
                          "95% interval. The grey band is below the minimum effect of interest.", "effects"))
    if rows:
        s.add(Table(["factor / term", "kind", "effect", "95% CI", "share of the regression"], rows,
                    note="A share over 100%: the factor alone costs more than bad vs good in total, because "
                         "another factor or a combination gives part of it back." if over else ""))
    else:
        s.p("The strategy recorded no per-factor effects.")
    if res.interactions:
        s.add([f"interaction ({i.get('kind', '')}): {' × '.join(i.get('factors') or [])} — "
               f"{i.get('description') or pct((i.get('term') or {}).get('ratio'))}" for i in res.interactions])
    _structure(res, s)
    if res.candidates:
        s.add(Table(["factor", "probability it is involved"],
                    [[code(f), f"{p:.2f}"] for f, p in sorted(res.candidates, key=lambda x: -x[1])]))
    if res.confirmation:
        s.add(Table(["confirmation arm (bad factors)", "expected", "n", "measured (position: 0 = good, 1 = bad; 95% CI)",
                     "as expected"],
                    [[", ".join(x.get("arm") or []) or "(good)", x.get("expect", ""), str(x.get("n", "")),
                      _reads_as(x), "yes" if x.get("ok") else "**no**"] for x in res.confirmation]))
    plan = res.plan
    if isinstance(plan, dict) and plan.get("trials_per_arm"):
        s.p(f"Noise seen: CV {_cv_pct(plan.get('cv_good'))} (good), {_cv_pct(plan.get('cv_bad'))} (bad); "
            f"resolving {min_effect * 100:g}% at this noise takes about {plan['trials_per_arm']} trials per arm.")
    return s


def _structure(res: AttributionResult, s: Section) -> None:
    """The answer's shape and each named factor's drop-alone prediction, checked against the
    readings of that arm where it was measured."""
    extra = res.extra if isinstance(res.extra, dict) else {}
    st = extra.get("structure")
    if isinstance(st, dict) and st.get("text"):
        word = {"additive": "independent effects", "or": "redundancy (OR)", "and": "factors that act only together (AND)",
                "mixed": "groups"}.get(st.get("kind"), str(st.get("kind")))
        s.p(f"Structure chosen by the measured arms ({word}): {st['text']}.")
    drop = [d for d in extra.get("drop_alone") or [] if isinstance(d, dict)]
    if drop:
        s.add(Table(["drop alone from bad", "predicted", "95% CI", "change from bad", "measured", "agrees"],
                    [[code(d.get("factor")), num(d.get("predicted")),
                      f"{num(d.get('predicted_low'))} .. {num(d.get('predicted_high'))}",
                      pct(1 + d["predicted_change"]) if isinstance(d.get("predicted_change"), (int, float)) else "-",
                      f"{num(d.get('measured'))} (n={d.get('n')})" if d.get("measured") is not None else "not measured",
                      "-" if d.get("agrees") is None else "yes" if d.get("agrees") else "**no**"] for d in drop],
                    note="The answer's model predicts the metric of 'bad' with that one factor set to its good value; "
                         "where that arm was measured, the prediction is checked against its readings."))


def attribution_report(store: Store, c: Campaign, trials: list[TrialResult]) -> Report:
    """The report of an attribution, from its stored :class:`AttributionResult` (a campaign that
    stored none reads as unfinished, with its trials as the evidence)."""
    stored = result_from_dict(c.kind, c.result)
    res = stored if isinstance(stored, AttributionResult) else AttributionResult()
    metric, hib = metric_of(c, stored, trials), higher_is_better_of(c)
    status = res.status if stored is not None else c.status
    good, bad = res.good or c.params.get("good"), res.bad or c.params.get("bad")
    min_effect = float(res.min_effect or c.params.get("min_effect") or 0.02)
    answer, st = _answer(c, res, status, good, bad, min_effect)
    sections = [setup_section(c, trials, metric, hib, [["good arm", code(good)], ["bad arm", code(bad)],
                                                        ["factors", ", ".join(code(f) for f in (res.factors or c.params.get("factors") or []))]])]
    sections.append(_effects_section(res, metric, min_effect))
    values = ok_values(trials, metric)
    arms = sorted(values, key=lambda a: (a != good, a != bad, a))
    a = Section("Arms measured")
    a.add(arms_table(values, trials, arms))
    sections.append(a)
    sections.append(evidence_section(trials, metric, hib, arms))
    sections += trust_sections(store, trials, metric, hib, values)
    if res.warnings:
        w = Section("Warnings")
        w.add(list(res.warnings))
        sections.append(w)
    answer += go_on(c, stored)
    return Report(f"bisect-lab report: attribution {c.id}", answer, st,
                  [("good", good or "-"), ("bad", bad or "-"), ("trials", str(len(trials)))], sections)
