"""One interface for "run a command there" (layer 4, docs/DEVELOPING.md).

``LocalHost`` and ``SSHHost`` implement it and return the same result types, so
trees, GPU hygiene and the runner never ask where they are. Every call takes a
mandatory timeout: a dead host must never hang a campaign.
"""
from __future__ import annotations

import math
import re
import shlex
import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple, Sequence

from ..errors import HostError

Env = Mapping[str, "str | None"]   # overlay on the host's environment; None unsets

#: Every command a host starts carries this variable with a fresh token, so that
#: ``kill_tree`` also finds descendants that left the session (``setsid``, double
#: fork) as long as they inherited the environment.
RUN_ID_VAR = "BISECT_LAB_RUN_ID"

#: Every benchmark a campaign starts carries ``BISECT_LAB_CAMPAIGN=<campaign id>``, so that
#: ``--resume`` can find and end what a killed bisect-lab left running (:meth:`Host.kill_campaign`).
CAMPAIGN_VAR = "BISECT_LAB_CAMPAIGN"

#: The backstop ends a spawned command this long after its own timeout: bisect-lab, when
#: alive, kills it at the timeout itself; the backstop is for when it is not.
BACKSTOP_GRACE_S = 5.0

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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
        """True when the command exited 0 within its timeout."""
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
            sig = exit_signal(result.returncode)
            why = (f"exit {result.returncode}" + (f" ({describe_signal(sig)})" if sig else "")
                   + (f": {tail[0]}" if tail[0] else ""))
        super().__init__(f"{what} failed on {result.host}: {why}")


@dataclass
class KilledProcess:
    """One process that :meth:`Process.kill_tree` (or a timeout) killed."""

    pid: int
    cmdline: str


class Process(ABC):
    """A long-running command (the benchmark) started with :meth:`Host.spawn`.

    It runs in its own session/process group so that the whole tree (workers
    included) can be killed on timeout or Ctrl-C.
    """

    pid: int

    @abstractmethod
    def poll(self) -> int | None:
        """Exit code if the process ended (128+N when killed by signal N), else None."""

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
        """Pids of the process and its live descendants (for env verification).

        Descendants are found by parent pid and by session, so workers that were
        re-parented stay visible; zombies are left out.
        """

    def close(self) -> None:
        """Forget the captured output files (call after :meth:`output`); idempotent."""

    def terminate(self) -> None:
        """Ask the whole process group to stop (SIGTERM); a clean stop for a server. Returns at once:
        wait for the tree to go (:meth:`descendants`), then :meth:`kill_tree` what stayed."""
        raise NotImplementedError


class Host(ABC):
    """Where commands run. Subclasses: LocalHost, SSHHost."""

    name: str = "local"
    is_local: bool = True

    @abstractmethod
    def run(self, command: str | Sequence[str], *, timeout_s: float, cwd: str | None = None,
            env: Env | None = None, input: str | None = None) -> CommandResult:
        """Run to completion. A list is quoted with :func:`shlex.join`; a string runs under bash."""

    @abstractmethod
    def spawn(self, command: str, *, cwd: str | None = None, env: Env | None = None,
              timeout_s: float | None = None) -> Process:
        """Start ``command`` under bash in a new session; output is captured.

        A backstop that needs no bisect-lab (:data:`BACKSTOP_SCRIPT`) kills the command's
        tree :data:`BACKSTOP_GRACE_S` after ``timeout_s`` (never, when None) and, on the
        local machine, as soon as this process dies.
        """

    @abstractmethod
    def kill_campaign(self, campaign: str) -> list[KilledProcess]:
        """SIGKILL the processes whose environment carries ``BISECT_LAB_CAMPAIGN=campaign``
        (with the sessions they lead and their descendants); return what was killed."""

    @abstractmethod
    def read_bytes(self, path: str, *, timeout_s: float = 30.0) -> bytes:
        """Contents of ``path`` on the host; :class:`FileNotFoundError` if it is missing."""

    @abstractmethod
    def write_bytes(self, path: str, data: bytes, *, timeout_s: float = 30.0) -> None:
        """Replace ``path`` atomically with ``data``, creating parent folders."""

    @abstractmethod
    def cache_root(self) -> str:
        """Absolute folder where bisect-lab keeps clones and trees on this host."""

    def exists(self, path: str, *, timeout_s: float = 30.0) -> bool:
        """Whether ``path`` exists on the host."""
        return self.run(["test", "-e", path], timeout_s=timeout_s).returncode == 0

    def python(self, code: str, *args: str, timeout_s: float = 60.0,
               env: Env | None = None) -> CommandResult:
        """Run a Python snippet on the host (probes: GPU, /proc, versions)."""
        return self.run([self.python_exe, "-c", code, *args], timeout_s=timeout_s, env=env)

    def quick(self, command: str | Sequence[str], *, timeout_s: float = 30.0, cwd: str | None = None,
              env: Env | None = None) -> CommandResult:
        """A short command of bisect-lab's own (mkdir, touch, ps, probes), on the hot path of a trial.

        Same result as :meth:`run`, but remote hosts may run it in a persistent
        helper shell that skips the login shell's start-up files (one round trip
        instead of a new session): never use it for the user's own commands, whose
        environment must be the login environment.
        """
        return self.run(command, timeout_s=timeout_s, cwd=cwd, env=env)

    def python_path(self) -> str:
        """The interpreter :meth:`python` uses, as a path that works outside the login shell."""
        return self.python_exe

    def quick_python(self, code: str, *args: str, timeout_s: float = 60.0,
                     env: Env | None = None) -> CommandResult:
        """:meth:`python` through :meth:`quick` (same interpreter as the login shell finds)."""
        return self.quick([self.python_path(), "-c", code, *args], timeout_s=timeout_s, env=env)

    python_exe: str = "python3"

    def close(self) -> None:
        """Release connections; idempotent."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# The backstop of a spawned command: a watchdog that needs no bisect-lab. It is started beside
# the command, not under it (outside its session, without its environment, not a descendant), so
# the command's tree (kill_tree, env verification) never contains it. It waits while the
# command's process group lives; past the deadline, or once the parent it watches (bisect-lab,
# local only: over SSH a dropped connection may be reopened and the command must survive it) has
# died, it SIGKILLs the session and every process carrying the run token, and says so on stderr.
# $1: session id (the command's session leader), $2: seconds until the deadline ("" = none),
# $3: pid whose death ends the command ("" = none), $4: token line ("BISECT_LAB_RUN_ID=...").
BACKSTOP_SCRIPT = r"""
sid=$1 limit=$2 parent=$3 token=$4
cd / 2>/dev/null
members() {
    local f line rest
    for f in /proc/[0-9]*/stat; do
        read -r line < "$f" 2>/dev/null || continue
        rest=${line##*) }
        set -- $rest
        [ "$4" = "$sid" ] && echo "${f//[!0-9]/}"
    done
    [ -n "$token" ] && grep -lzx -- "$token" /proc/[0-9]*/environ 2>/dev/null | tr -cd '0-9\n'
}
why=
while kill -0 -- "-$sid" 2>/dev/null; do
    if [ -n "$parent" ] && ! kill -0 "$parent" 2>/dev/null; then why="bisect-lab (pid $parent) is gone"; break; fi
    if [ -n "$limit" ] && [ "$SECONDS" -ge "$limit" ]; then why="its deadline ($limit s) passed"; break; fi
    sleep 1
done
# The group may end while a worker that left it (setsid) lives on: with bisect-lab gone, nobody
# else will end that one.
if [ -z "$why" ] && [ -n "$parent" ] && ! kill -0 "$parent" 2>/dev/null; then why="bisect-lab (pid $parent) is gone"; fi
[ -n "$why" ] || exit 0
for round in 1 2 3 4 5; do
    pids=$(members | sort -u | grep -vx -e "$$" -e '')
    [ -n "$pids" ] || break
    kill -STOP $pids 2>/dev/null
    pids=$(members | sort -u | grep -vx -e "$$" -e '')
    [ -n "$pids" ] || break
    [ "$round" = 1 ] && echo "bisect-lab backstop: $why; killing pids" $pids >&2
    kill -KILL $pids 2>/dev/null
done
exit 0
"""


def backstop_limit(timeout_s: float | None) -> str:
    """The backstop's deadline argument: whole seconds past ``timeout_s`` plus the grace, or ""."""
    if timeout_s is None:
        return ""
    # +1: bash's SECONDS counts whole seconds from a start that may lie up to 1 s back.
    return str(int(math.ceil(timeout_s + BACKSTOP_GRACE_S)) + 1)


def as_shell(command: str | Sequence[str]) -> str:
    """The command as one shell string (a list is quoted word by word)."""
    return command if isinstance(command, str) else shlex.join(list(command))


def check_env(env: Env | None) -> dict[str, str | None]:
    """Validate an env overlay; a bad name would otherwise be run as a command by ``env``."""
    out: dict[str, str | None] = {}
    for k, v in (env or {}).items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            raise HostError(f"invalid environment variable name {k!r}")
        if v is not None and not isinstance(v, str):
            raise HostError(f"environment variable {k} must be a string or None, not {type(v).__name__}")
        if v is not None and "\0" in v:
            raise HostError(f"environment variable {k} contains a NUL byte")
        out[k] = v
    return out


def shell_returncode(code: int | None) -> int | None:
    """Popen's -N (killed by signal N) as the shell's 128+N, the form a remote host reports."""
    if code is not None and code < 0:
        return 128 - code
    return code


KILLED_RETURNCODE = 128 + int(signal.SIGKILL)

#: Signals sent from outside the process (the out-of-memory killer, an admin, a scheduler, a
#: closed terminal), unlike those a program brings on itself by crashing (SIGSEGV, SIGABRT,
#: SIGBUS, SIGFPE, SIGILL): a kill says nothing about the code under test.
EXTERNAL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT,
                              signal.SIGQUIT})


def exit_signal(code: int | None) -> signal.Signals | None:
    """The signal that a shell-style exit code 128+N reports, or None for a plain exit."""
    if code is None or code <= 128:
        return None
    try:
        return signal.Signals(code - 128)
    except ValueError:
        return None           # 255 (ssh's own failure) and the like are plain exit codes


def describe_signal(sig: signal.Signals) -> str:
    """``killed by SIGKILL (signal 9; often the out-of-memory killer)``."""
    hint = "; often the out-of-memory killer" if sig == signal.SIGKILL else ""
    return f"killed by {sig.name} (signal {int(sig)}{hint})"


class ProcInfo(NamedTuple):
    """One row of a process table (local psutil or remote /proc)."""

    pid: int
    ppid: int
    sid: int
    zombie: bool


def family(table: Iterable[ProcInfo], root: int, *, session: bool = True,
           extra: Iterable[int] = (), root_is_ours: bool = True) -> list[int]:
    """Pids of ``root``'s tree: ``root``, its descendants by parent pid, members of its
    session (``sid == root``: re-parented workers) and ``extra`` (token matches, with
    the sessions of those that lead one), plus their descendants. Zombies are left
    out: they are already dead.

    ``root_is_ours=False`` says the pid may have been reused by a stranger (the
    process ended and was reaped): then only its session (a pid is never reused
    while it still names a session) and the token matches count.

    Pure, so the local and the SSH host share one definition of "the tree".
    """
    rows = {r.pid: r for r in table}
    children: dict[int, list[int]] = {}
    for r in rows.values():
        children.setdefault(r.ppid, []).append(r.pid)
    extra = list(extra)
    seeds = [root, *extra] if root_is_ours else list(extra)
    if session:
        leaders = {root} | {p for p in extra if p in rows and rows[p].sid == p}
        seeds += [r.pid for r in rows.values() if r.sid in leaders]
    seen: set[int] = set()
    order: list[int] = []
    stack = list(reversed(seeds))
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in rows:
            continue
        seen.add(pid)
        if not rows[pid].zombie:
            order.append(pid)
        stack.extend(reversed(children.get(pid, [])))
    return order


_STAT = re.compile(r"^(\d+) \((.*)\) (\S) (-?\d+) (-?\d+) (-?\d+) ", re.M)


def parse_proc_stat(text: str) -> list[ProcInfo]:
    """Rows from concatenated ``/proc/*/stat`` lines (comm may contain spaces and parens)."""
    return [ProcInfo(int(m[1]), int(m[4]), int(m[6]), m[3] in "ZX")
            for m in _STAT.finditer(text)]
