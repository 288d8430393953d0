"""``readings = "auto"``'s rule (campaigns.readings.auto_readings), the one the product and the
session simulation (benchmarks/simulate_sessions.py) both call: before a launch is timed, while the
noise is untrusted, and once it is measured."""
import numpy as np

from bisect_lab.campaigns.readings import (BETWEEN_FLOOR, FIRST_READINGS, TRUST_DF_BETWEEN,
                                           auto_readings)
from bisect_lab.stats.sessions import choose_readings, components


def _sessions(rng, arms: int, launches: int, m: int, sb: float, sw: float):
    return {f"arm{a}": [list(np.exp(rng.normal(0, sb) + rng.normal(0, sw, m))) for _ in range(launches)]
            for a in range(arms)}


def test_before_a_launch_is_timed_it_takes_the_first_readings_and_says_why():
    m, why = auto_readings(None, None, {})
    assert m == FIRST_READINGS
    assert "until a launch and a reading have been measured" in why


def test_launch_to_launch_spread_is_not_trusted_from_too_few_launches():
    rng = np.random.default_rng(1)
    few = _sessions(rng, arms=1, launches=TRUST_DF_BETWEEN, m=4, sb=0.001, sw=0.03)  # df_between = 3
    assert components(few).df_between < TRUST_DF_BETWEEN
    m, why = auto_readings(60.0, 1.0, few)
    # the prior stands in for the between-launch variance: not the optimum a tiny measured spread
    # would give (that one runs to the cap)
    assert m < choose_readings(60.0, 1.0, components(few).within_var, 1e-12).readings
    assert "prior" in why


def test_trusted_components_give_the_two_stage_optimum_with_the_between_floor():
    rng = np.random.default_rng(2)
    groups = _sessions(rng, arms=2, launches=6, m=4, sb=0.0, sw=0.02)    # launches alike
    comp = components(groups)
    m, why = auto_readings(8.0, 1.0, groups, hi=50)
    floored = max(comp.between_var, BETWEEN_FLOOR * comp.within_var)
    assert m == choose_readings(8.0, 1.0, comp.within_var, floored, hi=50).readings
    # a zero spread is floored, so the choice stays finite: about sqrt(cost / BETWEEN_FLOOR)
    assert m <= round((8.0 / BETWEEN_FLOOR) ** 0.5) + 1
    assert "launch 8.0 s until ready and stopped, reading 1.0 s" in why


def test_a_search_floor_lowers_the_readings_per_launch():
    rng = np.random.default_rng(3)
    groups = _sessions(rng, arms=2, launches=6, m=4, sb=0.002, sw=0.03)
    plain, _ = auto_readings(100.0, 1.0, groups)
    floored, _ = auto_readings(100.0, 1.0, groups, floor_var=0.05 ** 2)
    assert floored < plain
