"""Frozen verdict value objects of the search strategies (layer 1). Pure: no I/O.

Everything a strategy concludes is returned as one of these, with a JSON-able ``to_dict()`` that the
CLI prints under ``--json`` and the store can keep.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from .jsonable import jsonable

ATTRIBUTION_STATUSES = ("culprits", "no-regression", "inconclusive")


class _ToDict:
    def to_dict(self) -> dict:
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class RatioEstimate(_ToDict):
    """A multiplicative effect with its interval: ``ratio`` = metric(with) / metric(without)."""

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float = float("nan")
    n_a: int = 0          # measurements on the reference side
    n_b: int = 0          # measurements on the changed side

    @property
    def change(self) -> float:
        return self.ratio - 1.0


@dataclass(frozen=True)
class FactorEffect(_ToDict):
    """One term of the decomposition of the regression.

    ``name`` is a factor, or ``"a*b"`` for an interaction term. ``effect`` is the multiplicative
    change the term causes (0.95 = 5% lower). ``share`` is the fraction of the whole regression
    (on the log scale) this term explains, with an interval; shares of all terms sum to about 1.
    """

    name: str
    kind: str                 # "main" | "interaction"
    effect: RatioEstimate
    share: float
    share_low: float
    share_high: float


@dataclass(frozen=True)
class Interaction(_ToDict):
    """Factors whose joint effect is not the sum of their separate effects.

    ``kind``: "and" (the regression appears only when all of them are bad, e.g. a patch that hurts
    only when an env var is set), "or" (any one of them alone causes the whole regression),
    "synergy" / "antagonism" (joint effect larger / smaller than the sum). ``term`` is the
    interaction term of the log-linear model, i.e. joint effect / product of separate effects.
    """

    factors: tuple[str, ...]
    kind: str
    term: RatioEstimate
    description: str = ""


@dataclass(frozen=True)
class ConfirmationCheck(_ToDict):
    """A confirmation arm measured at the end: ``bad minus culprits`` must look like good and
    ``good plus culprits`` like bad. ``position`` = (arm - good) / (bad - good) on the log scale
    (0 = good level, 1 = bad level), with an interval."""

    arm: tuple[str, ...]      # factors set to their bad value
    expect: str               # "good" | "bad"
    n: int
    position: float
    position_low: float
    position_high: float
    ok: bool


@dataclass(frozen=True)
class PlanEstimate(_ToDict):
    """Noise seen so far and what resolving ``min_effect`` between two arms costs at that noise."""

    cv_good: float
    cv_bad: float
    min_effect: float
    trials_per_arm: int | None

    @property
    def text(self) -> str:
        return self.describe()

    def describe(self, unit: str = "arm") -> str:
        """The estimate in words; ``unit``: what is measured that often (an arm, a commit)."""
        if self.trials_per_arm is None:
            return "not enough measurements to plan yet"
        return (f"to resolve {self.min_effect:.0%} at this noise: about {self.trials_per_arm} "
                f"trials per {unit}")


@dataclass(frozen=True)
class AttributionVerdict(_ToDict):
    """What an attribution concluded.

    ``status``: "culprits" | "no-regression" | "inconclusive"; ``culprits``: sorted factor names
    (empty unless status == "culprits"); ``trials``: number of trials (measure() calls), failed
    ones included; ``regression``: bad relative to good; ``confidence``: posterior probability of
    the named culprit set; ``candidates``: (factor, posterior probability it is involved).
    """

    status: str
    culprits: list[str]
    trials: int
    regression: RatioEstimate | None = None
    effects: tuple[FactorEffect, ...] = ()
    interactions: tuple[Interaction, ...] = ()
    confirmation: tuple[ConfirmationCheck, ...] = ()
    confidence: float = float("nan")
    hypothesis: str = ""      # "single" | "and" | "or" | "add" | ""
    candidates: tuple[tuple[str, float], ...] = ()
    plan: PlanEstimate | None = None
    warnings: tuple[str, ...] = ()
    failed_trials: int = 0
    higher_is_better: bool = True
    min_effect: float = 0.02
    alpha: float = 0.05
    strategy: str = "attribution"
    factors: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in ATTRIBUTION_STATUSES:
            raise ValueError(f"status must be one of {ATTRIBUTION_STATUSES}, not {self.status!r}")


@dataclass(frozen=True)
class BisectVerdict:
    """Answer of a noisy bisection.

    status:     "culprit" | "gradual" | "several" | "no-regression" | "inconclusive".
                gradual: the change is spread over ``range`` (no single commit; ``effect`` is the
                total); several: two steps, each in ``steps``.
    index:      the first bad position (culprit; several: the first step's, when pinned), else None.
    mass:       posterior probability of ``index`` (culprit), else None.
    trials:     number of measurements made (== measure calls, untestable ones included).
    effect:     ratio bad/good of the metric (e.g. 0.95 = 5% lower), None if never estimated.
    effect_ci:  (lo, hi) interval of that ratio at ``confidence``.
    range:      smallest (lo, hi) position range holding >= confidence posterior mass, e.g.
                (499, 500) when 499 is untestable, or (1, n-1) when no range does (much mass on
                "no regression"); None for no-regression and before the confirm step ends.
    range_mass: posterior mass of ``range``.
    confidence: the stop confidence used.
    reason:     short machine-readable why: "posterior" (culprit); "endpoints-equal",
                "posterior-null" (no-regression); "untestable", "budget", "endpoints-undecided",
                "endpoint-untestable" (inconclusive); "running" (provisional, before done).
    path:       every trial in order, as (position, value) with value None for untestable.
    n:          number of positions.
    steps:      several: one dict per step, in history order: ``index`` (its first bad position,
                None when not pinned), ``range`` [lo, hi] holding it, ``effect`` (ratio after/before
                from the flat readings on either side), ``effect_ci``.
    top:        inconclusive: the fewest positions holding 80% of the posterior (at most 8), with
                their masses, most likely first.
    discounted: indices into ``path`` of readings the noise model treats as stalls / gross outliers,
                and of the readings left out as bursts.
    bursts:     bursts of host contention the guard found (the reference read slow with them):
                one dict each, ``trials`` (indices into ``path``, left out), ``refs`` (slow reference
                readings among them) and ``kept`` (True for the one that was a changed machine: the
                reference stayed slow, its readings were kept and the guard stopped). A machine
                found from a shift of both endpoints' later readings (too small for a burst) also
                has ``shift`` (the level ratio after/before) and ``trials`` holds the change's
                trial, then the endpoint readings that showed it.
    check:      the model check: ``p_one_step`` (bootstrap p of "one step fits"), ``model``
                ("one", "slide" or "two") and ``extra`` (trials spent telling the models apart).
    """

    status: str
    index: int | None
    mass: float | None
    trials: int
    effect: float | None
    effect_ci: tuple[float, float] | None
    range: tuple[int, int] | None
    range_mass: float | None
    confidence: float
    reason: str
    path: tuple[tuple[int, float | None], ...]
    n: int
    steps: tuple[dict, ...] = ()
    top: tuple[tuple[int, float], ...] = ()
    discounted: tuple[int, ...] = ()
    check: dict | None = None
    bursts: tuple[dict, ...] = ()

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (tuples become lists)."""
        return {
            "status": self.status,
            "index": self.index,
            "mass": self.mass,
            "trials": self.trials,
            "effect": self.effect,
            "effect_ci": list(self.effect_ci) if self.effect_ci is not None else None,
            "range": list(self.range) if self.range is not None else None,
            "range_mass": self.range_mass,
            "confidence": self.confidence,
            "reason": self.reason,
            "path": [[p, v] for p, v in self.path],
            "n": self.n,
            "steps": [dict(st) for st in self.steps],
            "top": [[p, m] for p, m in self.top],
            "discounted": list(self.discounted),
            "bursts": [dict(b, trials=list(b["trials"])) for b in self.bursts],
            "check": dict(self.check) if self.check is not None else None,
        }
