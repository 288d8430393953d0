"""Remote files over sftp, on the connection of an :class:`~.ssh_connection.SshConnection`.

Every operation is idempotent, so a connection that dropped is reopened and the operation
repeated once; a stalled one ends after ``timeout_s`` with a :class:`HostError`.
"""
from __future__ import annotations

import os
import shlex
import socket
import threading
import uuid
from typing import Callable, TypeVar

import fabric
import paramiko

from ..errors import HostError
from .ssh_connection import SshConnection

T = TypeVar("T")
q = shlex.quote


class SftpTransfer:
    """Read, write and stat remote files; one sftp session per connection, one call at a time."""

    def __init__(self, connection: SshConnection):
        self.connection = connection
        self.name = connection.name
        self._lock = threading.Lock()

    def _sftp(self, conn: fabric.Connection, timeout_s: float) -> paramiko.SFTPClient:
        sftp = conn.sftp()
        sftp.get_channel().settimeout(timeout_s)
        return sftp

    def _file_op(self, fn: Callable[[paramiko.SFTPClient], T], what: str, timeout_s: float) -> T:
        def go(conn):
            with self._lock:
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
            return self.connection.call(go, what, idempotent=True)
        except (HostError, FileNotFoundError, PermissionError, IsADirectoryError):
            raise
        except OSError as e:
            if e.errno is not None:
                raise
            raise HostError(f"{self.name}: {what} failed: {e}") from e
        except (EOFError, paramiko.SSHException) as e:
            raise HostError(f"{self.name}: {what} failed: {e}") from e

    def read_bytes(self, path: str, *, timeout_s: float = 30.0) -> bytes:
        """See :meth:`SSHHost.read_bytes`."""
        def read(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(path, "rb") as f:
                size = f.stat().st_size
                f.prefetch(size)    # pipelined reads; one request at a time is slow over a WAN
                return f.read()
        return self._file_op(read, f"reading {path}", timeout_s)

    def write_bytes(self, path: str, data: bytes, *, timeout_s: float = 30.0) -> None:
        """See :meth:`SSHHost.write_bytes`."""
        tmp = f"{path}.bl-tmp-{uuid.uuid4().hex[:12]}"
        parent = os.path.dirname(path)

        def write(sftp: paramiko.SFTPClient) -> None:
            try:
                f = sftp.open(tmp, "wb")
            except FileNotFoundError:
                if not parent:
                    raise
                self.connection.helper(f"mkdir -p -- {q(parent)}", timeout_s)
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
        """See :meth:`SSHHost.exists`."""
        def stat(sftp):
            try:
                sftp.stat(path)
                return True
            except FileNotFoundError:
                return False
        return self._file_op(stat, f"checking {path}", timeout_s)
