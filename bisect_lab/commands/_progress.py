"""The progress of a campaign on stderr: a live bar on a terminal, one line per trial otherwise
(logs, CI, and always under ``--json``, whose stdout stays the one JSON object).

Each line says what was measured (the arm; for a bisection the commit's short hash and subject),
where the campaign stands against its budget (``[9/60]``: 60 is the budget from the start, "at
most" for a search that may stop early) and, once a few trials are in, an ETA: the median time
between this campaign's own trial completions times the trials left (replayed trials of a resume
took no time and are not part of it)."""
from __future__ import annotations

import statistics
import sys
import time
from typing import Callable

# Campaign kinds whose strategy may stop before its budget: their total reads "at most".
EARLY_STOPPING = ("attribute", "bisect")
ETA_AFTER = 3          # completions between trials measured before an ETA is shown

from ..terminal_text import printable  # noqa: F401  (re-exported: the progress line's cleaning)

def _verdict_word(v: float, metric: str) -> str | None:
    """A pass/fail bisection's reading (``bisect --run-script``: 1 good, 2 bad, 3 skip, the
    campaign's ``verdict`` metric) in git bisect's words, not as "2.00 verdict"."""
    return {1.0: "good", 2.0: "bad", 3.0: "skip"}.get(v) if metric == "verdict" else None


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``1h02m``: short enough for a progress line."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"

class Progress:
    """A live bar on a terminal; one line per trial otherwise (logs, CI, ``--json``).

    ``kind_of(campaign id)``: the campaign's kind (its budget is "at most" for a search);
    ``subject_of(sha)``: a commit's subject, for the trials of a bisection."""

    def __init__(self, quiet: bool, metric: str, *, lines: bool = False,
                 kind_of: Callable[[str], str | None] | None = None,
                 subject_of: Callable[[str], str | None] | None = None):
        from ._context import console
        self.err = console(stderr=True)
        self.quiet = quiet
        self.metric = metric
        self.kind_of = kind_of or (lambda cid: None)
        self.subject_of = subject_of or (lambda sha: None)
        self._kinds: dict[str, str | None] = {}
        self._subjects: dict[str, str | None] = {}
        self.done = 0
        self.replays = 0
        self.total = None            # the budget: the first plan a campaign announces
        self.estimate = None         # a strategy's later estimate of where it will stop
        self.last = time.monotonic()
        self.intervals: list[float] = []
        self.bar = None
        if self.err.is_terminal and not quiet and not lines:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn
            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("{task.fields[eta]}"), console=self.err, transient=True)
            self.task = self.bar.add_task("trials", total=None, eta="")
            self.bar.start()

    def plan(self, total: int):
        """The budget the first time; later calls (a search's moving estimate) leave it shown as
        the total, so that ``[3/15]`` never becomes ``[57/59]``."""
        if self.total is None:
            self.total = total
            if self.bar:
                self.bar.update(self.task, total=max(total, self.done))
        else:
            self.estimate = total

    def replayed(self, r):
        """A stored trial a resume took instead of running it: counted, not printed, and not
        part of the ETA (it took no time); the first new trial of a resumed campaign reads [81/200]."""
        self.done += 1
        self.replays += 1
        self.last = time.monotonic()
        if self.bar:
            self.bar.update(self.task, advance=1)

    def _kind(self, cid: str) -> str | None:
        if cid not in self._kinds:
            try:
                self._kinds[cid] = self.kind_of(cid)
            except Exception:          # a display detail: never worth failing a campaign for
                self._kinds[cid] = None
        return self._kinds[cid]

    def _subject(self, sha: str) -> str | None:
        if sha not in self._subjects:
            try:
                self._subjects[sha] = self.subject_of(sha)
            except Exception:
                self._subjects[sha] = None
        return self._subjects[sha]

    def measured(self, r) -> str:
        """What trial ``r`` measured: the arm, and for a bisection the commit and its subject."""
        if self._kind(r.campaign) == "bisect" and r.commit:
            subject = self._subject(r.commit)
            what = f"commit {r.commit[:10]}" + (f" {subject[:60]!r}" if subject else "")
            return what + ("" if r.arm == "none" else f" with {r.arm}")
        return f"arm {r.arm}"

    def eta(self) -> str:
        """"ETA 1m50s" once :data:`ETA_AFTER` trial times are in; "" before (or at the end)."""
        if self.total is None or len(self.intervals) < ETA_AFTER or self.done >= self.total:
            return ""
        left = statistics.median(self.intervals) * (self.total - self.done)
        return f"ETA {'at most ' if self._early else ''}{duration(left)}"

    @property
    def _early(self) -> bool:
        return any(k in EARLY_STOPPING for k in self._kinds.values())

    def budget(self) -> str:
        """``9/60``, ``9/60 at most`` for a search, ``9`` before any plan."""
        if self.total is None:
            return str(self.done)
        return f"{self.done}/{max(self.total, self.done)}{' at most' if self._early else ''}"

    def trial(self, r):
        # Redacted before rich lays the line out: a secret folded over two lines is not found later.
        from dataclasses import replace
        from ..redact import redact_text
        r = replace(r, arm=redact_text(r.arm), error=redact_text(r.error))
        now = time.monotonic()
        if self.done > self.replays:        # the first new trial's time includes the campaign's setup
            self.intervals.append(now - self.last)
        self.last = now
        self.done += 1
        self._kind(r.campaign)
        v = r.metrics.get(self.metric)
        error = printable(r.error)
        value = (_verdict_word(v, self.metric) or f"{v:.2f} {self.metric}" if r.ok and v is not None
                 else f"{r.status.value}: {error[:120]}" if error else r.status.value)
        what = self.measured(r)
        if self.bar:
            from rich.markup import escape
            self.bar.update(self.task, advance=1, eta=self.eta(),
                            description=escape(f"{what[:60]}: {value[:60]}"))
        elif not self.quiet:
            eta = self.eta()
            print(f"[{self.budget()}{', ' + eta if eta else ''}] {what} on {r.host}: {value}",
                  file=sys.stderr, flush=True)

    def log(self, msg: str):
        if not self.quiet:
            from rich.markup import escape
            from ..redact import redact_text
            msg = redact_text(msg)
            # piped (a log, `2>&1 | grep`): one line per message, however long, never folded
            (self.bar.console if self.bar else self.err).print(f"[dim]{escape(msg)}[/]", highlight=False,
                                                               soft_wrap=not self.err.is_terminal)

    def stop(self):
        if self.bar:
            self.bar.stop()
