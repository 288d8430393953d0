"""Human-readable output of campaign results (layer 6). Only entry points call this.

Each entry takes a typed result (:mod:`bisect_lab.results`) or its JSON object (the redacted
``to_dict()`` the CLI holds), reads it through ``from_dict`` and prints its fields.
"""
from __future__ import annotations

import math
import re

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .results import AttributionResult, BisectResult, Result, RunResult, SweepNight
from .summaries import comparison_sentence, speed_interval, speed_words


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
        _metric_tables(*block, family, console, primary_of=res if k == 0 else None, run_min_effect=res.min_effect)
        _two_levels(res if k == 0 else res.secondary[k - 1], console)
    _warnings(res, console)
    _go_on(res, console)


def _arm_label(spec: str, typed: dict, labels: dict | None = None) -> str:
    """The arm as the user typed it beside its canonical form: ``only a,b  (= all-minus c,d)``;
    ``labels`` name an arm outright (``compare``: the command it runs)."""
    if labels and labels.get(spec):
        return labels[spec]
    return f"{typed[spec]}  (= {spec})" if typed.get(spec) else spec


def _cv_text(a: dict) -> str:
    """The CV, or "-" when one reading (or none) cannot have one."""
    cv = a.get("cv")
    return "-" if (a.get("n") or 0) < 2 or not isinstance(cv, (int, float)) or not math.isfinite(cv) \
        else f"{cv * 100:.1f}%"


def _settle_seen(r: dict, arms: list[dict], min_effect: float | None) -> tuple[int, float] | None:
    """``(trials per arm, percent)`` that would settle the difference this comparison saw, at the
    two arms' noise (the run's ``plan_per_arm`` is for ``min_effect``, which says little beside a
    20% difference); a difference below ``min_effect`` is planned at ``min_effect``."""
    from .stats import plan_trials
    ratio = r.get("ratio")
    cvs = [a.get("cv") for a in arms if a.get("arm") in (r.get("a"), r.get("b"))]
    if not r.get("plan_per_arm") or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0 \
            or len(cvs) != 2 or not all(isinstance(c, (int, float)) and math.isfinite(c) for c in cvs):
        return None
    effect = max(abs(ratio - 1), min_effect or 0.02)
    try:
        n = plan_trials(math.sqrt((cvs[0] ** 2 + cvs[1] ** 2) / 2), min_effect=effect)
    except ValueError:
        return None
    return n, effect * 100


def _metric_tables(metric: str, hib: bool, arms: list[dict], comparisons: list[dict], family: bool,
                   console: Console, primary_of: RunResult | None, run_min_effect: float | None = None) -> None:
    """One metric's arms table and comparisons table; ``primary_of``: the run, for the primary metric."""
    direction = f"{metric} ({'higher' if hib else 'lower'} is better)"
    typed = (primary_of.get("typed") if primary_of is not None else None) or {}
    labels = (primary_of.get("labels") if primary_of is not None else None) or {}
    # the experiment's name and the metric's are the user's text: escaped like the arms
    title = escape(f"{primary_of.experiment}: {direction} — campaign {primary_of.campaign}" if primary_of
                   else f"{direction} — secondary metric")
    t = Table(title=title)
    for col in ("arm", "n", "median", "mean", "CV", "95% CI", "failed"):
        # fold, not ellipsis: two arms that differ by a secret's tag (<redacted:3f2a1b9c>) stay apart
        t.add_column(col, justify="left" if col == "arm" else "right", overflow="fold" if col == "arm" else "ellipsis")
    for a in arms:
        # one reading has no interval ("5091.58 .. 5091.58" read as a certainty)
        ci = "-" if a.get("ci_low") is None or (a.get("n") or 0) < 2 else f"{a['ci_low']:.2f} .. {a['ci_high']:.2f}"
        t.add_row(escape(_arm_label(a["arm"], typed, labels)), str(a["n"]), _num(a.get("median")), _num(a.get("mean")),
                  _cv_text(a), ci,
                  str(a.get("failed", 0)) + (f" {a['failures']}" if a.get("failures") else ""))
    console.print(t)
    if not comparisons:
        return
    min_effect = primary_of.min_effect if primary_of is not None else run_min_effect
    c = Table(title=("Comparisons" if primary_of else f"{escape(metric)}: comparisons")
              + " (each arm against the one it is compared with"
              + (f"; the baseline is {escape(_arm_label(str(primary_of.get('baseline')), typed, labels))}"
                 if primary_of is not None
                 and primary_of.get("baseline") else "")
              + ")" + ("; p-values Holm-adjusted over the run's comparisons" if family else ""))
    for col in ("arm", "against", "host", "change", "95% CI") + (("p (Holm)",) if family else ()) + ("verdict",):
        c.add_column(col, overflow="fold" if col in ("arm", "against") else "ellipsis")
    found = []
    for r in comparisons:
        change = speed_words(r.get("ratio"), hib)
        ci = speed_interval(r.get("ci_low"), r.get("ci_high"), hib)
        verdict = r["verdict"]
        if verdict == "different":
            slower = change.endswith("slower")
            verdict = "[bold red]slower[/]" if slower else "[green]faster[/]"
            found.append(r)
        elif verdict == "same":
            verdict = "no difference" + (f" (within ±{min_effect * 100:g}%)" if min_effect else "")
        else:
            verdict = "not settled"
            settle = _settle_seen(r, arms, min_effect)
            if settle:
                verdict += f" (about {settle[0]} trials per arm would settle a {settle[1]:.0f}% difference)"
        p_adj = (_num(r.get("p_adjusted"), "{:.2g}"),) if family else ()
        c.add_row(escape(_arm_label(r["b"], typed, labels)), escape(_arm_label(r["a"], typed, labels)), escape(r["host"]),
                  change, ci, *p_adj, verdict)
    console.print(c)
    for r in found:
        hosts = {x["host"] for x in comparisons}
        named = dict(r, a=labels.get(r["a"]) or typed.get(r["a"]) or r["a"],    # as the user typed them
                     b=labels.get(r["b"]) or typed.get(r["b"]) or r["b"])
        console.print(escape(comparison_sentence(named, hib, min_effect) + (f" on {r['host']}" if len(hosts) > 1 else "")))


def _two_levels(block, console: Console) -> None:
    """A metric measured in sessions: its variance components in one line, and with several hosts
    each pair's effect pooled over the hosts (summaries.run_summary's ``variance``, ``across_hosts``)."""
    from .summaries import variance_line
    line = variance_line(block.get("variance"))
    if line:
        console.print(escape(f"{block.get('metric') or ''} noise: {line}".strip()))
    hib = block.get("higher_is_better", True)
    for r in block.get("across_hosts") or []:
        if r.get("ratio") is not None:
            console.print(escape(f"pooled over {r.get('hosts')} hosts: "
                                 + comparison_sentence(r, hib, block.get("min_effect"))))


def _warnings(res: Result, console: Console, plain=None) -> None:
    """Env propagation and the result's warnings (``plain``: a warning in the console's words)."""
    # a comparison's commands travel in BISECT_LAB_CMD: that it reached the processes says nothing
    env = [v for v in (res.get("env_propagation") or {}).get("vars", []) if v.get("var") != "BISECT_LAB_CMD"]
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
        console.print(f"[yellow]warning:[/] {escape(plain(str(w)) if plain else str(w))}")


def attribution_result(res: dict | AttributionResult, console: Console) -> None:
    """An attribution's status, culprits, effects, interactions, planning line, warnings."""
    res = _typed(res, AttributionResult)
    status = res.status
    color = {"culprits": "bold red", "no-regression": "green", "inconclusive": "yellow"}.get(status, "")
    typed = res.get("typed") or {}

    def said(spec) -> str:      # as typed, beside the canonical form
        return f"{typed[spec]!r} (= {spec!r})" if typed.get(spec) else repr(spec)
    console.print(f"[{color}]{status}[/]: good = {escape(said(res.good))}, bad = {escape(said(res.bad))}, "
                  f"metric {escape(str(res.metric))}, {res.trials} trials (campaign {res.campaign})")
    if res.culprits:
        console.print(f"culprits: [bold]{escape(', '.join(res.culprits))}[/]")
    hib = res.higher_is_better
    reg = res.regression
    if isinstance(reg, dict) and reg.get("ratio") is not None:
        line = (f"{res.bad} is {speed_words(reg['ratio'], hib)} than {res.good} "
                f"(95% CI {speed_interval(reg.get('ci_low'), reg.get('ci_high'), hib)})")
        if res.culprits and _holds_no_change(reg):
            line += ": not confirmed, the interval includes no change"
        console.print(escape(line))
    effects = res.effects or []
    if effects:
        t = Table(title="What each factor costs (that factor alone switched from its good to its bad value)")
        for col in ("factor", "kind", "change", "95% CI", "part of bad vs good"):
            t.add_column(col)
        over = False
        for e in effects:
            eff = e.get("effect") if isinstance(e.get("effect"), dict) else e
            share = e.get("share")
            if not isinstance(share, (int, float)) or not math.isfinite(share):
                share_txt = "-"
            elif share > 1.005:
                share_txt, over = f"{share * 100:.0f}% *", True
            else:
                share_txt = f"{max(share, 0) * 100:.0f}%"
            t.add_row(escape(str(e.get("name") or e.get("factor"))), str(e.get("kind", "main")),
                      speed_words(eff.get("ratio"), hib), speed_interval(eff.get("ci_low"), eff.get("ci_high"), hib),
                      share_txt)
        console.print(t)
        if over:
            console.print("* over 100%: this factor alone costs more than bad vs good in total; another factor "
                          "or a combination gives part of it back (the report's detail has the intervals)")
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
    _structure(res, console)
    cands = res.candidates
    if cands and status != "culprits":
        console.print(escape("most likely factors: " + ", ".join(f"{n} ({p:.2f})" for n, p in cands[:4])))
    plan = res.plan
    if isinstance(plan, dict) and plan.get("trials_per_arm"):
        line = _plan_for_what_was_seen(plan, reg, res.min_effect) if status == "inconclusive" else None
        if line:
            console.print(line)
    elif isinstance(plan, dict) and status == "inconclusive":
        # no estimate yet (fewer than two readings of good or bad): say so, not the raw object
        console.print("too few readings of good and bad yet to say how many trials would settle it")
    elif plan and not isinstance(plan, dict):
        console.print(escape(f"planning: {plan}"))
    _warnings(res, console, plain=_plain_note)
    _go_on(res, console)


def _structure(res: AttributionResult, console: Console) -> None:
    """The answer's shape (groups that act together or each do the whole damage) and what dropping
    each named factor alone gives, predicted and, where that arm was measured, measured."""
    extra = res.extra if isinstance(res.extra, dict) else {}
    st = extra.get("structure")
    if isinstance(st, dict) and st.get("kind") not in (None, "additive") and st.get("text"):
        console.print(escape(f"structure: {st['text']}"))
    drop = [d for d in extra.get("drop_alone") or [] if isinstance(d, dict)]
    if not drop:
        return
    t = Table(title="Dropping one factor alone from bad (predicted by the answer's model; measured where that arm was)")
    for col in ("factor", "predicted", "95% CI", "change from bad", "measured", "agrees"):
        t.add_column(col)
    for d in drop:
        agrees = d.get("agrees")
        t.add_row(escape(str(d.get("factor"))), _num(d.get("predicted"), "{:.4g}"),
                  f"{_num(d.get('predicted_low'), '{:.4g}')} .. {_num(d.get('predicted_high'), '{:.4g}')}",
                  _pct(1 + d["predicted_change"]) if isinstance(d.get("predicted_change"), (int, float)) else "-",
                  f"{_num(d.get('measured'), '{:.4g}')} (n={d.get('n')})" if d.get("measured") is not None else "not measured",
                  "-" if agrees is None else "yes" if agrees else "[bold red]NO[/]")
    console.print(t)


def _holds_no_change(est: dict) -> bool:
    """The 95% interval of a ratio contains 1 (no change)."""
    lo, hi = est.get("ci_low"), est.get("ci_high")
    return isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo <= 1 <= hi


def _plan_for_what_was_seen(plan: dict, reg, min_effect) -> str | None:
    """How many trials would settle the difference actually seen (not ``min_effect``, unless the
    difference is smaller), at the noise seen; None when there is nothing to settle."""
    from .stats import plan_trials
    cvs = [c for c in (plan.get("cv_good"), plan.get("cv_bad")) if isinstance(c, (int, float)) and math.isfinite(c)]
    ratio = reg.get("ratio") if isinstance(reg, dict) else None
    floor = float(min_effect or plan.get("min_effect") or 0.02)
    if not cvs or not isinstance(ratio, (int, float)) or ratio <= 0:
        return None
    effect = max(abs(ratio - 1), floor)
    try:
        n = plan_trials(max(cvs), min_effect=effect)
    except ValueError:
        return None
    return (f"to settle a {effect * 100:.0f}% difference at this noise (CV {max(cvs) * 100:.1f}%): "
            f"about {n} trials per arm")


# Notes of the staged attribution, in plain words for the console (the report keeps them as written).
_NOTES = ((re.compile(r"^(?P<who>.+): named by stage (?P<k>\d+) without its own confirmation step .*"
                      r"stage (?P<k2>\d+) then attributed what was left$"),
           "{who}: found by search stage {k} and not re-measured on its own; stage {k2} then explained the rest"),
          (re.compile(r"^(?P<who>.+): named by a stage that ran out of budget before its confirmation step"),
           "{who}: found before the budget ran out, not yet re-measured on its own (more trials would check it)"),
          (re.compile(r"^(?P<who>.+): named by a stage that handed over before its confirmation step because"),
           "{who}: found by a search whose readings fit no single answer, not yet re-measured on its own "
           "(more trials would check it)"),
          # the noise warning in what it means for the answer, not as a plan for min_effect
          (re.compile(r"^(?P<pre>.*)noisy arms \(CV good (?P<g>[^,]+), bad (?P<b>[^)]+)\): to resolve (?P<e>[\d.]+%) "
                      r"at this noise: about (?P<n>\d+) trials per arm$"),
           "{pre}noisy readings (CV good {g}, bad {b}): a difference as small as {e} would need about {n} "
           "trials per arm to be told from none"))


def _plain_note(w: str) -> str:
    for pattern, words in _NOTES:
        m = pattern.match(w)
        if m:
            return words.format(**m.groupdict())
    return w


def bisect_result(res: dict | BisectResult, console: Console) -> None:
    """A bisection's status, the first bad commit (or the range, the steps), its effect, warnings;
    in the campaign's terms (``--look-for improvement``, ``--term-old`` / ``--term-new``)."""
    res = _typed(res, BisectResult)
    status = res.status
    old, new, change = bisect_terms(res)
    hib = res.get("higher_is_better", True)
    bad_colour = "bold red" if change == "regression" else "bold green"
    color = {"culprit": bad_colour, "gradual": bad_colour, "several": bad_colour, "no-regression": "green",
             "inconclusive": "yellow"}.get(status, "")
    shown = f"no-{change}" if status == "no-regression" else status
    console.print(f"[{color}]{shown}[/] ({res.trials} trials, campaign {res.campaign})")
    c = res.commit_info or {}
    if status in ("gradual", "several"):
        _bisect_not_one_step(res, console)
        _warnings(res, console)
        _go_on(res, console)
        return
    if res.commit:
        console.print(escape(f"first {new} commit: {res.commit}"))
        if c:
            console.print(f"  {escape(str(c.get('subject', '')))}\n  {escape(str(c.get('author', '')))}  {c.get('date', '')}")
        if res.posterior is not None:
            sure = ">99%" if 0.995 <= res.posterior < 1 else f"{res.posterior:.0%}"
            console.print(f"  how sure: {sure} that it is this commit")
    for lv in (res.levels or [])[:-1]:
        console.print(escape(f"  (on the first-parent line {lv['good'][:12]}..{lv['bad'][:12]} the first {new} commit "
                             f"was merge {str(lv['commit'])[:12]}; its side branch was bisected next)"))
    eff = _effect(res)
    if eff.get("ratio") is not None:
        console.print(escape(f"  effect: {new} is {speed_words(eff['ratio'], hib)} than {old} "
                             f"(95% CI {speed_interval(eff.get('ci_low'), eff.get('ci_high'), hib)})"))
        if res.commit and _holds_no_change(eff):
            console.print(escape(f"  not confirmed: the {new}-vs-{old} interval includes no change, so this "
                                 f"commit is only the most likely place of a {change} that may not be there"))
    if status == "inconclusive" and res.top:
        # Where the probability sits, not the whole range.
        console.print(escape(f"most likely first {new} commits: "
                             + ", ".join(f"{sha[:12]} ({m:.0%})" for sha, m in res.top)))
    elif status == "inconclusive" and res.range:
        console.print(f"first {escape(new)} commit not found: one of {len(res.range)} commits, "
                      f"{res.range[0][:12]} .. {res.range[-1][:12]}")
    elif res.range and not (res.commit and len(res.range) == 1):     # not the named commit again
        console.print(f"candidate range: {', '.join(x[:12] for x in res.range)}")
    _warnings(res, console)
    _go_on(res, console)


def bisect_terms(res) -> tuple[str, str, str]:
    """``(old, new, change)``: what a bisection calls its two sides and what it looks for
    (``good``, ``bad``, ``regression`` unless the campaign said otherwise)."""
    look_for = res.get("look_for") or "regression"
    default = ("slow", "fast") if look_for == "improvement" else ("good", "bad")
    return res.get("term_old") or default[0], res.get("term_new") or default[1], look_for


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
