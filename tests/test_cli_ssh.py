"""The same end-to-end trial tests over SSH: a real sshd on localhost, the tree built "remotely"
(in the remote host's own cache, shipped as a git bundle), the benchmark run through the SSH host."""
import json
import sqlite3

import pytest

from test_cli_run import cli, one_line_error
from toyexp import make_toy


def ssh_toml(sshd, workdir, *, targets=None, timeout=5):
    targets = targets or [sshd.target]
    return (f"[host]\nssh = {json.dumps(targets)}\nport = {sshd.port}\nkey = {json.dumps(sshd.key_path)}\n"
            f"workdir = {json.dumps(str(workdir))}\nconnect_timeout_s = {timeout}\n")


def test_run_over_ssh_json_contract(tmp_path, sshd):
    exp = make_toy(tmp_path, extra_toml=ssh_toml(sshd, tmp_path / "remote"))
    p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "all-minus slow", "--repeat", "3", "--json",
            env=sshd.env())
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["hosts"] == [sshd.target] or res["hosts"][0].endswith(str(sshd.port)) or len(res["hosts"]) == 1
    (c,) = res["comparisons"]
    assert c["verdict"] == "different" and c["ratio"] == pytest.approx(1 / 0.7, rel=0.05)
    # The tree lives on the remote side: in its workdir, not in the local cache.
    assert any((tmp_path / "remote").rglob("knobs_slow.py"))
    assert not any((tmp_path / "cache").rglob("knobs_slow.py"))


def test_crash_over_ssh_is_exit_4_with_the_benchmarks_error(tmp_path, sshd):
    exp = make_toy(tmp_path, extra_toml='[env]\nTOY_CRASH = "1"\n' + ssh_toml(sshd, tmp_path / "remote"))
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "3", env=sshd.env())
    assert p.returncode == 4 and "CUDA error: out of memory (toy)" in p.stderr, p.stderr


def test_env_verification_over_ssh(tmp_path, sshd):
    exp = make_toy(tmp_path, extra_toml=ssh_toml(sshd, tmp_path / "remote"))
    p = cli(tmp_path, "run", exp, "--patches", "all NCCL_PROTO=LL TOY_SPAWN=1", "--repeat", "1", "--json",
            env=sshd.env())
    assert p.returncode == 0, p.stderr
    v = {x["var"]: x for x in json.loads(p.stdout)["env_propagation"]["vars"]}["NCCL_PROTO"]
    assert 0 < v["matched"] < v["total"]


def test_host_down_is_exit_4_and_keeps_stored_results(tmp_path, sshd):
    exp = make_toy(tmp_path)
    ok = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "2", "--json")
    assert ok.returncode == 0
    down = make_toy(tmp_path / "down", extra_toml=ssh_toml(sshd, tmp_path / "remote", targets=["root@127.0.0.1:1"],
                                                            timeout=2))
    p = cli(tmp_path, "run", down, "--patches", "all", "--repeat", "2", env=sshd.env())
    assert p.returncode == 4 and "Traceback" not in p.stderr, p.stderr
    line = one_line_error(p, 4)
    assert "127.0.0.1" in line
    n = sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite").execute(
        "SELECT COUNT(*) FROM trials WHERE status='ok'").fetchone()[0]
    assert n == 2
