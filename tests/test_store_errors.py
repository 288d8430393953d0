"""The results database when the storage misbehaves (issue 19): read-only archives, full disks,
files that are not ours. Real filesystems: a tmpfs mounted for the test (we run as root in CI)."""
import os
import sqlite3
import subprocess
import time

import pytest

import bisect_lab
from bisect_lab.errors import EXIT_NO_MEASUREMENT, EXIT_USAGE
from bisect_lab.model import TrialResult, TrialStatus
from bisect_lab.store import Store, StorageError, StoreError
from test_cli_run import cli, one_line_error


def trial(cid, i, arm="all"):
    return TrialResult(cid, i, arm, TrialStatus.OK, "local", 1.7e9 + i, 1.0, {"output_throughput": 90.0 + i},
                       env_report={"vars": []})


def filled(results, n=3) -> str:
    with Store(results) as s:
        cid = s.create_campaign("run", experiment="e.toml", experiment_name="e",
                                params={"arms": ["all"], "metric": "output_throughput", "higher_is_better": True})
        for i in range(n):
            s.add_trial(trial(cid, i))
        s.finish_campaign(cid, "done", {"campaign": cid})
    return cid


class Tmpfs:
    """A small tmpfs at ``path``: remount read-only, or fill it up."""

    def __init__(self, path, size="2m"):
        self.path = path
        path.mkdir()
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {p.stderr.strip()}")

    def read_only(self):
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True)

    def fill(self):
        n = 0
        while True:
            try:
                with open(self.path / f"fill{n}", "wb") as f:
                    while True:
                        f.write(b"\0" * 4096)
                        f.flush()
            except OSError:
                if n > 3:
                    return
                n += 1

    def close(self):
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def tmpfs(tmp_path):
    fs = Tmpfs(tmp_path / "mnt")
    yield fs
    fs.close()


def test_read_only_disk_is_read_by_report_diff_and_load(tmp_path, tmpfs):
    res = tmpfs.path / "res"
    cid = filled(res)
    tmpfs.read_only()
    df = bisect_lab.load(res).trials()
    assert list(df["trial"]) == [0, 1, 2]
    p = cli(tmp_path, "--results", res, "report", "latest", "--out", tmp_path / "r.md")
    assert p.returncode == 0, p.stderr
    assert cid in (tmp_path / "r.md").read_text()
    d = cli(tmp_path, "--results", res, "diff", f"{cid}:0", f"{cid}:1", "--json")
    assert d.returncode == 0, d.stderr
    # the default report location is inside the read-only folder: say so and how to go on
    line = one_line_error(cli(tmp_path, "--results", res, "report", "latest"), EXIT_NO_MEASUREMENT)
    assert "--out" in line and "Read-only" in line, line
    # a command that writes says the disk is read-only, not that the database is foreign
    w = one_line_error(cli(tmp_path, "--results", res, "run", "--patches", "all", "--repeat", "1"),
                       EXIT_NO_MEASUREMENT)
    assert "read-only" in w and "not a bisect-lab results database" not in w, w
    assert sorted(os.listdir(res)) == ["bisect-lab.sqlite"]


def test_read_only_folder_opens_for_reading_as_root_too(tmp_path):
    # chmod does not stop root; a read-only open must not write anyway (no -wal / -shm left behind)
    cid = filled(tmp_path / "res")
    before = sorted(os.listdir(tmp_path / "res"))
    os.chmod(tmp_path / "res", 0o555)
    try:
        with Store(tmp_path / "res", create=False, read_only=True) as s:
            assert len(s.trials(cid)) == 3
            with pytest.raises(StoreError, match="read-only"):
                s.add_trial(trial(cid, 3))
    finally:
        os.chmod(tmp_path / "res", 0o755)
    assert sorted(os.listdir(tmp_path / "res")) == before


def test_healthy_database_on_a_full_disk_is_not_called_foreign(tmp_path, tmpfs):
    res = tmpfs.path / "res"
    cid = filled(res)
    tmpfs.fill()
    with pytest.raises(StorageError) as e:
        s = Store(res)
        s.add_trial(trial(cid, 3))
    msg = str(e.value)
    assert "not a bisect-lab results database" not in msg and e.value.exit_code == EXIT_NO_MEASUREMENT
    assert "intact" in msg or "full" in msg, msg
    # and it is still readable, every trial there
    assert len(bisect_lab.load(res).trials()) == 3
    exp_line = one_line_error(cli(tmp_path, "--results", res, "run", "--patches", "all", "--repeat", "1"),
                              EXIT_NO_MEASUREMENT)
    assert "not a bisect-lab results database" not in exp_line


def test_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    db = tmp_path / "bisect-lab.sqlite"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE photos (id INTEGER)")
    before = db.read_bytes()
    with pytest.raises(StoreError, match="not a bisect-lab results database") as e:
        Store(tmp_path)
    assert e.value.exit_code == EXIT_USAGE
    assert db.read_bytes() == before
    with sqlite3.connect(db) as c:
        assert [r[0] for r in c.execute("SELECT name FROM sqlite_master")] == ["photos"]


def test_non_integer_schema_version_is_one_line_exit_2(tmp_path):
    filled(tmp_path / "res")
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as c:
        c.execute("UPDATE meta SET value='one' WHERE key='schema_version'")
    for args in (["report", "latest"], ["run", "--patches", "all", "--repeat", "1"]):
        line = one_line_error(cli(tmp_path, *args), EXIT_USAGE)
        assert "schema version 'one'" in line and "not a bisect-lab results database" in line, line


def test_spool_is_stored_on_open_and_keeps_what_belongs_elsewhere(tmp_path):
    from bisect_lab.store import SPOOL_NAME, _trial_to_json
    cid = filled(tmp_path / "res", n=1)
    spool = tmp_path / "res" / SPOOL_NAME
    spool.write_text(_trial_to_json(trial(cid, 1), {"k": 1}, None) + "\n"
                     + _trial_to_json(trial("elsewhere", 0), None, None) + "\n"
                     + _trial_to_json(trial(cid, 0), None, None) + "\n"        # already stored: skipped
                     + '{"trial": {"campaign": "cut sh')                        # cut short by the failure
    with Store(tmp_path / "res") as s:
        assert [t.trial for t in s.trials(cid)] == [0, 1] and s.trial_extra(cid, 1) == {"k": 1}
    assert [l for l in spool.read_text().splitlines()] == [_trial_to_json(trial("elsewhere", 0), None, None)]
    # a read-only open never drains (it never writes)
    spool.write_text(_trial_to_json(trial(cid, 2), None, None) + "\n")
    with Store(tmp_path / "res", read_only=True) as s:
        assert len(s.trials(cid)) == 2
    assert spool.exists()


def test_disk_full_during_a_write_is_a_storage_error_naming_it(tmp_path, tmpfs):
    res = tmpfs.path / "res"
    s = Store(res)
    cid = s.create_campaign("run", experiment=None, experiment_name=None, params={})
    s.add_trial(trial(cid, 0))
    tmpfs.fill()
    big = TrialResult(cid, 1, "all", TrialStatus.CRASHED, "local", 1.7e9, 1.0, {}, error="x" * 3_000_000)
    with pytest.raises(StorageError) as e:
        s.add_trial(big)
    assert "disk is full" in str(e.value) and e.value.exit_code == EXIT_NO_MEASUREMENT, str(e.value)
    assert "not a bisect-lab results database" not in str(e.value)
    with pytest.raises(StorageError) as again:           # out of service: the first error, no second wait
        s.finish_campaign(cid, "done", None)
    assert again.value is e.value
    s.close()
    assert len(bisect_lab.load(res).trials()) == 1


def test_the_spool_is_redacted_like_the_database(tmp_path):
    """A trial kept in the spool (the database was locked) holds no secret either: the spool is a
    file under the results folder like the database."""
    from bisect_lab.store import _trial_to_json
    t = TrialResult("c", 0, "all", TrialStatus.CRASHED, "local", 1.7e9, 1.0, {},
                    error="benchmark exited with 1: HF_TOKEN=hf_spoolsecret987 rejected")
    line = _trial_to_json(t, {"stdout_tail": "--api-key sk-spoolsecret654"}, None)
    assert "hf_spoolsecret987" not in line and "sk-spoolsecret654" not in line, line
    assert '"arm": "all"' in line and '"campaign": "c"' in line
