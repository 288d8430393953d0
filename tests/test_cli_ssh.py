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


def test_two_hosts_run_in_parallel_and_are_compared_within_each(tmp_path, sshd):
    # Two "GPU boxes": the same sshd reached as user@host and through its ssh_config alias.
    exp = make_toy(tmp_path, extra_toml=ssh_toml(sshd, tmp_path / "remote", targets=[sshd.target, sshd.alias]))
    p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "all-minus slow", "--repeat", "2", "--json",
            env=sshd.env())
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert len(res["hosts"]) == 2
    # Every host measured every arm; comparisons are per host, never across hosts.
    assert {a["arm"]: a["n"] for a in res["arms"]} == {"all": 4, "all-minus slow": 4}
    assert sorted(c["host"] for c in res["comparisons"]) == sorted(res["hosts"])
    rows = sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite").execute(
        "SELECT host, arm, COUNT(*) FROM trials GROUP BY host, arm").fetchall()
    assert len(rows) == 4 and all(n == 2 for _, _, n in rows)


def test_attribute_with_two_hosts_uses_both(tmp_path, sshd):
    exp = make_toy(tmp_path, extra_toml=ssh_toml(sshd, tmp_path / "remote", targets=[sshd.target, sshd.alias]),
                   effects={"slow": 0.7, "noop": 1.0})
    p = cli(tmp_path, "attribute", exp, "--good", "none", "--bad", "all", "--json", "--max-trials", "40",
            env=sshd.env(), timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["culprits"] == ["slow"]
    hosts = {r[0] for r in sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite").execute("SELECT host FROM trials")}
    # one arm per host at a time, compared within hosts (no "runs on the first host only" any more)
    assert len(hosts) == 2 and not any("never compared across machines" in w for w in res["warnings"])
