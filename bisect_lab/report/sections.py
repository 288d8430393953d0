"""The parts every kind of report shares: what was measured, each arm's values, every trial in run
order, and what could make the numbers wrong (fingerprints, env propagation, failures)."""
from __future__ import annotations

import math

from ..model import TrialResult
from ..results import Result
from ..store import Campaign, Store
from .document import Figure, Section, Table, code, dur, first_line, num, when

__all__ = ["ok_values", "metric_of", "higher_is_better_of", "setup_section", "arms_table", "stored_arms_table",
           "evidence_section", "trust_sections", "go_on"]


def ok_values(trials: list[TrialResult], metric: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for t in trials:
        v = t.metrics.get(metric) if t.ok else None
        if v is not None and isinstance(v, (int, float)) and math.isfinite(v):
            out.setdefault(t.arm, []).append(float(v))
    return out


def metric_of(c: Campaign, res: Result | None, trials: list[TrialResult]) -> str:
    """The metric the campaign judged: its stored result's, else its parameters', else the one its
    trials report most (a campaign that stored no result)."""
    m = getattr(res, "metric", "") or c.params.get("metric")
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


def higher_is_better_of(c: Campaign) -> bool:
    """The metric's direction: as the stored result says it, else as the parameters do."""
    # the stored object's own key, not the typed field: a field's default is no statement
    res = c.result or {}
    v = res.get("higher_is_better", c.params.get("higher_is_better"))
    return True if v is None else bool(v)


def setup_section(c: Campaign, trials: list[TrialResult], metric: str, hib: bool, extra: list[tuple[str, str]] = ()) -> Section:
    s = Section("What was measured")
    ok = [t for t in trials if t.ok]
    hosts = sorted({t.host for t in trials})
    commits = sorted({t.commit for t in trials if t.commit})
    started = min((t.started for t in trials), default=c.created)
    ended = max((t.started + t.duration_s for t in trials), default=c.finished or c.created)
    rows = [["campaign", code(c.id)], ["kind", c.kind], ["experiment", code(c.experiment)],
            ["metric", f"{code(metric)}, {'higher' if hib else 'lower'} is better"],
            ["trials", f"{len(trials)} ({len(ok)} measured, {len(trials) - len(ok)} failed)"],
            ["hosts", ", ".join(hosts) or "-"],
            ["base commit" if len(commits) <= 1 else "commits", ", ".join(code(x[:12]) for x in commits[:6])
             + (f" and {len(commits) - 6} more" if len(commits) > 6 else "") if commits else "-"],
            ["when", f"{when(started)} — {when(ended)} ({dur(ended - started)})"],
            ["status", c.status]]
    rows += [[k, v] for k, v in extra]
    # what the campaign ran under (a resume may have raised it: the params hold the latest)
    if isinstance(c.params.get("max_trials"), int) and c.kind in ("attribute", "bisect"):
        rows.append(["budget", f"{c.params['max_trials']} trials"])
    if isinstance(c.params.get("repeat"), int) and c.kind == "run":
        rows.append(["repeat", f"{c.params['repeat']} per arm"])
    if c.params.get("node"):
        rows.append(["pytest node", code(c.params["node"])])
    s.add(Table(["", ""], rows))
    seed = c.params.get("seed")
    if seed is not None:
        s.p(f"Arms were interleaved in a seeded random order (seed {seed}), so slow drift of the machine "
            f"(clocks, temperature) spreads over all arms instead of biasing one.")
    return s


ARMS_HEADERS = ["arm", "n", "median", "95% CI of median", "CV", "range", "failed"]
ARMS_NOTE = "CI of the median: distribution-free (order statistics); CV = standard deviation / mean."


def stored_arms_table(rows: list[dict]) -> Table:
    """The per-arm table from a stored result's arm rows (``RunResult.arms``)."""
    out = []
    for a in rows:
        if a.get("n"):
            cv = a.get("cv")
            out.append([code(a.get("arm")), str(a["n"]), num(a.get("median")),
                        f"{num(a.get('ci_low'))} .. {num(a.get('ci_high'))}",
                        "-" if not isinstance(cv, (int, float)) or not math.isfinite(cv) else f"{cv * 100:.1f}%",
                        f"{num(a.get('min'))} .. {num(a.get('max'))}", str(a.get("failed", 0))])
        else:
            out.append([code(a.get("arm")), "0", "-", "-", "-", "-", str(a.get("failed", 0))])
    return Table(list(ARMS_HEADERS), out, note=ARMS_NOTE)


def arms_table(values: dict[str, list[float]], trials: list[TrialResult], arms: list[str]) -> Table:
    """The per-arm table computed from trials (for campaigns whose result stores no arm rows)."""
    from ..stats.summary import summarize
    fails: dict[str, int] = {}
    for t in trials:
        if not t.ok:
            fails[t.arm] = fails.get(t.arm, 0) + 1
    rows = []
    for a in arms:
        v = values.get(a, [])
        if v:
            s = summarize(v)
            rows.append([code(a), str(s.n), num(s.median), f"{num(s.ci_low)} .. {num(s.ci_high)}",
                         "-" if not math.isfinite(s.cv) else f"{s.cv * 100:.1f}%", f"{num(s.min)} .. {num(s.max)}",
                         str(fails.get(a, 0))])
        else:
            rows.append([code(a), "0", "-", "-", "-", "-", str(fails.get(a, 0))])
    return Table(list(ARMS_HEADERS), rows, note=ARMS_NOTE)


def evidence_section(trials: list[TrialResult], metric: str, hib: bool, arms: list[str], *,
                      by_commit: bool = False) -> Section:
    from .. import report_plots as plots
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
        vals = ok_values(trials, metric)
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


def trust_sections(store: Store, trials: list[TrialResult], metric: str, hib: bool,
                    values: dict[str, list[float]]) -> list[Section]:
    out = [_fingerprint_section(store, trials, metric, hib), _env_section(trials), _failures_section(trials)]
    return [s for s in out if s is not None]


def _fingerprint_section(store: Store, trials: list[TrialResult], metric: str, hib: bool) -> Section:
    from ..fingerprint import diff
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
    rows = [[code(ch.path), _short_val(ch.a), _short_val(ch.b)] for ch in others[:40]]
    s.add(Table(["field", f"best (#{best.trial})", f"worst (#{worst.trial})"], rows,
                note=(f"{len(others) - 40} more differences not shown. " if len(others) > 40 else "")
                     + "Anything here (driver, clocks, temperature, throttling, packages, load) could confound "
                       "the comparison; `bisect-lab diff` shows every field."))
    return s


def _short_val(v) -> str:
    from ..fingerprint import _fmt
    t = _fmt(v)
    return t if len(t) <= 60 else t[:59] + "…"


def _env_section(trials: list[TrialResult]) -> Section | None:
    from ..summaries import env_propagation, env_warnings, flag_warnings
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
            rows.append([code(v["var"]), "(unset)" if v.get("expected") is None else code(v["expected"]),
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
    rows = [[str(t.trial), code(t.arm), t.status.value, t.host, (t.commit or "")[:10], first_line(t.error)]
            for t in bad[:30]]
    s.add(Table(["trial", "arm", "kind", "host", "commit", "error"], rows,
                note=f"{len(bad) - 30} more not shown." if len(bad) > 30 else ""))
    return s


def go_on(c: Campaign, res: Result | None) -> str:
    """The campaign's own advice on going on (its result's ``resume_with``), as a sentence after the answer."""
    ways = [f"`--resume {c.id} {w['option']} N` (N > {w['more_than']})" if "more_than" in w
            else f"`--resume {c.id} {w['option']} {w['value']}`"
            for w in ((res.get("resume_with") if res is not None else None) or [])
            if isinstance(w, dict) and w.get("option")]
    return f" To go on in this campaign with the trials already made: the same command with {' or '.join(ways)}." if ways else ""


