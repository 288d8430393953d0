"""Trials on a real local Slurm (`[cluster] engine = "slurm"`): jobs submitted with sbatch through
submitit, each holding one node; no mock of Slurm. CI starts it with .ci/slurm-setup.sh (two
logical nodes, so that two jobs report two node names)."""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from slurm_fixture import slurm  # noqa: F401  (the fixture)
from test_cli_bisect import repo_with_history
from test_cli_run import campaign_rows, cli, one_line_error
from toyexp import make_toy

CLUSTER = """
[cluster]
engine = "slurm"
max_jobs = {max_jobs}
time_limit_min = 10
{more}
"""


def only_campaign(tmp_path) -> str:
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        (cid,), = db.execute("SELECT id FROM campaigns").fetchall()
    return cid


def queue_empties_of(name: str, within_s: float = 30.0) -> bool:
    """Does no job whose name holds ``name`` stay in the queue past ``within_s``? Told to stop or
    cancelled, a job leaves within seconds; on a loaded box not always before the driver's exit."""
    deadline = time.monotonic() + within_s
    while name in subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def slurm_toy(tmp_path, *, max_jobs=2, more="", **kw):
    return make_toy(tmp_path, extra_toml=CLUSTER.format(max_jobs=max_jobs, more=more), **kw)


def test_cluster_table_errors_are_one_line_exit_2(tmp_path):
    exp = slurm_toy(tmp_path, more="max_job = 3")
    assert "did you mean 'max_jobs'?" in one_line_error(cli(tmp_path, "run", exp), 2)
    exp.write_text(exp.read_text().replace("max_job = 3", 'exclusive = "yes"'))
    assert "[cluster.exclusive]: expected bool" in one_line_error(cli(tmp_path, "run", exp), 2)
    exp.write_text(exp.read_text().replace('engine = "slurm"', 'engine = "pbs"'))
    assert "[cluster.engine]" in one_line_error(cli(tmp_path, "run", exp), 2)


@pytest.mark.slurm
def test_run_measures_on_two_jobs_at_once(tmp_path, slurm):
    exp = slurm_toy(tmp_path)
    # Not --json: the progress lines (job states, queue waits) are the human output's.
    p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "all-minus slow", "--repeat", "1", timeout=180)
    assert p.returncode == 0, p.stderr
    cid = only_campaign(tmp_path)
    rows = campaign_rows(tmp_path, cid, "trial, arm, host, status")
    # `run` gives every job slot (a host) every arm, `--repeat` times each
    assert sorted(r[1] for r in rows) == ["all"] * 2 + ["all-minus slow"] * 2
    assert len(rows) == 4 and len({r[0] for r in rows}) == 4          # every trial stored once
    assert {r[3] for r in rows} == {"ok"}
    hosts = {r[2] for r in rows}
    assert hosts <= set(slurm), hosts                                  # the node that ran it
    if len(slurm) >= 2:
        assert len(hosts) == 2, hosts                                  # both jobs measured
    assert "slurm: job" in p.stderr and "running on" in p.stderr and "queue" in p.stderr, p.stderr
    # the jobs were told to stop: none is left in the queue
    assert queue_empties_of(f"bisect-lab-{cid}")


@pytest.mark.slurm
def test_attribute_and_bisect_on_slurm(tmp_path, slurm):
    # Two jobs at once: the strategies ask one arm (or commit) per free job
    exp = slurm_toy(tmp_path / "a", max_jobs=2, effects={"slow": 0.7, "noop": 1.0})
    p = cli(tmp_path, "attribute", exp, "--good", "none", "--bad", "all", "--json", timeout=240)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["culprits"] == ["slow"], res["culprits"]
    hosts = {r[0] for r in campaign_rows(tmp_path, res["campaign"], "host")}
    repo, good, shas, bexp = repo_with_history(tmp_path / "b", n=6, culprit=4)
    bexp.write_text(bexp.read_text() + CLUSTER.format(max_jobs=2, more=""))
    p = cli(tmp_path, "bisect", bexp, "--good", good, "--bad", "main", "--json", timeout=240)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "culprit" and res["commit"] == shas[4], res
    hosts |= {r[0] for r in campaign_rows(tmp_path, res["campaign"], "host")}
    assert hosts <= set(slurm), hosts
    if len(slurm) >= 2:
        assert len(hosts) == 2, hosts                  # both jobs measured


def run_until_a_trial_runs(tmp_path, *, repeat: int, bench: str):
    """``run`` with one Slurm job, in the background; returns ``(proc, job_id)`` once the job has
    taken a trial (``job_id`` None when none started within 90 s)."""
    exp = slurm_toy(tmp_path, max_jobs=1, bench_command=bench)
    proc = subprocess.Popen([sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache",
                             str(tmp_path / "cache"), "run", str(exp), "--patches", "all", "--repeat", str(repeat)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jobs = tmp_path / "res" / "slurm-jobs"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for slot in jobs.glob("*/slot0.json"):
            if list((slot.parent / "slot0-0" / "running").glob("*.json")):
                return proc, json.loads(slot.read_text())["job_id"]
        time.sleep(0.05)
    return proc, None


@pytest.mark.slurm
def test_a_job_cancelled_mid_trial_has_its_trial_retried_on_another_job(tmp_path, slurm):
    proc, killed = run_until_a_trial_runs(tmp_path, repeat=2, bench="sleep 1.5; python3 bench.py")
    assert killed, "no trial started"
    subprocess.run(["scancel", killed], check=True)
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, err
    rows = campaign_rows(tmp_path, only_campaign(tmp_path), "trial, status, host, error")
    assert [r[1] for r in rows].count("ok") == 2           # the lost trial was measured again
    lost = [r for r in rows if r[1] != "ok"]
    # Killed by the job's SIGTERM (or lost with the job): stored as what it was, naming the job
    assert len(lost) == 1 and lost[0][1] in ("killed", "host-error") and f"job {killed}" in lost[0][3], rows
    node = lost[0][2]
    assert node in slurm
    assert f"warning: slurm node {node}:" in err and "retried on another job" in err, err


@pytest.mark.slurm
def test_resume_after_kill_9_reattaches_to_the_running_job(tmp_path, slurm):
    """The driver dies (kill -9) while its job measures: `run --resume ID` finds the job still
    running, reattaches to it instead of submitting another, and stores every trial once."""
    proc, job = run_until_a_trial_runs(tmp_path, repeat=3, bench="sleep 1; python3 bench.py")
    proc.kill()
    proc.communicate(timeout=30)
    assert job, "no trial started"
    cid = only_campaign(tmp_path)
    assert job in subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    p = cli(tmp_path, "run", "--resume", cid, timeout=180)
    assert p.returncode == 0, p.stderr
    assert f"slurm: job {job} reattached" in p.stderr, p.stderr
    assert "queued (" not in p.stderr.replace(f"job {job} reattached", ""), p.stderr   # no new job
    rows = campaign_rows(tmp_path, cid, "trial, status, host")
    assert [r[1] for r in rows] == ["ok"] * len(rows) and len({r[0] for r in rows}) == len(rows), rows
    assert sum(1 for r in rows) >= 3 and {r[2] for r in rows} <= set(slurm), rows
    assert queue_empties_of(f"bisect-lab-{cid}")


@pytest.mark.slurm
def test_unknown_partition_is_exit_2_before_submitting(tmp_path, slurm):
    exp = slurm_toy(tmp_path, more='partition = "debgu"')
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    line = one_line_error(cli(tmp_path, "run", exp), 2)
    assert "partition 'debgu' is not a partition of this Slurm" in line, line
    parts = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True).stdout.split()
    if "debug" in parts:
        assert "did you mean 'debug'?" in line
    assert not (tmp_path / "res" / "slurm-jobs").exists()
    assert subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout == before


def test_without_sbatch_is_one_line_naming_it(tmp_path):
    exp = slurm_toy(tmp_path)
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git", "python3", "bash"):          # what the rest of the command may call
        if shutil.which(tool):
            os.symlink(shutil.which(tool), bare / tool)
    line = one_line_error(cli(tmp_path, "run", exp, env={"PATH": str(bare)}), 2)
    assert "sbatch is not on PATH" in line, line


@pytest.mark.slurm
def test_jobs_pending_past_the_limit_stop_as_inconclusive(tmp_path, slurm):
    # Every node held by another job: ours can only wait in the queue.
    holders = [subprocess.run(["sbatch", "--parsable", "-w", n, "--exclusive", "-o", "/dev/null", "--wrap",
                               "sleep 120"], capture_output=True, text=True, check=True).stdout.strip()
               for n in slurm]
    try:
        exp = slurm_toy(tmp_path, max_jobs=1, more="pending_limit_min = 0.1")
        line = one_line_error(cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1"), 3)
        assert "pending for more than 0.1 min (pending_limit_min)" in line and "--resume" in line, line
    finally:
        subprocess.run(["scancel", *holders])
    assert queue_empties_of("bisect-lab-")            # our pending job was cancelled


@pytest.mark.slurm
def test_sweep_on_two_jobs_finds_the_planted_night(tmp_path, slurm):
    """A nightly sweep whose experiment has `[cluster]`: every night's trials run in two Slurm jobs at
    once (the node is the trial's host), and the planted night alerts through the real command line."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "perf"))
    from toytarget import Toy
    toy = Toy(tmp_path / "t", cv=0.01)
    toy.experiment.write_text(toy.experiment.read_text() + CLUSTER.format(max_jobs=2, more=""))
    sweep = toy.root / "nightly.toml"
    sweep.write_text('name = "nightly"\nexperiment = "toy.toml"\nref = "main"\nrepeat = 2\n'
                     '[matrix]\narms = ["all", "none"]\n[detect]\nmin_effect = 0.05\npermutations = 99\n')
    statuses, hosts = [], set()
    for night in range(3):
        if night == 2:
            toy.commit(0.8, "planted: 20% slower")
        elif night:
            toy.touch("night 1: docs")
        p = cli(tmp_path, "sweep", sweep, "--json", timeout=240)
        assert p.returncode == (1 if night == 2 else 0), p.stderr
        res = json.loads(p.stdout)
        statuses.append({s["arm"]: s["status"] for s in res["series"]})
        hosts |= {r[0] for r in campaign_rows(tmp_path, res["campaign"], "host")}
    assert statuses[0] == {"all": "no-history", "none": "no-history"}, statuses
    assert set(statuses[1].values()) == {"ok"}, statuses
    assert statuses[2] == {"all": "regression", "none": "regression"}, statuses
    assert hosts <= set(slurm), hosts
    if len(slurm) >= 2:
        assert len(hosts) == 2, hosts                  # both jobs measured
    assert queue_empties_of("bisect-lab-")            # every night's jobs were told to stop


@pytest.mark.slurm
def test_serving_sessions_run_inside_the_slurm_jobs(tmp_path, slurm):
    """`[server]` with `[cluster]`: each session (the server launched on the node, a warmup and the
    counted readings, the stop) runs whole inside a Slurm job; the driver stores its readings and
    its session row, with the node as host, and two jobs measure at once."""
    from test_serving_sessions import results, served_toy
    # a generous readiness bound: two jobs start Python servers at once on a loaded 2-core box
    exp = served_toy(tmp_path, server="ready_timeout_s = 60", effects={"slow": 0.7, "noop": 1.0},
                     more=CLUSTER.format(max_jobs=2, more=""))
    p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "all-minus slow", "--repeat", "1", "--json",
            timeout=240)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    r = results(tmp_path)
    sessions, trials = r.sessions(), r.trials()
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        tails = dict(db.execute("SELECT session, log_tail FROM sessions WHERE status != 'ok'").fetchall())
    table = sessions.to_string() + f"\nfailed sessions' log tails: {tails}\nstderr: {p.stderr[-3000:]}"
    # every job slot measured every arm once: 4 sessions of 1 warmup + 2 counted readings each
    assert len(sessions) == 4 and set(sessions.status) == {"ok"} and set(sessions.readings) == {2}, table
    assert sessions.groupby("arm").size().to_dict() == {"all": 2, "all-minus slow": 2}, table
    assert set(sessions.host) <= set(slurm) and (len(slurm) < 2 or sessions.host.nunique() == 2), table
    assert len(trials) == 12 and sorted(trials.trial) == list(range(12))        # numbered by the driver
    assert set(trials.session) == set(sessions.session) and (trials.tag == "warmup").sum() == 4
    assert (sessions.ready_s > 0).all()
    arms = {a["arm"]: a for a in res["arms"]}
    assert arms["all"]["median"] == pytest.approx(70, rel=0.05)
    assert arms["all-minus slow"]["median"] == pytest.approx(100, rel=0.05)
    assert "ready in" in p.stderr, p.stderr                         # the node's session lines, relayed
    assert queue_empties_of("bisect-lab-")


@pytest.mark.slurm
def test_ctrl_c_cancels_the_jobs_and_leaves_a_resumable_campaign(tmp_path, slurm):
    """Ctrl-C of the driver while its job measures: the job is cancelled (none of the campaign's
    jobs is left in the queue), the exit is 130 with the resume hint, and `--resume` finishes the
    campaign on a new job with every trial stored once."""
    proc, job = run_until_a_trial_runs(tmp_path, repeat=3, bench="sleep 2; python3 bench.py")
    assert job, "no trial started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    cid = only_campaign(tmp_path)
    assert f"continue with --resume {cid}" in err, err
    assert f"slurm: cancelled job {job}" in err, err
    # scancel is asynchronous: the job leaves within seconds
    assert queue_empties_of(f"bisect-lab-{cid}"), "the interrupted campaign's job is still in the queue"
    p = cli(tmp_path, "run", "--resume", cid, timeout=180)
    assert p.returncode == 0, p.stderr
    rows = campaign_rows(tmp_path, cid, "trial, status")
    assert [r[1] for r in rows].count("ok") == 3 and len({r[0] for r in rows}) == len(rows), rows


@pytest.mark.slurm
def test_a_node_that_keeps_failing_is_dropped_and_its_trials_measured_elsewhere(tmp_path, slurm):
    """Every job on the first node is ended by Slurm mid-trial (the benchmark scancels its own job
    there): each lost trial is retried on a new job, the node is named in a warning and, after
    two failed jobs, dropped: the job that follows excludes it and measures everything."""
    if len(slurm) < 2:
        pytest.skip("needs two Slurm nodes")
    bad, good = slurm[0], slurm[1]
    bench = (f"if [ $SLURMD_NODENAME = {bad} ]; then scancel $SLURM_JOB_ID; sleep 30; fi; "
             "python3 bench.py")
    # Pinned to the bad node, so the first two jobs surely land there; once it is dropped the
    # pin is lifted for it (a dropped node is excluded, whatever the pin says).
    exp = slurm_toy(tmp_path, max_jobs=1, bench_command=bench, more=f'nodelist = ["{bad}"]')
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1", timeout=240)
    assert p.returncode == 0, p.stderr
    assert f"warning: slurm node {bad}:" in p.stderr and "retried on another job" in p.stderr, p.stderr
    assert f"warning: slurm node {bad} dropped after 2 failed jobs" in p.stderr, p.stderr
    rows = campaign_rows(tmp_path, only_campaign(tmp_path), "status, host")
    ok_hosts = {h for s, h in rows if s == "ok"}
    assert ok_hosts == {good}, rows
    assert sum(1 for s, h in rows if s != "ok" and h == bad) == 2, rows
