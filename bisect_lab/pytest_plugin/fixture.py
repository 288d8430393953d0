"""The ``bisect_lab`` fixture (:class:`BisectLab`) and the per-session state behind it: one results
store, one bisect-lab Session (hosts, tree caches) per experiment file.

Everything heavy (pandas, scipy, git, the store, the campaign driver) loads inside the fixtures.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from .comparison import ArmRuns, PerfComparison
from .options import CAMPAIGNS, MARKER, OPTIONS, UNKNOWN_MODES, Options


# --------------------------------------------------------------------------- the campaign driver
# The only two places the plugin reaches the campaign machinery.
def _open_session(exp, store, hosts):
    from ..campaigns import Session
    return Session(exp, store, hosts)


def _measure(session, specs: list[str], *, repeat: int, node_id: str):
    """One campaign of kind ``pytest`` measuring ``specs``: (campaign id, summary, trials)."""
    from ..campaigns import measure_arms
    return measure_arms(session, specs, repeat=repeat, tag=node_id, kind="pytest", params={"node": node_id})


# --------------------------------------------------------------------------- session state
class SessionState:
    """Per pytest session: one results store, one bisect-lab Session (hosts, tree caches) per experiment."""

    def __init__(self, config):
        self.config = config
        self.options: Options = config.stash[OPTIONS]
        self._store = None
        self._first = None                    # the first experiment: the results go beside it
        self._sessions: dict[str, object] = {}

    @property
    def results(self) -> Path:
        from ..paths import results_dir
        exp = self._first
        if exp is None:
            return results_dir(self.options.results)[0]
        from ..commands._context import is_bundled_demo
        return results_dir(self.options.results, experiment=exp.path, target_repo=exp.target.repo,
                           demo=is_bundled_demo(exp))[0]

    @property
    def cache(self) -> Path:
        if self.options.cache:
            return Path(self.options.cache)
        from ..paths import default_cache_dir
        return default_cache_dir()

    def store(self):
        if self._store is None:
            from ..store import Store
            self._store = Store(self.results)
            from ..redact import use_key
            use_key(self._store.redaction_key)
        return self._store

    def session(self, experiment_path: Path):
        key = str(experiment_path)
        if key not in self._sessions:
            from ..config import load_experiment
            from ..hosts import make_hosts
            exp = load_experiment(experiment_path)
            if self._store is None:
                self._first = exp
            self._sessions[key] = _open_session(exp, self.store(), make_hosts(exp.host, cache_dir=self.cache))
        return self._sessions[key]

    def close(self):
        for s in self._sessions.values():
            s.close()
        if self._store is not None:
            self._store.close()


@pytest.fixture(scope="session")
def _bisect_lab_state(request):
    state = SessionState(request.config)
    yield state
    state.close()


# --------------------------------------------------------------------------- the fixture
class BisectLab:
    """The ``bisect_lab`` fixture: run arms of an experiment and compare them inside a test.

    Each setting comes from the nearest marker that sets it, then the command line, then the
    ini file -- except ``repeat`` and ``max_repeat``, where ``--bisect-lab-repeat`` /
    ``--bisect-lab-max-repeat`` beat the marker (a quick or a thorough run of the whole suite).
    """

    def __init__(self, request, state: SessionState):
        self._request = request
        self._state = state
        self._options: Options = state.options
        self._values: dict[str, list[float]] = {}
        self._campaigns: list[str] = []
        self.node_id = request.node.nodeid

    def _kw(self, name, default=None):
        # Closest marker first (function, then class, then module): each kwarg from the nearest that sets it.
        for m in self._request.node.iter_markers(MARKER):
            if m.kwargs.get(name) is not None:
                return m.kwargs[name]
        return default

    @property
    def experiment_path(self) -> Path:
        """The experiment file: marker ``experiment=`` (relative to the test file, whatever the
        current folder; a path that is not there but is under the rootdir is taken from there),
        then ``--bisect-lab-experiment``, then the ini ``bisect_lab_experiment``."""
        p = self._kw("experiment")
        if p is not None:
            p = Path(p)
            if not p.is_absolute():
                here = Path(str(self._request.node.path)).resolve().parent / p
                root = Path(self._request.config.rootpath) / p
                p = root if not here.exists() and root.exists() else here
            return p
        if self._options.experiment is not None:
            return self._options.experiment
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
        """Outcome of an undecidable assertion: marker ``unknown=``, then the option, then the ini."""
        mode = self._kw("unknown") or self._options.unknown
        if mode not in UNKNOWN_MODES:
            pytest.fail(f"bisect-lab: unknown={mode!r}; expected one of {', '.join(UNKNOWN_MODES)}", pytrace=False)
        return mode

    @property
    def max_regression(self) -> float:
        """Default threshold of ``assert_not_slower()``: marker ``max_regression=``, then the option, then 2%."""
        return float(self._kw("max_regression", self._options.max_regression))

    def max_repeat(self) -> int | None:
        """Most trials per arm an undecided assertion may spend (option ``--bisect-lab-max-repeat``,
        then marker ``max_repeat=``); None: one round only."""
        v = self._options.max_repeat or self._kw("max_repeat")
        return int(v) if v else None

    def repeat(self, repeat: int | None = None) -> int:
        """Trials per arm: option ``--bisect-lab-repeat``, then the ``repeat`` argument, then marker
        ``repeat=``, then the experiment's ``[design] repeat``."""
        return int(self._options.repeat or repeat or self._kw("repeat") or self.experiment.design.repeat)

    @staticmethod
    def _guard(fn):
        from ..errors import BisectLabError
        try:
            return fn()
        except BisectLabError as e:
            from ..redact import redact_text
            pytest.fail(redact_text(f"bisect-lab: {e}"), pytrace=False)     # a bad spec may quote a token

    def _canonical(self, spec: str) -> str:
        from ..arms import parse_arm
        return self._guard(lambda: parse_arm(spec, self.experiment.patchset).spec)

    # -- actions
    def run(self, arms, repeat: int | None = None) -> ArmRuns:
        """Measure ``arms`` (a spec or a list of specs), interleaved in a seeded random order, ``repeat``
        trials each. Trials are stored, tagged with this test's node id."""
        specs = [arms] if isinstance(arms, str) else list(arms)
        session = self.session
        n = self.repeat(repeat)
        cid, summary, trials = self._guard(lambda: _measure(session, specs, repeat=n, node_id=self.node_id))
        self._campaigns.append(cid)
        self._request.config.stash[CAMPAIGNS].append((self.node_id, cid, self._state.results))
        metric = session.experiment.benchmark.metric
        values: dict[str, list[float]] = {a["arm"]: [] for a in summary.arms}
        failures: dict[str, list[str]] = {}
        for t in trials:
            v = t.metrics.get(metric) if t.ok else None
            if v is not None and v == v:
                values.setdefault(t.arm, []).append(float(v))
            elif not t.ok:
                failures.setdefault(t.arm, []).append(f"{t.status.value}: {t.error}")
        for a, v in values.items():
            self._values.setdefault(a, []).extend(v)
        return ArmRuns(cid, summary, values, failures)

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
            if self._kw("experiment") or self._options.experiment is not None:
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
    """Run arms of an experiment and compare them with statistics (see :mod:`bisect_lab.pytest_plugin`)."""
    return BisectLab(request, _bisect_lab_state)


@pytest.fixture
def bisect_lab_experiment(bisect_lab):
    """The experiment of this test (marker ``experiment=``, ``--bisect-lab-experiment`` or ini)."""
    return bisect_lab.experiment
