"""``bisect-lab bisect --run-script CMD`` (a pass/fail script's exit status, as ``git bisect run``) and
``bisect --manual`` (the user's own verdicts, given with ``bisect-lab verdict``)."""
from __future__ import annotations

from ..errors import EXIT_INCONCLUSIVE, EXIT_OK, UsageError
from ._context import Context
from ._session import with_session


def dispatch(ctx: Context, experiment: str | None, good: str, bad: str, *, arm: str | None, script: str | None,
             manual: bool, resume=None, max_trials: int | None = None) -> int:
    """``bisect`` with ``--run-script`` or ``--manual``: to :func:`run` or :func:`manual_bisection`."""
    if manual and script is not None:
        raise UsageError("--manual and --run-script exclude each other: the verdicts are yours or the script's")
    if resume:
        raise UsageError("--run-script and --manual do not resume (a manual bisection goes on with "
                         "`bisect-lab verdict good|bad|skip`)")
    if manual:
        return manual_bisection(ctx, experiment, good, bad, arm=arm)
    return run(ctx, experiment, good, bad, script=script, arm=arm, max_trials=max_trials)


def run(ctx: Context, experiment: str | None, good: str, bad: str, *, script: str, arm: str | None = None,
        max_trials: int | None = None) -> int:
    """The first commit in good..bad where ``script`` fails (exit 1-127; 125 skips); exit 3 when
    the answer is not one commit."""
    from ..campaigns.passfail_bisect import bisect_passfail, passfail_experiment
    from ..render import bisect_result
    from ._context import experiment_or_demo
    exp = passfail_experiment(experiment_or_demo(experiment), script)
    res = with_session(ctx, exp, lambda s: bisect_passfail(s, good, bad, script=script, arm=arm or "none",
                                                           max_trials=max_trials))
    ctx.emit(res, bisect_result)
    return EXIT_OK if res.status in ("culprit", "no-regression") else EXIT_INCONCLUSIVE


def manual_bisection(ctx: Context, experiment: str | None, good: str, bad: str, *, arm: str | None = None) -> int:
    """Start a manual bisection: print the first commit to judge and where its tree is."""
    from ..campaigns.manual_bisect import manual_start
    from ._context import experiment_or_demo
    exp = experiment_or_demo(experiment)
    return show_step(ctx, with_session(ctx, exp, lambda s: manual_start(s, good, bad, arm=arm or "none")))


def show_step(ctx: Context, step) -> int:
    """A manual bisection's next commit to judge, or its answer (exit as ``bisect``)."""
    from ..campaigns.manual_bisect import NextCommit
    from ..render import bisect_result
    if isinstance(step, NextCommit):
        if ctx.json:
            from ._context import to_json
            print(to_json(step.to_dict()))
        else:
            print(f"judge {step.commit[:12]} {step.subject} ({step.left} commit(s) still open, "
                  f"{step.judged} judged)\n  its tree: {step.tree}\n"
                  f"  then: bisect-lab verdict good|bad|skip {step.campaign}")
        return EXIT_OK
    ctx.emit(step, bisect_result)
    return EXIT_OK if step.status in ("culprit", "no-regression") else EXIT_INCONCLUSIVE
