"""A remote machine reached over SSH (fabric + paramiko) as a :class:`Host`.

:class:`SSHHost` composes three parts, each in its own module:

* :class:`~.ssh_connection.SshConnection` (``ssh_connection.py``): the one connection to the
  host and its lifecycle -- opened lazily under a hard deadline, host keys verified (fabric
  verifies none), reused, reopened once when the server dropped it but only when the
  operation certainly had not started, closed with the host. It also carries the helper
  shell for our own small commands.
* :class:`~.ssh_process.RemoteCommands` and :class:`~.ssh_process.SSHProcess`
  (``ssh_process.py``): commands run to completion or spawned, and the remote process trees
  they leave -- found through ``/proc`` by a token in their environment and SIGKILLed on
  timeout or Ctrl-C, with remote ``timeout`` and a backstop watchdog for when we die first.
* :class:`~.ssh_transfer.SftpTransfer` (``ssh_transfer.py``): reading, writing and checking
  remote files over sftp.

Remote requirements: a POSIX login shell, bash, coreutils (``timeout``,
``setsid``), ``/proc`` and the sftp subsystem -- any Linux GPU box.
"""
from __future__ import annotations

import os
import shlex
import uuid
from typing import Sequence

from ..errors import HostError
from .base import CAMPAIGN_VAR, CommandResult, Env, Host, KilledProcess
from .ssh_connection import SshConnection
from .ssh_process import RemoteCommands, SSHProcess, home_path
from .ssh_transfer import SftpTransfer

__all__ = ["ENV_KNOWN_HOSTS", "ENV_SSH_CONFIG", "SSHHost", "SSHProcess"]

#: Environment variables that point every SSHHost at an ssh config / known_hosts
#: file (what tests and CI use, so that nothing touches ~/.ssh).
ENV_SSH_CONFIG = "BISECT_LAB_SSH_CONFIG"
ENV_KNOWN_HOSTS = "BISECT_LAB_KNOWN_HOSTS"

q = shlex.quote


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

    ``connection`` (:class:`~.ssh_connection.SshConnection`), ``commands``
    (:class:`~.ssh_process.RemoteCommands`) and ``files`` (:class:`~.ssh_transfer.SftpTransfer`)
    are the parts it is made of.
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
        self.connection = SshConnection(
            self.name, target, port=port, key=self.key, connect_timeout_s=self.connect_timeout_s,
            accept_unknown_host=accept_unknown_host, known_hosts=self.known_hosts,
            ssh_config=self.ssh_config)
        self.commands = RemoteCommands(self.connection)
        self.files = SftpTransfer(self.connection)
        self._python_path: str | None = None
        self._cache: str | None = None
        self._spawned: list[SSHProcess] = []

    def __repr__(self):
        return f"SSHHost({self.name!r})"

    # ------------------------------------------------------------------ connection
    def connect(self) -> None:
        """Open the connection now (it opens lazily otherwise); raise :class:`HostError` if it fails."""
        self.connection.open()

    def close(self) -> None:
        """Remove output folders of finished spawned commands, then close the connection."""
        procs, self._spawned = self._spawned, []
        dirs = [p._dir for p in procs if not p._closed and p._rc is not None]
        if dirs and self.connection.is_open:
            try:
                self.connection.helper("rm -rf -- " + " ".join(q(d) for d in dirs))
            except HostError:
                pass
        self.connection.close()

    # ------------------------------------------------------------------ commands
    def run(self, command: str | Sequence[str], *, timeout_s: float, cwd: str | None = None,
            env: Env | None = None, input: str | None = None) -> CommandResult:
        """Run to completion on the remote host (see :meth:`Host.run`).

        On timeout (or Ctrl-C) the remote tree is SIGKILLed and the result has
        ``timed_out=True``, ``returncode=None``; a connection that cannot be made
        or is lost mid-command raises :class:`HostError`.
        """
        return self.commands.run(command, timeout_s=timeout_s, cwd=cwd, env=env, input=input)

    def quick(self, command: str | Sequence[str], *, timeout_s: float = 30.0, cwd: str | None = None,
              env: Env | None = None) -> CommandResult:
        """One round trip through the helper shell (no login start-up files).

        stdout holds the command's output; its stderr is dropped (the helper merges
        streams, and probes print JSON on stdout).
        """
        return self.commands.quick(command, timeout_s=timeout_s, cwd=cwd, env=env)

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
              timeout_s: float | None = None) -> SSHProcess:
        """Start ``command`` under bash in its own session on the remote host.

        stdout/stderr go to files in a folder under ``cache_root()/tmp``;
        :meth:`SSHProcess.close` (or :meth:`close` of the host, once it ended) removes it.
        The backstop (:data:`base.BACKSTOP_SCRIPT`) runs there too and kills the tree
        ``timeout_s`` plus :data:`base.BACKSTOP_GRACE_S` after the start, whatever becomes of
        us or of the connection.
        """
        run_id = uuid.uuid4().hex
        d = f"{self.cache_root()}/tmp/spawn-{run_id}"
        pid = self.commands.spawn(command, d, run_id, cwd=cwd, env=env, timeout_s=timeout_s)
        proc = SSHProcess(self, pid, run_id, d)
        self._spawned.append(proc)
        return proc

    def kill_campaign(self, campaign: str) -> list[KilledProcess]:
        return self.commands.kill(None, campaign, var=CAMPAIGN_VAR)

    # ------------------------------------------------------------------ files
    def read_bytes(self, path: str, *, timeout_s: float = 30.0) -> bytes:
        """Read a remote file over sftp (relative paths are relative to the home folder)."""
        return self.files.read_bytes(path, timeout_s=timeout_s)

    def write_bytes(self, path: str, data: bytes, *, timeout_s: float = 30.0) -> None:
        """Replace a remote file atomically (write a temp file, then rename), creating parents."""
        self.files.write_bytes(path, data, timeout_s=timeout_s)

    def exists(self, path: str, *, timeout_s: float = 30.0) -> bool:
        """Whether ``path`` exists on the remote host (sftp stat, follows symlinks)."""
        return self.files.exists(path, timeout_s=timeout_s)

    def cache_root(self) -> str:
        """Absolute remote cache folder (``workdir`` or ``~/.cache/bisect-lab``), created."""
        if self._cache is None:
            d = home_path(self.workdir) if self.workdir else '"$HOME"/.cache/bisect-lab'
            out = self.connection.helper(f"mkdir -p -- {d} && cd -- {d} && pwd -P")
            lines = out.strip().splitlines()
            if not lines or not lines[-1].startswith("/"):
                raise HostError(f"{self.name}: cannot create the cache folder {self.workdir or d}")
            self._cache = lines[-1]
        return self._cache
