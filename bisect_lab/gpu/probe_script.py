"""Self-contained host probe: GPU state (NVML), load, and slow-changing facts.

This file is sent *as source text* through ``Host.python(code, *sections)`` and
runs on hosts where bisect-lab is not installed, so it imports nothing but the
standard library and, optionally, ``pynvml``. It prints exactly one JSON object
on stdout and never raises: a host without an NVIDIA GPU, without pynvml, or
whose NVML fails to initialise reports ``{"gpus": [], "reason": "no GPU: ..."}``.

Sections (command-line arguments, any order):

``gpu``     per-GPU state: model, uuid, driver, memory, utilisation, temperature,
            clocks, power, throttle reasons, persistence, ECC, compute processes.
``load``    host name, load average, time (changes every trial).
``static``  what cannot change within a campaign: Python, package versions
            (via importlib.metadata, never by importing them), CPU model and
            count, kernel, NVIDIA driver / CUDA driver, NCCL and CUDA runtime
            versions where the wheels say so.
``torch``   opt-in: import torch for torch.version.cuda and torch.cuda.nccl.version()
            (slow, seconds; never done by default).

Fake NVML: if the environment variable ``BISECT_LAB_FAKE_NVML`` names a JSON
file, GPU state is read from it instead of NVML, so tests (local or across an
SSH host) can simulate busy, hot or throttled GPUs. Format::

    {"driver_version": "550.54.15", "cuda_driver_version": "12.4",
     "error": "optional: simulate an NVML init failure",
     "gpus": [{"name": "NVIDIA H200", "memory_used_mb": 615, "memory_total_mb": 143771,
               "utilization_gpu": 0, "temperature_c": 37, "sm_clock_mhz": 1980,
               "throttle_reasons": ["gpu_idle"] or 1,
               "processes": [{"pid": 1234, "used_memory_mb": 40000, "utilization": 100}]}]}

A fake process whose pid is not alive (gone or zombie) is dropped, and its
memory and utilisation with it, so killing the real process frees the fake GPU.

The module can also be imported (``bisect_lab.gpu.probe_script``); ``probe()``
then runs in-process, keeping NVML initialised between calls for speed.
"""
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time

PROBE_VERSION = 1
FAKE_ENV = "BISECT_LAB_FAKE_NVML"

# NVML clocks-event (throttle) reason bits, names as in nvidia-ml-py's constants.
THROTTLE_BITS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "power_brake"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
THROTTLE_NAMES = {name: bit for bit, name in THROTTLE_BITS}

# Packages whose versions can change a result; looked up with importlib.metadata.
PACKAGES = (
    "torch", "sglang", "sgl-kernel", "flashinfer-python", "flashinfer", "triton", "numpy",
    "transformers", "vllm", "xformers", "cuda-python", "nvidia-nccl-cu12", "nvidia-nccl-cu11",
    "nvidia-nccl-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11",
    "nvidia-cuda-runtime-cu13", "nvidia-cudnn-cu12", "nvidia-cublas-cu12", "nvidia-ml-py",
    "pynvml", "deep-gemm", "deep-ep",
)

_NVML = {"ready": False, "error": None, "module": None}


def decode_throttle(mask):
    """Bitmask -> list of reason names (unknown bits as ``bit_0x...``)."""
    mask = int(mask or 0)
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_BITS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("bit_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


def encode_throttle(value):
    """Names or an int -> bitmask (the fake file may use either)."""
    if isinstance(value, (list, tuple)):
        mask = 0
        for name in value:
            if name in THROTTLE_NAMES:
                mask |= THROTTLE_NAMES[name]
            elif str(name).startswith("bit_0x"):
                mask |= int(str(name)[4:], 16)
        return mask
    if isinstance(value, str):
        return int(value, 0)
    return int(value or 0)


# --------------------------------------------------------------------------- /proc
def proc_info(pid):
    """cmdline, state, ppid, pgid, sid and ancestors of a pid, from /proc (None when not visible)."""
    info = {"cmdline": None, "state": None, "ppid": None, "pgid": None, "sid": None,
            "ancestors": [], "visible": False}
    try:
        raw = _cmdline(pid)
        info["cmdline"] = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:1000]
        info["visible"] = True
        stat = _stat(pid)
        if stat:
            info["state"], info["ppid"], info["pgid"], info["sid"] = stat
        # Ancestors let the caller recognise workers of a process it started.
        seen, p = set(), info["ppid"]
        while p and p > 1 and p not in seen and len(seen) < 64:
            seen.add(p)
            info["ancestors"].append(p)
            s = _stat(p)
            p = s[1] if s else None
    except (OSError, ValueError):
        pass
    return info


def _cmdline(pid, tries=5):
    """/proc/<pid>/cmdline. A process caught in the middle of exec() shows an empty one for a
    moment (the new image's arguments are not in place yet): read again briefly before taking
    "empty" for an answer (a zombie or kernel thread stays empty)."""
    for k in range(tries):
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            raw = f.read()
        if raw or k == tries - 1:
            return raw
        time.sleep(0.02)


def _stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def pid_alive(pid):
    """True for a live, non-zombie process visible in /proc (or to kill(0) elsewhere)."""
    s = _stat(pid)
    if s is not None:
        return s[0] not in ("Z", "X", "x")
    if os.path.isdir("/proc"):
        return False
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _process_entry(pid, used_mb):
    entry = {"pid": int(pid), "used_memory_mb": used_mb}
    entry.update(proc_info(int(pid)))
    return entry


# --------------------------------------------------------------------------- GPU: fake
def _gpu_fake(path):
    with open(path) as f:
        spec = json.load(f)
    out = {"backend": "fake", "driver_version": spec.get("driver_version"),
           "cuda_driver_version": spec.get("cuda_driver_version"), "gpus": []}
    if spec.get("error"):
        out["reason"] = "no GPU: %s" % spec["error"]
        return out
    for i, g in enumerate(spec.get("gpus", [])):
        procs, mem, util = [], float(g.get("memory_used_mb", 0.0)), float(g.get("utilization_gpu", 0))
        for p in g.get("processes", []):
            if not pid_alive(int(p["pid"])):
                continue
            used = p.get("used_memory_mb")
            mem += float(used or 0.0)
            util = max(util, float(p.get("utilization", 0)))
            procs.append(_process_entry(p["pid"], used))
        mask = encode_throttle(g.get("throttle_reasons", 0))
        out["gpus"].append({
            "index": g.get("index", i), "name": g.get("name", "Fake GPU"),
            "uuid": g.get("uuid", "GPU-fake-%d" % i),
            "driver_version": spec.get("driver_version"),
            "cuda_driver_version": spec.get("cuda_driver_version"),
            "memory_used_mb": mem, "memory_total_mb": g.get("memory_total_mb", 81920.0),
            "utilization_gpu": util, "utilization_memory": g.get("utilization_memory", 0),
            "temperature_c": g.get("temperature_c", 35),
            "sm_clock_mhz": g.get("sm_clock_mhz", 1980), "mem_clock_mhz": g.get("mem_clock_mhz", 3201),
            "sm_clock_max_mhz": g.get("sm_clock_max_mhz", 1980),
            "mem_clock_max_mhz": g.get("mem_clock_max_mhz", 3201),
            "power_w": g.get("power_w", 80.0), "power_limit_w": g.get("power_limit_w", 700.0),
            "throttle_mask": mask, "throttle_reasons": decode_throttle(mask),
            "persistence_mode": g.get("persistence_mode", True),
            "ecc_volatile_uncorrected": g.get("ecc_volatile_uncorrected", 0),
            "processes": procs,
        })
    return out


# --------------------------------------------------------------------------- GPU: pynvml
def _s(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


def _nvml():
    """Initialise NVML once per process; return the module or raise with the reason."""
    if _NVML["ready"]:
        return _NVML["module"]
    import pynvml  # optional: ImportError -> "no GPU: pynvml not installed"
    pynvml.nvmlInit()
    _NVML.update(ready=True, module=pynvml)
    return pynvml


def _cuda_version_text(v):
    return None if v is None else "%d.%d" % (v // 1000, (v % 1000) // 10)


def _gpu_pynvml():
    nv = _nvml()
    out = {"backend": "pynvml", "gpus": [],
           "driver_version": _s(_try(nv.nvmlSystemGetDriverVersion)),
           "cuda_driver_version": _cuda_version_text(_try(nv.nvmlSystemGetCudaDriverVersion))}
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
        util = _try(nv.nvmlDeviceGetUtilizationRates, h)
        mask = _try(getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                    or nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        if mask is None:
            mask = _try(nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        power = _try(nv.nvmlDeviceGetPowerUsage, h)
        limit = _try(nv.nvmlDeviceGetEnforcedPowerLimit, h)
        procs = None
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"):
            fn = getattr(nv, name, None)
            if fn is not None:
                procs = _try(fn, h)
                if procs is not None:
                    break
        persistence = _try(nv.nvmlDeviceGetPersistenceMode, h)
        mb = 1024.0 * 1024.0
        out["gpus"].append({
            "index": i, "name": _s(_try(nv.nvmlDeviceGetName, h)), "uuid": _s(_try(nv.nvmlDeviceGetUUID, h)),
            "driver_version": out["driver_version"], "cuda_driver_version": out["cuda_driver_version"],
            "memory_used_mb": None if mem is None else mem.used / mb,
            "memory_total_mb": None if mem is None else mem.total / mb,
            "utilization_gpu": None if util is None else util.gpu,
            "utilization_memory": None if util is None else util.memory,
            "temperature_c": _try(nv.nvmlDeviceGetTemperature, h, 0),   # NVML_TEMPERATURE_GPU
            "sm_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, 1),      # NVML_CLOCK_SM
            "mem_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, 2),     # NVML_CLOCK_MEM
            "sm_clock_max_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, 1),
            "mem_clock_max_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, 2),
            "power_w": None if power is None else power / 1000.0,
            "power_limit_w": None if limit is None else limit / 1000.0,
            "throttle_mask": mask, "throttle_reasons": None if mask is None else decode_throttle(mask),
            "persistence_mode": None if persistence is None else bool(persistence),
            # uncorrected, volatile (since driver load), total; None where ECC is unsupported
            "ecc_volatile_uncorrected": _try(nv.nvmlDeviceGetTotalEccErrors, h, 1, 0),
            "processes": None if procs is None else [
                _process_entry(p.pid, None if getattr(p, "usedGpuMemory", None) is None
                               else p.usedGpuMemory / mb) for p in procs],
        })
    return out


# --------------------------------------------------------------------------- GPU: nvidia-smi
_SMI_FIELDS = ("index", "name", "uuid", "driver_version", "memory.used", "memory.total",
               "utilization.gpu", "utilization.memory", "temperature.gpu", "clocks.sm", "clocks.mem",
               "clocks.max.sm", "clocks.max.mem", "power.draw", "power.limit", "persistence_mode",
               "ecc.errors.uncorrected.volatile.total")


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _smi(args, timeout=20):
    r = subprocess.run(["nvidia-smi"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("nvidia-smi %s: %s" % (" ".join(args[:1]), (r.stderr or r.stdout).strip()[:200]))
    return r.stdout


def _gpu_smi():
    """Fallback when pynvml is absent: the same facts from nvidia-smi's CSV queries."""
    rows = _smi(["--query-gpu=" + ",".join(_SMI_FIELDS), "--format=csv,noheader,nounits"])
    masks = {}
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        try:
            for line in _smi(["--query-gpu=index," + field, "--format=csv,noheader,nounits"]).splitlines():
                idx, m = [x.strip() for x in line.split(",")]
                masks[int(idx)] = int(m, 16)
            break
        except Exception:
            continue
    procs = {}
    try:
        for line in _smi(["--query-compute-apps=gpu_uuid,pid,used_memory",
                          "--format=csv,noheader,nounits"]).splitlines():
            if line.strip():
                uuid, pid, used = [x.strip() for x in line.split(",")]
                procs.setdefault(uuid, []).append(_process_entry(int(pid), _num(used)))
    except Exception:
        procs = None
    cuda = None
    try:
        m = re.search(r"CUDA Version:\s*([0-9.]+)", _smi([]))
        cuda = m.group(1) if m else None
    except Exception:
        pass
    out = {"backend": "nvidia-smi", "gpus": [], "driver_version": None, "cuda_driver_version": cuda}
    for line in rows.splitlines():
        if not line.strip():
            continue
        v = dict(zip(_SMI_FIELDS, [x.strip() for x in line.split(",")]))
        idx = int(v["index"])
        out["driver_version"] = v["driver_version"]
        mask = masks.get(idx)
        ecc = _num(v["ecc.errors.uncorrected.volatile.total"])
        out["gpus"].append({
            "index": idx, "name": v["name"], "uuid": v["uuid"], "driver_version": v["driver_version"],
            "cuda_driver_version": cuda,
            "memory_used_mb": _num(v["memory.used"]), "memory_total_mb": _num(v["memory.total"]),
            "utilization_gpu": _num(v["utilization.gpu"]), "utilization_memory": _num(v["utilization.memory"]),
            "temperature_c": _num(v["temperature.gpu"]),
            "sm_clock_mhz": _num(v["clocks.sm"]), "mem_clock_mhz": _num(v["clocks.mem"]),
            "sm_clock_max_mhz": _num(v["clocks.max.sm"]), "mem_clock_max_mhz": _num(v["clocks.max.mem"]),
            "power_w": _num(v["power.draw"]), "power_limit_w": _num(v["power.limit"]),
            "throttle_mask": mask, "throttle_reasons": None if mask is None else decode_throttle(mask),
            "persistence_mode": v["persistence_mode"].lower() == "enabled",
            "ecc_volatile_uncorrected": None if ecc is None else int(ecc),
            "processes": None if procs is None else procs.get(v["uuid"], []),
        })
    return out


def probe_gpu(fake_path=None):
    """GPU state from the fake file, pynvml, or nvidia-smi, in that order; never raises."""
    fake_path = fake_path or os.environ.get(FAKE_ENV)
    try:
        if fake_path:
            return _gpu_fake(fake_path)
    except Exception as e:
        return {"backend": "fake", "gpus": [], "reason": "no GPU: fake NVML file %s: %s" % (fake_path, e)}
    try:
        return _gpu_pynvml()
    except ImportError:
        why = "pynvml not installed"
    except Exception as e:
        why = "NVML: %s" % (str(e) or type(e).__name__)
    # pynvml missing or NVML refusing: nvidia-smi may still work (it ships with the driver).
    try:
        out = _gpu_smi()
        out["note"] = why
        return out
    except FileNotFoundError:
        return {"backend": "none", "gpus": [], "reason": "no GPU: %s; nvidia-smi not found" % why}
    except Exception as e:
        return {"backend": "none", "gpus": [], "reason": "no GPU: %s; %s" % (why, e)}


# --------------------------------------------------------------------------- host
def probe_load():
    """What changes between trials on the host itself."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {"name": socket.gethostname(), "loadavg": load, "time": time.time()}


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _nccl_version(packages):
    for name in ("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu11"):
        if packages.get(name):
            return packages[name], "wheel " + name
    # A system NCCL: ask the library itself (loading it is cheap next to importing torch).
    try:
        import ctypes
        import ctypes.util
        lib = ctypes.util.find_library("nccl")
        if lib:
            nccl = ctypes.CDLL(lib)
            v = ctypes.c_int()
            if nccl.ncclGetVersion(ctypes.byref(v)) == 0:
                code = v.value
                if code >= 10000:
                    text = "%d.%d.%d" % (code // 10000, (code % 10000) // 100, code % 100)
                else:
                    text = "%d.%d.%d" % (code // 1000, (code % 1000) // 100, code % 100)
                return text, "library " + lib
    except Exception:
        pass
    return None, None


def probe_static(with_gpu_versions=True):
    """Facts that cannot change within a campaign (cached by the caller per host)."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        metadata = None
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name) if metadata else None
        except Exception:
            packages[name] = None
    packages = {k: v for k, v in packages.items() if v}
    cpu_model = None
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith("model name") and ":" in line:
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem_total = None
    m = re.search(r"MemTotal:\s+(\d+) kB", _read("/proc/meminfo"))
    if m:
        mem_total = round(int(m.group(1)) / 1024.0 / 1024.0, 1)
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    nccl, nccl_source = _nccl_version(packages)
    cuda_runtime, cuda_source = None, None
    for name in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu11"):
        if packages.get(name):
            cuda_runtime, cuda_source = packages[name], "wheel " + name
            break
    torch_cuda = None
    m = re.search(r"\+cu(\d+)(\d)$", packages.get("torch", ""))
    if m:  # torch 2.5.1+cu124 was built for CUDA 12.4
        torch_cuda = "%s.%s" % (m.group(1), m.group(2))
    out = {
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "packages": packages,
        "cpu": {"model": cpu_model or platform.processor() or None, "count": os.cpu_count(),
                "affinity": affinity, "mem_total_gb": mem_total},
        "os": {"kernel": platform.release(), "system": platform.system(), "machine": platform.machine()},
        "cuda": {"nccl": nccl, "nccl_source": nccl_source, "runtime": cuda_runtime,
                 "runtime_source": cuda_source, "torch_built_for": torch_cuda},
    }
    return out


def probe_torch():
    """Opt-in and slow: what torch itself reports (seconds to import)."""
    try:
        import torch
        out = {"version": torch.__version__, "cuda": torch.version.cuda}
        try:
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception as e:
            out["nccl_error"] = str(e)[:200]
        return out
    except Exception as e:
        return {"error": str(e)[:200]}


def probe(sections=("gpu",), fake_path=None):
    """Run the requested sections and return one JSON-able dict; never raises."""
    t0 = time.time()
    out = {"probe_version": PROBE_VERSION}
    sections = set(sections)
    if "gpu" in sections:
        out.update(probe_gpu(fake_path))
        out.setdefault("reason", "" if out.get("gpus") else "no GPU: none found")
    if "load" in sections:
        out["host"] = probe_load()
    if "static" in sections:
        try:
            out["static"] = probe_static()
        except Exception as e:
            out["static"] = {"error": "%s: %s" % (type(e).__name__, e)}
    if "torch" in sections:
        out["torch"] = probe_torch()
    out["duration_s"] = time.time() - t0
    return out


def main(argv):
    try:
        result = probe(argv or ["gpu"])
    except BaseException as e:  # the contract is "one JSON object, always"
        result = {"probe_version": PROBE_VERSION, "gpus": [], "reason": "no GPU: probe failed: %r" % (e,)}
    sys.stdout.write(json.dumps(result, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
