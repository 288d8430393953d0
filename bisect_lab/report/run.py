"""The report of a ``run`` (or pytest) campaign: each arm, and the comparisons the campaign decided."""
from __future__ import annotations

from ..model import TrialResult
from ..results import RunResult, result_from_dict
from ..store import Campaign, Store
from .document import Report, Section, Table, code, num, pct
from .sections import (arms_table, evidence_section, go_on, higher_is_better_of, metric_of, ok_values,
                       setup_section, stored_arms_table, trust_sections)

__all__ = ["run_report", "computed_comparisons", "comparison_blocks"]

_NOTE = ("Ratio of geometric means b/a with a Welch interval on log values (no equal-variance or "
         "normality assumption); p (Holm): adjusted for the number of comparisons in the report")


def computed_comparisons(blocks, arms, min_effect, alpha) -> list[list[dict]]:
    """For a campaign that stored no comparisons: the reference arm against each other arm, per
    metric, computed from the trials as ``run`` decides (one Holm family over every metric's
    comparisons, summaries.holm_comparisons). ``blocks``: (metric, values, hib), the primary metric
    first. Returns, per block, rows shaped like ``RunResult.comparisons``."""
    from ..stats.compare import compare
    from ..summaries import holm_comparisons
    ref = arms[0] if arms else None
    out = []
    for _, values, hib in blocks:
        rows = []
        for b in arms[1:]:
            row = {"a": ref, "b": b, "n_a": len(values.get(ref, [])), "n_b": len(values.get(b, []))}
            if row["n_a"] >= 2 and row["n_b"] >= 2:
                c = compare(values[ref], values[b], higher_is_better=hib, min_effect=min_effect, alpha=alpha)
                row.update(ratio=c.ratio, ci_low=c.ci_low, ci_high=c.ci_high, p_value=c.p_value,
                           verdict=c.verdict, regression=bool(c.regression))
            else:
                row.update(ratio=None, ci_low=None, ci_high=None, p_value=None, verdict="unknown", regression=False)
            rows.append(row)
        out.append(rows)
    holm_comparisons([r for rows in out for r in rows], alpha)   # adds p_adjusted; downgrades what does not survive
    return out


def comparison_blocks(blocks: list[tuple[str, bool, list[dict]]], min_effect: float) -> list[tuple[Table | None, list[str]]]:
    """A table and sentences per metric from comparison rows (stored or computed): ``blocks`` is
    (metric, hib, rows), the primary metric first. Every verdict is the row's own."""
    from ..summaries import speed_interval, speed_words
    family = sum(1 for _, _, rows in blocks for r in rows if r.get("p_value") is not None)
    hosts = {r.get("host") for _, _, rows in blocks for r in rows if r.get("host")}
    out = []
    for k, (metric, hib, rows) in enumerate(blocks):
        cells, sentences = [], []
        on = f" on {metric}" if k else ""
        for r in rows:
            a, b = r.get("a"), r.get("b")
            where = f" on host {r['host']}" if len(hosts) > 1 and r.get("host") else ""
            first = [code(a), code(b)] + ([r.get("host") or "-"] if len(hosts) > 1 else [])
            if r.get("ratio") is None:
                cells.append(first + ["-", "-", "-", "-", "not enough successful trials"])
                continue
            ratio, lo, hi, p = r["ratio"], r.get("ci_low"), r.get("ci_high"), r.get("p_value")
            # the sentences in a performance engineer's words ("24.0% slower", its interval in the
            # same words); the signed ratios and p-values stay in the table
            words, interval = speed_words(ratio, hib), speed_interval(lo, hi, hib)
            if r.get("unadjusted_verdict"):
                verdict = f"unknown: significant alone, not after Holm's correction over {family} comparisons"
                sentences.append(f"`{b}` vs `{a}`{on}{where}: {words} (95% CI {interval}), "
                                 f"not significant once the {family} comparisons are corrected for (Holm).")
            elif r.get("regression"):
                verdict = "**worse** (significant)"
                sentences.append(f"`{b}` is **{words}**{on}{where} than `{a}` (95% CI {interval}): a regression.")
            elif r.get("verdict") == "different":
                verdict = "better (significant)"
                sentences.append(f"`{b}` is {words}{on}{where} than `{a}` (95% CI {interval}).")
            elif r.get("verdict") == "same":
                verdict = f"same (within ±{min_effect * 100:g}%)"
                sentences.append(f"`{b}` and `{a}` perform the same{on}{where} within ±{min_effect * 100:g}%.")
            else:
                verdict = "unknown: more trials needed"
                sentences.append(f"`{b}` vs `{a}`{on}{where}: not settled, {words} so far; the interval "
                                 f"({interval}) is too wide to decide.")
            cells.append(first + [pct(ratio), f"{pct(lo)} .. {pct(hi)}", num(p, "{:.2g}"),
                                  num(r.get("p_adjusted", p), "{:.2g}"), verdict])
        table = None if not cells else Table(
            ["reference a", "arm b"] + (["host"] if len(hosts) > 1 else []) + ["b vs a", "95% CI", "p", "p (Holm)", "verdict"],
            cells, note=_NOTE + (" (every metric's)" if len(blocks) > 1 else "") + ".")
        out.append((table, sentences))
    return out


def _noise(s: Section, variance: dict | None, trials: list[TrialResult], metric: str, arms: list[str]) -> None:
    """The metric's variance components in one sentence, when it was measured in sessions (the
    stored result's, else computed from the trials)."""
    from ..summaries import variance_line
    from ..summaries_sessions import has_sessions, session_groups, variance_dict
    if variance is None and has_sessions(trials):
        from ..stats.sessions import components
        variance = variance_dict(components([g for a in arms if (g := session_groups(trials, metric, a))]))
    line = variance_line(variance)
    if line:
        s.p(f"Noise of {code(metric)}, measured in sessions (one server launch, several readings): {line}. "
            f"Comparisons use session means as their units.")


def _status(rows: list[dict]) -> str:
    """The colour of the answer, from the primary metric's verdicts."""
    if any(r.get("regression") for r in rows):
        return "bad"
    if any(r.get("verdict") == "unknown" for r in rows):
        return "unknown"
    return "good"


def run_report(store: Store, c: Campaign, trials: list[TrialResult]) -> Report:
    """The report of a run: the comparisons and arm rows are the stored result's; only a campaign
    that stored none (interrupted, failed, or written before results held them) has them computed
    here from its trials, and the report says so."""
    res = result_from_dict(c.kind, c.result)
    res = res if isinstance(res, RunResult) else None
    metric, hib = metric_of(c, res, trials), higher_is_better_of(c)
    trials_m = [t for t in trials if t.tag != "warmup"]
    values = ok_values(trials_m, metric)
    # the margin the campaign decided "same" with (stored since the typed results; older: params or 2%)
    min_effect = float((res and res.min_effect) or c.params.get("min_effect") or 0.02)
    stored = res is not None and bool(res.arms)
    if stored:
        arms = [a.get("arm") for a in res.arms]
        blocks = [(metric, hib, res.comparisons)] + [(m.get("metric"), bool(m.get("higher_is_better", True)),
                                                       m.get("comparisons") or []) for m in res.secondary or []]
        arm_rows = [res.arms] + [m.get("arms") or [] for m in res.secondary or []]
        tables = [stored_arms_table(rows) for rows in arm_rows]
    else:
        arms = list(dict.fromkeys(c.params.get("arms") or [t.arm for t in trials_m]))
        computed = computed_comparisons([(metric, values, hib)], arms, min_effect, float((res and res.alpha) or c.params.get("alpha") or 0.05))
        blocks = [(metric, hib, computed[0])]
        tables = [arms_table(values, trials_m, arms)]
    (table, sentences), *more = comparison_blocks(blocks, min_effect)
    primary = blocks[0][2]
    if not values:
        answer, status = "No trial produced a measurement: see Failures below.", "bad"
    elif sentences:
        answer, status = " ".join(sentences[:3]), _status(primary)
    else:
        answer, status = f"Measured {len(arms)} arm(s); nothing to compare.", "unknown"
    sections = [setup_section(c, trials, metric, hib)]
    s = Section("Arms")
    if not stored and values:
        s.p(f"This campaign stored no comparisons (status {c.status}): the ones below were computed by this "
            f"report from its {len(trials_m)} stored trials, the first arm against each other, not decided by "
            f"the campaign.")
    s.add(tables[0])
    s.add(table)
    _noise(s, (res.get("variance") if stored else None), trials_m, metric, arms)
    sections.append(s)
    for (m, m_hib, _), m_table_arms, (m_table, m_sentences) in zip(blocks[1:], tables[1:], more):
        s = Section(f"Secondary metric: {m} ({'higher' if m_hib else 'lower'} is better)")
        if m_sentences:
            s.p(" ".join(m_sentences))
        s.add(m_table_arms)
        s.add(m_table)
        _noise(s, next((x.get("variance") for x in res.secondary or [] if x.get("metric") == m), None),
               trials_m, m, arms)
        sections.append(s)
    sections.append(evidence_section(trials_m, metric, hib, arms))
    sections += trust_sections(store, trials_m, metric, hib, values)
    facts = [("experiment", c.experiment_name or c.experiment or "-"), ("metric", metric),
             ("trials", str(len(trials)))]
    title = ("pytest " if c.kind == "pytest" else "") + f"run {c.id}"
    answer += go_on(c, res)
    return Report(title=f"bisect-lab report: {title}", answer=answer, status=status, facts=facts, sections=sections)
