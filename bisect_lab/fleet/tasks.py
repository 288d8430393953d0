"""The files a driver and its Slurm jobs exchange in a job folder (layer 5).

A job folder (one per submitted job, on a filesystem the nodes share) holds::

    inbox/NNNNNN-D.json   a trial task the driver D wrote: campaign, trial index, arm, commit, tag
                          (with ``[server]``: a whole serving session, its name and readings)
    running/NNNNNN-D.json the same task once the job took it (so a job that dies mid-trial is told
                          from one that never started it)
    outbox/NNNNNN-D.json  the trial's result: TrialResult, extra and fingerprint, as the store keeps them
                          (a session's: its record and every reading, numbered from 0 on the node)
    node.json             written by the job when it starts: node name, job id, pid
    heartbeat             touched by the job every few seconds while it lives
    stop                  written by the driver: the job ends after its current trial
    ending.json           written by the job when Slurm signals its end (scancel, time limit)

Every file is written to a temporary name and renamed, so a reader never sees half of one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..model import Arm
from ..runner import TrialOutcome, TrialSpec

INBOX, RUNNING, OUTBOX = "inbox", "running", "outbox"
NODE_FILE, HEARTBEAT, STOP, ENDING = "node.json", "heartbeat", "stop", "ending.json"


def make_job_dir(path: Path) -> Path:
    """A fresh job folder with its mailboxes; private (tasks carry the arm's environment)."""
    for sub in (INBOX, RUNNING, OUTBOX):
        (path / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_json(path: Path, data) -> None:
    """``data`` as JSON at ``path``, atomically (temporary file, then rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def read_json(path: Path):
    """The JSON at ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def task_name(index: int, driver: str) -> str:
    """A task's file name: its trial index and the driver run that sent it, so that a result a
    job writes late for an earlier (killed) driver is never read as this one's."""
    return f"{index:06d}-{driver}.json"


def index_of(name: str) -> int:
    return int(name.split("-")[0].split(".")[0])


def encode_task(spec: TrialSpec, campaign: str, index: int, session: tuple[str, int] | None = None) -> dict:
    """A task: one trial, or with ``session = (name, readings)`` one serving session of the arm."""
    arm = spec.arm
    data = {"campaign": campaign, "index": index, "commit": spec.commit, "tag": spec.tag,
            "arm": {"spec": arm.spec, "patches": sorted(arm.patches), "env": [list(kv) for kv in arm.env]}}
    if session is not None:
        data["session"] = {"name": session[0], "readings": int(session[1])}
    return data


def session_of(data: dict) -> tuple[str, int] | None:
    """``(name, readings)`` of a session task; None for a trial task."""
    s = data.get("session")
    return (s["name"], int(s["readings"])) if s else None


def decode_task(data: dict) -> tuple[TrialSpec, str, int]:
    a = data["arm"]
    arm = Arm(a["spec"], frozenset(a["patches"]), tuple((k, v) for k, v in a["env"]))
    return TrialSpec(arm, data.get("commit"), data.get("tag")), data["campaign"], int(data["index"])


def encode_outcome(out: TrialOutcome) -> dict:
    from ..store import _trial_to_json
    # The store's own record of a trial (the same redaction as its spool): one format on disk.
    return json.loads(_trial_to_json(out.result, out.extra, out.fingerprint_data))


def decode_outcome(data: dict) -> TrialOutcome:
    from ..store import _trial_from_json
    result, extra, fp = _trial_from_json(json.dumps(data))
    return TrialOutcome(result, extra or {}, fp)


def encode_session(records: list, rows: list[TrialOutcome], log: list[str]) -> dict:
    """What a session left on the node: its records as the store was told them (start, end), every
    reading (numbered from 0 on the node; the driver numbers them in its campaign) and its log lines."""
    from dataclasses import asdict
    return {"session": [asdict(r) for r in records], "rows": [encode_outcome(o) for o in rows], "log": log}


def decode_session(data: dict):
    """``(records, rows, log)`` of :func:`encode_session`."""
    from ..store_sessions import SessionRecord
    return ([SessionRecord(**r) for r in data["session"]], [decode_outcome(o) for o in data["rows"]],
            list(data.get("log", [])))
