"""``bisect-lab run``: measure arms, interleaved; summaries and comparisons."""
from __future__ import annotations

from ..errors import EXIT_OK
from . import _options
from ._context import Context
from ._session import resume_point, stored_param, with_session


def setup_arguments(subparsers):
    r = subparsers.add_parser("run", help="measure arms, interleaved; summaries and comparisons")
    _options.add_experiment(r)
    _options.add_arms(r, "--patches", append=True,
                      help="arm spec, e.g. all-minus topk NCCL_PROTO=LL (repeat the option for more arms)")
    _options.add_repeat(r)
    _options.add_resume(r, help="continue an interrupted campaign (its experiment and arms unless given)")
    r.set_defaults(func=run_from_args)
    return r


def run_from_args(args) -> int:
    arms = _options.arm_words(args.patches, args)
    return run(Context.from_args(args), args.experiment, arms, repeat=args.repeat, resume=args.resume)


def run(ctx: Context, experiment: str | None, arms: list[str], *, repeat: int | None = None,
        resume: str | bool | None = None) -> int:
    """Measure ``arms`` of ``experiment`` (the bundled demo when None) and print the result.

    No arm measures ``all`` against ``none``; one arm other than ``all`` is compared
    against the full patch set. With ``resume``, no ``experiment`` or no arms are the
    campaign's own.
    """
    from ..campaigns import run_arms
    from ..render import run_result
    exp, resume, stored = resume_point(ctx, "run", experiment, resume, read_back=not arms)
    if not arms and stored is not None:
        arms = list(stored_param(stored, "arms", "--patches"))
    if not arms:
        arms = ["all", "none"]
    elif len(arms) == 1:
        from ..arms import parse_arm
        if parse_arm(arms[0], exp.patchset).spec != "all":
            arms = ["all", arms[0]]    # one arm alone compares against the full patch set
    res = with_session(ctx, exp, lambda s: run_arms(s, arms, repeat=repeat, resume=resume))
    ctx.emit(res, run_result)
    return EXIT_OK
