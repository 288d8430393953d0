"""Benchmarks never outlive bisect-lab for long: the backstop ends them when bisect-lab dies
(locally) or past their timeout plus a grace (everywhere), and --resume ends what a killed run of its
campaign left behind. Real CLI subprocesses killed with SIGKILL, real sshd."""
import os
import random
import signal
import subprocess
import sys
import time

import psutil
import pytest

from bisect_lab.hosts.base import BACKSTOP_GRACE_S, CAMPAIGN_VAR
from test_cli_ssh import ssh_toml
from toyexp import make_toy


def _sleeps(mark):
    """Live `sleep N.<mark>` processes."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["status"] != psutil.STATUS_ZOMBIE and cmd[:1] == ["sleep"] and cmd[-1].endswith(f".{mark}"):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.fixture
def mark():
    """A unique suffix for the benchmark's sleeps; whatever a failed test leaves of them is killed."""
    m = random.randrange(10**8, 10**9)
    yield m
    for p in _sleeps(m):
        p.kill()


def _wait(pred, timeout_s, step=0.1):
    deadline = time.monotonic() + timeout_s
    while not (value := pred()) and time.monotonic() < deadline:
        time.sleep(step)
    return value


def _start(tmp_path, exp, *args, env=None):
    cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache",
           str(tmp_path / "cache"), "run", str(exp), "--patches", "all", "--repeat", "1", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _hang(m):
    # the benchmark, a worker in its process group and one that left its session (setsid)
    return f"sleep 301.{m} & setsid sleep 302.{m} & sleep 303.{m}; wait"


def _kill_mid_benchmark(tmp_path, exp, m, n, env=None):
    proc = _start(tmp_path, exp, env=env)
    assert _wait(lambda: len(_sleeps(m)) == n, 60), proc.stderr.read() if proc.poll() is not None else "no sleeps"
    proc.kill()                  # SIGKILL: bisect-lab gets no chance to clean up
    proc.wait()
    return time.monotonic()


def test_a_benchmark_dies_with_a_killed_bisect_lab(tmp_path, mark):
    m = mark
    timeout_s = 3
    exp = make_toy(tmp_path, bench_command=_hang(m), timeout_s=timeout_s)
    killed_at = _kill_mid_benchmark(tmp_path, exp, m, 3)
    # bisect-lab's own deadline died with it; the backstop must not need it
    assert _wait(lambda: not _sleeps(m), timeout_s + BACKSTOP_GRACE_S + 2), _sleeps(m)
    assert time.monotonic() - killed_at < timeout_s      # locally it goes with bisect-lab, not at the deadline


def test_a_remote_benchmark_dies_by_its_deadline_after_bisect_lab_is_killed(tmp_path, sshd, mark):
    m = mark
    timeout_s = 2
    exp = make_toy(tmp_path, bench_command=_hang(m), timeout_s=timeout_s,
                   extra_toml=ssh_toml(sshd, tmp_path / "remote"))
    _kill_mid_benchmark(tmp_path, exp, m, 3, env=sshd.env())
    started = min(p.create_time() for p in _sleeps(m))
    # a dropped connection must not end it (it may be reopened); its deadline must
    assert _wait(lambda: not _sleeps(m), timeout_s + BACKSTOP_GRACE_S + 4), _sleeps(m)
    assert time.time() - started <= timeout_s + BACKSTOP_GRACE_S + 3


def _leave_leftovers(tmp_path, m, extra_toml="", env=None):
    """A run killed mid-benchmark whose first try hangs and leaves a daemon that dropped the run
    token and left the session, out of the backstop's reach (the resumed try measures)."""
    once = tmp_path / "hung-once"
    exp = make_toy(tmp_path, timeout_s=30, extra_toml=extra_toml, bench_command=(
        f"if [ -e {once} ]; then python3 bench.py; else touch {once}; "
        f"env -u BISECT_LAB_RUN_ID setsid sleep 304.{m} & sleep 305.{m}; fi"))
    _kill_mid_benchmark(tmp_path, exp, m, 2, env=env)
    return exp


def _resume(tmp_path, exp, campaign, env=None):
    return subprocess.run([sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache",
                           str(tmp_path / "cache"), "run", str(exp), "--patches", "all", "--repeat", "1",
                           "--resume", campaign], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_resume_over_ssh_ends_what_a_dropped_run_of_its_campaign_left_running(tmp_path, sshd, mark):
    m = mark
    exp = _leave_leftovers(tmp_path, m, ssh_toml(sshd, tmp_path / "remote"), env=sshd.env())
    # Over SSH the hung benchmark waits for its deadline (30 s): both are still there.
    time.sleep(1.5)
    left = sorted(_sleeps(m), key=lambda q: q.cmdline())
    assert [q.cmdline() for q in left] == [["sleep", f"304.{m}"], ["sleep", f"305.{m}"]]
    campaign = left[0].environ()[CAMPAIGN_VAR]
    p = _resume(tmp_path, exp, campaign, env=sshd.env())
    assert p.returncode == 0, p.stderr
    said = " ".join(p.stderr.split())
    for q, n in zip(left, (304, 305)):
        assert f"killed pid {q.pid}, left running by an earlier run of campaign {campaign}: sleep {n}.{m}" \
            in said, p.stderr
    assert _wait(lambda: not _sleeps(m), 5)


def test_resume_ends_what_a_killed_run_of_its_campaign_left_running(tmp_path, mark):
    m = mark
    exp = _leave_leftovers(tmp_path, m)
    (daemon,) = _wait(lambda: (lambda s: s if len(s) == 1 else None)(_sleeps(m)), 10)
    assert daemon.cmdline() == ["sleep", f"304.{m}"]      # the hung one went with bisect-lab
    campaign = daemon.environ()[CAMPAIGN_VAR]
    # Bystanders: another campaign's process and one without any campaign are never touched.
    other = subprocess.Popen(["sleep", f"306.{m}"], env={**os.environ, CAMPAIGN_VAR: campaign + "-other"})
    plain = subprocess.Popen(["sleep", f"307.{m}"])
    try:
        p = _resume(tmp_path, exp, campaign)
        assert p.returncode == 0, p.stderr
        assert f"killed pid {daemon.pid}, left running by an earlier run of campaign {campaign}: sleep 304.{m}" \
            in " ".join(p.stderr.split()), p.stderr
        assert _wait(lambda: not daemon.is_running() or daemon.status() == psutil.STATUS_ZOMBIE, 5)
        assert other.poll() is None and plain.poll() is None
    finally:
        for b in (other, plain):
            b.kill()
            b.wait()


@pytest.fixture(params=["local", "ssh"])
def host(request, tmp_path):
    from bisect_lab.hosts import LocalHost
    from test_hosts import ssh_host
    h = (LocalHost(cache_dir=tmp_path / "cache") if request.param == "local"
         else ssh_host(request.getfixturevalue("sshd"), workdir=str(tmp_path / "remote")))
    yield h
    h.close()


def test_the_backstop_ends_a_spawned_command_past_its_deadline_and_stays_out_of_its_tree(host, mark):
    m = mark
    t0 = time.monotonic()
    p = host.spawn(f"echo started; setsid sleep 308.{m} & sleep 309.{m}", timeout_s=0.5)
    assert _wait(lambda: len(_sleeps(m)) == 2, 10)
    tree = p.descendants()
    assert {s.pid for s in _sleeps(m)} <= set(tree)
    watchdogs = [q for q in psutil.process_iter(["cmdline"]) if "bisect-lab-backstop" in (q.info["cmdline"] or [])
                 and f"BISECT_LAB_RUN_ID={p.run_id}" in q.info["cmdline"]]
    assert len(watchdogs) == 1 and watchdogs[0].pid not in tree    # beside the command, not in its tree
    # nobody calls kill_tree: the deadline (0.5 s + grace, whole seconds) ends it all
    assert p.wait(0.5 + BACKSTOP_GRACE_S + 5) == 128 + signal.SIGKILL
    assert _wait(lambda: not _sleeps(m), 3)
    assert 0.5 + BACKSTOP_GRACE_S <= time.monotonic() - t0 <= 0.5 + BACKSTOP_GRACE_S + 4
    out, err = p.output()
    assert out == "started\n" and "bisect-lab backstop: its deadline (7 s) passed; killing pids" in err, err
    p.close()
