"""Performance tests of the bundled demo through the bisect-lab pytest plugin: a sample to copy.

    pytest tests/perf -v                                   # about 15 s on 2 cores: passes
    DEMO_PERF_ARMS="only mla" pytest tests/perf -v         # the planted regression: fails

Each case measures the baseline ("none": required patches only) and one arm, interleaved in a seeded
random order, and fails only when the arm is slower than the baseline by more than 10% with 95%
confidence. An interval that straddles 10% first buys more trials (up to 6 per arm, sequentially),
then skips with "could not decide" (``unknown="skip"``; "fail" is stricter, "xfail" keeps it visible).
Trials go into the results store (``--bisect-lab-results``), tagged with each test's node id, so
``bisect-lab report <campaign>`` shows what a failure measured.

tests/test_pytest_plugin.py runs this same file with DEMO_PERF_ARMS="only mla" through pytester and
checks that it fails on the demo's planted regression (mla-gather-cast: verify off the graph path).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bisect_lab.matrix import params

DEMO = Path(os.environ.get("BISECT_LAB_DEMO_EXPERIMENT")
            or Path(__file__).resolve().parents[2] / "experiments" / "demo.toml")

pytestmark = [
    pytest.mark.skipif(not DEMO.exists(), reason="the bundled demo (experiments/demo.toml) is not in this checkout"),
    pytest.mark.slow,
    # 3 trials per arm, up to 6 when the first look cannot decide; undecided after that: skip (a noisy
    # runner must not turn the build red; a slowdown whose whole interval is beyond 10% still fails).
    pytest.mark.bisect_lab(experiment=str(DEMO), repeat=3, max_repeat=6, max_regression=0.10,
                           unknown=os.environ.get("DEMO_PERF_UNKNOWN", "skip")),
]

# Arms that must not be slower than the baseline: every patch set without the MLA change.
ARMS = [a.strip() for a in os.environ.get("DEMO_PERF_ARMS", "all-minus mla,sm120").split(";") if a.strip()]


@pytest.mark.parametrize("arm", params(DEMO, patches=ARMS) if DEMO.exists() else [])
def test_not_slower_than_baseline(bisect_lab, arm):
    bisect_lab.compare("none", arm).assert_not_slower()
