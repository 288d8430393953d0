"""The results database (docs/contracts.md, load): one SQLite file under ``--results``.

WAL mode and one transaction per trial, so a crash or ``kill -9`` loses at most the
trial in flight. The schema is versioned; opening a newer database with an older
bisect-lab is refused rather than guessed at.

Storage trouble after the store is open (the database locked by someone else past the busy
timeout, a full disk) never loses a finished trial: the write is retried with backoff, then the
trial is spooled to ``bisect-lab.spool.jsonl`` beside the database and stored on the next
writable open (a ``--resume``), and the command stops with :class:`StorageError` (exit 4).
Read-only opens (``report``, ``diff``, :func:`load`) never write, so an archived results folder
on a read-only disk can be read.
"""
from __future__ import annotations

import json
import math
import os
import secrets
import sqlite3
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .errors import EXIT_NO_MEASUREMENT, BisectLabError, ConfigError
from .model import TrialResult, TrialStatus
from .jsonable import jsonable
from .redact import redact_text, redact_tree
from .store_sessions import (SESSION_COLUMNS, SESSION_INTERRUPTED, SESSION_RUNNING, SESSIONS_SCHEMA,  # noqa: F401
                             SessionRecord, SessionTable)

# 2: trials.session and the sessions table (serving sessions). A version-1 database is migrated on
# its first writable open (the column added, no row touched); version 1 is still read as it is.
SCHEMA_VERSION = 2
DB_NAME = "bisect-lab.sqlite"
# The key of the arms' secret tags (bisect_lab.redact): beside the database, never in it, so that
# a shared database or report gives nothing to test a guessed password against.
KEY_NAME = "redaction.key"
SPOOL_NAME = "bisect-lab.spool.jsonl"
_TABLES = ("meta", "campaigns", "trials", "fingerprints")
# How long one statement waits for another process's lock, and how often a write is retried
# after that; BISECT_LAB_BUSY_TIMEOUT_S is for tests (a locked database in seconds, not minutes).
BUSY_TIMEOUT_S = 30.0
WRITE_ATTEMPTS = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS campaigns (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    experiment TEXT,
    experiment_name TEXT,
    created REAL NOT NULL,
    finished REAL,
    status TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}',
    result TEXT
);
CREATE TABLE IF NOT EXISTS trials (
    campaign TEXT NOT NULL REFERENCES campaigns(id),
    trial INTEGER NOT NULL,
    arm TEXT NOT NULL,
    status TEXT NOT NULL,
    host TEXT NOT NULL,
    started REAL NOT NULL,
    duration_s REAL NOT NULL,
    metrics TEXT NOT NULL DEFAULT '{}',
    error TEXT NOT NULL DEFAULT '',
    commit_sha TEXT,
    tree_hash TEXT,
    fingerprint TEXT,
    env_report TEXT NOT NULL DEFAULT '{}',
    flags TEXT NOT NULL DEFAULT '[]',
    tag TEXT,
    extra TEXT NOT NULL DEFAULT '{}',
    session TEXT,
    PRIMARY KEY (campaign, trial)
);
CREATE INDEX IF NOT EXISTS trials_arm ON trials(campaign, arm);
CREATE TABLE IF NOT EXISTS fingerprints (id TEXT PRIMARY KEY, data TEXT NOT NULL);
"""
# The columns of a trial row, in the order _trial reads them (a migrated database has session last too).
_TRIAL_COLUMNS = ("campaign, trial, arm, status, host, started, duration_s, metrics, error, commit_sha, tree_hash, "
                  "fingerprint, env_report, flags, tag, extra, session")



class StoreError(BisectLabError):
    """A results folder or database that is not usable as given (exit 2): not a bisect-lab
    database, an unknown campaign, a schema this version does not know."""


class StorageError(StoreError):
    """The storage itself failed (exit 4): locked past the busy timeout, disk full, I/O or
    permission errors. The data already stored is not damaged; the message says so."""

    exit_code = EXIT_NO_MEASUREMENT


def _busy_timeout_s() -> float:
    try:
        v = float(os.environ.get("BISECT_LAB_BUSY_TIMEOUT_S", BUSY_TIMEOUT_S))
    except ValueError:
        return BUSY_TIMEOUT_S
    return v if math.isfinite(v) and v >= 0 else BUSY_TIMEOUT_S


def _is_transient(e: sqlite3.Error) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


def _io_words(e: BaseException) -> str:
    """What kind of storage failure ``e`` is, in words a user can act on."""
    msg = str(e).lower()
    if "locked" in msg or "busy" in msg:
        return "the database is locked by another process"
    if "full" in msg:
        return "the disk is full"
    if "readonly" in msg or "read-only" in msg:
        return "the results folder or disk is read-only"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    name = getattr(e, "sqlite_errorname", "")
    return f"{e} ({name}; check free space and permissions)" if name else str(e)


def _trial_to_json(t: TrialResult, extra, fingerprint_data) -> str:
    d = {f: getattr(t, f) for f in TrialResult.__dataclass_fields__}
    d["status"] = t.status.value
    d["metrics"] = dict(t.metrics)
    d["env_report"] = dict(t.env_report)
    d["flags"] = list(t.flags)
    # the spool is a sink like the database: the same redaction (the arm keeps its tags)
    return dumps({"trial": d, "extra": extra, "fingerprint_data": fingerprint_data}, redact=True)


def _trial_from_json(line: str):
    rec = json.loads(line)
    d = dict(rec["trial"])
    d["status"] = TrialStatus(d["status"])
    d["metrics"] = {k: (float("nan") if v is None else v) for k, v in (d.get("metrics") or {}).items()}
    d["flags"] = tuple(d.get("flags") or ())
    return TrialResult(**d), rec.get("extra"), rec.get("fingerprint_data")


def dumps(obj, *, redact: bool = False) -> str:
    """JSON through the one cleaning (:func:`bisect_lab.jsonable.jsonable`: NaN/inf stored as
    null, results and dataclasses with to_dict() as their dicts); ``redact``: secrets hidden
    (:func:`bisect_lab.redact.redact_tree`), as for everything stored."""
    data = jsonable(obj)
    return json.dumps(redact_tree(data) if redact else data, sort_keys=True)


def _stored(obj) -> str:
    # Every JSON column passes the one redaction policy: whatever a caller forgot, the file never holds.
    return dumps(obj, redact=True)


@dataclass(frozen=True)
class Campaign:
    id: str
    kind: str
    experiment: str | None
    experiment_name: str | None
    created: float
    finished: float | None
    status: str
    params: dict
    result: dict | None


def new_campaign_id(kind: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{kind}-{secrets.token_hex(2)}"


def load_or_create_key(results_dir: str | os.PathLike) -> bytes:
    """The key in ``results_dir/redaction.key``; a new random one if there is none. Two processes
    creating it at once agree: the file appears whole (link of a finished temp file) or not at all."""
    path = Path(results_dir) / KEY_NAME
    for _ in range(2):
        try:
            text = path.read_text().strip()
            if text:
                return bytes.fromhex(text)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            raise StoreError(f"{path}: unreadable redaction key ({e}); remove it to make a new one "
                             f"(stored secret arms then no longer match on resume)") from None
        try:
            Path(results_dir).mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass              # another process won: its key is the key
            finally:
                tmp.unlink()
        except OSError as e:
            raise StoreError(f"cannot create the redaction key {path}: {e.strerror or e}") from None
    raise StoreError(f"{path}: empty redaction key; remove it to make a new one")


class Store(SessionTable):
    """Campaigns, trials and fingerprints in one SQLite file. Thread-safe."""

    def __init__(self, results_dir: str | os.PathLike, *, create: bool = True, read_only: bool = False):
        """Open (``create``: or create) the results database of ``results_dir``.

        ``read_only``: never write (no schema set-up, no spool drain); a folder or disk that
        cannot be written is opened immutable, so an archive can still be read.
        """
        self.dir = Path(results_dir)
        self.path = self.dir / DB_NAME
        self.spool_path = self.dir / SPOOL_NAME
        self.read_only = read_only
        self._broken: StorageError | None = None
        self._busy_s = _busy_timeout_s()
        if self.dir.exists() and not self.dir.is_dir():
            raise ConfigError(self.dir, None, "results path exists and is not a folder")
        if not self.path.exists() and (not create or read_only):
            raise StoreError(f"no results database at {self.path}")
        if not read_only:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ConfigError(self.dir, None, f"cannot create the results folder: {e.strerror or e}") from None
        self._lock = threading.RLock()
        self._db = self._connect_read_only() if read_only else self._connect()
        if not read_only:
            self._drain_spool()

    def _connect(self) -> sqlite3.Connection:
        existed = self.path.exists() and self.path.stat().st_size > 0
        try:
            db = sqlite3.connect(self.path, check_same_thread=False, timeout=self._busy_s, isolation_level=None)
        except sqlite3.Error as e:
            raise self._open_error(e) from None
        try:
            if existed:
                self._check_ours(db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            self._db = db
            self._migrate()
        except BaseException as e:
            db.close()
            if isinstance(e, sqlite3.Error):
                raise self._open_error(e) from None
            raise
        return db

    def _connect_read_only(self) -> sqlite3.Connection:
        # mode=ro sees a live WAL; immutable=1 is for a folder or disk nobody can write (it needs
        # no -shm file), where no other writer can exist either.
        uri = "file:" + urllib.parse.quote(str(self.path.resolve()))
        # os.access is true for root on a chmod -w folder: no write bit at all also means "an archive"
        writable = (os.access(self.dir, os.W_OK) and os.access(self.path, os.W_OK)
                    and bool(self.dir.stat().st_mode & 0o222))
        modes = ("mode=ro", "immutable=1") if writable else ("immutable=1",)
        err: sqlite3.Error | None = None
        for mode in modes:
            db = None
            try:
                db = sqlite3.connect(f"{uri}?{mode}", uri=True, check_same_thread=False, timeout=self._busy_s,
                                     isolation_level=None)
                self._check_ours(db)
                return db
            except sqlite3.Error as e:
                if db is not None:
                    db.close()
                if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError):
                    raise self._open_error(e) from None        # not SQLite: the other mode says the same
                err = e
        raise self._open_error(err) from None

    def _check_ours(self, db: sqlite3.Connection) -> None:
        """Refuse an SQLite file that is not a bisect-lab database, or one of a newer schema."""
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in _TABLES if t not in names]
        # writing, a database of ours (it has our meta table) gets missing tables made by _migrate;
        # one with other tables only is someone else's and is left untouched
        if missing and (self.read_only or (names and "meta" not in names)):
            raise StoreError(f"{self.path}: an SQLite database, but not a bisect-lab results database "
                             f"(no table {missing[0]!r})")
        if not missing:
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            self._check_version(row)

    def _check_version(self, row) -> None:
        if row is None:
            if self.read_only:
                raise StoreError(f"{self.path}: not a bisect-lab results database (no schema version)")
            return
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            # bad input rather than a storage failure (exit 2): a file some other tool wrote
            raise StoreError(f"{self.path}: not a bisect-lab results database (schema version {row[0]!r} "
                             f"is not a number)") from None
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}, newer than this bisect-lab "
                             f"({SCHEMA_VERSION}); upgrade bisect-lab")

    def _open_error(self, e: sqlite3.Error) -> StoreError:
        """A file that is not SQLite (exit 2) vs. storage that failed under a healthy file (exit 4)."""
        msg = str(e).lower()
        if isinstance(e, sqlite3.DatabaseError) and ("not a database" in msg or "malformed" in msg
                                                      or "encrypted" in msg):
            return StoreError(f"{self.path}: not a bisect-lab results database ({e})")
        words = _io_words(e)
        if not self.read_only and not os.access(self.dir, os.W_OK):
            words = "the results folder or disk is read-only (report, diff and load() can still read it)"
        return StorageError(f"cannot open {self.path}: {words}; an I/O failure, not a damaged "
                            f"database: the stored results are intact")

    def redaction_key(self) -> bytes:
        """This results folder's key of secret tags, created (mode 0600) on first need."""
        return load_or_create_key(self.dir)

    # ------------------------------------------------------------------ schema
    def _migrate(self):
        with self._lock:
            self._db.executescript("BEGIN;" + _SCHEMA + SESSIONS_SCHEMA + "COMMIT;")
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            else:
                self._check_version(row)
            cols = {r[1] for r in self._db.execute("PRAGMA table_info(trials)")}
            if "session" not in cols:
                # version 1: every row stays; its trials were sessions of one reading (session NULL)
                self._db.execute("ALTER TABLE trials ADD COLUMN session TEXT")
            if row is not None and int(row[0]) < SCHEMA_VERSION:
                self._db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    # ------------------------------------------------------------------ write failures
    def _write(self, what: str, op, *, spool=None):
        """Run the write ``op``; retry while the database is locked, then fail with one
        :class:`StorageError`. ``spool``: the (trial, extra, fingerprint) to keep beside the
        database when the write cannot be made, so the trial is not lost. After a failure this
        store is out of service: later writes raise the first error at once (no second wait;
        their trials are spooled too)."""
        if self.read_only:
            raise StoreError(f"{self.path} is open read-only; cannot {what}")
        if self._broken is not None:        # the first failure is the one to report; no second wait
            if spool is not None:
                self._spool(*spool)
            raise self._broken
        for attempt in range(WRITE_ATTEMPTS):
            try:
                return op()
            except sqlite3.OperationalError as e:      # storage trouble; an IntegrityError is a bug
                if _is_transient(e) and attempt + 1 < WRITE_ATTEMPTS:
                    time.sleep(min(2.0, 0.1 * 2 ** attempt))
                    continue
                err = e
                break
        kept = ""
        if spool is not None:
            kept = self._spool(*spool)
        self._broken = StorageError(f"cannot {what} in {self.path}: {_io_words(err)}{kept}")
        raise self._broken from None

    def _spool(self, t: TrialResult, extra, fingerprint_data) -> str:
        try:
            with open(self.spool_path, "a", encoding="utf-8") as f:
                f.write(_trial_to_json(t, extra, fingerprint_data) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            return f"; the trial could not be kept in {self.spool_path} either ({e.strerror or e}): it is lost"
        return (f"; trial {t.trial} of campaign {t.campaign} is kept in {self.spool_path} and stored the next "
                f"time this results folder is opened (e.g. --resume {t.campaign})")

    def _drain_spool(self) -> None:
        """Store the trials a failed write left in the spool (already stored ones are skipped)."""
        if not self.spool_path.exists():
            return
        try:
            lines = [ln for ln in self.spool_path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        except OSError as e:
            raise StorageError(f"cannot read {self.spool_path}: {e.strerror or e}") from None
        left = []           # trials of a campaign this database does not have: kept for the right one
        for ln in lines:
            try:
                t, extra, fp = _trial_from_json(ln)
            except (ValueError, KeyError, TypeError):
                continue            # a line cut short by the failure that made it: nothing to keep
            with self._lock:
                have = self._db.execute("SELECT 1 FROM trials WHERE campaign=? AND trial=?",
                                        (t.campaign, t.trial)).fetchone()
                known = self._db.execute("SELECT 1 FROM campaigns WHERE id=?", (t.campaign,)).fetchone()
            if not known:
                left.append(ln)
            elif not have:
                self._write(f"store spooled trial {t.trial} of campaign {t.campaign}",
                            lambda: self._add_trial(t, extra, fp))
        try:
            if left:
                tmp = self.spool_path.with_suffix(".tmp")
                tmp.write_text("".join(ln + "\n" for ln in left), encoding="utf-8")
                os.replace(tmp, self.spool_path)
            else:
                self.spool_path.unlink()
        except OSError:
            pass            # stored trials are skipped next time: nothing is stored twice

    def close(self):
        with self._lock:
            self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ campaigns
    def create_campaign(self, kind: str, *, experiment: str | None, experiment_name: str | None,
                        params: dict, campaign_id: str | None = None) -> str:
        cid = campaign_id or new_campaign_id(kind)

        def op():
            with self._lock:
                self._db.execute(
                    "INSERT INTO campaigns (id, kind, experiment, experiment_name, created, status, params)"
                    " VALUES (?, ?, ?, ?, ?, 'running', ?)",
                    (cid, kind, experiment, experiment_name, time.time(), _stored(params)))
        self._write("create a campaign", op)
        return cid

    def finish_campaign(self, cid: str, status: str, result: dict | None):
        self._write(f"finish campaign {cid}", lambda: self._finish_campaign(cid, status, result))

    def _finish_campaign(self, cid, status, result):
        with self._lock:
            self._db.execute("UPDATE campaigns SET status=?, finished=?, result=? WHERE id=?",
                             (status, time.time(), _stored(result) if result is not None else None, cid))

    def set_campaign_status(self, cid: str, status: str):
        self._write(f"mark campaign {cid} {status}", lambda: self._set_campaign_status(cid, status))

    def _set_campaign_status(self, cid, status):
        with self._lock:
            self._db.execute("UPDATE campaigns SET status=? WHERE id=?", (status, cid))

    def set_campaign_params(self, cid: str, params: dict):
        """Replace a campaign's parameters (a resume that raised its budget)."""
        self._write(f"update campaign {cid}", lambda: self._set_campaign_params(cid, params))

    def _set_campaign_params(self, cid, params):
        with self._lock:
            self._db.execute("UPDATE campaigns SET params=? WHERE id=?", (_stored(params), cid))

    def campaign(self, cid: str) -> Campaign:
        with self._lock:
            row = self._db.execute("SELECT * FROM campaigns WHERE id=?", (cid,)).fetchone()
            if row is None:
                # Accept a unique prefix: ids are long.
                rows = self._db.execute("SELECT * FROM campaigns WHERE id LIKE ?", (cid + "%",)).fetchall()
                if len(rows) == 1:
                    row = rows[0]
                elif len(rows) > 1:
                    raise StoreError(f"campaign id {cid!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")
        if row is None:
            raise StoreError(f"no campaign {cid!r} in {self.path}")
        return self._campaign(row)

    @staticmethod
    def _campaign(row) -> Campaign:
        return Campaign(id=row[0], kind=row[1], experiment=row[2], experiment_name=row[3], created=row[4],
                        finished=row[5], status=row[6], params=json.loads(row[7] or "{}"),
                        result=json.loads(row[8]) if row[8] else None)

    def campaigns(self, kind: str | None = None) -> list[Campaign]:
        q = "SELECT * FROM campaigns" + (" WHERE kind=?" if kind else "") + " ORDER BY created, id"
        with self._lock:
            rows = self._db.execute(q, (kind,) if kind else ()).fetchall()
        return [self._campaign(r) for r in rows]

    def latest_unfinished(self, kind: str, experiment: str | None) -> Campaign | None:
        for c in reversed(self.campaigns(kind)):
            if c.status != "done" and (experiment is None or c.experiment == experiment):
                return c
        return None

    # ------------------------------------------------------------------ trials
    def next_trial_index(self, cid: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT MAX(trial) FROM trials WHERE campaign=?", (cid,)).fetchone()
        return 0 if row[0] is None else row[0] + 1

    def add_trial(self, t: TrialResult, *, extra: dict | None = None, fingerprint_data: dict | None = None):
        """Store one finished trial (and its fingerprint) in one transaction; when the database
        cannot take it, the trial is spooled beside it (see the module docstring)."""
        self._write(f"store trial {t.trial} of campaign {t.campaign}",
                    lambda: self._add_trial(t, extra, fingerprint_data), spool=(t, extra, fingerprint_data))

    def _add_trial(self, t: TrialResult, extra: dict | None, fingerprint_data: dict | None):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if t.fingerprint and fingerprint_data is not None:
                    self._db.execute("INSERT OR IGNORE INTO fingerprints VALUES (?, ?)",
                                     (t.fingerprint, _stored(fingerprint_data)))
                self._db.execute(
                    f"INSERT INTO trials ({_TRIAL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    # t.arm is left as it is: a canonical spec carries tags, not secrets, and is
                    # what a resume matches on.
                    (t.campaign, t.trial, t.arm, t.status.value, t.host, t.started, t.duration_s,
                     dumps(dict(t.metrics)), redact_text(t.error), t.commit, t.tree_hash, t.fingerprint,
                     _stored(dict(t.env_report)), dumps(list(t.flags)), redact_text(t.tag), _stored(extra or {}),
                     t.session))
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    def set_flags(self, cid: str, flags: dict[int, tuple[str, ...]]) -> None:
        """Replace the flags of trials of a campaign (set once the campaign's norm is known)."""
        self._write(f"flag trials of campaign {cid}", lambda: self._set_flags(cid, flags))

    def _set_flags(self, cid, flags):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for trial, f in flags.items():
                    self._db.execute("UPDATE trials SET flags=? WHERE campaign=? AND trial=?",
                                     (dumps(sorted(f)), cid, int(trial)))
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    def _rollback(self):
        # A failed COMMIT (disk full) may leave no transaction open: the error to report is the first.
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def trials(self, cid: str | None = None) -> list[TrialResult]:
        q = f"SELECT {self._trial_cols()} FROM trials" + (" WHERE campaign=?" if cid else "") + " ORDER BY campaign, trial"
        with self._lock:
            rows = self._db.execute(q, (cid,) if cid else ()).fetchall()
        return [self._trial(r) for r in rows]

    def arm_trials(self, arms, *, experiment: str | None = None, host: str | None = None) -> list[TrialResult]:
        """Successful trials of the arms (canonical specs) across campaigns, oldest first;
        only campaigns of ``experiment`` and trials on ``host`` when given."""
        arms = list(arms)
        if not arms:
            return []
        cols = ", ".join("t." + c.strip() for c in self._trial_cols().split(","))
        q = (f"SELECT {cols} FROM trials t JOIN campaigns c ON c.id = t.campaign WHERE t.status = 'ok' AND t.arm IN ("
             + ",".join("?" * len(arms)) + ")")
        args: list = list(arms)
        if experiment is not None:
            q += " AND c.experiment = ?"
            args.append(experiment)
        if host is not None:
            q += " AND t.host = ?"
            args.append(host)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY t.started, t.campaign, t.trial", args).fetchall()
        return [self._trial(r) for r in rows]

    def trial_extra(self, cid: str, trial: int) -> dict:
        with self._lock:
            row = self._db.execute("SELECT extra FROM trials WHERE campaign=? AND trial=?", (cid, trial)).fetchone()
        return json.loads(row[0]) if row else {}

    @staticmethod
    def _trial(r) -> TrialResult:
        try:
            status = TrialStatus(r[3])
        except ValueError:
            status = TrialStatus.CRASHED
        metrics = {k: (float("nan") if v is None else v) for k, v in json.loads(r[7]).items()}
        return TrialResult(campaign=r[0], trial=r[1], arm=r[2], status=status, host=r[4], started=r[5],
                           duration_s=r[6], metrics=metrics, error=r[8], commit=r[9], tree_hash=r[10],
                           fingerprint=r[11], env_report=json.loads(r[12]), flags=tuple(json.loads(r[13])),
                           tag=r[14], session=r[16] if len(r) > 16 else None)

    def _trial_cols(self) -> str:
        """The trial columns this database has: a version-1 database read as it is has no session."""
        if not hasattr(self, "_has_session"):
            with self._lock:
                self._has_session = "session" in {r[1] for r in self._db.execute("PRAGMA table_info(trials)")}
        return _TRIAL_COLUMNS if self._has_session else _TRIAL_COLUMNS.rsplit(",", 1)[0]

    def fingerprint(self, fid: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM fingerprints WHERE id=?", (fid,)).fetchone()
        return json.loads(row[0]) if row else None

    # ------------------------------------------------------------------ frames
    def trials_frame(self, cid: str | None = None):
        """One row per trial: campaign, trial, arm, status, host, started, ... plus one column per metric."""
        import pandas as pd
        rows = []
        for t in self.trials(cid):
            row: dict[str, Any] = {
                "campaign": t.campaign, "trial": t.trial, "arm": t.arm, "status": t.status.value,
                "host": t.host, "started": pd.Timestamp(t.started, unit="s", tz="UTC"),
                "duration_s": t.duration_s, "commit": t.commit, "tag": t.tag, "error": t.error,
                "fingerprint": t.fingerprint, "flags": ",".join(t.flags), "session": t.session}
            for k, v in t.metrics.items():
                row[k] = v
            rows.append(row)
        cols = ["campaign", "trial", "arm", "status", "host", "started", "duration_s", "commit", "tag",
                "error", "fingerprint", "flags", "session"]
        return pd.DataFrame(rows, columns=None if rows else cols)


class Results:
    """What :func:`bisect_lab.load` returns: read access to a results folder."""

    def __init__(self, results_dir: str | os.PathLike):
        self.store = Store(results_dir, create=False, read_only=True)

    def trials(self, campaign: str | None = None):
        return self.store.trials_frame(campaign)

    def sessions(self, campaign: str | None = None):
        """One row per serving session (one launch of an arm's server): ``session, campaign, arm,
        host, status, ready_s, readings``; empty for campaigns without ``[server]``."""
        return self.store.sessions_frame(campaign)

    def campaigns(self):
        import pandas as pd
        rows = [dict(id=c.id, kind=c.kind, experiment=c.experiment, status=c.status,
                     created=pd.Timestamp(c.created, unit="s", tz="UTC"),
                     finished=pd.Timestamp(c.finished, unit="s", tz="UTC") if c.finished else None)
                for c in self.store.campaigns()]
        return pd.DataFrame(rows, columns=["id", "kind", "experiment", "status", "created", "finished"])


def load(results_dir: str | os.PathLike = "results") -> Results:
    """Open a results folder for analysis: ``load("results").trials()`` is a pandas DataFrame."""
    return Results(results_dir)
