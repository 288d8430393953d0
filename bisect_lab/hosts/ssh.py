"""A remote machine reached over SSH (fabric + paramiko) as a :class:`Host`.

What fabric does not do for us, and this module does:

* **Host keys are verified.** fabric accepts any host key (AutoAddPolicy) and
  loads no ``known_hosts``; we load ``known_hosts`` and reject unknown keys
  unless ``accept_unknown_host`` (or ``StrictHostKeyChecking no|accept-new`` in
  the ssh config) says otherwise.
* **Nothing hangs.** Opening a connection runs under a hard deadline
  (``connect_timeout_s`` + 1 s) on top of paramiko's connect/banner/auth
  timeouts: a dead host, a blackholed port or a listener that never speaks
  all end in a :class:`HostError` that names the host.
* **A timeout kills the remote tree.** Closing an SSH channel does not kill
  the remote command (no pty, no SIGHUP). Every command carries a token in
  its environment (``BISECT_LAB_RUN_ID``); on timeout or Ctrl-C a second
  command finds the tree through ``/proc`` (parent pid, session, token) and
  SIGKILLs it. A command run to completion is also wrapped in ``timeout -s KILL``
  a few seconds past our own deadline, and a spawned one (the benchmark) gets
  the backstop watchdog (``base.BACKSTOP_SCRIPT``), so either dies even if we
  (or the connection) die first.
* **One connection per host**, kept open and reopened once when the server
  dropped it, but only when the command certainly had not started.

Remote requirements: a POSIX login shell, bash, coreutils (``timeout``,
``setsid``), ``/proc`` and the sftp subsystem -- any Linux GPU box.
"""
from __future__ import annotations

import io
import logging
import math
import os
import re
import shlex
import socket
import threading
import time
import uuid
from typing import Callable, Sequence, TypeVar

import fabric
import paramiko
from invoke.exceptions import CommandTimedOut

from ..errors import HostError
from .base import (BACKSTOP_SCRIPT, CAMPAIGN_VAR, KILLED_RETURNCODE, RUN_ID_VAR, CommandResult, Env,
                   Host, KilledProcess, Process, as_shell, backstop_limit, check_env, family,
                   parse_proc_stat)

#: Environment variables that point every SSHHost at an ssh config / known_hosts
#: file (what tests and CI use, so that nothing touches ~/.ssh).
ENV_SSH_CONFIG = "BISECT_LAB_SSH_CONFIG"
ENV_KNOWN_HOSTS = "BISECT_LAB_KNOWN_HOSTS"

# The remote `timeout` fires this long after our own deadline: a safety net for
# when we (or the connection) die before we can kill the command ourselves.
_REMOTE_GRACE_S = 5.0
# Timeout for our own small helper commands (poll, /proc snapshot, kill, mkdir).
_HELPER_TIMEOUT_S = 30.0
# Exit code + stderr line that mark "the cwd does not exist" (both must match).
_NO_CWD_RC = 97
_NO_CWD_MSG = "bisect-lab: no such directory: "

T = TypeVar("T")

# paramiko logs the failures we turn into one-line HostErrors (with tracebacks, via
# logging's last-resort handler when the app configured none); an app that does
# configure logging (--debug) still sees them.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

q = shlex.quote


class _UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey):
        self.hostname, self.key = hostname, key
        super().__init__(f"unknown host key for {hostname}")


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    """Like paramiko's RejectPolicy, with an exception we can tell apart."""

    def missing_host_key(self, client, hostname, key):
        raise _UnknownHostKey(hostname, key)


# Per thread: did the current operation open its command channel? (A module-level
# thread-local because fabric copies Connection objects, and those cannot hold one.)
_SESSION_OPENED = threading.local()


class _Connection(fabric.Connection):
    """A fabric Connection that notes whether the command's channel opened, so a
    dropped connection is retried only when nothing ran."""

    def create_session(self):
        channel = super().create_session()
        _SESSION_OPENED.value = True
        return channel


class _ConnectionLost(HostError):
    """The connection dropped while an operation was under way."""


class _RemoteRunner(fabric.runners.Remote):
    """fabric's runner, except that Ctrl-C closes the channel at once: stock fabric
    re-raises KeyboardInterrupt and then joins its reader threads, which wait for
    the remote command to end (up to the whole timeout)."""

    def send_interrupt(self, interrupt):
        try:
            self.channel.close()
        finally:
            raise interrupt


def _quiet_close(conn: fabric.Connection) -> None:
    try:
        conn.client.close()
    except Exception:
        pass


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


def _home_path(path: str) -> str:
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
    d = _home_path(cwd)
    return f"{{ cd {d} 2>/dev/null || {{ echo {q(_NO_CWD_MSG + cwd)} >&2; exit {_NO_CWD_RC}; }}; }} && "


def _no_cwd(result_rc: int | None, stderr: str, cwd: str | None) -> bool:
    return bool(cwd) and result_rc == _NO_CWD_RC and (_NO_CWD_MSG + cwd) in stderr


class _Shell:
    """A persistent ``bash --noprofile --norc`` on one channel, for our own small
    commands (poll, /proc snapshots, kill, mkdir, spawn).

    Every SSH exec starts the user's login shell, and bash sources ~/.bashrc when
    run by sshd: with pyenv or conda init that is 0.3-0.8 s per command. This
    shell pays it once per connection; each call then costs one round trip.
    Each call runs in a subshell (so `exit`/`cd` cannot hurt the helper) and ends
    with a random marker line carrying its exit code.
    """

    def __init__(self, conn: fabric.Connection, open_timeout_s: float):
        self.conn = conn
        self.closed = False
        transport = conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise EOFError("SSH transport is not active")
        self.channel = transport.open_session(timeout=open_timeout_s)
        self.channel.exec_command("exec bash --noprofile --norc")

    def call(self, script: str, timeout_s: float) -> tuple[int, str]:
        mark = "__bisect_lab_done_" + uuid.uuid4().hex
        payload = f"( {script}\n) </dev/null 2>&1; printf '\\n%s %d\\n' {mark} $?\n"
        deadline = time.monotonic() + timeout_s
        self.channel.settimeout(timeout_s)
        self.channel.sendall(payload.encode())
        _SESSION_OPENED.value = True      # sent: from here on, a retry could run it twice
        end = re.compile(rb"\n" + mark.encode() + rb" (\d+)\n")
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out")
            self.channel.settimeout(left)
            data = self.channel.recv(65536)
            if not data:
                raise EOFError("helper shell ended")
            buf += data
            m = end.search(buf)
            if m:
                return int(m[1]), buf[:m.start()].decode(errors="replace")

    def close(self) -> None:
        self.closed = True
        try:
            self.channel.close()
        except Exception:
            pass


# ----------------------------------------------------------------------------- host
class SSHHost(Host):
    """A remote machine over SSH.

    ``target`` is what you would give ``ssh``: ``host``, ``user@host``,
    ``user@host:port`` or an alias from the ssh config (HostName, User, Port,
    IdentityFile, UserKnownHostsFile, StrictHostKeyChecking and ProxyJump are
    honoured). ``known_hosts`` and ``ssh_config`` replace ``~/.ssh/known_hosts``
    and ``~/.ssh/config`` (as ``ssh -o UserKnownHostsFile`` / ``ssh -F`` do);
    they default to the ``BISECT_LAB_KNOWN_HOSTS`` / ``BISECT_LAB_SSH_CONFIG``
    environment variables. ``accept_unknown_host`` trusts a host whose key is not
    in known_hosts for this process only (nothing is written to known_hosts).
    ``workdir`` is the remote cache root (default ``~/.cache/bisect-lab``).
    The connection opens lazily on first use; connection failures raise
    :class:`HostError` (exit code 4) naming the host.
    """

    is_local = False

    def __init__(self, target: str, *, port: int | None = None, key: str | None = None,
                 connect_timeout_s: float = 10, workdir: str | None = None,
                 accept_unknown_host: bool = False, python_exe: str = "python3",
                 known_hosts: str | os.PathLike | None = None,
                 ssh_config: str | os.PathLike | None = None, name: str | None = None):
        if not target or any(c.isspace() for c in target):
            raise HostError(f"invalid SSH target {target!r}")
        self.target = target
        self.port = port
        self.key = os.path.expanduser(str(key)) if key else None
        self.connect_timeout_s = float(connect_timeout_s)
        self.workdir = workdir
        self.accept_unknown_host = accept_unknown_host
        self.python_exe = python_exe
        self.name = name or (f"{target}:{port}" if port else target)
        kh = known_hosts or os.environ.get(ENV_KNOWN_HOSTS) or None
        self.known_hosts = os.path.expanduser(str(kh)) if kh else None
        cfg = ssh_config or os.environ.get(ENV_SSH_CONFIG) or None
        self.ssh_config = os.path.expanduser(str(cfg)) if cfg else None
        if self.ssh_config and not os.path.isfile(self.ssh_config):
            raise HostError(f"{self.name}: ssh config {self.ssh_config} does not exist")
        if self.key and not os.path.isfile(self.key):
            raise HostError(f"{self.name}: SSH key {self.key} does not exist")
        self._conn: _Connection | None = None
        self._lock = threading.RLock()
        self._sftp_lock = threading.Lock()
        self._shell: _Shell | None = None
        self._shell_lock = threading.Lock()
        self._python_path: str | None = None
        self._cache: str | None = None
        self._spawned: list[SSHProcess] = []

    def __repr__(self):
        return f"SSHHost({self.name!r})"

    # ------------------------------------------------------------------ connection
    def _new_connection(self) -> _Connection:
        overrides = {"runners": {"remote": _RemoteRunner}}
        config = (fabric.Config(runtime_ssh_path=self.ssh_config, overrides=overrides)
                  if self.ssh_config else fabric.Config(overrides=overrides))
        ct = self.connect_timeout_s
        kwargs: dict = {"banner_timeout": ct, "auth_timeout": ct, "channel_timeout": ct}
        if self.key:
            kwargs["key_filename"] = [self.key]
        conn = _Connection(self.target, port=self.port, config=config,
                           connect_timeout=max(1, math.ceil(ct)), connect_kwargs=kwargs)
        # The target and every ProxyJump hop: fabric would trust any key on each.
        hop: fabric.Connection | None = conn
        while isinstance(hop, fabric.Connection):
            self._verify_host_keys(hop)
            hop = hop.gateway
        return conn

    def _verify_host_keys(self, conn: fabric.Connection) -> None:
        client = conn.client
        for path in self._known_hosts_files(conn):
            try:
                client.load_system_host_keys(path)   # read only: never written back
            except (OSError, paramiko.SSHException) as e:
                raise HostError(f"{self.name}: cannot read known_hosts file {path}: {e}") from e
        strict = str(conn.ssh_config.get("stricthostkeychecking", "")).lower()
        accept = self.accept_unknown_host or strict in ("no", "off", "accept-new")
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy() if accept else _RejectUnknown())

    def _known_hosts_files(self, conn: fabric.Connection) -> list[str]:
        if self.known_hosts:
            files = [self.known_hosts]
        else:
            user_files = str(conn.ssh_config.get("userknownhostsfile", "~/.ssh/known_hosts")).split()
            glob_files = str(conn.ssh_config.get("globalknownhostsfile",
                                                 "/etc/ssh/ssh_known_hosts")).split()
            files = [os.path.expanduser(f) for f in user_files + glob_files]
        return [f for f in files if os.path.isfile(f)]

    def _at(self, conn: fabric.Connection) -> str:
        """`` (user@host:port)`` where the name alone does not say it (aliases)."""
        if f"{conn.host}:{conn.port}" in self.name:
            return ""
        return f" ({conn.user}@{conn.host}:{conn.port})"

    def _open(self) -> _Connection:
        conn = self._new_connection()
        done = threading.Event()
        box: dict[str, BaseException] = {}
        abandoned = threading.Event()

        def connect():
            try:
                conn.open()
            except BaseException as e:      # handed to the caller's thread
                # paramiko's transport thread keeps the first cause ("Error reading
                # SSH protocol banner"); what open() raises later can be vaguer.
                transport = conn.client.get_transport()
                saved = getattr(transport, "saved_exception", None) if transport else None
                box["error"] = saved if isinstance(saved, Exception) else e
            finally:
                done.set()
                if abandoned.is_set():
                    _quiet_close(conn)

        # paramiko has separate connect/banner/auth timeouts that add up; this
        # thread gives the whole handshake one hard deadline.
        threading.Thread(target=connect, name=f"ssh-connect-{self.name}", daemon=True).start()
        try:
            finished = done.wait(self.connect_timeout_s + 1.0)
        except BaseException:
            abandoned.set()
            _quiet_close(conn)
            raise
        if not finished:
            abandoned.set()
            _quiet_close(conn)
            raise HostError(f"{self.name}{self._at(conn)}: no SSH connection within "
                            f"{self.connect_timeout_s:g} s (host down or port blackholed?)")
        if "error" in box:
            _quiet_close(conn)
            raise self._connect_error(conn, box["error"]) from box["error"]
        transport = conn.client.get_transport()
        if transport is not None:
            transport.set_keepalive(30)     # notice a silently dead peer eventually
        return conn

    def _connect_error(self, conn: fabric.Connection, e: BaseException) -> BaseException:
        # One line, starting with the host as the user named it ("gpu1: ...").
        at = self._at(conn)
        ct = f"{self.connect_timeout_s:g} s"
        port_opt = f"-p {conn.port} " if int(conn.port) != 22 else ""
        if isinstance(e, _UnknownHostKey):
            return HostError(
                f"{self.name}: unknown SSH host key for {e.hostname}; if you trust it, run "
                f"`ssh-keyscan {port_opt}{conn.host} >> {self.known_hosts or '~/.ssh/known_hosts'}` "
                f"(check the fingerprint) or set `[host] accept_unknown_host = true`")
        if isinstance(e, paramiko.BadHostKeyException):
            return HostError(
                f"{self.name}{at}: SSH host key does NOT match known_hosts (reinstalled host or "
                f"man-in-the-middle); if expected, run `ssh-keygen -R {e.hostname}` and accept "
                f"the new key")
        if isinstance(e, paramiko.AuthenticationException):
            return HostError(f"{self.name}{at}: SSH authentication failed as {conn.user}: {e}"
                             + ("" if self.key else " (set `[host] key`?)"))
        if isinstance(e, socket.gaierror):
            return HostError(f"{self.name}: cannot resolve host name {conn.host!r}: {e.strerror}")
        if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
            return HostError(f"{self.name}{at}: cannot connect: connection refused")
        if isinstance(e, (socket.timeout, TimeoutError)):
            return HostError(f"{self.name}{at}: no answer within {ct} "
                             f"(host down or port blackholed?)")
        if isinstance(e, paramiko.SSHException) and any(
                w in str(e).lower() for w in ("banner", "no existing session")):
            # The TCP connection opened, but the handshake never completed.
            return HostError(f"{self.name}{at}: the port accepted the connection but no SSH "
                             f"server answered within {ct}")
        if isinstance(e, (OSError, EOFError, paramiko.SSHException)):
            return HostError(f"{self.name}{at}: cannot connect: {e or type(e).__name__}")
        return e        # a bug (or KeyboardInterrupt): not ours to rename

    def _connection(self) -> _Connection:
        with self._lock:
            conn = self._conn
            if conn is not None and conn.is_connected:
                return conn
            if conn is not None:
                _quiet_close(conn)
                self._conn = None
            self._conn = self._open()
            return self._conn

    def _drop(self, conn: _Connection) -> None:
        with self._lock:
            _quiet_close(conn)
            if self._conn is conn:
                self._conn = None

    def connect(self) -> None:
        """Open the connection now (it opens lazily otherwise); raise :class:`HostError` if it fails."""
        self._connection()

    def _with_connection(self, fn: Callable[[_Connection], T], what: str, *,
                         idempotent: bool = False) -> T:
        """Call ``fn`` with a live connection; reconnect and retry once when the
        connection dropped and the operation can safely be repeated."""
        for attempt in (1, 2):
            conn = self._connection()
            _SESSION_OPENED.value = False
            try:
                return fn(conn)
            except (CommandTimedOut, HostError, KeyboardInterrupt):
                raise
            except Exception as e:
                if conn.is_connected:
                    raise       # the connection is fine: the operation itself failed
                self._drop(conn)
                started = getattr(_SESSION_OPENED, "value", False)
                if attempt == 1 and (idempotent or not started):
                    continue
                raise _ConnectionLost(f"{self.name}: SSH connection lost during {what[:120]!r}: "
                                f"{e or type(e).__name__}") from e
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Remove output folders of finished spawned commands, then close the connection."""
        procs, self._spawned = self._spawned, []
        dirs = [p._dir for p in procs if not p._closed and p._rc is not None]
        if dirs and self._conn is not None and self._conn.is_connected:
            try:
                self._helper("rm -rf -- " + " ".join(q(d) for d in dirs))
            except HostError:
                pass
        with self._lock:
            if self._shell is not None:
                self._shell.close()
                self._shell = None
            if self._conn is not None:
                _quiet_close(self._conn)
                self._conn = None

    # ------------------------------------------------------------------ commands
    def _exec(self, remote: str, timeout_s: float, what: str, input: str | None = None):
        """Run an already-quoted remote command line through fabric."""
        def go(conn: _Connection):
            r = conn.run(remote, hide=True, warn=True, timeout=timeout_s, pty=False,
                         in_stream=io.StringIO(input) if input is not None else False)
            if r.exited == -1 and not conn.is_connected:
                # paramiko reports -1 when the channel closed without an exit status.
                raise EOFError("connection closed before the command finished")
            return r
        return self._with_connection(go, what)

    def _shell_call(self, script: str, timeout_s: float = _HELPER_TIMEOUT_S, *,
                    idempotent: bool = True) -> tuple[int, str]:
        """Run one of our own small commands in the persistent helper shell;
        return (exit code, stdout+stderr)."""
        def go(conn: _Connection) -> tuple[int, str]:
            with self._shell_lock:
                shell = self._shell
                if shell is None or shell.conn is not conn or shell.closed:
                    shell = self._shell = _Shell(conn, self.connect_timeout_s)
                try:
                    return shell.call(script, timeout_s)
                except (socket.timeout, TimeoutError) as e:
                    shell.close()
                    raise HostError(f"{self.name}: {script.strip()[:80]!r} timed out after "
                                    f"{timeout_s:g} s") from e
                except BaseException:
                    shell.close()        # half a reply is waiting in it: never reuse
                    raise
        try:
            return self._with_connection(go, script.strip(), idempotent=idempotent)
        except (HostError, KeyboardInterrupt):
            raise
        except Exception as e:
            raise HostError(f"{self.name}: {script.strip()[:80]!r} failed: {e}") from e

    def _helper(self, script: str, timeout_s: float = _HELPER_TIMEOUT_S) -> str:
        """Like :meth:`_shell_call`; anything but exit 0 is a HostError."""
        rc, out = self._shell_call(script, timeout_s)
        if rc != 0:
            tail = out.strip().splitlines()[-1:] or [""]
            raise HostError(f"{self.name}: {script.strip()[:80]!r} failed (exit {rc}): {tail[0]}")
        return out

    def run(self, command: str | Sequence[str], *, timeout_s: float, cwd: str | None = None,
            env: Env | None = None, input: str | None = None) -> CommandResult:
        """Run to completion on the remote host (see :meth:`Host.run`).

        On timeout (or Ctrl-C) the remote tree is SIGKILLed and the result has
        ``timed_out=True``, ``returncode=None``; a connection that cannot be made
        or is lost mid-command raises :class:`HostError`.
        """
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
            self._kill_quietly(None, run_id)
            res = e.result
            return CommandResult(shell, None, res.stdout or "", res.stderr or "",
                                 time.monotonic() - t0, True, self.name)
        except _ConnectionLost:
            # It may still run over there; a retried trial must not share the GPU with it.
            self._kill_quietly(None, run_id)
            raise
        except KeyboardInterrupt:
            self._kill_quietly(None, run_id)
            raise
        except HostError:
            raise
        except Exception as e:
            self._kill_quietly(None, run_id)
            raise HostError(f"{self.name}: running {shell[:120]!r} failed: {e}") from e
        elapsed = time.monotonic() - t0
        if r.exited == -1 and elapsed >= timeout_s:
            # Under load, invoke's timer can close the channel and let the wait return before it
            # flags the timeout: no exit status at the deadline is the timeout (seen once in CI).
            self._kill_quietly(None, run_id)
            return CommandResult(shell, None, r.stdout, r.stderr, elapsed, True, self.name)
        if _no_cwd(r.exited, r.stderr, cwd):
            raise HostError(f"{self.name}: cannot run {shell[:120]!r}: no such directory {cwd}")
        return CommandResult(shell, r.exited, r.stdout, r.stderr, elapsed, False, self.name)

    def quick(self, command: str | Sequence[str], *, timeout_s: float = 30.0, cwd: str | None = None,
              env: Env | None = None) -> CommandResult:
        """One round trip through the helper shell (no login start-up files).

        stdout holds the command's output; its stderr is dropped (the helper merges
        streams, and probes print JSON on stdout).
        """
        shell = as_shell(command)
        script = _cd(cwd) + " ".join(_env_words(env, None)) + f" bash --norc -c {q(shell)} 2>/dev/null"
        t0 = time.monotonic()
        try:
            rc, out = self._shell_call(script, timeout_s)
        except HostError as e:
            if "timed out" in str(e):
                return CommandResult(shell, None, "", str(e), time.monotonic() - t0, True, self.name)
            raise
        if _no_cwd(rc, out, cwd):
            raise HostError(f"{self.name}: cannot run {shell[:120]!r}: no such directory {cwd}")
        return CommandResult(shell, rc, out, "", time.monotonic() - t0, False, self.name)

    def python_path(self) -> str:
        """The absolute interpreter that ``python_exe`` names in the login environment (cached),
        so that probes in the helper shell use the same Python and packages."""
        if self._python_path is None:
            r = self.run([self.python_exe, "-c", "import sys; print(sys.executable)"], timeout_s=60)
            path = r.stdout.strip().splitlines()[-1] if r.ok and r.stdout.strip() else ""
            self._python_path = path if path.startswith("/") else ""
        return self._python_path or self.python_exe

    def quick_python(self, code: str, *args: str, timeout_s: float = 60.0,
                     env: Env | None = None) -> CommandResult:
        if not self.python_path().startswith("/"):
            return self.python(code, *args, timeout_s=timeout_s, env=env)   # login shell it is
        return self.quick([self.python_path(), "-c", code, *args], timeout_s=timeout_s, env=env)

    def spawn(self, command: str, *, cwd: str | None = None, env: Env | None = None,
              timeout_s: float | None = None) -> "SSHProcess":
        """Start ``command`` under bash in its own session on the remote host.

        stdout/stderr go to files in a folder under ``cache_root()/tmp``;
        :meth:`SSHProcess.close` (or :meth:`close` of the host, once it ended) removes it.
        The backstop (:data:`base.BACKSTOP_SCRIPT`) runs there too and kills the tree
        ``timeout_s`` plus :data:`base.BACKSTOP_GRACE_S` after the start, whatever becomes of
        us or of the connection.
        """
        run_id = uuid.uuid4().hex
        d = f"{self.cache_root()}/tmp/spawn-{run_id}"
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
        rc, text = self._shell_call(remote, idempotent=False)
        if _no_cwd(rc, text, cwd):
            raise HostError(f"{self.name}: cannot start {command[:120]!r}: no such directory {cwd}")
        out = text.strip().splitlines()
        if rc != 0 or not out or not out[-1].isdigit():
            raise HostError(f"{self.name}: cannot start {command[:120]!r}: {text.strip()[-300:]}")
        proc = SSHProcess(self, int(out[-1]), run_id, d)
        self._spawned.append(proc)
        return proc

    # ------------------------------------------------------------------ process trees
    def _snapshot(self, run_id: str | None, var: str = RUN_ID_VAR):
        out = self._helper(_bash(_SNAPSHOT, f"{var}={run_id}" if run_id else ""))
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
        table, token_pids = self._snapshot(run_id, var)
        # The root counts only while it carries our token: its pid may have been reused.
        return family(table, root if root is not None else -1, session=session,
                      extra=token_pids, root_is_ours=root in token_pids)

    def kill_campaign(self, campaign: str) -> list[KilledProcess]:
        return self._kill(None, campaign, var=CAMPAIGN_VAR)

    def _kill(self, root: int | None, run_id: str | None, var: str = RUN_ID_VAR) -> list[KilledProcess]:
        """SIGKILL the remote tree of ``root`` and/or the processes carrying ``run_id``.

        Freeze (SIGSTOP), look again, kill: a parent cannot fork a child that we
        miss between looking and killing. A few rounds catch stragglers.
        """
        killed: dict[int, KilledProcess] = {}
        for _ in range(5):
            pids = [p for p in self._tree(root, run_id, var=var) if p not in killed]
            if not pids:
                break
            self._helper("kill -STOP " + " ".join(map(str, pids)) + " 2>/dev/null; true")
            pids = [p for p in self._tree(root, run_id, var=var) if p not in killed]
            if not pids:
                break
            sep = "@@" + uuid.uuid4().hex
            out = self._helper(_bash(_KILL, sep, *pids))
            for chunk in out.split("\n" + sep + " ")[1:]:
                head, _, cmdline = chunk.partition("\n")
                if head.strip().isdigit():
                    pid = int(head.strip())
                    killed[pid] = KilledProcess(pid, cmdline.strip()[:500])
        return list(killed.values())

    def _kill_quietly(self, root: int | None, run_id: str | None) -> list[KilledProcess]:
        # Best effort on an error path: the remote `timeout` is the backstop.
        try:
            return self._kill(root, run_id)
        except (HostError, KeyboardInterrupt):
            return []

    # ------------------------------------------------------------------ files
    def _sftp(self, conn: fabric.Connection, timeout_s: float) -> paramiko.SFTPClient:
        sftp = conn.sftp()
        sftp.get_channel().settimeout(timeout_s)
        return sftp

    def _file_op(self, fn: Callable[[paramiko.SFTPClient], T], what: str, timeout_s: float) -> T:
        def go(conn):
            with self._sftp_lock:
                try:
                    return fn(self._sftp(conn, timeout_s))
                except (socket.timeout, TimeoutError) as e:
                    # The sftp session's state is unknown now: start a new one next time.
                    try:
                        conn.sftp().close()
                    except Exception:
                        pass
                    conn._sftp = None
                    raise HostError(f"{self.name}: {what} timed out after {timeout_s:g} s") from e
        try:
            return self._with_connection(go, what, idempotent=True)
        except (HostError, FileNotFoundError, PermissionError, IsADirectoryError):
            raise
        except OSError as e:
            if e.errno is not None:
                raise
            raise HostError(f"{self.name}: {what} failed: {e}") from e
        except (EOFError, paramiko.SSHException) as e:
            raise HostError(f"{self.name}: {what} failed: {e}") from e

    def read_bytes(self, path: str, *, timeout_s: float = 30.0) -> bytes:
        """Read a remote file over sftp (relative paths are relative to the home folder)."""
        def read(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(path, "rb") as f:
                size = f.stat().st_size
                f.prefetch(size)    # pipelined reads; one request at a time is slow over a WAN
                return f.read()
        return self._file_op(read, f"reading {path}", timeout_s)

    def write_bytes(self, path: str, data: bytes, *, timeout_s: float = 30.0) -> None:
        """Replace a remote file atomically (write a temp file, then rename), creating parents."""
        tmp = f"{path}.bl-tmp-{uuid.uuid4().hex[:12]}"
        parent = os.path.dirname(path)

        def write(sftp: paramiko.SFTPClient) -> None:
            try:
                f = sftp.open(tmp, "wb")
            except FileNotFoundError:
                if not parent:
                    raise
                self._helper(f"mkdir -p -- {q(parent)}", timeout_s)
                f = sftp.open(tmp, "wb")
            try:
                with f:
                    f.set_pipelined(True)
                    f.write(data)
                try:
                    sftp.chmod(tmp, sftp.stat(path).st_mode & 0o7777)
                except FileNotFoundError:
                    pass
                sftp.posix_rename(tmp, path)
            except BaseException:
                try:
                    sftp.remove(tmp)
                except Exception:
                    pass
                raise
        self._file_op(write, f"writing {path}", timeout_s)

    def exists(self, path: str, *, timeout_s: float = 30.0) -> bool:
        """Whether ``path`` exists on the remote host (sftp stat, follows symlinks)."""
        def stat(sftp):
            try:
                sftp.stat(path)
                return True
            except FileNotFoundError:
                return False
        return self._file_op(stat, f"checking {path}", timeout_s)

    def cache_root(self) -> str:
        """Absolute remote cache folder (``workdir`` or ``~/.cache/bisect-lab``), created."""
        if self._cache is None:
            d = _home_path(self.workdir) if self.workdir else '"$HOME"/.cache/bisect-lab'
            out = self._helper(f"mkdir -p -- {d} && cd -- {d} && pwd -P")
            lines = out.strip().splitlines()
            if not lines or not lines[-1].startswith("/"):
                raise HostError(f"{self.name}: cannot create the cache folder {self.workdir or d}")
            self._cache = lines[-1]
        return self._cache


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
            out = self.host._helper(_bash(_POLL, self._dir, self.pid, f"{RUN_ID_VAR}={self.run_id}"))
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
        killed = self.host._kill(self.pid, self.run_id)
        self.wait(5)
        return killed

    def output(self) -> tuple[str, str]:
        def read(name: str) -> str:
            try:
                return self.host.read_bytes(f"{self._dir}/{name}").decode(errors="replace")
            except FileNotFoundError:
                return ""
        return read("stdout"), read("stderr")

    def descendants(self) -> list[int]:
        table, token_pids = self.host._snapshot(self.run_id)
        # Token matches only vouch for the root; the tree itself goes by parent and
        # session, so workers started with a clean environment are still listed.
        return family(table, self.pid, root_is_ours=self.pid in token_pids)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.host._helper(f"rm -rf -- {q(self._dir)}")
