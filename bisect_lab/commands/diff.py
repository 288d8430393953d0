"""``bisect-lab diff A B``: what differed between two trials or campaigns (fingerprint, config)."""
from __future__ import annotations

from ..errors import EXIT_OK
from . import _options
from ._context import Context, to_json


def setup_arguments(subparsers):
    d = subparsers.add_parser("diff", help="what differed between two trials or campaigns (fingerprint, config)")
    d.add_argument("a", help="CAMPAIGN or CAMPAIGN:TRIAL")
    d.add_argument("b", help="CAMPAIGN or CAMPAIGN:TRIAL")
    _options.add_json(d)
    d.set_defaults(func=run_from_args)
    return d


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.a, args.b)


def run(ctx: Context, a: str, b: str) -> int:
    """Print the differences between ``a`` and ``b`` (each CAMPAIGN or CAMPAIGN:TRIAL)."""
    from ..diffing import diff_runs
    from ..store import Store
    store = Store(ctx.results_dir(), create=False, read_only=True)
    res = diff_runs(store, a, b)
    if ctx.json:
        print(to_json(res))
    else:
        from ._context import console
        from ..redact import redact_tree
        from ..render_diff import render_diff
        render_diff(redact_tree(res), console())
    return EXIT_OK
