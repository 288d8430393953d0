"""The smaller commands end to end: patches list/check/capture, cache, diff, gpu status."""
import json

import pytest

from gitrepos import dirty_checkout_with_stash, snapshot
from test_cli_run import cli, one_line_error
from toyexp import make_toy


def test_patches_list_and_check(tmp_path):
    exp = make_toy(tmp_path)
    p = cli(tmp_path, "patches", "list", exp, "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)}
    assert set(rows) == {"slow", "noop", "gated", "fast"}
    assert rows["gated"]["files"] == ["gated_on", "knobs_gated.py"] or set(rows["gated"]["files"]) == {"gated_on", "knobs_gated.py"}
    human = cli(tmp_path, "patches", "list", exp)
    assert "slow" in human.stdout and "+1 -0" in human.stdout
    ok = cli(tmp_path, "patches", "check", exp)
    assert ok.returncode == 0, ok.stderr


def test_patches_check_names_conflicting_pair(tmp_path):
    exp = make_toy(tmp_path, conflict=True)
    p = cli(tmp_path, "patches", "check", exp)
    line = one_line_error(p, 2)
    assert "clash" in p.stdout + line and "slow" in p.stdout + line


def test_patches_capture_never_touches_the_checkout(tmp_path):
    repo = dirty_checkout_with_stash(tmp_path / "user")
    before = snapshot(repo.path)
    p = cli(tmp_path, "patches", "capture", "--repo", repo.path, "--out", tmp_path / "captured", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["patches"]
    assert snapshot(repo.path) == before
    assert (tmp_path / "captured" / "patchset.toml").is_file()


def test_cache_show_and_prune(tmp_path):
    exp = make_toy(tmp_path)
    assert cli(tmp_path, "run", exp, "--patches", "all", "--patches", "none", "--repeat", "1").returncode == 0
    info = json.loads(cli(tmp_path, "cache", "--json").stdout)
    assert len(info["trees"]) == 2
    assert "2 trees" in cli(tmp_path, "cache").stdout
    p = cli(tmp_path, "cache", "prune", "--max-trees", "1")
    assert p.returncode == 0 and "removed 1 tree" in p.stdout
    assert len(json.loads(cli(tmp_path, "cache", "--json").stdout)["trees"]) == 1


def test_diff_between_campaigns_shows_config_and_env(tmp_path):
    exp = make_toy(tmp_path)
    a = json.loads(cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "1", "--json").stdout)["campaign"]
    b = json.loads(cli(tmp_path, "run", exp, "--patches", "all NCCL_PROTO=LL", "--repeat", "1", "--json").stdout)["campaign"]
    p = cli(tmp_path, "diff", a, f"{b}:0", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    paths = {c["path"] for c in res["fingerprint"]}
    assert "env.NCCL_PROTO" in paths
    assert any(c["what"] == "trial.arm" for c in res["config"])
    assert "NCCL_PROTO" in cli(tmp_path, "diff", a, b).stdout
    assert "no trial 99" in one_line_error(cli(tmp_path, "diff", a, f"{b}:99"), 2)


def test_gpu_status_on_a_host_without_gpu(tmp_path):
    p = cli(tmp_path, "gpu", "status", "--json")
    assert p.returncode == 0, p.stderr
    (snap,) = json.loads(p.stdout).values()
    assert snap["gpus"] == [] and "no GPU" in snap["reason"]


def test_version_and_help(tmp_path):
    assert cli(tmp_path, "--version").stdout.startswith("bisect-lab ")
    p = cli(tmp_path)
    assert p.returncode == 2 and "COMMAND" in p.stderr
