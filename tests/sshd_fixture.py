"""pytest plugin: a real OpenSSH server on 127.0.0.1 for the SSH host tests.

Enable it with ``pytest_plugins = ["sshd_fixture"]`` in ``tests/conftest.py``.
The session fixture ``sshd`` starts ``/usr/sbin/sshd -D`` on a free port with a
throwaway host key and a throwaway client key in a tmp dir, and writes a
``known_hosts`` and an ``ssh_config`` (with the alias ``bl-sshd``) there:
nothing under ``~/.ssh`` is read or written. Without sshd the tests that use it
are skipped, or fail when ``CI=true`` (CI must run the SSH path).
Install sshd with ``.ci/sshd-setup.sh``.
"""
from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

ALIAS = "bl-sshd"


@dataclass
class Sshd:
    """A running test sshd and everything a client needs to reach it."""

    host: str
    port: int
    user: str
    key_path: str
    known_hosts_path: str
    ssh_config_path: str
    alias: str
    pid: int
    log_path: str
    host_pubkey: str

    @property
    def target(self) -> str:
        """``user@host`` (give ``port`` separately)."""
        return f"{self.user}@{self.host}"

    def env(self) -> dict[str, str]:
        """Environment that makes bisect-lab (CLI in a subprocess too) use this sshd's
        ssh config and known_hosts: then ``[host] ssh = "bl-sshd"`` just works."""
        return {"BISECT_LAB_SSH_CONFIG": self.ssh_config_path,
                "BISECT_LAB_KNOWN_HOSTS": self.known_hosts_path}

    def connection_pids(self) -> list[int]:
        """Pids of sshd's per-connection processes (children of the listener)."""
        try:
            return [c.pid for c in psutil.Process(self.pid).children()]
        except psutil.Error:
            return []

    def drop_connections(self) -> int:
        """Kill every open connection server-side (the listener keeps running);
        returns how many connection processes were killed."""
        pids = self.connection_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)


def find_sshd() -> str | None:
    """Absolute path of sshd (it refuses to start from a relative one)."""
    for cand in (shutil.which("sshd"), "/usr/sbin/sshd", "/usr/local/sbin/sshd"):
        if cand and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    return None


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"sshd fixture: {reason} (CI=true: the SSH tests must run; "
                    f"see .ci/sshd-setup.sh)", pytrace=False)
    pytest.skip(f"sshd fixture: {reason}; run .ci/sshd-setup.sh to install openssh-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bisect-lab-test",
                    "-f", str(path)], check=True, capture_output=True, timeout=30)
    return path.with_suffix(".pub").read_text().strip()


def _wait_banner(port: int, proc: subprocess.Popen, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.settimeout(2)
                if s.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            time.sleep(0.05)
    return False


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Sshd:
    """A real sshd on 127.0.0.1 for this test session (see module docstring)."""
    exe = find_sshd()
    if exe is None:
        _unavailable("sshd not found (openssh-server is not installed)")
    if shutil.which("ssh-keygen") is None:
        _unavailable("ssh-keygen not found")
    try:
        # The privilege-separation folder must exist or sshd refuses to start.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    except OSError as e:
        _unavailable(f"cannot create /run/sshd: {e}")

    d = tmp_path_factory.mktemp("sshd")
    user = getpass.getuser()
    host_pub = _keygen(d / "host_ed25519")
    client_pub = _keygen(d / "client_ed25519")
    key_path = d / "client_ed25519"
    (d / "authorized_keys").write_text(client_pub + "\n")
    os.chmod(d / "authorized_keys", 0o600)

    last_log = ""
    for _attempt in range(3):      # the free port can be taken between probe and bind
        port = _free_port()
        config = d / "sshd_config"
        config.write_text("\n".join([
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {d / 'host_ed25519'}",
            f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "StrictModes no",          # tmp dirs are not owned the way sshd insists on
            "UsePAM no",
            "PermitRootLogin yes",     # CI runs the tests as root
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UseDNS no",
            "PrintMotd no",
            "Subsystem sftp internal-sftp",
            "MaxStartups 100:30:200",
            "MaxSessions 100",
            "LogLevel VERBOSE",
            "",
        ]))
        log_path = d / "sshd.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([exe, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if _wait_banner(port, proc, time.monotonic() + 15):
            break
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        last_log = log_path.read_text(errors="replace")[-2000:]
    else:
        pytest.fail(f"sshd did not start; its log:\n{last_log}", pytrace=False)

    known_hosts = d / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    ssh_config = d / "ssh_config"
    ssh_config.write_text("\n".join([
        f"Host {ALIAS}",
        "    HostName 127.0.0.1",
        f"    Port {port}",
        f"    User {user}",
        f"    IdentityFile {key_path}",
        "    IdentitiesOnly yes",
        f"    UserKnownHostsFile {known_hosts}",
        "",
    ]))
    info = Sshd(host="127.0.0.1", port=port, user=user, key_path=str(key_path),
                known_hosts_path=str(known_hosts), ssh_config_path=str(ssh_config), alias=ALIAS,
                pid=proc.pid, log_path=str(log_path), host_pubkey=host_pub)
    try:
        yield info
    finally:
        # The listener and whatever connection processes are still open.
        for pid in [*info.connection_pids(), proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
