"""``{name}`` placeholders in command templates (``{tree}``, ``{out}``, ...). Pure.

Substitution is one pass over the template: a value is never scanned again, so a
path that happens to contain ``{out}`` (a cache root, a remote workdir) stays a
path instead of being replaced a second time and breaking the quoting around it.
"""
from __future__ import annotations

import re
import shlex
from typing import Callable, Mapping

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute(template: str, values: Mapping[str, str], *,
               quote: Callable[[str], str] = lambda v: v) -> str:
    """``template`` with every ``{name}`` whose name is in ``values`` replaced by
    ``quote(values[name])``, in one pass. Unknown placeholders (``${HOME}``, a
    literal ``{x}`` in a Python one-liner) are left as written."""
    def one(m: re.Match) -> str:
        name = m[1]
        return quote(str(values[name])) if name in values else m[0]
    return _PLACEHOLDER.sub(one, template)


def shell_substitute(template: str, values: Mapping[str, str]) -> str:
    """:func:`substitute` for a shell command: every value is shell-quoted, so a user
    writes ``{out}/res.jsonl``, never ``"{out}"``."""
    return substitute(template, values, quote=shlex.quote)
