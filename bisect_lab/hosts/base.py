"""One interface for "run a command there" (DESIGN 4, layer 4).

``LocalHost`` and ``SSHHost`` implement it and return the same result types, so
trees, GPU hygiene and the runner never ask where they are. Every call takes a
mandatory timeout: a dead host must never hang a campaign.
"""
from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import HostError

Env = Mapping[str, "str | None"]   # overlay on the host's environment; None unsets


@dataclass(frozen=True)
class CommandResult:
    """What one finished (or killed) command left behind."""

    command: str
    returncode: int | None           # None when killed on timeout
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    host: str = "local"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def check(self, what: str) -> "CommandResult":
        """Raise :class:`HostCommandError` unless the command succeeded."""
        if not self.ok:
            raise HostCommandError(what, self)
        return self


class HostCommandError(HostError):
    """A command that had to succeed did not; carries its result."""

    def __init__(self, what: str, result: CommandResult):
        self.result = result
        if result.timed_out:
            why = "timed out"
        else:
            tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or [""]
            why = f"exit {result.returncode}: {tail[0]}"
        super().__init__(f"{what} failed on {result.host}: {why}")


@dataclass
class KilledProcess:
    pid: int
    cmdline: str


class Process(ABC):
    """A long-running command (the benchmark) started with :meth:`Host.spawn`.

    It runs in its own session/process group so that the whole tree (workers
    included) can be killed on timeout or Ctrl-C.
    """

    pid: int

    @abstractmethod
    def poll(self) -> int | None: ...

    @abstractmethod
    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s``; return the exit code or None if still running."""

    @abstractmethod
    def kill_tree(self) -> list[KilledProcess]:
        """Kill the process and every descendant; return what was killed."""

    @abstractmethod
    def output(self) -> tuple[str, str]:
        """(stdout, stderr) captured so far (complete once the process ended)."""

    @abstractmethod
    def descendants(self) -> list[int]:
        """Pids of the process and its live descendants (for env verification)."""


class Host(ABC):
    """Where commands run. Subclasses: LocalHost, SSHHost."""

    name: str = "local"
    is_local: bool = True

    @abstractmethod
    def run(self, command: str | Sequence[str], *, timeout_s: float, cwd: str | None = None,
            env: Env | None = None, input: str | None = None) -> CommandResult:
        """Run to completion. A list is quoted with :func:`shlex.join`; a string runs under bash."""

    @abstractmethod
    def spawn(self, command: str, *, cwd: str | None = None, env: Env | None = None) -> Process:
        """Start ``command`` under bash in a new session; output is captured."""

    @abstractmethod
    def read_bytes(self, path: str, *, timeout_s: float = 30.0) -> bytes: ...

    @abstractmethod
    def write_bytes(self, path: str, data: bytes, *, timeout_s: float = 30.0) -> None: ...

    @abstractmethod
    def cache_root(self) -> str:
        """Absolute folder where bisect-lab keeps clones and trees on this host."""

    def exists(self, path: str, *, timeout_s: float = 30.0) -> bool:
        return self.run(["test", "-e", path], timeout_s=timeout_s).returncode == 0

    def python(self, code: str, *args: str, timeout_s: float = 60.0,
               env: Env | None = None) -> CommandResult:
        """Run a Python snippet on the host (probes: GPU, /proc, versions)."""
        return self.run([self.python_exe, "-c", code, *args], timeout_s=timeout_s, env=env)

    python_exe: str = "python3"

    def close(self) -> None:
        """Release connections; idempotent."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def as_shell(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else shlex.join(list(command))
