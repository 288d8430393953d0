"""`bisect-lab bisect` end to end on real repositories: linear, merged, untestable commits."""
import json
import re
import textwrap

import pytest

from gitrepos import GitRepo, PatchSpec, write_patchset
from test_cli_run import campaign_rows, cli, go_on_campaign, one_line_error

BENCH = textwrap.dedent('''
    import os, random
    here = os.path.dirname(os.path.abspath(__file__))
    speed = float(open(os.path.join(here, "speed.txt")).read())
    if os.path.exists(os.path.join(here, "tuned.txt")):
        speed *= 1.0   # the patch is performance-neutral: it must only apply
    v = 100.0 * speed * random.gauss(1.0, 0.01)
    print(f"Output token throughput (tok/s): {v:.3f}")
''')


def repo_with_history(root, n=12, culprit=7, *, side_culprit=False, second_culprit=None):
    """Linear history of ``n`` commits; commit ``culprit`` (1-based) makes it 25% slower.

    With ``side_culprit``: the slowdown is on a side branch merged near the end. With
    ``second_culprit``: that commit makes it slower again (0.75 -> 0.6).
    Every commit touches notes.txt at the line the patch edits only in commit 4 (so the patch
    does not apply there: an untestable commit).
    """
    repo = GitRepo.init(root / "target")
    repo.commit("base", {"bench.py": BENCH, "speed.txt": "1.0\n", "conf.txt": "a\nb\nc\n", "log.txt": "0\n"})
    good = repo.head()
    shas = {}
    for i in range(1, n + 1):
        files = {"log.txt": f"{i}\n"}
        if i == culprit and not side_culprit:
            files["speed.txt"] = "0.75\n"
        if i == second_culprit:
            files["speed.txt"] = "0.6\n"
        if i == 4:
            files["conf.txt"] = "a\nB-changed\nc\n"
        if i == 5:
            files["conf.txt"] = "a\nb\nc\n"
        if side_culprit and i == 6:
            repo.branch("side", repo.head())
            repo.switch("side")
            repo.commit("side 1", {"side1.txt": "x\n"})
            shas["side1"] = repo.head()
            repo.commit("side 2: the slowdown", {"speed.txt": "0.75\n"})
            shas["side2"] = repo.head()
            repo.commit("side 3", {"side3.txt": "y\n"})
            repo.switch("main")
        repo.commit(f"commit {i}", files)
        shas[i] = repo.head()
        if side_culprit and i == 9:
            shas["merge"] = repo.merge("side", "merge side")
    patch = repo.patch({"conf.txt": "a\nb-tuned\nc\n", "tuned.txt": "1\n"}, base=good)
    write_patchset(root / "patches", [PatchSpec("tune", patch, aliases=("t",))])
    exp = root / "bisect.toml"
    exp.write_text(textwrap.dedent(f"""
        [target]
        repo = "target"
        ref = "main"
        patches = "patches"
        [benchmark]
        command = "python3 bench.py"
        timeout_s = 20
        parser = "regex"
        metric = "output_throughput"
        [benchmark.patterns]
        output_throughput = 'Output token throughput \\(tok/s\\): ([0-9.]+)'
        [gpu]
        enabled = false
        [design]
        seed = 3
        max_trials = 80
    """))
    return repo, good, shas, exp


def test_bisect_linear_history_with_patch_and_untestable_commit(tmp_path):
    repo, good, shas, exp = repo_with_history(tmp_path)
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--patches", "only tune", "--json",
            timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "culprit" and res["commit"] == shas[7]
    assert res["commit_info"]["subject"] == "commit 7"
    assert res["effect"]["ratio"] == pytest.approx(0.75, abs=0.03) and res["posterior"] >= 0.95
    assert res["effect"]["ci_low"] < res["effect"]["ratio"] < res["effect"]["ci_high"]
    assert 0 < res["trials"] <= 80
    assert shas[4] not in [res["commit"]]
    # commit 4 is untestable if the strategy ever probed it; it is never called bad
    for sha, why in res["untestable"].items():
        assert sha == shas[4] and "apply-failed" in why


def test_bisect_side_branch_culprit_is_the_commit_not_the_merge(tmp_path):
    repo, good, shas, exp = repo_with_history(tmp_path, n=12, side_culprit=True)
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "culprit", res
    assert res["commit"] == shas["side2"], (res["commit"], shas)
    assert len(res["levels"]) == 2 and res["levels"][0]["commit"] == shas["merge"]


def test_bisect_no_regression(tmp_path):
    repo, good, shas, exp = repo_with_history(tmp_path, culprit=99)
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "no-regression" and res["commit"] is None


def test_bisect_usage_errors(tmp_path):
    repo, good, shas, exp = repo_with_history(tmp_path, n=3)
    assert "same commit" in one_line_error(cli(tmp_path, "bisect", exp, "--good", "main", "--bad", "main"), 2)
    assert "unknown" in one_line_error(cli(tmp_path, "bisect", exp, "--good", "nope", "--bad", "main"), 2).lower()
    assert "is --good an ancestor" in one_line_error(cli(tmp_path, "bisect", exp, "--good", "main", "--bad", good), 2)


def test_bisect_with_a_benchmark_that_never_runs_is_exit_4(tmp_path):
    repo, good, shas, exp = repo_with_history(tmp_path, n=4)
    exp.write_text(exp.read_text().replace('command = "python3 bench.py"', 'command = "echo boom >&2; exit 3"'))
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--json")
    assert p.returncode == 4 and "boom" in p.stderr, (p.returncode, p.stderr)


def test_bisect_plans_from_stored_trials_of_its_two_ends(tmp_path):
    """Before its first trial, a bisection says what earlier trials of the arm at its good and bad
    commits (same experiment, same host) imply: trials per commit to resolve min_effect."""
    from test_cli_attribute_planning import _ok_counts, _planning_line

    repo, good, shas, exp = repo_with_history(tmp_path, n=6, culprit=3)
    _planning_line(tmp_path, rf"planning: no earlier measurements of 'none' at {good[:12]} and {shas[6][:12]} "
                             "on local", "bisect", exp, "--good", good, "--bad", "main")

    counts = _ok_counts(tmp_path, "commit_sha", "arm='none'")
    m, log = _planning_line(
        tmp_path, rf"planning from (\d+) stored trial\(s\) of 'none' at {good[:12]} and (\d+) at {shas[6][:12]} "
                  r"on local \(CV good ([\d.]+)%, bad ([\d.]+)%\): to resolve 2% at this noise: about (\d+) trials "
                  r"per commit \(budget 80 trials, 6 candidate commits\)",
        "bisect", exp, "--good", good, "--bad", "main")
    assert (int(m[1]), int(m[2])) == (counts[good], counts[shas[6]])
    assert 0 < float(m[3]) < 5 and 0 < float(m[4]) < 5            # the toy benchmark's 1% noise
    assert log.index(m[0]) < log.index("[1/")                       # before this campaign's first trial
    # and what the 25% slowdown those trials already show costs, not only the 2% min_effect
    seen = re.search(rf"per commit \(budget 80 trials, 6 candidate commits\); the stored trials show "
                     rf"{shas[6][:12]} ([\d.]+)% slower than {good[:12]}: about (\d+) trials per commit settle that",
                     log)
    # (never more than min_effect's count; equal when the noise is so low that both need the minimum)
    assert seen and 20 <= float(seen[1]) <= 30 and int(seen[2]) <= int(m[5]), log


def test_bisect_cut_short_by_its_budget_goes_on_with_a_larger_one(tmp_path):
    """Six trials cannot find commit 7 of 12: the same campaign, resumed with a larger budget,
    replays them (never re-run) and finds it."""
    repo, good, shas, exp = repo_with_history(tmp_path)
    args = ("bisect", exp, "--good", good, "--bad", "main")
    first = cli(tmp_path, *args, "--max-trials", "6", timeout=300)
    assert first.returncode == 3, first.stderr[-2000:]
    assert "inconclusive" in first.stdout, first.stdout
    cid = go_on_campaign(first.stdout, "--max-trials")
    before = campaign_rows(tmp_path, cid, "trial, commit_sha, started")
    more = cli(tmp_path, *args, "--resume", cid, "--max-trials", "80", "--json", timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]
    res = json.loads(more.stdout)
    assert res["campaign"] == cid and res["status"] == "culprit" and res["commit"] == shas[7], res
    after = campaign_rows(tmp_path, cid, "trial, commit_sha, started")
    assert after[:len(before)] == before and res["trials"] == len(after) > len(before)


def test_bisect_of_an_earlier_version_without_its_direction_resumes_and_records_it(tmp_path):
    """A bisection stored before campaigns recorded their metric and direction resumes (it is not
    'different parameters'); the resume records them, so its report states the direction."""
    import sqlite3
    repo, good, shas, exp = repo_with_history(tmp_path)
    args = ("bisect", exp, "--good", good, "--bad", "main")
    first = cli(tmp_path, *args, "--max-trials", "6", timeout=300)
    cid = go_on_campaign(first.stdout, "--max-trials")
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        params = json.loads(db.execute("SELECT params FROM campaigns WHERE id=?", (cid,)).fetchone()[0])
        old = {k: v for k, v in params.items() if k not in ("metric", "higher_is_better")}
        db.execute("UPDATE campaigns SET params=? WHERE id=?", (json.dumps(old), cid))
    more = cli(tmp_path, "bisect", "--resume", cid, "--max-trials", "80", "--json", timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]
    assert json.loads(more.stdout)["commit"] == shas[7]
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        params = json.loads(db.execute("SELECT params FROM campaigns WHERE id=?", (cid,)).fetchone()[0])
    assert params["metric"] == "output_throughput" and params["higher_is_better"] is True


def test_bisect_two_steps_is_several_with_each_commit_and_exit_0(tmp_path):
    """Two slowdowns in the range (commit 3: -25%, commit 9: -20% more) are not one culprit: the
    answer is 'several', each step with its commit and its own effect, a found regression (exit 0);
    --json's "commit" is the first step's."""
    repo, good, shas, exp = repo_with_history(tmp_path, n=12, culprit=3, second_culprit=9)
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--json", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    assert res["status"] == "several", {k: res.get(k) for k in ("status", "check", "commit")}
    assert [st["commit"] for st in res["steps"]] == [shas[3], shas[9]]
    assert res["commit"] == shas[3]
    assert res["steps"][0]["effect"] == pytest.approx(0.75, abs=0.03)
    assert res["steps"][1]["effect"] == pytest.approx(0.8, abs=0.03)
    from rich.console import Console

    from bisect_lab.render import bisect_result
    console = Console(record=True, width=200)
    bisect_result(res, console)
    human = console.export_text()
    assert "several" in human and shas[3][:12] in human and shas[9][:12] in human, human
