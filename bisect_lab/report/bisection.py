"""The report of a ``bisect`` campaign: the first bad commit and the path the search took."""
from __future__ import annotations

import statistics

from ..model import TrialResult
from ..results import BisectResult, result_from_dict
from ..store import Campaign, Store
from .document import Figure, Report, Section, Table, code, num, pct
from .sections import evidence_section, go_on, higher_is_better_of, metric_of, ok_values, setup_section, trust_sections

__all__ = ["bisect_report"]


def _effect_text(res: BisectResult) -> str:
    """The effect as "-20.0% (-22.0% .. -18.0%)": ``effect`` is ``{"ratio", "ci_low", "ci_high"}``;
    results stored by earlier versions hold the ratio itself with ``effect_ci``."""
    eff = res.effect
    if isinstance(eff, dict):
        ratio, lo, hi = eff.get("ratio"), eff.get("ci_low"), eff.get("ci_high")
    else:
        ratio, (lo, hi) = eff, (res.effect_ci or [None, None])
    return f"{pct(ratio)} ({pct(lo)} .. {pct(hi)})" if isinstance(ratio, (int, float)) else ""


def _effect_words(res: BisectResult, old: str, new: str, hib: bool) -> str:
    """``slow is 123.9% slower than fast (95% CI 109.1% .. 139.7% slower)``; "" without an effect."""
    from ..summaries import speed_interval, speed_words
    eff = res.effect
    if isinstance(eff, dict):
        ratio, lo, hi = eff.get("ratio"), eff.get("ci_low"), eff.get("ci_high")
    else:                             # stored by earlier versions: the ratio itself, with effect_ci
        ratio, (lo, hi) = eff, (res.effect_ci or [None, None])
    if not isinstance(ratio, (int, float)):
        return ""
    return f"{new} is {speed_words(ratio, hib)} than {old} (95% CI {speed_interval(lo, hi, hib)})"


def terms_of(c: Campaign) -> tuple[str, str, str]:
    """``(old, new, change)``: the campaign's names for its two sides and what it looked for
    (``bisect --look-for`` / ``--term-old`` / ``--term-new``; good, bad, regression by default)."""
    look_for = c.params.get("look_for") or "regression"
    default = ("slow", "fast") if look_for == "improvement" else ("good", "bad")
    return c.params.get("term_old") or default[0], c.params.get("term_new") or default[1], look_for


def _unconfirmed(res: BisectResult) -> bool:
    """The new-vs-old interval holds no change: a named commit is then only the likeliest place."""
    eff = res.effect if isinstance(res.effect, dict) else {}
    lo, hi = eff.get("ci_low"), eff.get("ci_high")
    return isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo <= 1 <= hi


def _answer(c: Campaign, res: BisectResult, status: str, good, bad) -> tuple[str, str]:
    """The one-sentence answer and its colour, from the result's ``status``, ``commit``, ``range``,
    ``steps`` and ``top``, in the campaign's terms."""
    old, new, change = terms_of(c)
    efftxt = _effect_text(res)
    info = res.commit_info if isinstance(res.commit_info, dict) else {}
    if status == "culprit" and res.commit:
        mass = res.mass if res.mass is not None else res.posterior
        # a performance engineer's words first ("96% sure", "N% slower"); the posterior and the
        # signed ratios stay in the detail sections below
        sure = (">99%" if mass >= 0.995 else f"{mass:.0%}") if isinstance(mass, (int, float)) else None
        words = _effect_words(res, old, new, higher_is_better_of(c))
        return (f"First {new} commit: **`{res.commit[:12]}`** {info.get('subject') or ''}"
                + (f" ({sure} sure)" if sure else "")
                + (f"; {words}" if words else "")
                + (f". Not confirmed: the {new}-vs-{old} interval includes no change" if _unconfirmed(res) else "")
                + "."), "bad"
    if status == "gradual":
        rng = res.range or []
        return ((f"A gradual change spread over {len(rng)} commits, `{str(rng[0])[:10]}` .. `{str(rng[-1])[:10]}`: "
                 "no single commit explains it") if rng else "A gradual change: no single commit explains it") \
            + (f"; total effect {efftxt}" if efftxt else "") + ".", "bad"
    if status == "several":
        parts = []
        for step in res.steps or []:
            sci = step.get("effect_ci") or [None, None]
            where = (f"`{str(step['commit'])[:12]}`" if step.get("commit")
                     else f"one of {len(step.get('commits') or [])} commits")
            parts.append(where + (f" ({pct(step['effect'])}, {pct(sci[0])} .. {pct(sci[1])})"
                                  if step.get("effect") is not None else ""))
        return f"Several steps: {'; '.join(parts)}.", "bad"
    if status == "no-regression":
        return (f"No {change} between `{str(good)[:12]}` and `{str(bad)[:12]}`"
                + (f" ({efftxt})" if efftxt else "") + "."), "good"
    if c.status != "done":
        return f"The bisection did not finish (status {c.status}); resume it with --resume {c.id}.", "unknown"
    reason = res.reason or "budget"
    if res.top:
        return (f"Inconclusive ({reason}): the most likely first {new} commits are "
                + ", ".join(f"`{str(sha)[:10]}` ({m:.0%})" for sha, m in res.top) + "."), "unknown"
    rng = res.range or []
    return (f"Inconclusive ({reason}): the first {new} commit is one of "
            f"{len(rng)} commits, {', '.join(f'`{x[:10]}`' for x in rng[:5])}" + ("…" if len(rng) > 5 else "") + "."), "unknown"


def _path_section(res: BisectResult, trials: list[TrialResult], metric: str, status: str, good, bad,
                  terms: tuple[str, str, str] = ("good", "bad", "regression")) -> Section:
    from .. import report_plots as plots
    s = Section("Bisection path")
    path = [(int(p), v) for p, v in (res.path or [])]
    sha_of = {}
    for (p, _), (sha, _) in zip(res.path or [], res.get("path_commits") or []):
        sha_of[int(p)] = sha
    for i, sha in enumerate(res.commits or []):      # the full candidate list, when recorded
        sha_of.setdefault(i, sha)
    if good:
        sha_of.setdefault(0, good)
    n = int(res.n or (max(sha_of) + 1 if sha_of else 0))
    labels = [sha_of.get(i, f"#{i}") for i in range(n)]
    if not path:
        # no stored path (interrupted): rebuild it from the trials in run order
        pos = {sha: i for i, sha in enumerate(labels)}
        path = [(pos.get(t.commit, 0), t.metrics.get(metric) if t.ok else None) for t in trials]
    png = plots.bisection_path(path, labels, culprit=res.index if status == "culprit" else None, metric=metric,
                               discounted=set(res.discounted or []))
    if png:
        s.add(Figure(png, "Left: every measurement by commit position (oldest left). Right: which commit each trial "
                          "measured — the search first confirms both ends, then probes where it learns most.",
                     "bisection-path"))
    rows = []
    per: dict[str, list[float]] = {}
    fails: dict[str, int] = {}
    for t in trials:
        if t.ok and t.metrics.get(metric) is not None:
            per.setdefault(t.commit or "?", []).append(float(t.metrics[metric]))
        elif not t.ok:
            fails[t.commit or "?"] = fails.get(t.commit or "?", 0) + 1
    order = sorted(set(per) | set(fails), key=lambda sha: labels.index(sha) if sha in labels else 10 ** 6)
    for sha in order:
        v = per.get(sha, [])
        old, new = terms[0], terms[1]
        mark = (f" ← first {new}" if sha == res.commit else f" ({old} end)" if sha == good
                else f" ({new} end)" if sha == bad else "")
        rows.append([str(labels.index(sha)) if sha in labels else "?", code(sha[:12]) + mark, str(len(v)),
                     num(statistics.median(v)) if v else "-", str(fails.get(sha, 0))])
    if rows:
        s.add(Table(["position", "commit", "n", "median", "untestable/failed"], rows))
    if res.untestable:
        s.add([f"`{k[:12]}` untestable: {v}" for k, v in res.untestable.items()])
    return s


def bisect_report(store: Store, c: Campaign, trials: list[TrialResult]) -> Report:
    """The report of a bisection, from its stored :class:`BisectResult` (a campaign that stored
    none reads as unfinished, its path rebuilt from the trials)."""
    stored = result_from_dict(c.kind, c.result)
    res = stored if isinstance(stored, BisectResult) else BisectResult()
    metric, hib = metric_of(c, stored, trials), higher_is_better_of(c)
    status = res.status if stored is not None else c.status
    good, bad = res.good or c.params.get("good"), res.bad or c.params.get("bad")
    answer, st = _answer(c, res, status, good, bad)
    terms = terms_of(c)
    looked = [["looked for", f"the first commit that is {terms[1]} (a {terms[2]}), {terms[0]} before it"]] \
        if terms != ("good", "bad", "regression") else []
    sections = [setup_section(c, trials, metric, hib, looked + [[terms[0], code(str(good)[:12])],
                                                                [terms[1], code(str(bad)[:12])],
                                                        ["arm on every commit", code(res.arm or c.params.get("arm"))],
                                                        ["candidate commits", str(res.candidates or c.params.get("candidates") or "-")]])]
    sections.append(_path_section(res, trials, metric, status, good, bad, terms))
    sections.append(evidence_section(trials, metric, hib, [], by_commit=True))
    sections += trust_sections(store, trials, metric, hib, ok_values(trials, metric))
    if res.warnings:
        w = Section("Warnings")
        w.add(list(res.warnings))
        sections.append(w)
    answer += go_on(c, stored)
    return Report(f"bisect-lab report: bisection {c.id}", answer, st,
                  [(terms[0], str(good)[:12]), (terms[1], str(bad)[:12]), ("trials", str(len(trials)))], sections)
