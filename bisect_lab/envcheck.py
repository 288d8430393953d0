"""Did the arm's environment variables reach the benchmark's processes? (layer 4)

The story's engineer set NCCL variables three different ways and never knew
whether the spawned workers saw them. While a benchmark runs, the runner calls
:meth:`EnvSampler.sample` every ~0.5 s with the pids of the benchmark's process
tree (``Process.descendants()``); the sampler reads each process's environment
once and, at the end, :meth:`EnvSampler.report` says for every variable the arm
sets or unsets in how many of those processes it had the expected value, and
which processes missed it.

It works through a :class:`~bisect_lab.hosts.base.Host`: on a remote host a
small probe run by ``host.python`` reads ``/proc/PID/environ``; on the local
machine psutil reads the same files without starting a process.

Limitation (Linux semantics, not ours): ``/proc/PID/environ`` is the
environment the process was *exec'ed* with. A variable a Python process puts
into ``os.environ`` after it started is invisible there, and so is one a
``fork``-started child inherits that way; a ``spawn``-started or exec'ed child
shows it. That is also what a C library (NCCL) reading ``getenv`` at init in an
exec'ed worker would see, which is the case that matters here.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import BisectLabError
from .hosts.base import Host
from .redact import REDACTED, is_secret_name, redact_text

__all__ = ["EnvSampler", "EnvReport", "EnvVarCheck"]

_MAX_LISTED = 5          # processes named per warning; the rest are counted
_CMD_CHARS = 80


def _short(cmd: str) -> str:
    cmd = redact_text(" ".join(cmd.split()))
    return cmd if len(cmd) <= _CMD_CHARS else cmd[: _CMD_CHARS - 3] + "..."


def _show(var: str, value: str | None) -> str:
    # One rule set for every stored or printed value: bisect_lab.redact's.
    if value is None:
        return "<unset>"
    return REDACTED if is_secret_name(var) else redact_text(value)


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class EnvVarCheck:
    """How one variable fared across the sampled processes.

    ``expected`` is the value the arm sets, or ``None`` when the arm unsets
    it; ``matched`` of ``total`` processes had it; ``missing_pids`` are the
    others, in pid order.
    """

    var: str
    expected: str | None
    matched: int
    total: int
    missing_pids: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        """Every sampled process had the expected value (and at least one was sampled)."""
        return self.total > 0 and self.matched == self.total

    @property
    def label(self) -> str:
        if self.expected is None:
            return f"{self.var} (unset)"
        return f"{self.var}={_show(self.var, self.expected)}"

    def to_dict(self) -> dict[str, Any]:
        # Stored and shown: a secret's value never leaves the benchmark's host.
        expected = None if self.expected is None else _show(self.var, self.expected)
        return {"var": self.var, "expected": expected, "matched": self.matched, "total": self.total,
                "missing_pids": list(self.missing_pids)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EnvVarCheck":
        return cls(var=d["var"], expected=d.get("expected"), matched=int(d["matched"]),
                   total=int(d["total"]), missing_pids=tuple(int(p) for p in d.get("missing_pids", ())))


@dataclass(frozen=True)
class EnvReport:
    """What :class:`EnvSampler` saw during one trial; stored as JSON with the trial.

    ``entries``: one :class:`EnvVarCheck` per expected variable, sorted by
    name. ``processes``: ``(pid, cmdline)`` of every process whose environment
    was read. ``warnings``: one line per variable that did not reach every
    process (naming the processes), or that could not be checked at all.
    """

    entries: tuple[EnvVarCheck, ...] = ()
    warnings: tuple[str, ...] = ()
    processes: tuple[tuple[int, str], ...] = ()
    samples: int = 0
    failed_samples: int = 0

    @property
    def ok(self) -> bool:
        """True when every expected variable reached every sampled process."""
        return all(e.ok for e in self.entries)

    def summary(self) -> str:
        """One line for progress output, e.g. ``env: 1 of 2 vars reached all 9 processes``."""
        if not self.entries:
            return "env: nothing to check"
        total = max(e.total for e in self.entries)
        good = sum(e.ok for e in self.entries)
        return f"env: {good} of {len(self.entries)} vars reached all {total} processes"

    def get(self, var: str) -> EnvVarCheck:
        """The check of ``var``; :class:`KeyError` if the arm did not set or unset it."""
        for e in self.entries:
            if e.var == var:
                return e
        raise KeyError(var)

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self.entries],
                "warnings": list(self.warnings),
                "processes": [[pid, redact_text(cmd)] for pid, cmd in self.processes],
                "samples": self.samples,
                "failed_samples": self.failed_samples}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EnvReport":
        return cls(entries=tuple(EnvVarCheck.from_dict(e) for e in d.get("entries", ())),
                   warnings=tuple(d.get("warnings", ())),
                   processes=tuple((int(p), str(c)) for p, c in d.get("processes", ())),
                   samples=int(d.get("samples", 0)),
                   failed_samples=int(d.get("failed_samples", 0)))


# --------------------------------------------------------------------------- probing
# Run by host.python on the benchmark's host: argv[1] is JSON {"pids": [...],
# "vars": [...]}. Prints {pid: [cmdline, {var: value-or-null}]} for every pid it
# could read; pids that vanished or are not ours are left out. Only the
# requested variables leave the host (the rest may hold secrets).
_PROBE = r"""
import json, sys
req = json.loads(sys.argv[1])
want = set(req["vars"])
out = {}
for pid in req["pids"]:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read()
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        continue
    if not cmd:          # zombie or kernel thread: nothing to read
        continue
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            k = k.decode("utf-8", "replace")
            if k in want:
                env[k] = v.decode("utf-8", "replace")
    out[pid] = [cmd.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace"), env]
sys.stdout.write(json.dumps(out))
"""


@dataclass
class _Seen:
    cmdline: str
    values: dict[str, str | None] = field(default_factory=dict)


class EnvSampler:
    """Samples the environment of a benchmark's processes while it runs.

    ``EnvSampler(host, expected)`` where ``expected`` maps each variable the
    arm sets to its value, or to ``None`` for a variable the arm unsets.
    Call :meth:`sample` with the current pids of the benchmark's tree as often
    as you like (it is cheap: a pid is read again only when its command line
    changed, i.e. it exec'ed), then :meth:`report`. Thread-safe.

    ``use_psutil``: read ``/proc`` in-process through psutil (default: when
    ``host.is_local``); otherwise one small Python probe per sample run with
    ``host.run`` (the host's ``python_exe``), which also works over SSH.
    """

    def __init__(self, host: Host, expected: Mapping[str, str | None], *,
                 use_psutil: bool | None = None, timeout_s: float = 10.0):
        for k, v in expected.items():
            if not isinstance(k, str) or not (v is None or isinstance(v, str)):
                raise BisectLabError(f"env check: {k!r} must map to a string or None, got {v!r}")
        self.host = host
        self.expected: dict[str, str | None] = dict(expected)
        self.use_psutil = host.is_local if use_psutil is None else use_psutil
        self.timeout_s = timeout_s
        self._seen: dict[int, _Seen] = {}
        self._samples = 0
        self._failed = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ sampling
    def sample(self, pids: list[int]) -> int:
        """Read the processes in ``pids`` not read yet (or that exec'ed since).

        Processes that vanished or cannot be read are ignored. Returns how many
        processes were (re)read. Never raises for a failed probe: a trial must
        not fail because its env check did; the report counts failed samples.
        """
        if not self.expected:
            return 0
        pids = sorted({int(p) for p in pids})
        with self._lock:
            self._samples += 1
            try:
                found = self._read_psutil(pids) if self.use_psutil else self._read_probe(pids)
            except (BisectLabError, OSError, ValueError):
                self._failed += 1
                return 0
            updated = 0
            for pid, (cmd, env) in found.items():
                seen = self._seen.get(pid)
                # A pid seen between fork and exec shows its parent's command line
                # and environment; once it has exec'ed, the new image is what counts.
                if seen is not None and seen.cmdline == cmd:
                    continue
                self._seen[pid] = _Seen(cmd, {v: env.get(v) for v in self.expected})
                updated += 1
            return updated

    def _read_psutil(self, pids: list[int]) -> dict[int, tuple[str, dict[str, str]]]:
        import psutil

        out = {}
        for pid in pids:
            try:
                p = psutil.Process(pid)
                cmd = p.cmdline()
                seen = self._seen.get(pid)
                joined = " ".join(cmd)
                if not cmd:
                    continue
                if seen is not None and seen.cmdline == joined:
                    out[pid] = (joined, {})       # unchanged: skip the environ read
                    continue
                env = p.environ()
            except (psutil.Error, OSError):
                continue
            out[pid] = (joined, {k: env[k] for k in self.expected if k in env})
        return out

    def _read_probe(self, pids: list[int]) -> dict[int, tuple[str, dict[str, str]]]:
        if not pids:
            return {}
        req = json.dumps({"pids": pids, "vars": sorted(self.expected)})
        # Host.python plus "-I -S": the probe needs only the stdlib, and skipping
        # site-packages (.pth files, pyenv shims' site) makes it ~6x cheaper,
        # which matters at one probe every 0.5 s.
        res = self.host.quick([self.host.python_path(), "-I", "-S", "-c", _PROBE, req],
                              timeout_s=self.timeout_s)
        if not res.ok:
            raise BisectLabError(f"env probe failed on {res.host}: {res.stderr.strip()[-200:]}")
        data = json.loads(res.stdout or "{}")
        return {int(pid): (str(cmd), dict(env)) for pid, (cmd, env) in data.items()}

    # ------------------------------------------------------------------ report
    def report(self) -> EnvReport:
        """Summarise everything sampled so far (can be called more than once)."""
        with self._lock:
            seen = dict(sorted(self._seen.items()))
            samples, failed = self._samples, self._failed
        entries, warnings = [], []
        for var in sorted(self.expected):
            want = self.expected[var]
            missing = [pid for pid, s in seen.items() if s.values.get(var) != want]
            check = EnvVarCheck(var, want, len(seen) - len(missing), len(seen), tuple(missing))
            entries.append(check)
            if not seen:
                warnings.append(f"{check.label} could not be checked: no process of the benchmark "
                                f"could be read ({samples} samples, {failed} failed)")
            elif missing:
                warnings.append(self._warning(check, seen))
        return EnvReport(entries=tuple(entries), warnings=tuple(warnings),
                         processes=tuple((pid, s.cmdline) for pid, s in seen.items()),
                         samples=samples, failed_samples=failed)

    @staticmethod
    def _warning(check: EnvVarCheck, seen: Mapping[int, _Seen]) -> str:
        verb = "held in" if check.expected is None else "reached"
        parts = []
        for pid in check.missing_pids[:_MAX_LISTED]:
            got = seen[pid].values.get(check.var)
            where = f"pid {pid} ({_short(seen[pid].cmdline)})"
            if got is None:
                parts.append(f"missing in {where}")
            else:
                parts.append(f"{check.var}={_show(check.var, got)} in {where}")
        more = len(check.missing_pids) - _MAX_LISTED
        if more > 0:
            parts.append(f"and {more} more")
        return f"{check.label} {verb} {check.matched} of {check.total} processes: " + "; ".join(parts)
