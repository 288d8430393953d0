"""Serving sessions ([server]) end to end: a real HTTP server (tests/servers/toy_server.py) launched
once per session in the prepared tree of a real git target, real benchmark processes against it,
real SQLite. Each test checks what the store and the CLI say of sessions, readings and failures."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from toyexp import make_toy

SERVERS = Path(__file__).resolve().parent / "servers"
PY = sys.executable


def served_toy(tmp_path, *, server: str = "", env: dict | None = None, effects=None, design: str = "") -> Path:
    """The toy target with its benchmark turned into a server + a client: [server] from ``server``
    (lines added to the defaults), the toy server's knobs in [env]."""
    env = {"TOY_STATE_DIR": str(tmp_path / "state"), **(env or {})}
    lines = [f'command = "{PY} {SERVERS}/toy_server.py --port {{port}}"',
             'ready_url = "http://127.0.0.1:{port}/health"', "ready_timeout_s = 10", "stop_timeout_s = 5",
             "readings = 2", "warmup_readings = 1"]
    keys = {l.split("=")[0].strip() for l in server.strip().splitlines() if "=" in l}
    lines = [l for l in lines if l.split("=")[0].strip() not in keys] + server.strip().splitlines()
    toml = "\n[server]\n" + "\n".join(lines) + "\n\n[env]\n" + "".join(f'{k} = "{v}"\n' for k, v in env.items())
    return make_toy(tmp_path, effects=effects, bench_command=f"{PY} {SERVERS}/toy_bench.py --port {{port}}",
                    timeout_s=10, extra_toml=toml, design=design)


def cli(tmp_path, *args, timeout=120, wait=True):
    cmd = [PY, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache", str(tmp_path / "cache"),
           *map(str, args)]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def results(tmp_path):
    from bisect_lab import load
    return load(tmp_path / "res")


def one_line_error(p, code):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    errors = [l for l in p.stderr.splitlines() if l.startswith("bisect-lab: error:")]
    assert len(errors) == 1, p.stderr
    return errors[0]


def test_run_measures_in_sessions_with_warmup_readings_tagged(tmp_path):
    exp = served_toy(tmp_path, effects={"slow": 0.7, "noop": 1.0})
    p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "all-minus slow", "--repeat", "2", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    r = results(tmp_path)
    sessions = r.sessions()
    assert list(sessions.columns[:7]) == ["session", "campaign", "arm", "host", "status", "ready_s", "readings"]
    # --repeat counts sessions per arm; each took 1 warmup + 2 counted readings
    assert len(sessions) == 4 and set(sessions.status) == {"ok"} and set(sessions.readings) == {2}
    assert sessions.groupby("arm").size().to_dict() == {"all": 2, "all-minus slow": 2}
    assert (sessions.ready_s > 0).all() and (sessions.ready_s < 10).all()
    trials = r.trials()
    assert "session" in trials.columns and len(trials) == 12
    assert set(trials.session) == set(sessions.session)
    assert (trials.tag == "warmup").sum() == 4
    assert trials.groupby("session").size().to_dict() == {s: 3 for s in sessions.session}
    # the first reading of every session is its warmup one
    firsts = trials.sort_values("trial").groupby("session").head(1)
    assert (firsts.tag == "warmup").all()
    arms = {a["arm"]: a for a in res["arms"]}
    assert arms["all"]["median"] == pytest.approx(70, rel=0.05)
    assert arms["all-minus slow"]["median"] == pytest.approx(100, rel=0.05)
    # the server's log is kept in the session's folder
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        (log_path, tail), = db.execute("SELECT log_path, log_tail FROM sessions LIMIT 1").fetchall()
    assert Path(log_path).name == "server.log" and "toy server: launch" in Path(log_path).read_text()
    assert "toy server: launch" in tail


def test_server_dying_mid_session_keeps_its_readings_and_log_tail(tmp_path):
    # the server exits after its 2nd request: the warmup reading and one counted reading are taken
    exp = served_toy(tmp_path, server="readings = 3", env={"TOY_DIE_AFTER": "2"})
    p = cli(tmp_path, "run", exp, "--patches", "none", "--repeat", "1")
    assert p.returncode == 0, p.stderr
    assert "(arm none, port " in p.stderr and ": ready in " in p.stderr
    assert "session s0: server-died after 2 of 4 readings: fatal: CUDA error" in p.stderr, p.stderr
    r = results(tmp_path)
    sessions = r.sessions()           # `run` of one arm measures it against "all": two sessions
    assert list(sessions.status) == ["server-died"] * 2 and list(sessions.readings) == [1, 1]
    trials = r.trials().sort_values("trial")
    assert list(trials.status) == ["ok", "ok", "server-died"] * 2
    assert list(trials.session) == ["s0"] * 3 + ["s1"] * 3
    assert list(trials.tag.fillna("")) == ["warmup", "", ""] * 2
    assert "illegal memory access" in trials.error.iloc[-1]
    # the counted reading before the death is a measurement: the campaign went on and judged it
    assert "local none: 10" in p.stderr and "local all: 7" in p.stderr
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        tails = [t for (t,) in db.execute("SELECT log_tail FROM sessions")]
    assert all("illegal memory access" in t for t in tails)


def test_never_ready_is_server_not_ready_and_exit_4(tmp_path):
    exp = served_toy(tmp_path, server="ready_timeout_s = 0.8", env={"TOY_SERVER_MODE": "never-ready"})
    t0 = time.monotonic()
    p = cli(tmp_path, "run", exp, "--patches", "none", "--repeat", "1")     # none and all: two sessions
    line = one_line_error(p, 4)
    assert "server-not-ready" in line and "not ready after 0.8 s" in line, line
    assert time.monotonic() - t0 < 30
    r = results(tmp_path)
    sessions = r.sessions()
    assert list(sessions.status) == ["server-not-ready"] * 2 and list(sessions.readings) == [0, 0]
    trials = r.trials()
    assert list(trials.status) == ["server-not-ready"] * 2 and list(trials.session) == ["s0", "s1"]
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        tails = [t for (t,) in db.execute("SELECT log_tail FROM sessions")]
    assert all("toy server: launch" in t for t in tails)


def test_ready_log_and_a_server_that_ignores_sigterm(tmp_path):
    exp = served_toy(tmp_path, server="ready_url = ''\nstop_timeout_s = 0.5",
                     env={"TOY_SERVER_MODE": "ignore-term", "TOY_READY_DELAY": "0.5"})
    # ready_log instead of ready_url: rewrite the line the helper wrote
    text = exp.read_text().replace("ready_url = ''", "ready_log = 'fired up and ready to roll'")
    exp.write_text(text.replace('ready_url = "http://127.0.0.1:{port}/health"\n', ""))
    p = cli(tmp_path, "run", exp, "--patches", "none", "--repeat", "1")
    assert p.returncode == 0, p.stderr
    assert "ignored SIGTERM for 0.5 s; killed pid" in p.stderr, p.stderr
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        (stop, ready_s, status) = db.execute("SELECT stop, ready_s, status FROM sessions").fetchone()
    stop = json.loads(stop)
    assert status == "ok" and stop["ignored_sigterm"] and stop["stop_s"] >= 0.5
    assert ready_s >= 0.5                         # it waited for the log line, not for a port
    killed = [k["pid"] for k in stop["killed"]]
    assert any("toy_server.py" in k["cmdline"] for k in stop["killed"])
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in killed)
