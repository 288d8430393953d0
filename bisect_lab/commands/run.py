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
    _options.add_baseline(r)
    _options.add_repeat(r)
    _options.add_seed(r)
    _options.add_resume(r, help="continue an interrupted campaign (its experiment and arms unless given)")
    r.set_defaults(func=run_from_args)
    return r


def run_from_args(args) -> int:
    arms = _options.arm_words(args.patches, args)
    baseline = _options.one_arm(args.baseline, args, "--baseline") if args.baseline else None
    return run(Context.from_args(args), args.experiment, arms, repeat=args.repeat, resume=args.resume,
               baseline=baseline, seed=args.seed)


def default_arms(arms: list[str], baseline: str | None, patchset) -> list[str]:
    """What ``run`` measures, its baseline first: ``baseline`` and the arms given; without
    ``--baseline`` the first arm given is the baseline. No arm: ``none`` (the target as it is)
    and ``all``. One arm alone is measured beside ``none``, the baseline (``all`` beside a lone
    ``none``; ``all`` alone is measured alone): only what was asked for and the reference, so one
    patch that does not apply never blocks ``--patches "all-minus broken"``."""
    from ..arms import parse_arm
    if baseline is not None:
        return [baseline] + arms if arms else [baseline, "all" if parse_arm(baseline, patchset).spec != "all" else "none"]
    if not arms:
        return ["none", "all"]
    if len(arms) == 1:
        spec = parse_arm(arms[0], patchset).spec
        # `all` alone is measured alone (a quick reading of the full patch set)
        return arms if spec == "all" else ["none", arms[0]] if spec != "none" else [arms[0], "all"]
    return arms


def run(ctx: Context, experiment: str | None, arms: list[str], *, repeat: int | None = None,
        resume: str | bool | None = None, baseline: str | None = None, seed: int | None = None) -> int:
    """Measure ``arms`` of ``experiment`` (the bundled demo when None) and print the result.

    Every comparison reads "arm relative to the baseline" (:func:`default_arms` says which arms
    and which baseline). With ``resume``, no ``experiment``, no arms or no seed are the campaign's
    own (its first arm is its baseline).
    """
    from ..campaigns import run_arms
    from ..render import run_result
    exp, resume, stored = resume_point(ctx, "run", experiment, resume, read_back=not arms or seed is None)
    exp = _options.with_seed(exp, seed, stored)
    if not arms and stored is not None:
        arms = list(stored_param(stored, "arms", "--patches"))
        if baseline is None:
            baseline = arms[0]
    arms = default_arms(arms, baseline, exp.patchset)
    typed = _options.typed_forms(arms, exp.patchset)
    res = with_session(ctx, exp, lambda s: run_arms(s, arms, repeat=repeat, resume=resume, baseline=arms[0]))
    if typed:
        res.more["typed"] = typed
    ctx.emit(res, run_result)
    return EXIT_OK

