"""Statistics on two levels (stats.sessions): variance components, the session-blocked comparison's
calibration (A/A false "different" and 95% coverage with a real launch-to-launch component,
unbalanced sessions, heavy tails), its identity with compare() at one reading per session, and the
readings-per-launch choice."""
import math

import numpy as np
import pytest

from bisect_lab.stats import compare
from bisect_lab.stats.sessions import choose_readings, compare_sessions, components, information_per_second

ALPHA = 0.05


def arm(rng, k, sb, sw, effect=1.0, sizes=(1, 6), tail=None):
    """k sessions of one arm: a session offset ~ N(0, sb) on logs, readings ~ N(0, sw) around it;
    session sizes uniform in ``sizes`` (unbalanced)."""
    n = rng.integers(sizes[0], sizes[1] + 1, size=k)
    offs = np.repeat(rng.normal(0, sb, size=k), n)
    if tail == "t3":
        e = sw / math.sqrt(3) * rng.standard_t(3, size=n.sum())
    else:
        e = rng.normal(0, sw, size=n.sum())
    if tail == "stall":                      # 3% of readings stall 50% slower
        e = e - math.log(1.5) * (rng.random(n.sum()) < 0.03)
    vals = np.exp(math.log(effect) + offs + e)
    return np.split(vals, np.cumsum(n)[:-1])


def calibrate(sb, sw, ka, kb, reps, seed, pooled_arms=0, tail=None, effect=0.95):
    rng = np.random.default_rng(seed)
    false_diff = covered = 0
    for _ in range(reps):
        a, b, a2 = arm(rng, ka, sb, sw, tail=tail), arm(rng, kb, sb, sw, effect, tail=tail), arm(rng, kb, sb, sw, tail=tail)
        pa = pb = None
        if pooled_arms:   # the campaign's other arms (2-3 sessions each) inform the pooled components
            others = [arm(rng, 3, sb, sw, tail=tail) for _ in range(pooled_arms)]
            pa, pb = components([a, b] + others), components([a, a2] + others)
        c = compare_sessions(a, b, pooled=pa, alpha=ALPHA)
        covered += c.ci_low <= effect <= c.ci_high
        false_diff += compare_sessions(a, a2, pooled=pb, alpha=ALPHA).verdict == "different"
    return false_diff / reps, covered / reps


@pytest.mark.parametrize("sb,sw", [(0.005, 0.02), (0.02, 0.02), (0.02, 0.005)])
def test_session_comparison_is_calibrated_with_a_launch_component(sb, sw):
    fd, cov = calibrate(sb, sw, 5, 7, reps=1200, seed=11)
    assert fd <= ALPHA + 0.015, fd
    assert 0.935 <= cov <= 0.965, cov


def test_pooled_between_variance_is_calibrated_with_two_or_three_sessions_per_arm():
    """Launch-to-launch sd 4x the within-launch one, 2 and 3 sessions per arm: the campaign's
    pooled components give the df. (With a small between component the pooled path is
    conservative: about 3.5% false "different", 97% coverage at sd ratio 0.25.)"""
    fd, cov = calibrate(0.02, 0.005, 2, 3, reps=1500, seed=12, pooled_arms=4)
    assert fd <= ALPHA + 0.015, fd
    assert 0.935 <= cov <= 0.965, cov


@pytest.mark.parametrize("tail", ["t3", "stall"])
def test_heavy_tails_and_stalls_do_not_make_false_differences(tail):
    fd, cov = calibrate(0.01, 0.02, 5, 7, reps=1000, seed=13, tail=tail)
    assert fd <= ALPHA + 0.015, fd
    assert cov >= 0.935, cov


def test_readings_as_independent_undercover_and_sessions_do_not():
    """The naive reading (every reading a unit) is what the session blocks fix: at launch-to-launch
    sd 4x the within-launch one its 95% intervals cover far less than 95%."""
    rng = np.random.default_rng(14)
    naive = blocked = 0
    reps = 400
    for _ in range(reps):
        a, b = arm(rng, 4, 0.02, 0.005, sizes=(5, 5)), arm(rng, 4, 0.02, 0.005, 0.95, sizes=(5, 5))
        c = compare(np.concatenate(a), np.concatenate(b))
        naive += c.ci_low <= 0.95 <= c.ci_high
        s = compare_sessions(a, b)
        blocked += s.ci_low <= 0.95 <= s.ci_high
    assert naive / reps < 0.6, naive / reps
    assert blocked / reps > 0.92, blocked / reps


def test_one_reading_per_session_is_exactly_compare():
    rng = np.random.default_rng(3)
    for k in range(20):
        a = np.exp(rng.normal(0, 0.03, size=2 + k % 5))
        b = np.exp(rng.normal(-0.02, 0.05, size=3 + k % 4))
        expected = compare(a, b, higher_is_better=k % 2 == 0, min_effect=0.03, alpha=0.1)
        got = compare_sessions([[x] for x in a], [[x] for x in b], higher_is_better=k % 2 == 0, min_effect=0.03,
                               alpha=0.1, pooled=components([[[x] for x in a], [[x] for x in b]]))
        assert got == expected


def test_components_recover_the_planted_levels_pooled_across_arms():
    rng = np.random.default_rng(5)
    # two arms 10% apart: the arm difference must not leak into the launch-to-launch variance
    vc = components({"good": arm(rng, 150, 0.03, 0.01), "bad": arm(rng, 150, 0.03, 0.01, 0.9)})
    assert vc.sessions == 300 and vc.arms == 2
    assert vc.between_cv == pytest.approx(0.03, rel=0.15)
    assert vc.within_cv == pytest.approx(0.01, rel=0.1)
    assert vc.df_between == 298 and vc.df_within == vc.readings - 300
    one = components([[1.0], [1.1], [0.9]])           # one reading per session: within not estimable
    assert math.isnan(one.within_var) and one.between_var > 0


def test_choose_readings_limits_and_why():
    c = choose_readings(8.0, 1.0, within_var=4e-4, between_var=1e-4)
    assert c.readings == 6 and not c.prior           # sqrt(8 * 4) = 5.66: 6 costs less than 5 per variance
    assert "a launch costs 8 readings" in c.why and "within-launch sd 2x launch-to-launch" in c.why
    assert choose_readings(2.0, 1.0, 1e-6, 1e-2).readings == 1          # launches noisy: one reading each
    assert choose_readings(8.0, 1.0, 1e-4, 0.0, hi=12).readings == 12   # launches indistinguishable: the cap
    big = choose_readings(1000.0, 1.0, 1e-2, 1e-6, hi=30)
    assert big.readings == 30 and "kept within 1..30" in big.why
    prior = choose_readings(8.0, 1.0, None, float("nan"))
    assert prior.prior and prior.readings == 3 and "prior" in prior.why    # sqrt(8 * 1)
    with pytest.raises(ValueError):
        choose_readings(8.0, 0.0, 1e-4, 1e-4)


def test_information_per_second_prefers_the_arm_with_fewer_sessions():
    few = information_per_second(1, 8.0, 1.0, 1e-4, 1e-4)
    many = information_per_second(6, 8.0, 1.0, 1e-4, 1e-4)
    assert few > many > 0
    # a costlier launch gives less per second
    assert information_per_second(2, 80.0, 1.0, 1e-4, 1e-4) < information_per_second(2, 8.0, 1.0, 1e-4, 1e-4)


# --- the run summary of trials measured in sessions (summaries.run_summary) ---

import io  # noqa: E402

from rich.console import Console  # noqa: E402

from bisect_lab.model import Arm, Benchmark, Experiment, Target, TrialResult, TrialStatus  # noqa: E402
from bisect_lab.render import run_result  # noqa: E402
from bisect_lab.summaries import run_summary, variance_line  # noqa: E402


def session_trials(rng, arms, sessions, readings, sb, sw, hosts=("gpu-1",), host_level=None, warmup=1):
    """``sessions`` launches per arm and host, ``readings`` readings each (plus ``warmup`` tagged
    readings far off, which must never count); arm levels ``arms`` {spec: ratio}."""
    out, i = [], 0
    for h in hosts:
        for spec, level in arms.items():
            for s in range(sessions):
                off = rng.normal(0, sb) + math.log((host_level or {}).get(h, 1.0))
                for r in range(warmup + readings):
                    v = 1000 * level * math.exp(off + rng.normal(0, sw)) * (0.5 if r < warmup else 1.0)
                    out.append(TrialResult(campaign="c", trial=i, arm=spec, status=TrialStatus.OK, host=h,
                                           started=1.7e9 + i, duration_s=1.0, metrics={"tok_s": v},
                                           tag="warmup" if r < warmup else None, session=f"{h}-{spec}-{s}"))
                    i += 1
    return out


def _exp():
    return Experiment(None, "demo", Target("/x"), Benchmark("bench", metric="tok_s"))


def test_run_summary_blocks_by_session_and_reports_the_components():
    rng = np.random.default_rng(21)
    arms = [Arm("good", frozenset()), Arm("bad", frozenset())]
    trials = session_trials(rng, {"good": 1.0, "bad": 0.97}, sessions=6, readings=5, sb=0.02, sw=0.004)
    res = run_summary(_exp(), arms, trials, "c")
    (c,) = res["comparisons"]
    assert (c["n_a"], c["sessions_a"]) == (30, 6)
    # the interval is the sessions' (+-2% launch to launch over 6 launches), not 30 readings' at 0.4%
    naive = compare([t.metrics["tok_s"] for t in trials if t.arm == "good" and t.tag != "warmup"],
                    [t.metrics["tok_s"] for t in trials if t.arm == "bad" and t.tag != "warmup"])
    assert (c["ci_high"] - c["ci_low"]) > 2.5 * (naive.ci_high - naive.ci_low)
    v = res["variance"]
    assert v["sessions"] == 12 and v["readings"] == 60             # warmup readings never counted
    assert 0.01 < v["between_cv"] < 0.035 and 0.003 < v["within_cv"] < 0.0055
    assert res["arms"][0]["sessions"] == 6 and res["arms"][0]["n"] == 30
    line = variance_line(v)
    assert line.startswith("launch-to-launch CV ") and "within a launch 0.4%" in line and "(12 sessions, 60 readings)" in line
    buf = io.StringIO()
    run_result(res, Console(file=buf, width=200, color_system=None))
    assert f"tok_s noise: {line}" in buf.getvalue()


def test_without_sessions_the_summary_has_no_components():
    rng = np.random.default_rng(22)
    trials = [TrialResult(campaign="c", trial=i, arm=a, status=TrialStatus.OK, host="h", started=1.7e9 + i,
                          duration_s=1.0, metrics={"tok_s": float(1000 * math.exp(rng.normal(0, 0.02)))})
              for i, a in enumerate(["good", "bad"] * 5)]
    res = run_summary(_exp(), [Arm("good", frozenset()), Arm("bad", frozenset())], trials, "c")
    assert "variance" not in res and "across_hosts" not in res
    (c,) = res["comparisons"]
    ref = compare([t.metrics["tok_s"] for t in trials if t.arm == "good"],
                  [t.metrics["tok_s"] for t in trials if t.arm == "bad"])
    assert (c["ratio"], c["ci_low"], c["ci_high"], c["p_value"]) == (ref.ratio, ref.ci_low, ref.ci_high, ref.p_value)


def test_a_host_whose_level_differs_is_reported_not_read_as_an_effect():
    rng = np.random.default_rng(23)
    arms = [Arm("good", frozenset()), Arm("bad", frozenset())]
    trials = session_trials(rng, {"good": 1.0, "bad": 0.95}, sessions=4, readings=3, sb=0.005, sw=0.005,
                            hosts=("node-a", "node-b"), host_level={"node-b": 0.9})
    res = run_summary(_exp(), arms, trials, "c")
    assert sorted(r["host"] for r in res["comparisons"]) == ["node-a", "node-b"]
    (pooled,) = res["across_hosts"]
    assert pooled["hosts"] == 2 and pooled["ci_low"] <= 0.95 <= pooled["ci_high"] and pooled["regression"]
    assert any(w.startswith("host node-b reads") and "lower" in w and "not an effect" in w for w in res["warnings"])
    levels = {r["host"]: r for r in res["host_levels"]}
    assert levels["node-b"]["ratio"] < 0.93 < levels["node-a"]["ratio"]


def test_report_says_the_components_in_one_sentence():
    """report/run.py: the stored result's components, or computed from the trials when none stored."""
    from bisect_lab.report.document import Section
    from bisect_lab.report.run import _noise
    rng = np.random.default_rng(24)
    trials = [t for t in session_trials(rng, {"good": 1.0, "bad": 0.97}, sessions=3, readings=4, sb=0.02, sw=0.004)
              if t.tag != "warmup"]
    s = Section("Arms")
    _noise(s, None, trials, "tok_s", ["good", "bad"])
    (text,) = [b for b in s.blocks if isinstance(b, str)]
    assert "launch-to-launch CV" in text and "(6 sessions, 24 readings)" in text
    plain = Section("Arms")
    _noise(plain, None, [TrialResult(**{k: getattr(t, k) for k in TrialResult.__dataclass_fields__
                                        if k != "session"}) for t in trials], "tok_s", ["good", "bad"])
    assert not [b for b in plain.blocks if isinstance(b, str)]       # no sessions: no sentence


def test_a_search_floor_takes_fewer_readings_once_launches_stop_falling():
    """Within-launch noise dominating (rho 0.25, total CV 4%) and a launch costing 8 readings: one
    comparison takes about 11 readings per launch; a search whose launches stop falling below the
    floor takes the m minimising (L + m) x (between + floor + within / m), 2 here, and says why."""
    from bisect_lab.stats.sessions import search_floor_var
    w, b = 0.04 ** 2 * 16 / 17, 0.04 ** 2 / 17
    plain = choose_readings(8.0, 1.0, w, b)
    floor = search_floor_var(0.02)
    assert math.isclose(math.sqrt(floor), 2.5 * math.log1p(0.02))
    searched = choose_readings(8.0, 1.0, w, b, floor_var=floor)
    best = min(range(1, 21), key=lambda k: (8 + k) * (b + floor + w / k))
    assert plain.readings >= 10 and searched.readings == best == 2, (plain, searched)
    assert "stop falling" in searched.why and "stop falling" not in plain.why
    # no floor is the plain optimum, whatever the noise; launch-to-launch noise dominating: 1 reading
    for ww, bb in ((1e-4, 1e-4), (1e-3, 1e-5), (1e-5, 1e-3)):
        assert choose_readings(8.0, 1.0, ww, bb, floor_var=0.0) == choose_readings(8.0, 1.0, ww, bb)
    assert choose_readings(2.0, 1.0, w, b, floor_var=floor).readings == 1
