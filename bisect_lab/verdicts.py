"""Frozen verdict value objects of the search strategies (DESIGN 4, layer 1). Pure: no I/O.

Everything a strategy concludes is returned as one of these, with a JSON-able ``to_dict()`` that the
CLI prints under ``--json`` (DESIGN 3.4) and the store can keep.
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
    """What an attribution concluded (DESIGN 3.5).

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
