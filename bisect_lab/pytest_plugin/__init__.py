"""pytest plugin (registered through the ``pytest11`` entry point): performance tests with statistics.

::

    import pytest
    from bisect_lab.matrix import params

    @pytest.mark.bisect_lab(experiment="experiments/demo.toml", repeat=5, unknown="skip")
    @pytest.mark.parametrize("arm", params("experiments/demo.toml", patches=["all-minus mla"]))
    def test_not_slower(bisect_lab, arm):
        bisect_lab.compare("none", arm).assert_not_slower(max_regression=0.02)

``bisect_lab.compare(a, b)`` measures both arms (interleaved, randomised; one campaign of kind
``pytest`` whose trials are tagged with the test's node id, in the same results store as the CLI)
and returns a :class:`PerfComparison`. Its ``assert_not_slower(max_regression)`` fails only when
``b`` is slower than ``a`` by more than ``max_regression`` with confidence (the whole confidence
interval of the slowdown lies beyond the threshold); it passes when the interval excludes such a
slowdown; otherwise the outcome is *unknown* and follows ``unknown=`` (marker), then
``--bisect-lab-unknown``, then the ini value ``bisect_lab_unknown``: ``fail`` (default), ``skip``
or ``xfail``.

Importing this module stays cheap (pytest imports it in every session, CLI runs included):
everything heavy (pandas, scipy, git, the store) loads inside the fixtures.

The package: ``plugin`` (hooks and options), ``fixture`` (the ``bisect_lab`` fixture and the
per-session state), ``comparison`` (what the fixture returns), ``options`` (the resolved
settings). pytest registers this package's ``__init__`` through the ``pytest11`` entry point and
reads the hooks and fixtures from it, so they are all imported here.
"""
from __future__ import annotations

from .comparison import ArmRuns, PerfComparison
from .fixture import BisectLab, _bisect_lab_state, bisect_lab, bisect_lab_experiment  # noqa: F401 (fixtures)
from .options import UNKNOWN_MODES, Options
from .plugin import (pytest_addoption, pytest_collection_modifyitems, pytest_configure,
                     pytest_terminal_summary)

# The plugin's result class was called RunResult; that name now belongs to the typed trial result
# elsewhere in bisect-lab, so it is ArmRuns here. The old name stays for code written against it.
RunResult = ArmRuns

__all__ = ["ArmRuns", "BisectLab", "Options", "PerfComparison", "RunResult", "UNKNOWN_MODES",
           "bisect_lab", "bisect_lab_experiment", "pytest_addoption", "pytest_collection_modifyitems",
           "pytest_configure", "pytest_terminal_summary"]
