"""``bisect-lab report CAMPAIGN|SWEEP``: a Markdown file or a self-contained HTML page (layer 6).

A report is written for someone who did not run the campaign: it opens with the answer in one
sentence, then says what was compared and how, then shows the evidence (tables and figures: each
arm's values in run order, the distributions, the effect of each factor, the bisection path, sweep
series with change points), then what could make the numbers wrong (environment differences between
trials, env vars that did not reach the benchmark's processes, failed trials with their errors).

``what`` is a campaign id (a unique prefix is enough) or the name of a sweep. HTML embeds its
figures as base64 PNGs; Markdown writes them next to the file (``<stem>_files/``).

API::

    from bisect_lab.report import build_report, write_report
    path = write_report(store, "20261129-0748", fmt="html", out="report.html")
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .errors import UsageError
from .model import TrialResult
from .store import Campaign, Store

__all__ = ["Report", "build_report", "write_report", "to_markdown", "to_html"]


# --------------------------------------------------------------------------- document model
@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    png: bytes
    caption: str
    name: str


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)      # str (paragraph, Markdown inline), Table, Figure, list[str]

    def p(self, text: str):
        self.blocks.append(text)

    def add(self, block):
        if block is not None:
            self.blocks.append(block)


@dataclass
class Report:
    title: str
    answer: str                      # the one-sentence answer, first thing a reader sees
    status: str                      # "bad" | "good" | "unknown": the colour of the answer box
    facts: list[tuple[str, str]]     # key facts under the answer
    sections: list[Section]


# --------------------------------------------------------------------------- small formatting helpers
def _pct(r, digits=1) -> str:
    return "-" if r is None or (isinstance(r, float) and not math.isfinite(r)) else f"{(r - 1) * 100:+.{digits}f}%"


def _num(x, fmt="{:.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return fmt.format(x)


def _when(ts) -> str:
    if not ts:
        return "-"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _dur(s) -> str:
    if s is None:
        return "-"
    s = float(s)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _code(s) -> str:
    return f"`{s}`" if s else "-"


def _first_line(text: str, n: int = 160) -> str:
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= n else line[: n - 1] + "…"


def _ok_values(trials: list[TrialResult], metric: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for t in trials:
        v = t.metrics.get(metric) if t.ok else None
        if v is not None and isinstance(v, (int, float)) and math.isfinite(v):
            out.setdefault(t.arm, []).append(float(v))
    return out


def _metric_of(c: Campaign, trials: list[TrialResult]) -> str:
    res = c.result or {}
    m = res.get("metric") or c.params.get("metric")
    if m:
        return m
    counts: dict[str, int] = {}
    for t in trials:
        for k in t.metrics:
            counts[k] = counts.get(k, 0) + 1
    for pref in ("output_throughput", "total_throughput", "request_throughput"):
        if pref in counts:
            return pref
    return max(counts, key=counts.get) if counts else "value"


def _hib(c: Campaign) -> bool:
    res = c.result or {}
    v = res.get("higher_is_better", c.params.get("higher_is_better"))
    return True if v is None else bool(v)


# --------------------------------------------------------------------------- building
def build_report(store: Store, what: str) -> Report:
    """The report of a campaign (id, unique prefix, or ``latest``) or of a sweep (its name);
    every text in it has passed the redaction policy (a database written before it had one may
    hold secrets in errors or output tails)."""
    return _redacted(_build_report(store, what))


def _redacted(rep: Report) -> Report:
    from .redact import redact_text

    def block(b):
        if isinstance(b, str):
            return redact_text(b)
        if isinstance(b, Table):
            return Table([redact_text(h) for h in b.headers],
                         [[redact_text(c) if isinstance(c, str) else c for c in row] for row in b.rows],
                         redact_text(b.note))
        if isinstance(b, Figure):
            return Figure(b.png, redact_text(b.caption), b.name)
        if isinstance(b, list):
            return [block(x) for x in b]
        return b
    return Report(title=redact_text(rep.title), answer=redact_text(rep.answer), status=rep.status,
                  facts=[(redact_text(k), redact_text(v) if isinstance(v, str) else v) for k, v in rep.facts],
                  sections=[Section(redact_text(sec.title), [block(b) for b in sec.blocks]) for sec in rep.sections])


def _build_report(store: Store, what: str) -> Report:
    from .nights import sweep_names
    if what in sweep_names(store):
        return _sweep_report(store, what)
    try:
        everything = store.campaigns() if what == "latest" else []
        c = everything[-1] if everything else store.campaign(what)
    except Exception as e:
        names = sweep_names(store)
        recent = [x.id for x in store.campaigns()[-5:]]
        raise UsageError(f"{e}; recent campaigns: {', '.join(recent) or 'none'}"
                         + (f"; sweeps: {', '.join(names)}" if names else "")) from None
    trials = store.trials(c.id)
    kind = c.kind
    if kind == "attribute":
        return _attribution_report(store, c, trials)
    if kind == "bisect":
        return _bisect_report(store, c, trials)
    if kind == "sweep" and c.status == "done":
        return _sweep_report(store, c.params.get("sweep") or c.id, upto=c.id)
    return _run_report(store, c, trials)


def _setup_section(c: Campaign, trials: list[TrialResult], metric: str, hib: bool, extra: list[tuple[str, str]] = ()) -> Section:
    s = Section("What was measured")
    ok = [t for t in trials if t.ok]
    hosts = sorted({t.host for t in trials})
    commits = sorted({t.commit for t in trials if t.commit})
    started = min((t.started for t in trials), default=c.created)
    ended = max((t.started + t.duration_s for t in trials), default=c.finished or c.created)
    rows = [["campaign", _code(c.id)], ["kind", c.kind], ["experiment", _code(c.experiment)],
            ["metric", f"{_code(metric)}, {'higher' if hib else 'lower'} is better"],
            ["trials", f"{len(trials)} ({len(ok)} measured, {len(trials) - len(ok)} failed)"],
            ["hosts", ", ".join(hosts) or "-"],
            ["base commit" if len(commits) <= 1 else "commits", ", ".join(_code(x[:12]) for x in commits[:6])
             + (f" and {len(commits) - 6} more" if len(commits) > 6 else "") if commits else "-"],
            ["when", f"{_when(started)} — {_when(ended)} ({_dur(ended - started)})"],
            ["status", c.status]]
    rows += [[k, v] for k, v in extra]
    # what the campaign ran under (a resume may have raised it: the params hold the latest)
    if isinstance(c.params.get("max_trials"), int) and c.kind in ("attribute", "bisect"):
        rows.append(["budget", f"{c.params['max_trials']} trials"])
    if isinstance(c.params.get("repeat"), int) and c.kind == "run":
        rows.append(["repeat", f"{c.params['repeat']} per arm"])
    if c.params.get("node"):
        rows.append(["pytest node", _code(c.params["node"])])
    s.add(Table(["", ""], rows))
    seed = c.params.get("seed")
    if seed is not None:
        s.p(f"Arms were interleaved in a seeded random order (seed {seed}), so slow drift of the machine "
            f"(clocks, temperature) spreads over all arms instead of biasing one.")
    return s


def _arms_table(values: dict[str, list[float]], trials: list[TrialResult], arms: list[str]) -> Table:
    from .stats.summary import summarize
    fails: dict[str, int] = {}
    for t in trials:
        if not t.ok:
            fails[t.arm] = fails.get(t.arm, 0) + 1
    rows = []
    for a in arms:
        v = values.get(a, [])
        if v:
            s = summarize(v)
            rows.append([_code(a), str(s.n), _num(s.median), f"{_num(s.ci_low)} .. {_num(s.ci_high)}",
                         "-" if not math.isfinite(s.cv) else f"{s.cv * 100:.1f}%", f"{_num(s.min)} .. {_num(s.max)}",
                         str(fails.get(a, 0))])
        else:
            rows.append([_code(a), "0", "-", "-", "-", "-", str(fails.get(a, 0))])
    return Table(["arm", "n", "median", "95% CI of median", "CV", "range", "failed"], rows,
                 note="CI of the median: distribution-free (order statistics); CV = standard deviation / mean.")


def _comparisons(blocks, arms, min_effect, alpha) -> list[tuple[Table | None, list[str]]]:
    """Reference arm against each other arm, per metric; ``blocks``: (metric, values, hib), the
    primary metric first. One Holm family over every metric's comparisons, decided as `run` decides
    it (summaries.holm_comparisons). Returns a table and sentences per block."""
    from .stats.compare import compare
    from .summaries import holm_comparisons
    ref = arms[0] if arms else None
    pairs = [(ref, b) for b in arms[1:]]
    compared = {(k, a, b): compare(values[a], values[b], higher_is_better=hib, min_effect=min_effect, alpha=alpha)
                for k, (_, values, hib) in enumerate(blocks) for a, b in pairs
                if len(values.get(a, [])) >= 2 and len(values.get(b, [])) >= 2}
    holm = {key: {"p_value": c.p_value, "verdict": c.verdict} for key, c in compared.items()}
    holm_comparisons(list(holm.values()), alpha)       # adds p_adjusted; downgrades what does not survive
    n = len(compared)
    out = []
    for k, (metric, values, hib) in enumerate(blocks):
        rows, sentences = [], []
        on = f" on {metric}" if k else ""
        for a, b in pairs:
            if (k, a, b) not in compared:
                rows.append([_code(a), _code(b), "-", "-", "-", "-", "not enough successful trials"])
                continue
            c, h = compared[(k, a, b)], holm[(k, a, b)]
            if "unadjusted_verdict" in h:
                verdict = f"unknown: significant alone, not after Holm's correction over {n} comparisons"
                sentences.append(f"`{b}` vs `{a}`{on}: {_pct(c.ratio)} ({_pct(c.ci_low)} .. {_pct(c.ci_high)}), "
                                 f"not significant once the {n} comparisons are corrected for (Holm).")
            elif c.regression:
                verdict = "**worse** (significant)"
                sentences.append(f"`{b}` is **{abs(c.ratio - 1) * 100:.1f}% {'lower' if hib else 'higher'}**{on} "
                                 f"than `{a}` ({_pct(c.ci_low)} .. {_pct(c.ci_high)}, p={c.p_value:.2g}): a regression.")
            elif c.improvement:
                verdict = "better (significant)"
                sentences.append(f"`{b}` is {abs(c.ratio - 1) * 100:.1f}% better{on} than `{a}` "
                                 f"({_pct(c.ci_low)} .. {_pct(c.ci_high)}).")
            elif c.verdict == "same":
                verdict = f"same (within ±{min_effect * 100:g}%)"
                sentences.append(f"`{b}` and `{a}` perform the same{on} within ±{min_effect * 100:g}%.")
            else:
                verdict = "unknown: more trials needed"
                sentences.append(f"`{b}` vs `{a}`{on}: {_pct(c.ratio)}, but the interval {_pct(c.ci_low)} .. "
                                 f"{_pct(c.ci_high)} is too wide to decide.")
            rows.append([_code(a), _code(b), _pct(c.ratio), f"{_pct(c.ci_low)} .. {_pct(c.ci_high)}",
                         f"{c.p_value:.2g}", f"{h.get('p_adjusted', c.p_value):.2g}", verdict])
        table = None if not rows else Table(
            ["reference a", "arm b", "b vs a", "95% CI", "p", "p (Holm)", "verdict"], rows,
            note="Ratio of geometric means b/a with a Welch interval on log values (no equal-variance or "
                 "normality assumption); p (Holm): adjusted for the number of comparisons in the report"
                 + (" (every metric's)" if len(blocks) > 1 else "") + ".")
        out.append((table, sentences))
    return out


def _run_report(store: Store, c: Campaign, trials: list[TrialResult]) -> Report:
    from . import report_plots as plots
    metric, hib = _metric_of(c, trials), _hib(c)
    trials_m = [t for t in trials if t.tag != "warmup"]
    arms = list(dict.fromkeys(c.params.get("arms") or [t.arm for t in trials_m]))
    values = _ok_values(trials_m, metric)
    min_effect = float(c.params.get("min_effect") or 0.02)
    alpha = float(c.params.get("alpha") or 0.05)
    secondary = [(m["metric"], bool(m["higher_is_better"])) for m in (c.result or {}).get("secondary", [])]
    blocks = [(metric, values, hib)] + [(m, _ok_values(trials_m, m), h) for m, h in secondary]
    (table, sentences), *more = _comparisons(blocks, arms, min_effect, alpha)
    bad = any("a regression" in s for s in sentences)
    unknown = any("too wide" in s for s in sentences)
    if not values:
        answer, status = "No trial produced a measurement: see Failures below.", "bad"
    elif sentences:
        answer, status = " ".join(sentences[:3]), ("bad" if bad else "unknown" if unknown else "good")
    else:
        answer, status = f"Measured {len(arms)} arm(s); nothing to compare.", "unknown"
    sections = [_setup_section(c, trials, metric, hib)]
    s = Section("Arms")
    s.add(_arms_table(values, trials_m, arms))
    s.add(table)
    sections.append(s)
    for (m, m_values, m_hib), (m_table, m_sentences) in zip(blocks[1:], more):
        s = Section(f"Secondary metric: {m} ({'higher' if m_hib else 'lower'} is better)")
        if m_sentences:
            s.p(" ".join(m_sentences))
        s.add(_arms_table(m_values, trials_m, arms))
        s.add(m_table)
        sections.append(s)
    sections.append(_evidence_section(trials_m, metric, hib, arms))
    sections += _trust_sections(store, trials_m, metric, hib, values)
    facts = [("experiment", c.experiment_name or c.experiment or "-"), ("metric", metric),
             ("trials", str(len(trials)))]
    title = ("pytest " if c.kind == "pytest" else "") + f"run {c.id}"
    answer += _go_on(c)
    return Report(title=f"bisect-lab report: {title}", answer=answer, status=status, facts=facts, sections=sections)


def _evidence_section(trials: list[TrialResult], metric: str, hib: bool, arms: list[str], *,
                      by_commit: bool = False) -> Section:
    from . import report_plots as plots
    s = Section("Every trial")
    if by_commit:
        # A bisection measures one arm on many commits: colour by commit, so each level is one colour.
        from dataclasses import replace
        trials = [replace(t, arm=f"commit {(t.commit or '?')[:10]}") for t in trials]
        arms = []
    pts = [(t.trial, t.arm, (t.metrics.get(metric) if t.ok else None)) for t in sorted(trials, key=lambda t: t.trial)]
    arms = list(dict.fromkeys(arms + [t.arm for t in trials]))
    png = plots.run_order(pts, metric, arms)
    if png:
        s.add(Figure(png, "Each trial's value in the order the trials ran. A trend inside one arm is drift of "
                          "the machine (clocks, temperature, other load), not an effect of the arm.", "run-order"))
        vals = _ok_values(trials, metric)
        drift = _drift_note(trials, metric)
        if drift:
            s.p(drift)
        png = plots.distributions({a: vals.get(a, []) for a in arms}, metric, hib)
        if png:
            s.add(Figure(png, "Distribution of each arm's values: the box spans the middle half, the line is the "
                              "median, dots are single trials.", "distributions"))
    else:
        s.p("No successful trial: nothing to plot.")
    return s


def _drift_note(trials: list[TrialResult], metric: str) -> str:
    """A sentence when the values of one arm trend over the campaign (rank correlation with run order)."""
    from scipy import stats as st
    notes = []
    by: dict[str, list[tuple[int, float]]] = {}
    for t in trials:
        v = t.metrics.get(metric) if t.ok else None
        if v is not None and math.isfinite(v):
            by.setdefault(t.arm, []).append((t.trial, v))
    for arm, pts in by.items():
        if len(pts) >= 8:
            rho, p = st.spearmanr([x for x, _ in pts], [y for _, y in pts])
            if p < 0.01 and abs(rho) > 0.6:
                notes.append(f"`{arm}` trends {'up' if rho > 0 else 'down'} over the campaign (Spearman ρ={rho:.2f}, "
                             f"p={p:.2g})")
    return ("Drift: " + "; ".join(notes) + ". Interleaving spreads it over the arms, but check the machine.") if notes else ""


def _trust_sections(store: Store, trials: list[TrialResult], metric: str, hib: bool,
                    values: dict[str, list[float]]) -> list[Section]:
    out = [_fingerprint_section(store, trials, metric, hib), _env_section(trials), _failures_section(trials)]
    return [s for s in out if s is not None]


def _fingerprint_section(store: Store, trials: list[TrialResult], metric: str, hib: bool) -> Section:
    from .fingerprint import diff
    s = Section("Environment differences (fingerprints)")
    ok = [t for t in trials if t.ok and t.fingerprint and t.metrics.get(metric) is not None
          and math.isfinite(t.metrics[metric])]
    if len(ok) < 2:
        s.p("Fewer than two measured trials carry a fingerprint: nothing to compare.")
        return s
    ok.sort(key=lambda t: t.metrics[metric], reverse=hib)
    best, worst = ok[0], ok[-1]
    fa, fb = store.fingerprint(best.fingerprint), store.fingerprint(worst.fingerprint)
    distinct = len({t.fingerprint for t in ok})
    s.p(f"{distinct} distinct fingerprint(s) over {len(ok)} measured trials. Compared: the best trial "
        f"(#{best.trial}, `{best.arm}`, {best.metrics[metric]:.2f}) with the worst "
        f"(#{worst.trial}, `{worst.arm}`, {worst.metrics[metric]:.2f}).")
    if fa is None or fb is None:
        s.p("Their fingerprint data is missing from the store.")
        return s
    changes = diff(fa, fb)
    # Tree and patch hashes (and the tree's own path on PYTHONPATH) differ between arms by design.
    import re
    arm_vars = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", f"{best.arm} {worst.arm}"))
    # By design: the tree (hash, patches), its own path on PYTHONPATH, and the env vars the arms set.
    by_design = [ch for ch in changes if ch.path.startswith("tree.")
                 or (ch.path == "env.PYTHONPATH" and "/trees/" in str(ch.a) + str(ch.b))
                 or (ch.path.startswith("env.") and ch.path[4:] in arm_vars)]
    others = [ch for ch in changes if ch not in by_design]
    if by_design and (best.arm != worst.arm or best.commit != worst.commit):
        what = "arms" if best.commit == worst.commit else "commits" if best.arm == worst.arm else "arms and commits"
        s.p(f"{len(by_design)} difference(s) in the tree itself (tree hash, patches) or in the env vars the arms "
            f"set come from the {what}: expected.")
    if not others:
        s.p("No other difference in the recorded environment (driver, clocks, temperatures, packages, load): "
            "the gap comes from the arms or from noise.")
        return s
    rows = [[_code(ch.path), _short_val(ch.a), _short_val(ch.b)] for ch in others[:40]]
    s.add(Table(["field", f"best (#{best.trial})", f"worst (#{worst.trial})"], rows,
                note=(f"{len(others) - 40} more differences not shown. " if len(others) > 40 else "")
                     + "Anything here (driver, clocks, temperature, throttling, packages, load) could confound "
                       "the comparison; `bisect-lab diff` shows every field."))
    return s


def _short_val(v) -> str:
    from .fingerprint import _fmt
    t = _fmt(v)
    return t if len(t) <= 60 else t[:59] + "…"


def _env_section(trials: list[TrialResult]) -> Section | None:
    from .summaries import env_propagation, env_warnings, flag_warnings
    env = env_propagation(trials).get("vars", [])
    warns = env_warnings(trials) + flag_warnings(trials)
    s = Section("Did the environment reach the benchmark?")
    if not env and not warns:
        s.p("No env var was set by an arm or the experiment, so there was nothing to verify.")
        return s
    if env:
        rows = []
        for v in env:
            full = v["matched"] == v["total"] and v["total"] > 0
            rows.append([_code(v["var"]), "(unset)" if v.get("expected") is None else _code(v["expected"]),
                         f"{v['matched']} of {v['total']} processes" if full
                         else f"**MISSED: only {v['matched']} of {v['total']} processes**",
                         f"{v.get('trials_incomplete', 0)} of {v.get('trials', 0)}",
                         ", ".join(f"`{a}`" for a in v.get("arms", [])[:4]) + (" …" if len(v.get("arms", [])) > 4 else "")])
        s.add(Table(["variable", "expected", "seen with that value in", "trials where it missed", "arms"], rows,
                    note="Sampled from /proc of every process of the benchmark's tree while it ran. A variable "
                         "that reaches the launcher but not the workers changes nothing the workers do."))
    if warns:
        s.add([w for w in warns[:20]])
    return s


def _failures_section(trials: list[TrialResult]) -> Section:
    s = Section("Failures")
    bad = [t for t in trials if not t.ok]
    if not bad:
        s.p("Every trial produced a measurement.")
        return s
    kinds: dict[str, int] = {}
    for t in bad:
        kinds[t.status.value] = kinds.get(t.status.value, 0) + 1
    s.p(f"{len(bad)} of {len(trials)} trials failed ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}). "
        "Failed trials are never counted as measurements.")
    rows = [[str(t.trial), _code(t.arm), t.status.value, t.host, (t.commit or "")[:10], _first_line(t.error)]
            for t in bad[:30]]
    s.add(Table(["trial", "arm", "kind", "host", "commit", "error"], rows,
                note=f"{len(bad) - 30} more not shown." if len(bad) > 30 else ""))
    return s


# --------------------------------------------------------------------------- attribution
def _go_on(c: Campaign) -> str:
    """The campaign's own advice on going on (``resume_with``), as a sentence after the answer."""
    ways = [f"`--resume {c.id} {w['option']} N` (N > {w['more_than']})" if "more_than" in w
            else f"`--resume {c.id} {w['option']} {w['value']}`"
            for w in ((c.result or {}).get("resume_with") or []) if isinstance(w, dict) and w.get("option")]
    return f" To go on in this campaign with the trials already made: the same command with {' or '.join(ways)}." if ways else ""


def _attribution_report(store: Store, c: Campaign, trials: list[TrialResult]) -> Report:
    from . import report_plots as plots
    res = c.result or {}
    metric, hib = _metric_of(c, trials), _hib(c)
    status = res.get("status") or c.status
    culprits = res.get("culprits") or []
    good, bad = res.get("good") or c.params.get("good"), res.get("bad") or c.params.get("bad")
    min_effect = float(res.get("min_effect") or c.params.get("min_effect") or 0.02)
    reg = res.get("regression") or {}
    regtxt = (f"`{bad}` is {_pct(reg.get('ratio'))} vs `{good}` ({_pct(reg.get('ci_low'))} .. {_pct(reg.get('ci_high'))})"
              if isinstance(reg, dict) and reg.get("ratio") is not None else "")
    if status == "culprits":
        conf = res.get("confidence")
        answer = (f"The regression is explained by **{', '.join(culprits)}**"
                  + (f" (posterior {conf:.2f})" if isinstance(conf, (int, float)) and math.isfinite(conf) else "")
                  + (f". {regtxt}." if regtxt else "."))
        st = "bad"
    elif status == "no-regression":
        answer, st = f"No regression: `{bad}` performs like `{good}`" + (f" ({regtxt})" if regtxt else "") + ".", "good"
    elif c.status != "done":
        answer, st = f"The campaign did not finish (status {c.status}); resume it with --resume {c.id}.", "unknown"
    else:
        answer, st = ("Inconclusive within the budget: no factor set explains the difference with enough confidence"
                      + (f" ({regtxt})" if regtxt else "") + "."), "unknown"
        likely = [f"**{f}** ({p:.2f})" for f, p in sorted(res.get("candidates") or [], key=lambda x: -x[1]) if p >= 0.5]
        if likely:
            answer += f" Most likely involved so far: {', '.join(likely)}."
        plan = res.get("plan")
        if isinstance(plan, dict) and plan.get("trials_per_arm"):
            answer += (f" The noise seen (CV {max(plan.get('cv_good') or 0, plan.get('cv_bad') or 0) * 100:.0f}%) "
                       f"needs about {plan['trials_per_arm']} trials per arm to resolve {min_effect * 100:g}%.")
    sections = [_setup_section(c, trials, metric, hib, [["good arm", _code(good)], ["bad arm", _code(bad)],
                                                         ["factors", ", ".join(_code(f) for f in (res.get("factors") or c.params.get("factors") or []))]])]
    s = Section("Effect of each factor")
    rows, frows = [], []
    for e in res.get("effects") or []:
        eff = e.get("effect") if isinstance(e.get("effect"), dict) else e
        name = e.get("name") or e.get("factor")
        r = {"name": name, "ratio": eff.get("ratio"), "ci_low": eff.get("ci_low"), "ci_high": eff.get("ci_high"),
             "culprit": any(part in culprits for part in str(name).split("*"))}
        frows.append(r)
        share = e.get("share")
        rows.append([_code(name), e.get("kind", "main"), _pct(r["ratio"]), f"{_pct(r['ci_low'])} .. {_pct(r['ci_high'])}",
                     "-" if share is None else f"{share * 100:.0f}%"
                     + (f" ({e['share_low'] * 100:.0f}..{e['share_high'] * 100:.0f}%)"
                        if e.get("share_low") is not None and e.get("share_high") is not None else "")])
    png = plots.effects(frows, min_effect=min_effect, title=f"Effect of switching each factor from good to bad ({metric})")
    if png:
        s.add(Figure(png, "Each factor's effect on the metric when switched from its good to its bad value, with its "
                          "95% interval. The grey band is below the minimum effect of interest.", "effects"))
    if rows:
        s.add(Table(["factor / term", "kind", "effect", "95% CI", "share of the regression"], rows))
    else:
        s.p("The strategy recorded no per-factor effects.")
    inter = res.get("interactions") or []
    if inter:
        s.add([f"interaction ({i.get('kind', '')}): {' × '.join(i.get('factors') or [])} — "
               f"{i.get('description') or _pct((i.get('term') or {}).get('ratio'))}" for i in inter])
    cands = res.get("candidates") or []
    if cands:
        s.add(Table(["factor", "probability it is involved"],
                    [[_code(f), f"{p:.2f}"] for f, p in sorted(cands, key=lambda x: -x[1])]))
    conf = res.get("confirmation") or []
    if conf:
        s.add(Table(["confirmation arm (bad factors)", "expected", "n", "position (0 = good, 1 = bad)", "ok"],
                    [[", ".join(x.get("arm") or []) or "(good)", x.get("expect", ""), str(x.get("n", "")),
                      f"{_num(x.get('position'))} ({_num(x.get('position_low'))} .. {_num(x.get('position_high'))})",
                      "yes" if x.get("ok") else "**no**"] for x in conf]))
    plan = res.get("plan")
    if isinstance(plan, dict) and plan.get("trials_per_arm"):
        s.p(f"Noise seen: CV {plan.get('cv_good', 0) * 100:.1f}% (good), {plan.get('cv_bad', 0) * 100:.1f}% (bad); "
            f"resolving {min_effect * 100:g}% at this noise takes about {plan['trials_per_arm']} trials per arm.")
    sections.append(s)
    values = _ok_values(trials, metric)
    arms = sorted(values, key=lambda a: (a != good, a != bad, a))
    a = Section("Arms measured")
    a.add(_arms_table(values, trials, arms))
    sections.append(a)
    sections.append(_evidence_section(trials, metric, hib, arms))
    sections += _trust_sections(store, trials, metric, hib, values)
    if res.get("warnings"):
        w = Section("Warnings")
        w.add(list(res["warnings"]))
        sections.append(w)
    answer += _go_on(c)
    return Report(f"bisect-lab report: attribution {c.id}", answer, st,
                  [("good", good or "-"), ("bad", bad or "-"), ("trials", str(len(trials)))], sections)


# --------------------------------------------------------------------------- bisection
def _bisect_report(store: Store, c: Campaign, trials: list[TrialResult]) -> Report:
    from . import report_plots as plots
    res = c.result or {}
    metric, hib = _metric_of(c, trials), _hib(c)
    status = res.get("status") or c.status
    good, bad = res.get("good") or c.params.get("good"), res.get("bad") or c.params.get("bad")
    info = res.get("commit_info") or {}
    eff = res.get("effect")
    eci = res.get("effect_ci") or [None, None]
    efftxt = f"{_pct(eff)} ({_pct(eci[0])} .. {_pct(eci[1])})" if isinstance(eff, (int, float)) else ""
    if status == "culprit" and res.get("commit"):
        subj = info.get("subject") if isinstance(info, dict) else ""
        answer = (f"First bad commit: **`{res['commit'][:12]}`** {subj or ''}"
                  + (f", posterior {res['mass']:.2f}" if isinstance(res.get("mass"), (int, float)) else "")
                  + (f"; its effect: {efftxt}" if efftxt else "") + ".")
        st = "bad"
    elif status == "gradual":
        rng = res.get("range") or []
        answer = ((f"A gradual change spread over {len(rng)} commits, `{str(rng[0])[:10]}` .. `{str(rng[-1])[:10]}`: "
                   "no single commit explains it") if rng else "A gradual change: no single commit explains it") \
            + (f"; total effect {efftxt}" if efftxt else "") + "."
        st = "bad"
    elif status == "several":
        parts = []
        for step in res.get("steps") or []:
            sci = step.get("effect_ci") or [None, None]
            where = (f"`{str(step['commit'])[:12]}`" if step.get("commit")
                     else f"one of {len(step.get('commits') or [])} commits")
            parts.append(where + (f" ({_pct(step['effect'])}, {_pct(sci[0])} .. {_pct(sci[1])})"
                                  if step.get("effect") is not None else ""))
        answer, st = f"Several steps: {'; '.join(parts)}.", "bad"
    elif status == "no-regression":
        answer, st = f"No regression between `{str(good)[:12]}` and `{str(bad)[:12]}`" + (f" ({efftxt})" if efftxt else "") + ".", "good"
    elif c.status != "done":
        answer, st = f"The bisection did not finish (status {c.status}); resume it with --resume {c.id}.", "unknown"
    else:
        rng = res.get("range") or []
        top = res.get("top") or []
        if top:
            answer = (f"Inconclusive ({res.get('reason', 'budget')}): the most likely first bad commits are "
                      + ", ".join(f"`{str(sha)[:10]}` ({m:.0%})" for sha, m in top) + ".")
        else:
            answer = (f"Inconclusive ({res.get('reason', 'budget')}): the first bad commit is one of "
                      f"{len(rng)} commits, {', '.join(f'`{x[:10]}`' for x in rng[:5])}" + ("…" if len(rng) > 5 else "") + ".")
        st = "unknown"
    sections = [_setup_section(c, trials, metric, hib, [["good", _code(str(good)[:12])], ["bad", _code(str(bad)[:12])],
                                                         ["arm on every commit", _code(res.get("arm") or c.params.get("arm"))],
                                                         ["candidate commits", str(res.get("candidates") or c.params.get("candidates") or "-")]])]
    s = Section("Bisection path")
    path = [(int(p), v) for p, v in (res.get("path") or [])]
    sha_of = {}
    for (p, _), (sha, _) in zip(res.get("path") or [], res.get("path_commits") or []):
        sha_of[int(p)] = sha
    for i, sha in enumerate(res.get("commits") or []):      # the full candidate list, when recorded
        sha_of.setdefault(i, sha)
    if good:
        sha_of.setdefault(0, good)
    n = int(res.get("n") or (max(sha_of) + 1 if sha_of else 0))
    labels = [sha_of.get(i, f"#{i}") for i in range(n)]
    culprit = res.get("index")
    if not path:
        # no stored verdict (interrupted): rebuild the path from the trials in run order
        pos = {sha: i for i, sha in enumerate(labels)}
        path = [(pos.get(t.commit, 0), t.metrics.get(metric) if t.ok else None) for t in trials]
    png = plots.bisection_path(path, labels, culprit=culprit if status == "culprit" else None, metric=metric)
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
        mark = " ← first bad" if sha == res.get("commit") else " (good end)" if sha == good else " (bad end)" if sha == bad else ""
        rows.append([str(labels.index(sha)) if sha in labels else "?", _code(sha[:12]) + mark, str(len(v)),
                     _num(statistics.median(v)) if v else "-", str(fails.get(sha, 0))])
    if rows:
        s.add(Table(["position", "commit", "n", "median", "untestable/failed"], rows))
    if res.get("untestable"):
        s.add([f"`{k[:12]}` untestable: {v}" for k, v in res["untestable"].items()])
    sections.append(s)
    sections.append(_evidence_section(trials, metric, hib, [], by_commit=True))
    sections += _trust_sections(store, trials, metric, hib, _ok_values(trials, metric))
    answer += _go_on(c)
    return Report(f"bisect-lab report: bisection {c.id}", answer, st,
                  [("good", str(good)[:12]), ("bad", str(bad)[:12]), ("trials", str(len(trials)))], sections)


# --------------------------------------------------------------------------- sweeps
def _sweep_report(store: Store, name: str, upto: str | None = None) -> Report:
    from . import report_plots as plots
    from .nights import sweep_history
    nights = sweep_history(store, name)
    if upto:
        ids = [n.campaign for n in nights]
        if upto in ids:
            nights = nights[: ids.index(upto) + 1]
    if not nights:
        raise UsageError(f"sweep {name!r} has no finished night in {store.path}")
    last = nights[-1]
    j = last.judgement or {}
    metric = j.get("metric") or "value"
    hib = j.get("higher_is_better", True)
    series_j = j.get("series") or []
    regs = [s for s in series_j if s.get("status") == "regression"]
    if regs:
        answer = (f"**Regression** on night {len(nights)} ({_code((last.commit or '')[:12])}): "
                  + "; ".join(f"`{s['arm']}` — {s.get('reason', '')}" for s in regs))
        st = "bad"
    else:
        answer, st = (f"No regression on night {len(nights)} ({_code((last.commit or '')[:12])}) across "
                      f"{len(series_j)} series."), "good"
        past = [(i, n) for i, n in enumerate(nights[:-1])
                if any(x.get("status") == "regression" for x in (n.judgement or {}).get("series") or [])]
        if past:
            i, n = past[-1]
            answer += (f" The last alert was on night {i + 1} ({_code((n.commit or '')[:12])}); the series "
                       f"raised no new alert since." if i < len(nights) - 1 else "")
    arms = list(dict.fromkeys(a for n in nights for a in n.values))
    labels = [f"{i + 1}: {(n.commit or '?')[:7]}" for i, n in enumerate(nights)]
    series = {a: [(i, n.values.get(a, [])) for i, n in enumerate(nights)] for a in arms}
    cps, alerts = {}, {}
    for s in series_j:
        cps[s["arm"]] = [cp.get("night", cp.get("index")) for cp in s.get("change_points") or []]
    for i, n in enumerate(nights):
        for s in (n.judgement or {}).get("series") or []:
            if s.get("status") == "regression":
                alerts.setdefault(s["arm"], []).append(i)
    sec = Section("Series over nights")
    png = plots.sweep_series(series, labels, metric, change_points=cps, alerts=alerts)
    if png:
        sec.add(Figure(png, "Each arm's metric night after night. Dashed lines are change points found by E-divisive "
                            "means (permutation test) over the night medians; red rings are nights that raised an alert.",
                       "sweep-series"))
    rows = []
    for s in series_j:
        c = s.get("comparison") or {}
        rows.append([_code(s["arm"]), s.get("status", "-"), _pct(c.get("ratio")),
                     f"{_pct(c.get('ci_low'))} .. {_pct(c.get('ci_high'))}" if c else "-",
                     _code((s.get("last_good_commit") or "")[:12]), s.get("reason", "")])
    if rows:
        sec.add(Table(["arm", "tonight", "vs last good", "95% CI", "last good commit", "why"], rows,
                      note=f"Alert rule: a significant slowdown whose whole interval is beyond the minimum effect "
                           f"({(j.get('min_effect') or 0) * 100:g}%), outside the night-to-night spread, or a "
                           f"significant change point to a worse level."))
    nrows = []
    for i, n in enumerate(nights):
        alerted = [s["arm"] for s in (n.judgement or {}).get("series") or [] if s.get("status") == "regression"]
        nrows.append([str(i + 1), _when(n.created), _code((n.commit or "")[:12]), n.campaign]
                     + [_num(n.median(a)) for a in arms] + ["**ALERT** " + ", ".join(alerted) if alerted else ""])
    sec.add(Table(["night", "when", "commit", "campaign"] + [f"median `{a}`" for a in arms] + ["alert"], nrows))
    for b in [b for n in nights for b in (n.judgement or {}).get("bisections") or []]:
        sec.p(f"Bisection for `{b.get('arm')}` between `{str(b.get('good'))[:12]}` and `{str(b.get('bad'))[:12]}`: "
              f"{b.get('status')}" + (f", {'first step' if b.get('status') == 'several' else 'first bad commit'} `{b['commit'][:12]}` "
                                      f"{(b.get('commit_info') or {}).get('subject', '')}" if b.get("commit") else "")
              + (f" (campaign {b.get('campaign')})" if b.get("campaign") else ""))
    sections = [sec]
    trials = [t for t in store.trials(last.campaign) if t.tag != "warmup"]
    c = store.campaign(last.campaign)
    setup = _setup_section(c, trials, metric, hib, [["sweep", name], ["ref", _code(c.params.get("ref"))],
                                                    ["nights", str(len(nights))]])
    setup.title = f"What was measured on night {len(nights)}"
    sections.append(setup)
    ev = _evidence_section(trials, metric, hib, arms)
    ev.title = f"Every trial of night {len(nights)}"
    sections.append(ev)
    sections += _trust_sections(store, trials, metric, hib, _ok_values(trials, metric))
    return Report(f"bisect-lab report: sweep {name}", answer, st,
                  [("sweep", name), ("nights", str(len(nights))), ("latest commit", (last.commit or "-")[:12])], sections)


# --------------------------------------------------------------------------- rendering
def _md_table(t: Table) -> str:
    def cell(x):
        return str(x).replace("|", "\\|").replace("\n", " ")
    head = t.headers if any(t.headers) else [" ", " "]
    lines = ["| " + " | ".join(cell(h) or " " for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in t.rows]
    if t.note:
        lines.append(f"\n<sub>{t.note}</sub>")
    return "\n".join(lines)


def to_markdown(rep: Report, image_dir: Path | None = None, image_prefix: str = "") -> str:
    """Markdown text; figures are written into ``image_dir`` and linked as ``image_prefix/NAME.png``
    (without ``image_dir`` they are inlined as data URIs)."""
    icon = {"bad": "🔴", "good": "🟢"}.get(rep.status, "🟡")
    out = [f"# {rep.title}", "", f"> {icon} {rep.answer}", ""]
    out.append(" · ".join(f"**{k}**: {v}" for k, v in rep.facts))
    out.append("")
    used: dict[str, int] = {}
    for s in rep.sections:
        out += [f"## {s.title}", ""]
        for b in s.blocks:
            if isinstance(b, str):
                out += [b, ""]
            elif isinstance(b, Table):
                out += [_md_table(b), ""]
            elif isinstance(b, list):
                out += [f"- {x}" for x in b] + [""]
            elif isinstance(b, Figure):
                k = used.get(b.name, 0)
                used[b.name] = k + 1
                fname = f"{b.name}{'-' + str(k) if k else ''}.png"
                if image_dir is not None:
                    image_dir.mkdir(parents=True, exist_ok=True)
                    (image_dir / fname).write_bytes(b.png)
                    src = f"{image_prefix}/{fname}" if image_prefix else fname
                else:
                    src = "data:image/png;base64," + base64.b64encode(b.png).decode()
                out += [f"![{b.name}]({src})", "", f"*{b.caption}*", ""]
    out.append(f"<sub>generated by bisect-lab {__version__} on {_when(__import__('time').time())}</sub>")
    return "\n".join(out) + "\n"


_CSS = """
body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;max-width:1040px;margin:2em auto;
padding:0 1.2em;color:#1d2329;line-height:1.45}
h1{font-size:1.5em;border-bottom:2px solid #e3e6ea;padding-bottom:.3em}
h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #e3e6ea;padding-bottom:.2em}
.answer{font-size:1.1em;padding:.8em 1em;border-radius:6px;margin:1em 0;border-left:6px solid}
.answer.bad{background:#fdecea;border-color:#d62728}.answer.good{background:#e8f5e9;border-color:#2ca02c}
.answer.unknown{background:#fff8e1;border-color:#f0ad00}
.facts span{display:inline-block;margin-right:1.5em;color:#555}.facts b{color:#1d2329}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}
th,td{border:1px solid #dde1e5;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f3f5f7}tr:nth-child(even) td{background:#fafbfc}
code{background:#f3f5f7;padding:0 .25em;border-radius:3px;font-size:.92em}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:.88em;margin-top:.3em}.note{color:#666;font-size:.82em;margin-top:-.4em}
footer{color:#888;font-size:.8em;margin-top:3em}
"""


def _inline(text: str) -> str:
    """The small Markdown subset the builders use (`code`, **bold**) as HTML, escaped."""
    import re
    t = html.escape(str(text))
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)
    return t


def to_html(rep: Report) -> str:
    """One self-contained HTML page: inline CSS, figures as base64 PNG data URIs, no scripts."""
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           f"<title>{html.escape(rep.title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{html.escape(rep.title)}</h1>",
           f"<div class='answer {rep.status}'>{_inline(rep.answer)}</div>",
           "<div class=facts>" + "".join(f"<span><b>{html.escape(k)}</b>: {_inline(v)}</span>" for k, v in rep.facts)
           + "</div>"]
    for s in rep.sections:
        out.append(f"<h2>{html.escape(s.title)}</h2>")
        for b in s.blocks:
            if isinstance(b, str):
                out.append(f"<p>{_inline(b)}</p>")
            elif isinstance(b, Table):
                head = "" if not any(b.headers) else "<tr>" + "".join(f"<th>{_inline(h)}</th>" for h in b.headers) + "</tr>"
                rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in b.rows)
                out.append(f"<table>{head}{rows}</table>")
                if b.note:
                    out.append(f"<div class=note>{_inline(b.note)}</div>")
            elif isinstance(b, list):
                out.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in b) + "</ul>")
            elif isinstance(b, Figure):
                data = base64.b64encode(b.png).decode()
                out.append(f"<figure><img alt='{html.escape(b.name)}' src='data:image/png;base64,{data}'>"
                           f"<figcaption>{_inline(b.caption)}</figcaption></figure>")
    out.append(f"<footer>generated by bisect-lab {__version__} on {_when(__import__('time').time())}</footer>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(store: Store, what: str, *, fmt: str = "md", out: str | Path | None = None) -> Path:
    """Build the report of ``what`` and write it; returns the file's path.

    Default location: ``<results>/reports/<what>.<fmt>``. Markdown figures go to ``<stem>_files/``
    beside the file; HTML is one self-contained file.
    """
    if fmt not in ("md", "html"):
        raise UsageError(f"unknown report format {fmt!r}; expected md or html")
    rep = build_report(store, what)
    path = Path(out) if out else store.dir / "reports" / f"{what.replace('/', '_')}.{fmt}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "html":
        path.write_text(to_html(rep), encoding="utf-8")
    else:
        files = path.parent / f"{path.stem}_files"
        path.write_text(to_markdown(rep, files, files.name), encoding="utf-8")
    return path
