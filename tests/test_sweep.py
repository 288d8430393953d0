"""Nightly sweeps: a real git repository that gains commits between "nights", real benchmark
processes, real SQLite; the change-point detector on planted and change-free series."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "perf"))
from toytarget import Toy  # noqa: E402

from bisect_lab.errors import ConfigError
from bisect_lab.store import Store
from bisect_lab.campaigns import run_sweep
from bisect_lab.nights import sweep_history
from bisect_lab.stats.series import Detect, Night, judge_series
from bisect_lab.sweepfile import load_sweep
from bisect_lab.stats.changepoints import e_divisive


# --------------------------------------------------------------------------- change points
def test_e_divisive_finds_a_planted_shift_and_its_position():
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(100, 1, 12), rng.normal(93, 1, 8)]
    cps = e_divisive(x, alpha=0.01)
    assert [c.index for c in cps] == [12]
    assert cps[0].p_value <= 0.01
    assert cps[0].ratio == pytest.approx(0.93, abs=0.02)


def test_e_divisive_finds_two_shifts():
    rng = np.random.default_rng(4)
    x = np.r_[rng.normal(100, 1, 10), rng.normal(90, 1, 10), rng.normal(100, 1, 10)]
    assert [c.index for c in e_divisive(x, alpha=0.01)] == [10, 20]


def test_e_divisive_false_alarm_rate_on_noise_is_near_alpha():
    # 60 change-free series (normal and heavy-tailed): the permutation test keeps its level.
    hits = 0
    for s in range(60):
        rng = np.random.default_rng(100 + s)
        x = rng.normal(100, 2, 15) if s % 2 else 100 + rng.standard_t(3, 15)
        hits += bool(e_divisive(x, alpha=0.05, permutations=99, seed=s))
    assert hits <= 8          # 5% of 60 = 3 expected; binomial 99.9th percentile is about 9


def test_e_divisive_short_or_constant_series():
    assert e_divisive([1.0, 2.0, 3.0]) == []
    assert e_divisive([5.0] * 10) == []


# --------------------------------------------------------------------------- judging (simulated nights)
def _simulate(seed, n=14, cv=0.02, night_cv=0.01, step_at=None, step=0.0, repeat=5, drift=0.0, reasons=None):
    rng = np.random.default_rng(seed)
    nights, alerts = [], []
    for i in range(n):
        level = 1000 * (1 + rng.normal(0, night_cv)) * (1 - drift * i)
        if step_at is not None and i >= step_at:
            level *= 1 - step
        nights.append(Night(f"c{i}", float(i), f"sha{i}", {"all": list(level * (1 + rng.normal(0, cv, repeat)))}, None))
        j = judge_series(nights, "all", higher_is_better=True, min_effect=0.03, detect=Detect(permutations=99))
        nights[-1].judgement = {"series": [j]}
        if j["status"] == "regression":
            alerts.append(i)
            if reasons is not None:
                reasons.append(j["reason"])
    return alerts


def test_noisy_histories_without_change_do_not_alert():
    alerts = [_simulate(s, n=12) for s in range(12)]
    assert sum(map(len, alerts)) == 0, alerts


def test_a_step_alerts_once_on_its_night():
    for s in range(8):
        assert _simulate(s, step_at=7, step=0.15) == [7]


def test_a_slow_drift_is_caught_by_change_points():
    # 1% per night, never a 3% step from one night to the next: the step test alone would stay quiet.
    reasons = []
    alerts = _simulate(1, n=16, drift=0.01, cv=0.005, night_cv=0.002, reasons=reasons)
    assert len(alerts) == 1, "a 15% drift over 16 nights must alert, once"
    assert "change point" in reasons[0]


def test_lower_is_better_series():
    nights = [Night(f"c{i}", i, f"s{i}", {"a": [10.0 + 0.05 * k for k in range(4)]}, None) for i in range(4)]
    nights.append(Night("c4", 4, "s4", {"a": [12.0 + 0.05 * k for k in range(4)]}, None))
    j = judge_series(nights, "a", higher_is_better=False, min_effect=0.03)
    assert j["status"] == "regression" and j["last_good_commit"] == "s3"
    j = judge_series(nights, "a", higher_is_better=True, min_effect=0.03)
    assert j["status"] == "improvement"


# --------------------------------------------------------------------------- end to end on a real repo
def _sweep_file(toy: Toy, arms=("all", "none"), repeat=3, extra="") -> Path:
    p = toy.root / "nightly.toml"
    p.write_text(f'name = "nightly"\nexperiment = "toy.toml"\nref = "main"\nrepeat = {repeat}\n'
                 f'[matrix]\narms = {json.dumps(list(arms))}\n[detect]\nmin_effect = 0.05\npermutations = 99\n{extra}')
    return p


def test_sweep_alerts_on_the_planted_night_only(tmp_path):
    toy = Toy(tmp_path / "t", cv=0.01)
    sweep = _sweep_file(toy)
    results, cache = tmp_path / "results", tmp_path / "cache"
    statuses, commits = [], []
    for night in range(6):
        if night == 3:
            commits.append(toy.commit(0.8, "planted: 20% slower"))
        elif night:
            commits.append(toy.touch(f"night {night}: docs"))
        else:
            commits.append(None)
        if night == 3:
            # The planted night goes through the real command line: exit code 1 and one JSON object.
            env = dict(os.environ, BISECT_LAB_RESULTS=str(results), BISECT_LAB_CACHE=str(cache))
            p = subprocess.run([sys.executable, "-m", "bisect_lab", "sweep", str(sweep), "--json"],
                               capture_output=True, text=True, env=env, timeout=120)
            assert p.returncode == 1, p.stderr
            res = json.loads(p.stdout)
        else:
            res = run_sweep(sweep, results=results, cache=cache)
        statuses.append({s["arm"]: s["status"] for s in res["series"]})
        if night:
            assert res["commit"] == commits[night]
    assert statuses[0] == {"all": "no-history", "none": "no-history"}
    assert statuses[3] == {"all": "regression", "none": "regression"}, statuses
    for n in (1, 2, 4, 5):
        assert set(statuses[n].values()) == {"ok"}, (n, statuses[n])
    with Store(results) as store:
        nights = sweep_history(store, "nightly")
        assert len(nights) == 6
        assert [n.commit for n in nights][1:] == commits[1:]
        # each trial is stored with the commit it measured and the sweep's tag
        t = store.trials(nights[3].campaign)
        assert {x.commit for x in t} == {commits[3]} and {x.tag for x in t} == {"sweep:nightly"}
        j = [s for s in nights[3].judgement["series"] if s["arm"] == "all"][0]
        assert j["last_good_commit"] == commits[2]
        assert j["comparison"]["ratio"] == pytest.approx(0.8, abs=0.03)


def test_sweep_bisects_between_last_good_and_new_commit(tmp_path):
    pytest.importorskip("bisect_lab.strategies.bisection")
    toy = Toy(tmp_path / "t", cv=0.01)
    sweep = _sweep_file(toy, arms=("none",), extra="[bisect]\nmax_trials = 40\n")
    results, cache = tmp_path / "results", tmp_path / "cache"
    run_sweep(sweep, results=results, cache=cache)
    run_sweep(sweep, results=results, cache=cache)
    good = toy.touch("a")
    run_sweep(sweep, results=results, cache=cache)
    toy.touch("b")
    culprit = toy.commit(0.7, "planted")
    toy.touch("c")
    new = toy.touch("d")
    res = run_sweep(sweep, results=results, cache=cache, bisect_on_regression=True)
    assert res["regressions"] == ["none"]
    assert res["series"][0]["last_good_commit"] == good
    [b] = res["bisections"]
    assert (b["good"], b["bad"]) == (good, new)
    assert b["status"] == "culprit" and b["commit"] == culprit, b


def test_sweep_file_errors_name_the_key(tmp_path):
    toy = Toy(tmp_path / "t")
    p = tmp_path / "s.toml"
    p.write_text('experiment = "missing.toml"\n')
    with pytest.raises(ConfigError, match="experiment"):
        load_sweep(p)
    p.write_text(f'experiment = "{toy.experiment}"\nrepeat = 1\n')
    with pytest.raises(ConfigError, match="repeat"):
        load_sweep(p)
    p.write_text(f'experiment = "{toy.experiment}"\n[detect]\nmin_efect = 0.1\n')
    with pytest.raises(ConfigError, match=r"detect\.min_efect"):
        load_sweep(p)
    p.write_text(f'experiment = "{toy.experiment}"\n[matrix]\npatches = ["all", "slow"]\nenv = {{ X = ["1", ""] }}\n')
    cfg = load_sweep(p)
    assert cfg.arms == ("all X=1", "all X=", "all-minus slow X=1", "all-minus slow X=")
    # the CLI turns the error into one line and exit 2
    proc = subprocess.run([sys.executable, "-m", "bisect_lab", "sweep", str(tmp_path / "nope.toml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "sweep file not found" in proc.stderr


def test_warmup_trials_are_stored_but_never_judged(tmp_path):
    toy = Toy(tmp_path / "t", warmup=1)
    sweep = _sweep_file(toy, arms=("all",), repeat=2)
    res = run_sweep(sweep, results=tmp_path / "r", cache=tmp_path / "c")
    with Store(tmp_path / "r") as store:
        tags = [t.tag for t in store.trials(res["campaign"])]
        assert tags == ["warmup", "sweep:nightly", "sweep:nightly"]
        [night] = sweep_history(store, "nightly")
        assert len(night.values["all"]) == 2


def test_a_night_where_nothing_could_be_measured_is_no_measurement_not_a_quiet_night(tmp_path):
    """Sweep nights end like every other campaign (Session.conclude): a benchmark that fails on
    every try is exit 4 with its own error, and the night is not stored as a finished one (which
    would make the next night's history read an empty night as "no-data")."""
    from bisect_lab.errors import NoMeasurementError
    toy = Toy(tmp_path / "t")
    toy.experiment.write_text(toy.experiment.read_text().replace(
        'command = "python3 bench.py"', 'command = "python3 -c \'import sys; print(\\"CUDA error: boom\\"); sys.exit(3)\'"'))
    sweep = _sweep_file(toy, arms=("all", "none"), repeat=2)
    with pytest.raises(NoMeasurementError, match="boom"):
        run_sweep(sweep, results=tmp_path / "r", cache=tmp_path / "c")
    with Store(tmp_path / "r") as store:
        [c] = store.campaigns("sweep")
        assert c.status == "failed"
        assert sweep_history(store, "nightly") == []
