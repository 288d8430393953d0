"""``bisect-lab bisect``: the first commit that regressed, with an arm's patches on every commit."""
from __future__ import annotations

from ..errors import EXIT_INCONCLUSIVE, EXIT_OK
from . import _options
from ._context import Context, experiment_or_demo
from ._session import with_session


def setup_arguments(subparsers):
    b = subparsers.add_parser("bisect", help="first commit that regressed, with the arm's patches on every commit")
    _options.add_experiment(b)
    b.add_argument("--good", required=True, metavar="REF")
    b.add_argument("--bad", required=True, metavar="REF")
    _options.add_arms(b, "--patches", help="patches applied on every commit (default none)")
    _options.add_max_trials(b)
    _options.add_resume(b)
    b.set_defaults(func=run_from_args)
    return b


def run_from_args(args) -> int:
    arm = _options.one_arm(args.patches, args, "--patches") if args.patches else "none"
    return run(Context.from_args(args), args.experiment, args.good, args.bad, arm=arm, resume=args.resume,
               max_trials=args.max_trials)


def run(ctx: Context, experiment: str | None, good: str, bad: str, *, arm: str = "none",
        resume: str | bool | None = None, max_trials: int | None = None) -> int:
    """Bisect the commits between refs ``good`` and ``bad``; exit 3 when inconclusive."""
    from ..campaigns import bisect_commits
    from ..render import bisect_result
    exp = experiment_or_demo(experiment)
    res = with_session(ctx, exp, lambda s: bisect_commits(s, good, bad, arm=arm, resume=resume,
                                                          max_trials=max_trials))
    ctx.emit(res, bisect_result)
    return EXIT_INCONCLUSIVE if res.status == "inconclusive" else EXIT_OK
