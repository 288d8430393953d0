"""Typed campaign results: what ``run``, ``attribute``, ``bisect`` and a sweep night conclude (layer 3).

As in pyperf, the data model is the file format: each class maps one to one onto the object that
``--json`` prints and the results database keeps (``campaigns.result``), with one :meth:`to_dict`
and one :meth:`from_dict`. The CLI, the human rendering and the report read these fields; the
report renders the stored result instead of recomputing it.

Compatibility, on purpose:

* ``from_dict`` reads results stored by any earlier version: a key it does not declare is kept in
  :attr:`more` and written back by ``to_dict``, a key it lacks takes the field's default.
* Results were plain dicts before; read access by key (``res["status"]``, ``res.get("culprits")``,
  ``"resume_with" in res``) still works, so library code written against the dicts keeps running.

Row-shaped parts (an arm's summary row, a comparison row, a bisection level, a sweep series) stay
JSON objects: they are the ``--json`` contract itself and are read as such.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Iterator

from .jsonable import jsonable

__all__ = ["Result", "RunResult", "AttributionResult", "BisectResult", "SweepNight", "result_from_dict"]


class Result:
    """Base of the typed results: ``to_dict`` / ``from_dict`` and read access by key."""

    kind: ClassVar[str] = ""
    # keys written only when they hold a value (they are absent from the JSON otherwise)
    optional: ClassVar[frozenset[str]] = frozenset()
    # nested results: field name -> class
    nested: ClassVar[dict[str, type]] = {}

    def to_dict(self) -> dict:
        """The JSON object of this result (cleaned: NaN -> null, tuples -> lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "more":
                continue
            v = getattr(self, f.name)
            if v is None and f.name in self.optional:
                continue
            out[f.name] = jsonable(v)
        for k, v in self.more.items():
            out.setdefault(k, jsonable(v))
        return out

    def stored(self) -> dict:
        """What the results database keeps of this result (``campaigns.result``)."""
        return self.to_dict()

    @classmethod
    def from_dict(cls, d: dict | None):
        """A result from its JSON object (``None`` or ``{}``: every field at its default)."""
        d = dict(d or {})
        names = {f.name for f in fields(cls)} - {"more"}
        kw = {k: v for k, v in d.items() if k in names}
        for k, sub in cls.nested.items():
            if isinstance(kw.get(k), dict):
                kw[k] = sub.from_dict(kw[k])
        return cls(**kw, more={k: v for k, v in d.items() if k not in names})

    # -- read access by key, for code written against the dict results
    def _keys(self) -> list[str]:
        return list(self.to_dict())

    def __getitem__(self, key: str):
        if key in self._declared():
            v = getattr(self, key)
            if v is None and key in self.optional:
                raise KeyError(key)
            return v
        return self.more[key]

    def get(self, key: str, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, _MISSING) is not _MISSING

    def keys(self) -> list[str]:
        return self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    @classmethod
    def _declared(cls) -> set[str]:
        return {f.name for f in fields(cls)} - {"more"}


_MISSING = object()


@dataclass
class RunResult(Result):
    """``run`` (and each measuring of a sweep night or a pytest test): per-arm rows, pairwise
    comparisons per host (one Holm family over every metric), what the trials' environment showed.

    ``arms``: ``{"arm", "n", "failed", "failures", "median", "mean", "cv", "ci_low", "ci_high",
    "min", "max"}`` per arm; ``comparisons``: ``{"a", "b", "host", "n_a", "n_b", "ratio",
    "ci_low", "ci_high", "p_value", "p_adjusted", "verdict", "regression"}`` per pair and host.
    """

    kind: ClassVar[str] = "run"
    optional: ClassVar[frozenset[str]] = frozenset({"secondary", "repeat", "resume_with", "min_effect", "alpha"})

    campaign: str = ""
    experiment: str = ""
    metric: str = ""
    higher_is_better: bool = True
    min_effect: float | None = None     # the equivalence margin of "same" verdicts
    alpha: float | None = None
    hosts: list[str] = field(default_factory=list)
    arms: list[dict] = field(default_factory=list)
    comparisons: list[dict] = field(default_factory=list)
    trials: int = 0
    env_propagation: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    secondary: list[dict] | None = None
    repeat: int | None = None
    resume_with: list[dict] | None = None
    more: dict = field(default_factory=dict)

    def arm(self, spec: str) -> dict | None:
        """The summary row of arm ``spec``."""
        return next((a for a in self.arms if a.get("arm") == spec), None)

    @property
    def undecided(self) -> bool:
        """Some comparison could not decide at this noise (more repeats would)."""
        return any(c.get("verdict") == "unknown" for c in self.comparisons)


@dataclass
class AttributionResult(Result):
    """``attribute``: which factors explain bad vs good, by how much, how sure.

    ``status``: "culprits" | "no-regression" | "inconclusive"; ``culprits``: sorted factor names;
    ``trials``: every trial stored (failed ones included), ``measurements``: those the strategy was
    told; ``regression``: bad relative to good (``ratio``, ``ci_low``, ``ci_high``, ...);
    ``effects`` / ``interactions`` / ``confirmation``: the decomposition and its checks.
    """

    kind: ClassVar[str] = "attribute"
    optional: ClassVar[frozenset[str]] = frozenset({"max_trials", "repeats", "resume_with", "plan"})

    status: str = "inconclusive"
    culprits: list[str] = field(default_factory=list)
    trials: int = 0
    regression: dict | None = None
    effects: list[dict] = field(default_factory=list)
    interactions: list[dict] = field(default_factory=list)
    confirmation: list[dict] = field(default_factory=list)
    confidence: float | None = None
    hypothesis: str = ""
    candidates: list = field(default_factory=list)
    plan: dict | None = None
    warnings: list[str] = field(default_factory=list)
    failed_trials: int = 0
    higher_is_better: bool = True
    min_effect: float | None = None
    alpha: float | None = None
    strategy: str = ""
    factors: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)          # the strategy's own details (stages, ...)
    measurements: int = 0
    campaign: str = ""
    good: str = ""
    bad: str = ""
    metric: str = ""
    env_propagation: dict = field(default_factory=dict)
    max_trials: int | None = None
    repeats: int | None = None
    resume_with: list[dict] | None = None
    more: dict = field(default_factory=dict)


@dataclass
class BisectResult(Result):
    """``bisect``: the first commit whose performance belongs with bad.

    ``status``: "culprit" | "gradual" | "several" | "no-regression" | "inconclusive"; ``commit``:
    the full sha (the first step's for "several"), else None; ``effect``: ``{"ratio", "ci_low",
    "ci_high"}``; ``levels``: one search per line of history (the main line, then a merged side
    branch); ``untestable``: sha -> why it could not be measured.
    """

    kind: ClassVar[str] = "bisect"
    optional: ClassVar[frozenset[str]] = frozenset({"resume_with", "warnings", "error", "reason_skipped"})

    status: str = "inconclusive"
    index: int | None = None
    mass: float | None = None
    trials: int = 0
    effect: dict | None = None
    effect_ci: list | None = None
    range: list | None = None
    range_mass: float | None = None
    confidence: float | None = None
    reason: str = ""
    path: list = field(default_factory=list)
    n: int = 0
    steps: list[dict] = field(default_factory=list)
    top: list = field(default_factory=list)
    discounted: list = field(default_factory=list)
    check: dict | None = None
    posterior: float | None = None
    commit: str | None = None
    commit_info: dict | None = None
    campaign: str = ""
    good: str = ""
    bad: str = ""
    arm: str = ""
    candidates: int = 0
    levels: list[dict] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    untestable: dict = field(default_factory=dict)
    metric: str = ""
    max_trials: int | None = None
    warnings: list[str] | None = None
    resume_with: list[dict] | None = None
    more: dict = field(default_factory=dict)


@dataclass
class SweepNight(Result):
    """One night of a sweep: the commit measured, each series' judgement, the alerts.

    ``regressions``: the arms that alert (non-empty = exit 1); ``series``: one judgement per arm
    (``status``, ``reason``, ``comparison``, ``last_good_commit``, ``change_points``, ...);
    ``summary``: the night's :class:`RunResult`; ``bisections``: what ``--bisect-on-regression``
    found (each a :class:`BisectResult` object plus ``arm``, ``good``, ``bad``, or a skip/error).
    """

    kind: ClassVar[str] = "sweep"
    optional: ClassVar[frozenset[str]] = frozenset({"summary", "report"})
    nested: ClassVar[dict[str, type]] = {"summary": RunResult}

    sweep: str = ""
    campaign: str = ""
    ref: str = ""
    commit: str = ""
    subject: str = ""
    night: int = 0
    metric: str = ""
    higher_is_better: bool = True
    min_effect: float | None = None
    series: list[dict] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    summary: RunResult | None = None
    bisections: list[dict] = field(default_factory=list)
    report_command: str = ""
    report: str | None = None
    more: dict = field(default_factory=dict)

    def stored(self) -> dict:
        """All but the summary: the night's trials are stored, and the next night reads only this."""
        d = self.to_dict()
        d.pop("summary", None)
        return d


_KINDS: dict[str, type[Result]] = {"run": RunResult, "attribute": AttributionResult, "bisect": BisectResult,
                                   "sweep": SweepNight, "pytest": RunResult}


def result_from_dict(kind: str, d: dict | None) -> Result | None:
    """The typed result of a stored campaign of ``kind`` (None when it stored none)."""
    if d is None:
        return None
    return _KINDS.get(kind, RunResult).from_dict(d)


@dataclass
class RecheckResult(Result):
    """``recheck``: an old launch's value placed in today's launch-to-launch distribution.

    ``old``: the old launch's value (the geometric mean of its ``old_readings`` counted readings);
    ``today``, ``low`` .. ``high``: today's mean and the ``level`` interval one launch like the old
    one falls in; ``sd_away``: the old value's distance from today's mean in predictive sds;
    ``inside``: the old value lies in the interval; ``differences``: what differs between the old
    trial's fingerprint and configuration and today's (``what``, ``then``, ``now``)."""

    kind: ClassVar[str] = "recheck"

    campaign: str = ""
    of: str = ""
    experiment: str = ""
    metric: str = ""
    higher_is_better: bool = True
    arm: str = ""
    commit: str | None = None
    old: float = float("nan")
    old_readings: int = 1
    today: float = float("nan")
    low: float = float("nan")
    high: float = float("nan")
    sd_away: float = float("nan")
    p_value: float = float("nan")
    inside: bool = True
    sessions: int = 0
    readings: int = 0
    between_cv: float | None = None
    within_cv: float | None = None
    level: float = 0.95
    differences: list[dict] = field(default_factory=list)
    fingerprint_missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    more: dict = field(default_factory=dict)
