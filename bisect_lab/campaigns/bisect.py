"""``bisect``: noise-aware commit bisection with the arm's patches on every commit (layer 5).

The search runs along the first-parent line of ``bad`` (where "contains the culprit"
is monotone, as noisy bisection needs). When the first bad commit on that line is a
merge, the merged side branch is bisected in turn, from its merge base with the main
line: a culprit on a side branch is reported as that commit, not as the merge. If the
side branch alone shows no regression, the merge itself is the answer (the regression
comes from the combination).

A commit where the patches do not apply, the build or import check fails, or the
benchmark cannot run is untestable (like ``git bisect skip``), never "bad".
"""
from __future__ import annotations

from ..arms import parse_arm
from ..errors import UsageError
from ..results import BisectResult
from ..runner import TrialSpec
from .drive import drive, metric_of
from .planning import stored_plan
from .session import Session, resume_option

MAX_DEPTH = 8


def _info_dict(info) -> dict | None:
    if info is None:
        return None
    return {"sha": info.sha, "subject": info.subject, "author": info.author, "date": info.date,
            "parents": list(getattr(info, "parents", ()) or ())}


def _trial_numbers(path: list, trials, metric: str) -> list:
    """Each path entry's trial number in the campaign (1-based, as progress counts; None when not
    found), found by commit and value among the stored trials (the strategy's path index is its own
    order)."""
    number = {}
    for k, t in enumerate(trials, 1):
        v = t.metrics.get(metric) if t.ok else None
        number.setdefault((t.commit, v), k)
    return [number.get((sha, val)) for sha, val in path]


def _discounted_line(vd: dict, path: list, trials, metric: str) -> str | None:
    """The readings the search's noise model left out as stalls, as one warning line: each with its
    trial number in the campaign, its commit and its value (burst readings have their own line)."""
    burst = {i for b in vd.get("bursts") or [] if not b.get("kept") for i in b["trials"]}
    idx = [i for i in vd.get("discounted") or [] if 0 <= i < len(path) and i not in burst]
    if not idx:
        return None
    number = _trial_numbers(path, trials, metric)
    shown = []
    for i in idx[:12]:
        sha, val = path[i]
        k = number[i]
        shown.append(f"{'trial ' + str(k) if k else 'a reading'} at {str(sha)[:12]} ({metric} {val:.4g})")
    more = f", and {len(idx) - 12} more" if len(idx) > 12 else ""
    return (f"{len(idx)} reading(s) discounted as stalls (far outside the spread of the readings around "
            f"them; left out of every decision): {', '.join(shown)}{more}")


def _burst_lines(vd: dict, path: list, trials, metric: str) -> list[str]:
    """One warning line per burst of host contention the search's guard found: the trials left out
    (or, for a machine that changed, kept as a new level), with their values."""
    number = _trial_numbers(path, trials, metric)
    lines = []
    for b in vd.get("bursts") or []:
        idx = [i for i in b.get("trials") or [] if 0 <= i < len(path)]
        if not idx:
            continue
        ks = [number[i] for i in idx]
        first, last = (min(k for k in ks if k), max(k for k in ks if k)) if any(ks) else (None, None)
        span = f"trials {first}-{last}" if first else f"{len(idx)} readings"
        vals = ", ".join(f"{path[i][1]:.4g}" for i in idx[:8]) + (", ..." if len(idx) > 8 else "")
        if b.get("kept"):
            seen = (f"both endpoints read {abs(b['shift'] - 1):.1%} {'slower' if b['shift'] < 1 else 'faster'}"
                    if b.get("shift") else "the reference (the good commit) stayed slow")
            why = (": the readings before it sat in a burst of host contention, or the host sped up"
                   if b.get("shift", 1.0) > 1 else "")
            lines.append(f"the machine changed at trial {first or '?'}: {seen} from there ({metric} {vals}){why}; "
                         "the readings since are kept as a new level of the host, taken out of every "
                         "comparison (as a second host's level is)")
        else:
            lines.append(f"{span}: {len(idx)} reading(s) left out as a burst of host contention: the reading "
                         f"was far below both levels and the reference (the good commit) read slow "
                         f"{b.get('refs', 0)} time(s) right after it ({metric} {vals})")
    return lines


def bisect_commits(session: Session, good_ref: str, bad_ref: str, *, arm: str = "none",
                   resume: str | bool | None = None, max_trials: int | None = None,
                   terms: dict | None = None) -> BisectResult:
    """Find the first commit in good..bad whose performance belongs with bad; ``terms`` (from
    ``--look-for improvement`` / ``--term-old`` / ``--term-new``) looks for a speedup instead."""
    from ..strategies.bisection import BisectionStrategy
    exp = session.experiment
    d = exp.design
    the_arm = parse_arm(arm or "none", exp.patchset)
    trees = session.workers[0].trees
    good = trees.resolve(good_ref)
    bad = trees.resolve(bad_ref)
    if good == bad:
        raise UsageError(f"--good {good_ref} and --bad {bad_ref} are the same commit ({good[:12]})")
    if not trees.first_parent_chain(good, bad):
        raise UsageError(f"{bad_ref} ({bad[:12]}) has no commits that {good_ref} ({good[:12]}) lacks: "
                         "is --good an ancestor of --bad?")
    candidates = len(trees.commits_between(good, bad))
    # a resume keeps the campaign's budget unless --max-trials raises it (see Session.open)
    params = {"good": good, "bad": bad, "arm": the_arm.spec, "seed": d.seed, "max_trials": max_trials,
              "confidence": d.confidence, "min_effect": d.min_effect, "candidates": candidates,
              "metric": exp.benchmark.metric, "higher_is_better": exp.benchmark.higher_is_better, **(terms or {})}
    cid, _ = session.open("bisect", params, resume, grow={"max_trials": d.max_trials},
                          recorded=("metric", "higher_is_better"))
    budget = params["max_trials"]

    def body() -> BisectResult:
        session.preflight([the_arm], commit=good)
        session.preflight([the_arm], commit=bad)
        workers = session.comparable_workers("bisect")
        ex = session.executor(workers)
        session.plan(budget)
        session.log(stored_plan(session, [the_arm], f"budget {budget} trials, {candidates} candidate commits",
                                ["good", "bad"], commits=[good, bad]))
        levels = []
        host_lines: list[str] = []      # hosts whose level differs, from every level's search
        untestable: dict[str, str] = {}
        lo, hi = good, bad
        answer = None           # (status, sha or None, verdict dict, range shas)
        for depth in range(MAX_DEPTH):
            chain = trees.first_parent_chain(lo, hi)
            shas = [lo] + [c.sha for c in chain]
            left = budget - ex.trials_total
            if left <= 2:
                answer = answer or ("inconclusive", None, {}, shas[1:])
                break
            # an improvement is a regression of the inverted metric
            search = BisectionStrategy(len(shas), higher_is_better=exp.benchmark.higher_is_better
                                       != (params.get("look_for") == "improvement"),
                                       seed=d.seed + depth, max_trials=left, confidence=d.confidence,
                                       min_effect=d.min_effect, parallel=len(workers), hosts=len(workers))

            def note_untestable(pos, r, shas=shas):
                if not r.ok:
                    untestable[shas[pos]] = f"{r.status.value}: {r.error[:200]}"

            # position i of a batch on host i % hosts; each value told with its host
            drive(search, ex, lambda pos, shas=shas, depth=depth: TrialSpec(the_arm, shas[pos], f"bisect-level-{depth}"),
                  value_of=metric_of(session.metric), on_result=note_untestable, per_host=len(workers) > 1)
            host_lines += [w for w in search.host_warnings() if w not in host_lines]
            v = search.verdict()
            vd = v.to_dict()
            rng = vd.get("range")
            levels.append({"good": lo, "bad": hi, "candidates": len(shas) - 1, "status": v.status, "commits": shas,
                           "commit": shas[v.index] if v.status == "culprit" and v.index is not None else None,
                           "verdict": vd,
                           "path": [[shas[p], val] for p, val in (vd.get("path") or [])]})
            if v.status in ("gradual", "several"):
                # Not one commit: a change spread over a range, or several steps (the first step's
                # commit stands for the answer in --json's "commit"; each step is in "steps").
                vd = dict(vd, steps=[dict(st, commit=shas[st["index"]] if st.get("index") is not None else None,
                                          commits=[shas[i] for i in range(st["range"][0], st["range"][1] + 1)])
                                     for st in vd.get("steps") or []])
                first = shas[v.index] if v.status == "several" and v.index is not None else None
                answer = (v.status, first, vd, [shas[i] for i in range(rng[0], rng[1] + 1)] if rng else None)
                break
            if v.status != "culprit" or v.index is None:
                if depth > 0 and v.status == "no-regression":
                    # The side branch alone is fine: the merge that combined it is the culprit.
                    break
                vd = dict(vd, top=[[shas[p], m] for p, m in vd.get("top") or []])
                answer = (v.status, None, vd, [shas[i] for i in range(rng[0], rng[1] + 1)] if rng else None)
                break
            culprit = shas[v.index]
            answer = ("culprit", culprit, vd, [shas[i] for i in range(rng[0], rng[1] + 1)] if rng else None)
            info = trees.commit_info(culprit)
            parents = list(getattr(info, "parents", ()) or ())
            if len(parents) < 2:
                break
            side = parents[1]
            base = trees.merge_base(parents[0], side)
            if base is None or base == side:
                break
            session.log(f"first bad commit on the main line is merge {culprit[:12]}: bisecting its side branch "
                        f"{base[:12]}..{side[:12]}")
            lo, hi = base, side
        session.conclude(ex)          # nothing measurable anywhere: exit 4, not "inconclusive"
        status, sha, vd, rng_shas = answer
        ci = vd.get("effect_ci") or [None, None]
        res = BisectResult.from_dict(vd)
        res.effect = {"ratio": vd.get("effect"), "ci_low": ci[0], "ci_high": ci[1]}
        res.posterior = vd.get("mass")
        res.status = status
        res.commit = sha
        res.commit_info = _info_dict(trees.commit_info(sha)) if sha else None
        res.trials = len(session.store.trials(cid))
        res.campaign = cid
        res.good, res.bad, res.arm = good, bad, the_arm.spec
        res.candidates = candidates
        res.range = rng_shas
        res.levels = levels
        res.commits = [c for lv in levels for c in lv["commits"]]
        res.untestable = untestable
        res.metric = exp.benchmark.metric
        res.max_trials = budget
        path, stored = (levels[-1]["path"] if levels else []), session.store.trials(cid)
        stalls = _discounted_line(vd, path, stored, session.metric)
        bursts = _burst_lines(vd, path, stored, session.metric)
        if host_lines or stalls or bursts:
            res.warnings = list(res.warnings or []) + host_lines + bursts + ([stalls] if stalls else [])
        if status == "inconclusive" or ex.trials_total >= budget:
            res.resume_with = [resume_option("--max-trials", budget)]
        return res

    return session.finish(body)
