"""What one attempt at a trial is and leaves (layer 5): :class:`TrialSpec` (what to measure),
:class:`Attempt` (its clock and how its result is written), :class:`TrialOutcome` (the result
with what is stored beside it) and :class:`TrialFailed` (a step that ended it early). Shared by
``runner`` (trials) and ``serving`` (the readings of a session)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .model import Arm, TrialResult, TrialStatus
from .redact import redact_text as redact_value
from .terminal_text import last_line


def _tail(text: str, lines: int = 20, chars: int = 2000) -> str:
    out = "\n".join(text.strip().splitlines()[-lines:])
    return out[-chars:]


def _killed(procs) -> list[dict]:
    """Killed processes as stored with the trial: pid and command line, secrets redacted."""
    return [{"pid": k.pid, "cmdline": redact_value(k.cmdline)} for k in procs]


def _one_line(text: str) -> str:
    # escapes stripped: a last line that is only a colour reset says nothing
    return last_line(text)


@dataclass(frozen=True)
class TrialSpec:
    """What to measure: an arm, optionally on another base commit (bisection, sweeps)."""

    arm: Arm
    commit: str | None = None
    tag: str | None = None

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.arm.spec, self.commit)


@dataclass
class TrialOutcome:
    result: TrialResult
    extra: dict = field(default_factory=dict)
    fingerprint_data: dict | None = None


class TrialFailed(Exception):
    """A step of a trial failed: ``outcome`` is the failed trial, ready to store."""

    def __init__(self, outcome: TrialOutcome):
        super().__init__(outcome.result.error)
        self.outcome = outcome


class Attempt:
    """One attempt at one trial (or one reading of a session): its clock, what it ran on, and how
    its result (failed or not) is written."""

    # worker: a runner.HostWorker (anything with .host)
    def __init__(self, worker: "HostWorker", spec: TrialSpec, campaign: str, index: int, *,
                 session: str | None = None, tag: str | None = None):
        self.worker, self.spec, self.campaign, self.index = worker, spec, campaign, index
        self.session = session
        self.tag = spec.tag if tag is None else tag
        self.started = time.time()
        self.t0 = time.monotonic()
        self.commit: str | None = spec.commit
        self.tree_hash: str | None = None

    def result(self, status: TrialStatus, **fields) -> TrialResult:
        return TrialResult(campaign=self.campaign, trial=self.index, arm=self.spec.arm.spec, status=status,
                           host=self.worker.host.name, started=self.started,
                           duration_s=time.monotonic() - self.t0, commit=self.commit, tree_hash=self.tree_hash,
                           tag=self.tag, session=self.session, **fields)

    def fail(self, status: TrialStatus, error: str, extra: dict | None = None,
             env_report: dict | None = None) -> TrialOutcome:
        return TrialOutcome(self.result(status, error=redact_value(error), env_report=env_report or {}),
                            extra or {})


