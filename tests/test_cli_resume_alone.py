"""`--resume CAMPAIGN` alone continues a campaign: its experiment, arms, good / bad, strategy and
budget are read back from the results, from any working directory (docs/contracts.md, Interrupts
and resume). Real subprocesses on the toy targets; the stored trials are replayed, never re-run."""
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli_bisect import repo_with_history
from test_cli_run import campaign_rows, one_line_error
from toyexp import make_toy

REPO = Path(__file__).resolve().parent.parent


def elsewhere(tmp_path, *args, timeout=300):
    """The CLI run from a folder that holds neither the experiment nor the results (``--results``
    names them): nothing may be found through the working directory."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("BISECT_LAB_RESULTS", None)
    cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache", str(tmp_path / "cache"),
           *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def interrupted(tmp_path, cid):
    """Mark a campaign as a Ctrl-C leaves it (every trial it stored kept)."""
    db = sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite")
    with db:
        db.execute("UPDATE campaigns SET status='interrupted' WHERE id=?", (cid,))
    db.close()


def test_run_resumes_from_its_id_alone_and_measures_more_with_a_larger_repeat(tmp_path):
    toy = make_toy(tmp_path, effects={"slow": 0.9, "noop": 1.0})
    first = elsewhere(tmp_path, "run", toy, "--patches", "none", "--patches", "all", "--repeat", "2", "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    r1 = json.loads(first.stdout)
    cid = r1["campaign"]
    before = campaign_rows(tmp_path, cid)
    assert len(before) == 4

    # interrupted: a bare --resume (no EXPERIMENT, no arms) finds it, says so, and replays it
    interrupted(tmp_path, cid)
    again = elsewhere(tmp_path, "run", "--resume", "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming {cid} (interrupted), the latest unfinished run campaign in" in again.stderr, again.stderr
    assert str(toy.resolve()) in again.stderr
    r2 = json.loads(again.stdout)
    assert r2["campaign"] == cid and {a["arm"]: a["n"] for a in r2["arms"]} == {"none": 2, "all": 2}, r2
    assert campaign_rows(tmp_path, cid) == before                  # nothing re-run, nothing added

    # finished: --resume CAMPAIGN with a larger --repeat measures two more per arm, the arms its own
    more = elsewhere(tmp_path, "run", "--resume", cid, "--repeat", "3", "--json")
    assert more.returncode == 0, more.stderr[-2000:]
    r3 = json.loads(more.stdout)
    assert r3["campaign"] == cid and {a["arm"]: a["n"] for a in r3["arms"]} == {"none": 3, "all": 3}, r3
    assert set(r3) - {"resume_with"} == set(r1) - {"resume_with"}          # the same shape of answer
    after = campaign_rows(tmp_path, cid)
    assert after[:4] == before and len(after) == 6

    # arms given beside --resume must be the campaign's own
    line = one_line_error(elsewhere(tmp_path, "run", "--resume", cid, "--patches", "all", "--repeat", "9"), 2)
    assert f"cannot resume {cid} with different parameters: arms" in line, line
    # an EXPERIMENT given must be the campaign's own
    other = make_toy(tmp_path / "other")
    line = one_line_error(elsewhere(tmp_path, "run", other, "--resume", cid, "--repeat", "9"), 2)
    assert f"campaign {cid} belongs to {toy.resolve()}, not {other.resolve()}" in line, line
    # nothing unfinished left: a bare --resume says so (any experiment)
    line = one_line_error(elsewhere(tmp_path, "run", "--resume"), 2)
    assert "nothing to resume: no unfinished run campaign in" in line, line
    assert campaign_rows(tmp_path, cid) == after


def test_attribute_resumes_from_its_id_alone(tmp_path):
    toy = make_toy(tmp_path, effects={"slow": 0.7, "noop": 1.0, "fast": 1.0})
    first = elsewhere(tmp_path, "attribute", toy, "--good", "none", "--bad", "all", "--max-trials", "3", "--json")
    assert first.returncode == 3, first.stderr[-2000:]                    # inconclusive: the budget ran out
    r1 = json.loads(first.stdout)
    cid = r1["campaign"]
    before = campaign_rows(tmp_path, cid, "trial, arm, started, metrics")
    assert r1["trials"] == len(before) == 3

    # finished, nothing raised: the campaign is found (not the bundled demo) and says how to go on
    line = one_line_error(elsewhere(tmp_path, "attribute", "--resume", cid), 2)
    assert f"campaign {cid} is already finished" in line and "larger --max-trials (it had 3)" in line, line

    # interrupted: --resume CAMPAIGN alone keeps its budget, replays its trials, gives the same answer
    interrupted(tmp_path, cid)
    same = elsewhere(tmp_path, "attribute", "--resume", cid, "--json")
    assert same.returncode == 3, same.stderr[-2000:]
    r2 = json.loads(same.stdout)
    assert (r2["campaign"], r2["status"], r2["trials"], r2["max_trials"]) == (cid, "inconclusive", 3, 3), r2
    assert (r2["good"], r2["bad"], r2["factors"]) == (r1["good"], r1["bad"], r1["factors"])
    assert set(r2) == set(r1)
    assert campaign_rows(tmp_path, cid, "trial, arm, started, metrics") == before

    # a larger budget lets it go on: the three kept, the answer found
    more = elsewhere(tmp_path, "attribute", "--resume", cid, "--max-trials", "40", "--json")
    assert more.returncode == 0, more.stderr[-2000:]
    r3 = json.loads(more.stdout)
    assert r3["campaign"] == cid and r3["status"] == "culprits" and r3["culprits"] == ["slow"], r3
    after = campaign_rows(tmp_path, cid, "trial, arm, started, metrics")
    assert after[:3] == before and r3["trials"] == len(after) > 3

    # arms given beside --resume must be the campaign's; a strategy other than the one upgrade is refused
    line = one_line_error(elsewhere(tmp_path, "attribute", "--resume", cid, "--good", "only slow",
                                    "--max-trials", "99"), 2)
    assert f"cannot resume {cid} with different parameters: " in line, line
    line = one_line_error(elsewhere(tmp_path, "attribute", "--resume", cid, "--strategy", "screening",
                                    "--max-trials", "99"), 2)
    assert f"cannot resume {cid} with different parameters: " in line, line
    assert campaign_rows(tmp_path, cid, "trial, arm, started, metrics") == after


def test_bisect_resumes_from_its_id_alone(tmp_path):
    repo, good, shas, exp = repo_with_history(tmp_path)
    first = elsewhere(tmp_path, "bisect", exp, "--good", good, "--bad", "main", "--patches", "only tune",
                      "--max-trials", "6", "--json")
    assert first.returncode == 3, first.stderr[-2000:]
    r1 = json.loads(first.stdout)
    cid = r1["campaign"]
    before = campaign_rows(tmp_path, cid, "trial, commit_sha, started")
    assert r1["status"] == "inconclusive" and r1["trials"] == len(before) > 0

    # interrupted: --resume CAMPAIGN alone: its refs (full shas), its arm and its budget
    interrupted(tmp_path, cid)
    same = elsewhere(tmp_path, "bisect", "--resume", cid, "--json")
    assert same.returncode == 3, same.stderr[-2000:]
    r2 = json.loads(same.stdout)
    assert (r2["campaign"], r2["arm"], r2["good"], r2["max_trials"]) == (cid, r1["arm"], good, 6), r2
    assert r2["trials"] == r1["trials"] and set(r2) == set(r1)
    assert campaign_rows(tmp_path, cid, "trial, commit_sha, started") == before

    more = elsewhere(tmp_path, "bisect", "--resume", cid, "--max-trials", "80", "--json")
    assert more.returncode == 0, more.stderr[-2000:]
    r3 = json.loads(more.stdout)
    assert r3["campaign"] == cid and r3["status"] == "culprit" and r3["commit"] == shas[7], r3
    assert r3["arm"] == r1["arm"] == "all"       # "only tune" of its one patch: not the default none
    after = campaign_rows(tmp_path, cid, "trial, commit_sha, started")
    assert after[:len(before)] == before and r3["trials"] == len(after) > len(before)

    line = one_line_error(elsewhere(tmp_path, "bisect", "--resume", cid, "--patches", "none",
                                    "--max-trials", "99"), 2)
    assert f"cannot resume {cid} with different parameters: arm" in line, line


@pytest.mark.parametrize("argv, line", [
    (["attribute", "{toy}"], "bisect-lab attribute: the following arguments are required: --good, --bad"),
    (["attribute", "{toy}", "--good", "none"], "bisect-lab attribute: the following arguments are required: --bad"),
    (["attribute", "--bad", "all"], "bisect-lab attribute: the following arguments are required: --good"),
    (["bisect", "{toy}"], "bisect-lab bisect: the following arguments are required: --good, --bad"),
    (["bisect", "--good", "HEAD"], "bisect-lab bisect: the following arguments are required: --bad"),
])
def test_good_and_bad_are_still_required_without_resume(tmp_path, argv, line):
    toy = make_toy(tmp_path)
    p = elsewhere(tmp_path, *[a.replace("{toy}", str(toy)) for a in argv])
    assert one_line_error(p, 2) == f"bisect-lab: error: {line}"
    assert not (tmp_path / "res").exists()


def test_a_campaign_whose_experiment_file_is_gone_is_one_line(tmp_path):
    toy = make_toy(tmp_path)
    p = elsewhere(tmp_path, "run", toy, "--patches", "none", "--repeat", "1", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    cid = json.loads(p.stdout)["campaign"]
    interrupted(tmp_path, cid)
    toy.rename(tmp_path / "moved.toml")
    line = one_line_error(elsewhere(tmp_path, "run", "--resume", cid), 2)
    assert line == (f"bisect-lab: error: cannot resume {cid}: its experiment file {toy.resolve()} no longer "
                    "exists (put it back at that path)"), line
    # a bare --resume finds the same campaign and says the same
    assert one_line_error(elsewhere(tmp_path, "run", "--resume"), 2) == line


def test_resume_without_results_or_of_another_kind_is_one_line(tmp_path):
    line = one_line_error(elsewhere(tmp_path, "attribute", "--resume"), 2)
    assert line == f"bisect-lab: error: nothing to resume: no results database at {tmp_path / 'res' / 'bisect-lab.sqlite'}"
    assert not (tmp_path / "res").exists()                 # looking created nothing
    toy = make_toy(tmp_path)
    p = elsewhere(tmp_path, "run", toy, "--patches", "none", "--repeat", "1", "--json")
    cid = json.loads(p.stdout)["campaign"]
    line = one_line_error(elsewhere(tmp_path, "bisect", "--resume", cid), 2)
    assert line == f"bisect-lab: error: campaign {cid} is a run campaign, not bisect"
    # `--resume EXP.toml`: the word is the EXPERIMENT (whose one campaign is finished), not an id
    line = one_line_error(elsewhere(tmp_path, "run", "--resume", toy), 2)
    assert line == (f"bisect-lab: error: nothing to resume: no unfinished run campaign of {toy.resolve()} in "
                    f"{tmp_path / 'res' / 'bisect-lab.sqlite'}")


def test_an_arm_with_a_secret_is_asked_for_again(tmp_path):
    """The results hold a secret only as a keyed hash: a resume cannot hand the benchmark the
    hash, so that arm must be given again (then the campaign resumes as ever)."""
    toy = make_toy(tmp_path)
    arm = "none HF_TOKEN=hf_resumeSecretValue123456"
    p = elsewhere(tmp_path, "run", toy, "--patches", arm, "--repeat", "1", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    cid = json.loads(p.stdout)["campaign"]
    interrupted(tmp_path, cid)
    bare = elsewhere(tmp_path, "run", "--resume", cid)
    line = one_line_error(bare, 2)
    assert "with a secret stored only as a keyed hash: give that arm again with --patches" in line, line
    assert "hf_resumeSecretValue123456" not in bare.stderr + bare.stdout
    given = elsewhere(tmp_path, "run", "--resume", cid, "--patches", "none", "--patches", arm, "--json")
    assert given.returncode == 0, given.stderr[-2000:]
    assert json.loads(given.stdout)["campaign"] == cid


def test_the_interrupt_line_is_a_command_that_works(tmp_path):
    """SIGTERM mid-campaign: `continue with --resume CAMPAIGN` is all it takes, from anywhere."""
    import signal
    import time
    toy = make_toy(tmp_path)
    cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp_path / "res"), "--cache", str(tmp_path / "cache"),
           "run", str(toy), "--patches", "none", "--repeat", "10"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    db_path = tmp_path / "res" / "bisect-lab.sqlite"
    deadline, n = time.time() + 90, 0
    while time.time() < deadline and n < 2:
        time.sleep(0.1)
        try:
            n = sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        except sqlite3.OperationalError:
            pass
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    cid = err.split("continue with --resume ")[1].split()[0]
    before = campaign_rows(tmp_path, cid)
    assert 2 <= len(before) < 20
    p = elsewhere(tmp_path, "run", "--resume", cid, "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    assert res["campaign"] == cid and {a["arm"]: a["n"] for a in res["arms"]} == {"all": 10, "none": 10}, res
    after = campaign_rows(tmp_path, cid)
    assert after[:len(before)] == before and len(after) == 20
