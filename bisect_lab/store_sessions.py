"""The sessions table of the results database (docs/contracts.md, Serving sessions): one row per
launch of an arm's server. A mixin of :class:`bisect_lab.store.Store` (same connection, same
write retries and redaction)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from .jsonable import jsonable
from .redact import redact_text, redact_tree

SESSIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    campaign TEXT NOT NULL REFERENCES campaigns(id),
    session TEXT NOT NULL,
    arm TEXT NOT NULL,
    host TEXT NOT NULL,
    commit_sha TEXT,
    tag TEXT,
    status TEXT NOT NULL,
    port INTEGER,
    started REAL NOT NULL,
    ready_s REAL,
    readings INTEGER NOT NULL DEFAULT 0,
    finished REAL,
    stop TEXT NOT NULL DEFAULT '{}',
    log_path TEXT,
    log_tail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (campaign, session)
);
"""

# A session that has not ended: a run killed mid-session leaves it so; its resume marks it interrupted.
SESSION_RUNNING = "running"
SESSION_INTERRUPTED = "interrupted"
SESSION_COLUMNS = ("session", "campaign", "arm", "host", "status", "ready_s", "readings")


@dataclass(frozen=True)
class SessionRecord:
    """One serving session (one launch of the arm's server) as stored."""

    campaign: str
    session: str
    arm: str
    host: str
    commit: str | None
    tag: str | None
    status: str                  # running | ok | server-not-ready | server-died | interrupted | a trial status
    port: int | None
    started: float
    ready_s: float | None        # launch until ready: the launch cost
    readings: int                # counted readings taken (warmup left out)
    finished: float | None
    stop: dict
    log_path: str | None
    log_tail: str

    @property
    def ended(self) -> bool:
        return self.status not in (SESSION_RUNNING, SESSION_INTERRUPTED)

    @classmethod
    def before_launch(cls, campaign: str, session: str, spec, host: str, started: float, *,
                      status: str = SESSION_RUNNING, finished: float | None = None,
                      log_tail: str = "") -> "SessionRecord":
        """The record of a session of ``spec`` (a trial spec: arm, commit, tag) whose server has not
        been launched yet, or never was (a job lost before it could): no port, no readings."""
        return cls(campaign=campaign, session=session, arm=spec.arm.spec, host=host, commit=spec.commit,
                   tag=spec.tag, status=status, port=None, started=started, ready_s=None, readings=0,
                   finished=finished, stop={}, log_path=None, log_tail=log_tail)

def _stored(obj) -> str:
    return json.dumps(redact_tree(jsonable(obj)), sort_keys=True)


class SessionTable:
    """Store methods for serving sessions; needs ``_db``, ``_lock``, ``_write`` and ``read_only``."""

    def _has_sessions(self) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='sessions'"
                                    ).fetchone() is not None

    def next_session_number(self, cid: str) -> int:
        """The number the next session of campaign ``cid`` gets (sessions are named s0, s1, ...)."""
        if not self._has_sessions():
            return 0
        with self._lock:
            rows = self._db.execute("SELECT session FROM sessions WHERE campaign=?", (cid,)).fetchall()
        nums = [int(r[0][1:]) for r in rows if r[0][:1] == "s" and r[0][1:].isdigit()]
        return max(nums) + 1 if nums else 0

    def start_session(self, rec: SessionRecord) -> None:
        """Store a session as it starts (status running): a run killed mid-session leaves it so."""
        self._write(f"store session {rec.session} of campaign {rec.campaign}", lambda: self._put_session(rec))

    def end_session(self, rec: SessionRecord) -> None:
        """Store how a session ended (replaces its row)."""
        self._write(f"store session {rec.session} of campaign {rec.campaign}", lambda: self._put_session(rec))

    def _put_session(self, r: SessionRecord):
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO sessions (campaign, session, arm, host, commit_sha, tag, status, port, started,"
                " ready_s, readings, finished, stop, log_path, log_tail) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (r.campaign, r.session, r.arm, r.host, r.commit, redact_text(r.tag), r.status, r.port, r.started,
                 r.ready_s, r.readings, r.finished, _stored(r.stop), r.log_path, redact_text(r.log_tail)))

    def mark_interrupted_sessions(self, cid: str) -> list[str]:
        """Sessions of ``cid`` that never ended (the run was killed): marked interrupted, so that
        their readings never count; returns their names."""
        if self.read_only or not self._has_sessions():
            return []
        with self._lock:
            names = [r[0] for r in self._db.execute("SELECT session FROM sessions WHERE campaign=? AND status=?",
                                                    (cid, SESSION_RUNNING))]
        if names:
            def op():
                with self._lock:
                    self._db.execute("UPDATE sessions SET status=? WHERE campaign=? AND status=?",
                                     (SESSION_INTERRUPTED, cid, SESSION_RUNNING))
            self._write(f"mark sessions of campaign {cid} interrupted", op)
        return names

    def sessions(self, cid: str | None = None) -> list[SessionRecord]:
        if not self._has_sessions():
            return []
        q = ("SELECT campaign, session, arm, host, commit_sha, tag, status, port, started, ready_s, readings, finished,"
             " stop, log_path, log_tail FROM sessions" + (" WHERE campaign=?" if cid else "")
             + " ORDER BY campaign, started, session")
        with self._lock:
            rows = self._db.execute(q, (cid,) if cid else ()).fetchall()
        return [SessionRecord(campaign=r[0], session=r[1], arm=r[2], host=r[3], commit=r[4], tag=r[5], status=r[6],
                              port=r[7], started=r[8], ready_s=r[9], readings=r[10], finished=r[11],
                              stop=json.loads(r[12] or "{}"), log_path=r[13], log_tail=r[14]) for r in rows]

    def sessions_frame(self, cid: str | None = None):
        """One row per session: session, campaign, arm, host, status, ready_s, readings (+ started, port)."""
        import pandas as pd
        rows = [{"session": r.session, "campaign": r.campaign, "arm": r.arm, "host": r.host, "status": r.status,
                 "ready_s": r.ready_s, "readings": r.readings, "port": r.port,
                 "started": pd.Timestamp(r.started, unit="s", tz="UTC")} for r in self.sessions(cid)]
        return pd.DataFrame(rows, columns=[*SESSION_COLUMNS, "port", "started"])

