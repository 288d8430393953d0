"""GPU hygiene against the fake NVML file, with real processes "holding" fake GPUs.

Only NVML is faked (BISECT_LAB_FAKE_NVML); kills, /proc, the host and the probe
script (in-process and through ``host.python``) are real.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bisect_lab.gpu import (CLOCK_DIFFERS, THROTTLED, GpuError, GpuInspector, GpuSnapshot, decode_throttle,
                            flag_trials, lock_clocks, probe_source, reset, wait_idle)
from bisect_lab.gpu.probe_script import encode_throttle, proc_info
from bisect_lab.hosts import LocalHost
from bisect_lab.model import GpuPolicy, TrialStatus

H200 = {"name": "NVIDIA H200", "memory_used_mb": 615.0, "memory_total_mb": 143771.0,
        "temperature_c": 37, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "power_w": 79.5,
        "power_limit_w": 700.0, "throttle_reasons": 0}


def gpu(**kw):
    return {**H200, **kw}


@pytest.fixture
def host():
    return LocalHost()


@pytest.fixture
def fake(tmp_path):
    """Write a fake NVML file; returns (path, write(spec))."""
    path = tmp_path / "nvml.json"

    def write(gpus=None, **top):
        spec = {"driver_version": "570.124.06", "cuda_driver_version": "12.8", **top}
        if gpus is not None:
            spec["gpus"] = gpus
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, path)   # atomic: a probe never reads half a file
        return path
    return path, write


@pytest.fixture
def procs():
    """Start real long-running processes; kill whatever is left at the end."""
    started: list[subprocess.Popen] = []

    def start(*argv):
        p = subprocess.Popen(list(argv) or ["sleep", "120"])
        started.append(p)
        return p
    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def alive(p: subprocess.Popen) -> bool:
    time.sleep(0.05)
    return p.poll() is None


def policy(**kw):
    kw.setdefault("idle_timeout_s", 1.0)
    return GpuPolicy(**kw)


def test_idle_gpu_passes_at_once(host, fake):
    path, write = fake
    write([gpu(throttle_reasons=["gpu_idle"])])
    r = wait_idle(host, policy(), inspector=GpuInspector(host, fake_nvml=path), poll_s=0.05)
    assert r.status == "ok" and r.ok and r.trial_status is None
    assert r.polls == 1 and r.snapshot.gpus[0].name == "NVIDIA H200"


def test_busy_gpu_times_out_as_gpu_not_idle(host, fake, procs):
    path, write = fake
    other = procs()
    write([gpu(processes=[{"pid": other.pid, "used_memory_mb": 40000, "utilization": 97}])])
    t0 = time.monotonic()
    r = wait_idle(host, policy(idle_timeout_s=0.6), inspector=GpuInspector(host, fake_nvml=path), poll_s=0.1)
    assert 0.5 <= time.monotonic() - t0 < 5
    assert r.status == "timeout" and not r.ok
    assert r.trial_status is TrialStatus.GPU_NOT_IDLE
    assert f"pid {other.pid}" in r.reason and "sleep 120" in r.reason
    assert "utilization 97%" in r.reason and "memory used 40615 MiB" in r.reason
    assert "not started by this campaign" in r.reason
    assert alive(other) and r.killed == ()


def test_kills_only_owned_processes(host, fake, procs):
    path, write = fake
    ours, theirs = procs(), procs()
    write([gpu(processes=[{"pid": ours.pid, "used_memory_mb": 30000}]),
           gpu(processes=[{"pid": theirs.pid, "used_memory_mb": 30000}])])
    logs: list[str] = []
    insp = GpuInspector(host, fake_nvml=path)
    r = wait_idle(host, policy(), owned_pids=[ours.pid], log=logs.append, inspector=insp, poll_s=0.05)
    ours.wait(5)
    assert ours.returncode == -9                       # kill -9 through the host
    assert alive(theirs), "a process the campaign did not start was killed"
    assert [k.pid for k in r.killed] == [ours.pid]
    assert any(f"killed pid {ours.pid}" in line and "sleep 120" in line for line in logs)
    # GPU 1 stays busy with the foreign process ...
    assert r.status == "timeout" and "gpu1" in r.reason and "gpu0" not in r.reason
    # ... and a trial that only uses GPU 0 may now run.
    r0 = wait_idle(host, policy(devices=(0,)), inspector=insp, poll_s=0.05)
    assert r0.status == "ok"


def test_workers_of_an_owned_process_are_owned(host, fake):
    """The GPU is held by a worker (child) of the pid the campaign spawned."""
    path, write = fake
    bench = host.spawn("sleep 120 & wait")        # bash stays the parent of the worker
    try:
        deadline = time.monotonic() + 5
        while len(bench.descendants()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        worker = [p for p in bench.descendants() if p != bench.pid][0]
        write([gpu(processes=[{"pid": worker, "used_memory_mb": 50000}])])
        r = wait_idle(host, policy(idle_timeout_s=5), owned_pids=[bench.pid],
                      inspector=GpuInspector(host, fake_nvml=path), poll_s=0.05)
        assert r.status == "ok", r.reason
        assert [k.pid for k in r.killed] == [worker]
    finally:
        bench.kill_tree()


def test_kill_all_is_opt_in_and_logged(host, fake, procs):
    path, write = fake
    theirs = procs(sys.executable, "-c", "import time; time.sleep(120)", "--marker", "foreign-job")
    write([gpu(processes=[{"pid": theirs.pid, "used_memory_mb": 20000}])])
    logs: list[str] = []
    r = reset(host, policy(kill="all-gpu-processes", idle_timeout_s=5), log=logs.append,
              inspector=GpuInspector(host, fake_nvml=path), poll_s=0.05)
    theirs.wait(5)
    assert theirs.returncode == -9
    assert r.status == "ok" and [k.pid for k in r.killed] == [theirs.pid]
    line = next(l for l in logs if f"killed pid {theirs.pid}" in l)
    assert "--marker foreign-job" in line and "all-gpu-processes" in line


def test_unknown_kill_policy_is_an_error(host, fake):
    path, write = fake
    write([gpu()])
    with pytest.raises(GpuError, match="kill"):
        wait_idle(host, policy(kill="everything"), inspector=GpuInspector(host, fake_nvml=path))


def test_missing_device_is_a_config_error(host, fake):
    path, write = fake
    write([gpu()])
    with pytest.raises(GpuError, match=r"GPU \[3\] not present"):
        wait_idle(host, policy(devices=(0, 3)), inspector=GpuInspector(host, fake_nvml=path))


def test_temperature_ceiling_waits_for_cooling(host, fake):
    path, write = fake
    write([gpu(temperature_c=88)])
    insp = GpuInspector(host, fake_nvml=path)
    r = wait_idle(host, policy(max_temperature_c=80, idle_timeout_s=0.3), inspector=insp, poll_s=0.05)
    assert r.status == "timeout" and "temperature 88 C > 80 C" in r.reason
    # The GPU cools down while we wait: the wait succeeds once it is under the ceiling.
    timer = threading.Timer(0.4, lambda: write([gpu(temperature_c=61)]))
    timer.start()
    try:
        r = wait_idle(host, policy(max_temperature_c=80, idle_timeout_s=5), inspector=insp, poll_s=0.05)
    finally:
        timer.cancel()
    assert r.status == "ok" and r.waited_s >= 0.3 and r.snapshot.gpus[0].temperature_c == 61


def test_settle_time_is_honoured(host, fake):
    path, write = fake
    write([gpu()])
    r = wait_idle(host, policy(settle_s=0.4, idle_timeout_s=5), inspector=GpuInspector(host, fake_nvml=path),
                  poll_s=0.1)
    assert r.status == "ok" and r.waited_s >= 0.4 and r.polls >= 2


def test_memory_threshold_without_visible_processes(host, fake):
    """A container may not see the pids: memory in use alone means busy."""
    path, write = fake
    write([gpu(memory_used_mb=9000)])
    r = wait_idle(host, policy(idle_timeout_s=0.2), inspector=GpuInspector(host, fake_nvml=path), poll_s=0.05)
    assert r.status == "timeout" and "memory used 9000 MiB >= 1024 MiB" in r.reason
    r = wait_idle(host, policy(idle_timeout_s=0.2, idle_memory_mb=10000),
                  inspector=GpuInspector(host, fake_nvml=path), poll_s=0.05)
    assert r.status == "ok"


@pytest.mark.parametrize("in_process", [True, False])
def test_no_gpu_host_is_recorded_not_failed(host, fake, in_process):
    path, write = fake
    write(error="NVML_ERROR_DRIVER_NOT_LOADED")
    insp = GpuInspector(host, fake_nvml=path, in_process=in_process)
    snap = insp.probe()
    assert snap.gpus == () and not snap.has_gpu
    assert snap.reason == "no GPU: NVML_ERROR_DRIVER_NOT_LOADED"
    r = wait_idle(host, policy(), inspector=insp)
    assert r.ok and r.status == "no-gpu" and r.reason.startswith("no GPU")


def test_real_probe_never_fails(host):
    """Whatever this machine has (GPU or not), the real probe answers with JSON."""
    snap = GpuInspector(host, in_process=False).probe()
    assert snap.has_gpu or snap.reason.startswith("no GPU:")


def test_probe_is_self_contained(tmp_path, fake, procs):
    """The script runs with nothing of bisect_lab importable (as on a fresh remote host)."""
    path, write = fake
    p = procs()
    write([gpu(processes=[{"pid": p.pid, "used_memory_mb": 1000}])])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["BISECT_LAB_FAKE_NVML"] = str(path)
    src = probe_source()
    assert "bisect_lab" not in "".join(l for l in src.splitlines() if l.lstrip().startswith(("import", "from")))
    r = subprocess.run([sys.executable, "-I", "-c", src, "gpu", "load"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"] == "fake" and out["gpus"][0]["processes"][0]["pid"] == p.pid
    assert out["gpus"][0]["processes"][0]["cmdline"] == "sleep 120"
    assert out["host"]["loadavg"] is not None


def test_probe_same_across_host_boundary(host, fake, procs):
    path, write = fake
    p = procs()
    write([gpu(throttle_reasons=["sw_power_cap", "hw_thermal"], processes=[{"pid": p.pid, "used_memory_mb": 1}])])
    a = GpuInspector(host, fake_nvml=path, in_process=True).probe()
    b = GpuInspector(host, fake_nvml=path, in_process=False).probe()
    assert a.gpus == b.gpus and a.driver_version == b.driver_version == "570.124.06"
    assert a.gpus[0].processes[0].cmdline == "sleep 120"
    # round trip through dicts (what the store keeps)
    assert GpuSnapshot.from_dict(b.to_dict()) == b


def test_throttle_decoding():
    assert decode_throttle(0) == []
    assert decode_throttle(0x1) == ["gpu_idle"]
    assert decode_throttle(0x4 | 0x8 | 0x20 | 0x40 | 0x80) == [
        "sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "power_brake"]
    assert decode_throttle(0x1 | 0x10000) == ["gpu_idle", "bit_0x10000"]
    assert encode_throttle(["gpu_idle", "sw_power_cap"]) == 0x5
    assert encode_throttle("0x0000000000000044") == 0x44


def test_perf_throttle_distinguishes_idle_from_slowdown(host, fake):
    path, write = fake
    write([gpu(throttle_reasons=0x1), gpu(throttle_reasons=0x1 | 0x4), gpu(throttle_reasons=0x2)])
    g0, g1, g2 = GpuInspector(host, fake_nvml=path).probe().gpus
    assert g0.idle_state and g0.perf_throttle == ()
    assert g1.perf_throttle == ("sw_power_cap",) and g1.throttle_mask == 5
    assert g2.throttle_reasons == ("applications_clocks_setting",) and g2.perf_throttle == ()


def _snap(sm, throttle=0, sm_max=1980, temp=37, host_name="gpu1"):
    raw = {"backend": "fake", "gpus": [{**H200, "throttle_reasons": None, "index": 0, "sm_clock_mhz": sm, "sm_clock_max_mhz": sm_max,
                                         "temperature_c": temp, "throttle_mask": throttle}]}
    return GpuSnapshot.from_probe(host_name, raw, taken_at=0.0)


def test_flags_off_norm_trials():
    # Shaped like the H200 readings in shared/data: the first "before" is an idle
    # GPU parked at 345 MHz (gpu_idle), every "after" runs at 1980 MHz.
    trials = {0: [_snap(345, throttle=0x1, temp=35), _snap(1980)]}
    for t in range(1, 8):
        trials[t] = [_snap(1980), _snap(1980, temp=38)]
    trials[8] = [_snap(1980), _snap(1410, throttle=0x4, temp=83)]    # power capped under load
    trials[9] = [_snap(1980, sm_max=1410), _snap(1410, sm_max=1410)]  # someone locked clocks
    trials[10] = [None, _snap(1965)]                                   # within tolerance, one probe lost
    res = flag_trials(trials)
    assert res.flags[0] == ()                       # idle parking is not "clock-differs"
    assert all(res.flags[t] == () for t in range(1, 8))
    assert res.flags[8] == (CLOCK_DIFFERS, THROTTLED)
    assert res.flags[9] == (CLOCK_DIFFERS,)
    assert res.flags[10] == ()
    assert res.flagged() == [8, 9]
    assert any("sw_power_cap" in d and "1410" in d for d in res.details[8])
    assert res.norm[("gpu1", 0, 1)]["sm_clock_mhz"] == 1980
    assert res.norm[("gpu1", 0, 0)]["sm_clock_mhz"] == 1980     # the idle 345 MHz reading is left out


def test_flags_when_throttling_is_the_norm():
    """A power-capped box: the odd unthrottled-but-slow trial stands out, not every trial."""
    trials = {t: [_snap(1755, throttle=0x4)] for t in range(6)}
    trials[6] = [_snap(1755, throttle=0x4 | 0x40, temp=90)]
    res = flag_trials(trials)
    assert res.norm[("gpu1", 0, 0)]["throttle"] == ("sw_power_cap",)
    assert res.flagged() == [6] and res.flags[6] == (THROTTLED,)
    assert "hw_thermal" in res.details[6][0]


def test_flags_compare_like_with_like():
    """Under load every run is power capped at 1755 MHz and back at 1980 MHz just after:
    that is the norm of each phase, not a difference between trials. Phases may be named."""
    trials = {t: {"load": _snap(1755, throttle=0x4), "after": _snap(1980)} for t in range(5)}
    trials["cool"] = {"load": _snap(1980), "after": _snap(1980)}
    res = flag_trials(trials)
    assert res.flagged() == ["cool"] and res.flags["cool"] == (CLOCK_DIFFERS,)
    assert res.details["cool"] == ("gpu1 gpu0 load: SM clock 1980 MHz vs norm 1755 MHz",)
    assert res.norm[("gpu1", 0, "after")]["throttle"] == ()


def test_flags_nothing_without_gpus():
    empty = GpuSnapshot("h", 0.0, (), "no GPU: none")
    assert flag_trials({1: [empty], 2: [empty, None]}).flagged() == []


def test_clock_lock_refusal_is_a_clear_error(host, tmp_path, monkeypatch):
    assert lock_clocks(host, GpuPolicy()) is False            # nothing asked, nothing run
    # A PATH holding only bash: nvidia-smi is "command not found" (exit 127), as on a GPU-less host.
    (tmp_path / "bash").symlink_to(shutil.which("bash"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GpuError, match=r"lock_clocks_mhz = 1500: nvidia-smi -i 0 -lgc 1500,1500 failed"):
        lock_clocks(host, GpuPolicy(lock_clocks_mhz=1500, devices=(0,)))


# --------------------------------------------------------------------------- across an SSH host
pytest_plugins = ["sshd_fixture"]


@pytest.fixture
def ssh(request):
    from bisect_lab.hosts import SSHHost
    sshd = request.getfixturevalue("sshd")        # skipped where no sshd can be started
    h = SSHHost(sshd.target, port=sshd.port, key=sshd.key_path, known_hosts=sshd.known_hosts_path,
                connect_timeout_s=5, python_exe=sys.executable)
    yield h
    h.close()


@pytest.mark.ssh
def test_idle_wait_and_kill_through_ssh(ssh, fake, procs):
    """The probe crosses the SSH boundary as source text; kills go through the SSH host."""
    path, write = fake
    ours, theirs = procs(), procs()
    write([gpu(processes=[{"pid": ours.pid, "used_memory_mb": 30000},
                          {"pid": theirs.pid, "used_memory_mb": 30000}])])
    insp = GpuInspector(ssh, fake_nvml=path)
    assert insp.in_process is False
    logs: list[str] = []
    r = wait_idle(ssh, policy(idle_timeout_s=3), owned_pids=[ours.pid], log=logs.append, inspector=insp,
                  poll_s=0.1)
    ours.wait(5)
    assert ours.returncode == -9 and alive(theirs)
    assert r.status == "timeout" and f"pid {theirs.pid}" in r.reason and f"pid {ours.pid}" not in r.reason
    assert any(f"killed pid {ours.pid}" in l for l in logs)


def test_broken_probe_is_a_host_error(tmp_path):
    """An interpreter that cannot run on the host is a host problem, not "no GPU"."""
    from bisect_lab.errors import HostError
    broken = tmp_path / "python3"
    broken.write_text("#!/bin/sh\necho 'python3: error while loading shared libraries: libpython3.11.so' >&2\n"
                      "exit 127\n")
    broken.chmod(0o755)
    with pytest.raises(HostError, match="GPU probe failed on local: .*libpython3.11.so"):
        GpuInspector(LocalHost(python_exe=str(broken)), in_process=False).probe()
    # garbage instead of JSON
    broken.write_text("#!/bin/sh\necho 'Welcome to the GPU box'\n")
    with pytest.raises(HostError, match="printed no JSON"):
        GpuInspector(LocalHost(python_exe=str(broken)), in_process=False).probe()


def test_command_line_of_a_process_that_just_started_is_read(procs):
    """Right after Popen returns, the child may still be inside exec(): /proc/<pid>/cmdline reads
    empty for a moment (in up to half of such reads here), and a GPU process killed then was logged as
    "<cmdline not visible>" (a CI run of test_kill_all_is_opt_in_and_logged). The probe reads again."""
    for _ in range(150):
        p = procs(sys.executable, "-c", "import time; time.sleep(30)", "--marker", "fresh-exec")
        assert "--marker fresh-exec" in (proc_info(p.pid)["cmdline"] or "")
        p.kill()
