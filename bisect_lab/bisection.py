"""``bisect-lab bisect``: noise-aware commit bisection with the arm's patches on every commit (layer 5).

Candidates are the commits reachable from bad and not from good (git bisect's
definition), oldest first; position 0 is the good commit itself. A commit where the
patches do not apply, the build or import check fails, or the benchmark cannot run
is untestable (like ``git bisect skip``), never "bad".
"""
from __future__ import annotations

from .arms import parse_arm
from .campaign import Session, _finish, open_campaign, preflight
from .errors import UsageError
from .runner import Executor, TrialSpec


def bisect_commits(session: Session, good_ref: str, bad_ref: str, *, arm: str = "none",
                   resume: str | bool | None = None, max_trials: int | None = None) -> dict:
    """Find the first commit in good..bad whose performance belongs with bad."""
    from .strategies.bisection import BisectionStrategy
    exp = session.experiment
    d = exp.design
    the_arm = parse_arm(arm or "none", exp.patchset)
    trees = session.workers[0].trees
    good = trees.resolve(good_ref)
    bad = trees.resolve(bad_ref)
    if good == bad:
        raise UsageError(f"--good {good_ref} and --bad {bad_ref} are the same commit ({good[:12]})")
    commits = trees.commits_between(good, bad)
    if not commits:
        raise UsageError(f"{bad_ref} ({bad[:12]}) has no commits that {good_ref} ({good[:12]}) lacks: "
                         "is --good an ancestor of --bad?")
    if commits[-1].sha != bad:
        # Keep the bad endpoint last: the strategy treats the last position as known-bad.
        commits = [c for c in commits if c.sha != bad] + [trees.commit_info(bad)]
    shas = [good] + [c.sha for c in commits]
    budget = max_trials or d.max_trials
    params = {"good": good, "bad": bad, "arm": the_arm.spec, "seed": d.seed, "max_trials": budget,
              "confidence": d.confidence, "min_effect": d.min_effect, "candidates": len(commits)}
    cid, _ = open_campaign(session, "bisect", params, resume)
    session.campaign = cid

    def go():
        preflight(session, [the_arm], commit=good)
        preflight(session, [the_arm], commit=bad)
        strategy = BisectionStrategy(len(shas), higher_is_better=exp.benchmark.higher_is_better, seed=d.seed,
                                     max_trials=budget, confidence=d.confidence, min_effect=d.min_effect,
                                     parallel=len(session.workers))
        ex = Executor(exp, session.store, cid, session.workers, on_trial=session.on_trial, log=session.log)
        if session.on_plan:
            session.on_plan(budget)
        untestable: dict[int, str] = {}
        while not strategy.done:
            batch = strategy.ask()
            if not batch:
                break
            results = ex.run_batch([TrialSpec(the_arm, shas[p]) for p in batch])
            for pos, r in zip(batch, results):
                value = r.metrics.get(session.metric) if r.ok else None
                if not r.ok:
                    untestable[pos] = f"{r.status.value}: {r.error[:200]}"
                strategy.tell(pos, value)
        v = strategy.verdict()
        vd = v.to_dict() if hasattr(v, "to_dict") else dict(vars(v))
        idx = v.index if v.status == "culprit" else None
        info = trees.commit_info(shas[idx]) if idx is not None else None
        rng = getattr(v, "range", None) or vd.get("range")
        out = dict(vd)
        out.update({
            "status": v.status,
            "commit": shas[idx] if idx is not None else None,
            "commit_info": vars(info) if info is not None and hasattr(info, "__dict__") else
                           (info._asdict() if info is not None and hasattr(info, "_asdict") else info),
            "trials": len(session.store.trials(cid)),
            "measurements": v.trials,
            "campaign": cid,
            "good": good, "bad": bad, "arm": the_arm.spec,
            "candidates": len(commits),
            "range": [shas[i] for i in range(rng[0], rng[1] + 1)] if rng else None,
            "untestable": {shas[p]: why for p, why in sorted(untestable.items())},
            "path_commits": [[shas[p], val] for p, val in (vd.get("path") or [])],
            "metric": exp.benchmark.metric,
        })
        return out

    return _finish(session, cid, go)
