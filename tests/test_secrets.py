"""Secrets at every place they can land: one redaction policy (bisect_lab.redact) at every sink.

The end-to-end test runs the real CLI in subprocesses against a toy target fetched over HTTP
with a password in the URL, with two arms that differ only by a token, a secret in ``[env]``, and a
benchmark that prints its secrets, passes them on its children's command lines, leaves one child
running and fails once with the token in its error; then it greps every sink for the secrets.
"""
import functools
import http.server
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from toyexp import make_toy

TOKEN_A = "hf_secretvalue123"
TOKEN_B = "hf_othersecret456"
API_KEY = "sk-abcdefghijklmnop1234"
URL_PASSWORD = "urlpass42"
FLAG_PASSWORD = "hunter2zz"
GITHUB = "ghp_" + "Q7w" * 12
SECRETS = (TOKEN_A, TOKEN_B, API_KEY, URL_PASSWORD, FLAG_PASSWORD, GITHUB)

SECRET_BENCH = r'''
import os, subprocess, sys
tok, key = os.environ["HF_TOKEN"], os.environ["API_KEY"]
# The benchmark gets the real values: only what bisect-lab stores and prints is redacted.
assert tok in (%(a)r, %(b)r), tok
assert key == %(key)r, key
with open(%(seen)r, "a") as f:
    f.write(tok + "\n")
print(f"HF_TOKEN={tok}")
print(f"client: --api-key {key} --password %(pw)s")
print("pushed with %(gh)s")
child = [sys.executable, "-c", "import time; time.sleep(%%s)", "--api-key", key, "--password", %(pw)r]
subprocess.run([c %% "0.4" if "%%s" in c else c for c in child])          # seen by the env sampler
subprocess.Popen([c %% "30" if "%%s" in c else c for c in child])         # left running: killed
if not os.path.exists(%(once)r):
    open(%(once)r, "w").close()
    print(f"RuntimeError: login refused for HF_TOKEN={tok} (token {tok})", file=sys.stderr)
    sys.exit(3)
'''


@pytest.fixture
def served_bare_repo(tmp_path):
    """The toy's target as a bare repository behind a dumb-HTTP server on 127.0.0.1."""
    exp = make_toy(tmp_path)
    bare = tmp_path / "served" / "target.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(tmp_path / "target"), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(tmp_path / "served")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield exp, f"http://alice:{URL_PASSWORD}@127.0.0.1:{server.server_port}/target.git"
    finally:
        server.shutdown()


def cli(tmp_path, *args, check=True, timeout=120):
    cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache", str(tmp_path / "cache"),
           *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p


def test_secrets_reach_the_benchmark_and_no_sink(tmp_path, served_bare_repo):
    exp, url = served_bare_repo
    seen = tmp_path / "seen_tokens"
    (tmp_path / "secretbench.py").write_text(SECRET_BENCH % dict(
        a=TOKEN_A, b=TOKEN_B, key=API_KEY, pw=FLAG_PASSWORD, gh=GITHUB, seen=str(seen),
        once=str(tmp_path / "failed_once")))
    text = exp.read_text().replace('repo = "target"', f'repo = "{url}"')
    text = text.replace('command = "python3 bench.py"',
                        f'command = "python3 {tmp_path / "secretbench.py"} && python3 bench.py"')
    exp.write_text(text + textwrap.dedent(f'''
        [env]
        API_KEY = "{API_KEY}"
    '''))
    arms = ["--patches", f"all HF_TOKEN={TOKEN_A}", "--patches", f"all HF_TOKEN={TOKEN_B}"]
    outputs = []

    # Human output first: progress and log lines ("fetching URL", killed children) go to stderr.
    first = cli(tmp_path, "run", exp, *arms, "--repeat", "2")
    outputs += [first.stdout, first.stderr]
    assert f"fetching http://alice:<redacted>@127.0.0.1" in first.stderr, first.stderr
    assert "killed 1 process(es)" in first.stderr, first.stderr
    # The tables fold a tag over lines; the pieces are left alone (no arm reads HF_TOKEN=<redacted>).
    # (Only the tables: an env-propagation warning names the variable as HF_TOKEN=<redacted> when a
    # process of the benchmark lacks it, as a pyenv shim's bash does when python3 is one.)
    tables = first.stdout.split("\nwarning:")[0]
    assert "HF_TOKEN=<red" in tables and "HF_TOKEN=<redacted>" not in tables, first.stdout
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        (cid,) = db.execute("SELECT id FROM campaigns").fetchone()
        stored_arms = sorted({a for (a,) in db.execute("SELECT arm FROM trials")})
        errors = [e for (e,) in db.execute("SELECT error FROM trials WHERE status != 'ok'")]
    # Two tokens, two arms: each value has its own keyed tag.
    assert len(stored_arms) == 2 and all(a.startswith("all HF_TOKEN=<redacted:") for a in stored_arms), stored_arms
    assert errors and "HF_TOKEN=<redacted>" in errors[0], errors

    # A resume that raises --repeat parses the same command line again: the same tags, the stored
    # trials replayed (not run again), one more per arm.
    again = cli(tmp_path, "run", exp, *arms, "--repeat", "3", "--resume", cid, "--json")
    outputs += [again.stdout, again.stderr]
    res = json.loads(again.stdout)
    assert res["campaign"] == cid
    rows = {a["arm"]: a for a in res["arms"]}
    assert sorted(rows) == stored_arms                      # still two rows, same identities
    assert sum(a["n"] for a in rows.values()) == 5 and sum(a["failed"] for a in rows.values()) == 1
    # The benchmark saw the real values, both of them, every time it ran (4 runs, then 2 more).
    assert sorted(set(seen.read_text().split())) == sorted([TOKEN_A, TOKEN_B])
    assert len(seen.read_text().split()) == 6

    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        crashed, its_arm = db.execute("SELECT trial, arm FROM trials WHERE status != 'ok'").fetchone()
        (other,) = db.execute("SELECT trial FROM trials WHERE arm != ? ORDER BY trial", (its_arm,)).fetchone()
    for args in (["diff", f"{cid}:{crashed}", f"{cid}:{other}"], ["diff", f"{cid}:{crashed}", f"{cid}:{other}", "--json"]):
        d = cli(tmp_path, *args)
        outputs += [d.stdout, d.stderr]
    config = {c["what"]: c for c in json.loads(outputs[-2])["config"]}
    assert config["trial.arm"]["a"] != config["trial.arm"]["b"]      # the two tokens, by their tags
    assert config["trial.arm"]["a"] in stored_arms and config["trial.arm"]["b"] in stored_arms
    for fmt in ("md", "html"):
        out = tmp_path / f"report.{fmt}"
        r = cli(tmp_path, "report", cid, "--format", fmt, "--out", out)
        outputs += [r.stdout, r.stderr, out.read_text()]
        assert "HF_TOKEN=&lt;redacted:" in outputs[-1] or "HF_TOKEN=<redacted:" in outputs[-1]
    cache = cli(tmp_path, "cache", "--json")
    outputs += [cache.stdout, cache.stderr]
    assert "alice:<redacted>@127.0.0.1" in cache.stdout

    # Every sink: every file under the results and cache folders (the database and its WAL, the
    # reports, the cache's JSON files, the trees), and everything the CLI printed.
    files = [p for root in ("res", "cache") for p in (tmp_path / root).rglob("*")
             if p.is_file() and p.name != "redaction.key"]
    assert any(p.name == "meta.json" for p in files)
    leaks = [(s, str(p)) for p in files for s in SECRETS if s.encode() in p.read_bytes()]
    leaks += [(s, f"output {i}") for i, o in enumerate(outputs) for s in SECRETS if s in o]
    assert not leaks, leaks
    key = tmp_path / "res" / "redaction.key"
    assert key.stat().st_mode & 0o077 == 0          # the key is the owner's alone


def test_a_redacted_spec_is_refused_not_run_with_the_tag_as_its_value(tmp_path):
    exp = make_toy(tmp_path)
    p = cli(tmp_path, "run", exp, "--patches", "all HF_TOKEN=<redacted:3f2a1b9c>", check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "is a redacted value: give the real one" in p.stderr


def test_a_spec_that_does_not_parse_keeps_its_secret_out_of_the_error_line(tmp_path):
    exp = make_toy(tmp_path)
    p = cli(tmp_path, "run", exp, "--patches", f"alll HF_TOKEN={TOKEN_A}", check=False)
    assert p.returncode == 2 and "bad arm spec" in p.stderr, p.stderr
    assert TOKEN_A not in p.stderr and "HF_TOKEN=<redacted>" in p.stderr
