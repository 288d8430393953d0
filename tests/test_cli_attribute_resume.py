"""An attribution cut short by its budget goes on, in the same campaign, with a larger one: its
stored trials are replayed, never re-run (--resume keeps the campaign id: docs/contracts.md, Interrupts and resume)."""
import json
import sqlite3

from test_cli_run import campaign_rows, cli, one_line_error
from toyexp import make_toy


def _rows(tmp_path, cid):
    return campaign_rows(tmp_path, cid, "trial, arm, started, metrics")


def _result(tmp_path, cid):
    """The campaign's stored answer (what --json printed), and its status."""
    db = sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite")
    try:
        status, result = db.execute("SELECT status, result FROM campaigns WHERE id=?", (cid,)).fetchone()
    finally:
        db.close()
    assert status == "done", status
    return json.loads(result)


def test_a_campaign_cut_short_by_its_budget_goes_on_with_a_larger_one(tmp_path):
    exp = make_toy(tmp_path, effects={"slow": 0.7, "noop": 1.0, "fast": 1.0})
    args = ("attribute", exp, "--good", "none", "--bad", "all")
    first = cli(tmp_path, *args, "--max-trials", "3", "--json", timeout=300)
    assert first.returncode == 3, first.stderr[-2000:]                      # inconclusive
    r1 = json.loads(first.stdout)
    assert r1["status"] == "inconclusive" and r1["trials"] == 3, r1
    assert r1["resume_with"] == [{"option": "--max-trials", "more_than": 3}], r1     # also in --json
    before = _rows(tmp_path, r1["campaign"])
    assert len(before) == 3

    # finished: a plain resume says how to go on instead of starting anything
    line = one_line_error(cli(tmp_path, *args, "--resume", r1["campaign"]), 2)
    assert "already finished" in line and "larger --max-trials (it had 3)" in line, line
    assert _rows(tmp_path, r1["campaign"]) == before

    more = cli(tmp_path, *args, "--resume", r1["campaign"], "--max-trials", "40", timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]
    assert "max_trials 3 -> 40; its 3 stored trial(s) are replayed first" in " ".join(more.stderr.split())
    # the progress counts the replayed trials: the first one run now is the fourth of the campaign
    first_line = next(l for l in more.stderr.splitlines() if l.startswith("["))
    assert first_line.startswith("[4/"), more.stderr
    r2 = _result(tmp_path, r1["campaign"])
    assert r2["campaign"] == r1["campaign"]
    assert r2["status"] == "culprits" and r2["culprits"] == ["slow"], r2
    assert "resume_with" not in r2, r2           # a clear answer well inside its budget
    after = _rows(tmp_path, r1["campaign"])
    assert after[:3] == before                       # the three trials kept as they were ...
    assert r2["trials"] == len(after) > 3            # ... and counted once: replayed, not re-run

    # a budget is raised on resume, never lowered
    line = one_line_error(cli(tmp_path, *args, "--resume", r1["campaign"], "--max-trials", "20"), 2)
    assert "already finished" in line and "(it had 40)" in line, line

    # an interrupted campaign resumes at its own budget when none is given, and refuses a lower one
    db = sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite")
    with db:
        db.execute("UPDATE campaigns SET status='interrupted' WHERE id=?", (r1["campaign"],))
    db.close()
    line = one_line_error(cli(tmp_path, *args, "--resume", r1["campaign"], "--max-trials", "20"), 2)
    assert "max_trials was 40, now 20 (a budget can be raised on resume, not lowered)" in line, line
    again = cli(tmp_path, *args, "--resume", "--json", timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    r3 = json.loads(again.stdout)
    assert (r3["campaign"], r3["culprits"], r3["trials"]) == (r1["campaign"], ["slow"], r2["trials"])
    assert _rows(tmp_path, r1["campaign"]) == after          # the same answer from the same trials


def test_a_default_attribution_goes_on_as_a_thorough_one(tmp_path):
    """`--resume CAMPAIGN --strategy thorough` on a finished default campaign: its trials are
    replayed into the thorough search, which names the 6% culprit beside the 20% one."""
    exp = make_toy(tmp_path, effects={"big": 0.8, "small": 0.94, "noop": 1.0})
    args = ("attribute", exp, "--good", "none", "--bad", "all")
    first = cli(tmp_path, *args, "--json", timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    r1 = json.loads(first.stdout)
    assert r1["status"] == "culprits" and "big" in r1["culprits"], r1
    before = _rows(tmp_path, r1["campaign"])
    # a plain resume of the finished campaign names both ways to go on
    line = one_line_error(cli(tmp_path, *args, "--resume", r1["campaign"]), 2)
    assert "larger --max-trials" in line and "or with --strategy thorough" in line, line
    more = cli(tmp_path, *args, "--resume", r1["campaign"], "--strategy", "thorough", timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]
    assert "strategy adaptive -> thorough" in " ".join(more.stderr.split()), more.stderr
    r2 = _result(tmp_path, r1["campaign"])
    assert r2["strategy"] == "staged-attribution (thorough)" and r2["culprits"] == ["big", "small"], r2
    after = _rows(tmp_path, r1["campaign"])
    assert after[:len(before)] == before and r2["trials"] == len(after)
    # and not back: a thorough campaign does not resume as a default one (left out, the strategy
    # is the campaign's own: thorough)
    line = one_line_error(cli(tmp_path, *args, "--resume", r1["campaign"], "--strategy", "adaptive",
                              "--max-trials", "400"), 2)
    assert "strategy was 'thorough'" in line, line
