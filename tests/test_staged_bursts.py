"""Bursts of host contention (issue #23): no factor named on a burst, culprits still named through them.

A burst lasts several consecutive trials and slows every reading in it by 20-35%; the simulated
machine below produces them in the order the strategy asks (its trial order), as a loaded box does.
"""
import math

import numpy as np

from bisect_lab.strategies.base import Observation, drive
from bisect_lab.strategies.paired_check import BURST_Z, PairedCheck, burst_evidence
from bisect_lab.strategies.staged import StagedAttribution


def bursty(n_factors, effects=(), *, kind="additive", cv=0.03, rate=0.02, length=6, seed=0):
    """A measure() with hidden culprits (the first len(effects) of a seeded draw) and bursts."""
    rng = np.random.default_rng([23, seed, n_factors, len(effects), length, int(rate * 1000)])
    names = [f"f{k:02d}" for k in range(n_factors)]
    culprits = [names[k] for k in rng.choice(n_factors, size=len(effects), replace=False)]
    state = {"left": 0, "size": 0.0}

    def level(active):
        on = [c in active for c in culprits]
        if kind == "story":           # one culprit + an AND pair (the CPU demo's shape)
            return ((math.log1p(-effects[0]) if on[0] else 0.0)
                    + (math.log1p(-effects[1]) if on[1] and on[2] else 0.0))
        return sum(math.log1p(-e) for e, o in zip(effects, on) if o)

    def measure(active):
        starts, size, jitter = rng.random() < rate, rng.uniform(0.20, 0.35), rng.normal()
        if state["left"] == 0 and starts:
            state.update(left=length, size=size)
        slow = 1.0
        if state["left"]:
            state["left"] -= 1
            slow = (1 - state["size"]) * math.exp(0.03 * jitter)
        return 1000.0 * math.exp(level(active) + rng.normal(0, cv)) * slow

    measure.drawn = culprits           # in draw order: the first is the story's lone culprit
    return names, measure, sorted(culprits)


def run(names, measure, seed, guard=True, ref=None, **kw):
    """``guard``: the adjacent-pair check; ``ref``: the reference guard (staged_reference), by
    default as ``guard``: guard=False is the strategy before either."""
    st = StagedAttribution(names, seed=seed, max_trials=kw.pop("max_trials", 400), **kw)
    st.burst_guard = guard
    st.reference_guard = guard if ref is None else ref
    return drive(st, measure)


def test_null_with_bursts_names_no_factor():
    """No regression, bursts of 6 and of 20 trials: a factor named in at most 5% of fixed seeds,
    where the strategy without the guard names one far more often (the test can fail)."""
    named, named_before = 0, 0
    runs = 0
    for length, rate in ((6, 0.02), (20, 0.01)):
        for seed in range(10):
            names, measure, _ = bursty(10, rate=rate, length=length, seed=seed)
            v = run(names, measure, seed)
            named += bool(v.culprits)
            assert v.status != "culprits" or v.culprits, v
            names, measure, _ = bursty(10, rate=rate, length=length, seed=seed)
            named_before += bool(run(names, measure, seed, guard=False).culprits)
            runs += 1
    assert named <= 0.05 * runs, (named, runs)
    assert named_before > named, (named_before, named)


def test_culprits_are_still_named_through_bursts():
    """One 25% culprit and one 5% culprit with bursts: never a false name; right in 10 of 10 and
    at least 9 of 10 seeds (measured: 10 of 10 in 311 trials for the 5% culprit; the pair check
    alone 9 in 746, neither guard 7, two of the misses false names, in 676), and the reference
    guard saves most of the pair check's trials."""
    for effect, want in ((0.25, 10), (0.05, 9)):
        right, trials, pairs_only = 0, 0, 0
        for seed in range(10):
            names, measure, truth = bursty(10, (effect,), seed=seed)
            v = run(names, measure, seed)
            assert not set(v.culprits) - set(truth), (effect, seed, v.culprits, truth)
            right += v.status == "culprits" and list(v.culprits) == truth
            trials += v.trials
            names, measure, truth = bursty(10, (effect,), seed=seed)
            pairs_only += run(names, measure, seed, ref=False).trials
        assert right >= want, (effect, right)
        if effect == 0.05:
            assert trials < 0.6 * pairs_only, (trials, pairs_only)


def test_demo_shape_under_bursts_names_no_no_op():
    """The CPU demo's shape (one 25% culprit + a 15% AND pair among 5, CV 5%) with bursts: no no-op
    named in any of 12 seeds, the 25% culprit named in at least 11."""
    main = 0
    for seed in range(12):
        names, measure, truth = bursty(5, (0.25, 0.15, 0.0), kind="story", cv=0.05, seed=seed)
        v = run(names, measure, seed, max_trials=150)
        assert not set(v.culprits) - set(truth), (seed, v.culprits, truth, v.warnings)
        main += v.status == "culprits" and measure.drawn[0] in v.culprits
    assert main >= 11, main


def _obs(values, arms):
    return [Observation(k, a, v) for k, (a, v) in enumerate(zip(arms, values))]


def test_burst_evidence_marks_a_burst_and_not_gaussian_noise():
    rng = np.random.default_rng(5)
    arms = [frozenset(), frozenset({"a"})] * 20
    clean = [1000 * math.exp(rng.normal(0, 0.03)) * (0.9 if "a" in arm else 1) for arm in arms]
    z, _, noise = burst_evidence(_obs(clean, arms), {"a"})
    assert z < BURST_Z and 0.015 < noise < 0.05, (z, noise)
    hit = [v * (0.75 if 20 <= k < 26 else 1) for k, v in enumerate(clean)]
    z, at, _ = burst_evidence(_obs(hit, arms), {"a"})
    assert z >= BURST_Z and 20 <= at < 26, (z, at)


def test_paired_check_clears_a_no_op_through_a_burst_and_confirms_a_culprit():
    bad, without = frozenset({"a", "b"}), frozenset({"b"})
    rng = np.random.default_rng(1)

    def pairs(effect, burst_at):
        obs = []
        check = PairedCheck({"a": (without, bad)}, {"a": 0.25}, noise=0.03, start=0, seed=3)
        while True:
            nxt = check.next_arms(obs, 100)
            if not nxt:
                return check.unconfirmed(obs)
            for arm in nxt:
                slow = 0.7 if burst_at <= len(obs) < burst_at + 5 else 1.0
                lv = math.log1p(-effect) if arm == bad else 0.0
                obs.append(Observation(len(obs), arm, 1000 * math.exp(lv + rng.normal(0, 0.03)) * slow))

    assert "a" in pairs(0.0, burst_at=1)        # a no-op, a burst over its first pairs: not confirmed
    assert "a" not in pairs(0.10, burst_at=1)   # a 10% culprit: confirmed through the same burst
