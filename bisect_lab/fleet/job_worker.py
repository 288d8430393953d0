"""The driver's handle on one Slurm job slot: what :class:`~bisect_lab.runner.Executor` sees as a
worker (layer 5).

A :class:`SlurmJobWorker` has the worker interface of :class:`~bisect_lab.runner.HostWorker`
(``run``, ``base_commit``, ``prepare``, ``host.name``, ``close``). Its job is submitted on the first
trial; each trial is a task file in the job's inbox, and its result is read from the outbox as soon
as the job writes it. A job that ends (scancel, a node failure, its time limit) before writing
the result is noticed through squeue, its heartbeat and a deadline, never by waiting on submitit
(whose state reads UNKNOWN without accounting): the trial comes back as a host error, the node is
named in a warning, and the next try goes to a new job.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path

from ..errors import InconclusiveError
from ..model import TrialResult, TrialStatus
from ..runner import HostWorker, TrialOutcome, TrialSpec
from . import tasks as T
from .slurm import GONE, QUEUED, RUNNING, SlurmPool, job_state

POLL_S = 0.2
STATE_POLL_S = 2.0
HEARTBEAT_LOST_S = 60.0
RESULT_GRACE_S = 120.0        # past the benchmark's own timeout, before a silent job counts as dead
MAX_UNSTARTED_RESUBMITS = 3   # jobs that ended before taking their task (time limit), per trial


class SlotHost:
    """The worker's ``host``: named after the node its current job runs on, once known."""

    is_local = False

    def __init__(self, slot: int):
        self.slot = slot
        self.node: str | None = None

    @property
    def name(self) -> str:
        return self.node or f"slurm-slot-{self.slot}"

    def close(self) -> None:
        pass


class SlurmJobWorker:
    """One job slot of a :class:`~bisect_lab.fleet.slurm.SlurmPool`: one job at a time, each
    holding one node, running the trials sent to it one after another."""

    def __init__(self, pool: SlurmPool, slot: int, local: HostWorker):
        self.pool = pool
        self.slot = slot
        self.local = local       # the driver's own worker: trees checked and refs resolved here
        self.host = SlotHost(slot)
        self.exp = pool.exp
        self.log = pool.log
        self._job = None
        self._dir: Path | None = None
        self._campaign: str | None = None
        self._submitted = 0.0
        self._busy = False
        self._generation = 0
        self._token = uuid.uuid4().hex[:8]
        self._closed = False
        # The last try was lost with its job's node (named in a warning): the executor's next try
        # goes to a new job without spending the trial's retries.
        self.lost_to_node = False

    # -- the worker interface
    @property
    def base_commit(self) -> str:
        return self.local.base_commit

    @property
    def trees(self):
        """The driver's tree manager: commit lists and ref lookups are the driver's to make."""
        return self.local.trees

    def prepare(self, spec: TrialSpec):
        return self.local.prepare(spec)

    def end_leftovers(self, campaign: str) -> list[dict]:
        return []      # the jobs of an earlier run are reattached (first trial), not killed

    def run(self, spec: TrialSpec, campaign: str, index: int) -> TrialOutcome:
        return self._send(spec, campaign, index, None, time.time())

    def run_session(self, spec: TrialSpec, campaign: str, name: str, readings: int):
        """One whole serving session in the job (server launched on the node, its readings, its
        stop): ``(records, rows)`` as :class:`~bisect_lab.serving.RecordingStore` keeps them, for
        the driver to store. A job lost mid-session gives one host-error row."""
        from ..store_sessions import SessionRecord
        started = time.time()
        got = self._send(spec, campaign, int(name.lstrip("s") or 0), (name, readings), started)
        if isinstance(got, TrialOutcome):           # lost with its job
            r = got.result
            rec = SessionRecord.before_launch(campaign, name, spec, r.host, started, status=r.status.value,
                                              finished=time.time(), log_tail=r.error)
            return [rec], [replace(got, result=replace(r, trial=0, session=name))]
        records, rows, lines = T.decode_session(got)
        for line in lines:
            self.log(f"{self.host.name}: {line}")
        return records, rows

    def _send(self, spec: TrialSpec, campaign: str, index: int, session, started: float):
        self._busy = True
        self.lost_to_node = False
        try:
            for _ in range(MAX_UNSTARTED_RESUBMITS + 1):
                self._ensure_job(campaign)
                task = self._dir / T.INBOX / T.task_name(index, self._token)
                T.write_json(task, T.encode_task(spec, campaign, index, session))
                out = self._wait(task, started)
                if out is not None:
                    self._busy = False
                    return out
                # The job ended without taking the task (its time limit was near): a new job.
            what = "the session" if session else "the trial"
            why = f"{MAX_UNSTARTED_RESUBMITS + 1} jobs in a row ended before starting {what}"
            return self._lost(spec, campaign, index, started, why)
        except KeyboardInterrupt:
            if self._job is not None:
                self.pool.cancel(self._job, "interrupted")
                self._job = None
            raise
        finally:
            self._busy = False

    def close(self) -> None:
        """Tell the job to stop; cancel it if it does not (or if a trial was cut short)."""
        job, self._job = self._job, None
        self._closed = True
        self.local.close()
        if job is None:
            return
        if self._busy:
            self.pool.cancel(job, f"interrupted during a trial on {self.host.name}")
            return
        (self._dir / T.STOP).touch()
        for _ in range(20):
            if job_state(job.job_id) == GONE:
                break
            time.sleep(0.1)
        else:
            job.cancel(check=False)
        self.pool.job_is(str(job.job_id), "done", f"on {self.host.name} done")

    # -- jobs
    def _slot_file(self, campaign: str) -> Path:
        return self.pool.folder / campaign / f"slot{self.slot}.json"

    def _ensure_job(self, campaign: str) -> None:
        if self._job is not None and self._campaign == campaign:
            return
        self._campaign = campaign
        slot_file = self._slot_file(campaign)
        known = T.read_json(slot_file) if self._generation == 0 else None
        if known and job_state(known["job_id"]) in (QUEUED, RUNNING):
            # --resume: the job an earlier run of this campaign left running takes our tasks.
            self._dir = Path(known["dir"])
            self._generation = int(known.get("generation", 0))
            self._job = self.pool.attach(self._dir, known["job_id"])
            self._submitted = float(known.get("submitted", time.time()))
            for stale in (self._dir / T.INBOX).glob("*.json"):
                stale.unlink(missing_ok=True)      # sent by the earlier run: its trials are sent again
            self.pool.job_is(str(self._job.job_id), QUEUED, "reattached (left by an earlier run)")
            return
        if known:
            self._generation = int(known.get("generation", 0))
        self._dir = T.make_job_dir(self.pool.folder / campaign / f"slot{self.slot}-{self._generation}")
        self._generation += 1
        self.host.node = None
        self._job = self.pool.submit(self._dir, f"bisect-lab-{campaign}-{self.slot}")
        self._submitted = time.time()
        slot_file.parent.mkdir(parents=True, exist_ok=True)
        T.write_json(slot_file, {"job_id": str(self._job.job_id), "dir": str(self._dir),
                                 "generation": self._generation, "submitted": self._submitted})

    def _wait(self, task: Path, started: float):
        """The trial's outcome (a session's records as sent), or None when the job ended before
        taking the task."""
        d, job = self._dir, self._job
        job_id = str(job.job_id)
        name = task.name
        result, running = d / T.OUTBOX / name, d / T.RUNNING / name
        next_state = 0.0
        taken_at = None
        limit = self.pool.cluster.pending_limit_min
        while True:
            if self._closed:
                # The session ended under this trial (Ctrl-C): nothing more to store from it.
                raise KeyboardInterrupt
            if result.exists():
                data = T.read_json(result)
                if data is not None:
                    result.unlink(missing_ok=True)
                    if "session" in data:       # a whole session's records: run_session decodes them
                        return data
                    return self._outcome(T.decode_outcome(data), job_id, name)
            if taken_at is None and running.exists():
                taken_at = time.monotonic()
            if self.host.node is None:
                node = T.read_json(d / T.NODE_FILE)
                if node:
                    self.host.node = node["node"]
                    self.pool.job_is(job_id, RUNNING, f"running on {self.host.node} after "
                                     f"{max(0.0, node['started'] - self._submitted):.1f} s in the queue")
            now = time.monotonic()
            if now >= next_state:
                next_state = now + STATE_POLL_S
                state = job_state(job_id)
                if state == QUEUED and self.host.node is None and limit is not None \
                        and time.time() - self._submitted > limit * 60:
                    self.pool.cancel(job, f"pending past pending_limit_min = {limit:g}")
                    self._job = None
                    raise InconclusiveError(
                        f"slurm: job {job_id} pending for more than {limit:g} min (pending_limit_min); "
                        f"stopped with what was measured, stored in campaign {self._campaign}; "
                        f"continue with --resume {self._campaign}")
                dead = None
                if state == GONE:
                    time.sleep(POLL_S)             # a result written just before the job ended
                    if result.exists():
                        continue
                    dead = f"job {job_id} ended"
                elif self.host.node is not None and _stale(d / T.HEARTBEAT):
                    dead = f"job {job_id} stopped answering (no heartbeat for {HEARTBEAT_LOST_S:g} s)"
                elif taken_at is not None and now - taken_at > self.exp.benchmark.timeout_s + RESULT_GRACE_S:
                    dead = f"job {job_id} wrote no result within the benchmark's timeout"
                if dead:
                    if state != GONE:
                        job.cancel(check=False)
                    self._job = None
                    node = self.host.node or "(never started)"
                    self.pool.job_is(job_id, "done", f"on {node} lost")
                    if task.exists() and not running.exists():
                        task.unlink(missing_ok=True)
                        return None                 # never taken: the task goes to a new job
                    self.lost_to_node = True
                    self.pool.node_failed(node, f"{dead} before writing the result of trial "
                                                f"{T.index_of(name)}")
                    spec, campaign, index = T.decode_task(T.read_json(running) or T.read_json(task))
                    return self._lost(spec, campaign, index, started,
                                      f"slurm {dead} on node {node} before writing the trial's result")
            time.sleep(POLL_S)

    def _outcome(self, out: TrialOutcome, job_id: str, name: str) -> TrialOutcome:
        """A result the job wrote; one cut short by the job's own end (scancel, time limit) names
        the job and its node, and the next try goes to a new job."""
        ending = T.read_json(self._dir / T.ENDING)
        if out.result.ok or ending is None:
            return out
        # The job can end before this loop read its node file: the node is then the one the
        # trial itself recorded (never the slot's placeholder name, which names no machine).
        node = self.host.node or (T.read_json(self._dir / T.NODE_FILE) or {}).get("node") or out.result.host
        self._job = None
        self.host.node = None
        self.pool.job_is(job_id, "done", f"on {node} ended by Slurm ({ending.get('signal')})")
        self.lost_to_node = True
        self.pool.node_failed(node, f"job {job_id} was ended by Slurm ({ending.get('signal')}) during trial "
                                    f"{T.index_of(name)}")
        r = out.result
        error = f"slurm job {job_id} on node {node} was ended by Slurm during the trial: {r.error}"
        return TrialOutcome(replace(r, error=error), out.extra, out.fingerprint_data)

    def _lost(self, spec, campaign, index, started, error) -> TrialOutcome:
        host = self.host.name
        self.host.node = None
        return TrialOutcome(TrialResult(
            campaign=campaign, trial=index, arm=spec.arm.spec, status=TrialStatus.HOST_ERROR, host=host,
            started=started, duration_s=time.time() - started, error=error, commit=spec.commit, tag=spec.tag))


def _stale(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime > HEARTBEAT_LOST_S
    except OSError:
        return False
