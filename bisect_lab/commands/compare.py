"""``bisect-lab compare "cmd A" "cmd B"``: two commands measured against each other, no TOML needed.

Results go to ``--results`` (or ``BISECT_LAB_RESULTS``), else to the user data dir's
``results/compare`` folder: a quick comparison creates no file in the current folder.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import EXIT_OK, UsageError
from . import _options
from ._context import Context
from ._session import with_session


def setup_arguments(subparsers):
    p = subparsers.add_parser("compare", help="measure two shell commands against each other (no experiment file)",
                              description="Measure two shell commands interleaved in a randomised balanced order "
                                          "(warmup rounds first) and compare them as `run` does: the second "
                                          "command against the first.")
    p.add_argument("commands", nargs=2, metavar="COMMAND", help="a shell command (quote it); the first is the reference")
    _options.add_json(p, help=_options.JSON_HELP)
    p.add_argument("--repeat", type=_options.positive_int, default=10, help="trials per command (default 10)")
    p.add_argument("--warmup", type=int, default=1, help="discarded runs per command at the start (default 1)")
    p.add_argument("--cwd", help="folder the commands run in (default: the current folder)")
    p.add_argument("--metric", default="time",
                   help="'time' (the command's wall time, lower is better; the default) or a regex with one "
                        "group matching a number in the command's output")
    p.add_argument("--higher-is-better", action="store_true",
                   help="with a regex --metric: a larger number is better (default: lower is better)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one run of a command may take (default 600)")
    p.set_defaults(func=run_from_args)
    return p


def run_from_args(args) -> int:
    return run(Context.from_args(args), list(args.commands), repeat=args.repeat, warmup=args.warmup,
               cwd=args.cwd, metric=args.metric, higher_is_better=args.higher_is_better, timeout_s=args.timeout)


def compare_results_dir(ctx: Context) -> Path:
    """Where a comparison is stored: ``--results`` / ``BISECT_LAB_RESULTS``, else the user data dir."""
    from ..paths import data_dir
    if ctx.results or os.environ.get("BISECT_LAB_RESULTS"):
        return ctx.results_dir()
    d = data_dir() / "results" / "compare"
    print(f"results: {d} (default of compare, never the current folder; --results to change)", file=sys.stderr)
    ctx._results_dir = d        # said once: the campaign's own line would call it --results
    return d


def run(ctx: Context, commands: list[str], *, repeat: int = 10, warmup: int = 1, cwd: str | None = None,
        metric: str = "time", higher_is_better: bool = False, timeout_s: float = 600.0) -> int:
    """Compare ``commands`` (two shell commands, the first the reference) and print the result."""
    import re
    from ..campaigns.compare import compare_commands, compare_experiment
    from ..render import run_result
    commands = [c.strip() for c in commands]
    if any(not c for c in commands):
        raise UsageError("compare: a COMMAND is empty: give two shell commands, e.g. compare 'sleep 0.1' 'sleep 0.2'")
    if commands[0] == commands[1]:
        raise UsageError(f"compare: both commands are {commands[0]!r}: give two different commands")
    if warmup < 0:
        raise UsageError(f"compare: --warmup must be 0 or more, got {warmup}")
    if not timeout_s > 0:
        raise UsageError(f"compare: --timeout must be a positive number of seconds, got {timeout_s:g}")
    folder = Path(cwd).expanduser() if cwd else Path.cwd()
    if not folder.is_dir():
        raise UsageError(f"compare: --cwd {cwd}: no such folder")
    pattern = None
    if metric != "time":
        try:
            groups = re.compile(metric, re.M).groups
        except re.error as e:
            raise UsageError(f"compare: --metric {metric!r} is not a valid regex ({e}); or use --metric time") from None
        if groups != 1:
            raise UsageError(f"compare: --metric {metric!r} must have exactly one group around the number "
                             f"(it has {groups}), e.g. 'took ([0-9.]+) ms'")
        pattern = metric
    elif higher_is_better:
        raise UsageError("compare: --higher-is-better applies to a regex --metric; wall time is lower-is-better")
    results = compare_results_dir(ctx)
    ctx.results = str(results)
    exp = compare_experiment(commands, cwd=folder.resolve(), target=_empty_target(ctx), pattern=pattern,
                             higher_is_better=higher_is_better, repeat=repeat, warmup=warmup, timeout_s=timeout_s)
    res = with_session(ctx, exp, lambda s: compare_commands(s, commands, cwd=folder.resolve()))
    if not ctx.json:
        _headline(res.to_dict(), commands)
        # the arms by the commands they run ("A: python3 old.py"), not as the specs that carry them
        res.more["labels"] = {a["arm"]: f"{'AB'[k]}: {commands[k]}" for k, a in enumerate(res.arms[:2])}
    ctx.emit(res, run_result)
    return EXIT_OK


def _headline(res: dict, commands: list[str]) -> None:
    """The answer first, in the words of hyperfine: which command is faster, and by how much."""
    from ..redact import redact_text
    from ..summaries import speed_interval, speed_words
    rows = [c for c in res.get("comparisons") or [] if c.get("ratio") is not None]
    print(f"A: {commands[0]}\nB: {commands[1]}")
    if not rows:
        print("no comparison: too few successful runs of one command")
        return
    c = rows[0]
    worse = c["ratio"] - 1.0 if not res.get("higher_is_better") else 1.0 - c["ratio"]
    what = res.get("metric")
    if c.get("verdict") == "same":
        line = f"B and A are the same within {100 * (res.get('min_effect') or 0.02):.0f}% ({what})"
    elif c.get("verdict") == "different":
        if what == "wall_s":
            line = f"B is {100 * abs(worse):.1f}% {'slower' if worse > 0 else 'faster'} than A (wall time)"
        else:
            line = (f"B reads {100 * abs(c['ratio'] - 1):.1f}% {'higher' if c['ratio'] > 1 else 'lower'} than A: "
                    f"B is {'worse' if worse > 0 else 'better'} ({'higher' if res.get('higher_is_better') else 'lower'} "
                    "is better)")
    else:
        line = (f"B vs A: not settled at this noise (B {speed_words(c['ratio'], bool(res.get('higher_is_better')))} "
                f"so far, {what}); a larger --repeat would settle it")
    hib = bool(res.get("higher_is_better"))
    print(redact_text(f"{line}; 95% CI {speed_interval(c['ci_low'], c['ci_high'], hib)}"))


def _empty_target(ctx: Context) -> Path:
    """The empty folder that stands in for a repository (under the tree cache, never the cwd)."""
    d = ctx.cache_dir() / "compare-target"
    d.mkdir(parents=True, exist_ok=True)
    readme = d / "README"
    if not readme.is_file():
        readme.write_text("bisect-lab compare: the empty tree its commands run beside\n")
    return d
