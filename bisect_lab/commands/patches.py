"""``bisect-lab patches list | check | capture``: the patch set of an experiment, or a new one."""
from __future__ import annotations

from ..errors import EXIT_OK, UsageError
from . import _options
from ._context import Context, experiment_or_demo, to_json


def setup_arguments(subparsers):
    pa = subparsers.add_parser("patches", help="list / check / capture patch sets")
    # the actions' parsers are of the parent's class (argparse's default): one-line usage errors
    psub = pa.add_subparsers(dest="action", required=True, parser_class=type(pa))
    pl = psub.add_parser("list", help="patches of an experiment's patch set (or of a patch-set folder)")
    pl.add_argument("experiment", nargs="?", default=None,
                    help="experiment TOML file, or a patch-set folder such as `patches capture` writes "
                         "(default: the bundled demo)")
    _options.add_experiment(pl, experiment=False)
    pc = psub.add_parser("check", help="does each patch apply, alone and together; which pairs conflict")
    _options.add_experiment(pc)
    pcap = psub.add_parser("capture", help="turn a checkout's uncommitted changes (or a range) into a patch set")
    _options.add_experiment(pcap, experiment=False)
    pcap.add_argument("--repo", required=True, help="the checkout (never modified)")
    pcap.add_argument("--out", required=True, help="patch-set folder to write")
    pcap.add_argument("--split", action="append", metavar="files|GLOB=NAME",
                      help="one patch per file ('files'), or group matching files into patch NAME "
                           "(the default for uncommitted changes; a --range gives one patch per commit without it)")
    pcap.add_argument("--range", metavar="A..B", help="capture commits A..B (one patch per commit, as git "
                                                      "format-patch) instead of uncommitted changes")
    pa.set_defaults(func=run_from_args)
    return pa


def run_from_args(args) -> int:
    ctx = Context.from_args(args)
    if args.action == "capture":
        return capture(ctx, args.repo, args.out, split=args.split or [], range=args.range)
    return run(ctx, args.action, args.experiment)


def capture(ctx: Context, repo: str, out: str, *, split: list[str] = (), range: str | None = None) -> int:
    """Write the checkout ``repo``'s uncommitted changes (or commits ``range``) as a patch set
    in ``out``; ``repo`` is never modified."""
    from ._context import console as Console  # wide when piped: no wrapping at 80 columns
    from rich.markup import escape
    from ..capture import capture as capture_patchset
    from ..patchset import load_patchset
    written = capture_patchset(repo, out, split=list(split), range=range)
    ps = load_patchset(written)
    if ctx.json:
        print(to_json({"out": str(written), "patches": [p.name for p in ps.patches]}))
    else:
        Console().print(escape(f"captured {len(ps.patches)} patch(es) into {written}: {', '.join(ps.names)}"))
    return EXIT_OK


def run(ctx: Context, action: str, experiment: str | None) -> int:
    """``list`` the patches of ``experiment``'s patch set, or ``check`` that they apply
    (exit 2 naming the first problem when one does not)."""
    from pathlib import Path
    if experiment and Path(experiment).is_dir():
        # the folder `patches capture` just wrote: its list needs no experiment, its check does
        if action == "list" and (Path(experiment) / "patchset.toml").is_file():
            from ..patchset import load_patchset
            return _list(ctx, load_patchset(experiment))
        raise UsageError(f"{experiment} is a folder: patches {action} takes an experiment file"
                         + (" (it names the repository and ref the patches apply to)" if action == "check"
                            else " or a patch-set folder holding patchset.toml"))
    exp = experiment_or_demo(experiment)
    ps = exp.patchset
    if ps is None:
        raise UsageError(f"{exp.path}: [target] has no patches = ... folder")
    if action == "list":
        return _list(ctx, ps)
    return _check(ctx, exp, ps)


def _list(ctx: Context, ps) -> int:
    from ._context import console as Console  # wide when piped: no wrapping at 80 columns
    from rich.markup import escape
    from rich.table import Table
    if ctx.json:
        print(to_json([{"name": p.name, "aliases": list(p.aliases), "required": p.required,
                        "requires": list(p.requires), "files": list(p.files), "added": p.added,
                        "removed": p.removed, "description": p.description} for p in ps.patches]))
        return EXIT_OK
    # every cell is the user's text (aliases, file names, paths): never rich markup
    t = Table(title=escape(f"patch set {ps.root}"))
    for col in ("name", "aliases", "required", "requires", "files", "+/-"):
        t.add_column(col)
    for p in ps.patches:
        t.add_row(escape(p.name), escape(", ".join(p.aliases)), "yes" if p.required else "",
                  escape(", ".join(p.requires)), escape("\n".join(p.files)), f"+{p.added} -{p.removed}")
    Console().print(t)
    return EXIT_OK


def _check(ctx: Context, exp, ps) -> int:
    from ._context import console as Console  # wide when piped: no wrapping at 80 columns
    from rich.markup import escape
    from ..trees import check_patchset
    hosts = ctx.hosts(exp)
    try:
        report = check_patchset(hosts[0], exp.target, ps)
    finally:
        for h in hosts:
            h.close()
    if ctx.json:
        print(to_json(report.to_dict()))
    else:
        Console().print(escape(str(report)))
    if not report.ok:
        first = report.problems[0] if report.problems else "a patch does not apply"
        raise UsageError(f"patch check failed: {first}")
    return EXIT_OK
