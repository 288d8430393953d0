"""Env verification with real process trees: workers started with a clean environment must be caught."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bisect_lab.envcheck import EnvReport, EnvSampler, EnvVarCheck
from bisect_lab.hosts.local import LocalHost

WORKER = textwrap.dedent("""
    import os, sys, time
    stop, ready = sys.argv[1], sys.argv[2]
    with open(ready + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(ready + ".tmp", ready)
    deadline = time.time() + 60
    while not os.path.exists(stop) and time.time() < deadline:
        time.sleep(0.02)
""")

# A "benchmark" that launches three workers the ways real stacks do:
#   w1: subprocess with env={}           (clean environment)
#   w2: env -i python worker.py          (clean environment via env(1))
#   w3: inherits, plus NCCL_ALGO=Tree    (propagates; sets a var the arm unsets)
# With CLEAN=0 every worker inherits the parent's environment unchanged.
PARENT = textwrap.dedent("""
    import os, subprocess, sys
    worker, stop, ready, clean = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    py = sys.executable
    if clean:
        ws = [subprocess.Popen([py, worker, stop, ready + "/w1"], env={}),
              subprocess.Popen(["env", "-i", py, worker, stop, ready + "/w2"]),
              subprocess.Popen([py, worker, stop, ready + "/w3"], env={**os.environ, "NCCL_ALGO": "Tree"})]
    else:
        ws = [subprocess.Popen([py, worker, stop, ready + "/w%d" % i]) for i in (1, 2, 3)]
    for w in ws:
        w.wait()
""")


def run_benchmark(tmp_path: Path, *, clean: bool, use_psutil: bool, expected, env, sample_host=None):
    """Spawn the benchmark through LocalHost, sample it like the runner does, return (report, worker pids)."""
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "parent.py").write_text(PARENT)
    ready = tmp_path / "ready"
    ready.mkdir()
    stop = tmp_path / "stop"
    host = LocalHost()
    # "; true" keeps bash alive as a wrapper process above the benchmark, as in real trials.
    cmd = (f"{sys.executable} {tmp_path / 'parent.py'} {tmp_path / 'worker.py'} {stop} {ready} "
           f"{1 if clean else 0}; true")
    proc = host.spawn(cmd, env=env)
    sampler = EnvSampler(sample_host or host, expected, use_psutil=use_psutil)
    try:
        deadline = time.time() + 30
        while len(list(ready.glob("w?"))) < 3:
            assert time.time() < deadline, proc.output()
            sampler.sample(proc.descendants())
            time.sleep(0.05)
        sampler.sample(proc.descendants())
        pids = {p.name: int(p.read_text()) for p in ready.glob("w?")}
    finally:
        stop.write_text("")
        rc = proc.wait(30)
        if rc is None:
            proc.kill_tree()
    assert rc == 0, proc.output()
    return sampler.report(), pids


@pytest.mark.parametrize("use_psutil", [True, False], ids=["psutil", "host.python"])
def test_clean_worker_environment_is_caught(tmp_path, monkeypatch, use_psutil):
    monkeypatch.setenv("NCCL_ALGO", "Ring")          # the arm unsets it: must not be inherited
    expected = {"NCCL_PROTO": "LL", "NCCL_ALGO": None}
    report, w = run_benchmark(tmp_path, clean=True, use_psutil=use_psutil, expected=expected,
                              env=expected)
    proto, algo = report.get("NCCL_PROTO"), report.get("NCCL_ALGO")
    # bash wrapper + parent + 3 workers
    assert proto.total == 5 and algo.total == 5, report.processes
    assert proto.matched == 3                         # bash, parent, w3
    assert set(proto.missing_pids) == {w["w1"], w["w2"]}
    assert algo.matched == 4 and algo.missing_pids == (w["w3"],)
    assert not report.ok and not proto.ok
    assert report.summary() == "env: 0 of 2 vars reached all 5 processes"
    cmd_of = dict(report.processes)
    assert "worker.py" in cmd_of[w["w1"]] and "worker.py" in cmd_of[w["w2"]]
    assert cmd_of[w["w2"]].split()[0] == sys.executable   # env -i exec'ed: the final image counts
    warn = [x for x in report.warnings if x.startswith("NCCL_PROTO=LL")]
    assert warn and warn[0].startswith("NCCL_PROTO=LL reached 3 of 5 processes: missing in pid ")
    assert f"pid {w['w1']} (" in warn[0] and f"pid {w['w2']} (" in warn[0]
    assert any(x.startswith("NCCL_ALGO (unset) held in 4 of 5 processes: NCCL_ALGO=Tree in pid "
                            f"{w['w3']} (") for x in report.warnings), report.warnings


@pytest.mark.parametrize("use_psutil", [True, False], ids=["psutil", "host.python"])
def test_everything_propagates(tmp_path, monkeypatch, use_psutil):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    expected = {"NCCL_PROTO": "LL", "NCCL_ALGO": None, "NCCL_P2P_LEVEL": "SYS"}
    report, _ = run_benchmark(tmp_path, clean=False, use_psutil=use_psutil, expected=expected,
                              env=expected)
    assert report.ok, report.warnings
    assert report.warnings == ()
    assert report.summary() == "env: 3 of 3 vars reached all 5 processes"
    assert [(e.var, e.matched, e.total) for e in report.entries] == [
        ("NCCL_ALGO", 5, 5), ("NCCL_P2P_LEVEL", 5, 5), ("NCCL_PROTO", 5, 5)]


def test_arm_value_not_applied_is_caught(tmp_path):
    # The arm expects NCCL_PROTO=LL but the benchmark was launched with Simple.
    report, _ = run_benchmark(tmp_path, clean=False, use_psutil=True, expected={"NCCL_PROTO": "LL"},
                              env={"NCCL_PROTO": "Simple"})
    check = report.get("NCCL_PROTO")
    assert check.matched == 0 and check.total == 5
    assert "NCCL_PROTO=Simple in pid" in report.warnings[0]
    assert "and 0 more" not in report.warnings[0]


@pytest.mark.parametrize("use_psutil", [True, False], ids=["psutil", "host.python"])
def test_exec_after_sampling_is_read_again(tmp_path, use_psutil):
    # A pid sampled before it exec'ed shows its parent's environment; after the
    # exec (here env -u dropping the var) the new image must be what counts.
    env = {**os.environ, "NCCL_PROTO": "LL"}
    p = subprocess.Popen(["bash", "-c", "read line; exec env -u NCCL_PROTO sleep 30"],
                         stdin=subprocess.PIPE, env=env, text=True)
    sampler = EnvSampler(LocalHost(), {"NCCL_PROTO": "LL"}, use_psutil=use_psutil)
    try:
        time.sleep(0.2)
        assert sampler.sample([p.pid]) == 1
        assert sampler.report().get("NCCL_PROTO").ok
        assert sampler.sample([p.pid]) == 0           # unchanged: not read again
        p.stdin.write("go\n")
        p.stdin.flush()
        deadline = time.time() + 10
        while dict(sampler.report().processes).get(p.pid) != "sleep 30":
            assert time.time() < deadline
            sampler.sample([p.pid])
            time.sleep(0.02)
        check = sampler.report().get("NCCL_PROTO")
        assert (check.matched, check.total, check.missing_pids) == (0, 1, (p.pid,))
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("use_psutil", [True, False], ids=["psutil", "host.python"])
def test_vanished_processes_are_ignored(use_psutil):
    gone = subprocess.Popen(["true"])
    gone.wait()
    sampler = EnvSampler(LocalHost(), {"NCCL_PROTO": "LL"}, use_psutil=use_psutil)
    assert sampler.sample([gone.pid]) == 0
    report = sampler.report()
    assert report.get("NCCL_PROTO").total == 0
    assert not report.ok
    assert report.warnings[0].startswith("NCCL_PROTO=LL could not be checked")


def test_failed_probe_does_not_raise(tmp_path):
    host = LocalHost(python_exe=str(tmp_path / "no-such-python"))
    sampler = EnvSampler(host, {"X": "1"}, use_psutil=False)
    assert sampler.sample([os.getpid()]) == 0
    assert sampler.report().failed_samples == 1


def test_secret_values_are_redacted_in_warnings():
    env = {**os.environ, "HF_TOKEN": "hf_realsecret"}
    p = subprocess.Popen(["sleep", "30"], env=env)
    try:
        time.sleep(0.1)
        sampler = EnvSampler(LocalHost(), {"HF_TOKEN": "hf_other"})
        sampler.sample([p.pid])
        report = sampler.report()
    finally:
        p.kill()
        p.wait()
    assert "hf_realsecret" not in json.dumps(report.to_dict())
    assert "HF_TOKEN=<redacted> in pid" in report.warnings[0]


def test_report_json_round_trip():
    report = EnvReport(
        entries=(EnvVarCheck("NCCL_ALGO", None, 9, 9, ()), EnvVarCheck("NCCL_PROTO", "LL", 8, 9, (1234,))),
        warnings=("NCCL_PROTO=LL reached 8 of 9 processes: missing in pid 1234 (python worker.py)",),
        processes=((1230, "bash -c bench"), (1234, "python worker.py")), samples=12, failed_samples=1)
    d = json.loads(json.dumps(report.to_dict()))
    assert EnvReport.from_dict(d) == report
    assert d["entries"][1] == {"var": "NCCL_PROTO", "expected": "LL", "matched": 8, "total": 9,
                               "missing_pids": [1234]}
    with pytest.raises(Exception):
        report.samples = 3                            # frozen


def test_no_expected_vars_is_trivially_ok():
    sampler = EnvSampler(LocalHost(), {})
    assert sampler.sample([os.getpid()]) == 0
    assert sampler.report().ok and sampler.report().warnings == ()


# --------------------------------------------------------------------------- over SSH
# The same clean-worker benchmark on an SSHHost against the test sshd: the probe
# path (host.python reading /proc) is what runs on a remote GPU box.
try:
    from sshd_fixture import sshd  # noqa: F401  (session fixture: a real sshd on localhost)
    from bisect_lab.hosts.ssh import SSHHost
except ImportError:                   # hosts/ssh.py not there yet
    SSHHost = None


@pytest.mark.ssh
@pytest.mark.skipif(SSHHost is None, reason="bisect_lab.hosts.ssh not available")
def test_clean_worker_environment_read_over_ssh(tmp_path, monkeypatch, sshd):
    # The benchmark runs locally (the sshd is on localhost, so pids are shared);
    # only the sampling goes through SSHHost.python, i.e. the remote code path.
    host = SSHHost(sshd.target, port=sshd.port, key=sshd.key_path, known_hosts=sshd.known_hosts_path,
                   python_exe=sys.executable)
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    expected = {"NCCL_PROTO": "LL", "NCCL_ALGO": None}
    with host:
        report, w = run_benchmark(tmp_path, clean=True, use_psutil=False, expected=expected,
                                  env=expected, sample_host=host)
    proto, algo = report.get("NCCL_PROTO"), report.get("NCCL_ALGO")
    assert (proto.matched, proto.total) == (3, 5), report.processes
    assert set(proto.missing_pids) == {w["w1"], w["w2"]}
    assert algo.missing_pids == (w["w3"],)
    assert report.failed_samples == 0
