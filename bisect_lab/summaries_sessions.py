"""The rows of a campaign measured in sessions, and effects pooled over hosts (layer 3).

A session is one server launch with several readings; its readings are not independent (two
launches of one tree differ more than two readings inside one), so every row here treats the
session as the unit (:mod:`bisect_lab.stats.sessions`). With several hosts an arm's effect is
estimated within each host and then pooled; a host whose level differs on every arm is a property
of the machine, reported as such and never read as an arm's effect.
"""
from __future__ import annotations

import itertools
import math

from .model import Arm, Experiment, TrialResult

__all__ = ["has_sessions", "session_groups", "session_metric_summary", "across_hosts", "variance_dict"]


def has_sessions(trials: list[TrialResult]) -> bool:
    """Some trial was one reading of a server session (``TrialResult.session``, DESIGN: sessions)."""
    return any(getattr(t, "session", None) is not None for t in trials)


def session_groups(trials: list[TrialResult], metric: str, spec: str, host: str | None = None) -> list[list[float]]:
    """The successful readings of arm ``spec`` (on ``host``) grouped by session, in order; a trial
    without a session is its own session of one reading; warmup readings are never counted."""
    groups: dict = {}
    for i, t in enumerate(trials):
        if t.arm != spec or not t.ok or t.tag == "warmup" or (host is not None and t.host != host):
            continue
        v = t.metrics.get(metric)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            continue
        sid = getattr(t, "session", None)
        groups.setdefault((t.host, sid) if sid is not None else ("", i), []).append(float(v))
    return list(groups.values())


def variance_dict(vc) -> dict:
    """The summary's ``variance``: the components as CVs and counts (and their log variances, df)."""
    d = vc.to_dict()
    return {k: d[k] for k in ("between_cv", "within_cv", "sessions", "readings", "between_var", "within_var",
                              "df_between", "df_within")}


def _row(c) -> dict:
    return dict(ratio=c.ratio, ci_low=c.ci_low, ci_high=c.ci_high, p_value=c.p_value, verdict=c.verdict,
                regression=bool(c.regression))


def _empty() -> dict:
    return dict(ratio=None, ci_low=None, ci_high=None, p_value=None, verdict="unknown", regression=False)


def _comparable(sa: list, sb: list, pooled) -> bool:
    """Two sessions per arm for each arm's own variance, or one each with the host's pooled
    components (readings inside sessions and launch-to-launch df) standing in."""
    if len(sa) >= 2 and len(sb) >= 2:
        return True
    return bool(sa and sb and pooled.df_between > 0 and pooled.df_within > 0)


def session_metric_summary(exp: Experiment, arms: list[Arm], trials: list[TrialResult], metric: str, hib: bool,
                           hosts: list[str], fails: dict[str, dict[str, int]]) -> dict:
    """One metric's per-arm rows (summaries of session means; ``n`` counts readings, ``sessions``
    launches), pairwise comparisons per host (session-blocked, the host's components pooled over
    arms), ``variance`` (the components pooled over arms and hosts) and, with several hosts,
    :func:`across_hosts`. ``fails``: failure counts per arm and kind."""
    from .stats import compare_sessions, components, plan_trials, session_means, summarize
    alpha, me = exp.design.alpha, exp.design.min_effect
    out_arms = []
    for arm in arms:
        groups = session_groups(trials, metric, arm.spec)
        vals = [v for g in groups for v in g]
        row = {"arm": arm.spec, "n": len(vals), "sessions": len(groups),
               "failed": sum(fails.get(arm.spec, {}).values()), "failures": fails.get(arm.spec, {})}
        if groups:
            s = summarize(session_means(groups))
            row.update(median=s.median, mean=s.mean, cv=s.cv, ci_low=s.ci_low, ci_high=s.ci_high,
                       min=min(vals), max=max(vals))
        else:
            row.update(median=None, mean=None, cv=None, ci_low=None, ci_high=None)
        out_arms.append(row)
    blocks = {(a.spec, h): session_groups(trials, metric, a.spec, h) for a in arms for h in hosts}
    per_host = {h: components([blocks[(a.spec, h)] for a in arms if blocks[(a.spec, h)]]) for h in hosts}
    comparisons = []
    for a, b in itertools.combinations(arms, 2):
        for host in hosts:
            sa, sb = blocks[(a.spec, host)], blocks[(b.spec, host)]
            row = {"a": a.spec, "b": b.spec, "host": host, "n_a": sum(map(len, sa)), "n_b": sum(map(len, sb)),
                   "sessions_a": len(sa), "sessions_b": len(sb)}
            if _comparable(sa, sb, per_host[host]):
                c = compare_sessions(sa, sb, higher_is_better=hib, min_effect=me, alpha=alpha, pooled=per_host[host])
                row.update(_row(c))
                if c.verdict == "unknown" and len(sa) + len(sb) >= 2:
                    try:   # counted in sessions: the unit of the comparison
                        row["plan_per_arm"] = int(plan_trials(list(session_means(sa)) + list(session_means(sb)),
                                                              min_effect=me, alpha=alpha))
                        row["plan_unit"] = "sessions"
                    except Exception:
                        pass
            else:
                row.update(_empty())
            comparisons.append(row)
    everything = [g for g in blocks.values() if g]
    out = {"arms": out_arms, "comparisons": comparisons, "variance": variance_dict(components(everything))}
    if len(hosts) > 1:
        out.update(across_hosts(exp, arms, trials, metric, hib, hosts))
    return out


def across_hosts(exp: Experiment, arms: list[Arm], trials: list[TrialResult], metric: str, hib: bool,
                 hosts: list[str]) -> dict:
    """Each pair's effect estimated within every host that measured both arms, then pooled
    (``across_hosts`` rows, ``host = "pooled"``), and each host's level against the others on the
    same arms (``host_levels``); a host that reads differently is named in ``warnings``."""
    from .stats import combine_blocks, compare_sessions, components
    alpha, me = exp.design.alpha, exp.design.min_effect
    blocks = {(a.spec, h): session_groups(trials, metric, a.spec, h) for a in arms for h in hosts}
    per_host = {h: components([blocks[(a.spec, h)] for a in arms if blocks[(a.spec, h)]]) for h in hosts}
    rows = []
    for a, b in itertools.combinations(arms, 2):
        parts = [compare_sessions(blocks[(a.spec, h)], blocks[(b.spec, h)], higher_is_better=hib, min_effect=me,
                                  alpha=alpha, pooled=per_host[h])
                 for h in hosts if _comparable(blocks[(a.spec, h)], blocks[(b.spec, h)], per_host[h])]
        row = {"a": a.spec, "b": b.spec, "host": "pooled", "hosts": len(parts)}
        c = combine_blocks(parts, higher_is_better=hib, min_effect=me, alpha=alpha) if len(parts) >= 2 else None
        if c is not None and c.ratio == c.ratio:
            row.update(n_a=c.n_a, n_b=c.n_b, **_row(c))
        else:
            row.update(n_a=0, n_b=0, **_empty())
        rows.append(row)
    levels, warnings = [], []
    for h in hosts:
        # this host against the others, arm by arm, pooled over the arms both measured
        parts = []
        for a in arms:
            here = blocks[(a.spec, h)]
            there = [g for o in hosts if o != h for g in blocks[(a.spec, o)]]
            if len(here) >= 2 and len(there) >= 2:
                parts.append(compare_sessions(there, here, higher_is_better=hib, min_effect=me, alpha=alpha))
        if not parts:
            continue
        c = combine_blocks(parts, higher_is_better=hib, min_effect=me, alpha=alpha)
        if not math.isfinite(c.ratio):
            continue
        levels.append({"host": h, "arms": len(parts), **_row(c)})
        if c.verdict == "different" and abs(c.ratio - 1) >= me:
            warnings.append(f"host {h} reads {abs(c.ratio - 1) * 100:.1f}% {'higher' if c.ratio > 1 else 'lower'} "
                            f"than the other hosts on the same arms ({(c.ci_low - 1) * 100:+.1f}% .. "
                            f"{(c.ci_high - 1) * 100:+.1f}%): a level of that machine, not an effect of any arm "
                            "(effects are estimated within hosts)")
    return {"across_hosts": rows, "host_levels": levels, "warnings": warnings}
