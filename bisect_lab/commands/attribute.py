"""``bisect-lab attribute``: which factors explain the difference between two arms."""
from __future__ import annotations

from ..errors import EXIT_INCONCLUSIVE, EXIT_OK
from ..model import ATTRIBUTION_STRATEGIES
from . import _options
from ._context import Context
from ._session import resume_point, stored_param, with_session


def setup_arguments(subparsers):
    a = subparsers.add_parser("attribute", help="find which factors explain the difference between two arms")
    _options.add_experiment(a)
    # required unless --resume reads them back from the campaign (run_from_args says so)
    _options.add_arms(a, "--good")
    _options.add_arms(a, "--bad")
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
    a.add_argument("--no-prior", action="store_true",
                   help="do not use the noise of earlier campaigns of this experiment on this host as a "
                        "prior (by default it is used while today's readings fit it)")
    _options.add_seed(a)
    _options.add_resume(a, help="continue a campaign (its experiment, --good, --bad, --strategy and budget "
                               "unless given)")
    a.set_defaults(func=run_from_args)
    return a


def run_from_args(args) -> int:
    _options.require_unless_resume(args, "attribute", "--good", "--bad")
    good = _options.one_arm(args.good, args, "--good") if args.good is not None else None
    bad = _options.one_arm(args.bad, args, "--bad") if args.bad is not None else None
    return run(Context.from_args(args), args.experiment, good, bad, resume=args.resume,
               max_trials=args.max_trials, strategy=args.strategy, repeats=args.repeats, seed=args.seed,
               noise_prior=not args.no_prior)


def run(ctx: Context, experiment: str | None, good: str | None, bad: str | None, *,
        resume: str | bool | None = None, max_trials: int | None = None, strategy: str | None = None,
        repeats: int | None = None, seed: int | None = None, noise_prior: bool = True) -> int:
    """Attribute the difference between arms ``good`` and ``bad``; exit 3 when inconclusive.

    ``strategy`` None is the experiment's ``[design] strategy``. ``noise_prior`` False:
    ``--no-prior``. With ``resume``, what is None
    (``experiment``, ``good``, ``bad``, ``strategy``, the seed, the budgets) is the campaign's own.
    """
    from ..campaigns import attribute
    from ..render import attribution_result
    exp, resume, stored = resume_point(ctx, "attribute", experiment, resume,
                                       read_back=None in (good, bad, strategy, seed))
    exp = _options.with_seed(exp, seed, stored)
    if stored is not None:
        good = good if good is not None else stored_param(stored, "good", "--good")
        bad = bad if bad is not None else stored_param(stored, "bad", "--bad")
        # a campaign stored without a strategy is a default (adaptive) one
        strategy = strategy or stored.params.get("strategy") or "adaptive"
    res = with_session(ctx, exp, lambda s: attribute(s, good, bad, resume=resume, max_trials=max_trials,
                                                     strategy=strategy or exp.design.strategy,
                                                     repeats=repeats, noise_prior=noise_prior))
    typed = _options.typed_forms([good, bad], exp.patchset)
    if typed:
        res.more["typed"] = typed
    ctx.emit(res, attribution_result)
    return EXIT_INCONCLUSIVE if res.status == "inconclusive" else EXIT_OK
