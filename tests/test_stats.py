"""Unit tests of bisect_lab.stats: comparison, summary, planning, diagnostics, gate."""
import math

import numpy as np
import pytest

from bisect_lab import stats


def lognormal(rng, n, level=1000.0, cv=0.03):
    return level * np.exp(rng.normal(0, cv, n))


def test_compare_detects_regression_and_direction():
    rng = np.random.default_rng(1)
    a = lognormal(rng, 12)
    b = lognormal(rng, 12, level=900)
    c = stats.compare(a, b)
    assert c.verdict == "different" and c.regression and not c.improvement
    assert c.ci_low < c.ratio < c.ci_high
    assert 0.85 < c.ratio < 0.95 and c.n_a == 12 and c.n_b == 12
    # the same numbers as a latency (lower is better) is an improvement, not a regression
    lat = stats.compare(a, b, higher_is_better=False)
    assert lat.improvement and not lat.regression


def test_compare_same_and_unknown():
    rng = np.random.default_rng(2)
    a, b = lognormal(rng, 40, cv=0.005), lognormal(rng, 40, cv=0.005)
    assert stats.compare(a, b).verdict == "same"
    a, b = lognormal(rng, 3, cv=0.05), lognormal(rng, 3, cv=0.05)
    assert stats.compare(a, b).verdict == "unknown"


def test_compare_rejects_bad_input_and_handles_tiny_samples():
    with pytest.raises(ValueError):
        stats.compare([1.0, -2.0], [1.0, 2.0])
    c = stats.compare([1.0], [2.0])
    assert c.verdict == "unknown" and not c.regression
    assert c.to_dict()["n_a"] == 1


def test_summarize():
    s = stats.summarize([10, 11, 9, 10.5, 9.5, 10, 10.2])
    assert s.n == 7 and s.median == 10 and s.ci_low <= s.median <= s.ci_high
    assert s.min == 9 and s.max == 11 and 0 < s.cv < 0.1
    assert stats.summarize([]).n == 0


def test_plan_trials_grows_with_noise_and_shrinks_with_effect():
    n3 = stats.plan_trials(0.03)
    assert 30 <= n3 <= 45            # 2*(1.96+0.84)^2*(0.03/0.0198)^2 ~ 36, noncentral t a bit more
    assert stats.plan_trials(0.06) > 3 * n3
    assert stats.plan_trials(0.03, min_effect=0.05) < n3 / 4
    assert stats.plan_trials([[1, 1.03, 0.97], [2, 2.06, 1.94]]) >= 2
    with pytest.raises(ValueError):
        stats.plan_trials([1.0])


def test_drift_and_outliers():
    rng = np.random.default_rng(3)
    t = np.arange(60)
    v = 1000 * (1 - 0.001 * t) * np.exp(rng.normal(0, 0.005, 60))
    d = stats.detect_drift(v)
    assert d.drifting and d.slope < 0 and abs(d.slope + 0.001) < 0.0005
    flat = stats.detect_drift(1000 * np.exp(rng.normal(0, 0.005, 60)))
    assert flat.p_value > 0.001
    # arm fixed effects: two arms at different levels, interleaved, no drift
    groups = ["a", "b"] * 30
    vals = [1000 if g == "a" else 900 for g in groups] * np.exp(rng.normal(0, 0.005, 60))
    assert not stats.within_group_trend(t, vals, groups, alpha=0.001).drifting
    x = list(1000 * np.exp(rng.normal(0, 0.01, 30))) + [2000.0]
    assert stats.outliers(x) == [30]


def test_adjust_pvalues_holm():
    reject, adj = stats.adjust_pvalues([0.01, 0.02, 0.5], "holm")
    assert list(reject) == [True, True, False]
    assert adj[0] == pytest.approx(0.03)


def test_holm_step_down_equals_statsmodels():
    """Our Holm (statsmodels' calls gc.collect() each time) gives statsmodels' answers: random
    families, ties, p-values exactly at a step's threshold, ones above 1 after scaling."""
    from statsmodels.stats.multitest import multipletests
    rng = np.random.default_rng(5)
    families = [[0.05 / 3, 0.05 / 2, 0.05], [0.5, 0.5, 0.5], [1e-12], [0.9, 0.01, 0.9, 0.2]]
    for _ in range(500):
        p = rng.random(int(rng.integers(1, 15))) ** rng.uniform(0.2, 4)
        if rng.random() < 0.3:
            p[: p.size // 2] = p[0]
        families.append(list(p))
    for p in families:
        reject, adj = stats.adjust_pvalues(p, "holm", 0.05)
        want_reject, want_adj, _, _ = multipletests(p, alpha=0.05, method="holm")
        assert adj == pytest.approx(want_adj) and list(reject) == list(want_reject), p


def test_regression_gate_decisions():
    rng = np.random.default_rng(4)
    good = lognormal(rng, 8)
    assert stats.regression_gate(good, lognormal(rng, 8, level=900)).decision == "regression"
    assert stats.regression_gate(lognormal(rng, 30, cv=0.005), lognormal(rng, 30, cv=0.005)).decision == "no-regression"
    assert stats.regression_gate(good[:2], lognormal(rng, 2, level=990)).decision == "continue"
    # lower is better: a higher latency is the regression
    assert stats.regression_gate(good, lognormal(rng, 8, level=1100), higher_is_better=False).decision == "regression"


def test_yuen_log_matches_scipy_and_reduces_to_welch():
    from scipy import stats as st

    from bisect_lab.stats.compare import welch_log, yuen_log
    rng = np.random.default_rng(5)
    a = np.exp(rng.normal(0, 0.05, 13))
    b = np.exp(0.04 + 0.05 * rng.standard_t(3, 17))
    for trim in (0.1, 0.2):
        d, se, df, _ = yuen_log(a, b, trim)
        ref = st.ttest_ind(np.log(b), np.log(a), equal_var=False, trim=trim)
        assert d / se == pytest.approx(ref.statistic) and df == pytest.approx(ref.df)
    d, se, df, _ = yuen_log(a, b, 0.0)
    assert (d, se, df) == pytest.approx(welch_log(a, b))


def test_yuen_log_conservative_df_follows_the_noisy_arm():
    from bisect_lab.stats.compare import yuen_log
    rng = np.random.default_rng(6)
    tight = np.exp(rng.normal(0, 0.006, 6))          # CUDA graphs: CV 0.6%
    noisy = np.exp(rng.normal(-0.1, 0.14, 30))       # eager: CV 14%
    *_, df_lo = yuen_log(tight, noisy, 0.0)
    assert 20 < df_lo <= 29
    # two values that happen to agree carry no claim of being tight: Hsu's min(n) - 1 again
    *_, df_lo = yuen_log(np.array([100.0, 100.001]), noisy, 0.0)
    assert df_lo == 1
    # equal spread: min(n) - 1
    *_, df_lo = yuen_log(np.exp(rng.normal(0, 0.03, 5)), np.exp(rng.normal(0, 0.03, 9)), 0.0)
    assert df_lo <= 4
