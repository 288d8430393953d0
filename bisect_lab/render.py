"""Human-readable output of campaign results (layer 6). Only entry points call this."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _pct(r):
    return "-" if r is None else f"{(r - 1) * 100:+.1f}%"


def _num(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def run_result(res: dict, console: Console) -> None:
    # one Holm family over every metric's comparisons (summaries.run_summary)
    blocks = [res] + list(res.get("secondary", []))
    family = sum(1 for m in blocks for r in m["comparisons"] if r.get("p_adjusted") is not None) > 1
    for k, m in enumerate(blocks):
        _metric_tables(m, family, console, primary_of=res if k == 0 else None)
    _warnings(res, console)
    _go_on(res, console)


def _metric_tables(m: dict, family: bool, console: Console, primary_of: dict | None) -> None:
    """One metric's arms table and comparisons table; ``primary_of``: the run, for the primary metric."""
    direction = f"{m['metric']} ({'higher' if m['higher_is_better'] else 'lower'} is better)"
    # the experiment's name and the metric's are the user's text: escaped like the arms
    title = escape(f"{primary_of['experiment']}: {direction} — campaign {primary_of['campaign']}" if primary_of
                   else f"{direction} — secondary metric")
    t = Table(title=title)
    for col in ("arm", "n", "median", "mean", "CV", "95% CI", "failed"):
        # fold, not ellipsis: two arms that differ by a secret's tag (<redacted:3f2a1b9c>) stay apart
        t.add_column(col, justify="left" if col == "arm" else "right", overflow="fold" if col == "arm" else "ellipsis")
    for a in m["arms"]:
        ci = "-" if a.get("ci_low") is None else f"{a['ci_low']:.2f} .. {a['ci_high']:.2f}"
        t.add_row(escape(a["arm"]), str(a["n"]), _num(a.get("median")), _num(a.get("mean")),
                  "-" if a.get("cv") is None else f"{a['cv'] * 100:.1f}%", ci,
                  str(a.get("failed", 0)) + (f" {a['failures']}" if a.get("failures") else ""))
    console.print(t)
    if not m["comparisons"]:
        return
    c = Table(title=("Pairwise comparisons" if primary_of else f"{escape(m['metric'])}: pairwise comparisons")
              + " (b relative to a)"
              + (", p-values Holm-adjusted over the run's comparisons" if family else ""))
    for col in ("a", "b", "host", "ratio", "95% CI") + (("p (Holm)",) if family else ()) + ("verdict",):
        c.add_column(col, overflow="fold" if col in ("a", "b") else "ellipsis")
    for r in m["comparisons"]:
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


def _warnings(res: dict, console: Console) -> None:
    env = res.get("env_propagation", {}).get("vars", [])
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
    for w in res.get("warnings", []):
        console.print(f"[yellow]warning:[/] {escape(str(w))}")


def attribution_result(res: dict, console: Console) -> None:
    status = res["status"]
    color = {"culprits": "bold red", "no-regression": "green", "inconclusive": "yellow"}.get(status, "")
    console.print(f"[{color}]{status}[/]: good = {escape(repr(res['good']))}, bad = {escape(repr(res['bad']))}, "
                  f"metric {escape(str(res['metric']))}, {res['trials']} trials (campaign {res['campaign']})")
    if res.get("culprits"):
        console.print(f"culprits: [bold]{escape(', '.join(res['culprits']))}[/]")
    reg = res.get("regression")
    if isinstance(reg, dict) and reg.get("ratio") is not None:
        console.print(f"regression (bad vs good): {_pct(reg['ratio'])} "
                      f"[{_pct(reg.get('ci_low'))} .. {_pct(reg.get('ci_high'))}]")
    effects = res.get("effects") or []
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
    for it in res.get("interactions") or []:
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
    cands = res.get("candidates")
    if cands and res["status"] != "culprits":
        console.print(escape("most likely factors: " + ", ".join(f"{n} ({p:.2f})" for n, p in cands[:4])))
    plan = res.get("plan")
    if isinstance(plan, dict) and plan.get("trials_per_arm"):
        console.print(f"planning: to resolve {plan.get('min_effect', 0.02) * 100:.0f}% at this noise: "
                      f"about {plan['trials_per_arm']} trials per arm")
        res = dict(res, plan=None)
    if res.get("plan"):
        console.print(escape(f"planning: {res['plan']}"))
    _warnings(res, console)
    _go_on(res, console)


def bisect_result(res: dict, console: Console) -> None:
    status = res["status"]
    color = {"culprit": "bold red", "gradual": "bold red", "several": "bold red", "no-regression": "green",
             "inconclusive": "yellow"}.get(status, "")
    console.print(f"[{color}]{status}[/] ({res['trials']} trials, campaign {res['campaign']})")
    c = res.get("commit_info") or {}
    if status in ("gradual", "several"):
        _bisect_not_one_step(res, console)
        _warnings(res, console)
        _go_on(res, console)
        return
    if res.get("commit"):
        console.print(f"first bad commit: {res['commit']}")
        if c:
            console.print(f"  {escape(str(c.get('subject', '')))}\n  {escape(str(c.get('author', '')))}  {c.get('date', '')}")
        if res.get("posterior") is not None:
            console.print(f"  posterior mass on it: {res['posterior']:.3f}")
    for lv in (res.get("levels") or [])[:-1]:
        console.print(f"  (on the first-parent line {lv['good'][:12]}..{lv['bad'][:12]} the first bad commit "
                      f"was merge {str(lv['commit'])[:12]}; its side branch was bisected next)")
    eff = res.get("effect") or {}
    if eff.get("ratio") is not None:
        console.print(f"  effect: {_pct(eff['ratio'])} [{_pct(eff.get('ci_low'))} .. {_pct(eff.get('ci_high'))}]")
    if status == "inconclusive" and res.get("top"):
        # Where the probability sits, not the whole range.
        console.print("most likely first bad commits: "
                      + ", ".join(f"{sha[:12]} ({m:.0%})" for sha, m in res["top"]))
    elif res.get("range"):
        console.print(f"candidate range: {', '.join(x[:12] for x in res['range'])}")
    _warnings(res, console)
    _go_on(res, console)


def _bisect_not_one_step(res: dict, console: Console) -> None:
    rng = res.get("range") or []
    eff = res.get("effect") or {}
    if res["status"] == "gradual":
        span = f"{rng[0][:12]} .. {rng[-1][:12]} ({len(rng)} commits)" if rng else "?"
        console.print(f"the change is spread over {span}: no single commit explains it")
        if eff.get("ratio") is not None:
            console.print(f"  total effect: {_pct(eff['ratio'])} [{_pct(eff.get('ci_low'))} .. {_pct(eff.get('ci_high'))}]")
        return
    console.print("several steps, in history order:")
    for st in res.get("steps") or []:
        commits = st.get("commits") or []
        where = st.get("commit") or (f"{commits[0][:12]} .. {commits[-1][:12]}" if commits else "?")
        ci = st.get("effect_ci") or [None, None]
        effect = f"{_pct(st['effect'])} [{_pct(ci[0])} .. {_pct(ci[1])}]" if st.get("effect") is not None else "-"
        console.print(f"  {where}: {effect}")


def _go_on(res: dict, console: Console) -> None:
    """How the campaign goes on (``resume_with``, decided by the campaign): the trials already paid
    for are not lost, the same campaign continues."""
    for w in res.get("resume_with") or []:
        what = f"{w['option']} N (N > {w['more_than']})" if "more_than" in w else f"{w['option']} {w['value']}"
        why = ("to look for a smaller culprit beside the named ones, with the trials already made"
               if w["option"] == "--strategy" else "to go on with more trials in this campaign")
        console.print(escape(f"{why}: the same command with --resume {res['campaign']} {what}"))


def render_sweep(res: dict, console) -> None:
    """Print a sweep result for people (a rich Console is passed in by the entry point)."""
    from rich.markup import escape as e        # arms, subjects, reasons are the user's text
    from rich.table import Table
    reg = res.get("regressions") or []
    head = "[bold red]REGRESSION[/]" if reg else "[green]no regression[/]"
    console.print(f"{head} — " + e(f"sweep {res['sweep']}, night {res['night']}, {res['ref']} = "
                                   f"{res['commit'][:12]} {res.get('subject', '')} (campaign {res['campaign']})"))
    t = Table(title=e(f"{res['metric']} per arm ({'higher' if res['higher_is_better'] else 'lower'} is better)"))
    for col in ("arm", "status", "tonight", "last good", "change", "why"):
        t.add_column(col)
    for s in res["series"]:
        c = s.get("comparison") or {}
        meds = [m for m in s.get("medians", []) if m is not None]
        color = {"regression": "bold red", "improvement": "green"}.get(s["status"], "")
        t.add_row(e(s["arm"]), f"[{color}]{s['status']}[/]" if color else e(s["status"]),
                  f"{meds[-1]:.2f}" if meds else "-",
                  e((s.get("last_good_commit") or "-")[:12]),
                  f"{(c['ratio'] - 1) * 100:+.1f}%" if c.get("ratio") else "-", e(str(s.get("reason", ""))))
    console.print(t)
    for b in res.get("bisections") or []:
        if b.get("commit"):
            what = "first of several steps at" if b.get("status") == "several" else "first bad commit"
            console.print(e(f"bisection ({b['arm']}): {what} {b['commit']} [{b.get('status')}]"))
        else:
            console.print(e(f"bisection ({b['arm']}): {b.get('status')} {b.get('reason') or b.get('error') or ''}"))
    console.print(e(f"report: {res.get('report_command')}"))
