"""Progress that says what is happening (issue 24, item 2), through the CLI in a real subprocess:
every line names what was measured (a bisection: the commit's short hash and subject), the total
is the budget from the start ("at most" for a search), an ETA comes once a few trials are in, and
under --json the lines go to stderr while stdout stays one JSON object."""
import json
import re

from gitrepos import git
from test_cli_bisect import repo_with_history
from test_cli_run import cli
from toyexp import make_toy

LINE = re.compile(r"^\[(\d+)/(\d+)( at most)?(, ETA (?:at most )?\S+)?\] (.+?) on local: (.+)$")


def _lines(stderr: str) -> list[re.Match]:
    return [m for m in map(LINE.match, stderr.splitlines()) if m]


def test_bisect_progress_names_each_commit_against_the_budget_under_json(tmp_path):
    repo, good, shas, exp = repo_with_history(tmp_path, n=6, culprit=3)
    p = cli(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--max-trials", "30", "--json", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)                       # stdout: exactly one JSON object
    assert res["commit"] == shas[3]
    lines = _lines(p.stderr)
    assert len(lines) == res["trials"] >= 4, p.stderr[-2000:]
    subjects = {sha: git(repo.path, "log", "-1", "--format=%s", sha) for sha in [good, *shas.values()]}
    for k, m in enumerate(lines, 1):
        assert int(m[1]) == k and int(m[2]) == 30 and m[3] == " at most", m[0]     # the budget, not a guess
        what = re.fullmatch(r"commit ([0-9a-f]{10}) '([^']*)'", m[5])
        assert what, m[0]
        (sha,) = [s for s in subjects if s.startswith(what[1])]
        assert what[2] == subjects[sha], m[0]
    # an ETA once three trial times are in, never before
    assert not any(m[4] for m in lines[:3])
    assert all(m[4] for m in lines[3:-1] if int(m[1]) < 30), [m[0] for m in lines]


def test_run_progress_names_the_arm_and_the_exact_total(tmp_path):
    exp = make_toy(tmp_path)
    p = cli(tmp_path, "run", exp, "--patches", "all", "--patches", "none", "--repeat", "3", "--json")
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)
    lines = _lines(p.stderr)
    assert [int(m[1]) for m in lines] == list(range(1, 7)) and {m[2] for m in lines} == {"6"}
    assert not any(m[3] for m in lines)                  # a fixed schedule: no "at most"
    assert {m[5] for m in lines} == {"arm all", "arm none"}
    assert re.search(r"^results: .+ \(--results\)$", p.stderr, re.M), p.stderr
