"""Errors that carry the exit code of docs/contracts.md (Exit codes).

Entry points catch :class:`BisectLabError` and print ``str(err)`` as one line on
stderr, then exit with ``err.exit_code``. Anything else is a bug and shows a
traceback only with ``--debug``.
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3
EXIT_NO_MEASUREMENT = 4


class BisectLabError(Exception):
    """Base class for errors a user can act on."""

    exit_code = EXIT_USAGE


class UsageError(BisectLabError):
    """Bad command line, bad arm spec, unknown name."""


class ConfigError(BisectLabError):
    """A malformed experiment file, manifest or sweep file.

    The message names the file, the key and what was expected.
    """

    def __init__(self, path, key: str | None, message: str):
        self.path = path
        self.key = key
        where = f"{path}" + (f": [{key}]" if key else "")
        super().__init__(f"{where}: {message}")


class PatchError(BisectLabError):
    """A patch that does not apply, or a patch set that is inconsistent."""

    def __init__(self, message: str, patch: str | None = None, file: str | None = None):
        self.patch = patch
        self.file = file
        super().__init__(message)


class HostError(BisectLabError):
    """A host that cannot be reached or refuses to run commands."""

    exit_code = EXIT_NO_MEASUREMENT


class NoMeasurementError(BisectLabError):
    """Every try of the benchmark failed; carries the benchmark's own error."""

    exit_code = EXIT_NO_MEASUREMENT


class InconclusiveError(BisectLabError):
    exit_code = EXIT_INCONCLUSIVE
