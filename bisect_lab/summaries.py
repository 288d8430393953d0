"""The rows of campaign results (layer 3): per-arm summaries, pairwise comparisons in one Holm
family, what the trials' environment showed. Pure functions over stored trials; the typed results
(:mod:`bisect_lab.results`) carry them.
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict

from .jsonable import finite_or_none
from .model import Arm, Experiment, TrialResult
from .summaries_sessions import has_sessions, session_groups  # noqa: F401  (public here too)


def positive_metric(v) -> float | None:
    """A metric value usable on the log scale (a finite, positive number), else None."""
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def failures_by_arm(trials: list[TrialResult]) -> dict[str, dict[str, int]]:
    out: dict = defaultdict(lambda: defaultdict(int))
    for t in trials:
        if not t.ok:
            out[t.arm][t.status.value] += 1
    return {a: dict(v) for a, v in out.items()}


def env_propagation(trials: list[TrialResult]) -> dict:
    """Per env var, over every trial: in how many benchmark processes it had the expected value."""
    agg: dict[str, dict] = {}
    for t in trials:
        for entry in (t.env_report or {}).get("entries", []):
            var = entry.get("var")
            a = agg.setdefault(var, {"var": var, "expected": entry.get("expected"), "matched": 0, "total": 0,
                                     "trials": 0, "trials_incomplete": 0, "arms": set()})
            a["matched"] += int(entry.get("matched", 0))
            a["total"] += int(entry.get("total", 0))
            a["trials"] += 1
            a["arms"].add(t.arm)
            if entry.get("matched", 0) < entry.get("total", 0):
                a["trials_incomplete"] += 1
    for a in agg.values():
        a["arms"] = sorted(a["arms"])
    return {"vars": sorted(agg.values(), key=lambda a: a["var"])}


def env_warnings(trials: list[TrialResult]) -> list[str]:
    seen: dict[str, str] = {}
    for t in trials:
        for w in (t.env_report or {}).get("warnings", []):
            # One line per var and arm: the same miss repeats on every trial.
            seen.setdefault(f"{t.arm}|{w.split(' reached')[0]}", f"[{t.arm}] {w}")
    return list(seen.values())


def flag_warnings(trials: list[TrialResult]) -> list[str]:
    counts: dict[str, int] = defaultdict(int)
    for t in trials:
        for f in t.flags:
            counts[f] += 1
    return [f"{n} trial(s) flagged {f!r} (GPU clocks or throttle state off the campaign's norm)"
            for f, n in sorted(counts.items())]


def variance_line(v: dict | None) -> str | None:
    """The variance components of a summary's ``variance`` in a performance engineer's words:
    "launch-to-launch CV 1.8%, within a launch 0.4% (12 sessions, 60 readings)"."""
    if not v or not v.get("sessions"):
        return None

    def cv(x):
        return "not measured" if x is None else f"{x * 100:.1f}%"
    within = "not measured (one reading per launch)" if v.get("within_cv") is None else cv(v["within_cv"])
    return (f"launch-to-launch CV {cv(v.get('between_cv'))}, within a launch {within} "
            f"({v['sessions']} sessions, {v.get('readings', 0)} readings)")


def run_summary(exp: Experiment, arms: list[Arm], trials: list[TrialResult], campaign: str) -> dict:
    """Per-arm summaries and pairwise comparisons, blocked by host: for the primary metric and, under
    ``secondary``, for each of ``[benchmark.secondary]``; one Holm family over all comparisons.

    Trials measured in sessions (one server launch, several readings) are blocked by session:
    session means are the units, and the summary carries the variance components (``variance``).
    With several hosts, ``across_hosts`` holds each pair's effect estimated within hosts, then
    pooled, and a host whose level differs on every arm is reported as such (a warning)."""
    b = exp.benchmark
    hosts = sorted({t.host for t in trials}) or ["local"]
    blocks = [_metric_summary(exp, arms, trials, b.metric, b.higher_is_better, hosts)]
    for metric, hib in b.secondary:
        blocks.append(_metric_summary(exp, arms, trials, metric, hib, hosts))
    out_arms, comparisons = blocks[0]["arms"], blocks[0]["comparisons"]
    secondary = []
    for (metric, hib), blk in zip(b.secondary, blocks[1:]):
        m = {"metric": metric, "higher_is_better": hib, "arms": blk["arms"], "comparisons": blk["comparisons"]}
        m.update({k: blk[k] for k in ("variance", "across_hosts", "host_levels") if k in blk})
        secondary.append(m)
    family = [r for blk in blocks for key in ("comparisons", "across_hosts") for r in blk.get(key, [])]
    missing = [m["metric"] for m in secondary if trials and not any(a["n"] for a in m["arms"])]
    warnings = holm_comparisons(family, exp.design.alpha)
    warnings += [f"secondary metric {m!r} was in no successful trial's output (parser {b.parser!r})" for m in missing]
    warnings += [w for blk in blocks for w in blk.get("warnings", [])]
    out = {"campaign": campaign, "experiment": exp.name, "metric": b.metric,
           "higher_is_better": b.higher_is_better, "min_effect": exp.design.min_effect, "alpha": exp.design.alpha,
           "hosts": hosts,
           "arms": out_arms, "comparisons": comparisons, "trials": len(trials),
           "env_propagation": env_propagation(trials),
           "warnings": warnings + env_warnings(trials) + flag_warnings(trials)}
    out.update({k: blocks[0][k] for k in ("variance", "across_hosts", "host_levels") if k in blocks[0]})
    if secondary:
        out["secondary"] = secondary
    return out


def _metric_summary(exp: Experiment, arms: list[Arm], trials: list[TrialResult], metric: str, hib: bool,
                    hosts: list[str]) -> dict:
    """One metric's per-arm rows and pairwise comparisons (per host), and, measured in sessions, the
    variance components; with several hosts the effects pooled over hosts."""
    from .stats import compare, plan_trials, summarize
    if has_sessions(trials):
        from .summaries_sessions import session_metric_summary
        return session_metric_summary(exp, arms, trials, metric, hib, hosts, failures_by_arm(trials))

    def ok_values(spec: str, host: str | None = None) -> list[float]:
        return [float(t.metrics[metric]) for t in trials
                if t.arm == spec and t.ok and (host is None or t.host == host)
                and finite_or_none(t.metrics.get(metric)) is not None]

    out_arms = []
    fails = failures_by_arm(trials)
    for arm in arms:
        vals = ok_values(arm.spec)
        row = {"arm": arm.spec, "n": len(vals), "failed": sum(fails.get(arm.spec, {}).values()),
               "failures": fails.get(arm.spec, {})}
        if vals:
            s = summarize(vals)
            row.update(median=s.median, mean=s.mean, cv=s.cv, ci_low=s.ci_low, ci_high=s.ci_high,
                       min=min(vals), max=max(vals))
        else:
            row.update(median=None, mean=None, cv=None, ci_low=None, ci_high=None)
        out_arms.append(row)
    comparisons = []
    for a, b in itertools.combinations(arms, 2):
        for host in hosts:
            va, vb = ok_values(a.spec, host), ok_values(b.spec, host)
            row = {"a": a.spec, "b": b.spec, "host": host, "n_a": len(va), "n_b": len(vb)}
            if len(va) >= 2 and len(vb) >= 2:
                c = compare(va, vb, higher_is_better=hib, min_effect=exp.design.min_effect, alpha=exp.design.alpha)
                row.update(ratio=c.ratio, ci_low=c.ci_low, ci_high=c.ci_high, p_value=c.p_value,
                           verdict=c.verdict, regression=bool(c.regression))
                if c.verdict == "unknown":
                    try:
                        row["plan_per_arm"] = int(plan_trials(va + vb, min_effect=exp.design.min_effect,
                                                              alpha=exp.design.alpha))
                    except Exception:
                        pass
            else:
                row.update(ratio=None, ci_low=None, ci_high=None, p_value=None, verdict="unknown",
                           regression=False)
            comparisons.append(row)
    out = {"arms": out_arms, "comparisons": comparisons}
    if len(hosts) > 1:
        from .summaries_sessions import across_hosts
        out.update(across_hosts(exp, arms, trials, metric, hib, hosts))
    return out


def holm_comparisons(comparisons: list[dict], alpha: float) -> list[str]:
    """Family-wise error control over a run's pairwise comparisons, of every metric (Holm): every row with a
    p-value gets ``p_adjusted``; a "different" verdict whose adjusted p-value is not below alpha
    becomes "unknown" (with five arms, ten comparisons at 5% each called some pair different in
    26.5% of simulated A/A runs; tests/test_calibration.py). "same" verdicts (equivalence within min_effect) are kept as
    they are. Returns a warning line when some verdict was downgraded."""
    from .stats import adjust_pvalues
    rows = [r for r in comparisons if r.get("p_value") is not None and math.isfinite(r["p_value"])]
    if not rows:
        return []
    _, adjusted = adjust_pvalues([r["p_value"] for r in rows], "holm", alpha)
    downgraded = 0
    for r, q in zip(rows, adjusted):
        r["p_adjusted"] = float(q)
        if len(rows) > 1 and r["verdict"] == "different" and not q < alpha:
            r.update(verdict="unknown", regression=False, unadjusted_verdict="different")
            downgraded += 1
    if not downgraded:
        return []
    return [f"{downgraded} of {len(rows)} comparisons differ on their own (p < {alpha:g}) but not after "
            f"Holm's correction for making {len(rows)} comparisons: shown as 'unknown'; more repeats "
            "would settle them"]


# ---------------------------------------------------------------------- comparisons in words
def speed_words(ratio: float | None, higher_is_better: bool) -> str:
    """A ratio (new / reference) as a performance engineer says it: "25.0% slower", "33.3% faster"
    ("-" when there is none). Slower is worse in the metric's own direction."""
    if not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0:
        return "-"
    if ratio == 1:
        return "no change"
    worse = ratio < 1 if higher_is_better else ratio > 1
    return f"{abs(ratio - 1) * 100:.1f}% {'slower' if worse else 'faster'}"


def speed_interval(low: float | None, high: float | None, higher_is_better: bool) -> str:
    """An interval of ratios in the same words: "20.1% .. 29.8% slower" when both ends agree,
    "3.0% slower .. 2.0% faster" when it holds no change ("-" when there is none)."""
    a, b = speed_words(low, higher_is_better), speed_words(high, higher_is_better)
    if "-" in (a, b):
        return "-"
    if a.split()[-1] == b.split()[-1] and a != "no change":
        lo, hi = sorted((a.split()[0], b.split()[0]), key=lambda x: float(x.rstrip("%")))
        return f"{lo} .. {hi} {a.split()[-1]}"
    # the slower end first
    return " .. ".join(sorted((a, b), key=lambda w: not w.endswith("slower")))


def comparison_sentence(row: dict, higher_is_better: bool, min_effect: float | None = None) -> str:
    """One comparison row (``b`` relative to ``a``) as a sentence: "all is 25.0% slower than none
    (95% CI 20.1% .. 29.8% slower)", "b performs like a (within ±2%)", or why it is not settled."""
    a, b = row.get("a"), row.get("b")
    ratio = row.get("ratio")
    interval = speed_interval(row.get("ci_low"), row.get("ci_high"), higher_is_better)
    verdict = row.get("verdict")
    if ratio is None:
        return f"{b} vs {a}: too few successful trials to compare"
    if verdict == "different":
        return f"{b} is {speed_words(ratio, higher_is_better)} than {a} (95% CI {interval})"
    if verdict == "same":
        within = f"within ±{min_effect * 100:g}%" if min_effect else "no difference of interest"
        return f"{b} performs like {a} ({within}; 95% CI {interval})"
    return f"{b} vs {a}: not settled at this noise, somewhere in {interval}"
