"""``bisect-lab report``: a Markdown or HTML report of a campaign or sweep."""
from __future__ import annotations

from ..errors import EXIT_OK
from . import _options
from ._context import Context, to_json


def setup_arguments(subparsers):
    rp = subparsers.add_parser("report", help="Markdown or HTML report of a campaign or sweep")
    rp.add_argument("what", help="campaign id (or a unique prefix, or 'latest') or sweep name")
    rp.add_argument("--format", choices=["md", "html"], default="md")
    rp.add_argument("--out", help="output file (default: <results>/reports/<campaign id>.<format>)")
    _options.add_json(rp, help="print the stored result and the written report's path as one JSON object")
    rp.set_defaults(func=run_from_args)
    return rp


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.what, fmt=args.format, out=args.out)


def run(ctx: Context, what: str, *, fmt: str = "md", out: str | None = None) -> int:
    """Write the report of ``what`` (to ``out``, else ``<results>/reports/<campaign id>.<fmt>``);
    print its path, or with ``--json`` the campaign's stored result and that path."""
    from ..report import campaign_named, report_name, write_report
    from ..store import StorageError, Store
    store = Store(ctx.results_dir(), create=False, read_only=True)
    target = out or store.dir / "reports" / f"{report_name(store, what)}.{fmt}"
    try:
        written = write_report(store, what, fmt=fmt, out=target)
    except OSError as e:
        where = e.filename or out or store.dir
        hint = "" if out else "; pass --out FILE to write it elsewhere"
        raise StorageError(f"cannot write the report to {where}: {e.strerror or e}{hint}") from None
    if ctx.json:
        c = campaign_named(store, what)
        data = {"report": str(written.resolve()), "format": fmt}
        if c is not None:
            data.update(campaign=c.id, kind=c.kind, status=c.status, experiment=c.experiment,
                        params=c.params, result=c.result)
        else:
            data.update(sweep=what)
        print(to_json(data))
    else:
        print(written)
    return EXIT_OK
