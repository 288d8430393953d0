"""The local machine as a :class:`Host`."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Sequence

import psutil

from ..errors import HostError
from .base import (BACKSTOP_SCRIPT, CAMPAIGN_VAR, RUN_ID_VAR, CommandResult, Env, Host, KilledProcess,
                   Process, ProcInfo, as_shell, backstop_limit, check_env, family, shell_returncode)


def merged_env(env: Env | None, run_id: str | None = None) -> dict[str, str]:
    """``os.environ`` with the overlay applied (None unsets) and the run token added."""
    out = dict(os.environ)
    for k, v in check_env(env).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    if run_id:
        out[RUN_ID_VAR] = run_id
    return out


def _process_table() -> list[ProcInfo]:
    rows = []
    for p in psutil.process_iter(["pid", "ppid", "status"]):
        try:
            rows.append(ProcInfo(p.info["pid"], p.info["ppid"] or 0, os.getsid(p.info["pid"]),
                                 p.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)))
        except (psutil.Error, OSError):
            pass       # exited while we looked
    return rows


def _token_pids(run_id: str | None, var: str = RUN_ID_VAR) -> list[int]:
    if not run_id:
        return []
    want = f"{var}={run_id}".encode()
    out = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    out.append(int(entry.name))
        except OSError:
            pass       # gone, or another user's process
    return out


def tree_pids(root: int, run_id: str | None = None, *, session: bool = True,
              root_is_ours: bool = True, var: str = RUN_ID_VAR) -> list[int]:
    """Live pids of ``root``'s tree on this machine (see :func:`base.family`); ``var`` is the
    variable that carries ``run_id``."""
    me = os.getpid()
    extra = _token_pids(run_id, var)
    if var != RUN_ID_VAR:
        # A long-lived marker (the campaign) may also sit in the environment bisect-lab was started
        # from: never count ourselves or what we run under.
        mine = {me, *(q.pid for q in _parents())}
        extra = [p for p in extra if p not in mine]
    return [p for p in family(_process_table(), root, session=session, extra=extra,
                              root_is_ours=root_is_ours)
            if p != me]


def _parents() -> list[psutil.Process]:
    try:
        return psutil.Process().parents()
    except psutil.Error:
        return []


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())[:500]
    except psutil.Error:
        return ""


def kill_tree_local(root: int, run_id: str | None = None, *,
                    root_is_ours: bool = True, var: str = RUN_ID_VAR) -> list[KilledProcess]:
    """SIGKILL ``root``'s tree; return what was killed.

    The tree is frozen with SIGSTOP first and looked at again, so a parent cannot
    fork a new child between our look and the kill; a few rounds catch stragglers.
    """
    killed: dict[int, KilledProcess] = {}
    for _ in range(5):
        pids = [p for p in tree_pids(root, run_id, root_is_ours=root_is_ours, var=var) if p not in killed]
        if not pids:
            break
        for p in pids:
            _signal(p, signal.SIGSTOP)
        pids = [p for p in tree_pids(root, run_id, root_is_ours=root_is_ours, var=var) if p not in killed]
        for p in pids:
            killed[p] = KilledProcess(p, _cmdline(p))
        for p in pids:
            _signal(p, signal.SIGKILL)
    return list(killed.values())


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalProcess(Process):
    """A command started by :meth:`LocalHost.spawn`; output goes to temp files."""

    def __init__(self, popen: subprocess.Popen, out_path: Path, err_path: Path, run_id: str,
                 backstop: subprocess.Popen | None = None):
        self._p = popen
        self.pid = popen.pid
        self.run_id = run_id
        self._out, self._err = out_path, err_path
        self._backstop = backstop

    def poll(self):
        return shell_returncode(self._p.poll())

    def wait(self, timeout_s: float):
        try:
            return shell_returncode(self._p.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            return None

    def kill_tree(self):
        # Once reaped, the pid may belong to a stranger: then go by session and token only.
        killed = kill_tree_local(self.pid, self.run_id, root_is_ours=self._p.poll() is None)
        try:
            self._p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return killed

    def terminate(self):
        # The command leads its own session and group (start_new_session): the group is its tree.
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass

    def output(self):
        read = lambda p: p.read_text(errors="replace") if p.exists() else ""
        return read(self._out), read(self._err)

    def descendants(self):
        return tree_pids(self.pid, root_is_ours=self._p.poll() is None)

    def close(self):
        for p in (self._out, self._err):
            try:
                p.unlink()
            except OSError:
                pass
        if self._backstop is not None:
            # It ends by itself within a second of the command's group; reap it if it has.
            self._backstop.poll()

    def __del__(self):
        self.close()


class LocalHost(Host):
    """Run commands on this machine (subprocess + psutil)."""

    name = "local"
    is_local = True

    def __init__(self, cache_dir: str | os.PathLike | None = None, python_exe: str | None = None):
        self._cache = Path(cache_dir) if cache_dir else None
        self.python_exe = python_exe or sys.executable

    def run(self, command: str | Sequence[str], *, timeout_s: float, cwd=None, env=None,
            input=None) -> CommandResult:
        shell = as_shell(command)
        argv = list(command) if not isinstance(command, str) else ["bash", "-c", command]
        run_id = uuid.uuid4().hex
        _check_cwd(cwd, shell)
        t0 = time.monotonic()
        try:
            p = subprocess.Popen(argv, cwd=cwd, env=merged_env(env, run_id),
                                 stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 errors="replace", start_new_session=True)
        except OSError as e:
            raise HostError(f"cannot run {shell[:200]!r} on local: {e}") from e
        try:
            out, err = p.communicate(input=input, timeout=timeout_s)
            return CommandResult(shell, shell_returncode(p.returncode), out, err,
                                 time.monotonic() - t0, False, self.name)
        except subprocess.TimeoutExpired:
            kill_tree_local(p.pid, run_id)
            out, err = _drain(p)
            return CommandResult(shell, None, out, err, time.monotonic() - t0, True, self.name)
        except BaseException:
            # Ctrl-C (or any bug) must not leave the command's tree running behind us.
            kill_tree_local(p.pid, run_id)
            _drain(p)
            raise

    def spawn(self, command: str, *, cwd=None, env=None, timeout_s=None) -> LocalProcess:
        run_id = uuid.uuid4().hex
        _check_cwd(cwd, command)
        fd_o, out = tempfile.mkstemp(prefix="bl-out-")
        fd_e, err = tempfile.mkstemp(prefix="bl-err-")
        p = None
        # Append mode: the backstop adds its line to the same file without overwriting the command's.
        fcntl.fcntl(fd_e, fcntl.F_SETFL, fcntl.fcntl(fd_e, fcntl.F_GETFL) | os.O_APPEND)
        try:
            with os.fdopen(fd_o, "wb") as o, os.fdopen(fd_e, "wb") as e:
                p = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=merged_env(env, run_id),
                                     stdin=subprocess.DEVNULL, stdout=o, stderr=e,
                                     start_new_session=True)
            backstop = _start_backstop(p.pid, timeout_s, run_id, err)
        except BaseException as exc:
            if p is not None:
                kill_tree_local(p.pid, run_id)      # no backstop: it must not run unguarded
                p.wait()
            for path in (out, err):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if isinstance(exc, OSError):
                raise HostError(f"cannot start {command[:200]!r} on local: {exc}") from exc
            raise
        return LocalProcess(p, Path(out), Path(err), run_id, backstop)

    def kill_campaign(self, campaign: str) -> list[KilledProcess]:
        return kill_tree_local(-1, campaign, root_is_ours=False, var=CAMPAIGN_VAR)

    def read_bytes(self, path, *, timeout_s=30.0):
        return Path(path).read_bytes()

    def write_bytes(self, path, data, *, timeout_s=30.0):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: a reader (or a crash) never sees half a file.
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            # mkstemp makes 0600; keep an existing file's mode, else the usual 0644.
            os.fchmod(fd, target.stat().st_mode & 0o7777 if target.exists() else 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def exists(self, path, *, timeout_s=30.0):
        return os.path.exists(path)

    def cache_root(self) -> str:
        if self._cache is None:
            from ..paths import default_cache_dir
            self._cache = default_cache_dir()
        try:
            self._cache.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            from ..errors import ConfigError
            raise ConfigError(self._cache, None, f"cannot create the cache folder: {e.strerror or e}") from None
        return str(self._cache.resolve())


def _start_backstop(sid: int, timeout_s: float | None, run_id: str, err_path: str) -> subprocess.Popen:
    """The watchdog of :data:`base.BACKSTOP_SCRIPT` for the command whose session is ``sid``;
    it also ends the command when this process dies."""
    with open(err_path, "ab") as err:
        return subprocess.Popen(
            ["bash", "--norc", "--noprofile", "-c", BACKSTOP_SCRIPT, "bisect-lab-backstop", str(sid),
             backstop_limit(timeout_s), str(os.getpid()), f"{RUN_ID_VAR}={run_id}"],
            cwd="/", env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def _check_cwd(cwd, command: str) -> None:
    # The same error as the SSH host's, instead of a bare FileNotFoundError from Popen.
    if cwd is not None and not os.path.isdir(cwd):
        raise HostError(f"cannot run {command[:120]!r} on local: no such directory {cwd}")


def _drain(p: subprocess.Popen) -> tuple[str, str]:
    """Collect what a killed command printed; give up if an escaped process holds the pipes."""
    try:
        out, err = p.communicate(timeout=5)
        return out or "", err or ""
    except subprocess.TimeoutExpired:
        for f in (p.stdout, p.stderr, p.stdin):
            try:
                if f:
                    f.close()
            except OSError:
                pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        return "", ""
