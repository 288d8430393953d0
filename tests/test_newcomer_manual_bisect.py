"""`bisect-lab bisect --run-script CMD`: pass/fail verdicts as `git bisect run`, end to end on a real
git repository with a known first bad commit, through the real CLI in a subprocess."""
import json
import re
import os
import sqlite3
import textwrap

import pytest

from gitrepos import GitRepo, snapshot
from test_cli_run import cli, one_line_error

from bisect_lab.strategies.bisection_passfail import BAD, GOOD, PassFailBisection

# the script git bisect run would be given: 0 good, 1 bad, 125 skip
SCRIPT = "test -f skip.txt && exit 125; grep -qx fine state.txt"


def repo_with_bug(root, n=16, culprit=11, skip=()):
    """``n`` commits after a base; commit ``culprit`` (1-based) breaks state.txt; commits in
    ``skip`` cannot be tested (the script exits 125 there)."""
    repo = GitRepo.init(root / "target")
    repo.commit("base", {"state.txt": "fine\n", "log.txt": "0\n"})
    good = repo.head()
    shas = {}
    for i in range(1, n + 1):
        files = {"log.txt": f"{i}\n", "skip.txt": "x\n" if i in skip else None}
        if i == culprit:
            files["state.txt"] = "broken\n"
        shas[i] = repo.commit(f"commit {i}", files)
    exp = root / "exp.toml"
    exp.write_text(textwrap.dedent("""
        [target]
        repo = "target"
        ref = "main"
        [benchmark]
        command = "python3 never-run.py"
        timeout_s = 20
        parser = "regex"
        metric = "x"
        [benchmark.patterns]
        x = 'x ([0-9.]+)'
        [gpu]
        enabled = false
    """))
    return repo, good, shas, exp


def test_run_script_finds_the_first_bad_commit_and_stores_each_verdict(tmp_path):
    repo, good, shas, exp = repo_with_bug(tmp_path, culprit=11, skip={8})
    before = snapshot(repo.path)
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--run-script", SCRIPT, "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "culprit" and res["commit"] == shas[11], res
    assert res["commit_info"]["subject"] == "commit 11"
    # exact verdicts: the two endpoints and a binary search, far fewer than the 16 candidates
    assert res["trials"] <= 2 + 5, res["trials"]
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        kind, params = db.execute("SELECT kind, params FROM campaigns WHERE id=?", (res["campaign"],)).fetchone()
        verdicts = db.execute("SELECT commit_sha, metrics FROM trials WHERE campaign=?", (res["campaign"],)).fetchall()
    assert kind == "bisect" and json.loads(params)["script"] == SCRIPT
    # each verdict is a trial: 1 good, 2 bad, 3 skip, on the commit it was given for
    verdict_of = {c: json.loads(m)["verdict"] for c, m in verdicts}
    where = {sha: i for i, sha in shas.items()}
    for sha, v in verdict_of.items():
        i = where.get(sha, 0)
        assert v == (3.0 if i == 8 else 2.0 if i >= 11 else 1.0), (i, v)
    assert verdict_of[good] == 1.0 and verdict_of[shas[16]] == 2.0      # both ends checked
    assert snapshot(repo.path) == before, "the user's repository was modified"
    # progress in git bisect's words, not the stored number ("2.00 verdict")
    lines = [l for l in p.stderr.splitlines() if l.startswith("[")]
    assert lines and all(re.search(r" on local: (good|bad|skip)$", l) for l in lines), p.stderr
    assert "verdict" not in "".join(lines)
    # the report reads the stored campaign
    r = cli(tmp_path, "report", res["campaign"], "--out", tmp_path / "rep.md")
    assert r.returncode == 0, r.stderr


def test_run_script_skips_and_a_script_that_passes_at_bad(tmp_path):
    # the culprit sits among skipped commits: the answer is the range, exit 3, as git says
    repo, good, shas, exp = repo_with_bug(tmp_path, n=8, culprit=5, skip={4, 5})
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--run-script", SCRIPT, "--json")
    assert p.returncode == 3, p.stderr
    res = json.loads(p.stdout)
    assert res["status"] == "inconclusive" and res["range"] == [shas[4], shas[5], shas[6]], res
    assert set(res["untestable"]) == {shas[4], shas[5]}
    ok = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--run-script", "true", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == "no-regression"
    assert "is empty" in one_line_error(cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main",
                                            "--run-script", " "), 2)


@pytest.mark.parametrize("n, bad, skipped", [(2, 1, set()), (9, 4, set()), (33, 32, {5, 30}), (33, 32, {31}), (40, 7, {6, 8})])
def test_pass_fail_search_is_exact(n, bad, skipped):
    s = PassFailBisection(n)
    while not s.done:
        for pos in s.ask():
            s.tell(pos, None if pos in skipped else (BAD if pos >= bad else GOOD))
    v = s.verdict()
    if bad - 1 in skipped:     # the first bad commit could be the skipped one before it: git says so too
        assert v.status == "inconclusive" and v.range == (bad - 1, bad), v
        return
    assert v.status == "culprit" and v.index == bad and v.trials <= 2 + len(skipped) + n.bit_length(), v


def test_manual_verdicts_in_git_bisect_style(tmp_path):
    repo, good, shas, exp = repo_with_bug(tmp_path, n=8, culprit=5, skip={3})
    before = snapshot(repo.path)
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--manual", "--json")
    assert p.returncode == 0, p.stderr
    step = json.loads(p.stdout)
    cid = step["campaign"]
    for _ in range(8):                      # the user: tries the named tree, says what it is
        assert step["status"] == "waiting", step
        tree = step["tree"]
        with open(f"{tree}/state.txt") as f:
            fine = f.read() == "fine\n"
        import os
        word = "skip" if os.path.exists(f"{tree}/skip.txt") else "good" if fine else "bad"
        # the latest unfinished bisection by default; the campaign named every other time
        v = cli(tmp_path, "verdict", word, *([cid] if step["judged"] % 2 else []), "--json")
        assert v.returncode in (0, 3), v.stderr
        step = json.loads(v.stdout)
        if step.get("status") != "waiting":
            break
    assert step["status"] == "culprit" and step["commit"] == shas[5], step
    assert snapshot(repo.path) == before, "the user's repository was modified"
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        hosts = {h for (h,) in db.execute("SELECT host FROM trials WHERE campaign=?", (cid,))}
        status = db.execute("SELECT status FROM campaigns WHERE id=?", (cid,)).fetchone()[0]
    assert hosts == {"manual"} and status == "done"
    assert "already finished" in one_line_error(cli(tmp_path, "verdict", "good", cid), 2)
    # one more verdict with no campaign named: said as a verdict with nothing waiting, not a resume
    line = one_line_error(cli(tmp_path, "verdict", "good"), 2)
    assert "no manual bisection is waiting for a verdict" in line and "resume" not in line, line


def test_a_named_commit_is_not_repeated_as_a_one_commit_candidate_range(tmp_path):
    repo, good, shas, exp = repo_with_bug(tmp_path, n=6, culprit=3, skip=set())
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--run-script", SCRIPT)
    assert p.returncode == 0, p.stderr
    assert f"first bad commit: {shas[3]}" in p.stdout and "candidate range" not in p.stdout, p.stdout
