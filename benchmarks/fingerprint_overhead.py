#!/usr/bin/env python3
"""Per-trial fingerprint cost, cold (empty cache) vs warm (static facts cached), side by side.

    python3 benchmarks/fingerprint_overhead.py [--n 30] [--fake-gpus 8] [--ssh user@host] [--json]

Scenarios:
  local, in-process       LocalHost; NVML and load read in this process (the default locally)
  local, gpu given        as the runner calls it: the GPU snapshot from wait_idle is passed in
  host.python             the probe sent through host.python, as on an SSH host (one round trip)
  ssh (with --ssh)        a real SSHHost

Without an NVIDIA GPU, ``--fake-gpus N`` (default 8 when no GPU is found) feeds the probe
the fake-NVML file so the GPU part of the work is still done and serialised.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bisect_lab import fingerprint as F  # noqa: E402
from bisect_lab.gpu import GpuInspector  # noqa: E402
from bisect_lab.hosts.local import LocalHost  # noqa: E402


def fake_file(n: int) -> str:
    gpu = {"name": "NVIDIA H200", "memory_used_mb": 615.0, "memory_total_mb": 143771.0, "temperature_c": 37,
           "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "power_w": 120.0, "power_limit_w": 700.0,
           "throttle_reasons": 0}
    fd, path = tempfile.mkstemp(prefix="bl-fake-nvml-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"driver_version": "570.124.06", "cuda_driver_version": "12.8",
                   "gpus": [dict(gpu, index=i, uuid=f"GPU-fake-{i}") for i in range(n)]}, f)
    return path


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def measure(host, insp, n, *, gpu_given):
    env = {f"NCCL_VAR_{i}": str(i) for i in range(20)} | {"HF_TOKEN": "hf_" + "x" * 30}
    kw = dict(tree_hash="0" * 40, patch_hashes={f"patch-{i}": f"{i:064x}" for i in range(5)}, env=env,
              inspector=insp)
    snap = insp.probe() if gpu_given else None
    cold, warm, calls = [], [], set()
    for _ in range(n):
        f = F.collect(host, cache=F.FingerprintCache(), gpu=snap, **kw)
        cold.append(f.meta["duration_s"])
    cache = F.FingerprintCache()
    F.collect(host, cache=cache, gpu=snap, **kw)
    for _ in range(n):
        f = F.collect(host, cache=cache, gpu=snap, **kw)
        warm.append(f.meta["duration_s"])
        calls.add(f.meta["host_calls"])
    return {"cold_median_ms": 1000 * statistics.median(cold), "cold_p95_ms": 1000 * pct(cold, 0.95),
            "warm_median_ms": 1000 * statistics.median(warm), "warm_p95_ms": 1000 * pct(warm, 0.95),
            "warm_host_calls": sorted(calls), "n": n, "bytes": len(f.to_json())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=30, help="fingerprints per cell")
    ap.add_argument("--fake-gpus", type=int, default=None, help="use a fake-NVML file with N GPUs")
    ap.add_argument("--ssh", default=None, help="also measure through a real SSHHost (user@host)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args(argv)

    host = LocalHost()
    fake = None
    if args.fake_gpus is None and not GpuInspector(host).probe().has_gpu:
        args.fake_gpus = 8
    if args.fake_gpus:
        fake = fake_file(args.fake_gpus)
    rows = {}
    try:
        rows["local, in-process"] = measure(host, GpuInspector(host, fake_nvml=fake), args.n, gpu_given=False)
        rows["local, gpu given"] = measure(host, GpuInspector(host, fake_nvml=fake), args.n, gpu_given=True)
        rows["host.python"] = measure(host, GpuInspector(host, fake_nvml=fake, in_process=False),
                                      max(5, args.n // 3), gpu_given=False)
        if args.ssh:
            from bisect_lab.hosts import SSHHost
            with SSHHost(args.ssh) as ssh:
                rows[f"ssh {args.ssh}"] = measure(ssh, GpuInspector(ssh), max(5, args.n // 3), gpu_given=False)
    finally:
        if fake:
            os.unlink(fake)
    gpus = f"fake NVML, {args.fake_gpus} GPUs" if fake else "real NVML"
    if args.json:
        print(json.dumps({"gpus": gpus, "rows": rows}, sort_keys=True))
        return 0
    print(f"fingerprint cost per trial ({gpus}; python {sys.version.split()[0]})")
    print(f"{'scenario':<22} {'cold median':>12} {'cold p95':>10} {'warm median':>12} {'warm p95':>10} "
          f"{'warm calls':>10} {'n':>4} {'bytes':>7}")
    for name, r in rows.items():
        print(f"{name:<22} {r['cold_median_ms']:>9.1f} ms {r['cold_p95_ms']:>7.1f} ms "
              f"{r['warm_median_ms']:>9.1f} ms {r['warm_p95_ms']:>7.1f} ms "
              f"{','.join(map(str, r['warm_host_calls'])):>10} {r['n']:>4} {r['bytes']:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
