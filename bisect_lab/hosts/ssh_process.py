"""Remote commands and process trees over an :class:`~.ssh_connection.SshConnection`.

Closing an SSH channel does not kill the remote command (no pty, no SIGHUP). So every
command carries a token in its environment (``BISECT_LAB_RUN_ID``); on timeout or Ctrl-C
a second command finds the tree through ``/proc`` (parent pid, session, token) and
SIGKILLs it. A command run to completion is also wrapped in ``timeout -s KILL`` a few
seconds past our own deadline, and a spawned one (the benchmark) gets the backstop
watchdog (``base.BACKSTOP_SCRIPT``), so either dies even if we (or the connection) die first.
"""
from __future__ import annotations

import io
import math
import shlex
import time
import uuid
from typing import TYPE_CHECKING, Sequence

from invoke.exceptions import CommandTimedOut

from ..errors import HostError
from .base import (BACKSTOP_SCRIPT, KILLED_RETURNCODE, RUN_ID_VAR, CommandResult, Env, KilledProcess,
                   Process, as_shell, backstop_limit, check_env, family, parse_proc_stat)
from .ssh_connection import ConnectionLost, SshConnection

if TYPE_CHECKING:
    from .ssh import SSHHost

# The remote `timeout` fires this long after our own deadline: a safety net for
# when we (or the connection) die before we can kill the command ourselves.
_REMOTE_GRACE_S = 5.0
# Exit code + stderr line that mark "the cwd does not exist" (both must match).
_NO_CWD_RC = 97
_NO_CWD_MSG = "bisect-lab: no such directory: "

q = shlex.quote


# ----------------------------------------------------------------------------- remote scripts
# Every bash we start is `bash --norc`: bash sources ~/.bashrc whenever it runs
# under sshd (SSH_CLIENT set, SHLVL < 2), even for `bash -c`; the login shell
# already did, and its exports are inherited. Twice costs 0.3-0.8 s per command
# on a box with pyenv/conda init.
# Each runs as `bash -c SCRIPT bisect-lab ARGS...`: the script is a constant and every
# value arrives as a positional argument, so nothing needs quoting inside it.

# $1: token line ("BISECT_LAB_RUN_ID=..." or ""). Prints /proc/*/stat, its own pid, a
# separator, then the environ files that carry the token.
_SNAPSHOT = r'''
cat /proc/[0-9]*/stat 2>/dev/null
echo "@@bisect-lab-self@@ $$"
echo "@@bisect-lab-tokens@@"
if [ -n "$1" ]; then grep -lzx -- "$1" /proc/[0-9]*/environ 2>/dev/null; fi
true
'''

# $1: separator, rest: pids. Prints "SEP pid\ncmdline" for each, then SIGKILLs them all.
_KILL = r'''
sep=$1; shift
for p in "$@"; do printf '\n%s %s\n' "$sep" "$p"; tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null; done
kill -KILL "$@" 2>/dev/null
true
'''

# $1: spawn dir, $2: pid, $3: token line.
_POLL = r'''
if [ -f "$1/rc" ]; then echo "rc $(cat "$1/rc")"
elif grep -qzx -- "$3" "/proc/$2/environ" 2>/dev/null; then echo running
elif [ -f "$1/rc" ]; then echo "rc $(cat "$1/rc")"
else echo gone
fi
'''

# The session leader of a spawned command: records its own pid (once its
# environment carries the token, so poll() can recognise it), runs the command
# with output to files, then records the exit code. Both files are written
# atomically (tmp + mv) so a reader never sees half of one. stderr is opened for
# appending: the backstop may add its line to it.
_SPAWN_WRAPPER = ('echo $$ >"$2/pid.tmp" && mv -f "$2/pid.tmp" "$2/pid"; '
                  'bash --norc -c "$1" >"$2/stdout" 2>>"$2/stderr" </dev/null; '
                  'echo $? >"$2/rc.tmp" && mv -f "$2/rc.tmp" "$2/rc"')


def _ancestors(table, pid: int) -> set[int]:
    """``pid`` and its ancestors in a process table."""
    parent = {r.pid: r.ppid for r in table}
    out: set[int] = set()
    while pid > 0 and pid not in out:
        out.add(pid)
        pid = parent.get(pid, 0)
    return out


def _bash(script: str, *args: object) -> str:
    return "bash --norc -c " + q(script) + " bisect-lab " + " ".join(q(str(a)) for a in args)


def home_path(path: str) -> str:
    """Shell text for ``path`` with a leading ``~`` expanded on the remote side."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + q(path[2:])
    return q(path)


def _env_words(env: Env | None, run_id: str | None) -> list[str]:
    words = ["env"]
    overlay = check_env(env)
    for k, v in overlay.items():
        if v is None:
            words += ["-u", q(k)]
    for k, v in overlay.items():
        if v is not None:
            words.append(q(f"{k}={v}"))
    if run_id:
        words.append(q(f"{RUN_ID_VAR}={run_id}"))
    return words


def _cd(cwd: str | None) -> str:
    if not cwd:
        return ""
    d = home_path(cwd)
    return f"{{ cd {d} 2>/dev/null || {{ echo {q(_NO_CWD_MSG + cwd)} >&2; exit {_NO_CWD_RC}; }}; }} && "


def _no_cwd(result_rc: int | None, stderr: str, cwd: str | None) -> bool:
    return bool(cwd) and result_rc == _NO_CWD_RC and (_NO_CWD_MSG + cwd) in stderr


# ----------------------------------------------------------------------------- commands
class RemoteCommands:
    """Commands on the far side of one connection: run to completion (through fabric, in the
    login shell), quick (through the helper shell), spawned (own session, output to files),
    and the ``/proc`` look-ups that find and kill what they started."""

    def __init__(self, connection: SshConnection):
        self.connection = connection
        self.name = connection.name

    def _exec(self, remote: str, timeout_s: float, what: str, input: str | None = None):
        """Run an already-quoted remote command line through fabric."""
        def go(conn):
            r = conn.run(remote, hide=True, warn=True, timeout=timeout_s, pty=False,
                         in_stream=io.StringIO(input) if input is not None else False)
            if r.exited == -1 and not conn.is_connected:
                # paramiko reports -1 when the channel closed without an exit status.
                raise EOFError("connection closed before the command finished")
            return r
        return self.connection.call(go, what)

    def run(self, command: str | Sequence[str], *, timeout_s: float, cwd: str | None = None,
            env: Env | None = None, input: str | None = None) -> CommandResult:
        """See :meth:`SSHHost.run`."""
        shell = as_shell(command)
        run_id = uuid.uuid4().hex
        limit = max(1, math.ceil(timeout_s + _REMOTE_GRACE_S))
        # Not `exec`: GNU timeout re-raises a signal that killed the command, and a
        # session that dies by a signal reports no exit status over SSH. The login
        # shell turns it into 128+N, as bash does locally.
        remote = (_cd(cwd) + " ".join(_env_words(env, run_id))
                  + f" timeout -s KILL {limit} bash --norc -c {q(shell)}"
                  + (" </dev/null" if input is None else "") + "; exit $?")
        t0 = time.monotonic()
        try:
            r = self._exec(remote, timeout_s, shell, input=input)
        except CommandTimedOut as e:
            self.kill_quietly(None, run_id)
            res = e.result
            return CommandResult(shell, None, res.stdout or "", res.stderr or "",
                                 time.monotonic() - t0, True, self.name)
        except ConnectionLost:
            # It may still run over there; a retried trial must not share the GPU with it.
            self.kill_quietly(None, run_id)
            raise
        except KeyboardInterrupt:
            self.kill_quietly(None, run_id)
            raise
        except HostError:
            raise
        except Exception as e:
            self.kill_quietly(None, run_id)
            raise HostError(f"{self.name}: running {shell[:120]!r} failed: {e}") from e
        elapsed = time.monotonic() - t0
        if r.exited == -1 and elapsed >= timeout_s:
            # Under load, invoke's timer can close the channel and let the wait return before it
            # flags the timeout: no exit status at the deadline is the timeout (seen once in CI).
            self.kill_quietly(None, run_id)
            return CommandResult(shell, None, r.stdout, r.stderr, elapsed, True, self.name)
        if _no_cwd(r.exited, r.stderr, cwd):
            raise HostError(f"{self.name}: cannot run {shell[:120]!r}: no such directory {cwd}")
        return CommandResult(shell, r.exited, r.stdout, r.stderr, elapsed, False, self.name)

    def quick(self, command: str | Sequence[str], *, timeout_s: float = 30.0, cwd: str | None = None,
              env: Env | None = None) -> CommandResult:
        """See :meth:`SSHHost.quick`."""
        shell = as_shell(command)
        script = _cd(cwd) + " ".join(_env_words(env, None)) + f" bash --norc -c {q(shell)} 2>/dev/null"
        t0 = time.monotonic()
        try:
            rc, out = self.connection.shell_call(script, timeout_s)
        except HostError as e:
            if "timed out" in str(e):
                return CommandResult(shell, None, "", str(e), time.monotonic() - t0, True, self.name)
            raise
        if _no_cwd(rc, out, cwd):
            raise HostError(f"{self.name}: cannot run {shell[:120]!r}: no such directory {cwd}")
        return CommandResult(shell, rc, out, "", time.monotonic() - t0, False, self.name)

    def spawn(self, command: str, directory: str, run_id: str, *, cwd: str | None = None,
              env: Env | None = None, timeout_s: float | None = None) -> int:
        """Start ``command`` in its own session with output under ``directory``; its pid
        (see :meth:`SSHHost.spawn`)."""
        d = directory
        remote = (f"mkdir -p {q(d)} && " + _cd(cwd) + "{ " + " ".join(_env_words(env, run_id))
                  + f" setsid bash --norc -c {q(_SPAWN_WRAPPER)} bisect-lab-spawn {q(command)} {q(d)}"
                  + " </dev/null >/dev/null 2>&1 & }"
                  # Wait (up to 10 s) for the wrapper's own pid: `$!` is known before
                  # the exec that gives the process its token, and poll() needs that.
                  + f" && i=0 && while [ ! -s {q(d)}/pid ] && [ $i -lt 1000 ]; do sleep 0.01;"
                  + f" i=$((i+1)); done; pid=$(cat {q(d)}/pid)"
                  # The backstop, started here rather than by the wrapper so that it is no
                  # descendant of the command (a subshell's background job, re-parented to init).
                  + f' && [ -n "$pid" ] && ( env -i PATH="$PATH" LC_ALL=C setsid bash --norc --noprofile -c'
                  + f" {q(BACKSTOP_SCRIPT)} bisect-lab-backstop \"$pid\" {q(backstop_limit(timeout_s))} ''"
                  + f" {q(f'{RUN_ID_VAR}={run_id}')} </dev/null >/dev/null 2>>{q(d)}/stderr & ); echo \"$pid\"")
        # Not idempotent: never retried once sent, or the benchmark could start twice.
        rc, text = self.connection.shell_call(remote, idempotent=False)
        if _no_cwd(rc, text, cwd):
            raise HostError(f"{self.name}: cannot start {command[:120]!r}: no such directory {cwd}")
        out = text.strip().splitlines()
        if rc != 0 or not out or not out[-1].isdigit():
            raise HostError(f"{self.name}: cannot start {command[:120]!r}: {text.strip()[-300:]}")
        return int(out[-1])

    def poll(self, directory: str, pid: int, run_id: str) -> str:
        """``rc N``, ``running`` or ``gone`` for a spawned command."""
        return self.connection.helper(_bash(_POLL, directory, pid, f"{RUN_ID_VAR}={run_id}"))

    # ------------------------------------------------------------------ process trees
    def snapshot(self, run_id: str | None, var: str = RUN_ID_VAR):
        """The remote process table and the pids whose environment carries ``var=run_id``."""
        out = self.connection.helper(_bash(_SNAPSHOT, f"{var}={run_id}" if run_id else ""))
        stat, _, tokens = out.partition("@@bisect-lab-tokens@@")
        token_pids = []
        for line in tokens.split():
            parts = line.split("/")      # /proc/<pid>/environ
            if len(parts) == 4 and parts[2].isdigit():
                token_pids.append(int(parts[2]))
        table = parse_proc_stat(stat)
        if var != RUN_ID_VAR:
            # A long-lived marker (the campaign) could sit in the login environment too: never
            # count the shells our own helper runs in (the looker's ancestors).
            me, _, _ = stat.partition("@@bisect-lab-self@@")[2].strip().partition("\n")
            mine = _ancestors(table, int(me)) if me.strip().isdigit() else set()
            token_pids = [p for p in token_pids if p not in mine]
        return table, token_pids

    def _tree(self, root: int | None, run_id: str | None, *, session: bool = True,
              var: str = RUN_ID_VAR) -> list[int]:
        table, token_pids = self.snapshot(run_id, var)
        # The root counts only while it carries our token: its pid may have been reused.
        return family(table, root if root is not None else -1, session=session,
                      extra=token_pids, root_is_ours=root in token_pids)

    def kill(self, root: int | None, run_id: str | None, var: str = RUN_ID_VAR) -> list[KilledProcess]:
        """SIGKILL the remote tree of ``root`` and/or the processes carrying ``run_id``.

        Freeze (SIGSTOP), look again, kill: a parent cannot fork a child that we
        miss between looking and killing. A few rounds catch stragglers.
        """
        killed: dict[int, KilledProcess] = {}
        for _ in range(5):
            pids = [p for p in self._tree(root, run_id, var=var) if p not in killed]
            if not pids:
                break
            self.connection.helper("kill -STOP " + " ".join(map(str, pids)) + " 2>/dev/null; true")
            pids = [p for p in self._tree(root, run_id, var=var) if p not in killed]
            if not pids:
                break
            sep = "@@" + uuid.uuid4().hex
            out = self.connection.helper(_bash(_KILL, sep, *pids))
            for chunk in out.split("\n" + sep + " ")[1:]:
                head, _, cmdline = chunk.partition("\n")
                if head.strip().isdigit():
                    pid = int(head.strip())
                    killed[pid] = KilledProcess(pid, cmdline.strip()[:500])
        return list(killed.values())

    def kill_quietly(self, root: int | None, run_id: str | None) -> list[KilledProcess]:
        # Best effort on an error path: the remote `timeout` is the backstop.
        try:
            return self.kill(root, run_id)
        except (HostError, KeyboardInterrupt):
            return []


# ----------------------------------------------------------------------------- spawned process
class SSHProcess(Process):
    """A command started by :meth:`SSHHost.spawn`, tracked by pid and token."""

    def __init__(self, host: SSHHost, pid: int, run_id: str, directory: str):
        self.host = host
        self.pid = pid
        self.run_id = run_id
        self._dir = directory
        self._rc: int | None = None
        self._closed = False

    def __repr__(self):
        return f"SSHProcess({self.host.name!r}, pid={self.pid})"

    def poll(self) -> int | None:
        if self._rc is None:
            out = self.host.commands.poll(self._dir, self.pid, self.run_id)
            word, _, rest = out.strip().partition(" ")
            if word == "rc":
                self._rc = int(rest) if rest.strip().lstrip("-").isdigit() else KILLED_RETURNCODE
            elif word == "gone":
                # Ended without writing its exit code: the session leader was killed.
                self._rc = KILLED_RETURNCODE
        return self._rc

    def wait(self, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        pause = 0.02
        while True:
            rc = self.poll()
            left = deadline - time.monotonic()
            if rc is not None or left <= 0:
                return rc
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)

    def kill_tree(self) -> list[KilledProcess]:
        killed = self.host.commands.kill(self.pid, self.run_id)
        self.wait(5)
        return killed

    def terminate(self) -> None:
        # The wrapper leads its own group on the host; no group any more is fine.
        self.host.connection.helper(f"kill -TERM -- -{int(self.pid)} 2>/dev/null; true")

    def output(self) -> tuple[str, str]:
        def read(name: str) -> str:
            try:
                return self.host.read_bytes(f"{self._dir}/{name}").decode(errors="replace")
            except FileNotFoundError:
                return ""
        return read("stdout"), read("stderr")

    def descendants(self) -> list[int]:
        table, token_pids = self.host.commands.snapshot(self.run_id)
        # Token matches only vouch for the root; the tree itself goes by parent and
        # session, so workers started with a clean environment are still listed.
        return family(table, self.pid, root_is_ours=self.pid in token_pids)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.host.connection.helper(f"rm -rf -- {q(self._dir)}")
