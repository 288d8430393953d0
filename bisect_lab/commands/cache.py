"""``bisect-lab cache [show] | prune``: the clone/tree cache and the per-trial {out} folders."""
from __future__ import annotations

import argparse
import time

from ..errors import EXIT_OK, UsageError
from . import _options
from ._context import Context, console, to_json


_JSON = "print the result as JSON"


def setup_arguments(subparsers):
    c = subparsers.add_parser("cache", help="show or prune the tree cache")
    csub = c.add_subparsers(dest="action", parser_class=type(c))
    cs = csub.add_parser("show")
    cp = csub.add_parser("prune")
    cp.add_argument("--max-trees", type=int, default=None)
    cp.add_argument("--max-bytes", type=int, default=None)
    cp.add_argument("--all", action="store_true", help="remove every cached tree and every per-trial {out} folder")
    cp.add_argument("--keep-out", type=int, default=None, metavar="N",
                    help="remove the per-trial {out} folders of all but the N most recent campaigns")
    # --json before or after the action; SUPPRESS: the action's parser must not reset the one before it
    for sub in (cs, cp):
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=_JSON)
    _options.add_json(c, help=_JSON)
    c.set_defaults(func=run_from_args, action="show")
    return c


def run_from_args(args) -> int:
    ctx = Context.from_args(args)
    if args.action == "prune":
        return prune(ctx, max_trees=args.max_trees, max_bytes=args.max_bytes, everything=args.all,
                     keep_out=args.keep_out)
    return show(ctx)


def prune(ctx: Context, *, max_trees: int | None = None, max_bytes: int | None = None, everything: bool = False,
          keep_out: int | None = None) -> int:
    """Remove cached trees beyond ``max_trees`` / ``max_bytes`` (all with ``everything``) and the
    {out} folders of all but the ``keep_out`` most recent campaigns; say what went."""
    from ..trees import prune_cache
    if keep_out is not None and keep_out < 0:
        raise UsageError(f"--keep-out must be 0 or more, not {keep_out}")
    removed = prune_cache(ctx.cache_dir(), max_trees=max_trees, max_bytes=max_bytes,
                          everything=everything, keep_out_campaigns=keep_out)
    outputs = getattr(removed, "outputs", [])
    if ctx.json:
        print(to_json([{**t.to_dict(), "kind": "tree"} for t in removed]
                      + [{**o.to_dict(), "kind": "out"} for o in outputs]))
    else:
        outs = (f" and the {{out}} folders of {len(outputs)} campaign(s) "
                f"({sum(o.trials for o in outputs)} trials)") if outputs else ""
        print(f"removed {len(removed)} tree(s){outs} from {ctx.cache_dir()}")
    return EXIT_OK


def show(ctx: Context) -> int:
    """The cached repositories, trees and {out} folders, with their sizes."""
    from ..trees import cache_info
    info = cache_info(ctx.cache_dir(), sizes=True).to_dict()
    if ctx.json:
        print(to_json(info))
        return EXIT_OK
    from rich.markup import escape
    from rich.table import Table
    t = Table(title=escape(f"tree cache {info.get('root', ctx.cache_dir())}"))
    for col in ("tree", "repository", "base", "patches", "size", "last used"):
        t.add_column(col)
    for tr in info.get("trees", []):
        used = tr.get("last_used")
        t.add_row(escape(str(tr.get("key", ""))[:16]), escape(str(tr.get("repo", ""))),
                  escape(str(tr.get("commit", ""))[:12]), escape(", ".join(tr.get("patches") or [])),
                  _size(tr.get("size_bytes")),
                  time.strftime("%Y-%m-%d %H:%M", time.localtime(used)) if isinstance(used, (int, float)) else "-")
    console().print(t)
    outs = info.get("outputs", [])
    sessions = sum(o.get("sessions", 0) for o in outs)
    in_sessions = f" ({sessions} serving session(s) among them)" if sessions else ""
    print(f"{len(info.get('repos', []))} repositories, {len(info.get('trees', []))} trees "
          f"({_size(info.get('total_bytes', 0) - info.get('out_bytes', 0))}), {{out}} folders of {len(outs)} "
          f"campaign(s) ({sum(o['trials'] for o in outs)} trials{in_sessions}, {_size(info.get('out_bytes'))}), "
          f"{_size(info.get('total_bytes'))} in all")
    return EXIT_OK


def _size(n) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
