"""`bisect-lab init` and `bisect-lab check` end to end, through the real CLI in a subprocess."""
import json
import subprocess

from gitrepos import GitRepo, snapshot
from test_cli_run import cli, one_line_error
from test_gpu import gpu
from toyexp import make_toy

from bisect_lab.config import load_experiment


def dirty_repo(root):
    repo = GitRepo.init(root / "proj")
    repo.commit("base", {"pkg/a.py": "x = 1\n", "README": "hi\n"})
    repo.write({"pkg/a.py": "x = 2000\n", "pkg/new.py": "y = 3\n"})     # unstaged + untracked
    return repo


def test_init_writes_beside_the_repo_captures_the_changes_and_never_overwrites(tmp_path):
    repo = dirty_repo(tmp_path)
    before = snapshot(repo.path)
    p = cli(tmp_path, "init", repo.path, "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    exp_file = tmp_path / "proj-bisect-lab" / "experiment.toml"
    assert res["experiment"] == str(exp_file) and sorted(res["patch_names"]) == ["a", "new"], res
    assert snapshot(repo.path) == before, "init modified the repository"
    exp = load_experiment(exp_file)        # a valid experiment, its placeholders marked
    assert exp.target.ref == repo.head() and sorted(exp.patchset.names) == ["a", "new"]
    assert "FILL-IN" in exp.benchmark.command
    # the captured patches apply where the experiment says
    ok = cli(tmp_path, "patches", "check", exp_file)
    assert ok.returncode == 0, ok.stderr
    # check refuses the placeholders; a second init refuses to overwrite; never inside the repo
    assert "FILL-IN" in one_line_error(cli(tmp_path, "check", exp_file, "--no-probe"), 2)
    assert "not overwritten" in one_line_error(cli(tmp_path, "init", repo.path), 2)
    assert "inside the repository" in one_line_error(cli(tmp_path, "init", repo.path, "--out",
                                                         repo.path / "exp.toml"), 2)
    # a clean checkout: an experiment without a patch set, the next step a bisect
    clean = GitRepo.init(tmp_path / "clean")
    clean.commit("base", {"f.txt": "1\n"})
    c = cli(tmp_path, "init", clean.path, "--out", tmp_path / "mine" / "clean.toml")
    assert c.returncode == 0, c.stderr
    assert "no uncommitted changes" in c.stdout and "bisect-lab check" in c.stdout and "bisect" in c.stdout
    assert load_experiment(tmp_path / "mine" / "clean.toml").patchset is None
    assert not (tmp_path / "mine" / "clean-patches").exists()


def test_check_shows_what_would_run_and_probes_the_noise(tmp_path):
    toy = make_toy(tmp_path, bench_command="python3 bench.py --tree {tree}")
    p = cli(tmp_path, "check", toy, "--probe", "3", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["problems"] == [] and res["patches"]["ok"] is True
    wr = res["would_run"]
    assert wr["arms"] == ["none", "all"] and wr["hosts"] == ["local"]
    assert "{tree}" not in wr["command"] and str(tmp_path / "cache") in wr["command"], wr["command"]
    pr = res["probe"]
    assert pr["n"] == 3 and pr["arm"] == "all"
    # the toy's noise is about 1% CV: a 2% effect needs a handful of trials, not hundreds. Three draws
    # can agree by chance (CI met a CV of 0.0002), so only "spread seen, and not a large one" is held.
    assert 0 < pr["cv"] < 0.05 and 2 <= pr["trials_per_arm"] < 60, pr
    assert pr["trial_s"] > 0 and res["machine"][0]["cores"] >= 1
    # nothing stored: a probe is no campaign
    assert not (tmp_path / "res" / "bisect-lab.sqlite").exists() or "check" not in \
        subprocess.run(["sqlite3", tmp_path / "res" / "bisect-lab.sqlite", "SELECT kind FROM campaigns"],
                       capture_output=True, text=True).stdout
    h = cli(tmp_path, "check", toy, "--probe", "2")
    assert h.returncode == 0, h.stderr
    out = " ".join(h.stdout.split())
    assert "a 2% effect needs about" in out and "trials per arm" in out and "`bisect-lab run` would measure none (the baseline) and all on local" in out


def test_check_names_a_conflicting_patch_set_and_a_busy_gpu(tmp_path):
    toy = make_toy(tmp_path, conflict=True)
    toy.write_text(toy.read_text().replace("enabled = false", "enabled = true"))
    nvml = tmp_path / "nvml.json"
    nvml.write_text(json.dumps({"driver_version": "570.124.06", "cuda_driver_version": "12.8",
                                "gpus": [gpu(memory_used_mb=40000, utilization_gpu=97,
                                             processes=[{"pid": 1, "used_memory_mb": 40000}])]}))
    p = cli(tmp_path, "check", toy, "--no-probe", "--json", env={"BISECT_LAB_FAKE_NVML": str(nvml)})
    assert p.returncode == 2, p.stderr
    res = json.loads(p.stdout)
    assert res["patches"]["ok"] is False and any("clash" in x for x in res["problems"]), res["problems"]
    assert any("GPU 0 is busy" in w for w in res["warnings"]), res["warnings"]
    assert "Traceback" not in p.stderr
