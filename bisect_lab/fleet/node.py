"""What a Slurm job runs on its node: a worker loop over the job folder's inbox (layer 5).

The job holds one node. It builds one :class:`~bisect_lab.runner.HostWorker` on a
:class:`~bisect_lab.hosts.LocalHost` named after the node, so a trial here goes through exactly
the code path of a local trial; it takes tasks from ``inbox/`` one at a time, writes each result
to ``outbox/`` the moment it is measured, and ends when told to stop, after an idle timeout, or
when its time limit would cut the next trial short (the task stays in the inbox for another job).
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

from . import tasks as T

HEARTBEAT_S = 2.0
POLL_S = 0.1


def node_name() -> str:
    """The node's name as Slurm knows it (a logical node's name differs from the machine's)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def serve(job_dir: str, experiment, *, cache_dir: str | None, python_exe: str | None,
          idle_timeout_s: float, time_limit_s: float) -> dict:
    """The worker loop of one job (submitted through submitit): returns what it did."""
    from ..hosts import LocalHost
    from ..runner import HostWorker
    started = time.time()
    d = Path(job_dir)
    node = node_name()
    T.write_json(d / T.NODE_FILE, {"node": node, "job_id": os.environ.get("SLURM_JOB_ID"),
                                   "pid": os.getpid(), "started": started})
    alive = threading.Event()

    def beat():
        while not alive.wait(HEARTBEAT_S):
            try:
                (d / T.HEARTBEAT).touch()
            except OSError:
                pass
    (d / T.HEARTBEAT).touch()
    threading.Thread(target=beat, daemon=True).start()

    host = LocalHost(cache_dir=cache_dir, python_exe=python_exe)
    host.name = node
    log_path = d / "worker.log"

    def log(msg: str) -> None:
        with open(log_path, "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {msg}\n")

    worker = HostWorker(host, experiment, log=log)
    ending = threading.Event()

    def on_term(signum, frame):
        # scancel, preemption or the time limit: Slurm sends SIGTERM, then SIGKILL after KillWait.
        # Take no new task (the driver gives it to another job) and say why the job ends.
        ending.set()
        T.write_json(d / T.ENDING, {"signal": signal.Signals(signum).name, "at": time.time()})
    signal.signal(signal.SIGTERM, on_term)
    # A trial started later than this could be cut by the job's time limit.
    last_start = started + time_limit_s - experiment.benchmark.timeout_s - 30
    done, why = 0, "stopped by the driver"
    idle_since = time.monotonic()
    try:
        while True:
            if (d / T.STOP).exists():
                break
            if ending.is_set():
                why = "ended by Slurm (SIGTERM)"
                break
            todo = sorted((d / T.INBOX).glob("*.json"))
            if not todo:
                if time.monotonic() - idle_since > idle_timeout_s:
                    why = f"idle for {idle_timeout_s:g} s"
                    break
                time.sleep(POLL_S)
                continue
            if time.time() > last_start:
                why = "too close to its time limit for another trial"
                break
            taken = d / T.RUNNING / todo[0].name
            try:
                os.replace(todo[0], taken)
            except OSError:
                continue
            data = T.read_json(taken)
            if data is None:
                continue
            spec, campaign, index = T.decode_task(data)
            session = T.session_of(data)
            if session is None:
                log(f"trial {index}: {spec.arm.spec!r}")
                out = worker.run(spec, campaign, index)
                T.write_json(d / T.OUTBOX / taken.name, T.encode_outcome(out))
            else:
                from ..serving import measure_session_here
                log(f"session {session[0]}: {spec.arm.spec!r}, {session[1]} reading(s)")
                records, rows, lines = measure_session_here(worker, spec, campaign, *session, log)
                T.write_json(d / T.OUTBOX / taken.name, T.encode_session(records, rows, lines))
            taken.unlink(missing_ok=True)
            done += 1
            idle_since = time.monotonic()
    finally:
        alive.set()
        worker.close()
        log(f"ending after {done} trial(s): {why}")
    return {"node": node, "trials": done, "ended": why}
