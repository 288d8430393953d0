#!/usr/bin/env python3
"""End-to-end check of bisect-lab's GPU path on a real NVIDIA GPU.

Run from the repository root on the GPU machine (torch installed, bisect-lab
*not* installed, no network needed)::

    python3 benchmarks/gpu_device_check.py --out DIR [--device 0] [--lock-clocks-mhz 1200]

What it does, printing a transcript as it goes:

1. probe the GPU (model, driver, CUDA, NCCL, clocks, temperature, power, throttle
   reasons decoded, persistence, ECC, processes), in-process and through
   ``host.python`` (the SSH path), with timings;
2. start a process that allocates GPU memory with torch and keeps running, as a
   process "owned by the campaign";
3. show ``wait_idle`` sees the GPU busy and leaves the process alone when it is
   not declared as owned;
4. ``reset`` with the process declared owned: it is killed (pid + command line
   logged) and ``wait_idle`` then succeeds;
5. run short matmul loads, sample clocks / power / throttle reasons, and flag
   trials off the campaign norm (``--lock-clocks-mhz`` adds a run with SM clocks
   locked through ``nvidia-smi -lgc``, unlocked afterwards: it must be flagged
   ``clock-differs``; opt-in because it changes the machine's clock settings);
6. fingerprint cold and warm, diff two fingerprints;
7. write ``gpu_device_check.json`` and ``gpu_device_check.txt`` into ``--out``.

It never kills a process it did not start: the policy is ``kill = "campaign"``
and the only owned pids are the ones this script spawned.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _psutil_shim() -> str | None:
    """bisect_lab.hosts.local needs psutil; if the GPU box lacks it, a /proc-based stand-in
    covering the few calls it makes lets the check run without network access."""
    try:
        import psutil  # noqa: F401
        return None
    except ImportError:
        pass
    import types
    m = types.ModuleType("psutil")

    class Error(Exception):
        pass

    class NoSuchProcess(Error):
        pass

    def _stat(pid):
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError as e:
            raise NoSuchProcess(pid) from e
        f = text[text.rindex(")") + 2:].split()
        return f[0], int(f[1])

    class Process:
        def __init__(self, pid):
            self.pid = int(pid)
            state, ppid = _stat(self.pid)
            self.info = {"pid": self.pid, "ppid": ppid,
                         "status": {"Z": "zombie", "X": "dead"}.get(state, "running")}

        def cmdline(self):
            try:
                return [a for a in Path(f"/proc/{self.pid}/cmdline").read_bytes().decode(errors="replace")
                        .split("\0") if a]
            except OSError as e:
                raise NoSuchProcess(self.pid) from e

    def process_iter(attrs=None):
        for e in os.scandir("/proc"):
            if e.name.isdigit():
                try:
                    yield Process(int(e.name))
                except Error:
                    pass

    m.Error, m.NoSuchProcess, m.Process, m.process_iter = Error, NoSuchProcess, Process, process_iter
    m.STATUS_ZOMBIE, m.STATUS_DEAD = "zombie", "dead"
    sys.modules["psutil"] = m
    return "psutil not installed: using a /proc-based stand-in for bisect_lab.hosts.local"


SHIM_NOTE = _psutil_shim()

from bisect_lab import fingerprint as F  # noqa: E402
from bisect_lab.gpu import (GpuInspector, GpuSnapshot, flag_trials, lock_clocks, reset,  # noqa: E402
                            unlock_clocks, wait_idle)
from bisect_lab.hosts.local import LocalHost  # noqa: E402
from bisect_lab.model import GpuPolicy  # noqa: E402

HOLDER = r'''
import os, sys, time
import torch
dev, mb, ttl = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
x = torch.empty(mb * 1024 * 1024, dtype=torch.uint8, device="cuda:%d" % dev)
x.fill_(7)
torch.cuda.synchronize()
print("holder ready pid=%d allocated=%d MiB" % (os.getpid(), mb), flush=True)
end = time.time() + ttl          # never outlive the check, whatever happens to it
while time.time() < end:
    time.sleep(0.5)
'''

LOAD = r'''
import os, sys, time
import torch
dev, seconds, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
torch.cuda.set_device(dev)
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
print("load start", flush=True)
t0 = time.time(); k = 0
while time.time() - t0 < seconds:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    k += 20
dt = time.time() - t0
print("load done iters=%d tflops=%.1f" % (k, 2.0 * n ** 3 * k / dt / 1e12), flush=True)
'''


# --simulate: no GPU, no torch. The fake NVML file stands in for the driver and these
# stand-ins for the torch scripts register themselves in it, so the check's own logic
# can be exercised anywhere (CI, a laptop) before it is run on the real GPU.
SIM_HOLDER = r'''
import json, os, sys, time
dev, mb, ttl = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
path = os.environ["BISECT_LAB_FAKE_NVML"]
spec = json.load(open(path))
spec["gpus"][dev].setdefault("processes", []).append({"pid": os.getpid(), "used_memory_mb": mb})
json.dump(spec, open(path + ".tmp", "w")); os.replace(path + ".tmp", path)
print("holder ready pid=%d allocated=%d MiB (simulated)" % (os.getpid(), mb), flush=True)
end = time.time() + ttl
while time.time() < end:
    time.sleep(0.5)
'''

SIM_LOAD = r'''
import json, os, sys, time
dev, seconds, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
path = os.environ["BISECT_LAB_FAKE_NVML"]
def edit(fn):
    spec = json.load(open(path)); fn(spec["gpus"][dev])
    json.dump(spec, open(path + ".tmp", "w")); os.replace(path + ".tmp", path)
heavy = n >= 4096
def start(g):
    g.setdefault("processes", []).append({"pid": os.getpid(), "used_memory_mb": 3000, "utilization": 100})
    g.update(sm_clock_mhz=1755 if heavy else 1980, power_w=690.0 if heavy else 250.0, temperature_c=55,
             throttle_reasons=["sw_power_cap"] if heavy else [])
edit(start)
print("load start", flush=True)
time.sleep(seconds)
def stop(g):
    g["processes"] = [p for p in g.get("processes", []) if p["pid"] != os.getpid()]
    g.update(sm_clock_mhz=1980, power_w=120.0, temperature_c=40, throttle_reasons=[])
edit(stop)
print("load done iters=0 tflops=0 (simulated)", flush=True)
'''

SIM_GPU = {"name": "Simulated H200", "uuid": "GPU-simulated-0", "memory_used_mb": 615.0,
           "memory_total_mb": 143771.0, "temperature_c": 37, "sm_clock_mhz": 345, "sm_clock_max_mhz": 1980,
           "mem_clock_mhz": 3201, "mem_clock_max_mhz": 3201, "power_w": 79.5, "power_limit_w": 700.0,
           "throttle_reasons": ["gpu_idle"], "persistence_mode": True, "ecc_volatile_uncorrected": 0}


class Transcript:
    def __init__(self):
        self.lines: list[str] = []
        self.checks: list[dict] = []

    def __call__(self, text: str = "") -> None:
        for line in str(text).splitlines() or [""]:
            print(line, flush=True)
            self.lines.append(line)

    def section(self, title: str) -> None:
        self("")
        self(f"== {title} " + "=" * max(3, 70 - len(title)))

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))
        self.checks.append({"check": name, "ok": bool(ok), "detail": detail})
        return ok


def timed(fn, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def stats(xs):
    xs = sorted(xs)
    return {"n": len(xs), "median_ms": 1000 * statistics.median(xs),
            "p95_ms": 1000 * xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))],
            "min_ms": 1000 * xs[0], "max_ms": 1000 * xs[-1]}


def _v(x, spec=""):
    """Format a reading that NVML may not provide (None on some boards/drivers)."""
    return "?" if x is None else format(x, spec)


def describe_gpu(T, snap: GpuSnapshot, dev: int) -> None:
    g = snap.gpu(dev)
    if g is None:
        T(f"gpu{dev}: not present ({snap.reason})")
        return
    T(f"gpu{g.index}: {g.name}  uuid {g.uuid}")
    T(f"  driver {g.driver_version}, CUDA driver {g.cuda_driver_version}, probe backend {snap.backend}")
    T(f"  memory {_v(g.memory_used_mb, '.0f')} / {_v(g.memory_total_mb, '.0f')} MiB, "
      f"util {_v(g.utilization_gpu)}% (mem {_v(g.utilization_memory)}%)")
    T(f"  SM clock {_v(g.sm_clock_mhz)} / max {_v(g.sm_clock_max_mhz)} MHz, memory clock "
      f"{_v(g.mem_clock_mhz)} / max {_v(g.mem_clock_max_mhz)} MHz")
    T(f"  temperature {_v(g.temperature_c)} C, power {_v(g.power_w)} / limit {_v(g.power_limit_w)} W")
    T(f"  throttle reasons: mask {g.throttle_mask!r} -> {list(g.throttle_reasons) or ['none']}"
      f" (performance-relevant: {list(g.perf_throttle) or ['none']})")
    T(f"  persistence mode {g.persistence_mode}, ECC volatile uncorrected {g.ecc_volatile_uncorrected}")
    if g.processes is None:
        T("  compute processes: not listed by the driver")
    else:
        T(f"  compute processes: {len(g.processes)}")
        for p in g.processes:
            T(f"    {p.describe()}")


def sample_line(label, g):
    if g is None:
        return f"{label:<18} (GPU missing from snapshot)"
    return (f"{label:<18} sm {_v(g.sm_clock_mhz, '>6')} MHz  mem {_v(g.mem_clock_mhz, '>6')} MHz  "
            f"{_v(g.temperature_c, '>4')} C  {_v(g.power_w, '>7.1f')} W  util {_v(g.utilization_gpu, '>3')}%  "
            f"throttle {list(g.throttle_reasons) or ['none']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for gpu_device_check.json / .txt")
    ap.add_argument("--device", type=int, default=0, help="NVML index of the GPU to use (default 0)")
    ap.add_argument("--hold-mb", type=int, default=4096, help="GPU memory the owned process allocates")
    ap.add_argument("--load-s", type=float, default=6.0, help="seconds of matmul per load run")
    ap.add_argument("--loads", type=int, default=3, help="number of heavy matmul load runs")
    ap.add_argument("--lock-clocks-mhz", type=int, default=None,
                    help="also run one load with SM clocks locked (nvidia-smi -lgc, needs root); off by default")
    ap.add_argument("--fingerprints", type=int, default=20, help="warm fingerprints to time")
    ap.add_argument("--simulate", action="store_true",
                    help="no GPU needed: fake NVML file + CPU stand-ins for the torch scripts (dry run)")
    args = ap.parse_args(argv)

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.simulate:
        fake = out / "fake_nvml.json"
        fake.write_text(json.dumps({"driver_version": "570.124.06", "cuda_driver_version": "12.8",
                                    "gpus": [dict(SIM_GPU, index=i) for i in range(args.device + 1)]}))
        os.environ["BISECT_LAB_FAKE_NVML"] = str(fake)   # seen in-process and by host.python children
    T = Transcript()
    result: dict = {"started": time.time(), "argv": sys.argv, "device": args.device}
    host = LocalHost(cache_dir=out / "cache")
    dev = args.device
    policy = GpuPolicy(devices=(dev,), idle_timeout_s=60.0, kill="campaign")
    insp = GpuInspector(host)
    remote_insp = GpuInspector(host, in_process=False)
    spawned = []          # every process this script started: the only ones it may kill
    locked = False
    (out / "holder.py").write_text(SIM_HOLDER if args.simulate else HOLDER)
    (out / "load.py").write_text(SIM_LOAD if args.simulate else LOAD)
    result["simulated"] = bool(args.simulate)
    py = sys.executable

    def spawn(script, *a):
        p = host.spawn(shlex.join([py, str(out / script), *map(str, a)]))
        spawned.append(p)
        return p

    try:
        T.section("environment" + (" (SIMULATED: fake NVML, no GPU)" if args.simulate else ""))
        T(f"python {sys.version.split()[0]} at {py}; repo {REPO}; pid {os.getpid()}")
        if SHIM_NOTE:
            T(SHIM_NOTE)
        raw = remote_insp.raw("gpu", "load", "static")
        st = raw.get("static", {})
        T(f"host {raw.get('host', {}).get('name')}, load {[round(x, 2) for x in raw.get('host', {}).get('loadavg') or []]}, "
          f"CPU {st.get('cpu', {}).get('model')} x{st.get('cpu', {}).get('count')}")
        T(f"packages: {json.dumps(st.get('packages', {}), sort_keys=True)}")
        T(f"CUDA/NCCL from wheels: {json.dumps(st.get('cuda', {}), sort_keys=True)}")
        t = time.perf_counter()
        traw = remote_insp.raw("torch")
        torch_s = time.perf_counter() - t
        T(f"torch (opt-in probe section, {torch_s:.2f} s): {json.dumps(traw.get('torch'), sort_keys=True)}")
        result["probe_raw"] = raw
        result["torch_probe"] = {"seconds": torch_s, **(traw.get("torch") or {})}

        T.section("1. probe")
        snap0 = insp.probe()
        result["snapshot_initial"] = snap0.to_dict()
        if not T.check("probe found a GPU", snap0.has_gpu, snap0.reason or f"{len(snap0.gpus)} GPU(s)"):
            return finish(T, result, out)
        if snap0.gpu(dev) is None:
            T.check(f"GPU {dev} present", False, f"indices {[g.index for g in snap0.gpus]}")
            return finish(T, result, out)
        describe_gpu(T, snap0, dev)
        rsnap = remote_insp.probe()
        same = [g.name for g in rsnap.gpus] == [g.name for g in snap0.gpus]
        T.check("probe through host.python (the SSH path) agrees", same and rsnap.backend == snap0.backend,
                f"backend {rsnap.backend}")
        t_in = stats(timed(insp.probe, 20))
        t_remote = stats(timed(remote_insp.probe, 5))
        T(f"probe cost: in-process median {t_in['median_ms']:.1f} ms (p95 {t_in['p95_ms']:.1f}); "
          f"via host.python median {t_remote['median_ms']:.1f} ms (p95 {t_remote['p95_ms']:.1f})")
        result["timing_probe"] = {"in_process": t_in, "host_python": t_remote}

        T.section("2. GPU idle before we start (nothing owned, nothing killed)")
        r = wait_idle(host, policy, owned_pids=(), log=T, inspector=insp, poll_s=0.5)
        if not T.check("GPU idle at start", r.ok, r.reason):
            T("The GPU is in use by processes this script did not start; it will not touch them. Stopping.")
            return finish(T, result, out)
        baseline = r.snapshot.gpu(dev).memory_used_mb or 0.0
        T(f"baseline memory used with no process: {baseline:.0f} MiB")

        T.section("3. start a process that holds GPU memory (owned by the 'campaign')")
        holder = spawn("holder.py", dev, args.hold_mb, 900)
        T(f"spawned pid {holder.pid}: {py} {out / 'holder.py'} {dev} {args.hold_mb} 900")
        deadline = time.monotonic() + 180
        seen, mem_seen, mem_since = None, None, None
        while time.monotonic() < deadline and holder.poll() is None:
            s = insp.probe()
            g = s.gpu(dev)
            if g.memory_used_mb is not None and g.memory_used_mb >= baseline + 0.8 * args.hold_mb:
                mem_seen = s
                mem_since = mem_since or time.monotonic()
                if any(p.owned_by(frozenset({holder.pid})) for p in (g.processes or ())):
                    seen = s
                    break
                if time.monotonic() - mem_since > 10:      # memory there for 10 s, pid never listed
                    break
            time.sleep(0.5)
        if holder.poll() is not None:
            o, e = holder.output()
            T.check("holder started", False, f"exited {holder.poll()}: {(e or o).strip()[-500:]}")
            return finish(T, result, out)
        if seen is None:
            s = mem_seen or insp.probe()
            g = s.gpu(dev)
            T.check("holder visible on the GPU with its pid", False,
                    f"memory used {g.memory_used_mb} MiB; NVML lists "
                    + ("; ".join(p.describe() for p in (g.processes or ())) or "no processes")
                    + " - pids of another pid namespace (container)? Ownership by pid cannot work here;"
                      " wait_idle can only wait (memory threshold), never kill.")
            result["snapshot_holding"] = s.to_dict()
        else:
            g = seen.gpu(dev)
            T.check("holder visible on the GPU with its pid", True,
                    f"{g.memory_used_mb:.0f} MiB used; " + "; ".join(p.describe() for p in g.processes))
            result["snapshot_holding"] = seen.to_dict()

        T.section("4. wait_idle sees it busy (holder not declared as owned: must survive)")
        p_short = GpuPolicy(devices=(dev,), idle_timeout_s=5.0, kill="campaign")
        r = wait_idle(host, p_short, owned_pids=(), log=T, inspector=insp, poll_s=0.5)
        T(f"status {r.status} after {r.waited_s:.1f} s: {r.reason}")
        T.check("wait_idle reports the busy GPU (gpu-not-idle)",
                r.status == "timeout" and r.trial_status is not None
                and ("holder.py" in r.reason or seen is None), r.status)
        time.sleep(0.3)
        T.check("a process not declared owned is not killed", holder.poll() is None and not r.killed)
        result["wait_busy"] = r.to_dict()

        T.section("5. reset with the holder owned: kill (pid + cmdline logged), then idle")
        t = time.monotonic()
        r = reset(host, policy, owned_pids=[holder.pid], log=T, inspector=insp, poll_s=0.25)
        T(f"status {r.status} after {r.waited_s:.2f} s ({r.polls} probes): {r.reason}")
        killed = [k.pid for k in r.killed]
        T.check("reset killed the owned process", bool(killed) and holder.wait(10) is not None,
                f"killed {[(k.pid, k.cmdline) for k in r.killed]}")
        if holder.poll() is None:
            T("the holder is still running (not killable by pid here): stopping it through its own handle")
            holder.kill_tree()
            r = wait_idle(host, policy, owned_pids=(), log=T, inspector=insp, poll_s=0.25)
        T.check("wait_idle succeeds after the kill", r.ok,
                f"memory {r.snapshot.gpu(dev).memory_used_mb:.0f} MiB, {time.monotonic() - t:.2f} s to idle")
        result["reset"] = r.to_dict()

        T.section("6. throttle state before/after matmul loads, trial flags")
        trials: dict[str, list[GpuSnapshot]] = {}
        samples_out: dict[str, list[dict]] = {}

        def load_run(name, n, seconds):
            before = wait_idle(host, policy, owned_pids=[p.pid for p in spawned], log=T, inspector=insp,
                               poll_s=0.25).snapshot
            T(sample_line(f"{name} before", before.gpu(dev)))
            proc = spawn("load.py", dev, seconds, n)
            mid, samples = None, []
            t0 = time.monotonic()
            while proc.poll() is None and time.monotonic() - t0 < seconds + 120:
                s = insp.probe()
                gg = s.gpu(dev)
                if gg is not None and gg.utilization_gpu:       # the kernel loop is running
                    samples.append(s)
                time.sleep(0.25)
            after = insp.probe()
            o, e = proc.output()
            T(f"{name}: {(o.strip().splitlines() or ['?'])[-1]} {('stderr: ' + e.strip()[-300:]) if proc.poll() else ''}")
            if samples:
                mid = samples[len(samples) * 3 // 4]      # late in the run: clocks have settled
                for i in sorted({0, len(samples) // 2, len(samples) - 1}):
                    T(sample_line(f"{name} load#{i}", samples[i].gpu(dev)))
            T(sample_line(f"{name} after", after.gpu(dev)))
            trials[name] = {"before": before, "load": mid, "after": after}
            samples_out[name] = [x.gpu(dev).to_dict() for x in samples]
            return samples

        for i in range(args.loads):
            load_run(f"heavy-{i}", 8192, args.load_s)
        load_run("light", 1024, args.load_s)
        if args.lock_clocks_mhz:
            lp = GpuPolicy(devices=(dev,), lock_clocks_mhz=args.lock_clocks_mhz)
            try:
                locked = lock_clocks(host, lp, log=T)
                load_run(f"locked-{args.lock_clocks_mhz}", 8192, args.load_s)
            except Exception as e:
                T.check("clock lock", False, str(e))
            finally:
                if locked:
                    unlock_clocks(host, lp, log=T)
                    locked = False
        fl = flag_trials(trials)
        for phase in ("before", "load", "after"):
            norm = fl.norm.get((host.name, dev, phase), {})
            T(f"campaign norm, {phase:<6}: SM clock {norm.get('sm_clock_mhz')} MHz (non-idle readings), "
              f"max {norm.get('sm_clock_max_mhz')} MHz, shared throttle reasons "
              f"{list(norm.get('throttle', ())) or ['none']}")
        for k in trials:
            T(f"  {k:<16} flags {list(fl.flags[k]) or ['-']}  {'; '.join(fl.details[k])}")
        if args.lock_clocks_mhz:
            key = f"locked-{args.lock_clocks_mhz}"
            if key in fl.flags:
                T.check("the clock-locked run is flagged clock-differs", "clock-differs" in fl.flags[key])
        heavy_mid = [v["load"] for k, v in trials.items() if k.startswith("heavy") and v["load"] is not None]
        T.check("clocks/power/throttle sampled under load", bool(heavy_mid),
                f"{len(heavy_mid)} mid-load snapshots")
        result["flags"] = {"flags": {k: list(v) for k, v in fl.flags.items()},
                           "details": {k: list(v) for k, v in fl.details.items()},
                           "norm": {f"{h}:gpu{i}:{ph}": v for (h, i, ph), v in fl.norm.items()}}
        result["load_samples"] = samples_out

        T.section("7. fingerprints: cost and diff")
        cache = F.FingerprintCache()
        idle_snap = wait_idle(host, policy, owned_pids=[p.pid for p in spawned], log=T, inspector=insp,
                              poll_s=0.25).snapshot
        common = dict(tree_hash="device-check-tree", patch_hashes={"oea-topk": "1" * 12, "mla": "2" * 12})
        fa = F.collect(host, env={"NCCL_PROTO": "Simple"}, gpu=idle_snap, cache=cache, **common)
        T(f"cold fingerprint: {fa.meta['duration_s'] * 1000:.1f} ms ({fa.meta['host_calls']} host.python call), "
          f"id {fa.id[:16]}, stable id {fa.stable_id[:16]}")
        warm_local = [F.collect(host, env={"NCCL_PROTO": "Simple"}, cache=cache, **common).meta["duration_s"]
                      for _ in range(args.fingerprints)]
        rcache = F.FingerprintCache()
        rc = F.collect(host, env={}, cache=rcache, inspector=remote_insp, **common)
        warm_remote = [F.collect(host, env={}, cache=rcache, inspector=remote_insp, **common).meta["duration_s"]
                       for _ in range(max(5, args.fingerprints // 4))]
        wl, wr = stats(warm_local), stats(warm_remote)
        T(f"warm fingerprint, local in-process (probes the GPU): median {wl['median_ms']:.1f} ms, "
          f"p95 {wl['p95_ms']:.1f} ms (n={wl['n']})")
        T(f"via host.python (SSH path): cold {rc.meta['duration_s'] * 1000:.1f} ms, warm median "
          f"{wr['median_ms']:.1f} ms, p95 {wr['p95_ms']:.1f} ms (n={wr['n']})")
        T.check("warm fingerprint well under a second", wl["p95_ms"] < 500 and wr["p95_ms"] < 1000)
        loaded = trials.get("heavy-0", {})
        fb = F.collect(host, env={"NCCL_PROTO": "LL", "HF_TOKEN": "hf_" + "x" * 30},
                       gpu=loaded.get("load") or loaded.get("after"), gpu_after=loaded.get("after"), cache=cache,
                       tree_hash="device-check-tree", patch_hashes={"oea-topk": "1" * 12})
        changes = F.diff(fa, fb)
        T(f"diff idle fingerprint -> fingerprint under load ({len(changes)} changes):")
        for c in changes:
            T(f"  {c}")
        T.check("diff names clocks, env and patches", any(".clocks.sm" in c.path for c in changes)
                and any(c.path == "env.NCCL_PROTO" for c in changes)
                and any(c.path.startswith("tree.patches") for c in changes))
        T.check("secret redacted", "x" * 30 not in fb.to_json())
        result["fingerprints"] = {"a": fa.to_dict(), "b": fb.to_dict(), "diff": [str(c) for c in changes],
                                  "timing": {"cold_ms": fa.meta["duration_s"] * 1000, "warm_local": wl,
                                             "cold_host_python_ms": rc.meta["duration_s"] * 1000,
                                             "warm_host_python": wr}}
    except Exception:
        T("UNEXPECTED ERROR:")
        T(traceback.format_exc())
        T.check("no unexpected error", False)
    finally:
        if locked:
            unlock_clocks(host, GpuPolicy(devices=(dev,), lock_clocks_mhz=args.lock_clocks_mhz), log=T)
        for p in spawned:           # only our own processes
            if p.poll() is None:
                T(f"cleanup: killing our own pid {p.pid}")
                p.kill_tree()
    return finish(T, result, out)


def finish(T: Transcript, result: dict, out: Path) -> int:
    T.section("summary")
    ok = bool(T.checks) and all(c["ok"] for c in T.checks)
    for c in T.checks:
        T(f"{'PASS' if c['ok'] else 'FAIL'}  {c['check']}")
    T(f"overall: {'PASS' if ok else 'FAIL'}")
    result.update(checks=T.checks, ok=ok, finished=time.time())
    (out / "gpu_device_check.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    (out / "gpu_device_check.txt").write_text("\n".join(T.lines) + "\n")
    print(f"wrote {out / 'gpu_device_check.json'} and {out / 'gpu_device_check.txt'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
