"""One night of a sweep (layer 5): follow a ref, measure a matrix of arms, judge each series.

The sweep file is :mod:`bisect_lab.sweepfile`; the judgement of a series is the pure
:mod:`bisect_lab.stats.series`; the stored nights are read by :mod:`bisect_lab.nights`.
"""
from __future__ import annotations

import logging
from typing import Callable

from ..results import SweepNight

log_ = logging.getLogger("bisect_lab.sweep")


def run_sweep(path, *, results, cache=None, bisect_on_regression: bool = False,
              log: Callable[[str], None] | None = None, hosts=None, json_mode: bool = False) -> SweepNight:
    """One night of a sweep: fetch the ref, measure the matrix on its commit, judge every series.

    Returns the night (:class:`~bisect_lab.results.SweepNight`): ``regressions`` (arm specs;
    non-empty means exit 1), ``series`` (one judgement per arm), the night's ``campaign`` and
    ``commit``, and ``bisections`` when ``bisect_on_regression`` launched commit bisections between
    the last good commit and this one. ``log`` receives progress lines (default: the
    ``bisect_lab.sweep`` logger). ``json_mode`` is accepted for callers of earlier versions and
    changes nothing."""
    from ..config import load_experiment
    from ..nights import sweep_history
    from ..redact import redact_text
    from ..stats.series import judge_series
    from ..store import Store
    from ..sweepfile import load_sweep
    from .run import measure_arms
    from .session import Session
    cfg = load_sweep(path)
    exp = load_experiment(cfg.experiment)
    log = log or log_.info
    store = Store(results)
    if hosts is None:
        from ..hosts import make_hosts
        hosts = make_hosts(exp.host, cache_dir=cache)
    session = Session(exp, store, hosts, log=log)
    try:
        ref = cfg.ref or exp.target.ref or "HEAD"
        trees = session.workers[0].trees
        log(f"sweep {cfg.name}: fetching {redact_text(exp.target.repo)}")      # a logger is a sink too
        trees.fetch()
        commit = trees.resolve(ref)
        info = trees.commit_info(commit)
        log(f"sweep {cfg.name}: {ref} is {commit[:12]} {info.subject}")
        repeat = cfg.repeat or exp.design.repeat
        min_effect = cfg.detect.min_effect if cfg.detect.min_effect is not None else exp.design.min_effect
        cid, summary, _ = measure_arms(
            session, list(cfg.arms), repeat=repeat, commit=commit, tag=f"sweep:{cfg.name}", kind="sweep",
            params={"sweep": cfg.name, "sweep_file": str(cfg.path), "ref": ref, "metric": exp.benchmark.metric})
        nights = sweep_history(store, cfg.name, exp.benchmark.metric)
        series = [judge_series(nights, a["arm"], higher_is_better=exp.benchmark.higher_is_better,
                               min_effect=min_effect, detect=cfg.detect) for a in summary.arms]
        night = SweepNight(sweep=cfg.name, campaign=cid, ref=ref, commit=commit, subject=info.subject,
                           night=len(nights), metric=exp.benchmark.metric,
                           higher_is_better=exp.benchmark.higher_is_better, min_effect=min_effect,
                           series=series, regressions=[s["arm"] for s in series if s["status"] == "regression"],
                           summary=summary,
                           report_command=f"bisect-lab --results {results} report {cfg.name} --format html")
        # The judgement is part of the night: the next night reads it to know where a level started.
        store.finish_campaign(cid, "done", night.stored())
        if bisect_on_regression and night.regressions:
            night.bisections = _bisect(session, night, cfg, log)
            store.finish_campaign(cid, "done", night.stored())
        return night
    finally:
        session.close()
        store.close()


def _bisect(session, night: SweepNight, cfg, log) -> list[dict]:
    """One bisection per commit range between an alerting series' last good commit and tonight's."""
    from .bisect import bisect_commits
    out = []
    done: set[tuple] = set()
    for s in night.series:
        if s["arm"] not in night.regressions:
            continue
        good = s.get("last_good_commit")
        if not good or good == night.commit:
            out.append({"arm": s["arm"], "status": "skipped",
                        "reason": "the last good run was on the same commit: the change is not in the code"})
            continue
        key = (good, night.commit)
        if key in done:           # one bisection per commit range is enough for every arm it hurt
            continue
        done.add(key)
        log(f"bisecting {good[:12]}..{night.commit[:12]} with arm {s['arm']!r}")
        try:
            res = bisect_commits(session, good, night.commit, arm=s["arm"], resume=None,
                                 max_trials=cfg.bisect_max_trials).to_dict()
        except Exception as e:      # a failed bisection must not hide tonight's alert
            res = {"status": "error", "error": f"{type(e).__name__}: {e}"}
        out.append(dict(res, arm=s["arm"], good=good, bad=night.commit))
    return out
