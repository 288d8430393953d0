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
"""
from __future__ import annotations

from pathlib import Path

import pytest

UNKNOWN_MODES = ("fail", "skip", "xfail")
_MARKER = "bisect_lab"


# --------------------------------------------------------------------------- options
def pytest_addoption(parser):
    group = parser.getgroup("bisect-lab", "bisect-lab performance experiments")
    group.addoption("--bisect-lab-results", default=None, metavar="DIR",
                    help="results folder for experiment trials (default: BISECT_LAB_RESULTS or ./results; "
                         "the user data dir when pytest runs inside the target repository)")
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


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "bisect_lab(experiment=None, repeat=None, unknown=None, max_regression=None, max_repeat=None): a "
        "bisect-lab performance test; kwargs set its experiment file, trials per arm, outcome of undecidable "
        "assertions (fail/skip/xfail), the allowed slowdown of assert_not_slower() and the most trials per "
        "arm an undecided assertion may spend")
    config._bisect_lab_campaigns = []
    from .redact import use_key

    def results_key():
        from .store import load_or_create_key
        return load_or_create_key(_State(config).results)
    # Before collection: a matrix arm with a secret (its test id shows the tag) gets the same tag in
    # every xdist worker and in every run against these results. Read only once a secret arm exists.
    use_key(results_key)


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--bisect-lab-skip"):
        return
    skip = pytest.mark.skip(reason="bisect-lab tests skipped (--bisect-lab-skip)")
    for item in items:
        if item.get_closest_marker(_MARKER) or "bisect_lab" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    campaigns = getattr(config, "_bisect_lab_campaigns", [])
    if not campaigns:
        return
    tr = terminalreporter
    tr.section("bisect-lab")
    results = campaigns[0][2]
    for node, cid, _ in campaigns:
        tr.write_line(f"{cid}  {node}")
    tr.write_line(f"{len(campaigns)} campaign(s) stored in {results}; "
                  f"e.g. bisect-lab --results {results} report {campaigns[-1][1]} --format html")


# --------------------------------------------------------------------------- session state
class _State:
    """Per pytest session: one results store, one bisect-lab Session (hosts, tree caches) per experiment."""

    def __init__(self, config):
        self.config = config
        self._store = None
        self._target: str | None = None       # the first experiment's target: never results inside it
        self._sessions: dict[str, object] = {}

    @property
    def results(self) -> Path:
        from .paths import results_dir
        return results_dir(self.config.getoption("--bisect-lab-results"), target_repo=self._target)[0]

    @property
    def cache(self) -> Path:
        opt = self.config.getoption("--bisect-lab-cache")
        if opt:
            return Path(opt)
        from .paths import default_cache_dir
        return default_cache_dir()

    def store(self):
        if self._store is None:
            from .store import Store
            self._store = Store(self.results)
            from .redact import use_key
            use_key(self._store.redaction_key)
        return self._store

    def session(self, experiment_path: Path):
        key = str(experiment_path)
        if key not in self._sessions:
            from .campaigns import Session
            from .config import load_experiment
            from .hosts import make_hosts
            exp = load_experiment(experiment_path)
            if self._store is None:
                self._target = exp.target.repo
            self._sessions[key] = Session(exp, self.store(), make_hosts(exp.host, cache_dir=self.cache))
        return self._sessions[key]

    def close(self):
        for s in self._sessions.values():
            s.close()
        if self._store is not None:
            self._store.close()


@pytest.fixture(scope="session")
def _bisect_lab_state(request):
    state = _State(request.config)
    yield state
    state.close()


# --------------------------------------------------------------------------- results
class RunResult:
    """What :meth:`BisectLab.run` returns: per-arm values and the campaign's summary dict."""

    def __init__(self, campaign: str, summary: dict, values: dict[str, list[float]], failures: dict[str, list[str]]):
        self.campaign = campaign
        self.summary = summary
        self._values = values
        self.failures = failures

    @property
    def arms(self) -> list[str]:
        return list(self._values)

    def values(self, arm: str) -> list[float]:
        """Successful measurements of ``arm`` (canonical spec or as written)."""
        return list(self._values.get(arm, []))

    def __repr__(self) -> str:
        return f"RunResult({self.campaign}, {', '.join(f'{a!r}: n={len(v)}' for a, v in self._values.items())})"


class PerfComparison:
    """Arm ``b`` relative to arm ``a``: effect ratio b/a with its confidence interval, and assertions.

    ``slowdown`` is the relative loss of ``b`` (0.25 = 25% worse, whichever direction the metric
    prefers); ``slowdown_ci`` its interval.

    Sequential sampling: with ``max_rounds > 1`` (marker ``max_repeat=``), an assertion the data
    cannot decide yet measures another round of both arms and looks again, up to ``max_rounds``
    looks. Each look uses ``alpha / max_rounds`` (Bonferroni over looks), so peeking does not inflate
    the false-alarm rate.
    """

    def __init__(self, a: str, b: str, a_values, b_values, *, metric: str, higher_is_better: bool,
                 alpha: float, unknown: str, max_regression: float, campaign: str | None = None,
                 more=None, max_rounds: int = 1):
        self.a, self.b = a, b
        self.a_values, self.b_values = list(a_values), list(b_values)
        self.metric, self.higher_is_better = metric, higher_is_better
        self.unknown, self.default_max_regression, self.campaign = unknown, max_regression, campaign
        self.max_rounds = max(1, int(max_rounds)) if more is not None else 1
        self.rounds = 1
        self._more = more
        self.alpha = alpha / self.max_rounds
        self._evaluate()

    def _evaluate(self):
        from .stats.compare import compare
        if len(self.a_values) < 2 or len(self.b_values) < 2:
            self.stats = None
            self.ratio = self.ci_low = self.ci_high = self.p_value = float("nan")
            self.verdict = "unknown"
        else:
            self.stats = compare(self.a_values, self.b_values, higher_is_better=self.higher_is_better,
                                 min_effect=self.default_max_regression, alpha=self.alpha)
            self.ratio, self.ci_low, self.ci_high = self.stats.ratio, self.stats.ci_low, self.stats.ci_high
            self.p_value, self.verdict = self.stats.p_value, self.stats.verdict

    def _measure_more(self) -> bool:
        """Another round of both arms, when the budget allows; True if it ran."""
        if self._more is None or self.rounds >= self.max_rounds:
            return False
        self.a_values, self.b_values, campaign = self._more()
        self.campaign = campaign or self.campaign
        self.rounds += 1
        self._evaluate()
        return True

    @property
    def slowdown(self) -> float:
        return (1 - self.ratio) if self.higher_is_better else (self.ratio - 1)

    @property
    def slowdown_ci(self) -> tuple[float, float]:
        if self.higher_is_better:
            return 1 - self.ci_high, 1 - self.ci_low
        return self.ci_low - 1, self.ci_high - 1

    def describe(self) -> str:
        """One line for people: "b is 25.1% slower than a (95% CI 22.0% .. 28.3%, p=1e-05, n=5/5)"."""
        if self.stats is None:
            return (f"{self.b!r} vs {self.a!r}: not enough successful trials to compare "
                    f"(n={len(self.a_values)}/{len(self.b_values)})")
        s = self.slowdown
        lo, hi = self.slowdown_ci
        word = "slower" if s > 0 else "faster"
        conf = f"{(1 - self.alpha) * 100:.3g}"
        return (f"{self.b!r} is {abs(s) * 100:.1f}% {word} than {self.a!r} ({self.metric}: {conf}% CI of the slowdown "
                f"{lo * 100:+.1f}% .. {hi * 100:+.1f}%, p={self.p_value:.2g}, n={len(self.a_values)}/{len(self.b_values)}"
                + (f", campaign {self.campaign}" if self.campaign else "") + ")")

    __str__ = describe

    def __repr__(self) -> str:
        return f"PerfComparison({self.describe()})"

    def _undecided(self, msg: str, unknown: str | None):
        mode = unknown or self.unknown
        if mode not in UNKNOWN_MODES:
            raise ValueError(f"unknown= must be one of {', '.join(UNKNOWN_MODES)}, got {mode!r}")
        msg = f"bisect-lab could not decide: {msg}"
        if mode == "skip":
            pytest.skip(msg)
        if mode == "xfail":
            pytest.xfail(msg)
        pytest.fail(msg, pytrace=False)

    def assert_not_slower(self, max_regression: float | None = None, *, unknown: str | None = None) -> None:
        """Fail when ``b`` is slower than ``a`` by more than ``max_regression`` with confidence.

        Passes when the interval rules such a slowdown out; an interval that straddles the threshold
        is *unknown* (more rounds first, if allowed; then fail, skip or xfail, see the module docstring).
        """
        thr = self.default_max_regression if max_regression is None else max_regression
        while True:
            if self.stats is not None:
                lo, hi = self.slowdown_ci
                if lo > thr:
                    pytest.fail(f"performance regression: {self.describe()}; allowed: {thr * 100:.1f}%", pytrace=False)
                if hi <= thr:
                    return
            if not self._measure_more():
                break
        if self.stats is None:
            return self._undecided(self.describe(), unknown)
        self._undecided(f"{self.describe()}; the interval straddles the allowed {thr * 100:.1f}% "
                        f"(more trials: --bisect-lab-repeat / max_repeat=)", unknown)

    def assert_slower(self, min_regression: float = 0.0, *, unknown: str | None = None) -> None:
        """The converse: pass only when ``b`` is slower than ``a`` by more than ``min_regression`` with
        confidence (e.g. to prove a benchmark still detects a known slow path)."""
        while True:
            if self.stats is not None:
                lo, hi = self.slowdown_ci
                if hi <= min_regression:
                    pytest.fail(f"expected a slowdown above {min_regression * 100:.1f}%: {self.describe()}",
                                pytrace=False)
                if lo > min_regression:
                    return
            if not self._measure_more():
                break
        self._undecided(f"{self.describe()}; the interval straddles {min_regression * 100:.1f}%", unknown)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "metric": self.metric, "ratio": self.ratio, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "p_value": self.p_value, "verdict": self.verdict,
                "n_a": len(self.a_values), "n_b": len(self.b_values), "campaign": self.campaign}


# --------------------------------------------------------------------------- the fixture
class BisectLab:
    """The ``bisect_lab`` fixture: run arms of an experiment and compare them inside a test."""

    def __init__(self, request, state: _State):
        self._request = request
        self._state = state
        self._values: dict[str, list[float]] = {}
        self._campaigns: list[str] = []
        self.node_id = request.node.nodeid

    # -- settings: marker kwargs, then command-line options, then ini values
    def _kw(self, name, default=None):
        # Closest marker first (function, then class, then module): each kwarg from the nearest that sets it.
        for m in self._request.node.iter_markers(_MARKER):
            if m.kwargs.get(name) is not None:
                return m.kwargs[name]
        return default

    @property
    def experiment_path(self) -> Path:
        cfg = self._request.config
        p = self._kw("experiment")
        if p is not None:
            p = Path(p)
            if not p.is_absolute():
                here = Path(str(self._request.node.path)).parent / p
                p = here if here.exists() else Path(cfg.rootpath) / p
            return p
        opt = cfg.getoption("--bisect-lab-experiment")
        if opt:
            return Path(opt)
        ini = cfg.getini("bisect_lab_experiment")
        if ini:
            base = Path(cfg.inipath).parent if cfg.inipath else Path(cfg.rootpath)
            return base / ini
        pytest.fail("bisect-lab: no experiment file: give @pytest.mark.bisect_lab(experiment=...), "
                    "--bisect-lab-experiment or the ini option bisect_lab_experiment", pytrace=False)

    @property
    def session(self):
        return self._guard(lambda: self._state.session(self.experiment_path))

    @property
    def experiment(self):
        """The loaded :class:`~bisect_lab.model.Experiment`."""
        return self.session.experiment

    @property
    def unknown(self) -> str:
        mode = self._kw("unknown") or self._request.config.getoption("--bisect-lab-unknown") \
            or self._request.config.getini("bisect_lab_unknown") or "fail"
        if mode not in UNKNOWN_MODES:
            pytest.fail(f"bisect-lab: unknown={mode!r}; expected one of {', '.join(UNKNOWN_MODES)}", pytrace=False)
        return mode

    @property
    def max_regression(self) -> float:
        opt = self._request.config.getoption("--bisect-lab-max-regression")
        return float(self._kw("max_regression", opt if opt is not None else 0.02))

    def max_repeat(self) -> int | None:
        """Most trials per arm an undecided assertion may spend (marker ``max_repeat=``, option
        ``--bisect-lab-max-repeat``); None: one round only."""
        opt = self._request.config.getoption("--bisect-lab-max-repeat")
        v = opt or self._kw("max_repeat")
        return int(v) if v else None

    def repeat(self, repeat: int | None = None) -> int:
        opt = self._request.config.getoption("--bisect-lab-repeat")
        return int(opt or repeat or self._kw("repeat") or self.experiment.design.repeat)

    @staticmethod
    def _guard(fn):
        from .errors import BisectLabError
        try:
            return fn()
        except BisectLabError as e:
            from .redact import redact_text
            pytest.fail(redact_text(f"bisect-lab: {e}"), pytrace=False)     # a bad spec may quote a token

    def _canonical(self, spec: str) -> str:
        from .arms import parse_arm
        return self._guard(lambda: parse_arm(spec, self.experiment.patchset).spec)

    # -- actions
    def run(self, arms, repeat: int | None = None) -> RunResult:
        """Measure ``arms`` (a spec or a list of specs), interleaved in a seeded random order, ``repeat``
        trials each. Trials are stored, tagged with this test's node id."""
        from .campaigns import measure_arms
        specs = [arms] if isinstance(arms, str) else list(arms)
        session = self.session
        n = self.repeat(repeat)
        cid, summary, trials = self._guard(lambda: measure_arms(
            session, specs, repeat=n, tag=self.node_id, kind="pytest", params={"node": self.node_id}))
        self._campaigns.append(cid)
        self._request.config._bisect_lab_campaigns.append((self.node_id, cid, self._state.results))
        metric = session.experiment.benchmark.metric
        values: dict[str, list[float]] = {a["arm"]: [] for a in summary["arms"]}
        failures: dict[str, list[str]] = {}
        for t in trials:
            v = t.metrics.get(metric) if t.ok else None
            if v is not None and v == v:
                values.setdefault(t.arm, []).append(float(v))
            elif not t.ok:
                failures.setdefault(t.arm, []).append(f"{t.status.value}: {t.error}")
        for a, v in values.items():
            self._values.setdefault(a, []).extend(v)
        return RunResult(cid, summary, values, failures)

    def values(self, arm: str) -> list[float]:
        """Every successful measurement of ``arm`` made in this test so far."""
        return list(self._values.get(self._canonical(arm), []))

    def compare(self, a, b, *, repeat: int | None = None, metric: str | None = None) -> PerfComparison:
        """Compare arm ``b`` to arm ``a`` (``a`` is the reference).

        ``a``/``b`` are arm specs (measured now, together and interleaved, unless this test already
        measured them) or sequences of numbers you measured yourself (then nothing runs, and the
        metric direction is ``higher_is_better`` unless an experiment says otherwise).
        """
        numeric = not isinstance(a, str) and not isinstance(b, str)
        if numeric:
            hib, met, alpha = True, metric or "value", 0.05
            if self._kw("experiment") or self._request.config.getoption("--bisect-lab-experiment") \
                    or self._request.config.getini("bisect_lab_experiment"):
                exp = self.experiment
                hib, met, alpha = exp.benchmark.higher_is_better, metric or exp.benchmark.metric, exp.design.alpha
            return PerfComparison("a", "b", a, b, metric=met, higher_is_better=hib, alpha=alpha,
                                  unknown=self.unknown, max_regression=self.max_regression)
        ca, cb = self._canonical(a), self._canonical(b)
        missing = [s for s in (ca, cb) if not self._values.get(s)]
        campaign = None
        n = self.repeat(repeat)
        if missing:
            res = self.run([ca, cb] if len(missing) == 2 or ca == cb else missing, repeat=n)
            campaign = res.campaign
        exp = self.experiment
        if metric and metric != exp.benchmark.metric:
            pytest.fail(f"bisect-lab: only the experiment's metric {exp.benchmark.metric!r} is compared", pytrace=False)

        def more():
            r = self.run([ca, cb], repeat=n)
            return self._values.get(ca, []), self._values.get(cb, []), r.campaign

        max_repeat = self.max_repeat()
        rounds = max(1, -(-max_repeat // n)) if max_repeat else 1
        return PerfComparison(ca, cb, self._values.get(ca, []), self._values.get(cb, []),
                              metric=exp.benchmark.metric, higher_is_better=exp.benchmark.higher_is_better,
                              alpha=exp.design.alpha, unknown=self.unknown, max_regression=self.max_regression,
                              campaign=campaign, more=more, max_rounds=rounds)


@pytest.fixture
def bisect_lab(request, _bisect_lab_state) -> BisectLab:
    """Run arms of an experiment and compare them with statistics (see the module docstring)."""
    return BisectLab(request, _bisect_lab_state)


@pytest.fixture
def bisect_lab_experiment(bisect_lab):
    """The experiment of this test (marker ``experiment=``, ``--bisect-lab-experiment`` or ini)."""
    return bisect_lab.experiment
