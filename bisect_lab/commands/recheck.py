"""``bisect-lab recheck CAMPAIGN[:TRIAL]``: was an old reading real? The same arm measured again now."""
from __future__ import annotations

from ..errors import EXIT_OK
from . import _options
from ._context import Context


def setup_arguments(subparsers):
    r = subparsers.add_parser("recheck", help="measure an old reading's arm again now: was the old value real?")
    r.add_argument("ref", metavar="CAMPAIGN[:TRIAL]",
                   help="the old launch: a trial, or a campaign that holds one launch")
    r.add_argument("--sessions", type=_options.positive_int, default=5,
                   help="new launches to measure today (default 5; at least 2)")
    _options.add_json(r)
    r.set_defaults(func=run_from_args)
    return r


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.ref, sessions=args.sessions)


def run(ctx: Context, ref: str, *, sessions: int = 5) -> int:
    """Re-measure the arm of ``ref`` (same commit, patches and env; new launches) and print where
    the old value lies in today's launch-to-launch distribution, with what differs since."""
    from ..campaigns.recheck import recheck
    from ..render_recheck import render_recheck
    from ..store import Store
    from ._session import _experiment_of, with_session
    store = Store(ctx.results_dir(), create=False, read_only=True)
    try:
        camp = store.campaign(ref.partition(":")[0])
    finally:
        store.close()
    exp = _experiment_of(camp, "recheck")
    res = with_session(ctx, exp, lambda s: recheck(s, ref, sessions=sessions))
    ctx.emit(res, render_recheck)
    return EXIT_OK
