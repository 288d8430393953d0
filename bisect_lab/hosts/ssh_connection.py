"""One SSH connection to one host (fabric + paramiko), with the helper shell that rides on it.

Lifecycle of :class:`SshConnection`:

* **Opened lazily.** Nothing connects until the first operation (or :meth:`SshConnection.open`).
  Opening runs under a hard deadline (``connect_timeout_s`` + 1 s) on top of paramiko's
  connect/banner/auth timeouts, and every failure becomes one :class:`HostError` line that
  names the host.
* **Host keys are verified**, on the target and on every ProxyJump hop: fabric accepts any
  key (AutoAddPolicy) and loads no ``known_hosts``; we load ``known_hosts`` and reject an
  unknown key unless ``accept_unknown_host`` (or ``StrictHostKeyChecking no|accept-new`` in
  the ssh config) says otherwise.
* **Reused.** One connection per host serves every command, transfer and helper call.
* **Reconnected on a dead transport**, once, and only when repeating the operation is safe:
  an idempotent one, or one whose command channel never opened (:meth:`SshConnection.call`).
  Otherwise the loss is a :class:`HostError` (``ConnectionLost``): the command may have run.
* **Closed** by :meth:`SshConnection.close` (helper shell first, then the client); a later
  operation opens a fresh one.
"""
from __future__ import annotations

import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from typing import Callable, TypeVar

import fabric
import paramiko
from invoke.exceptions import CommandTimedOut

from ..errors import HostError

# Timeout for our own small helper commands (poll, /proc snapshot, kill, mkdir).
HELPER_TIMEOUT_S = 30.0

T = TypeVar("T")

# paramiko logs the failures we turn into one-line HostErrors (with tracebacks, via
# logging's last-resort handler when the app configured none); an app that does
# configure logging (--debug) still sees them.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


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


class _FabricConnection(fabric.Connection):
    """A fabric Connection that notes whether the command's channel opened, so a
    dropped connection is retried only when nothing ran."""

    def create_session(self):
        channel = super().create_session()
        _SESSION_OPENED.value = True
        return channel


class ConnectionLost(HostError):
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


class SshConnection:
    """The connection of one :class:`~bisect_lab.hosts.ssh.SSHHost` (see the module docstring
    for its lifecycle). ``name`` prefixes every error; the other arguments are the host's,
    already resolved (``~`` expanded, environment defaults applied)."""

    def __init__(self, name: str, target: str, *, port: int | None, key: str | None,
                 connect_timeout_s: float, accept_unknown_host: bool,
                 known_hosts: str | None, ssh_config: str | None):
        self.name = name
        self.target = target
        self.port = port
        self.key = key
        self.connect_timeout_s = connect_timeout_s
        self.accept_unknown_host = accept_unknown_host
        self.known_hosts = known_hosts
        self.ssh_config = ssh_config
        self._conn: _FabricConnection | None = None
        self._lock = threading.RLock()
        self._shell: _Shell | None = None
        self._shell_lock = threading.Lock()

    # ------------------------------------------------------------------ opening
    def _new_connection(self) -> _FabricConnection:
        overrides = {"runners": {"remote": _RemoteRunner}}
        config = (fabric.Config(runtime_ssh_path=self.ssh_config, overrides=overrides)
                  if self.ssh_config else fabric.Config(overrides=overrides))
        ct = self.connect_timeout_s
        kwargs: dict = {"banner_timeout": ct, "auth_timeout": ct, "channel_timeout": ct}
        if self.key:
            kwargs["key_filename"] = [self.key]
        conn = _FabricConnection(self.target, port=self.port, config=config,
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

    def _open(self) -> _FabricConnection:
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

    # ------------------------------------------------------------------ lifecycle
    @property
    def current(self) -> fabric.Connection | None:
        """The fabric connection now held (open or dropped), or None before the first use
        and after :meth:`close`."""
        return self._conn

    @property
    def is_open(self) -> bool:
        """Whether a connection is held and its transport is alive."""
        conn = self._conn
        return conn is not None and conn.is_connected

    def get(self) -> fabric.Connection:
        """The live connection: the one held if its transport is alive, else a new one."""
        with self._lock:
            conn = self._conn
            if conn is not None and conn.is_connected:
                return conn
            if conn is not None:
                _quiet_close(conn)
                self._conn = None
            self._conn = self._open()
            return self._conn

    def open(self) -> None:
        """Open the connection now (it opens lazily otherwise); raise :class:`HostError` if it fails."""
        self.get()

    def _drop(self, conn: fabric.Connection) -> None:
        with self._lock:
            _quiet_close(conn)
            if self._conn is conn:
                self._conn = None

    def call(self, fn: Callable[[fabric.Connection], T], what: str, *, idempotent: bool = False) -> T:
        """Call ``fn`` with a live connection; reconnect and retry once when the
        connection dropped and the operation can safely be repeated."""
        for attempt in (1, 2):
            conn = self.get()
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
                raise ConnectionLost(f"{self.name}: SSH connection lost during {what[:120]!r}: "
                                     f"{e or type(e).__name__}") from e
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the helper shell and the connection (a later operation opens a new one)."""
        with self._lock:
            if self._shell is not None:
                self._shell.close()
                self._shell = None
            if self._conn is not None:
                _quiet_close(self._conn)
                self._conn = None

    # ------------------------------------------------------------------ helper shell
    def shell_call(self, script: str, timeout_s: float = HELPER_TIMEOUT_S, *,
                   idempotent: bool = True) -> tuple[int, str]:
        """Run one of our own small commands in the persistent helper shell;
        return (exit code, stdout+stderr)."""
        def go(conn: fabric.Connection) -> tuple[int, str]:
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
            return self.call(go, script.strip(), idempotent=idempotent)
        except (HostError, KeyboardInterrupt):
            raise
        except Exception as e:
            raise HostError(f"{self.name}: {script.strip()[:80]!r} failed: {e}") from e

    def helper(self, script: str, timeout_s: float = HELPER_TIMEOUT_S) -> str:
        """Like :meth:`shell_call`; anything but exit 0 is a HostError."""
        rc, out = self.shell_call(script, timeout_s)
        if rc != 0:
            tail = out.strip().splitlines()[-1:] or [""]
            raise HostError(f"{self.name}: {script.strip()[:80]!r} failed (exit {rc}): {tail[0]}")
        return out
