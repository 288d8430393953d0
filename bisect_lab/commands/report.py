"""``bisect-lab report``: a Markdown or HTML report of a campaign or sweep."""
from __future__ import annotations

from ..errors import EXIT_OK
from ._context import Context


def setup_arguments(subparsers):
    rp = subparsers.add_parser("report", help="Markdown or HTML report of a campaign or sweep")
    rp.add_argument("what", help="campaign id (or a unique prefix, or 'latest') or sweep name")
    rp.add_argument("--format", choices=["md", "html"], default="md")
    rp.add_argument("--out", help="output file (default: under the results folder)")
    rp.set_defaults(func=run_from_args)
    return rp


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.what, fmt=args.format, out=args.out)


def run(ctx: Context, what: str, *, fmt: str = "md", out: str | None = None) -> int:
    """Write the report of ``what`` (to ``out``, else under the results folder); print its path."""
    from ..report import write_report
    from ..store import StorageError, Store
    store = Store(ctx.results_dir(), create=False, read_only=True)
    try:
        written = write_report(store, what, fmt=fmt, out=out)
    except OSError as e:
        where = e.filename or out or store.dir
        hint = "" if out else "; pass --out FILE to write it elsewhere"
        raise StorageError(f"cannot write the report to {where}: {e.strerror or e}{hint}") from None
    print(written)
    return EXIT_OK
