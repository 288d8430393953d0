"""``bisect-lab bisect --run-script CMD``: a bisection on a pass/fail script's exit status, as ``git bisect run``."""
from __future__ import annotations

from ..errors import EXIT_INCONCLUSIVE, EXIT_OK, UsageError
from ._context import Context
from ._session import with_session


def run_script(ctx: Context, args, arm: str | None) -> int:
    """``bisect`` with ``--run-script``: parsed argv to :func:`run`."""
    if args.resume:
        raise UsageError("--run-script does not resume: run it again (each verdict is quick and exact)")
    return run(ctx, args.experiment, args.good, args.bad, script=args.run_script, arm=arm,
               max_trials=args.max_trials)


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
