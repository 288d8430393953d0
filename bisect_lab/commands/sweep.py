"""``bisect-lab sweep``: the nightly regression sweep over a matrix of arms."""
from __future__ import annotations

import sys

from ..errors import EXIT_OK, EXIT_REGRESSION
from . import _options
from ._context import Context, to_json
from ._progress import Progress


def setup_arguments(subparsers):
    sw = subparsers.add_parser("sweep", help="nightly regression sweep over a matrix of arms")
    sw.add_argument("sweep", help="sweep TOML file")
    _options.add_json(sw)
    sw.add_argument("--bisect-on-regression", action="store_true")
    sw.set_defaults(func=run_from_args)
    return sw


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.sweep, bisect_on_regression=args.bisect_on_regression)


def run(ctx: Context, sweep: str, *, bisect_on_regression: bool = False) -> int:
    """Run the sweep file ``sweep``; with a regression, write its HTML report and exit 1."""
    from ..campaigns import run_sweep
    from ..config import load_experiment
    from ..render import render_sweep
    from ..sweepfile import load_sweep
    progress = Progress(quiet=ctx.json and not sys.stderr.isatty(), metric="")
    results = ctx.results_dir(load_experiment(load_sweep(sweep).experiment))
    try:
        res = run_sweep(sweep, results=results, cache=ctx.cache_dir(),
                        bisect_on_regression=bisect_on_regression, json_mode=ctx.json, log=progress.log)
    finally:
        progress.stop()
    if res.regressions:
        from ..report import write_report
        from ..store import Store
        with Store(results) as st:
            res.report = str(write_report(st, res.sweep, fmt="html"))
    if ctx.json:
        print(to_json(res.to_dict()))
    else:
        from ._context import console as Console  # wide when piped: no wrapping at 80 columns
        render_sweep(res.to_dict(), Console())
        if res.report:
            print(f"report: {res.report}")
    return EXIT_REGRESSION if res.regressions else EXIT_OK
