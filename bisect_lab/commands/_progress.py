"""The progress of a campaign on stderr: a live bar with ETA on a terminal, one line per
trial otherwise (logs, CI); nothing with ``--json`` when stderr is not a terminal."""
from __future__ import annotations

import sys
import time


class Progress:
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
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn
            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
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
        from ..redact import redact_text
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
            from ..redact import redact_text
            msg = redact_text(msg)
            (self.bar.console if self.bar else self.err).print(f"[dim]{escape(msg)}[/]", highlight=False)

    def stop(self):
        if self.bar:
            self.bar.stop()
