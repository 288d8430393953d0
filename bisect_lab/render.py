"""Human-readable output of campaign results (layer 6). Only entry points call this.

Each entry takes a typed result (:mod:`bisect_lab.results`) or its JSON object (the redacted
``to_dict()`` the CLI holds), reads it through ``from_dict`` and prints its fields.
"""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .results import AttributionResult, BisectResult, Result, RunResult, SweepNight


def _pct(r):
    return "-" if r is None else f"{(r - 1) * 100:+.1f}%"


def _num(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def _typed(res, cls):
    """``res`` as a ``cls`` (a typed result is taken as it is, a JSON object read with ``from_dict``)."""
    return res if isinstance(res, cls) else cls.from_dict(res)


def run_result(res: dict | RunResult, console: Console) -> None:
    """A run's arms and comparisons, per metric (the primary first), its warnings, how to go on."""
    res = _typed(res, RunResult)
    # one Holm family over every metric's comparisons (summaries.run_summary)
    blocks = [(res.metric, res.higher_is_better, res.arms, res.comparisons)] + [
        (m["metric"], m["higher_is_better"], m["arms"], m["comparisons"]) for m in res.secondary or []]
    family = sum(1 for *_, cmp in blocks for r in cmp if r.get("p_adjusted") is not None) > 1
    for k, block in enumerate(blocks):
        _metric_tables(*block, family, console, primary_of=res if k == 0 else None)
        _two_levels(res if k == 0 else res.secondary[k - 1], console)
    _warnings(res, console)
    _go_on(res, console)


def _metric_tables(metric: str, hib: bool, arms: list[dict], comparisons: list[dict], family: bool,
                   console: Console, primary_of: RunResult | None) -> None:
    """One metric's arms table and comparisons table; ``primary_of``: the run, for the primary metric."""
    direction = f"{metric} ({'higher' if hib else 'lower'} is better)"
    # the experiment's name and the metric's are the user's text: escaped like the arms
    title = escape(f"{primary_of.experiment}: {direction} — campaign {primary_of.campaign}" if primary_of
                   else f"{direction} — secondary metric")
    t = Table(title=title)
    for col in ("arm", "n", "median", "mean", "CV", "95% CI", "failed"):
        # fold, not ellipsis: two arms that differ by a secret's tag (<redacted:3f2a1b9c>) stay apart
        t.add_column(col, justify="left" if col == "arm" else "right", overflow="fold" if col == "arm" else "ellipsis")
    for a in arms:
        ci = "-" if a.get("ci_low") is None else f"{a['ci_low']:.2f} .. {a['ci_high']:.2f}"
        t.add_row(escape(a["arm"]), str(a["n"]), _num(a.get("median")), _num(a.get("mean")),
                  "-" if a.get("cv") is None else f"{a['cv'] * 100:.1f}%", ci,
                  str(a.get("failed", 0)) + (f" {a['failures']}" if a.get("failures") else ""))
    console.print(t)
    if not comparisons:
        return
    c = Table(title=("Pairwise comparisons" if primary_of else f"{escape(metric)}: pairwise comparisons")
              + " (b relative to a)"
              + (", p-values Holm-adjusted over the run's comparisons" if family else ""))
    for col in ("a", "b", "host", "ratio", "95% CI") + (("p (Holm)",) if family else ()) + ("verdict",):
        c.add_column(col, overflow="fold" if col in ("a", "b") else "ellipsis")
    for r in comparisons:
        ci = "-" if r.get("ci_low") is None else f"{_pct(r['ci_low'])} .. {_pct(r['ci_high'])}"
        verdict = r["verdict"]
        if r.get("regression"):
            verdict = "[bold red]different (regression)[/]"
        elif verdict == "different":
            verdict = "[green]different (improvement)[/]"
        elif verdict == "unknown" and r.get("plan_per_arm"):
            verdict += f" (about {r['plan_per_arm']} trials per arm would resolve it)"
        p_adj = (_num(r.get("p_adjusted"), "{:.2g}"),) if family else ()
        c.add_row(escape(r["a"]), escape(r["b"]), escape(r["host"]), _pct(r.get("ratio")), ci, *p_adj, verdict)
    console.print(c)


def _two_levels(block, console: Console) -> None:
    """A metric measured in sessions: its variance components in one line, and with several hosts
    each pair's effect pooled over the hosts (summaries.run_summary's ``variance``, ``across_hosts``)."""
    from .summaries import variance_line
    line = variance_line(block.get("variance"))
    if line:
        console.print(escape(f"{block.get('metric') or ''} noise: {line}".strip()))
    for r in block.get("across_hosts") or []:
        if r.get("ratio") is not None:
            console.print(escape(f"pooled over {r.get('hosts')} hosts: {r['b']} vs {r['a']} {_pct(r['ratio'])} "
                                 f"[{_pct(r['ci_low'])} .. {_pct(r['ci_high'])}] {r['verdict']}"))


def _warnings(res: Result, console: Console) -> None:
    env = (res.get("env_propagation") or {}).get("vars", [])
    if env:
        t = Table(title="Env vars in the benchmark's processes")
        for col in ("var", "expected", "reached", "trials"):
            t.add_column(col)
        for v in env:
            style = "" if v["matched"] == v["total"] else "[yellow]"
            t.add_row(escape(v["var"]), "(unset)" if v.get("expected") is None else escape(str(v["expected"])),
                      f"{style}{v['matched']} of {v['total']} processes",
                      f"{v.get('trials_incomplete', 0)} of {v.get('trials', 0)} trials incomplete, "
                      f"{len(v.get('arms', []))} arm(s)")
        console.print(t)
    for w in res.get("warnings") or []:
        console.print(f"[yellow]warning:[/] {escape(str(w))}")


def attribution_result(res: dict | AttributionResult, console: Console) -> None:
    """An attribution's status, culprits, effects, interactions, planning line, warnings."""
    res = _typed(res, AttributionResult)
    status = res.status
    color = {"culprits": "bold red", "no-regression": "green", "inconclusive": "yellow"}.get(status, "")
    console.print(f"[{color}]{status}[/]: good = {escape(repr(res.good))}, bad = {escape(repr(res.bad))}, "
                  f"metric {escape(str(res.metric))}, {res.trials} trials (campaign {res.campaign})")
    if res.culprits:
        console.print(f"culprits: [bold]{escape(', '.join(res.culprits))}[/]")
    reg = res.regression
    if isinstance(reg, dict) and reg.get("ratio") is not None:
        console.print(f"regression (bad vs good): {_pct(reg['ratio'])} "
                      f"[{_pct(reg.get('ci_low'))} .. {_pct(reg.get('ci_high'))}]")
    effects = res.effects or []
    if effects:
        t = Table(title="Culprits and effects (effect = metric ratio when the factor takes its bad value)")
        for col in ("factor", "kind", "effect", "95% CI", "share of regression"):
            t.add_column(col)
        for e in effects:
            eff = e.get("effect") if isinstance(e.get("effect"), dict) else e
            share = e.get("share")
            if share is not None and e.get("share_low") is not None:
                share_txt = f"{share * 100:.0f}% [{e['share_low'] * 100:.0f}% .. {e['share_high'] * 100:.0f}%]"
            else:
                share_txt = "-" if share is None else f"{share * 100:.0f}%"
            t.add_row(escape(str(e.get("name") or e.get("factor"))), str(e.get("kind", "main")), _pct(eff.get("ratio")),
                      f"{_pct(eff.get('ci_low'))} .. {_pct(eff.get('ci_high'))}", share_txt)
        console.print(t)
    for it in res.interactions or []:
        names = it.get("factors") or it.get("names") if isinstance(it, dict) else it
        line = f"interaction: {' x '.join(names) if isinstance(names, (list, tuple)) else names}"
        if isinstance(it, dict):
            if it.get("kind"):
                line += f" ({it['kind']})"
            if it.get("description"):
                line += f": {it['description']}"
            term = it.get("term") if isinstance(it.get("term"), dict) else {}
            if term.get("ratio") is not None:
                line += f"; term {_pct(term.get('ratio'))} [{_pct(term.get('ci_low'))} .. {_pct(term.get('ci_high'))}]"
        console.print(escape(line))
    cands = res.candidates
    if cands and status != "culprits":
        console.print(escape("most likely factors: " + ", ".join(f"{n} ({p:.2f})" for n, p in cands[:4])))
    plan = res.plan
    if isinstance(plan, dict) and plan.get("trials_per_arm"):
        console.print(f"planning: to resolve {plan.get('min_effect', 0.02) * 100:.0f}% at this noise: "
                      f"about {plan['trials_per_arm']} trials per arm")
    elif plan:
        console.print(escape(f"planning: {plan}"))
    _warnings(res, console)
    _go_on(res, console)


def bisect_result(res: dict | BisectResult, console: Console) -> None:
    """A bisection's status, the first bad commit (or the range, the steps), its effect, warnings."""
    res = _typed(res, BisectResult)
    status = res.status
    color = {"culprit": "bold red", "gradual": "bold red", "several": "bold red", "no-regression": "green",
             "inconclusive": "yellow"}.get(status, "")
    console.print(f"[{color}]{status}[/] ({res.trials} trials, campaign {res.campaign})")
    c = res.commit_info or {}
    if status in ("gradual", "several"):
        _bisect_not_one_step(res, console)
        _warnings(res, console)
        _go_on(res, console)
        return
    if res.commit:
        console.print(f"first bad commit: {res.commit}")
        if c:
            console.print(f"  {escape(str(c.get('subject', '')))}\n  {escape(str(c.get('author', '')))}  {c.get('date', '')}")
        if res.posterior is not None:
            console.print(f"  posterior mass on it: {res.posterior:.3f}")
    for lv in (res.levels or [])[:-1]:
        console.print(f"  (on the first-parent line {lv['good'][:12]}..{lv['bad'][:12]} the first bad commit "
                      f"was merge {str(lv['commit'])[:12]}; its side branch was bisected next)")
    eff = _effect(res)
    if eff.get("ratio") is not None:
        console.print(f"  effect: {_pct(eff['ratio'])} [{_pct(eff.get('ci_low'))} .. {_pct(eff.get('ci_high'))}]")
    if status == "inconclusive" and res.top:
        # Where the probability sits, not the whole range.
        console.print("most likely first bad commits: "
                      + ", ".join(f"{sha[:12]} ({m:.0%})" for sha, m in res.top))
    elif res.range:
        console.print(f"candidate range: {', '.join(x[:12] for x in res.range)}")
    _warnings(res, console)
    _go_on(res, console)


def _effect(res: BisectResult) -> dict:
    """``{"ratio", "ci_low", "ci_high"}`` of the result (empty when it holds none)."""
    return res.effect if isinstance(res.effect, dict) else {}


def _bisect_not_one_step(res: BisectResult, console: Console) -> None:
    rng = res.range or []
    eff = _effect(res)
    if res.status == "gradual":
        span = f"{rng[0][:12]} .. {rng[-1][:12]} ({len(rng)} commits)" if rng else "?"
        console.print(f"the change is spread over {span}: no single commit explains it")
        if eff.get("ratio") is not None:
            console.print(f"  total effect: {_pct(eff['ratio'])} [{_pct(eff.get('ci_low'))} .. {_pct(eff.get('ci_high'))}]")
        return
    console.print("several steps, in history order:")
    for st in res.steps or []:
        commits = st.get("commits") or []
        where = st.get("commit") or (f"{commits[0][:12]} .. {commits[-1][:12]}" if commits else "?")
        ci = st.get("effect_ci") or [None, None]
        effect = f"{_pct(st['effect'])} [{_pct(ci[0])} .. {_pct(ci[1])}]" if st.get("effect") is not None else "-"
        console.print(f"  {where}: {effect}")


def _go_on(res: Result, console: Console) -> None:
    """How the campaign goes on (``resume_with``, decided by the campaign): the trials already paid
    for are not lost, the same campaign continues."""
    for w in res.get("resume_with") or []:
        what = f"{w['option']} N (N > {w['more_than']})" if "more_than" in w else f"{w['option']} {w['value']}"
        why = ("to look for a smaller culprit beside the named ones, with the trials already made"
               if w["option"] == "--strategy" else "to go on with more trials in this campaign")
        console.print(escape(f"{why}: the same command with --resume {res.campaign} {what}"))


def render_sweep(res: dict | SweepNight, console) -> None:
    """Print a sweep night for people (a rich Console is passed in by the entry point)."""
    e = escape        # arms, subjects, reasons are the user's text
    res = _typed(res, SweepNight)
    head = "[bold red]REGRESSION[/]" if res.regressions else "[green]no regression[/]"
    console.print(f"{head} — " + e(f"sweep {res.sweep}, night {res.night}, {res.ref} = "
                                   f"{res.commit[:12]} {res.subject} (campaign {res.campaign})"))
    t = Table(title=e(f"{res.metric} per arm ({'higher' if res.higher_is_better else 'lower'} is better)"))
    for col in ("arm", "status", "tonight", "last good", "change", "why"):
        t.add_column(col)
    for s in res.series:
        c = s.get("comparison") or {}
        meds = [m for m in s.get("medians", []) if m is not None]
        color = {"regression": "bold red", "improvement": "green"}.get(s["status"], "")
        t.add_row(e(s["arm"]), f"[{color}]{s['status']}[/]" if color else e(s["status"]),
                  f"{meds[-1]:.2f}" if meds else "-",
                  e((s.get("last_good_commit") or "-")[:12]),
                  f"{(c['ratio'] - 1) * 100:+.1f}%" if c.get("ratio") else "-", e(str(s.get("reason", ""))))
    console.print(t)
    for b in res.bisections or []:
        if b.get("commit"):
            what = "first of several steps at" if b.get("status") == "several" else "first bad commit"
            console.print(e(f"bisection ({b['arm']}): {what} {b['commit']} [{b.get('status')}]"))
        else:
            console.print(e(f"bisection ({b['arm']}): {b.get('status')} {b.get('reason') or b.get('error') or ''}"))
    console.print(e(f"report: {res.report_command}"))
