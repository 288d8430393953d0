"""``bisect-lab attribute``: which factors explain the difference between two arms."""
from __future__ import annotations

from ..errors import EXIT_INCONCLUSIVE, EXIT_OK
from ..model import ATTRIBUTION_STRATEGIES
from . import _options
from ._context import Context, experiment_or_demo
from ._session import with_session


def setup_arguments(subparsers):
    a = subparsers.add_parser("attribute", help="find which factors explain the difference between two arms")
    _options.add_experiment(a)
    _options.add_arms(a, "--good", required=True)
    _options.add_arms(a, "--bad", required=True)
    _options.add_max_trials(a)
    a.add_argument("--strategy", choices=ATTRIBUTION_STRATEGIES,
                   help="default [design] strategy, else adaptive: "
                        "adaptive (stops as soon as the answer is clear), thorough (adaptive, "
                        "and every answer checked for a smaller culprit left over: more trials, a 5%% "
                        "culprit beside a 20%% one found far more often) or screening (a fixed "
                        "factorial / Plackett-Burman design: a known number of trials)")
    a.add_argument("--repeats", type=_options.positive_int,
                   help="screening: rounds of the design (each round = every design arm + good + bad; "
                        "default 2; with --resume the campaign's own, and more rounds let it go on)")
    _options.add_resume(a)
    a.set_defaults(func=run_from_args)
    return a


def run_from_args(args) -> int:
    good = _options.one_arm(args.good, args, "--good")
    bad = _options.one_arm(args.bad, args, "--bad")
    return run(Context.from_args(args), args.experiment, good, bad, resume=args.resume,
               max_trials=args.max_trials, strategy=args.strategy, repeats=args.repeats)


def run(ctx: Context, experiment: str | None, good: str, bad: str, *, resume: str | bool | None = None,
        max_trials: int | None = None, strategy: str | None = None, repeats: int | None = None) -> int:
    """Attribute the difference between arms ``good`` and ``bad``; exit 3 when inconclusive.

    ``strategy`` None is the experiment's ``[design] strategy``.
    """
    from ..campaigns import attribute
    from ..render import attribution_result
    exp = experiment_or_demo(experiment)
    res = with_session(ctx, exp, lambda s: attribute(s, good, bad, resume=resume, max_trials=max_trials,
                                                     strategy=strategy or exp.design.strategy,
                                                     repeats=repeats))
    ctx.emit(res, attribution_result)
    return EXIT_INCONCLUSIVE if res.status == "inconclusive" else EXIT_OK
