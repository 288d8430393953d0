"""Attribution strategy: protocol, determinism / resume, verdict contents, baselines."""
import json
import math

import numpy as np
import pytest

from bisect_lab.strategies import (AddOneInStrategy, AttributionStrategy, LeaveOneOutStrategy,
                                   attribute_one_stage, drive, replay)
from bisect_lab import attribute_factors
from bisect_lab.verdicts import AttributionVerdict


def make_measure(culprits, effect=0.2, cv=0.02, seed=0, kind="single", calls=None):
    rng = np.random.default_rng(seed)

    def measure(active):
        if calls is not None:
            calls.append(active)
        if kind == "and":
            hit = all(c in active for c in culprits)
        else:
            hit = any(c in active for c in culprits)
        return 500.0 * (1 - effect if hit else 1.0) * math.exp(rng.normal(0, cv))

    return measure


FACTORS = ["oea-topk", "mla-cast", "nccl-env", "sm120", "env:NCCL_PROTO", "env:SGLANG_X"]


def test_finds_single_culprit_and_counts_trials():
    calls = []
    v = attribute_one_stage(FACTORS, make_measure(["mla-cast"], calls=calls), seed=3)
    assert isinstance(v, AttributionVerdict)
    assert v.status == "culprits" and v.culprits == ["mla-cast"]
    assert v.trials == len(calls)
    assert v.regression.ratio < 0.9 and v.regression.ci_high < 1
    assert v.confidence >= 0.9
    eff = {e.name: e for e in v.effects}
    assert 0.75 < eff["mla-cast"].effect.ratio < 0.85
    assert eff["mla-cast"].share == pytest.approx(1.0, abs=0.05)
    checks = {c.expect: c for c in v.confirmation}
    assert checks["good"].ok and checks["bad"].ok
    assert v.plan is not None and v.plan.trials_per_arm >= 2 and "trials per arm" in v.plan.text
    json.dumps(v.to_dict())          # JSON-able


def test_and_pair_is_reported_as_interaction():
    v = attribute_one_stage(FACTORS, make_measure(["oea-topk", "env:SGLANG_X"], kind="and", seed=5), seed=5)
    assert v.status == "culprits" and v.culprits == ["env:SGLANG_X", "oea-topk"]
    assert v.hypothesis == "and"
    assert v.interactions and v.interactions[0].kind == "and"
    assert set(v.interactions[0].factors) == {"oea-topk", "env:SGLANG_X"}


def test_no_regression_and_lower_is_better():
    v = attribute_one_stage(FACTORS, make_measure([], effect=0.0, cv=0.01), seed=1)
    assert v.status == "no-regression" and v.culprits == []
    # a latency: the culprit makes values larger
    rng = np.random.default_rng(2)
    lat = lambda a: 20.0 * (1.3 if "sm120" in a else 1.0) * math.exp(rng.normal(0, 0.02))  # noqa: E731
    v = attribute_one_stage(FACTORS, lat, higher_is_better=False, seed=2)
    assert v.status == "culprits" and v.culprits == ["sm120"]


def test_budget_exhausted_is_inconclusive():
    v = attribute_one_stage(FACTORS, make_measure(["nccl-env"], effect=0.03, cv=0.05), seed=0, max_trials=12)
    assert v.status == "inconclusive" and v.culprits == [] and v.trials == 12
    assert any("budget" in w for w in v.warnings)


def test_failed_trials_count_but_are_not_measurements():
    inner = make_measure(["sm120"], seed=4)
    n = {"k": 0}

    def flaky(active):
        n["k"] += 1
        return None if n["k"] % 5 == 0 else inner(active)

    v = attribute_one_stage(FACTORS, flaky, seed=4)
    assert v.trials == n["k"] and v.failed_trials == n["k"] // 5
    assert v.status == "culprits" and v.culprits == ["sm120"]


def test_same_seed_same_decisions_and_resume_by_replay():
    measure = make_measure(["oea-topk"], effect=0.08, cv=0.03, seed=9)
    s1 = AttributionStrategy(FACTORS, seed=7)
    log = []
    while True:
        batch = s1.ask()
        if not batch:
            break
        for arm in batch:
            value = measure(arm)
            log.append((arm, value))
            s1.tell(arm, value)
    v1 = s1.verdict()
    # interrupted after half the trials, resumed by replaying the stored trials
    half = len(log) // 2
    s2 = replay(AttributionStrategy(FACTORS, seed=7), log[:half])
    rest = iter(log[half:])
    while True:
        batch = s2.ask()
        if not batch:
            break
        for arm in batch:
            stored_arm, value = next(rest)
            assert arm == stored_arm          # same decisions as the uninterrupted run
            s2.tell(arm, value)
    assert s2.verdict().to_dict() == v1.to_dict()


def test_ask_is_idempotent_and_batches():
    s = AttributionStrategy(FACTORS, seed=0, batch_size=3)
    first = s.ask()
    assert sorted(map(sorted, first)) == sorted(map(sorted, s.ask()))    # nothing told yet
    assert len(first) == 4 and first.count(frozenset()) == 2           # initial good/bad pairs
    measure = make_measure(["sm120"], seed=1)
    for arm in first:
        s.tell(arm, measure(arm))
    nxt = s.ask()
    assert 1 <= len(nxt) <= 3
    with pytest.raises(ValueError):
        s.tell(frozenset({"nope"}), 1.0)


def test_leave_one_out_and_add_one_in_baselines():
    measure = make_measure(["nccl-env"], effect=0.2, cv=0.02, seed=2)
    v = drive(LeaveOneOutStrategy(FACTORS, seed=0, repeats=5), measure)
    assert v.status == "culprits" and v.culprits == ["nccl-env"]
    assert v.trials == 5 * (len(FACTORS) + 2)
    v = drive(AddOneInStrategy(FACTORS, seed=0, repeats=5), measure)
    assert v.culprits == ["nccl-env"]


def test_single_factor():
    v = attribute_one_stage(["only"], make_measure(["only"], seed=3), seed=3)
    assert v.status == "culprits" and v.culprits == ["only"]


def test_effect_fit_of_a_few_wild_values_gives_infinite_bounds_not_a_crash():
    """Heavy-tailed noise once put a bound past exp's range (OverflowError inside attribute)."""
    from bisect_lab.strategies.decomposition import loglinear_effects
    (eff,) = loglinear_effects([0.0, 1.0, 0.0, 300.0], [np.array([0.0, 0.0, 1.0, 1.0])], ["f"], ["main"])
    assert math.isinf(eff.effect.ci_high) and eff.effect.ci_low >= 0



def test_confirmation_side_weighs_each_level_by_its_own_noise():
    """The H200 shape: a tight good level (CV 0.6%) and a noisy bad one (14%), 10% apart. One
    reading of "good plus culprit" 6% above the bad level's centre is past the midpoint, but it is
    plainly a bad-level reading (7.5 good-level sds below good); with equal noise the midpoint decides."""
    import math
    from bisect_lab.strategies.hypotheses import Levels
    good, bad = math.log(1000.0), math.log(900.0)
    hetero = Levels(good, bad, 0.006, 0.14, 0.002, 0.03, 30.0)
    reading = np.array([bad + 0.06])
    assert (reading[0] - good) / (bad - good) < 0.5          # the midpoint rule would say "good"
    assert AttributionStrategy._nearer_bad(reading, hetero)
    assert not AttributionStrategy._nearer_bad(np.array([good - 0.004]), hetero)
    equal = Levels(good, bad, 0.03, 0.03, 0.01, 0.01, 30.0)
    assert AttributionStrategy._nearer_bad(np.array([good + 0.6 * (bad - good)]), equal)
    assert not AttributionStrategy._nearer_bad(np.array([good + 0.4 * (bad - good)]), equal)


def test_hopeless_noise_stops_early_and_says_why():
    """15% heavy-tailed noise on both arms and no regression: "no regression" would need hundreds of
    readings per arm, more than the whole budget. The campaign stops `inconclusive` once twenty of
    each show it, rather than spend the budget to end there anyway, and says what it would take."""
    names = ["a", "b", "c", "d", "e"]
    for seed in range(3):
        rng = np.random.default_rng(seed)
        v = attribute_one_stage(names, lambda arm: 1000.0 * math.exp(0.15 * rng.standard_t(4) / math.sqrt(2)),
                                seed=seed, max_trials=200)
        assert v.status == "inconclusive" and v.culprits == [], v.status
        assert v.trials <= 120, v.trials          # of 200
        assert any(w.startswith("stopped early") and "per arm" in w for w in v.warnings), v.warnings


def test_futility_waits_for_twenty_readings_of_each_reference():
    """A real 10% culprit under Student-t(3) noise at CV 14%: at ten readings a side the difference
    seen has a standard error near 6%, and campaigns whose first readings happened to show nothing
    were given up at 22-34 trials (6 of the benchmark's 100 runs). An early stop now needs twenty
    readings of each reference, and most campaigns name the culprit."""
    from bisect_lab.strategies.attribution_stop import FUTILITY_MIN_REFS
    assert FUTILITY_MIN_REFS == 20
    names = [f"f{k}" for k in range(10)]
    right = 0
    for seed in range(12):
        rng = np.random.default_rng([14, 10, seed])
        reads = {"good": 0, "bad": 0}

        def measure(arm):
            if not arm:
                reads["good"] += 1
            elif len(arm) == len(names):
                reads["bad"] += 1
            return 1000.0 * (0.9 if "f3" in arm else 1.0) * math.exp(0.14 / math.sqrt(3) * rng.standard_t(3))
        v = attribute_factors(names, measure, seed=seed, max_trials=400)
        if any(w.startswith("stopped early") for w in v.warnings):
            assert min(reads.values()) >= FUTILITY_MIN_REFS, (seed, reads, v.trials)
        right += v.culprits == ["f3"]
    assert right >= 9, right


def test_futility_never_stops_a_campaign_the_budget_can_settle():
    """The same noise with a 30% regression, and ordinary noise (CV 3%) with none: both are
    answered as before, with no early stop."""
    names = ["a", "b", "c", "d", "e"]
    rng = np.random.default_rng(7)
    v = attribute_one_stage(names, lambda arm: 1000.0 * (0.7 if "c" in arm else 1.0)
                            * math.exp(0.15 * rng.standard_t(4) / math.sqrt(2)), seed=1, max_trials=300)
    assert v.status == "culprits" and v.culprits == ["c"], (v.status, v.culprits, v.warnings)
    v = attribute_one_stage(names, lambda arm: 1000.0 * math.exp(rng.normal(0, 0.03)), seed=2, max_trials=300)
    assert v.status == "no-regression"
    assert not any(w.startswith("stopped early") for w in v.warnings)


def test_proven_names_the_culprit_only_once_the_evidence_holds():
    """The standard of proof, asked from outside: nothing after a few readings, the culprit once
    balanced readings of good, bad, 'good plus f' and 'bad minus f' make it clear, and never a
    culprit when every arm reads the same."""
    rng = np.random.default_rng(7)
    everything = frozenset(FACTORS)
    arms = [frozenset(), everything, frozenset({"mla-cast"}), everything - {"mla-cast"}]

    def reading(arm, hit_factor="mla-cast", effect=0.1):
        return 500.0 * (1 - effect if hit_factor in arm else 1.0) * math.exp(rng.normal(0, 0.02))

    s = AttributionStrategy(FACTORS, seed=0)
    assert s.proven() is None                      # no measurements
    for arm in arms:
        s.tell(arm, reading(arm))
    assert s.proven() is None                      # one reading each: far from 99%
    named = None
    for _ in range(10):
        for arm in arms:
            s.tell(arm, reading(arm))
        named = s.proven()
        if named:
            break
    assert named == ("mla-cast",)

    flat = AttributionStrategy(FACTORS, seed=0)
    for _ in range(12):
        for arm in arms:
            flat.tell(arm, reading(arm, effect=0.0))
    assert flat.proven() is None
