"""``bisect --run-script CMD``: a bisection on a pass/fail script's verdicts, as ``git bisect run`` (layer 5).

The script runs in each probed commit's prepared tree (the arm's patches applied, the build
step done), in place of the benchmark. Its exit status is the verdict, as for ``git bisect run``:
0 good, 125 skip (untestable), any other status from 1 to 127 bad; killed by a signal or
exiting above 127 it is a crashed trial, an untestable commit. Each verdict is stored as a trial
of a ``bisect`` campaign whose metric ``verdict`` reads 1 (good), 2 (bad) or 3 (skip), so
``report`` shows the path like that of any bisection. The search is exact
(:class:`~bisect_lab.strategies.bisection_passfail.PassFailBisection`): both endpoints first,
then binary search along the first-parent line of ``bad``.
"""
from __future__ import annotations

import dataclasses
import shlex

from ..arms import parse_arm
from ..errors import UsageError
from ..model import Experiment
from ..results import BisectResult
from ..runner import TrialSpec
from .drive import drive
from .session import Session

SCRIPT_VAR = "BISECT_LAB_SCRIPT"
METRIC = "verdict"
SKIP = 3.0

_WRAPPER = ("import os, subprocess, sys\n"
            "rc = subprocess.run(os.environ['" + SCRIPT_VAR + "'], shell=True).returncode\n"
            "v = 1 if rc == 0 else 3 if rc == 125 else 2 if 0 < rc < 128 else None\n"
            "sys.stdout.flush()\n"
            "if v is None:\n"
            "    print(f'the script exited with {rc} (a signal or above 127): untestable', file=sys.stderr)\n"
            "    sys.exit(1)\n"
            "print(f'bisect-lab-verdict {v} (exit status {rc})', flush=True)\n")


def passfail_experiment(exp: Experiment, script: str) -> Experiment:
    """``exp`` with its benchmark replaced by ``script``'s verdict (its timeout, hosts, GPU policy
    and target kept)."""
    if not script.strip():
        raise UsageError("--run-script is empty: give a command whose exit status says good (0) or bad (1-127)")
    bench = dataclasses.replace(exp.benchmark, command=f"{exp.host.python} -c {shlex.quote(_WRAPPER)}",
                                parser="regex", metric=METRIC, higher_is_better=False, warmup=0, secondary=(),
                                patterns=((METRIC, r"^bisect-lab-verdict ([123]) "),))
    return dataclasses.replace(exp, benchmark=bench, env=tuple(sorted({**exp.env_dict, SCRIPT_VAR: script}.items())))


def _verdict_of(r) -> float | None:
    v = r.metrics.get(METRIC) if r.ok else None
    return None if v is None or v == SKIP else v


def bisect_passfail(session: Session, good_ref: str, bad_ref: str, *, script: str, arm: str = "none",
                    max_trials: int | None = None) -> BisectResult:
    """The first commit in good..bad (first-parent line) where ``script`` fails; the session's
    experiment must come from :func:`passfail_experiment`."""
    from ..strategies.bisection_passfail import PassFailBisection
    exp = session.experiment
    the_arm = parse_arm(arm or "none", exp.patchset)
    trees = session.workers[0].trees
    good, bad = trees.resolve(good_ref), trees.resolve(bad_ref)
    if good == bad:
        raise UsageError(f"--good {good_ref} and --bad {bad_ref} are the same commit ({good[:12]})")
    chain = trees.first_parent_chain(good, bad)
    if not chain:
        raise UsageError(f"{bad_ref} ({bad[:12]}) has no commits that {good_ref} ({good[:12]}) lacks: "
                         "is --good an ancestor of --bad?")
    shas = [good] + [c.sha for c in chain]
    params = {"good": good, "bad": bad, "arm": the_arm.spec, "mode": "run-script", "script": script,
              "max_trials": max_trials, "candidates": len(shas) - 1}
    cid, _ = session.open("bisect", params, None, grow={"max_trials": exp.design.max_trials})
    budget = params["max_trials"]

    def body() -> BisectResult:
        workers = session.comparable_workers("bisect")
        ex = session.executor(workers)
        search = PassFailBisection(len(shas), max_trials=budget)
        # binary search: about log2 of the candidates, plus the two endpoints
        session.plan(min(budget, 2 + max(1, (len(shas) - 2).bit_length())))
        untestable: dict[str, str] = {}

        def note(pos, r):
            if not r.ok:
                untestable[shas[pos]] = f"{r.status.value}: {r.error[:200]}"
            elif r.metrics.get(METRIC) == SKIP:
                untestable[shas[pos]] = "skip: the script exited with 125"
            word = {1.0: "good", 2.0: "bad", SKIP: "skip"}.get(r.metrics.get(METRIC) if r.ok else None, "untestable")
            subject = trees.commit_info(shas[pos]).subject
            session.log(f"{shas[pos][:12]} {word}: {subject[:60]}")

        drive(search, ex, lambda pos: TrialSpec(the_arm, shas[pos], "run-script"), value_of=_verdict_of,
              on_result=note)
        session.conclude(ex)
        return passfail_result(session, cid, shas, the_arm, search.verdict(), untestable, budget)

    return session.finish(body)


def passfail_result(session: Session, cid: str, shas: list[str], the_arm, v, untestable: dict[str, str],
                    budget: int) -> BisectResult:
    """The :class:`BisectResult` of a pass/fail search ``v`` over ``shas`` (script or manual verdicts)."""
    trees = session.workers[0].trees
    good, bad = shas[0], shas[-1]
    vd = v.to_dict()
    res = BisectResult.from_dict(vd)
    res.status = v.status
    res.commit = shas[v.index] if v.status == "culprit" and v.index is not None else None
    info = trees.commit_info(res.commit) if res.commit else None
    res.commit_info = ({"sha": info.sha, "subject": info.subject, "author": info.author, "date": info.date,
                        "parents": list(getattr(info, "parents", ()) or ())} if info else None)
    res.posterior = 1.0 if res.commit else None
    res.effect = None
    res.trials = len(session.store.trials(cid))
    res.campaign = cid
    res.good, res.bad, res.arm = good, bad, the_arm.spec
    res.candidates = len(shas) - 1
    rng = vd.get("range")
    res.range = [shas[i] for i in range(rng[0], rng[1] + 1)] if rng else None
    res.levels = [{"good": good, "bad": bad, "candidates": len(shas) - 1, "status": v.status, "commits": shas,
                   "commit": res.commit, "verdict": vd, "path": [[shas[p], val] for p, val in v.path]}]
    res.commits = shas
    res.untestable = untestable
    res.metric = METRIC
    res.max_trials = budget
    words = {"bad-passes": f"the script passes at --bad {bad[:12]}: nothing to bisect",
             "good-fails": f"the script fails at --good {good[:12]} already: pick an older --good",
             "endpoint-untestable": "an endpoint could not be tested (the script skipped or crashed there)",
             "untestable": "only skipped commits are left between the last good and the first bad one: "
                           "the first bad commit is one of the candidate range"}
    words["budget"] = f"the budget of {budget} trials ran out: run again with a larger --max-trials"
    if v.reason in words:
        res.warnings = (res.warnings or []) + [words[v.reason]]
    return res
