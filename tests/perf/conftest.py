"""In this repository's own test run, the sample perf tests store their trials in a temporary
folder rather than ./results (a test run must not leave files in the checkout). In your project,
drop this file and keep the default (./results, or BISECT_LAB_RESULTS, or --bisect-lab-results)."""
import os
import tempfile

import pytest


@pytest.hookimpl(tryfirst=True)  # before the plugin resolves its options
def pytest_configure(config):
    if not config.getoption("--bisect-lab-results", None) and not os.environ.get("BISECT_LAB_RESULTS"):
        config.option.bisect_lab_results = tempfile.mkdtemp(prefix="bisect-lab-perf-")
