"""``run``: measure arms interleaved in a balanced random order (layer 5).

One function measures for every caller: the ``run`` command (:func:`run_arms`: resumable, its
budget ``repeat`` raised on resume), a sweep night and a pytest test (:func:`measure_arms`: on a
given commit, every trial tagged with the sweep name or the test's node id).
"""
from __future__ import annotations

from ..arms import parse_arm
from ..model import Arm, TrialResult
from ..results import RunResult
from ..runner import TrialSpec
from .drive import BalancedRounds, drive, metric_of
from .planning import stored_plan
from .session import Session, resume_option


def _arms(session: Session, specs: list[str]) -> list[Arm]:
    arms: list[Arm] = []
    for s in specs:
        a = parse_arm(s, session.experiment.patchset)
        if a.spec not in [x.spec for x in arms]:
            arms.append(a)
    return arms


def _measure(session: Session, arms: list[Arm], *, repeat: int, commit: str | None, tag: str | None,
             plan_line: bool) -> RunResult:
    """The body of every measuring campaign: trees first, the balanced rounds, the summary."""
    from ..summaries import run_summary
    exp = session.experiment
    session.preflight(arms, commit)
    if plan_line and len(arms) > 1:
        session.log(stored_plan(session, arms, f"this run measures {repeat} per arm"))
    ex = session.executor()
    # Warmup rounds (the experiment's [benchmark] warmup) are stored tagged "warmup" and never judged.
    rounds = BalancedRounds(arms, repeat=repeat, warmup=max(0, exp.benchmark.warmup), seed=exp.design.seed,
                            hosts=len(session.workers), tag=tag)
    session.plan(rounds.total)
    # Each host measures the whole balanced sequence: arms are compared within a host only.
    drive(rounds, ex, lambda item: TrialSpec(item[0], commit, item[1]), value_of=metric_of(session.metric),
          per_host=True)
    session.conclude(ex)
    trials = judged_trials(session)
    return RunResult.from_dict(run_summary(exp, arms, trials, session.campaign))


def judged_trials(session: Session) -> list[TrialResult]:
    """The open campaign's trials that count: warmup rounds and warmup readings left out, and the
    readings of serving sessions that a killed run interrupted (they were measured again)."""
    from ..store import SESSION_INTERRUPTED
    lost = {s.session for s in session.store.sessions(session.campaign) if s.status == SESSION_INTERRUPTED}
    return [t for t in session.store.trials(session.campaign) if t.tag != "warmup" and t.session not in lost]


def with_baseline(arms: list[Arm], baseline: Arm | None) -> list[Arm]:
    """``arms`` with ``baseline`` first (added when it is not among them): every comparison with it
    then reads "arm relative to the baseline" (``a`` is the baseline). None keeps the first arm."""
    if baseline is None:
        return arms
    return [baseline] + [a for a in arms if a.spec != baseline.spec]


def run_arms(session: Session, specs: list[str], *, repeat: int | None = None,
             resume: str | bool | None = None, baseline: str | None = None) -> RunResult:
    """Measure arms interleaved in a randomised balanced order; summaries and pairwise comparisons.

    ``repeat``: trials per arm (default the experiment's ``[design] repeat``; a resume keeps the
    campaign's own unless a larger one is given, which measures more in a finished campaign).
    ``baseline``: the arm the others are compared with (measured too; default the first of ``specs``);
    the result names it in ``baseline``."""
    exp = session.experiment
    arms = with_baseline(_arms(session, specs),
                         parse_arm(baseline, exp.patchset) if baseline is not None else None)
    warmup = max(0, exp.benchmark.warmup)
    params = {"arms": [a.spec for a in arms], "repeat": repeat, "seed": exp.design.seed, "warmup": warmup}
    session.open("run", params, resume, grow={"repeat": exp.design.repeat})
    repeat = params["repeat"]

    def body() -> RunResult:
        res = _measure(session, arms, repeat=repeat, commit=None, tag=None, plan_line=True)
        res.repeat = repeat
        res.more["baseline"] = arms[0].spec
        if res.undecided:
            res.resume_with = [resume_option("--repeat", repeat)]
        return res

    return session.finish(body)


def measure_arms(session: Session, specs: list[str], *, repeat: int, commit: str | None = None,
                 tag: str | None = None, kind: str = "run",
                 params: dict | None = None) -> tuple[str, RunResult, list[TrialResult]]:
    """Like :func:`run_arms`, on a given base ``commit`` and with a ``tag`` on every trial (the
    sweep name, a pytest node id), as a new campaign of ``kind``. Returns (campaign id, summary,
    the judged trials)."""
    exp = session.experiment
    arms = _arms(session, specs)
    p = {"arms": [a.spec for a in arms], "repeat": repeat, "seed": exp.design.seed, "commit": commit, "tag": tag,
         "warmup": max(0, exp.benchmark.warmup), "min_effect": exp.design.min_effect, "alpha": exp.design.alpha,
         "metric": exp.benchmark.metric, "higher_is_better": exp.benchmark.higher_is_better}
    p.update(params or {})
    cid, _ = session.open(kind, p, None)
    summary = session.finish(lambda: _measure(session, arms, repeat=repeat, commit=commit, tag=tag,
                                              plan_line=False))
    return cid, summary, judged_trials(session)
