"""Text a benchmark printed, made fit for one line of a message (layer 1). Pure."""
from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07]*(?:\x07|\x1b\\\\)|[@-Z\\\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def printable(text: str) -> str:
    """``text`` without terminal escapes and control characters, and without a trailing colon: a
    benchmark's last line that is only a colour reset or a cursor move must not leave
    "timed out after 3 s: " with nothing after it."""
    return _CONTROL.sub("", _ANSI.sub("", text or "")).strip().rstrip(":").rstrip()


def last_line(text: str, limit: int = 300) -> str:
    """The last line of ``text`` that still says something once escapes are gone ("" if none)."""
    lines = [printable(line) for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:limit] if lines else ""
