"""The ``bisect-lab`` command line (DESIGN 3.4): a thin args-to-kwargs adapter.

Only this module (and the other entry points) prints, exits or reads argv. User
errors become one line on stderr and the exit code of the error; ``--debug`` shows
the traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import __version__
from .errors import (EXIT_INCONCLUSIVE, EXIT_NO_MEASUREMENT, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, BisectLabError,
                     UsageError)
from .model import ATTRIBUTION_STRATEGIES


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {n}")
    return n


class _Parser(argparse.ArgumentParser):
    def error(self, message):          # one line, exit 2, like every other user error
        raise UsageError(f"{self.prog}: {message}")


class _Redacting:
    """stdout / stderr through the one redaction policy (bisect_lab.redact): whatever a message,
    a progress line or an error carries, no secret reaches the terminal or a CI log. Whole lines
    are redacted (a secret split over two writes is still found); a flush writes what is pending."""

    def __init__(self, stream):
        self._stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        from .redact import redact_text
        self._pending += text
        if "\n" in self._pending:
            done, _, self._pending = self._pending.rpartition("\n")
            self._stream.write(redact_text(done + "\n"))
        return len(text)

    def flush(self) -> None:
        from .redact import redact_text
        if self._pending:
            self._stream.write(redact_text(self._pending))
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name):          # isatty, fileno, encoding, ...: the real stream's
        return getattr(self._stream, name)


def _remember_secrets(argv: list[str]) -> None:
    """Secret values given on the command line (``--patches 'all HF_TOKEN=hf_...'``): hidden at
    every sink from the start, even in the error line of a spec that does not parse."""
    import re
    import shlex
    from .redact import needs_tag, remember
    for arg in argv:
        try:
            words = shlex.split(arg)
        except ValueError:
            words = arg.split()
        for w in words:
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.+)$", w)
            if m and needs_tag(m.group(1), m.group(2)):
                remember(m.group(2))


# --------------------------------------------------------------------------- helpers
def bundled_demo() -> Path:
    """The demo experiment: packaged copy first, then the source checkout's."""
    here = Path(__file__).resolve().parent
    for p in (here / "_bundled" / "experiments" / "demo.toml", here.parent / "experiments" / "demo.toml"):
        if p.is_file():
            return p
    raise UsageError("the bundled demo experiment is missing from this installation; pass an EXPERIMENT file")


def _arm_words(groups, args) -> list[str]:
    """Join the words of each ``--patches/--good/--bad`` occurrence into one arm spec.

    ``--patches all-minus topk`` arrives unquoted from the shell as two words; a word
    that names an experiment file (``*.toml`` or an existing file) is the EXPERIMENT
    positional that the option swallowed, and is given back to it.
    """
    specs = []
    for words in groups or []:
        words = [words] if isinstance(words, str) else list(words)
        keep = []
        for w in words:
            if (w.endswith(".toml") or (os.path.isfile(w) and "=" not in w)) and not getattr(args, "experiment", None):
                args.experiment = w
            else:
                keep.append(w)
        if keep:
            specs.append(" ".join(keep))
    return specs


def _experiment(path: str | None):
    from .config import load_experiment
    return load_experiment(Path(path) if path else bundled_demo())


def _results(args, exp=None) -> Path:
    """``--results``, else the default (never inside the target repository), said once on stderr."""
    from .paths import results_dir
    cached = getattr(args, "_results_dir", None)
    if cached is not None:
        return cached
    d, note = results_dir(args.results, target_repo=exp.target.repo if exp is not None else None)
    if note:
        print(note, file=sys.stderr)
    args._results_dir = d
    return d


def _cache(args) -> Path:
    from .paths import default_cache_dir
    return Path(args.cache) if args.cache else default_cache_dir()


def _hosts(exp, args):
    from .hosts import make_hosts
    return make_hosts(exp.host, cache_dir=_cache(args))


class _Progress:
    """A live bar with ETA on a terminal; one line per trial otherwise (logs, CI)."""

    def __init__(self, quiet: bool, metric: str):
        from rich.console import Console
        self.err = Console(stderr=True)
        self.quiet = quiet
        self.metric = metric
        self.done = 0
        self.replays = 0
        self.total = None
        self.t0 = time.monotonic()
        self.bar = None
        if self.err.is_terminal and not quiet:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("ETA"), TimeRemainingColumn(), console=self.err, transient=True)
            self.task = self.bar.add_task("trials", total=None)
            self.bar.start()

    def plan(self, total: int):
        self.total = total
        if self.bar:
            self.bar.update(self.task, total=max(total, self.done))

    def replayed(self, r):
        """A stored trial a resume took instead of running it: counted, not printed, and not
        part of the ETA (it took no time); the first new trial of a resumed campaign reads [81/200]."""
        self.done += 1
        self.replays += 1
        if self.bar:
            self.bar.update(self.task, advance=1)

    def trial(self, r):
        # Redacted before rich lays the line out: a secret folded over two lines is not found later.
        from dataclasses import replace
        from .redact import redact_text
        r = replace(r, arm=redact_text(r.arm), error=redact_text(r.error))
        self.done += 1
        v = r.metrics.get(self.metric)
        what = f"{v:.2f} {self.metric}" if r.ok and v is not None else f"{r.status.value}: {r.error[:120]}"
        if self.bar:
            from rich.markup import escape
            self.bar.update(self.task, advance=1, description=escape(f"{r.arm[:40]}: {what[:60]}"))
        elif not self.quiet:
            elapsed = time.monotonic() - self.t0
            eta = ""
            if self.total and self.done < self.total:
                eta = f", ETA {elapsed / (self.done - self.replays) * (self.total - self.done):.0f}s"
            of = f"/{self.total}" if self.total else ""
            print(f"[{self.done}{of}{eta}] {r.host} {r.arm}: {what}", file=sys.stderr, flush=True)

    def log(self, msg: str):
        if not self.quiet:
            from rich.markup import escape
            from .redact import redact_text
            msg = redact_text(msg)
            (self.bar.console if self.bar else self.err).print(f"[dim]{escape(msg)}[/]", highlight=False)

    def stop(self):
        if self.bar:
            self.bar.stop()


def _session(args, exp, *, quiet: bool):
    from .campaigns import Session
    from .store import Store
    progress = _Progress(quiet=quiet, metric=exp.benchmark.metric)
    store = Store(_results(args, exp))
    hosts = _hosts(exp, args)
    s = Session(exp, store, hosts, log=progress.log, on_trial=progress.trial, on_plan=progress.plan,
                on_replay=progress.replayed)
    return s, progress


def _emit(args, result, render) -> None:
    data = result.to_dict()
    if args.json:
        print(_json(data))
    else:
        from rich.console import Console
        from .redact import redact_tree
        render(redact_tree(data), Console())


def _json(obj) -> str:
    """Strict JSON (NaN and infinities become null): any JSON parser must read --json output.
    Redacted as the data, before the text: the output stays valid JSON."""
    from .store import dumps
    return dumps(obj, redact=True)


def _resume_hint(session) -> str:
    cid = getattr(session, "campaign", None)
    return f"; continue with --resume {cid}" if cid else ""


def _with_session(args, exp, body):
    session, progress = _session(args, exp, quiet=args.json and not sys.stderr.isatty())
    try:
        return body(session)
    except KeyboardInterrupt:
        progress.stop()
        print(f"interrupted{_resume_hint(session)}", file=sys.stderr)
        raise SystemExit(130)
    finally:
        progress.stop()
        session.close()
        session.store.close()


# --------------------------------------------------------------------------- commands
def cmd_run(args) -> int:
    from .campaigns import run_arms
    from .render import run_result
    specs = _arm_words(args.patches, args)
    exp = _experiment(args.experiment)
    if not specs:
        specs = ["all", "none"]
    elif len(specs) == 1:
        from .arms import parse_arm
        if parse_arm(specs[0], exp.patchset).spec != "all":
            specs = ["all", specs[0]]    # one arm alone compares against the full patch set
    res = _with_session(args, exp, lambda s: run_arms(s, specs, repeat=args.repeat, resume=args.resume))
    _emit(args, res, run_result)
    return EXIT_OK


def cmd_attribute(args) -> int:
    from .campaigns import attribute
    from .render import attribution_result
    good, bad = _arm_words([args.good], args)[0], _arm_words([args.bad], args)[0]
    exp = _experiment(args.experiment)
    res = _with_session(args, exp, lambda s: attribute(s, good, bad, resume=args.resume,
                                                        max_trials=args.max_trials,
                                                        strategy=args.strategy or exp.design.strategy,
                                                        repeats=args.repeats))
    _emit(args, res, attribution_result)
    return EXIT_INCONCLUSIVE if res.status == "inconclusive" else EXIT_OK


def cmd_bisect(args) -> int:
    from .campaigns import bisect_commits
    from .render import bisect_result
    arm = _arm_words([args.patches], args)[0] if args.patches else "none"
    exp = _experiment(args.experiment)
    res = _with_session(args, exp, lambda s: bisect_commits(s, args.good, args.bad, arm=arm,
                                                             resume=args.resume, max_trials=args.max_trials))
    _emit(args, res, bisect_result)
    return EXIT_INCONCLUSIVE if res.status == "inconclusive" else EXIT_OK


def cmd_patches(args) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    console = Console()
    if args.action == "capture":
        from .capture import capture
        out = capture(args.repo, args.out, split=args.split or [], range=args.range)
        from .patchset import load_patchset
        ps = load_patchset(out)
        if args.json:
            print(_json({"out": str(out), "patches": [p.name for p in ps.patches]}))
        else:
            console.print(escape(f"captured {len(ps.patches)} patch(es) into {out}: {', '.join(ps.names)}"))
        return EXIT_OK
    exp = _experiment(args.experiment)
    ps = exp.patchset
    if ps is None:
        raise UsageError(f"{exp.path}: [target] has no patches = ... folder")
    if args.action == "list":
        if args.json:
            print(_json([{"name": p.name, "aliases": list(p.aliases), "required": p.required,
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
        console.print(t)
        return EXIT_OK
    # check
    from .trees import check_patchset
    hosts = _hosts(exp, args)
    try:
        report = check_patchset(hosts[0], exp.target, ps)
    finally:
        for h in hosts:
            h.close()
    data = report.to_dict() if hasattr(report, "to_dict") else vars(report)
    if args.json:
        print(_json(data))
    else:
        console.print(escape(str(report)) if hasattr(report, "__str__") else data)
    if not report.ok:
        problems = getattr(report, "problems", None) or []
        first = problems[0] if problems else "a patch does not apply"
        raise UsageError(f"patch check failed: {first}")
    return EXIT_OK


def cmd_cache(args) -> int:
    from .trees import cache_info, prune_cache
    if args.action == "prune":
        if args.keep_out is not None and args.keep_out < 0:
            raise UsageError(f"--keep-out must be 0 or more, not {args.keep_out}")
        removed = prune_cache(_cache(args), max_trees=args.max_trees, max_bytes=args.max_bytes,
                              everything=args.all, keep_out_campaigns=args.keep_out)
        outputs = getattr(removed, "outputs", [])
        if args.json:
            print(_json([{**t.to_dict(), "kind": "tree"} for t in removed]
                        + [{**o.to_dict(), "kind": "out"} for o in outputs]))
        else:
            outs = (f" and the {{out}} folders of {len(outputs)} campaign(s) "
                    f"({sum(o.trials for o in outputs)} trials)") if outputs else ""
            print(f"removed {len(removed)} tree(s){outs} from {_cache(args)}")
        return EXIT_OK
    info = cache_info(_cache(args), sizes=True).to_dict()
    if args.json:
        print(_json(info))
        return EXIT_OK
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    t = Table(title=escape(f"tree cache {info.get('root', _cache(args))}"))
    for col in ("tree", "repository", "base", "patches", "size", "last used"):
        t.add_column(col)
    for tr in info.get("trees", []):
        used = tr.get("last_used")
        t.add_row(escape(str(tr.get("key", ""))[:16]), escape(str(tr.get("repo", ""))),
                  escape(str(tr.get("commit", ""))[:12]), escape(", ".join(tr.get("patches") or [])),
                  _size(tr.get("size_bytes")),
                  time.strftime("%Y-%m-%d %H:%M", time.localtime(used)) if isinstance(used, (int, float)) else "-")
    Console().print(t)
    outs = info.get("outputs", [])
    print(f"{len(info.get('repos', []))} repositories, {len(info.get('trees', []))} trees "
          f"({_size(info.get('total_bytes', 0) - info.get('out_bytes', 0))}), {{out}} folders of {len(outs)} "
          f"campaign(s) ({sum(o['trials'] for o in outs)} trials, {_size(info.get('out_bytes'))}), "
          f"{_size(info.get('total_bytes'))} in all")
    return EXIT_OK


def _size(n) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def cmd_gpu(args) -> int:
    from .gpu import GpuInspector, reset
    exp = _experiment(args.experiment) if args.experiment else None
    if exp is not None:
        hosts = _hosts(exp, args)
        policy = exp.gpu
    else:
        from .hosts import LocalHost
        from .model import GpuPolicy
        hosts, policy = [LocalHost(cache_dir=_cache(args))], GpuPolicy()
    try:
        out = {}
        for h in hosts:
            if args.action == "status":
                snap = GpuInspector(h).probe()
                out[h.name] = snap.to_dict() if hasattr(snap, "to_dict") else vars(snap)
            else:
                if args.kill_all:
                    from dataclasses import replace
                    policy = replace(policy, kill="all-gpu-processes")
                res = reset(h, policy, owned_pids=())
                out[h.name] = res.to_dict() if hasattr(res, "to_dict") else vars(res)
    finally:
        for h in hosts:
            h.close()
    print(_json(out) if args.json else json.dumps(out, indent=2, default=str))
    if args.action == "reset":
        # "could not" is exit 4 (as a host that cannot be made ready for a trial), after the full output
        failed = [(name, r) for name, r in out.items() if isinstance(r, dict) and r.get("ok") is False]
        for name, r in failed:
            print(f"bisect-lab: error: gpu reset on {name} did not succeed: {r.get('status')}: {r.get('reason')}",
                  file=sys.stderr)
        if failed:
            return EXIT_NO_MEASUREMENT
    return EXIT_OK


def cmd_diff(args) -> int:
    from .diffing import diff_runs
    from .store import Store
    store = Store(_results(args), create=False, read_only=True)
    res = diff_runs(store, args.a, args.b)
    if args.json:
        print(_json(res))
    else:
        from .render_diff import render_diff
        from rich.console import Console
        from .redact import redact_tree
        render_diff(redact_tree(res), Console())
    return EXIT_OK


def cmd_report(args) -> int:
    from .report import write_report
    from .store import Store, StorageError
    store = Store(_results(args), create=False, read_only=True)
    try:
        out = write_report(store, args.what, fmt=args.format, out=args.out)
    except OSError as e:
        where = e.filename or args.out or store.dir
        hint = "" if args.out else "; pass --out FILE to write it elsewhere"
        raise StorageError(f"cannot write the report to {where}: {e.strerror or e}{hint}") from None
    print(out)
    return EXIT_OK


def cmd_sweep(args) -> int:
    from .campaigns import run_sweep
    from .render import render_sweep
    from .config import load_experiment
    from .sweepfile import load_sweep
    progress = _Progress(quiet=args.json and not sys.stderr.isatty(), metric="")
    results = _results(args, load_experiment(load_sweep(args.sweep).experiment))
    try:
        res = run_sweep(args.sweep, results=results, cache=_cache(args),
                        bisect_on_regression=args.bisect_on_regression, json_mode=args.json, log=progress.log)
    finally:
        progress.stop()
    if res.regressions:
        from .report import write_report
        from .store import Store
        with Store(results) as st:
            res.report = str(write_report(st, res.sweep, fmt="html"))
    if args.json:
        print(_json(res.to_dict()))
    else:
        from rich.console import Console
        render_sweep(res.to_dict(), Console())
        if res.report:
            print(f"report: {res.report}")
    return EXIT_REGRESSION if res.regressions else EXIT_OK


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bisect-lab", description="Which patch, commit or env var caused the regression, "
                                               "by how much, and how sure are we.")
    p.add_argument("--results", help="results folder (default ./results, or the user data dir when run from "
                                     "inside the target repository; env BISECT_LAB_RESULTS)")
    p.add_argument("--cache", help="clone/tree cache (default user cache dir, env BISECT_LAB_CACHE)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"bisect-lab {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    def common(sp, experiment=True):
        if experiment:
            sp.add_argument("experiment", nargs="?", help="experiment TOML file (default: the bundled demo)")
        sp.add_argument("--json", action="store_true", help="print one JSON object on stdout and nothing else")

    r = sub.add_parser("run", help="measure arms, interleaved; summaries and comparisons")
    common(r)
    r.add_argument("--patches", action="append", nargs="+", metavar="ARM",
                   help="arm spec, e.g. all-minus topk NCCL_PROTO=LL (repeat the option for more arms)")
    r.add_argument("--repeat", type=_positive_int,
                   help="trials per arm (default [design] repeat; with --resume the campaign's own; a larger "
                        "one measures more in a finished campaign)")
    r.add_argument("--resume", nargs="?", const=True, metavar="CAMPAIGN", help="continue an interrupted campaign")
    r.set_defaults(func=cmd_run)

    a = sub.add_parser("attribute", help="find which factors explain the difference between two arms")
    common(a)
    a.add_argument("--good", required=True, nargs="+", metavar="ARM")
    a.add_argument("--bad", required=True, nargs="+", metavar="ARM")
    a.add_argument("--max-trials", type=_positive_int,
                   help="budget (default [design] max_trials; with --resume the campaign's own; a larger "
                        "one lets a campaign that its budget cut short go on)")
    a.add_argument("--strategy", choices=ATTRIBUTION_STRATEGIES,
                   help="default [design] strategy, else adaptive: "
                        "adaptive (stops as soon as the answer is clear), thorough (adaptive, "
                        "and every answer checked for a smaller culprit left over: more trials, a 5%% "
                        "culprit beside a 20%% one found far more often) or screening (a fixed "
                        "factorial / Plackett-Burman design: a known number of trials)")
    a.add_argument("--repeats", type=_positive_int,
                   help="screening: rounds of the design (each round = every design arm + good + bad; "
                        "default 2; with --resume the campaign's own, and more rounds let it go on)")
    a.add_argument("--resume", nargs="?", const=True, metavar="CAMPAIGN")
    a.set_defaults(func=cmd_attribute)

    b = sub.add_parser("bisect", help="first commit that regressed, with the arm's patches on every commit")
    common(b)
    b.add_argument("--good", required=True, metavar="REF")
    b.add_argument("--bad", required=True, metavar="REF")
    b.add_argument("--patches", nargs="+", metavar="ARM", help="patches applied on every commit (default none)")
    b.add_argument("--max-trials", type=_positive_int,
                   help="budget (default [design] max_trials; with --resume the campaign's own; a larger "
                        "one lets a campaign that its budget cut short go on)")
    b.add_argument("--resume", nargs="?", const=True, metavar="CAMPAIGN")
    b.set_defaults(func=cmd_bisect)

    pa = sub.add_parser("patches", help="list / check / capture patch sets")
    psub = pa.add_subparsers(dest="action", required=True, parser_class=_Parser)
    pl = psub.add_parser("list", help="patches of an experiment's patch set")
    common(pl)
    pc = psub.add_parser("check", help="does each patch apply, alone and together; which pairs conflict")
    common(pc)
    pcap = psub.add_parser("capture", help="turn a checkout's uncommitted changes (or a range) into a patch set")
    common(pcap, experiment=False)
    pcap.add_argument("--repo", required=True, help="the checkout (never modified)")
    pcap.add_argument("--out", required=True, help="patch-set folder to write")
    pcap.add_argument("--split", action="append", metavar="file|GLOB=NAME", help="group files into patches")
    pcap.add_argument("--range", metavar="A..B", help="capture commits A..B instead of uncommitted changes")
    pa.set_defaults(func=cmd_patches)

    c = sub.add_parser("cache", help="show or prune the tree cache")
    csub = c.add_subparsers(dest="action", parser_class=_Parser)
    csub.add_parser("show")
    cp = csub.add_parser("prune")
    cp.add_argument("--max-trees", type=int, default=None)
    cp.add_argument("--max-bytes", type=int, default=None)
    cp.add_argument("--all", action="store_true", help="remove every cached tree and every per-trial {out} folder")
    cp.add_argument("--keep-out", type=int, default=None, metavar="N",
                    help="remove the per-trial {out} folders of all but the N most recent campaigns")
    cp.add_argument("--json", action="store_true")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_cache, action="show")

    g = sub.add_parser("gpu", help="GPU status / reset of a host")
    gsub = g.add_subparsers(dest="action", required=True, parser_class=_Parser)
    gs = gsub.add_parser("status")
    common(gs)
    gr = gsub.add_parser("reset", help="kill GPU processes bisect-lab started (or all, with --kill-all) and wait idle")
    common(gr)
    gr.add_argument("--kill-all", action="store_true", help="also kill GPU processes bisect-lab did not start (logged)")
    g.set_defaults(func=cmd_gpu)

    d = sub.add_parser("diff", help="what differed between two trials or campaigns (fingerprint, config)")
    d.add_argument("a", help="CAMPAIGN or CAMPAIGN:TRIAL")
    d.add_argument("b", help="CAMPAIGN or CAMPAIGN:TRIAL")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_diff)

    rp = sub.add_parser("report", help="Markdown or HTML report of a campaign or sweep")
    rp.add_argument("what", help="campaign id (or a unique prefix, or 'latest') or sweep name")
    rp.add_argument("--format", choices=["md", "html"], default="md")
    rp.add_argument("--out", help="output file (default: under the results folder)")
    rp.set_defaults(func=cmd_report)

    sw = sub.add_parser("sweep", help="nightly regression sweep over a matrix of arms")
    sw.add_argument("sweep", help="sweep TOML file")
    sw.add_argument("--json", action="store_true")
    sw.add_argument("--bisect-on-regression", action="store_true")
    sw.set_defaults(func=cmd_sweep)
    return p


def _terminate_as_interrupt(signum, frame):
    # SIGTERM/SIGHUP (a cancelled CI job, a closed SSH session) take the same path as Ctrl-C:
    # the benchmark's process tree is killed and the campaign is marked resumable.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    import signal
    argv = sys.argv[1:] if argv is None else argv
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, _terminate_as_interrupt)
        except (ValueError, OSError):      # not the main thread (e.g. called from a library)
            pass
    debug = "--debug" in argv or bool(os.environ.get("BISECT_LAB_DEBUG"))
    argv = [a for a in argv if a != "--debug"]      # accepted anywhere on the line
    _remember_secrets(argv)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Redacting(sys.stdout), _Redacting(sys.stderr)
    try:
        return _main(argv, debug)
    finally:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr = streams


def _main(argv: list[str], debug: bool) -> int:
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "func", None):
            build_parser().print_help(sys.stderr)
            return EXIT_USAGE
        return args.func(args)
    except BisectLabError as e:
        if debug:
            raise
        msg = " ".join(str(e).split("\n")[:1]) if not isinstance(e, _multi_line_errors()) else str(e)
        print(f"bisect-lab: error: {msg}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


def _multi_line_errors():
    from .errors import NoMeasurementError
    return (NoMeasurementError,)


if __name__ == "__main__":
    sys.exit(main())
