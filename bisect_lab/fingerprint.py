"""Fingerprints: everything about a trial's environment that could change its result.

A fingerprint is a canonical, JSON-able dict (tree hash, patch hashes, env with
secrets redacted, Python and package versions, NVIDIA driver / CUDA / NCCL, GPU
model, clocks, temperatures, power, throttle reasons, host, load, CPU) whose
``id`` is the sha256 of its canonical JSON: equal conditions give equal ids,
so the store can deduplicate, and :func:`diff` says what differed between two.

Cost: facts that cannot change within a campaign (package versions, CPU model,
kernel, NCCL / CUDA wheels) are taken once per host and kept in a
:class:`FingerprintCache`; a warm fingerprint then costs at most one
``host.python`` round trip (remote) or none at all (local: NVML and load are
read in-process).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .gpu.flags import TrialFlags, flag_trials
from .gpu.snapshot import GpuInfo, GpuInspector, GpuProcess, GpuSnapshot
from .hosts.base import Host
from .redact import REDACTED, is_secret_name, redact_env, redact_text, redact_tree  # noqa: F401

SCHEMA = 1

# --------------------------------------------------------------------------- redaction
# The policy lives in redact.py (one for every sink); these names stay for existing callers.
redact_value = redact_text
_redact_tree = redact_tree


# --------------------------------------------------------------------------- canonical form
def _clean(obj: Any) -> Any:
    """JSON-able, deterministic: tuples -> lists, floats rounded so noise in the last bits cannot split ids."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            return str(obj)
        r = round(obj, 3)
        return int(r) if r == int(r) else r
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return str(obj)


def canonical_json(obj: Any) -> str:
    """The bytes the id is taken over: sorted keys, no whitespace."""
    return json.dumps(_clean(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# Measurements that move from trial to trial under identical configuration.
READINGS = ("host.loadavg", "gpu*.*.memory.used_mb", "gpu*.*.utilization", "gpu*.*.temperature_c",
            "gpu*.*.clocks.sm", "gpu*.*.clocks.mem", "gpu*.*.power.draw_w", "gpu*.*.throttle",
            "gpu*.*.processes")


def stable_content(content: Mapping[str, Any]) -> dict[str, Any]:
    """``content`` without the :data:`READINGS` paths."""
    def strip(obj: Any, path: str) -> Any:
        if isinstance(obj, Mapping):
            return {k: strip(v, f"{path}.{k}" if path else str(k)) for k, v in obj.items()
                    if not any(fnmatch.fnmatchcase(f"{path}.{k}" if path else str(k), p) for p in READINGS)}
        if isinstance(obj, (list, tuple)):
            return [strip(v, f"{path}.{i}") for i, v in enumerate(obj)]
        return obj
    return strip(_clean(content), "")


@dataclass(frozen=True)
class Fingerprint:
    """A trial's environment. ``content`` is hashed; ``taken_at`` and ``meta`` (timings) are not."""

    content: Mapping[str, Any]
    taken_at: float = 0.0
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """Content address: sha256 of the canonical JSON of ``content``."""
        return hashlib.sha256(canonical_json(self.content).encode()).hexdigest()

    @property
    def stable_id(self) -> str:
        """sha256 of the content without :data:`READINGS` (load, temperatures, power, current
        clocks, throttle, utilisation, memory used, processes): equal for trials run under the
        same configuration, so stores can deduplicate the bulky part and group trials by it."""
        return hashlib.sha256(canonical_json(stable_content(self.content)).encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """Flat dict: content keys plus ``id``, ``taken_at``, ``meta`` (what :func:`diff` takes)."""
        d = dict(_clean(self.content))
        d.update(id=self.id, taken_at=self.taken_at, meta=_clean(dict(self.meta)))
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Fingerprint":
        """Inverse of :meth:`to_dict`; raises ValueError if a stored ``id`` does not match the content."""
        content = {k: v for k, v in d.items() if k not in ("id", "taken_at", "meta")}
        fp = cls(_clean(content), float(d.get("taken_at") or 0.0), dict(d.get("meta") or {}))
        if d.get("id") and d["id"] != fp.id:
            raise ValueError(f"fingerprint id {d['id'][:12]} does not match its content ({fp.id[:12]})")
        return fp


# --------------------------------------------------------------------------- cache
class FingerprintCache:
    """Per-host facts that cannot change within a campaign (package versions, CPU, kernel, wheels).

    Keyed by host name and interpreter; entries expire after ``max_age_s`` so a
    long-lived process notices a driver or package upgrade eventually.
    """

    def __init__(self, max_age_s: float = 3600.0):
        self.max_age_s = max_age_s
        self._data: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(host: Host) -> tuple[str, str]:
        return (f"{type(host).__name__}:{host.name}", str(getattr(host, "python_exe", "")))

    def get(self, host: Host) -> dict[str, Any] | None:
        with self._lock:
            hit = self._data.get(self.key(host))
        if hit and time.monotonic() - hit[0] <= self.max_age_s:
            return hit[1]
        return None

    def put(self, host: Host, static: dict[str, Any]) -> None:
        with self._lock:
            self._data[self.key(host)] = (time.monotonic(), static)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


DEFAULT_CACHE = FingerprintCache()


# --------------------------------------------------------------------------- collect
def gpu_section(snap: GpuSnapshot | None) -> list[dict[str, Any]]:
    """Per-GPU dicts laid out for readable diff paths (``gpu.0.clocks.sm``)."""
    if snap is None:
        return []
    out = []
    for g in snap.gpus:
        out.append({
            "index": g.index, "model": g.name, "uuid": g.uuid,
            "memory": {"used_mb": g.memory_used_mb, "total_mb": g.memory_total_mb},
            "utilization": {"gpu": g.utilization_gpu, "memory": g.utilization_memory},
            "temperature_c": g.temperature_c,
            "clocks": {"sm": g.sm_clock_mhz, "mem": g.mem_clock_mhz,
                       "sm_max": g.sm_clock_max_mhz, "mem_max": g.mem_clock_max_mhz},
            "power": {"draw_w": g.power_w, "limit_w": g.power_limit_w},
            "throttle": list(g.throttle_reasons),
            "persistence_mode": g.persistence_mode,
            "ecc_volatile_uncorrected": g.ecc_volatile_uncorrected,
            "processes": None if g.processes is None else [
                {"pid": p.pid, "cmdline": p.cmdline, "used_memory_mb": p.used_memory_mb}
                for p in g.processes],
        })
    return out


def collect(host: Host, *, tree_hash: str | None, patch_hashes: Mapping[str, str],
            env: Mapping[str, str | None], gpu: GpuSnapshot | None = None,
            extra: Mapping[str, Any] | None = None, cache: FingerprintCache | None = None,
            probe_gpu: bool = True, inspector: GpuInspector | None = None,
            gpu_after: GpuSnapshot | None = None) -> Fingerprint:
    """Fingerprint one trial on ``host``.

    ``gpu`` is the snapshot the runner already took (e.g. after :func:`wait_idle`);
    when None and ``probe_gpu`` is true, one is taken here in the same probe call
    as the load average. ``env`` is the environment the benchmark ran with
    (redacted here). ``extra`` is added under ``extra`` (strings redacted).
    ``gpu_after``, a snapshot taken right after the benchmark (clocks under load,
    throttling it caused), goes under ``gpu_after`` with the same layout as ``gpu``.
    Static facts come from ``cache`` (default: a process-wide cache).
    """
    t0 = time.perf_counter()
    cache = DEFAULT_CACHE if cache is None else cache
    insp = inspector or GpuInspector(host)
    want = ["load"] + (["gpu"] if gpu is None and probe_gpu else [])
    static = cache.get(host)
    calls = 0
    cold = static is None
    if cold:
        # Static facts belong to the host's interpreter: always through host.python.
        # Remotely that same call also carries the volatile sections (one round trip).
        sections = ["static"] + ([] if insp.in_process else want)
        raw = insp.raw(*sections)
        calls += 1
        static = raw.get("static") or {}
        cache.put(host, static)
        if insp.in_process:
            raw.update(insp.raw(*want))
    else:
        raw = insp.raw(*want)
        calls += 0 if insp.in_process else 1
    taken = time.time()
    snap = gpu if gpu is not None else (
        GpuSnapshot.from_probe(host.name, raw, taken_at=taken) if "gpu" in want else None)
    load = raw.get("host") or {}
    cpu = static.get("cpu") or {}
    cuda = static.get("cuda") or {}
    content: dict[str, Any] = {
        "schema": SCHEMA,
        "tree": {"hash": tree_hash, "patches": dict(sorted(patch_hashes.items()))},
        "env": dict(sorted(redact_env(env).items())),
        "python": static.get("python") or {},
        "packages": static.get("packages") or {},
        "host": {"name": load.get("name") or host.name, "loadavg": [round(x, 2) for x in load.get("loadavg") or []],
                 "cpu_model": cpu.get("model"), "cpu_count": cpu.get("count"),
                 "cpu_affinity": cpu.get("affinity"), "mem_total_gb": cpu.get("mem_total_gb"),
                 "kernel": (static.get("os") or {}).get("kernel")},
        "nvidia": {"driver": snap.driver_version if snap else None,
                   "cuda_driver": snap.cuda_driver_version if snap else None,
                   "cuda_runtime": cuda.get("runtime"), "torch_cuda": cuda.get("torch_built_for"),
                   "nccl": cuda.get("nccl"), "probe": snap.backend if snap else "not probed",
                   "gpu": (snap.reason or f"{len(snap.gpus)} GPU(s)") if snap else "not probed"},
        "gpu": _redact_tree(gpu_section(snap)),
    }
    if gpu_after is not None:
        content["gpu_after"] = _redact_tree(gpu_section(gpu_after))
    if extra:
        content["extra"] = _redact_tree(dict(extra))
    meta = {"duration_s": time.perf_counter() - t0, "cold": cold, "host_calls": calls,
            "gpu_taken_at": snap.taken_at if snap else None}
    return Fingerprint(_clean(content), taken, meta)


def gpu_snapshots(fp: Mapping[str, Any] | Fingerprint) -> dict[str, GpuSnapshot]:
    """Rebuild the GPU snapshots a fingerprint holds: ``{"before": ..., "after": ...}``.

    ``before`` is the ``gpu`` section, ``after`` the ``gpu_after`` section when
    present. Lets stored fingerprints feed :func:`bisect_lab.gpu.flag_trials`.
    """
    d = fp.to_dict() if isinstance(fp, Fingerprint) else fp
    host = (d.get("host") or {}).get("name") or "?"
    nv = d.get("nvidia") or {}
    out: dict[str, GpuSnapshot] = {}
    for phase, key in (("before", "gpu"), ("after", "gpu_after")):
        if key not in d:
            continue
        gpus = []
        for g in d.get(key) or []:
            clocks, power = g.get("clocks") or {}, g.get("power") or {}
            mem, util = g.get("memory") or {}, g.get("utilization") or {}
            gpus.append(GpuInfo(
                index=g.get("index", len(gpus)), name=g.get("model"), uuid=g.get("uuid"),
                driver_version=nv.get("driver"), cuda_driver_version=nv.get("cuda_driver"),
                memory_used_mb=mem.get("used_mb"), memory_total_mb=mem.get("total_mb"),
                utilization_gpu=util.get("gpu"), utilization_memory=util.get("memory"),
                temperature_c=g.get("temperature_c"), sm_clock_mhz=clocks.get("sm"),
                mem_clock_mhz=clocks.get("mem"), sm_clock_max_mhz=clocks.get("sm_max"),
                mem_clock_max_mhz=clocks.get("mem_max"), power_w=power.get("draw_w"),
                power_limit_w=power.get("limit_w"), throttle_reasons=tuple(g.get("throttle") or ()),
                persistence_mode=g.get("persistence_mode"),
                ecc_volatile_uncorrected=g.get("ecc_volatile_uncorrected"),
                processes=None if g.get("processes") is None else tuple(
                    GpuProcess(pid=p.get("pid") or 0, used_memory_mb=p.get("used_memory_mb"),
                               cmdline=p.get("cmdline")) for p in g["processes"])))
        out[phase] = GpuSnapshot(host=host, taken_at=float(d.get("taken_at") or 0.0), gpus=tuple(gpus),
                                 reason="" if gpus else str(nv.get("gpu") or "no GPU"),
                                 backend=str(nv.get("probe") or "none"), driver_version=nv.get("driver"),
                                 cuda_driver_version=nv.get("cuda_driver"))
    return out


def flag_fingerprints(fps: Mapping[Any, Mapping[str, Any] | Fingerprint], **kw) -> TrialFlags:
    """:func:`bisect_lab.gpu.flag_trials` over stored fingerprints (trial key -> fingerprint dict)."""
    return flag_trials({k: gpu_snapshots(v) for k, v in fps.items()}, **kw)


# --------------------------------------------------------------------------- diff
_ABSENT = object()
# Fields that change on every trial whatever the conditions: compared only when asked.
VOLATILE = ("id", "taken_at", "meta", "meta.*", "gpu*.*.processes.*.pid")


@dataclass(frozen=True)
class Change:
    """One difference between two fingerprints (``a`` or ``b`` may be :data:`ABSENT`)."""

    path: str
    a: Any
    b: Any

    def __str__(self) -> str:
        return f"{self.path}: {_fmt(self.a)} -> {_fmt(self.b)}"


ABSENT = _ABSENT


def _fmt(v: Any) -> str:
    if v is _ABSENT:
        return "<absent>"
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, str):
        return v if v else '""'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return json.dumps(v, sort_keys=True, default=str)


def _scalar_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(not isinstance(x, (dict, list, tuple)) for x in v)


def diff(a: Mapping[str, Any] | Fingerprint, b: Mapping[str, Any] | Fingerprint, *,
         include_volatile: bool = False, ignore: Iterable[str] = ()) -> list[Change]:
    """Recursive differences between two fingerprint dicts, in path order.

    Paths join keys and list indices with dots (``gpu.0.clocks.sm: 1980 -> 1410``);
    lists of plain values (throttle reasons, load average) compare as one value.
    Fields in :data:`VOLATILE` (timestamps, timings, pids) are skipped unless
    ``include_volatile``; ``ignore`` adds fnmatch patterns to skip.
    """
    da = a.to_dict() if isinstance(a, Fingerprint) else a
    db = b.to_dict() if isinstance(b, Fingerprint) else b
    patterns = list(ignore) + ([] if include_volatile else list(VOLATILE))
    out: list[Change] = []

    def skip(path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, p) for p in patterns)

    def walk(path: str, x: Any, y: Any) -> None:
        if path and skip(path):
            return
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            for k in sorted(set(x) | set(y), key=str):
                walk(f"{path}.{k}" if path else str(k), x.get(k, _ABSENT), y.get(k, _ABSENT))
            return
        if (isinstance(x, (list, tuple)) and isinstance(y, (list, tuple))
                and not (_scalar_list(x) and _scalar_list(y))):
            for i in range(max(len(x), len(y))):
                walk(f"{path}.{i}", x[i] if i < len(x) else _ABSENT, y[i] if i < len(y) else _ABSENT)
            return
        if _norm(x) != _norm(y):
            out.append(Change(path, x, y))

    walk("", da, db)
    return out


def _norm(v: Any) -> Any:
    if v is _ABSENT:
        return v
    return json.loads(canonical_json(v))


def format_diff(changes: Iterable[Change]) -> str:
    """One change per line; "no differences" when empty."""
    lines = [str(c) for c in changes]
    return "\n".join(lines) if lines else "no differences"
