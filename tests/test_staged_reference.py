"""The staged attribution's reference guard (issue #23, strategies/staged_reference.py): a reading far
below both references sends the next one to the reference arm; a slow reference leaves the burst
out and the arm is measured again, a normal one takes the reading in. Scripted machines."""
from __future__ import annotations

import math

import numpy as np

from bisect_lab.strategies.base import drive
from bisect_lab.strategies.staged import StagedAttribution
from bisect_lab.strategies.staged_reference import MAX_REF_READS


def machine(slow: dict[int, float], *, culprit="f3", effect=0.10, cv=0.02, seed=0, step_from=None, step=1.0):
    """10 factors f00..f09, one culprit; reading number k (1-based, in the order taken) is
    multiplied by ``slow[k]``, and from ``step_from`` on every reading by ``step``."""
    rng = np.random.default_rng([5, seed])
    names = [f"f{k:02d}" for k in range(10)]
    culprit = names[int(culprit[1:])]
    calls: list[frozenset] = []

    def measure(active):
        calls.append(frozenset(active))
        k = len(calls)
        v = 1000.0 * (1 - effect if culprit in active else 1.0) * math.exp(rng.normal(0, cv))
        if step_from is not None and k >= step_from:
            v *= step
        return v * slow.get(k, 1.0)

    return names, measure, culprit, calls


FIVE = dict(effect=0.05, cv=0.03, seed=0)


def _run(names, measure, seed=0, ref=True):
    st = StagedAttribution(names, seed=seed, max_trials=200)
    st.reference_guard = ref
    return st, drive(st, measure)


def test_a_burst_is_left_out_and_its_arm_measured_again():
    # readings 8-12 30% slow, whatever the arm (a 5% culprit at CV 3%: about 20 readings, the good
    # arm read three times before the burst, so its level is known)
    names, measure, culprit, calls = machine({k: 0.7 for k in range(8, 13)}, **FIVE)
    st, v = _run(names, measure)
    assert v.status == "culprits" and list(v.culprits) == [culprit], (v.status, v.culprits)
    (b,) = v.extra["bursts"]
    assert b["trials"] == [8, 9, 10, 11, 12] and b["refs"] == 4 and b["kept"] is False, b
    assert calls[8:13] == [frozenset()] * 5, calls[7:14]        # the reference, until it read normal
    assert calls[13] == calls[7], (calls[7], calls[13])         # then the held arm, measured again
    assert v.trials == len(calls) and len(st.observations) == len(calls) - 5
    line = next(w for w in v.warnings if "burst of host contention" in w)
    assert line.startswith("trials 8-12: 5 reading(s) left out") and "read slow 4 time(s)" in line, line


def test_a_lone_slow_reading_costs_one_reference_reading():
    names, measure, culprit, calls = machine({10: 0.6}, **FIVE)
    st, v = _run(names, measure)
    assert v.status == "culprits" and list(v.culprits) == [culprit]
    assert "bursts" not in (v.extra or {}) and calls[10] == frozenset(), calls[8:12]
    assert v.trials == len(calls) == len(st.observations)      # nothing left out


def test_a_machine_that_stays_slow_is_kept_and_the_guard_stops():
    names, measure, culprit, calls = machine({}, step_from=8, step=0.7, **FIVE)
    st, v = _run(names, measure)
    (b,) = v.extra["bursts"]
    assert b["kept"] is True and b["refs"] == MAX_REF_READS and b["trials"][0] == 8, b
    assert v.trials == len(calls) == len(st.observations)
    assert any("stayed slow from trial 8" in w for w in v.warnings), v.warnings


def test_without_the_guard_the_burst_readings_go_in():
    names, measure, culprit, calls = machine({k: 0.7 for k in range(8, 13)}, **FIVE)
    st, v = _run(names, measure, ref=False)
    assert "bursts" not in (v.extra or {}) and len(st.observations) == len(calls)


def test_a_burst_that_begins_on_the_good_arm_itself_is_left_out():
    """The held reading may be the reference's own: a burst that starts on the good arm's second
    reading. The next good reading is then judged with one earlier good reading only, so its own
    gap is not set; it had read as "the arm is slow", both readings went in, the good arm was cleared
    for good, and its level came from burst readings (two culprits under bursts answered
    `no-regression`). Now a reference reading as far below both references as the held one is slow:
    the burst is left out."""
    rng = np.random.default_rng([5, 2])      # a 5% culprit at CV 3%: the good arm read at 1, 9, ...
    names = [f"f{k:02d}" for k in range(10)]
    calls: list[frozenset] = []
    burst = {"left": 0, "goods": 0, "from": None}

    def measure(active):
        calls.append(frozenset(active))
        if not active:
            burst["goods"] += 1
            if burst["goods"] == 2:                       # the good arm's second reading: 6 slow ones
                burst["left"], burst["from"] = 6, len(calls)
        v = 1000.0 * (0.95 if "f03" in active else 1.0) * math.exp(rng.normal(0, 0.03))
        if burst["left"]:
            burst["left"] -= 1
            v *= 0.7
        return v

    st, v = _run(names, measure)
    assert v.status == "culprits" and list(v.culprits) == ["f03"], (v.status, v.culprits)
    start = burst["from"]
    (b,) = v.extra["bursts"]
    assert b["arm"] == [] and b["kept"] is False and b["trials"][0] == start, (b, start)
    assert set(b["trials"]) <= set(range(start, start + 6)) and len(b["trials"]) >= 5, b
    assert frozenset() not in st._ref_cleared
    good = [o.value for o in st.observations if o.active == frozenset()]
    assert min(good) > 850, good                          # no burst reading in the good arm's level
