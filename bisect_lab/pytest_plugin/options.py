"""The plugin's settings, resolved once per pytest run, and the keys of its state in ``config.stash``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

#: What an assertion the data cannot decide does: fail the test, skip it or xfail it.
UNKNOWN_MODES = ("fail", "skip", "xfail")
#: The marker's name: ``@pytest.mark.bisect_lab(...)``.
MARKER = "bisect_lab"


@dataclass(frozen=True)
class Options:
    """The command line and ini settings of one pytest run (built in ``pytest_configure``).

    Marker kwargs are not in here: they belong to one test, and the fixture weighs them
    against these values setting by setting (see :class:`~.fixture.BisectLab`).
    """

    #: ``--bisect-lab-results`` as given; None: ``BISECT_LAB_RESULTS`` or the default folder.
    results: str | None
    #: ``--bisect-lab-cache`` as given; None: ``BISECT_LAB_CACHE`` or the user cache dir.
    cache: str | None
    #: ``--bisect-lab-experiment``, else the ini ``bisect_lab_experiment`` (relative to the ini
    #: file's folder); None: neither names one.
    experiment: Path | None
    #: ``--bisect-lab-repeat``: trials per arm, beating the marker's ``repeat=``.
    repeat: int | None
    #: ``--bisect-lab-max-repeat``: most trials per arm an undecided assertion may spend.
    max_repeat: int | None
    #: ``--bisect-lab-unknown``, else the ini ``bisect_lab_unknown``, else ``"fail"`` (checked
    #: where a test uses it, so a bad ini value fails those tests with one line).
    unknown: str
    #: ``--bisect-lab-max-regression``, else 2%: the default of ``assert_not_slower()``.
    max_regression: float
    #: ``--bisect-lab-skip``: skip every bisect-lab test.
    skip: bool


#: The run's :class:`Options`.
OPTIONS = pytest.StashKey[Options]()
#: ``(node id, campaign id, results folder)`` of every campaign this run stored, for the summary.
CAMPAIGNS = pytest.StashKey[list]()
