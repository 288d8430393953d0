"""``bisect-lab verdict good|bad|skip [CAMPAIGN]``: the user's verdict on the commit a manual bisection asked about."""
from __future__ import annotations

from . import _options
from ._context import Context
from ._session import resume_point, with_session


def setup_arguments(subparsers):
    p = subparsers.add_parser("verdict", help="good / bad / skip for the commit a `bisect --manual` asked about")
    p.add_argument("verdict", choices=("good", "bad", "skip"), help="what the commit is")
    p.add_argument("campaign", nargs="?", help="the manual bisection (default: the latest unfinished bisection)")
    _options.add_json(p, help=_options.JSON_HELP)
    p.set_defaults(func=run_from_args)
    return p


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.verdict, args.campaign)


def run(ctx: Context, verdict: str, campaign: str | None = None) -> int:
    """Store ``verdict`` in ``campaign`` (the latest unfinished bisection when None); print the next
    commit to judge, or the answer."""
    from ..campaigns.manual_bisect import manual_verdict
    from .bisect_script import show_step
    from ..errors import UsageError
    try:
        exp, cid, _ = resume_point(ctx, "bisect", None, campaign or True, read_back=True)
    except UsageError as e:
        # "nothing to resume" speaks of resuming: a verdict is given to a waiting manual bisection
        if campaign or not str(e).startswith("nothing to resume"):
            raise
        raise UsageError(f"verdict: no manual bisection is waiting for a verdict in {ctx.results_dir()} (it has its "
                         "answer, or none was started: bisect-lab bisect EXP --good REF --bad REF --manual)") from None
    return show_step(ctx, with_session(ctx, exp, lambda s: manual_verdict(s, cid, verdict)))
