"""Layer 5 without a subprocess: the one campaign loop, the session lifecycle and the typed results.

The executor here is a table of values per arm (seeded noise); the strategies, the store (SQLite)
and the results are the real ones.
"""
from __future__ import annotations

import math
import random
import time

import pytest

from bisect_lab.campaigns import BalancedRounds, Session, drive
from bisect_lab.campaigns.drive import metric_of
from bisect_lab.errors import UsageError
from bisect_lab.model import Arm, Benchmark, Design, Experiment, Target, TrialResult, TrialStatus
from bisect_lab.results import AttributionResult, BisectResult, RunResult, SweepNight, result_from_dict
from bisect_lab.runner import TrialSpec
from bisect_lab.store import Store

METRIC = "output_throughput"


class TableExecutor:
    """``run_batch`` over a table: arm spec (or commit) -> the arm's level; seeded log-normal noise.
    Records every batch it was given, and fails the specs ``fail`` names."""

    def __init__(self, level, *, cv: float = 0.01, seed: int = 0, fail=lambda spec: False):
        self.level, self.cv, self.fail = level, cv, fail
        self.rng = random.Random(seed)
        self.batches: list[list[TrialSpec]] = []
        self.per_host: list[bool] = []
        self.n = 0

    def run_batch(self, specs, *, per_host=False):
        self.batches.append(list(specs))
        self.per_host.append(per_host)
        out = []
        for s in specs:
            self.n += 1
            if self.fail(s):
                out.append(TrialResult("c", self.n, s.arm.spec, TrialStatus.CRASHED, "fake", time.time(), 0.0,
                                       error="benchmark exited with 1", commit=s.commit, tag=s.tag))
                continue
            v = self.level(s) * math.exp(self.rng.gauss(0, self.cv))
            out.append(TrialResult("c", self.n, s.arm.spec, TrialStatus.OK, "fake", time.time(), 0.0,
                                   metrics={METRIC: v}, commit=s.commit, tag=s.tag))
        return out


def _arm(active) -> Arm:
    active = sorted(active)
    return Arm("only " + ",".join(active) if active else "none", frozenset(active))


# --------------------------------------------------------------------------- drive()
def test_drive_runs_the_staged_attribution_to_the_planted_culprit():
    from bisect_lab.strategies.staged import StagedAttribution
    effects = {"a": 1.0, "b": 0.80, "c": 1.0, "d": 1.0}
    search = StagedAttribution(list(effects), seed=3, max_trials=200)
    ex = TableExecutor(lambda s: 100 * math.prod(effects[f] for f in s.arm.patches), seed=3)
    told = []
    n = drive(search, ex, lambda active: TrialSpec(_arm(active)), value_of=metric_of(METRIC),
              on_result=lambda item, r: told.append((item, r.ok)))
    v = search.verdict()
    assert v.status == "culprits" and sorted(v.culprits) == ["b"]
    assert n == ex.n == len(told) == v.trials            # every trial told once, nothing lost
    assert all(not p for p in ex.per_host)               # an adaptive search never pins hosts


class _ThreeAtOnce:
    """A strategy that asks for three arms per batch (as a fleet-aware one would)."""

    def __init__(self, rounds):
        self.rounds, self.told = rounds, []

    @property
    def done(self):
        return len(self.told) >= 3 * self.rounds

    def ask(self):
        k = len(self.told) // 3
        return [frozenset(), frozenset({"x"}), frozenset({"x", f"r{k}"})]

    def tell(self, item, value):
        self.told.append((item, value))


def test_a_batch_goes_to_the_executor_whole_and_is_told_in_the_order_asked():
    s = _ThreeAtOnce(rounds=4)
    ex = TableExecutor(lambda spec: 50.0 if "x" in spec.arm.patches else 100.0, cv=0.0)
    drive(s, ex, lambda active: TrialSpec(_arm(active)), value_of=metric_of(METRIC))
    assert [len(b) for b in ex.batches] == [3, 3, 3, 3]
    assert [v for _, v in s.told] == [100.0, 50.0, 50.0] * 4
    assert [sorted(item) for item, _ in s.told[:3]] == [[], ["x"], ["r0", "x"]]


def test_a_failed_trial_is_told_as_none_and_reaches_on_result():
    from bisect_lab.strategies.bisection import BisectionStrategy
    n, step = 40, 23
    search = BisectionStrategy(n, seed=1, max_trials=120, min_effect=0.05)
    shas = [f"c{i:02d}" for i in range(n)]
    arm = _arm(())
    ex = TableExecutor(lambda s: 100.0 if int(s.commit[1:]) < step else 80.0, cv=0.01, seed=1,
                       fail=lambda s: s.commit == "c11")
    untestable = {}

    def note(pos, r):
        if not r.ok:
            untestable[shas[pos]] = r.status.value

    drive(search, ex, lambda pos: TrialSpec(arm, shas[pos]), value_of=metric_of(METRIC), on_result=note)
    v = search.verdict()
    assert v.status == "culprit" and v.index == step
    assert set(untestable) <= {"c11"}           # only the failing commit is untestable, if it was read at all
    assert all(val is None for p, val in v.path if shas[p] == "c11")


def test_balanced_rounds_hold_every_arm_once_per_round_and_host():
    arms = [_arm(()), _arm({"a"}), _arm({"b"})]
    rounds = BalancedRounds(arms, repeat=4, warmup=1, seed=7, hosts=2, tag="night")
    ex = TableExecutor(lambda s: 100.0, cv=0.0)
    drive(rounds, ex, lambda item: TrialSpec(item[0], None, item[1]), value_of=metric_of(METRIC), per_host=True)
    assert rounds.total == (4 + 1) * 3 * 2 == ex.n
    assert all(ex.per_host)
    for k, batch in enumerate(ex.batches):
        assert len(batch) == 6
        # the host pinning is spec i -> host i % 2: both hosts get the same arm, side by side
        assert [s.arm.spec for s in batch[0::2]] == [s.arm.spec for s in batch[1::2]]
        assert sorted(s.arm.spec for s in batch[0::2]) == sorted(a.spec for a in arms)
        assert {s.tag for s in batch} == {"warmup" if k == 0 else "night"}
    orders = {tuple(s.arm.spec for s in b[0::2]) for b in ex.batches}
    assert len(orders) > 1                       # randomised, not the same order every round
    again = BalancedRounds(arms, repeat=4, warmup=1, seed=7, hosts=2, tag="night")
    assert [(a.spec, t) for a, t in again.items] == [(a.spec, t) for a, t in rounds.items]    # seeded


# --------------------------------------------------------------------------- Session
def _experiment(tmp_path, **design) -> Experiment:
    return Experiment(path=tmp_path / "exp.toml", name="unit", target=Target(repo=str(tmp_path / "repo")),
                      benchmark=Benchmark(command="true"), design=Design(**design))


@pytest.fixture
def session(tmp_path):
    store = Store(tmp_path / "results")
    s = Session(_experiment(tmp_path), store, hosts=[])
    yield s
    store.close()


def test_open_declares_the_campaign_and_resume_finds_it(session):
    assert session.campaign is None
    cid, resumed = session.open("run", {"arms": ["all"], "repeat": None}, None, grow={"repeat": 5})
    assert (session.campaign, resumed) == (cid, False)
    session.store.set_campaign_status(cid, "interrupted")
    again, resumed = session.open("run", {"arms": ["all"], "repeat": None}, True, grow={"repeat": 5})
    assert (again, resumed) == (cid, True)
    with pytest.raises(UsageError, match="different parameters: arms"):
        session.open("run", {"arms": ["none"], "repeat": None}, cid, grow={"repeat": 5})
    with pytest.raises(UsageError, match="raised on resume, not lowered"):
        session.open("run", {"arms": ["all"], "repeat": 3}, cid, grow={"repeat": 5})


def test_finish_keeps_the_status_right_on_every_exit_path(session):
    session.open("run", {"arms": ["all"]}, None)
    with pytest.raises(RuntimeError):
        session.finish(lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert session.store.campaign(session.campaign).status == "failed"
    session.open("run", {"arms": ["all"], "n": 2}, None)
    with pytest.raises(KeyboardInterrupt):
        session.finish(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert session.store.campaign(session.campaign).status == "interrupted"
    session.open("run", {"arms": ["all"], "n": 3}, None)
    res = session.finish(lambda: RunResult(campaign=session.campaign, metric=METRIC, trials=0))
    c = session.store.campaign(session.campaign)
    assert c.status == "done" and result_from_dict(c.kind, c.result) == res
    with pytest.raises(UsageError, match="already finished"):
        session.open("run", {"arms": ["all"], "n": 3}, c.id)


def test_finish_stores_a_night_without_its_summary(session):
    session.open("sweep", {"sweep": "n"}, None)
    night = SweepNight(sweep="n", campaign=session.campaign, summary=RunResult(campaign=session.campaign),
                       regressions=["all"])
    session.finish(lambda: night)
    stored = session.store.campaign(session.campaign).result
    assert "summary" not in stored and stored["regressions"] == ["all"]


# --------------------------------------------------------------------------- typed results
def test_results_round_trip_and_keep_what_they_do_not_declare():
    d = {"status": "culprits", "culprits": ["b"], "trials": 40, "confidence": float("nan"),
         "effects": [{"name": "b", "effect": {"ratio": 0.8}}], "stage_log": ["x"], "campaign": "c1"}
    r = AttributionResult.from_dict(d)
    assert r.status == "culprits" and r.more == {"stage_log": ["x"]}
    out = r.to_dict()
    assert out["confidence"] is None                      # NaN -> null: strict JSON
    assert out["stage_log"] == ["x"]                       # an older/newer key survives a round trip
    assert "resume_with" not in out and "max_trials" not in out     # absent unless set
    assert AttributionResult.from_dict(out) == AttributionResult.from_dict(out)
    assert AttributionResult.from_dict(out).to_dict() == out
    # read access by key, as the dict results had it
    assert r["culprits"] == ["b"] and r.get("stage_log") == ["x"] and "resume_with" not in r
    with pytest.raises(KeyError):
        r["resume_with"]


def test_a_stored_night_reads_back_with_a_typed_summary():
    night = SweepNight(sweep="s", summary=RunResult(campaign="c", arms=[{"arm": "all", "n": 3}]))
    back = result_from_dict("sweep", night.to_dict())
    assert isinstance(back.summary, RunResult) and back.summary.arm("all") == {"arm": "all", "n": 3}
    assert isinstance(result_from_dict("bisect", {"status": "culprit"}), BisectResult)
    assert result_from_dict("run", None) is None


def test_auto_readings_of_a_search_carry_its_floor_and_a_run_none(tmp_path):
    """`readings = "auto"`: an attribute or bisect campaign chooses readings per launch with the
    search's floor at its min_effect, a `run` with the plain two-stage optimum."""
    from dataclasses import replace

    from bisect_lab.model import ServerConfig
    from bisect_lab.stats.sessions import search_floor_var
    store = Store(tmp_path / "results")
    exp = replace(_experiment(tmp_path, min_effect=0.05), server=ServerConfig(command="serve {port}", ready_log="up"))
    floors = {}
    for kind in ("run", "attribute", "bisect"):
        s = Session(exp, store, hosts=[])
        s.open(kind, {"arms": ["all"], "kind": kind}, None)
        floors[kind] = s.executor(workers=[])._sessions.readings_for.floor_var
    store.close()
    assert floors == {"run": 0.0, "attribute": search_floor_var(0.05), "bisect": search_floor_var(0.05)}
