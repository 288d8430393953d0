"""Serving sessions (layer 5, docs/contracts.md, Serving sessions): one launch of the arm's server,
``warmup_readings`` + ``readings`` benchmark runs against it, one clean stop.

A session: tree and import check (as a trial) -> GPU hygiene -> a free ``{port}`` -> the server
started in the prepared tree, its output in ``server.log`` of the session's folder -> readiness
(``ready_url`` answering 200 and/or ``ready_log`` matching, within ``ready_timeout_s``) -> the
readings, each one benchmark run exactly as a trial runs it (:meth:`HostWorker.benchmark`), each
stored the moment it ends -> SIGTERM to the server's group, the tree killed after
``stop_timeout_s`` -> GPUs checked idle. The session's row in the store says how it went.
"""
from __future__ import annotations

import math
import os
import posixpath
import re
import shlex
import time
from dataclasses import dataclass, replace
from typing import Callable

from .errors import HostError
from .redact import redact_text as redact_value
from .hosts.base import CAMPAIGN_VAR, Process
from .model import Experiment, TrialResult, TrialStatus
from .placeholders import shell_substitute, substitute
from .trial import Attempt, TrialFailed, TrialSpec, _killed, _one_line, _tail
from .store import SessionRecord

# HostWorker and Executor (bisect_lab.runner) are named in annotations only: runner imports this module.

Log = Callable[[str], None]

# readings = "auto" before the cost-aware choice is wired in (see :func:`default_readings`)
AUTO_READINGS = 3
PORT_ATTEMPTS = 4               # launches on a fresh port when the chosen one turned out taken
LOG_TAIL_LINES = 40
_PORT_IN_USE = re.compile(r"address already in use|EADDRINUSE|\[Errno 98\]", re.I)
_FREE_PORT_PY = "import socket\ns = socket.socket()\ns.bind(('', 0))\nprint(s.getsockname()[1])"
_URL_PY = ("import sys, urllib.request\ntry:\n    r = urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))\n"
           "    print(r.status)\nexcept Exception as e:\n    print(getattr(e, 'code', 0) or 0)")


def default_readings(exp: Experiment) -> Callable[[TrialSpec], int]:
    """Readings per session: the experiment's integer, or :data:`AUTO_READINGS` for ``"auto"``.

    The hook for a cost-aware choice: :class:`~bisect_lab.runner.Executor` takes any
    ``readings_for(spec) -> int``; this is what it uses when given none."""
    n = exp.server.readings if exp.server else 1
    fixed = n if isinstance(n, int) else AUTO_READINGS
    return lambda spec: fixed


# --------------------------------------------------------------------------- host probes
def free_port(host) -> int:
    """A port nobody listens on right now, on ``host`` (port 0 bound and given back)."""
    if host.is_local:
        import socket
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]
    res = host.quick_python(_FREE_PORT_PY, timeout_s=30)
    word = res.stdout.strip().splitlines()[-1:] if res.stdout.strip() else []
    if res.returncode != 0 or not word or not word[0].isdigit():
        raise HostError(f"{host.name}: cannot find a free port: {_one_line(res.stderr) or res.stdout.strip()}")
    return int(word[0])


def url_status(host, url: str, timeout_s: float = 2.0) -> int:
    """The HTTP status ``url`` answers with, seen from ``host`` (0: no answer)."""
    if host.is_local:
        import urllib.error
        import urllib.request
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (OSError, ValueError):
            return 0
    res = host.quick_python(_URL_PY, url, str(timeout_s), timeout_s=timeout_s + 30)
    out = res.stdout.strip()
    return int(out) if out.isdigit() else 0


def _fresh_folder(host, path: str) -> None:
    """An empty folder for the session (what a killed run left there goes first)."""
    if host.is_local:
        import shutil
        shutil.rmtree(path, ignore_errors=True)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise HostError(f"cannot make the session folder {path}: {e.strerror or e}") from None
        return
    host.quick(f"rm -rf -- {shlex.quote(path)} && mkdir -p -- {shlex.quote(path)}", timeout_s=30).check(
        "make the session folder")


def _geomean(values: list[float]) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not vals:
        return float("nan")
    if all(v > 0 for v in vals):
        return math.exp(sum(math.log(v) for v in vals) / len(vals))
    return sum(vals) / len(vals)       # a metric that can be 0 or negative: the plain mean


def session_result(rec: SessionRecord, readings: list[TrialResult], warmup: int,
                   spec_tag: str | None) -> TrialResult:
    """The one result that stands for a session (what a strategy is told): the geometric mean of
    its counted readings (after the first ``warmup``, ok ones); ok when at least one counted
    reading is ok, else the session's failure kind. It is not stored: its readings are."""
    readings = sorted(readings, key=lambda t: t.trial)
    counted = [t for t in readings[warmup:] if t.ok]
    first = readings[0] if readings else None
    if counted:
        keys = [k for k in counted[0].metrics if all(k in t.metrics for t in counted)]
        status, error = TrialStatus.OK, ""
        values = {k: _geomean([t.metrics[k] for t in counted]) for k in keys}
    else:
        failed = [t for t in readings if not t.ok]
        last = failed[-1] if failed else None
        try:
            status = TrialStatus(rec.status)
        except ValueError:
            status = last.status if last else TrialStatus.CRASHED
        if status is TrialStatus.OK:       # every counted reading failed while the server stayed up
            status = last.status if last else TrialStatus.CRASHED
        error = last.error if last else f"session {rec.session} took no reading"
        values = {}
    end = rec.finished or (readings[-1].started + readings[-1].duration_s if readings else rec.started)
    return TrialResult(campaign=rec.campaign, trial=first.trial if first else -1, arm=rec.arm, status=status,
                       host=rec.host, started=rec.started, duration_s=max(0.0, end - rec.started), metrics=values,
                       error=error, commit=rec.commit, tree_hash=first.tree_hash if first else None,
                       fingerprint=counted[-1].fingerprint if counted else None, tag=spec_tag, session=rec.session)


# --------------------------------------------------------------------------- one session
@dataclass
class _Launch:
    proc: Process
    port: int
    ready_s: float


@dataclass
class ServerSession:
    """One session of one arm on one worker; :meth:`run` measures it and returns its stand-in result."""

    worker: "HostWorker"
    spec: TrialSpec
    campaign: str
    name: str
    readings: int
    take_index: Callable[[], int]
    store: object
    log: Log

    @property
    def server(self):
        return self.worker.exp.server

    def run(self) -> TrialResult:
        w, spec = self.worker, self.spec
        host = w.host
        att = Attempt(w, spec, self.campaign, -1, session=self.name)
        rec = SessionRecord.before_launch(self.campaign, self.name, spec, host.name, att.started)
        stored: list[TrialResult] = []
        launch: _Launch | None = None
        log_path = None
        self.store.start_session(rec)
        try:
            try:
                tree, env, extra = w.setup(att)
                gpu_before = w.gpu_idle(att, extra)
                sdir = w.trees.session_out_dir(self.campaign, self.name)
                _fresh_folder(host, sdir)
                log_path = posixpath.join(sdir, "server.log")
                rec = replace(rec, log_path=log_path)
                # The campaign id travels with the server (a resume finds what a killed run left
                # running), never with the arm's environment: not in the readings' fingerprints.
                launch = self._launch(att, tree, {**env, CAMPAIGN_VAR: self.campaign}, sdir, log_path, extra)
            except TrialFailed as f:
                stored.append(self._store_row(f.outcome))
                return self._end(rec, stored, launch, log_path, stored[-1].status.value)
            rec = replace(rec, port=launch.port, ready_s=launch.ready_s)
            self.log(f"session {self.name} (arm {spec.arm.spec}, port {launch.port}): ready in {launch.ready_s:.1f} s")
            status = self._readings(att, tree, env, extra, gpu_before, launch, log_path, stored)
            return self._end(rec, stored, launch, log_path, status)
        except HostError as e:
            stored.append(self._store_row(att.fail(TrialStatus.HOST_ERROR, str(e))))
            return self._end(rec, stored, launch, log_path, TrialStatus.HOST_ERROR.value)
        except BaseException:
            # Ctrl-C, a storage failure: the server must not keep the GPU; the session stays
            # "running" in the store, which a resume reads as interrupted.
            if launch is not None:
                launch.proc.kill_tree()
            raise

    # ------------------------------------------------------------------ launch
    def _launch(self, att: Attempt, tree, env, sdir: str, log_path: str, extra: dict) -> _Launch:
        """Start the server on a free port and wait until it is ready; :class:`TrialFailed` with
        ``server-not-ready`` (and the log's tail) when it is not."""
        w, srv = self.worker, self.server
        from .envcheck import EnvSampler
        for attempt in range(PORT_ATTEMPTS):
            port = free_port(w.host)
            values = {"port": str(port), "tree": tree.path, "out": sdir}
            command = shell_substitute(srv.command, values)
            url = substitute(srv.ready_url, {"port": str(port)}) if srv.ready_url else None
            # The server's own stdout and stderr, whole, in the session's folder.
            proc = w.host.spawn(f"exec >{shlex.quote(log_path)} 2>&1 </dev/null\n{command}", cwd=tree.path,
                                env=env, timeout_s=None)
            w.owned_pids.add(proc.pid)
            t0 = time.monotonic()
            sampler = EnvSampler(w.host, w.expected_env(att.spec.arm))
            try:
                why = self._wait_ready(proc, url, log_path, t0, sampler)
            except BaseException:
                proc.kill_tree()          # Ctrl-C while it loads: never leave it holding the GPU
                raise
            if why is None:
                extra["server_env"] = sampler.report().to_dict()
                return _Launch(proc, port, time.monotonic() - t0)
            text = self._log_text(log_path)
            proc.kill_tree()
            proc.close()
            if why == "port" and attempt + 1 < PORT_ATTEMPTS:
                self.log(f"session {self.name}: port {port} was taken when the server started; trying another")
                continue
            said = _one_line(text) or "(the server printed nothing)"
            extra["server_log_tail"] = redact_value(_tail(text, LOG_TAIL_LINES))
            raise TrialFailed(att.fail(TrialStatus.SERVER_NOT_READY, f"session {self.name}: {why}: {said}", extra))
        raise AssertionError("unreachable")

    def _wait_ready(self, proc: Process, url: str | None, log_path: str, t0: float, sampler) -> str | None:
        """None once the server is ready; else why not (``"port"``: its port was taken)."""
        srv, host = self.server, self.worker.host
        rx = re.compile(srv.ready_log) if srv.ready_log else None
        pause = 0.05
        while True:
            pids = proc.descendants()
            self.worker.owned_pids.update(pids)
            try:
                sampler.sample(pids)       # the server's workers are what env verification is about
            except HostError:
                pass
            rc = proc.poll()
            text = self._log_text(log_path) if (rx is not None or rc is not None) else ""
            if rc is not None:
                if _PORT_IN_USE.search(text):
                    return "port"
                return f"the server exited with status {rc} before it was ready"
            if (url is None or url_status(host, url) == 200) and (rx is None or rx.search(text)):
                return None
            if _PORT_IN_USE.search(text):
                return "port"
            waited = time.monotonic() - t0
            if waited > srv.ready_timeout_s:
                what = " and ".join(x for x in (f"{url} answering 200" if url else "",
                                                f"{srv.ready_log!r} in its log" if rx else "") if x)
                return f"the server was not ready after {srv.ready_timeout_s:g} s (waited for {what})"
            time.sleep(min(pause, max(0.0, srv.ready_timeout_s - waited) + 0.01))
            pause = min(pause * 1.5, 0.5 if host.is_local else 1.0)

    def _log_text(self, log_path: str | None) -> str:
        if not log_path:
            return ""
        try:
            return self.worker.host.read_bytes(log_path).decode("utf-8", "replace")
        except (FileNotFoundError, OSError, HostError):
            return ""

    # ------------------------------------------------------------------ readings
    def _alive(self, launch: _Launch) -> bool:
        if launch.proc.poll() is not None:
            return False
        url = substitute(self.server.ready_url, {"port": str(launch.port)}) if self.server.ready_url else None
        return url is None or url_status(self.worker.host, url) == 200

    def _readings(self, att0: Attempt, tree, env, extra, gpu_before, launch: _Launch, log_path: str,
                  stored: list[TrialResult]) -> str:
        """Take the readings; the session's status (``ok`` or ``server-died``)."""
        w, srv = self.worker, self.server
        total = srv.warmup_readings + self.readings

        def server_pids() -> list[int]:
            pids = launch.proc.descendants()
            w.owned_pids.update(pids)
            return pids

        for i in range(total):
            tag = "warmup" if i < srv.warmup_readings else self.spec.tag
            att = Attempt(w, self.spec, self.campaign, self.take_index(), session=self.name, tag=tag)
            att.commit, att.tree_hash = att0.commit, att0.tree_hash
            if not self._alive(launch):
                out = att.fail(TrialStatus.SERVER_DIED, "", dict(extra))
                return self._died(out, i, total, log_path, stored)
            out = w.benchmark(att, tree, env, extra, gpu_before, values={"port": str(launch.port)},
                              also_sample=server_pids)
            if not out.result.ok and not self._alive(launch):
                return self._died(out, i, total, log_path, stored)
            stored.append(self._store_row(out))
        return TrialStatus.OK.value

    def _died(self, out, i: int, total: int, log_path: str, stored: list[TrialResult]) -> str:
        text = self._log_text(log_path)
        said = _one_line(text) or "(the server printed nothing)"
        msg = f"session {self.name}: server-died after {i} of {total} readings: {said}"
        self.log(msg)
        extra = dict(out.extra)
        extra["server_log_tail"] = redact_value(_tail(text, LOG_TAIL_LINES))
        if out.result.error:
            extra["reading_error"] = out.result.error
        result = replace(out.result, status=TrialStatus.SERVER_DIED, error=redact_value(msg), metrics={})
        stored.append(self._store_row(type(out)(result, extra, out.fingerprint_data)))
        return TrialStatus.SERVER_DIED.value

    def _store_row(self, out) -> TrialResult:
        result = out.result
        if result.trial < 0:
            result = replace(result, trial=self.take_index())
        if result.session is None:
            result = replace(result, session=self.name)
        self.store.add_trial(result, extra=out.extra, fingerprint_data=out.fingerprint_data)
        return result

    # ------------------------------------------------------------------ stop
    def _stop(self, launch: _Launch) -> dict:
        """SIGTERM to the server's group, ``stop_timeout_s`` for its whole tree to go, then SIGKILL."""
        w, srv = self.worker, self.server
        proc = launch.proc
        t0 = time.monotonic()
        info: dict = {"pid": proc.pid}
        try:
            proc.terminate()
        except (HostError, NotImplementedError):
            pass
        left: list[int] = []
        while time.monotonic() - t0 < srv.stop_timeout_s:
            try:
                left = proc.descendants()
            except HostError:
                left = []
            if not left:
                break
            time.sleep(0.1)
        killed = proc.kill_tree()
        info["stop_s"] = round(time.monotonic() - t0, 3)
        if left and killed:
            info["ignored_sigterm"] = True
            info["killed"] = _killed(killed)
            self.log(f"session {self.name}: the server ignored SIGTERM for {srv.stop_timeout_s:g} s; killed "
                     + ", ".join(f"pid {k['pid']} ({k['cmdline'][:80] or '?'})" for k in info["killed"][:4]))
        if w.exp.gpu.enabled:
            from .gpu import wait_idle
            idle = wait_idle(w.host, w.exp.gpu, owned_pids=w.owned_pids, log=self.log, inspector=w._inspector())
            info["gpu_idle_after"] = bool(idle.ok)
            if not idle.ok:
                self.log(f"session {self.name}: GPUs not idle after the server stopped: {idle.reason}")
        w._prune_owned()
        return info

    def _end(self, rec: SessionRecord, stored: list[TrialResult], launch: _Launch | None, log_path: str | None,
             status: str) -> TrialResult:
        stop: dict = {}
        if launch is not None:
            try:
                stop = self._stop(launch)
            except HostError as e:
                stop = {"error": redact_value(str(e))}
        text = self._log_text(log_path)
        if launch is not None:
            launch.proc.close()
        readings = sorted(stored, key=lambda t: t.trial)
        counted = [t for t in readings[self.server.warmup_readings:] if t.status is not TrialStatus.SERVER_DIED]
        rec = replace(rec, status=status, readings=len(counted), finished=time.time(), stop=stop,
                      log_tail=redact_value(_tail(text, LOG_TAIL_LINES)))
        self.store.end_session(rec)
        return session_result(rec, readings, self.server.warmup_readings, self.spec.tag)


# --------------------------------------------------------------------------- away from the store
class RecordingStore:
    """A store stand-in for a session measured where the store is not (a Slurm node): it keeps
    what the session tells it, in order, for the driver to store (:meth:`SessionRunner.once`)."""

    def __init__(self):
        self.records: list[SessionRecord] = []
        self.rows: list = []

    def start_session(self, rec: SessionRecord) -> None:
        self.records.append(rec)

    def end_session(self, rec: SessionRecord) -> None:
        self.records.append(rec)

    def add_trial(self, t: TrialResult, *, extra: dict | None = None, fingerprint_data: dict | None = None):
        from .trial import TrialOutcome
        self.rows.append(TrialOutcome(t, extra or {}, fingerprint_data))


def measure_session_here(worker: "HostWorker", spec: TrialSpec, campaign: str, name: str, readings: int,
                         log: Log) -> tuple[list[SessionRecord], list, list[str]]:
    """One whole session on this machine without a store: ``(records, rows, log lines)``, the
    readings numbered from 0 (what a Slurm job sends back; the driver numbers them)."""
    store, lines, counter = RecordingStore(), [], iter(range(10 ** 6))

    def say(msg: str) -> None:
        lines.append(msg)
        log(msg)
    ServerSession(worker, spec, campaign, name, readings, lambda: next(counter), store, say).run()
    return store.records, store.rows, lines


# --------------------------------------------------------------------------- the executor's part
class SessionRunner:
    """What :class:`~bisect_lab.runner.Executor` does with ``[server]``: one session per spec,
    stored sessions replayed as a whole, interrupted ones run again as new sessions."""

    def __init__(self, executor: "Executor", readings_for: Callable[[TrialSpec], int] | None):
        self.ex = executor
        self.readings_for = readings_for or default_readings(executor.exp)
        store, cid = executor.store, executor.campaign
        lost = store.mark_interrupted_sessions(cid)
        if lost:
            executor.log(f"campaign {cid}: {len(lost)} session(s) interrupted by the last run "
                         f"({', '.join(lost[:5])}): measured again as new sessions; their readings never count")
        by_session: dict[str, list[TrialResult]] = {}
        for t in store.trials(cid):
            if t.session:
                by_session.setdefault(t.session, []).append(t)
        self._replay: dict[tuple, list[tuple[SessionRecord, list[TrialResult]]]] = {}
        for rec in store.sessions(cid):
            if rec.ended:
                self._replay.setdefault((rec.arm, rec.commit), []).append((rec, by_session.get(rec.session, [])))
        self._next = store.next_session_number(cid)

    def _name(self) -> str:
        with self.ex._lock:
            n = self._next
            self._next += 1
        return f"s{n}"

    def once(self, worker: "HostWorker", spec: TrialSpec) -> TrialResult:
        ex = self.ex
        q = self._replay.get(spec.key)
        if q:
            rec, readings = q.pop(0)
            result = session_result(rec, readings, ex.exp.server.warmup_readings, spec.tag)
            ex.replayed += 1
            ex.on_replay(result)
            return result
        name, readings = self._name(), max(1, int(self.readings_for(spec)))
        remote = getattr(worker, "run_session", None)
        if remote is not None:
            result = self._store_remote(spec, *remote(spec, ex.campaign, name, readings))
        else:
            result = ServerSession(worker, spec, ex.campaign, name, readings, ex._take_index, ex.store,
                                   ex.log).run()
        ex.measured += 1
        ex.on_trial(result)
        return result

    def _store_remote(self, spec: TrialSpec, records: list[SessionRecord], rows: list) -> TrialResult:
        """Store a session measured elsewhere (a Slurm job): its readings numbered in this
        campaign, in the order they were taken; its result as if measured here."""
        ex = self.ex
        first, last = records[0], records[-1]
        ex.store.start_session(replace(first, campaign=ex.campaign))
        stored: list[TrialResult] = []
        for out in sorted(rows, key=lambda o: o.result.trial):
            result = replace(out.result, trial=ex._take_index(), campaign=ex.campaign)
            ex.store.add_trial(result, extra=out.extra, fingerprint_data=out.fingerprint_data)
            stored.append(result)
        ex.store.end_session(replace(last, campaign=ex.campaign))
        return session_result(last, stored, ex.exp.server.warmup_readings, spec.tag)
