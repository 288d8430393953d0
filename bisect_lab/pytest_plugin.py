"""pytest plugin (registered through the ``pytest11`` entry point).

Importing it must stay cheap: heavy parts load only when a fixture is used.
"""
from __future__ import annotations


def pytest_addoption(parser):
    group = parser.getgroup("bisect-lab", "bisect-lab performance experiments")
    group.addoption("--bisect-lab-results", default=None,
                    help="results folder for experiment trials (default: BISECT_LAB_RESULTS or ./results)")
    group.addoption("--bisect-lab-repeat", type=int, default=None,
                    help="trials per arm for bisect-lab fixtures (default: the experiment's [design] repeat)")


def pytest_configure(config):
    config.addinivalue_line("markers", "bisect_lab(experiment=None): a bisect-lab performance experiment test")
