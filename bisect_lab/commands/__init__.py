"""The ``bisect-lab`` commands, one module each.

Every command module has three parts:

- ``setup_arguments(subparsers)``: adds its parser (options shared with other commands come
  from ``_options``) and sets ``func=run_from_args``;
- ``run_from_args(args) -> int``: parsed argv to keyword arguments, the one place the command
  reads ``args``;
- the plain function doing the work, ``run(ctx, ...) -> int`` (``cache`` has ``show`` and
  ``prune``, ``patches`` has ``capture`` beside ``run``): given a :class:`Context`
  (``--results``, ``--cache``, ``--json``) and plain values, it prints the result and returns
  the exit code.
"""
from __future__ import annotations

from . import attribute, bisect, cache, check, compare, diff, gpu, init, log, patches, recheck, report, run, sweep, verdict
from ._context import Context, bundled_demo

# the order of ``bisect-lab --help``
COMMANDS = (run, attribute, bisect, patches, cache, gpu, diff, report, log, recheck, sweep, compare, init, check, verdict)


def setup_arguments(subparsers) -> None:
    """Every command's parser, in the order of :data:`COMMANDS`."""
    for command in COMMANDS:
        command.setup_arguments(subparsers)


__all__ = ["COMMANDS", "Context", "bundled_demo", "setup_arguments"]
