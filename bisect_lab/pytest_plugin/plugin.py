"""The plugin's hooks: its command-line and ini options (resolved once into :class:`~.options.Options`),
the marker, ``--bisect-lab-skip`` at collection, and the terminal summary of stored campaigns."""
from __future__ import annotations

from pathlib import Path

import pytest

from .fixture import SessionState
from .options import CAMPAIGNS, MARKER, OPTIONS, UNKNOWN_MODES, Options


def pytest_addoption(parser):
    group = parser.getgroup("bisect-lab", "bisect-lab performance experiments")
    group.addoption("--bisect-lab-results", default=None, metavar="DIR",
                    help="results folder for experiment trials (default: BISECT_LAB_RESULTS, else results/ "
                         "beside the first experiment file; the user data dir when that file is inside its "
                         "target repository)")
    group.addoption("--bisect-lab-cache", default=None, metavar="DIR",
                    help="clone/tree cache (default: BISECT_LAB_CACHE or the user cache dir)")
    group.addoption("--bisect-lab-experiment", default=None, metavar="TOML",
                    help="experiment file for tests whose marker names none (ini: bisect_lab_experiment)")
    group.addoption("--bisect-lab-repeat", type=int, default=None, metavar="N",
                    help="trials per arm for bisect-lab fixtures (overrides markers; default: the marker's "
                         "repeat, else the experiment's [design] repeat)")
    group.addoption("--bisect-lab-max-repeat", type=int, default=None, metavar="N",
                    help="let undecided assertions measure more rounds, up to N trials per arm (sequential; "
                         "each look at alpha / number of looks)")
    group.addoption("--bisect-lab-unknown", choices=UNKNOWN_MODES, default=None,
                    help="outcome of an assertion the data cannot decide yet (default: ini bisect_lab_unknown, "
                         "else fail)")
    group.addoption("--bisect-lab-max-regression", type=float, default=None, metavar="FRACTION",
                    help="default allowed slowdown of assert_not_slower() (default 0.02 = 2%%)")
    group.addoption("--bisect-lab-skip", action="store_true", default=False,
                    help="skip every test that uses bisect-lab fixtures or markers (quick local runs)")
    parser.addini("bisect_lab_experiment", "default experiment file for bisect-lab fixtures", default=None)
    parser.addini("bisect_lab_unknown", "fail | skip | xfail: outcome of undecidable assertions", default="fail")


def _options(config) -> Options:
    """The command line, then the ini file, then the defaults; marker kwargs are weighed per test."""
    experiment = None
    if opt := config.getoption("--bisect-lab-experiment"):
        experiment = Path(opt)
    elif ini := config.getini("bisect_lab_experiment"):
        base = Path(config.inipath).parent if config.inipath else Path(config.rootpath)
        experiment = base / ini
    max_regression = config.getoption("--bisect-lab-max-regression")
    return Options(
        results=config.getoption("--bisect-lab-results"),
        cache=config.getoption("--bisect-lab-cache"),
        experiment=experiment,
        repeat=config.getoption("--bisect-lab-repeat"),
        max_repeat=config.getoption("--bisect-lab-max-repeat"),
        unknown=config.getoption("--bisect-lab-unknown") or config.getini("bisect_lab_unknown") or "fail",
        max_regression=0.02 if max_regression is None else max_regression,
        skip=bool(config.getoption("--bisect-lab-skip")),
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "bisect_lab(experiment=None, repeat=None, unknown=None, max_regression=None, max_repeat=None): a "
        "bisect-lab performance test; kwargs set its experiment file, trials per arm, outcome of undecidable "
        "assertions (fail/skip/xfail), the allowed slowdown of assert_not_slower() and the most trials per "
        "arm an undecided assertion may spend")
    config.stash[OPTIONS] = _options(config)
    config.stash[CAMPAIGNS] = []
    from ..redact import use_key

    def results_key():
        from ..store import load_or_create_key
        return load_or_create_key(SessionState(config).results)
    # Before collection: a matrix arm with a secret (its test id shows the tag) gets the same tag in
    # every xdist worker and in every run against these results. Read only once a secret arm exists.
    use_key(results_key)


def pytest_collection_modifyitems(config, items):
    if not config.stash[OPTIONS].skip:
        return
    skip = pytest.mark.skip(reason="bisect-lab tests skipped (--bisect-lab-skip)")
    for item in items:
        if item.get_closest_marker(MARKER) or "bisect_lab" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    campaigns = config.stash.get(CAMPAIGNS, [])
    if not campaigns:
        return
    tr = terminalreporter
    tr.section("bisect-lab")
    results = campaigns[0][2]
    for node, cid, _ in campaigns:
        tr.write_line(f"{cid}  {node}")
    tr.write_line(f"{len(campaigns)} campaign(s) stored in {results}; "
                  f"e.g. bisect-lab --results {results} report {campaigns[-1][1]} --format html")
