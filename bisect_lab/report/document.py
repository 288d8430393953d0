"""The document a report is made of (sections of paragraphs, tables, figures) and its redaction."""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field

__all__ = ["Table", "Figure", "Section", "Report", "redacted"]


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    png: bytes
    caption: str
    name: str


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)      # str (paragraph, Markdown inline), Table, Figure, list[str]

    def p(self, text: str):
        self.blocks.append(text)

    def add(self, block):
        if block is not None:
            self.blocks.append(block)


@dataclass
class Report:
    """A built report: ``answer`` is the one sentence a reader sees first, ``status`` the colour of
    its box ("bad" | "good" | "unknown"), ``facts`` the key facts under it."""
    title: str
    answer: str
    status: str
    facts: list[tuple[str, str]]
    sections: list[Section]


def redacted(rep: Report) -> Report:
    """The report with every text passed through the redaction policy (a database written before
    the policy existed may hold secrets in errors or output tails)."""
    from ..redact import redact_text

    def block(b):
        if isinstance(b, str):
            return redact_text(b)
        if isinstance(b, Table):
            return Table([redact_text(h) for h in b.headers],
                         [[redact_text(c) if isinstance(c, str) else c for c in row] for row in b.rows],
                         redact_text(b.note))
        if isinstance(b, Figure):
            return Figure(b.png, redact_text(b.caption), b.name)
        if isinstance(b, list):
            return [block(x) for x in b]
        return b
    return Report(title=redact_text(rep.title), answer=redact_text(rep.answer), status=rep.status,
                  facts=[(redact_text(k), redact_text(v) if isinstance(v, str) else v) for k, v in rep.facts],
                  sections=[Section(redact_text(sec.title), [block(b) for b in sec.blocks]) for sec in rep.sections])


# --------------------------------------------------------------------------- small formatting helpers
def pct(r, digits=1) -> str:
    """A ratio as a signed percentage change ("-" when there is none)."""
    return "-" if r is None or (isinstance(r, float) and not math.isfinite(r)) else f"{(r - 1) * 100:+.{digits}f}%"


def num(x, fmt="{:.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return fmt.format(x)


def when(ts) -> str:
    if not ts:
        return "-"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def dur(s) -> str:
    if s is None:
        return "-"
    s = float(s)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def code(s) -> str:
    return f"`{s}`" if s else "-"


def first_line(text: str, n: int = 160) -> str:
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= n else line[: n - 1] + "…"
