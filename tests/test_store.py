"""The results database: durability, schema versioning, the DataFrame contract (docs/contracts.md, load)."""
import sqlite3
import subprocess
import sys
import textwrap

import pytest

import bisect_lab
from bisect_lab.model import TrialResult, TrialStatus
from bisect_lab.store import Store, StoreError


def trial(cid, i, arm="all", status=TrialStatus.OK, **metrics):
    return TrialResult(cid, i, arm, status, "local", 1.7e9 + i, 1.0, metrics or {"output_throughput": 90.0 + i})


def test_trials_frame_contract(tmp_path):
    s = Store(tmp_path)
    cid = s.create_campaign("run", experiment="e.toml", experiment_name="e", params={"arms": ["all"]})
    s.add_trial(trial(cid, 0), fingerprint_data=None)
    s.add_trial(trial(cid, 1, "none", median_ttft_ms=float("inf"), output_throughput=80.0))
    s.add_trial(trial(cid, 2, "none", TrialStatus.CRASHED, ), )
    df = bisect_lab.load(tmp_path).trials()
    for col in ("campaign", "trial", "arm", "status", "host", "started", "output_throughput"):
        assert col in df.columns
    assert list(df["status"]) == ["ok", "ok", "crashed"]
    assert df.loc[1, "output_throughput"] == 80.0
    assert str(df["started"].dtype).startswith("datetime64")


def test_resume_bookkeeping_and_prefix_lookup(tmp_path):
    s = Store(tmp_path)
    a = s.create_campaign("run", experiment="e.toml", experiment_name="e", params={})
    assert s.latest_unfinished("run", "e.toml").id == a
    s.finish_campaign(a, "done", {"ok": True})
    assert s.latest_unfinished("run", "e.toml") is None
    assert s.campaign(a[:17]).result == {"ok": True}
    assert s.next_trial_index(a) == 0
    with pytest.raises(StoreError, match="no campaign"):
        s.campaign("zzz")


def test_arm_trials_across_campaigns_of_one_experiment_and_host(tmp_path):
    """What the planning line before an attribution reads: ok trials of the named arms, every
    campaign of the experiment, one host, oldest first."""
    from dataclasses import replace
    s = Store(tmp_path)
    a = s.create_campaign("run", experiment="e.toml", experiment_name="e", params={})
    b = s.create_campaign("attribute", experiment="e.toml", experiment_name="e", params={})
    other = s.create_campaign("run", experiment="f.toml", experiment_name="f", params={})
    s.add_trial(trial(a, 0, "none"))
    s.add_trial(trial(a, 1, "all"))
    s.add_trial(trial(a, 2, "none", TrialStatus.CRASHED))
    s.add_trial(trial(a, 3, "only x"))
    s.add_trial(replace(trial(b, 0, "all"), host="gpu-box"))
    s.add_trial(trial(b, 1, "none"))
    s.add_trial(trial(other, 0, "none"))
    got = s.arm_trials(["none", "all"], experiment="e.toml", host="local")
    assert sorted((t.campaign, t.trial, t.arm) for t in got) == sorted([(a, 0, "none"), (a, 1, "all"), (b, 1, "none")])
    assert [t.started for t in got] == sorted(t.started for t in got)
    assert all(t.ok and t.metrics["output_throughput"] > 0 for t in got)
    assert len(s.arm_trials(["none", "all"])) == 5            # no filters: every ok trial of them
    assert s.arm_trials([]) == []


def test_duplicate_trial_is_refused_and_nothing_lost(tmp_path):
    s = Store(tmp_path)
    cid = s.create_campaign("run", experiment=None, experiment_name=None, params={})
    s.add_trial(trial(cid, 0))
    with pytest.raises(sqlite3.IntegrityError):
        s.add_trial(trial(cid, 0))
    assert len(s.trials(cid)) == 1


def test_newer_schema_is_refused(tmp_path):
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "bisect-lab.sqlite")
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer than this bisect-lab"):
        Store(tmp_path)


def test_garbage_file_is_a_clear_error(tmp_path):
    (tmp_path / "bisect-lab.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match="not a bisect-lab results database"):
        Store(tmp_path)


def test_kill_9_loses_at_most_the_trial_in_flight(tmp_path):
    """A writer killed with SIGKILL mid-campaign leaves every committed trial readable."""
    code = textwrap.dedent(f"""
        import os, signal
        from bisect_lab.store import Store
        from bisect_lab.model import TrialResult, TrialStatus
        s = Store({str(tmp_path)!r})
        cid = s.create_campaign("run", experiment=None, experiment_name=None, params={{}})
        for i in range(25):
            s.add_trial(TrialResult(cid, i, "all", TrialStatus.OK, "local", 0.0, 0.1, {{"m": float(i)}}))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert p.returncode == -9
    df = bisect_lab.load(tmp_path).trials()
    assert sorted(df["trial"]) == list(range(25))
