"""The report of a sweep: every arm's series over the nights, tonight's judgement, the alerts."""
from __future__ import annotations

from ..errors import UsageError
from ..results import SweepNight
from ..store import Store
from .document import Figure, Report, Section, Table, code, num, pct, when
from .sections import evidence_section, ok_values, setup_section, trust_sections

__all__ = ["sweep_report"]


def _answer(nights, judged: list[SweepNight]) -> tuple[str, str]:
    """The answer and its colour, from the last night's ``regressions`` (the arms that alert)."""
    last, j = nights[-1], judged[-1]
    if j.regressions:
        why = {s.get("arm"): s.get("reason", "") for s in j.series}
        return (f"**Regression** on night {len(nights)} ({code((last.commit or '')[:12])}): "
                + "; ".join(f"`{arm}` — {why.get(arm, '')}" for arm in j.regressions)), "bad"
    answer = (f"No regression on night {len(nights)} ({code((last.commit or '')[:12])}) across "
              f"{len(j.series)} series.")
    past = [i for i, n in enumerate(judged[:-1]) if n.regressions]
    if past:
        i = past[-1]
        answer += (f" The last alert was on night {i + 1} ({code((nights[i].commit or '')[:12])}); the series "
                   f"raised no new alert since.")
    return answer, "good"


def _series_section(nights, judged: list[SweepNight]) -> tuple[Section, list[str]]:
    from .. import report_plots as plots
    j = judged[-1]
    arms = list(dict.fromkeys(a for n in nights for a in n.values))
    labels = [f"{i + 1}: {(n.commit or '?')[:7]}" for i, n in enumerate(nights)]
    series = {a: [(i, n.values.get(a, [])) for i, n in enumerate(nights)] for a in arms}
    cps = {s["arm"]: [cp.get("night", cp.get("index")) for cp in s.get("change_points") or []] for s in j.series}
    alerts: dict[str, list[int]] = {}
    for i, n in enumerate(judged):
        for arm in n.regressions:
            alerts.setdefault(arm, []).append(i)
    sec = Section("Series over nights")
    png = plots.sweep_series(series, labels, j.metric or "value", change_points=cps, alerts=alerts)
    if png:
        sec.add(Figure(png, "Each arm's metric night after night. Dashed lines are change points found by E-divisive "
                            "means (permutation test) over the night medians; red rings are nights that raised an alert.",
                       "sweep-series"))
    rows = []
    for s in j.series:
        c = s.get("comparison") or {}
        rows.append([code(s["arm"]), s.get("status", "-"), pct(c.get("ratio")),
                     f"{pct(c.get('ci_low'))} .. {pct(c.get('ci_high'))}" if c else "-",
                     code((s.get("last_good_commit") or "")[:12]), s.get("reason", "")])
    if rows:
        sec.add(Table(["arm", "tonight", "vs last good", "95% CI", "last good commit", "why"], rows,
                      note=f"Alert rule: a significant slowdown whose whole interval is beyond the minimum effect "
                           f"({(j.min_effect or 0) * 100:g}%), outside the night-to-night spread, or a "
                           f"significant change point to a worse level."))
    nrows = []
    for i, (n, nj) in enumerate(zip(nights, judged)):
        nrows.append([str(i + 1), when(n.created), code((n.commit or "")[:12]), n.campaign]
                     + [num(n.median(a)) for a in arms] + ["**ALERT** " + ", ".join(nj.regressions) if nj.regressions else ""])
    sec.add(Table(["night", "when", "commit", "campaign"] + [f"median `{a}`" for a in arms] + ["alert"], nrows))
    for b in [b for nj in judged for b in nj.bisections]:
        sec.p(f"Bisection for `{b.get('arm')}` between `{str(b.get('good'))[:12]}` and `{str(b.get('bad'))[:12]}`: "
              f"{b.get('status')}" + (f", {'first step' if b.get('status') == 'several' else 'first bad commit'} `{b['commit'][:12]}` "
                                      f"{(b.get('commit_info') or {}).get('subject', '')}" if b.get("commit") else "")
              + (f" (campaign {b.get('campaign')})" if b.get("campaign") else ""))
    return sec, arms


def sweep_report(store: Store, name: str, upto: str | None = None) -> Report:
    """The report of sweep ``name`` up to the night of campaign ``upto`` (default: its last night),
    from each night's stored :class:`SweepNight`."""
    from ..nights import sweep_history
    nights = sweep_history(store, name)
    if upto:
        ids = [n.campaign for n in nights]
        if upto in ids:
            nights = nights[: ids.index(upto) + 1]
    if not nights:
        raise UsageError(f"sweep {name!r} has no finished night in {store.path}")
    judged = [SweepNight.from_dict(n.judgement) for n in nights]
    last, j = nights[-1], judged[-1]
    metric, hib = j.metric or "value", j.higher_is_better
    answer, st = _answer(nights, judged)
    sec, arms = _series_section(nights, judged)
    sections = [sec]
    trials = [t for t in store.trials(last.campaign) if t.tag != "warmup"]
    c = store.campaign(last.campaign)
    setup = setup_section(c, trials, metric, hib, [["sweep", name], ["ref", code(c.params.get("ref"))],
                                                   ["nights", str(len(nights))]])
    setup.title = f"What was measured on night {len(nights)}"
    sections.append(setup)
    ev = evidence_section(trials, metric, hib, arms)
    ev.title = f"Every trial of night {len(nights)}"
    sections.append(ev)
    sections += trust_sections(store, trials, metric, hib, ok_values(trials, metric))
    return Report(f"bisect-lab report: sweep {name}", answer, st,
                  [("sweep", name), ("nights", str(len(nights))), ("latest commit", (last.commit or "-")[:12])], sections)
