"""Noisy bisection strategy (bisect_lab/strategies/bisection.py): simulated histories, fixed seeds."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bisect_lab.strategies.bisection import BisectionStrategy, BisectVerdict, bisect_sequence


class History:
    """A simulated candidate list: first bad position ``change``, relative ``step``, noise ``cv``."""

    def __init__(self, n, change, step, cv, seed, untestable=(), higher_is_better=True):
        self.n, self.change, self.step, self.cv = n, change, step, cv
        self.rng = np.random.default_rng(seed)
        self.untestable = set(untestable)
        self.higher_is_better = higher_is_better
        self.calls: list[int] = []

    def measure(self, i: int) -> float | None:
        self.calls.append(i)
        if i in self.untestable:
            return None
        bad = i >= self.change
        level = 100.0
        if bad:
            level *= (1 - self.step) if self.higher_is_better else (1 + self.step)
        return level * (1 + self.cv * self.rng.standard_normal())


def run(h: History, **kw) -> BisectVerdict:
    return bisect_sequence(h.n, h.measure, higher_is_better=h.higher_is_better, **kw)


# --------------------------------------------------------------------------- correctness
def test_large_step_found_exactly_and_quickly():
    covered, trials = 0, []
    for seed in range(8):
        h = History(1000, change=37 + 111 * seed, step=0.25, cv=0.03, seed=seed)
        v = run(h, seed=seed)
        assert (v.status, v.index) == ("culprit", h.change), (seed, v.status, v.index)
        assert v.mass >= 0.95
        trials.append(v.trials)
        lo, hi = v.effect_ci
        covered += lo <= 0.75 <= hi
        assert abs(v.effect - 0.75) < 0.05
    assert covered >= 6  # a 95% interval
    # ~6 to confirm + ~10 single halvings, and a few readings for the flank test (issue #23) when it
    # is unsure. At seed 0 the readings just after the step happen to read ~3% below the far ones
    # (z ~ 4 on the whole flank) and the flank test reads on (29 readings, then one step): one run
    # in the eight may go over 34 (the bounds were 34 each and a mean of 25). On 100 such histories
    # (change 1 + (37 + 111 s) % 998, seed s) the flank test's runs average 21.3 trials (p95 26,
    # 3 over 34, max 44), the model check's before it 22.1 (p95 26, 2 over 34, max 97). Since the
    # flank test weighs a second step next to the step found more (2026-12-07), 21.4 (p95 27, 4
    # over 34, max 44); here seed 4 reads 9 more (33), a mean of 26.25 where it was 25.1.
    assert sum(t > 34 for t in trials) <= 1 and max(trials) <= 60, trials
    assert np.mean(trials) <= 27, trials


def test_five_percent_step_at_cv3_mostly_right():
    right, trials = 0, []
    for seed in range(16):
        change = int(np.random.default_rng(100 + seed).integers(1, 1000))
        h = History(1000, change=change, step=0.05, cv=0.03, seed=100 + seed)
        v = run(h, seed=seed)
        right += v.status == "culprit" and v.index == change
        trials.append(v.trials)
    # Single-run bisection gets ~5% of these right; expect nearly all here.
    assert right >= 14, right
    assert np.mean(trials) <= 70, trials


def test_no_step_answers_no_regression():
    outcomes = []
    for seed in range(10):
        h = History(1000, change=500, step=0.0, cv=0.03, seed=200 + seed)
        v = run(h, seed=seed)
        outcomes.append(v.status)
        if v.status == "no-regression":
            assert v.index is None and v.range is None
    assert outcomes.count("no-regression") >= 9, outcomes
    assert "culprit" not in outcomes[:9] or outcomes.count("culprit") <= 1, outcomes


def test_improvement_is_not_a_regression():
    h = History(500, change=250, step=-0.10, cv=0.02, seed=3)  # bad is 10% *faster*
    v = run(h, seed=0)
    assert v.status == "no-regression"
    assert v.effect > 1.0


def test_lower_is_better_metric():
    h = History(400, change=123, step=0.10, cv=0.02, seed=4, higher_is_better=False)
    v = run(h, seed=1)
    assert (v.status, v.index) == ("culprit", 123)
    assert v.effect > 1.05  # latency went up ~10%


def test_single_outlier_does_not_flip_the_answer():
    h = History(300, change=150, step=0.10, cv=0.01, seed=5)
    base = h.measure

    def measure(i):
        v = base(i)
        # One wild sample on the bad side that looks very good (a launch-bound tail sample).
        if len(h.calls) == 12 and v is not None:
            return v * 1.5
        return v

    v = bisect_sequence(300, measure, seed=0)
    assert (v.status, v.index) == ("culprit", 150)



def test_culprit_never_rests_on_one_reading():
    # The final check: the named position and the one before it are each read at least twice
    # (unless that one is the good endpoint), even when every reading is decisive (25% at CV 3%).
    for seed in range(4):
        h = History(1000, change=37 + 211 * seed, step=0.25, cv=0.03, seed=300 + seed)
        v = run(h, seed=seed)
        assert (v.status, v.index) == ("culprit", h.change)
        positions = [p for p, _ in v.path]
        assert positions.count(v.index) >= 2, positions
        assert v.index - 1 == 0 or positions.count(v.index - 1) >= 2, positions


def _skewed_run(higher_is_better: bool, seed: int):
    """5% step at CV 3% with a right-skewed (gamma, skewness 1) multiplicative noise."""
    rng = np.random.default_rng(400 + seed)
    change = int(rng.integers(1, 1000))
    s = BisectionStrategy(1000, higher_is_better=higher_is_better, seed=seed)
    while not s.done:
        for pos in s.ask():
            z = (rng.gamma(4.0) - 4.0) / 2.0  # mean 0, sd 1, skewness 1
            bad = pos >= change
            level = (0.95 if higher_is_better else 1.05) if bad else 1.0
            s.tell(pos, 100.0 * level * (1 + 0.03 * z))
    return s, change


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_noise_skew_is_learned_with_its_sign(higher_is_better):
    # u = sign * log(value): a right tail in the metric is a left tail in u when lower is better.
    right, skews = 0, []
    for seed in range(12):
        s, change = _skewed_run(higher_is_better, seed)
        v = s.verdict()
        right += v.status == "culprit" and v.index == change
        skews.append(s._skew)  # one run's estimate is noisy (tens of samples); their mean is not
    sign = 1 if higher_is_better else -1
    assert sign * np.mean(skews) > 0.1, skews  # ~0.45 over 30 seeds
    assert right >= 11, right

# --------------------------------------------------------------------------- untestable
def test_untestable_positions_are_skipped_and_never_retried():
    untestable = set(range(3, 999, 7)) - {499, 500}
    h = History(1000, change=500, step=0.10, cv=0.02, seed=6, untestable=untestable)
    v = run(h, seed=0)
    assert (v.status, v.index) == ("culprit", 500)
    tried_bad = [p for p in h.calls if p in untestable]
    assert len(tried_bad) == len(set(tried_bad)), "an untestable position was measured twice"
    assert all(val is None for p, val in v.path if p in untestable)


def test_untestable_neighbour_gives_the_ambiguous_range():
    # 99 cannot be built: c = 99 and c = 100 explain the data equally well.
    h = History(200, change=100, step=0.10, cv=0.02, seed=7, untestable={99})
    v = run(h, seed=0)
    assert v.status == "inconclusive" and v.reason == "untestable"
    assert v.index is None
    assert v.range == (99, 100) and v.range_mass >= 0.95


def test_untestable_culprit_itself_gives_range_up_to_next_testable():
    h = History(200, change=100, step=0.10, cv=0.02, seed=8, untestable={100, 101})
    v = run(h, seed=0)
    assert v.status == "inconclusive" and v.reason == "untestable"
    assert v.range == (100, 102)


def test_untestable_endpoint_is_inconclusive_at_once():
    h = History(50, change=20, step=0.1, cv=0.01, seed=9, untestable={49})
    v = run(h, seed=0)
    assert v.status == "inconclusive" and v.reason == "endpoint-untestable"
    assert v.trials <= 2


# --------------------------------------------------------------------------- protocol
def test_trials_equal_measure_calls_and_path():
    h = History(500, change=321, step=0.05, cv=0.02, seed=10, untestable={100, 200, 320})
    v = run(h, seed=0)
    assert v.trials == len(h.calls) == len(v.path)
    assert [p for p, _ in v.path] == h.calls


def test_same_seed_and_tells_give_same_asks_and_replay_resumes():
    h = History(1000, change=640, step=0.05, cv=0.03, seed=11, untestable={300, 301})
    a = BisectionStrategy(1000, seed=5)
    asks = []
    while not a.done:
        batch = a.ask()
        asks.append(batch)
        for p in batch:
            a.tell(p, h.measure(p))
    path = list(a.verdict().path)

    # Same seed, same tells -> identical asks at every step.
    b = BisectionStrategy(1000, seed=5)
    k = 0
    for batch in asks:
        assert b.ask() == batch
        for p in batch:
            b.tell(*path[k])
            k += 1
    assert b.done and b.verdict() == a.verdict()

    # Resume: replay the first half of the stored trials without asking, then ask.
    half = len(asks) // 2
    c = BisectionStrategy(1000, seed=5)
    for pos, val in path[:half]:
        c.tell(pos, val)
    assert c.ask() == asks[half]


def test_different_seed_can_change_the_order_of_endpoint_checks():
    orders = {tuple(BisectionStrategy(100, seed=s, parallel=1).ask()) for s in range(8)}
    assert orders == {(0,), (99,)}


def test_parallel_batches_are_speculative_and_still_right():
    h = History(1000, change=777, step=0.10, cv=0.02, seed=12)
    s = BisectionStrategy(1000, seed=0, parallel=4)
    sizes = []
    while not s.done:
        batch = s.ask()
        assert 1 <= len(batch) <= 4
        sizes.append(len(batch))
        for p in batch:
            s.tell(p, h.measure(p))
    v = s.verdict()
    assert (v.status, v.index) == ("culprit", 777)
    assert max(sizes) == 4 and np.mean(sizes) > 2.0, sizes
    assert v.trials == len(h.calls)
    # Fewer rounds than a sequential search of the same history would need.
    assert len(sizes) < v.trials / 2


def test_ask_reissues_outstanding_when_all_slots_busy_and_refills_freed_ones():
    s = BisectionStrategy(100, seed=0, parallel=2)
    first = s.ask()
    assert sorted(first) == [0, 99]
    assert sorted(s.ask()) == [0, 99]  # nothing new: every slot busy
    s.tell(first[0], 100.0)
    refill = s.ask()
    assert len(refill) == 1


def test_budget_exhausted_is_inconclusive_with_a_range():
    h = History(1000, change=400, step=0.10, cv=0.08, seed=13)
    v = run(h, seed=0, max_trials=30)
    assert v.status == "inconclusive" and v.reason == "budget"
    assert v.trials == 30 == len(h.calls)
    assert v.range is not None and v.range[0] <= v.range[1]
    assert v.index is None


def test_verdict_to_dict_is_json():
    h = History(100, change=70, step=0.2, cv=0.01, seed=14, untestable={48, 49, 50, 51})
    v = run(h, seed=0)
    d = json.loads(json.dumps(v.to_dict()))
    assert d["status"] == "culprit" and d["index"] == 70 and d["trials"] == v.trials
    assert len(d["path"]) == v.trials and any(val is None for _, val in d["path"])
    assert math.isclose(d["effect"], v.effect)


@pytest.mark.parametrize(
    "kw",
    [dict(n=1), dict(n=10, confidence=1.0), dict(n=10, min_effect=0.0), dict(n=10, parallel=0),
     dict(n=10, max_trials=3)],
)
def test_bad_arguments_raise(kw):
    n = kw.pop("n")
    with pytest.raises(ValueError):
        BisectionStrategy(n, **kw)


def test_bad_tells_raise():
    s = BisectionStrategy(10)
    with pytest.raises(ValueError):
        s.tell(10, 1.0)
    with pytest.raises(ValueError):
        s.tell(0, -1.0)
    with pytest.raises(ValueError):
        s.tell(0, float("nan"))


def test_endpoints_are_remeasured_during_long_runs():
    h = History(1000, change=613, step=0.04, cv=0.03, seed=15)
    v = run(h, seed=0)
    positions = [p for p, _ in v.path]
    assert v.trials > 30
    # After the confirm step (the first 6+ trials), both endpoints come back.
    later = positions[12:]
    assert 0 in later and 999 in later, positions


def test_lost_cuda_graphs_regression_with_very_different_noise():
    # Measured on the H200: graphs 2728 tok/s at CV 0.6%; eager 905 tok/s at CV 14%.
    rng = np.random.default_rng(16)
    calls = []

    def measure(i):
        calls.append(i)
        if i >= 321:
            return 905.0 * (1 + 0.14 * rng.standard_normal())
        return 2728.0 * (1 + 0.006 * rng.standard_normal())

    v = bisect_sequence(1000, measure, seed=0)
    assert (v.status, v.index) == ("culprit", 321)
    assert 0.30 < v.effect < 0.36
    assert v.trials == len(calls) <= 30


def test_linear_drift_does_not_mislead():
    # Everything slows by 3% over 100 trials while a 6% step hides at 250.
    calls = []
    rng = np.random.default_rng(17)

    def measure(i):
        calls.append(i)
        level = 94.0 if i >= 250 else 100.0
        return level * (1 - 0.0003 * len(calls)) * (1 + 0.02 * rng.standard_normal())

    v = bisect_sequence(500, measure, seed=0)
    assert (v.status, v.index) == ("culprit", 250)


def test_noiseless_benchmark_is_plain_bisection():
    calls = []

    def measure(i):
        calls.append(i)
        return 90.0 if i >= 417 else 100.0  # a deterministic (or quantised) metric

    v = bisect_sequence(1000, measure, seed=0)
    assert (v.status, v.index) == ("culprit", 417)
    assert v.trials <= 20


# --------------------------------------------------------------------------- truths that are not one step
def _profile_run(n, level, cv, seed, stall_rate=0.0):
    """Bisect a history whose noiseless metric at position i is ``level(i)``; a ``stall_rate`` share
    of readings is 1.5x to 3x slower. Returns (verdict, indices into path of the stalled readings)."""
    rng = np.random.default_rng(seed)
    stalled, calls = [], [0]

    def measure(i):
        calls[0] += 1
        v = level(i) * (1 + cv * rng.standard_normal())
        if stall_rate and rng.random() < stall_rate:
            stalled.append(calls[0] - 1)
            v /= rng.uniform(1.5, 3.0)
        return v

    return bisect_sequence(n, measure, seed=seed), stalled


def test_a_gradual_slide_is_reported_as_a_range_not_one_commit():
    # 0.2% per commit over 50 commits (10% in all): the old strategy named one commit in most runs.
    outcomes, overlaps = [], 0
    for seed in range(10):
        first = 100 + 37 * seed
        v, _ = _profile_run(400, lambda i, f=first: 100.0 * 0.998 ** min(max(i - f + 1, 0), 50), 0.02, seed)
        outcomes.append(v.status)
        if v.status == "gradual":
            lo, hi = v.range
            overlaps += lo <= first + 49 and hi >= first
            assert v.index is None and v.effect is not None and v.effect < 0.97
    assert outcomes.count("gradual") >= 7, outcomes  # the old strategy: never
    assert overlaps >= outcomes.count("gradual") - 1


def test_two_steps_are_reported_as_several_with_each_step():
    outcomes, found = [], 0
    for seed in range(10):
        c1 = 60 + 13 * seed
        c2 = c1 + 150
        v, _ = _profile_run(400, lambda i, a=c1, b=c2: 100.0 * (0.93 if i >= a else 1) * (0.93 if i >= b else 1),
                            0.02, seed)
        outcomes.append(v.status)
        if v.status == "several":
            assert len(v.steps) == 2 and v.index == v.steps[0]["index"]
            found += all(any(s["range"][0] <= c <= s["range"][1] for s in v.steps) for c in (c1, c2))
            d = v.to_dict()
            json.dumps(d)
            assert d["steps"][0]["effect"] < 1
    # Power is the limit: a second step far from where the search looked is often not read enough
    # to reject one step (docs/bisection.md, limits); old strategy: never.
    assert outcomes.count("several") >= 4, outcomes
    assert found >= outcomes.count("several") // 2


def test_stalls_do_not_put_the_answer_on_a_wrong_commit():
    right, wrong_sure, discounted, stalls = 0, 0, 0, 0
    for seed in range(10):
        change = 50 + 29 * seed
        v, stalled = _profile_run(400, lambda i, c=change: 100.0 * (0.95 if i >= c else 1), 0.02, seed,
                                  stall_rate=0.03)
        right += v.status == "culprit" and v.index == change
        wrong_sure += v.status == "culprit" and v.index != change
        discounted += len(set(stalled) & set(v.discounted))
        stalls += len(stalled)
    assert right >= 8 and wrong_sure <= 1, (right, wrong_sure)
    assert discounted >= 0.7 * stalls, (discounted, stalls)  # the verdict names the readings it did not trust


def test_an_undecided_campaign_lists_where_the_mass_is():
    v = run(History(1000, change=400, step=0.02, cv=0.04, seed=7), seed=7, max_trials=60, min_effect=0.01)
    assert v.status == "inconclusive"
    assert 1 <= len(v.top) <= 8
    masses = [m for _, m in v.top]
    assert masses == sorted(masses, reverse=True)
    assert sum(masses) >= 0.8 or len(v.top) == 8
    assert v.to_dict()["top"][0][0] == v.top[0][0]


def test_two_clear_steps_are_never_called_no_regression():
    """Two steps (25% then 20% more) at CV 1% over 13 positions, one untestable: the endpoints
    differ by 40%, so 'no-regression' is always wrong. The one-step posterior used to put 0.95 on
    'no change' in 7 of 300 seeds (58, 88 and 116 among these): the endpoints now veto it."""
    import random as _random
    statuses = {}
    for seed in range(120):
        rng = _random.Random(seed)

        def measure(i):
            if i == 4:
                return None
            return 100 * (1.0 if i < 3 else 0.75 if i < 9 else 0.6) * rng.gauss(1, 0.01)

        statuses[seed] = bisect_sequence(13, measure, seed=seed, max_trials=200).status
    wrong = {s: v for s, v in statuses.items() if v == "no-regression"}
    assert not wrong, wrong
    assert sum(v == "several" for v in statuses.values()) >= 114, statuses
