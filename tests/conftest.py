"""Shared test configuration: the real sshd on localhost (tests/sshd_fixture.py) for the SSH host path,
and a temporary results folder for the plugin's own campaigns in this suite."""
import os
import tempfile

import pytest

pytest_plugins = ["sshd_fixture"]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # The sample perf tests (tests/perf) run through the bisect-lab plugin in the full suite too. The
    # plugin resolves its options once, in its own pytest_configure, so tests/perf/conftest.py (loaded
    # only at collection when the suite runs from the root) comes too late: its campaigns went into
    # the user's data dir. A test run must not leave files there.
    if not config.getoption("--bisect-lab-results", None) and not os.environ.get("BISECT_LAB_RESULTS"):
        config.option.bisect_lab_results = tempfile.mkdtemp(prefix="bisect-lab-suite-")
