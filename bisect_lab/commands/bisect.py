"""``bisect-lab bisect``: the first commit that regressed, with an arm's patches on every commit."""
from __future__ import annotations

from ..errors import EXIT_INCONCLUSIVE, EXIT_OK
from . import _options
from ._context import Context
from ._session import resume_point, stored_param, with_session


def setup_arguments(subparsers):
    b = subparsers.add_parser("bisect", help="first commit that regressed, with the arm's patches on every commit")
    _options.add_experiment(b)
    # required unless --resume reads them back from the campaign (run_from_args says so)
    b.add_argument("--good", "--old", dest="good", metavar="REF", help="the old end (performs as it used to)")
    b.add_argument("--bad", "--new", dest="bad", metavar="REF", help="the new end (performs differently)")
    _options.add_arms(b, "--patches", help="patches applied on every commit (default none)")
    _options.add_max_trials(b)
    _options.add_terms(b)
    _options.add_seed(b)
    _options.add_resume(b, help="continue a campaign (its experiment, --good, --bad, --patches and budget "
                               "unless given)")
    b.add_argument("--run-script", metavar="CMD", help="a pass/fail command run in each commit's tree instead of "
                   "the benchmark, as `git bisect run`: exit 0 good, 125 skip, 1-127 bad")
    b.add_argument("--manual", action="store_true", help="judge each commit yourself, as `git bisect`: names the "
                   "commit to try, then `bisect-lab verdict good|bad|skip`")
    b.set_defaults(func=run_from_args)
    return b


def run_from_args(args) -> int:
    _options.require_unless_resume(args, "bisect", "--good", "--bad")
    arm = _options.one_arm(args.patches, args, "--patches") if args.patches else None
    if args.run_script is not None or args.manual:
        from .bisect_script import dispatch
        return dispatch(Context.from_args(args), args.experiment, args.good, args.bad, arm=arm,
                        script=args.run_script, manual=args.manual, resume=args.resume,
                        max_trials=args.max_trials)
    given = None if args.look_for is None and args.term_old is None and args.term_new is None else \
        _options.bisect_terms(args.look_for, args.term_old, args.term_new)
    return run(Context.from_args(args), args.experiment, args.good, args.bad, arm=arm, resume=args.resume,
               max_trials=args.max_trials, terms=given, seed=args.seed)


def run(ctx: Context, experiment: str | None, good: str | None, bad: str | None, *, arm: str | None = None,
        resume: str | bool | None = None, max_trials: int | None = None, terms: dict | None = None,
        seed: int | None = None) -> int:
    """Bisect the commits between refs ``good`` and ``bad``; exit 3 when inconclusive.

    ``arm`` None is ``none`` (no patches). ``terms`` (:func:`_options.bisect_terms`) None is a
    regression, called good / bad. With ``resume``, what is None (``experiment``, ``good``, ``bad``,
    ``arm``, the terms, the seed, the budget) is the campaign's own.
    """
    from ..campaigns import bisect_commits
    from ..render import bisect_result
    exp, resume, stored = resume_point(ctx, "bisect", experiment, resume,
                                       read_back=None in (good, bad, arm, terms, seed))
    exp = _options.with_seed(exp, seed, stored)
    if terms is None:
        terms = {k: stored.params[k] for k in ("look_for", "term_old", "term_new")
                 if k in stored.params} if stored is not None else {}
    if stored is not None:
        good = good if good is not None else stored_param(stored, "good", "--good")
        bad = bad if bad is not None else stored_param(stored, "bad", "--bad")
        arm = arm if arm is not None else stored_param(stored, "arm", "--patches")
    arm = arm or "none"
    res = with_session(ctx, exp, lambda s: bisect_commits(s, good, bad, arm=arm, resume=resume,
                                                          max_trials=max_trials, terms=terms))
    # the direction and the sides' names, for the human output (the campaign's parameters hold them)
    res.more.update({"higher_is_better": exp.benchmark.higher_is_better, **terms})
    ctx.emit(res, bisect_result)
    return EXIT_INCONCLUSIVE if res.status == "inconclusive" else EXIT_OK
