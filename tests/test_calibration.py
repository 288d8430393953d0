"""Calibration of the statistics and of the attribution strategy, by simulation with fixed seeds.

These tests can fail: they measure error rates and coverage; nothing is hard-coded.
"""
import math

import numpy as np
import pytest

from bisect_lab import stats
from bisect_lab.strategies import attribute_one_stage

# normalised samples of a batch-1 decode loop on an H200 without CUDA graphs (14% CV, heavy right tail)
H200_EAGER = np.array([0.8281, 0.9157, 0.9568, 0.9627, 0.9790, 0.9795, 0.9846, 1.0150, 1.0661,
                       1.0750, 1.1788, 1.2007, 1.2781, 1.3547])


def skewed(rng, n):
    """Kernel-smoothed bootstrap of the H200 eager samples (keeps the right tail)."""
    ls = np.log(H200_EAGER)
    return np.exp(ls[rng.integers(len(ls), size=n)] + rng.normal(0, 0.04, n))


@pytest.mark.parametrize("noise", ["lognormal", "skewed"])
def test_aa_false_positive_rate(noise):
    """A/A: 'different' in at most alpha + 1.5 points of 2000 pairs (and not absurdly conservative)."""
    rng = np.random.default_rng(11)
    alpha, hits, pairs = 0.05, 0, 2000
    for k in range(pairs):
        n = 5 + k % 11                                   # 5..15 trials per arm
        if noise == "lognormal":
            a, b = np.exp(rng.normal(0, 0.03, n)), np.exp(rng.normal(0, 0.03, n))
        else:
            a, b = skewed(rng, n), skewed(rng, n)
        hits += stats.compare(a, b, alpha=alpha).verdict == "different"
    rate = hits / pairs
    assert rate <= alpha + 0.015, rate
    assert rate >= 0.02, rate


def test_run_with_many_arms_holds_the_family_wise_error():
    """A/A with five arms (ten pairwise comparisons, as `run` reports them): before Holm's
    correction some pair reads "different" in far more than alpha of the runs; after it, in at most
    alpha + 1.5 points (400 runs), and a real 10% difference is still called different."""
    import itertools
    from bisect_lab.summaries import holm_comparisons
    rng = np.random.default_rng(13)
    alpha, runs = 0.05, 400
    raw = adjusted = 0
    for _ in range(runs):
        arms = [np.exp(rng.normal(0, 0.03, 6)) for _ in range(5)]
        rows = []
        for a, b in itertools.combinations(arms, 2):
            c = stats.compare(a, b, alpha=alpha)
            rows.append({"p_value": c.p_value, "verdict": c.verdict, "regression": bool(c.regression)})
        raw += any(r["verdict"] == "different" for r in rows)
        holm_comparisons(rows, alpha)
        assert all(r["p_adjusted"] >= r["p_value"] for r in rows)
        adjusted += any(r["verdict"] == "different" for r in rows)
    assert raw / runs > 0.15, raw / runs
    assert adjusted / runs <= alpha + 0.015, adjusted / runs
    real = [stats.compare(np.exp(rng.normal(0, 0.03, 6)), np.exp(rng.normal(-0.1, 0.03, 6)), alpha=alpha)]
    rows = [{"p_value": c.p_value, "verdict": c.verdict, "regression": bool(c.regression)} for c in real * 10]
    holm_comparisons(rows, alpha)
    assert all(r["verdict"] == "different" and r["regression"] for r in rows)


def test_run_with_several_metrics_holds_the_family_wise_error():
    """A/A on four metrics (throughput plus three [benchmark.secondary] ones, two arms), through
    `run`'s own summary: compared metric by metric some metric reads "different" in far more than
    alpha of the runs; with one Holm family over every metric's comparisons, in at most alpha + 1.5
    points (400 runs); a real 10% latency regression beside three null metrics is still found."""
    from types import SimpleNamespace
    from bisect_lab.model import TrialResult, TrialStatus
    from bisect_lab.summaries import run_summary
    rng = np.random.default_rng(17)
    alpha, runs, n = 0.05, 400, 6
    names = ["output_throughput", "median_ttft_ms", "mean_tpot_ms", "request_throughput"]
    exp = SimpleNamespace(name="aa", design=SimpleNamespace(alpha=alpha, min_effect=0.02), benchmark=SimpleNamespace(
        metric=names[0], higher_is_better=True, parser="sglang-bench-serving",
        secondary=((names[1], False), (names[2], False), (names[3], True))))
    arms = [SimpleNamespace(spec="none"), SimpleNamespace(spec="all")]

    def summary(shift=0.0):
        trials = [TrialResult("c", k, arm.spec, TrialStatus.OK, "local", 0.0, 1.0,
                              {m: float(np.exp(rng.normal(shift if (m == names[1] and arm.spec == "all") else 0, 0.03)))
                               for m in names})
                  for k, arm in enumerate([a for a in arms for _ in range(n)])]
        res = run_summary(exp, arms, trials, "c")
        return [c for m in [res] + res["secondary"] for c in m["comparisons"]]

    raw = adjusted = 0
    for _ in range(runs):
        rows = summary()
        assert len(rows) == 4 and all(r["p_adjusted"] >= r["p_value"] for r in rows)
        raw += any(r.get("unadjusted_verdict", r["verdict"]) == "different" for r in rows)
        adjusted += any(r["verdict"] == "different" for r in rows)
    assert raw / runs > 0.12, raw / runs
    assert adjusted / runs <= alpha + 0.015, adjusted / runs
    rows = summary(shift=math.log(1.10))
    assert rows[1]["verdict"] == "different" and rows[1]["regression"]          # latency: lower is better


@pytest.mark.parametrize("case", ["equal", "heteroscedastic", "unbalanced"])
def test_interval_coverage(case):
    """95% intervals of the ratio cover the true ratio 93.5-96.5% of the time (2000 pairs)."""
    rng = np.random.default_rng(12)
    true_ratio = 0.95
    covered, pairs = 0, 2000
    for _ in range(pairs):
        if case == "equal":
            na, nb, sa, sb = 10, 10, 0.03, 0.03
        elif case == "heteroscedastic":                  # 0.6% vs 14%: the H200 with / without graphs
            na, nb, sa, sb = 12, 12, 0.006, 0.14
        else:
            na, nb, sa, sb = 6, 20, 0.05, 0.02
        a = 1000 * np.exp(rng.normal(0, sa, na))
        b = 1000 * true_ratio * np.exp(rng.normal(0, sb, nb))
        c = stats.compare(a, b)
        covered += c.ci_low <= true_ratio <= c.ci_high
    cov = covered / pairs
    assert 0.935 <= cov <= 0.965, cov


def test_gate_false_regression_rate_sequential():
    """The sequential good-vs-bad gate, looked at after every pair, rarely confirms a regression
    that does not exist (A/A), and confirms a real 10% one."""
    rng = np.random.default_rng(13)
    false = 0
    runs = 300
    for _ in range(runs):
        g, b = list(np.exp(rng.normal(0, 0.03, 2))), list(np.exp(rng.normal(0, 0.03, 2)))
        while len(g) < 40:
            d = stats.regression_gate(g, b).decision
            if d != "continue":
                false += d == "regression"
                break
            g.append(float(np.exp(rng.normal(0, 0.03))))
            b.append(float(np.exp(rng.normal(0, 0.03))))
    assert false / runs <= 0.08, false / runs
    hits = sum(stats.regression_gate(np.exp(rng.normal(0, 0.03, 6)), 0.9 * np.exp(rng.normal(0, 0.03, 6))).decision
               == "regression" for _ in range(100))
    assert hits >= 95


def _scenario(rng, n, culprits, effect, cv=0.03, kind="single"):
    names = [f"f{k}" for k in range(n)]
    bad = [names[k] for k in rng.choice(n, size=culprits, replace=False)]

    def measure(active):
        if kind == "and":
            hit = all(c in active for c in bad)
        else:
            hit = any(c in active for c in bad)
        return 1000.0 * (1 - effect if hit and effect else 1.0) * math.exp(rng.normal(0, cv))

    return names, measure, sorted(bad)


@pytest.mark.parametrize("effect,n,reps,max_mean", [(0.25, 8, 20, 14), (0.05, 6, 60, 60)])
def test_attribution_accuracy_single(effect, n, reps, max_mean):
    """Right in >= 90% of seeds, a wrong factor named in at most 1 seed in 15 (about 2.5% measured:
    2 of 80 seeds for the 5% culprit). The bound is a rate over many seeds, not "at most one of
    20": another numpy / scipy build moves single seeds (20 seeds once gave 2 false names), and the
    promise is the rate."""
    correct, false, trials = 0, 0, []
    for rep in range(reps):
        rng = np.random.default_rng([21, rep])
        names, measure, truth = _scenario(rng, n, 1, effect)
        v = attribute_one_stage(names, measure, seed=rep)
        correct += v.status == "culprits" and v.culprits == truth
        false += bool(set(v.culprits) - set(truth))
        trials.append(v.trials)
    assert correct >= 0.9 * reps, (correct, trials)
    assert false <= max(1, reps // 15), (false, reps)
    assert np.mean(trials) <= max_mean, trials


def test_attribution_no_regression_rarely_names_culprits():
    """A/A: good and bad are the same. Any sequential procedure is fooled by noise now and then (here
    about 1.5% of runs over 200 seeds); the rate must stay well under alpha = 5%, and most runs
    must end in `no-regression` rather than spend the budget."""
    names_false = 0
    statuses = []
    for rep in range(60):
        rng = np.random.default_rng([22, rep])
        names, measure, _ = _scenario(rng, 6, 1, 0.0)
        v = attribute_one_stage(names, measure, seed=rep, max_trials=160)
        statuses.append(v.status)
        names_false += bool(v.culprits)
    assert names_false <= 3, statuses            # <= alpha (5%) of 60
    assert statuses.count("no-regression") >= 45, statuses


# ---------------------------------------------------------------- noise that does not fit a normal
def _noise(rng, kind, n, cv=0.03):
    """Log-scale noise: normal, Student-t(3) scaled to the CV, or normal with 5% of readings
    stalled 50% slower (a shared box, a page-cache miss)."""
    if kind == "lognormal":
        return rng.normal(0, cv, n)
    if kind == "t3":
        return cv / math.sqrt(3) * rng.standard_t(3, n)
    return rng.normal(0, cv, n) - math.log(1.5) * (rng.random(n) < 0.05)


@pytest.mark.parametrize("noise", ["lognormal", "t3", "stalls"])
def test_robust_compare_aa_rate_and_coverage(noise):
    """The contamination model's comparison (``compare(robust=True)``: stalls discounted, Yuen's
    winsorized variance) holds its level and its coverage where the noise is not normal: A/A
    'different' at most alpha + 1.5 points, 95% intervals covering the true ratio of the arms'
    ordinary readings 93.5-96.5% of the time (2000 pairs, 8-22 readings per arm)."""
    rng = np.random.default_rng(41)
    alpha, pairs, diff, covered = 0.05, 2000, 0, 0
    for k in range(pairs):
        n = 8 + k % 11
        a, b = np.exp(_noise(rng, noise, n)), np.exp(_noise(rng, noise, n))
        diff += stats.compare(a, b, alpha=alpha, robust=True).verdict == "different"
        a = 1000 * np.exp(_noise(rng, noise, 8 + k % 9))
        b = 950 * np.exp(_noise(rng, noise, 10 + k % 13))
        c = stats.compare(a, b, robust=True)
        covered += c.ci_low <= 0.95 <= c.ci_high
    assert diff / pairs <= alpha + 0.015, diff / pairs
    assert 0.935 <= covered / pairs <= 0.965, covered / pairs


@pytest.mark.parametrize("noise", ["t3", "stalls"])
def test_robust_gate_sequential_aa_rate(noise):
    """The robust sequential gate, looked at after every pair of readings, confirms a regression
    that does not exist in at most alpha + 1.5 points of A/A runs under heavy tails and stalls (400
    runs), and still confirms a real 10% regression with stalls in both arms."""
    rng = np.random.default_rng(43)
    false, runs = 0, 400
    for _ in range(runs):
        g, b = list(np.exp(_noise(rng, noise, 2))), list(np.exp(_noise(rng, noise, 2)))
        while len(g) < 40:
            d = stats.regression_gate(g, b, robust=True).decision
            if d != "continue":
                false += d == "regression"
                break
            g.append(float(np.exp(_noise(rng, noise, 1))[0]))
            b.append(float(np.exp(_noise(rng, noise, 1))[0]))
    assert false / runs <= 0.065, false / runs
    hits = sum(stats.regression_gate(np.exp(_noise(rng, noise, 10)), 0.9 * np.exp(_noise(rng, noise, 10)),
                                     robust=True).decision == "regression" for _ in range(100))
    assert hits >= 95, hits


def test_stalls_are_discounted_and_gaussian_readings_almost_never():
    """What the contamination model discounts: nearly every stall 50% slower at CV 3%, about one
    Gaussian reading in 170 at most (about 1 in 200 measured, arms of 8-30 readings)."""
    rng = np.random.default_rng(47)
    found = stalls = gauss = total = 0
    for k in range(600):
        n = 8 + k % 23
        y = rng.normal(0, 0.03, n)
        gauss += int(stats.discount([y])[0][0].sum())
        total += n
        s = rng.random(n) < 0.05
        m = stats.discount([y - math.log(1.5) * s])[0][0]
        found += int((m & s).sum())
        stalls += int(s.sum())
    assert gauss / total <= 0.006, gauss / total
    assert found / stalls >= 0.95, found / stalls
