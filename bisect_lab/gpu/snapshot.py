"""GPU state as frozen values, and the inspector that takes it through a host."""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import HostError
from ..hosts.base import Host
from . import probe_script
from .probe_script import FAKE_ENV, decode_throttle

# Reasons that mean "the clock is held down by power or heat", i.e. a measurement
# taken now is slower than the GPU can be. gpu_idle, sync_boost,
# applications_clocks_setting (a deliberate clock lock) and display clocks are not.
PERF_THROTTLE = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal",
                           "power_brake", "board_limit", "reliability"})


class ProbeError(HostError):
    """The probe could not be run or printed no JSON: the host is broken (a trial's
    ``host-error``, exit 4), which is not the same as a host without GPUs."""


@lru_cache(maxsize=1)
def probe_source() -> str:
    """The probe's source text, as sent through ``Host.python``."""
    return Path(probe_script.__file__).read_text()


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU, with what /proc says about it on that host."""

    pid: int
    used_memory_mb: float | None = None
    cmdline: str | None = None          # None: not visible (other pid namespace, gone)
    ppid: int | None = None
    pgid: int | None = None
    sid: int | None = None
    ancestors: tuple[int, ...] = ()

    def owned_by(self, owned: frozenset[int]) -> bool:
        """True when this process or an ancestor/session/group leader is in ``owned``.

        The campaign knows the pid it spawned; the GPU is held by its workers
        (SGLang's TP ranks), which keep the session id even when re-parented.
        """
        if not owned:
            return False
        return (self.pid in owned or self.sid in owned or self.pgid in owned
                or any(a in owned for a in self.ancestors))

    def describe(self) -> str:
        mem = f", {self.used_memory_mb:.0f} MiB" if self.used_memory_mb is not None else ""
        return f"pid {self.pid} ({self.cmdline or 'cmdline not visible'}{mem})"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU at one moment (units: MiB, %, degrees C, MHz, W)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_mask: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    persistence_mode: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    processes: tuple[GpuProcess, ...] | None = ()   # None: the driver would not list them

    @property
    def idle_state(self) -> bool:
        """NVML says the clocks are down because nothing runs (gpu_idle reason)."""
        return "gpu_idle" in self.throttle_reasons

    @property
    def perf_throttle(self) -> tuple[str, ...]:
        """Throttle reasons that slow a measurement (power cap, thermal, slowdown)."""
        return tuple(r for r in self.throttle_reasons if r in PERF_THROTTLE)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["throttle_reasons"] = list(self.throttle_reasons)
        d["processes"] = None if self.processes is None else [asdict(p) for p in self.processes]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GpuInfo":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        procs = d.get("processes")
        known["processes"] = None if procs is None else tuple(
            GpuProcess(pid=int(p["pid"]), used_memory_mb=p.get("used_memory_mb"), cmdline=p.get("cmdline"),
                       ppid=p.get("ppid"), pgid=p.get("pgid"), sid=p.get("sid"),
                       ancestors=tuple(p.get("ancestors") or ()))
            for p in procs)
        mask = d.get("throttle_mask")
        reasons = d.get("throttle_reasons")
        if isinstance(reasons, int):           # a bitmask where names were expected
            mask, reasons = reasons if mask is None else mask, None
        if reasons is None and mask is not None:
            reasons = decode_throttle(mask)
        known["throttle_reasons"] = tuple(reasons or ())
        return cls(**known)


@dataclass(frozen=True)
class GpuSnapshot:
    """Every GPU of one host at one moment. ``gpus == ()`` with ``reason`` means no GPU."""

    host: str
    taken_at: float
    gpus: tuple[GpuInfo, ...] = ()
    reason: str = ""                 # "no GPU: ..." when there is none
    backend: str = "none"            # pynvml | nvidia-smi | fake | none
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    duration_s: float = 0.0

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def gpu(self, index: int) -> GpuInfo | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def select(self, devices: Iterable[int] | None) -> tuple[GpuInfo, ...]:
        """The GPUs named by NVML index (``None``: all). Missing indices are skipped."""
        if devices is None:
            return self.gpus
        wanted = set(devices)
        return tuple(g for g in self.gpus if g.index in wanted)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "taken_at": self.taken_at, "reason": self.reason,
                "backend": self.backend, "driver_version": self.driver_version,
                "cuda_driver_version": self.cuda_driver_version, "duration_s": self.duration_s,
                "gpus": [g.to_dict() for g in self.gpus]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GpuSnapshot":
        return cls(host=d.get("host", "?"), taken_at=float(d.get("taken_at") or 0.0),
                   gpus=tuple(GpuInfo.from_dict(g) for g in d.get("gpus") or ()),
                   reason=d.get("reason") or "", backend=d.get("backend") or "none",
                   driver_version=d.get("driver_version"),
                   cuda_driver_version=d.get("cuda_driver_version"),
                   duration_s=float(d.get("duration_s") or 0.0))

    @classmethod
    def from_probe(cls, host: str, raw: Mapping[str, Any], taken_at: float | None = None) -> "GpuSnapshot":
        """Build from the probe script's JSON."""
        gpus = tuple(GpuInfo.from_dict(g) for g in raw.get("gpus") or ())
        reason = raw.get("reason") or ("" if gpus else "no GPU: none found")
        return cls(host=host, taken_at=taken_at if taken_at is not None else time.time(), gpus=gpus,
                   reason=reason, backend=raw.get("backend") or "none",
                   driver_version=raw.get("driver_version"),
                   cuda_driver_version=raw.get("cuda_driver_version"),
                   duration_s=float(raw.get("duration_s") or 0.0))

    def summary(self) -> str:
        """One line per GPU, for logs and ``gpu status``."""
        if not self.gpus:
            return f"{self.host}: {self.reason or 'no GPU'}"
        lines = []
        for g in self.gpus:
            procs = "?" if g.processes is None else str(len(g.processes))
            lines.append(
                f"{self.host} gpu{g.index} {g.name}: mem {_n(g.memory_used_mb)}/{_n(g.memory_total_mb)} MiB, "
                f"util {_n(g.utilization_gpu)}%, {_n(g.temperature_c)} C, sm {_n(g.sm_clock_mhz)}/"
                f"{_n(g.sm_clock_max_mhz)} MHz, mem clk {_n(g.mem_clock_mhz)} MHz, "
                f"{_n(g.power_w, 1)}/{_n(g.power_limit_w)} W, throttle [{', '.join(g.throttle_reasons) or 'none'}], "
                f"procs {procs}")
        return "\n".join(lines)


def _n(v, digits=0):
    if v is None:
        return "?"
    return f"{v:.{digits}f}"


class GpuInspector:
    """Takes :class:`GpuSnapshot`s of a host.

    On the local machine the probe runs in-process (NVML stays initialised, a
    probe costs milliseconds); elsewhere its source is sent through
    ``host.python`` (one round trip). ``fake_nvml`` names a fake-NVML JSON file
    (see :mod:`bisect_lab.gpu.probe_script`); otherwise the host's own
    ``BISECT_LAB_FAKE_NVML`` decides.
    """

    def __init__(self, host: Host, *, fake_nvml: str | os.PathLike | None = None,
                 in_process: bool | None = None, timeout_s: float = 60.0):
        self.host = host
        self.fake_nvml = str(fake_nvml) if fake_nvml else None
        self.in_process = host.is_local if in_process is None else in_process
        self.timeout_s = timeout_s

    def raw(self, *sections: str) -> dict[str, Any]:
        """Run the probe for ``sections`` (gpu, load, static, torch) and return its JSON."""
        sections = sections or ("gpu",)
        # Static facts (package versions) belong to the host's interpreter, which may
        # not be ours: only GPU and load state are safe to take in-process.
        if self.in_process and set(sections) <= {"gpu", "load"}:
            return probe_script.probe(sections, fake_path=self.fake_nvml or os.environ.get(FAKE_ENV))
        env = {FAKE_ENV: self.fake_nvml} if self.fake_nvml else None
        # Volatile sections sit on every trial's path: one helper-shell round trip remotely.
        run = self.host.python if {"static", "torch"} & set(sections) else self.host.quick_python
        r = run(probe_source(), *sections, timeout_s=self.timeout_s, env=env)
        if not r.ok:
            raise ProbeError(f"GPU probe failed on {self.host.name}: "
                             f"{'timed out' if r.timed_out else (r.stderr.strip() or r.stdout.strip())[-300:]}")
        for line in reversed(r.stdout.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        raise ProbeError(f"GPU probe on {self.host.name} printed no JSON: {r.stdout[-300:]!r}")

    def probe(self) -> GpuSnapshot:
        """Every GPU's state now; a host without GPUs gives ``gpus=()`` and a reason."""
        t = time.time()
        return GpuSnapshot.from_probe(self.host.name, self.raw("gpu"), taken_at=t)
