"""The local machine as a :class:`Host`."""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Sequence

import psutil

from .base import CommandResult, Env, Host, KilledProcess, Process, as_shell


def merged_env(env: Env | None) -> dict[str, str]:
    out = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def _kill_group(proc: subprocess.Popen) -> list[KilledProcess]:
    killed: list[KilledProcess] = []
    try:
        root = psutil.Process(proc.pid)
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        family = []
    for p in family:
        try:
            killed.append(KilledProcess(p.pid, " ".join(p.cmdline())[:500]))
        except psutil.Error:
            pass
    # The group first (covers workers that re-parented), then stragglers that left it.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass
    return killed


class LocalProcess(Process):
    def __init__(self, popen: subprocess.Popen, out_path: Path, err_path: Path):
        self._p = popen
        self.pid = popen.pid
        self._out, self._err = out_path, err_path

    def poll(self):
        return self._p.poll()

    def wait(self, timeout_s: float):
        try:
            return self._p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill_tree(self):
        killed = _kill_group(self._p)
        try:
            self._p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return killed

    def output(self):
        read = lambda p: p.read_text(errors="replace") if p.exists() else ""
        return read(self._out), read(self._err)

    def descendants(self):
        try:
            root = psutil.Process(self.pid)
            return [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return []

    def __del__(self):
        for p in (self._out, self._err):
            try:
                p.unlink()
            except OSError:
                pass


class LocalHost(Host):
    name = "local"
    is_local = True

    def __init__(self, cache_dir: str | os.PathLike | None = None, python_exe: str | None = None):
        import sys
        self._cache = Path(cache_dir) if cache_dir else None
        self.python_exe = python_exe or sys.executable

    def run(self, command: str | Sequence[str], *, timeout_s: float, cwd=None, env=None,
            input=None) -> CommandResult:
        shell = as_shell(command)
        argv = list(command) if not isinstance(command, str) else ["bash", "-c", command]
        t0 = time.monotonic()
        p = subprocess.Popen(argv, cwd=cwd, env=merged_env(env), stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             errors="replace", start_new_session=True)
        try:
            out, err = p.communicate(input=input, timeout=timeout_s)
            return CommandResult(shell, p.returncode, out, err, time.monotonic() - t0, False, self.name)
        except subprocess.TimeoutExpired:
            _kill_group(p)
            out, err = p.communicate()
            return CommandResult(shell, None, out or "", err or "", time.monotonic() - t0, True, self.name)
        except BaseException:
            _kill_group(p)
            p.wait()
            raise

    def spawn(self, command: str, *, cwd=None, env=None) -> LocalProcess:
        fd_o, out = tempfile.mkstemp(prefix="bl-out-")
        fd_e, err = tempfile.mkstemp(prefix="bl-err-")
        with os.fdopen(fd_o, "wb") as o, os.fdopen(fd_e, "wb") as e:
            p = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=merged_env(env),
                                 stdin=subprocess.DEVNULL, stdout=o, stderr=e, start_new_session=True)
        return LocalProcess(p, Path(out), Path(err))

    def read_bytes(self, path, *, timeout_s=30.0):
        return Path(path).read_bytes()

    def write_bytes(self, path, data, *, timeout_s=30.0):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    def exists(self, path, *, timeout_s=30.0):
        return os.path.exists(path)

    def cache_root(self) -> str:
        if self._cache is None:
            from ..paths import default_cache_dir
            self._cache = default_cache_dir()
        self._cache.mkdir(parents=True, exist_ok=True)
        return str(self._cache.resolve())
