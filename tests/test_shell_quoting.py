"""Paths that look like shell or like placeholders ({out}, quotes, $(...), spaces) in the cache root
or the remote workdir stay paths: the benchmark command is substituted in one pass and quoted."""
import json
import sqlite3
import subprocess
import sys

import pytest

from bisect_lab.placeholders import shell_substitute, substitute
from test_cli_ssh import ssh_toml
from toyexp import make_toy

# Every kind of text that broke, or could break, the quoting of a substituted path.
NASTY = "c-{out}; touch PWNED; echo '{tree}' \"$(touch PWNED2)\" `touch PWNED3` x"


def test_substitution_is_one_pass_and_leaves_unknown_placeholders():
    values = {"tree": "/t/{out}", "out": "/o/{tree}"}
    assert substitute("{tree} {out} {port} ${HOME} {}", values) == "/t/{out} /o/{tree} {port} ${HOME} {}"
    # a future placeholder fits the same function
    assert substitute("--port {port}", {"port": "30000"}) == "--port 30000"
    cmd = shell_substitute("cat {tree}/x > {out}/y", {"tree": "/a b/{out}", "out": "/o'$(x)"})
    assert cmd == "cat '/a b/{out}'/x > '/o'\"'\"'$(x)'/y"
    words = subprocess.run(["bash", "-c", shell_substitute("printf '%s\\n' {tree} {out}", values)],
                           capture_output=True, text=True).stdout.splitlines()
    assert words == ["/t/{out}", "/o/{tree}"]


def _run(tmp_path, exp, cache, env=None):
    cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache", str(cache),
           "run", str(exp), "--patches", "all", "--repeat", "1", "--json"]
    import os
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=e, cwd=tmp_path)


def _pwned(tmp_path):
    from pathlib import Path
    return sorted(str(p) for p in [*tmp_path.rglob("PWNED*"), *Path.home().glob("PWNED*")])


BENCH = "python3 {tree}/bench.py | tee {out}/bench.txt"


def test_a_cache_root_holding_shell_and_placeholders_is_only_a_path(tmp_path):
    exp = make_toy(tmp_path, bench_command=BENCH)
    cache = tmp_path / NASTY
    p = _run(tmp_path, exp, cache)
    assert _pwned(tmp_path) == [], p.stderr
    assert p.returncode == 0, p.stderr
    # {out} went where it should: the trial's own folder under that cache root
    (copy,) = list(cache.rglob("bench.txt"))
    assert "Output token throughput" in copy.read_text()
    assert json.loads(p.stdout)["arms"][0]["n"] == 1


def test_a_remote_workdir_holding_shell_and_placeholders_is_only_a_path(tmp_path, sshd):
    workdir = tmp_path / ("remote " + NASTY)
    exp = make_toy(tmp_path, bench_command=BENCH, extra_toml=ssh_toml(sshd, workdir))
    p = _run(tmp_path, exp, tmp_path / "cache", env=sshd.env())
    assert _pwned(tmp_path) == [], p.stderr
    assert p.returncode == 0, p.stderr
    (copy,) = list(workdir.rglob("bench.txt"))
    assert "Output token throughput" in copy.read_text()
    statuses = sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite").execute(
        "SELECT status FROM trials").fetchall()
    assert statuses == [("ok",)]
