"""The ``bisect-lab`` command line: the parser assembled from the commands of
``bisect_lab.commands`` (one module each), and what every command shares at the edge.

Only the entry points print, exit or read argv. Here: secrets given on the command line are
remembered and stdout / stderr redacted; SIGTERM / SIGHUP become an interrupt; a user error
becomes one line on stderr and the exit code of the error (``--debug`` shows the traceback).
"""
from __future__ import annotations

import argparse
import os
import sys

from .commands import bundled_demo, setup_arguments
from .commands._options import add_global_options
from .errors import EXIT_OK, EXIT_USAGE, BisectLabError, UsageError

__all__ = ["build_parser", "bundled_demo", "main"]


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


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the global options, then each command's own parser."""
    p = _Parser(prog="bisect-lab", description="Which patch, commit or env var caused the regression, "
                                               "by how much, and how sure are we.")
    add_global_options(p)
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    setup_arguments(sub)
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
        from .commands import _context
        if _context.demo_in_use and "valid names" in msg:
            # the names listed are the demo's: no EXPERIMENT was given
            msg += " (these are the bundled demo's names: no EXPERIMENT was given)"
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
