"""`recheck CAMPAIGN[:TRIAL]`: was an old reading real? The same arm measured again in new launches
of a real toy server; the old value placed in today's launch-to-launch distribution. Plus the
statistics (calibration of the interval a launch falls in) and the cost-aware readings choice on
a real results database."""
import json
import math
import sqlite3

import numpy as np
import pytest

from test_serving_sessions import cli, one_line_error, served_toy


def _run(tmp_path):
    exp = served_toy(tmp_path, env={"TOY_OFFSETS": "0,1.5,-1.5,0.8,-0.8"})
    p = cli(tmp_path, "run", exp, "--patches", "all", "--repeat", "2", "--json")
    assert p.returncode == 0, p.stderr
    cid = json.loads(p.stdout)["campaign"]
    with sqlite3.connect(tmp_path / "res" / "bisect-lab.sqlite") as db:
        (trial, session), = db.execute("SELECT trial, session FROM trials WHERE campaign=? AND tag IS NULL "
                                       "ORDER BY trial LIMIT 1", (cid,)).fetchall()
    return cid, trial, session


def test_recheck_says_inside_for_the_same_arm_and_outside_for_a_value_it_no_longer_gives(tmp_path):
    cid, trial, session = _run(tmp_path)
    p = cli(tmp_path, "recheck", f"{cid}:{trial}", "--sessions", "3", "--json", timeout=180)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["of"] == f"{cid}:{trial}" and r["arm"] == "all" and r["sessions"] == 3 and r["readings"] == 6
    assert r["inside"] is True and abs(r["sd_away"]) < 3 and r["low"] < r["old"] < r["high"]
    assert r["old_readings"] == 2                       # the old launch's two counted readings
    assert not [d for d in r["differences"] if "BISECT_LAB_CAMPAIGN" in d["what"]]
    # The "94 tok/s" case: that launch read 40% higher than the arm ever gives.
    db_path = tmp_path / "res" / "bisect-lab.sqlite"
    with sqlite3.connect(db_path) as db:
        for t, m in db.execute("SELECT trial, metrics FROM trials WHERE campaign=? AND session=?",
                               (cid, session)).fetchall():
            db.execute("UPDATE trials SET metrics=? WHERE campaign=? AND trial=?",
                       (json.dumps({k: v * 1.4 for k, v in json.loads(m).items()}), cid, t))
    p = cli(tmp_path, "recheck", f"{cid}:{trial}", "--sessions", "3", timeout=180)
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "lies outside today's launch-to-launch distribution" in out and "sd above" in out, out
    assert "launch-to-launch CV" in out and "recheck campaign" in out


def test_recheck_of_a_campaign_of_several_launches_asks_for_the_trial(tmp_path):
    cid, trial, _ = _run(tmp_path)
    err = one_line_error(cli(tmp_path, "recheck", cid), 2)
    assert "holds 2 launches" in err and f"{cid}:TRIAL" in err
    assert "at least 2" in one_line_error(cli(tmp_path, "recheck", f"{cid}:{trial}", "--sessions", "1"), 2)
    assert "has no trial 999" in one_line_error(cli(tmp_path, "recheck", f"{cid}:999"), 2)


@pytest.mark.parametrize("between, within, m_old", [(0.02, 0.005, 4), (0.005, 0.02, 4), (0.01, 0.01, 1)])
def test_the_interval_a_launch_falls_in_holds_95_percent_of_launches(between, within, m_old):
    """Calibration: an old launch drawn from the same arm lies inside today's 95% interval in
    93.5-96.5% of 1,500 seeded cases (today: 5 launches of 4 readings)."""
    from bisect_lab.stats.recheck import check_launch
    rng = np.random.default_rng(7)
    inside = 0
    n = 1500
    for _ in range(n):
        today = [list(np.exp(rng.normal(0, between) + rng.normal(0, within, 4))) for _ in range(5)]
        old = math.exp(rng.normal(0, between) + rng.normal(0, within, m_old).mean())
        inside += check_launch(old, m_old, today).inside
    assert 0.935 <= inside / n <= 0.965, inside / n


def test_auto_readings_follow_the_measured_costs_and_noise(tmp_path):
    """AutoReadings on a real results database: the prior until launches show their spread, then
    the two-stage optimum; a costly launch with within-launch noise dominating takes more readings."""
    from bisect_lab.campaigns.readings import FIRST_READINGS, AutoReadings
    from bisect_lab.model import TrialResult, TrialStatus
    from bisect_lab.store import Store
    from bisect_lab.store_sessions import SessionRecord
    store = Store(tmp_path / "res")
    cid = store.create_campaign("run", experiment=None, experiment_name="x", params={})
    said = []
    auto = AutoReadings(store, cid, "tok_s", said.append)
    assert auto(None) == FIRST_READINGS and "until a launch" in said[-1]
    rng = np.random.default_rng(3)
    i = 0

    def session(k, arm, launch_s, n, sb, sw):
        nonlocal i
        name = f"s{k}"
        store.start_session(SessionRecord(cid, name, arm, "local", None, None, "running", None, 0.0, None, 0,
                                          None, {}, None, ""))
        off = rng.normal(0, sb)
        for _ in range(n):
            store.add_trial(TrialResult(cid, i, arm, TrialStatus.OK, "local", 0.0, 2.0,
                                        {"tok_s": 100 * math.exp(off + rng.normal(0, sw))}, session=name))
            i += 1
        store.end_session(SessionRecord(cid, name, arm, "local", None, None, "ok", 1, 0.0, launch_s, n, 1.0,
                                        {"stop_s": 0.0}, None, ""))

    session(0, "a", 60.0, 2, 0.002, 0.02)
    auto(None)
    assert "prior" in said[-1]                           # one launch: no spread between launches yet
    for k in range(1, 8):
        session(k, "a" if k % 2 else "b", 60.0, 3, 0.002, 0.02)
    m = auto(None)
    # a launch costs 30 readings and within-launch sd is about 10x launch-to-launch: many readings
    assert m >= 10 and "a launch costs 30 readings" in said[-1], said
    store.close()
