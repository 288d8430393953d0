"""The Slurm side of a fleet: preflight, submission through submitit, job states, node health
and progress (layer 5).

``sacct`` needs an accounting database that many clusters (and CI) do not run; submitit then
reads every job as UNKNOWN. Job states here come from ``squeue`` (pending, running, or gone)
and from the job's own files, never from ``sacct``.
"""
from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import UsageError

Log = Callable[[str], None]
QUEUED, RUNNING, GONE = "queued", "running", "gone"
QUEUED_OR_UNKNOWN = "unknown"     # squeue did not answer: asked again at the next poll
_QUEUED_STATES = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED"}
_RUNNING_STATES = {"RUNNING"}
NODE_FAILURES_TO_DROP = 2
IDLE_TIMEOUT_S = 300.0


def _slurm(argv: list[str], timeout_s: float = 30) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(argv, 255, "", str(e))


def preflight(cluster, *, log: Log) -> None:
    """Ask Slurm, before anything is submitted, whether the jobs could run at all: the client
    commands exist, the partition, account and pinned nodes are known. One line, exit 2, if not."""
    for tool in ("sbatch", "squeue", "scancel", "sinfo"):
        if shutil.which(tool) is None:
            raise UsageError(f'[cluster] engine = "slurm": {tool} is not on PATH (install the Slurm client '
                             f"commands, or run where they are)")
    res = _slurm(["sinfo", "-h", "-o", "%R"])
    if res.returncode != 0:
        raise UsageError(f"[cluster] engine = \"slurm\": sinfo failed: {_one_line(res)}")
    partitions = sorted(set(res.stdout.split()))
    if cluster.partition is not None and cluster.partition not in partitions:
        raise UsageError(f"[cluster] partition {cluster.partition!r} is not a partition of this Slurm"
                         f"{_did_you_mean(cluster.partition, partitions)} (sinfo lists: {', '.join(partitions)})")
    if cluster.nodelist:
        res = _slurm(["sinfo", "-h", "-N", "-o", "%N"])
        nodes = sorted(set(res.stdout.split()))
        for n in cluster.nodelist:
            if res.returncode == 0 and n not in nodes:
                raise UsageError(f"[cluster] nodelist: {n!r} is not a node of this Slurm"
                                 f"{_did_you_mean(n, nodes)}")
    if cluster.account is not None:
        res = _slurm(["sacctmgr", "-n", "-P", "show", "account", "format=account"]) \
            if shutil.which("sacctmgr") else None
        if res is None or res.returncode != 0:
            log(f"[cluster] account {cluster.account!r} not checked: this Slurm has no accounting "
                "database to ask (sacctmgr)")
        else:
            accounts = sorted(set(res.stdout.split()))
            if cluster.account not in accounts:
                raise UsageError(f"[cluster] account {cluster.account!r} is not an account of this Slurm"
                                 f"{_did_you_mean(cluster.account, accounts)}")


def _did_you_mean(word: str, known: list[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _one_line(res: subprocess.CompletedProcess) -> str:
    lines = [l.strip() for l in (res.stderr or res.stdout or "").splitlines() if l.strip()]
    return lines[-1][:300] if lines else f"exit status {res.returncode}"


def job_state(job_id: str) -> str:
    """QUEUED, RUNNING or GONE (ended, cancelled, or unknown to squeue), asked of squeue."""
    res = _slurm(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"])
    if res.returncode != 0:
        # "Invalid job id" is a job squeue forgot; any other failure is asked again next poll.
        return GONE if "invalid job id" in (res.stderr or "").lower() else QUEUED_OR_UNKNOWN
    state = res.stdout.strip().split("\n")[0].strip().upper()
    if state in _QUEUED_STATES:
        return QUEUED
    if state in _RUNNING_STATES:
        return RUNNING
    return GONE



class SlurmPool:
    """What the jobs of one session share: the cluster settings, the job folder, submission,
    the failure count of each node, and the queued / running / done counts shown as progress."""

    def __init__(self, experiment, results_dir: Path, *, cache_dir: str | None, log: Log):
        self.exp = experiment
        self.cluster = experiment.cluster
        self.folder = Path(self.cluster.folder) if self.cluster.folder else Path(results_dir) / "slurm-jobs"
        self.cache_dir = experiment.host.workdir or cache_dir
        # The worker runs with the driver's interpreter unless [host] python names another.
        self.python = None if experiment.host.python == "python3" else experiment.host.python
        self.log = log
        self._lock = threading.Lock()
        self.failures: dict[str, int] = {}
        self.dropped: set[str] = set()
        self.states: dict[str, str] = {}      # job id -> queued / running / done

    # -- progress
    def counts(self) -> str:
        vals = list(self.states.values())
        return f"{vals.count(QUEUED)} queued, {vals.count(RUNNING)} running, {vals.count('done')} done"

    def job_is(self, job_id: str, state: str, what: str) -> None:
        with self._lock:
            self.states[job_id] = state
            self.log(f"slurm: job {job_id} {what} ({self.counts()})")

    # -- node health
    def node_failed(self, node: str, why: str) -> None:
        """A job on ``node`` died before writing its trial's result: warn naming the node; a node
        that keeps failing gets no more jobs."""
        with self._lock:
            n = self.failures[node] = self.failures.get(node, 0) + 1
            self.log(f"warning: slurm node {node}: {why}; its trial is retried on another job")
            if n >= NODE_FAILURES_TO_DROP and node not in self.dropped:
                self.dropped.add(node)
                self.log(f"warning: slurm node {node} dropped after {n} failed jobs: no more jobs go there")

    # -- submission
    def submit(self, job_dir: Path, name: str):
        """Submit one worker job for ``job_dir``; the submitit job."""
        import submitit
        from .node import serve
        c = self.cluster
        ex = submitit.SlurmExecutor(folder=str(job_dir / "submitit"), python=self.python)
        params = dict(job_name=name, time=c.time_limit_min, nodes=1, ntasks_per_node=1,
                      setup=list(c.setup), signal_delay_s=30)
        if c.partition:
            params["partition"] = c.partition
        if c.account:
            params["account"] = c.account
        if c.gpus_per_node:
            params["gpus_per_node"] = c.gpus_per_node
        if c.exclusive:
            params["exclusive"] = True
        with self._lock:
            dropped = sorted(self.dropped)
        nodelist = [n for n in c.nodelist if n not in dropped]
        if nodelist:
            params["nodelist"] = ",".join(nodelist)
        if dropped:
            params["exclude"] = ",".join(dropped)
        ex.update_parameters(**params)
        try:
            job = ex.submit(serve, str(job_dir), self.exp, cache_dir=None if self.cache_dir is None
                            else str(self.cache_dir), python_exe=self.python or sys.executable,
                            idle_timeout_s=IDLE_TIMEOUT_S, time_limit_s=c.time_limit_min * 60.0)
        except Exception as e:   # submitit wraps sbatch's refusal in its own error types
            raise UsageError(f"slurm: sbatch refused the job: {str(e).strip().splitlines()[-1][:300]}") from None
        self.job_is(str(job.job_id), QUEUED, "queued")
        return job

    @staticmethod
    def attach(job_dir: Path, job_id: str):
        """A submitit handle on a job submitted by an earlier run (``--resume``)."""
        from submitit.slurm.slurm import SlurmJob
        return SlurmJob(folder=str(job_dir / "submitit"), job_id=str(job_id))

    def cancel(self, job, why: str) -> None:
        job.cancel(check=False)
        self.log(f"slurm: cancelled job {job.job_id} ({why})")


def wait_s(since: float) -> str:
    return f"{time.time() - since:.1f} s"
