"""GPU hygiene before a trial: wait until idle, kill what the campaign owns, lock clocks."""
from __future__ import annotations

import logging
import shlex
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..errors import BisectLabError
from ..hosts.base import Host, KilledProcess
from ..model import GpuPolicy, TrialStatus
from .snapshot import GpuInfo, GpuInspector, GpuProcess, GpuSnapshot

_log = logging.getLogger("bisect_lab.gpu")

KILL_CAMPAIGN = "campaign"
KILL_ALL = "all-gpu-processes"


class GpuError(BisectLabError):
    """A GPU policy that cannot be honoured (unknown device, clock lock refused)."""


Log = Callable[[str], None]


@dataclass(frozen=True)
class IdleResult:
    """Outcome of :func:`wait_idle`.

    ``status`` is ``ok``, ``no-gpu`` (nothing to wait for; not a failure) or
    ``timeout``; on timeout ``reason`` says which GPU was busy and why, and the
    trial is stored as ``gpu-not-idle``.
    """

    status: str
    reason: str
    waited_s: float
    snapshot: GpuSnapshot | None
    killed: tuple[KilledProcess, ...] = ()
    polls: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "no-gpu")

    def to_dict(self) -> dict:
        """JSON-able form (``gpu reset --json``, the trial's stored extras)."""
        return {"status": self.status, "ok": self.ok, "reason": self.reason, "waited_s": self.waited_s,
                "polls": self.polls, "killed": [{"pid": k.pid, "cmdline": k.cmdline} for k in self.killed],
                "snapshot": self.snapshot.to_dict() if self.snapshot else None}

    @property
    def trial_status(self) -> TrialStatus | None:
        """``TrialStatus.GPU_NOT_IDLE`` when the trial must not be measured, else None."""
        return None if self.ok else TrialStatus.GPU_NOT_IDLE


def busy_reasons(g: GpuInfo, policy: GpuPolicy) -> list[str]:
    """Why GPU ``g`` is not idle under ``policy`` (empty list: idle)."""
    why = []
    if g.processes:
        why.append(f"{len(g.processes)} compute process(es): "
                   + "; ".join(p.describe() for p in g.processes[:4]))
    if g.memory_used_mb is not None and g.memory_used_mb >= policy.idle_memory_mb:
        why.append(f"memory used {g.memory_used_mb:.0f} MiB >= {policy.idle_memory_mb:.0f} MiB")
    if g.utilization_gpu:
        why.append(f"utilization {g.utilization_gpu:.0f}%")
    if (policy.max_temperature_c is not None and g.temperature_c is not None
            and g.temperature_c > policy.max_temperature_c):
        why.append(f"temperature {g.temperature_c:.0f} C > {policy.max_temperature_c:.0f} C")
    return why


def _selected(snap: GpuSnapshot, policy: GpuPolicy) -> tuple[GpuInfo, ...]:
    if policy.devices is not None:
        present = {g.index for g in snap.gpus}
        missing = [d for d in policy.devices if d not in present]
        if missing:
            raise GpuError(f"[gpu] devices: GPU {missing} not present on {snap.host} "
                           f"(it has {sorted(present)}; indices are NVML's, not CUDA_VISIBLE_DEVICES')")
    return snap.select(policy.devices)


def kill_gpu_process(host: Host, p: GpuProcess, log: Log, why: str) -> KilledProcess | None:
    """``kill -9`` one pid through the host; log pid and command line."""
    # A shell string (bash's builtin kill, quoted) behaves the same on local and SSH hosts.
    r = host.run(shlex.join(["kill", "-9", str(int(p.pid))]), timeout_s=15)
    if r.ok:
        log(f"killed pid {p.pid} on {host.name} ({why}): {p.cmdline or '<cmdline not visible>'}")
        return KilledProcess(p.pid, p.cmdline or "")
    log(f"could not kill pid {p.pid} on {host.name} ({why}): "
        f"{(r.stderr or r.stdout).strip()[-200:] or 'timed out'}")
    return None


def wait_idle(host: Host, policy: GpuPolicy, *, owned_pids: Iterable[int] = (),
              log: Log | None = None, inspector: GpuInspector | None = None,
              poll_s: float = 1.0, kill: bool = True) -> IdleResult:
    """Wait until every GPU in ``policy.devices`` (None: all) is idle.

    Idle means: no compute process, memory used under ``policy.idle_memory_mb``,
    utilisation 0 and, when set, temperature at most ``policy.max_temperature_c``;
    then ``policy.settle_s`` must pass with the GPUs still idle. Compute processes
    that belong to the campaign (``owned_pids``, their descendants and sessions)
    are killed with ``kill -9`` through the host; any other GPU process is only
    killed when ``policy.kill == "all-gpu-processes"``, and each kill is logged
    with pid and command line. Gives up after ``policy.idle_timeout_s`` with
    status ``timeout`` and the reason. A host without GPUs gives ``no-gpu``.
    """
    log = log or _log.info
    inspector = inspector or GpuInspector(host)
    owned = frozenset(int(p) for p in owned_pids)
    kill_all = policy.kill == KILL_ALL
    if policy.kill not in (KILL_CAMPAIGN, KILL_ALL):
        raise GpuError(f"[gpu] kill: expected {KILL_CAMPAIGN!r} or {KILL_ALL!r}, got {policy.kill!r}")
    t0 = time.monotonic()
    deadline = t0 + max(0.0, policy.idle_timeout_s)
    killed: list[KilledProcess] = []
    tried: set[int] = set()
    idle_since: float | None = None
    polls = 0
    snap: GpuSnapshot | None = None
    while True:
        snap = inspector.probe()
        polls += 1
        if not snap.has_gpu:
            return IdleResult("no-gpu", snap.reason or "no GPU", time.monotonic() - t0, snap, tuple(killed), polls)
        gpus = _selected(snap, policy)
        busy = {g.index: busy_reasons(g, policy) for g in gpus}
        busy = {i: w for i, w in busy.items() if w}
        if kill:
            for g in gpus:
                for p in g.processes or ():
                    if p.pid in tried:
                        continue
                    if p.owned_by(owned):
                        why = "owned by the campaign"
                    elif kill_all:
                        why = 'not ours; [gpu] kill = "all-gpu-processes"'
                    else:
                        continue
                    tried.add(p.pid)
                    k = kill_gpu_process(host, p, log, why)
                    if k:
                        killed.append(k)
        now = time.monotonic()
        if not busy:
            if idle_since is None:
                idle_since = now
            if now - idle_since >= policy.settle_s:
                return IdleResult("ok", "idle", now - t0, snap, tuple(killed), polls)
        else:
            idle_since = None
        if now >= deadline:
            text = "; ".join(f"gpu{i}: {', '.join(w)}" for i, w in sorted(busy.items())) or "not settled"
            foreign = [p for g in gpus for p in (g.processes or ()) if not p.owned_by(owned)]
            hint = (' (not started by this campaign; set [gpu] kill = "all-gpu-processes" to kill them)'
                    if foreign and not kill_all else "")
            return IdleResult("timeout", f"GPUs not idle after {policy.idle_timeout_s:g} s: {text}{hint}",
                              now - t0, snap, tuple(killed), polls)
        wait = poll_s if idle_since is None else min(poll_s, max(0.0, policy.settle_s - (now - idle_since)))
        time.sleep(max(0.01, min(wait, max(0.0, deadline - now))))


def reset(host: Host, policy: GpuPolicy, owned_pids: Iterable[int] = (), *, log: Log | None = None,
          inspector: GpuInspector | None = None, poll_s: float = 1.0) -> IdleResult:
    """``bisect-lab gpu reset``: kill GPU processes the policy allows, then wait until idle.

    Without ``owned_pids`` (a fresh CLI invocation owns nothing) only
    ``policy.kill == "all-gpu-processes"`` kills anything; each kill is logged.
    """
    return wait_idle(host, policy, owned_pids=owned_pids, log=log, inspector=inspector, poll_s=poll_s)


def _devices_arg(policy: GpuPolicy) -> list[str]:
    return [] if policy.devices is None else ["-i", ",".join(str(int(d)) for d in policy.devices)]


def lock_clocks(host: Host, policy: GpuPolicy, *, log: Log | None = None, timeout_s: float = 60.0) -> bool:
    """Lock SM clocks to ``policy.lock_clocks_mhz`` with ``nvidia-smi -lgc`` (needs root).

    Returns False when no lock is asked for; raises :class:`GpuError` when refused.
    """
    if policy.lock_clocks_mhz is None:
        return False
    mhz = int(policy.lock_clocks_mhz)
    argv = ["nvidia-smi", *_devices_arg(policy), "-lgc", f"{mhz},{mhz}"]
    # Through bash so a missing nvidia-smi is exit 127 here as on an SSH host, not an OSError.
    r = host.run(shlex.join(argv), timeout_s=timeout_s)
    if not r.ok:
        raise GpuError(f"[gpu] lock_clocks_mhz = {mhz}: {shlex.join(argv)} failed on {host.name}: "
                       f"{(r.stderr or r.stdout).strip()[-200:] or 'timed out'}")
    (log or _log.info)(f"locked SM clocks to {mhz} MHz on {host.name}")
    return True


def unlock_clocks(host: Host, policy: GpuPolicy, *, log: Log | None = None, timeout_s: float = 60.0) -> bool:
    """Undo :func:`lock_clocks` (``nvidia-smi -rgc``); a failure is logged, not raised."""
    if policy.lock_clocks_mhz is None:
        return False
    argv = ["nvidia-smi", *_devices_arg(policy), "-rgc"]
    r = host.run(shlex.join(argv), timeout_s=timeout_s)
    (log or _log.info)(f"unlocked SM clocks on {host.name}" if r.ok else
                       f"could not unlock clocks on {host.name}: {(r.stderr or r.stdout).strip()[-200:]}")
    return r.ok
