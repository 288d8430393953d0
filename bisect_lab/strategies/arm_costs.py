"""What a launch of each arm costs, learned from the launches measured so far (layer 2, pure).

A serving stack's launch is not the same price for every arm: a patch that loads a draft model,
captures more CUDA graphs or compiles kernels makes every launch of an arm holding it slower. An
attribution that picks its next arm by expected information alone pays for that blindly; picking
by information per second of launch buys the same answer for less node time. Arms never launched
need a price too, so the cost is modelled per factor: ``log seconds = a + sum of b_f over the
arm's factors``, fitted by ridge least squares (every ``b_f`` shrunk towards 0, i.e. towards
"costs alike", so a handful of launches cannot make a factor look expensive by chance).
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

# Ridge weight, in launches: a factor's cost ratio needs a few launches with and without it
# before it moves far from 1.
RIDGE = 1.0
# Factor cost ratios inside this band are "alike": the choice is then by information alone.
ALIKE = (0.8, 1.25)
# Launches measured before the model is used at all.
MIN_LAUNCHES = 4


class ArmCosts:
    """``cost(active) -> float``: the relative cost of one launch of the arm whose factors are
    ``active`` (1.0 = an arm without any costly factor; scale is irrelevant to the choice)."""

    def __init__(self, factors: Iterable[str]):
        self.factors = tuple(factors)
        self._index = {f: k for k, f in enumerate(self.factors)}
        self._x: list[np.ndarray] = []
        self._y: list[float] = []
        self._beta = np.zeros(len(self.factors))

    def add(self, active: Iterable[str], seconds: float) -> None:
        """One measured launch (its whole session's seconds) of the arm with ``active`` factors."""
        if not (seconds > 0 and math.isfinite(seconds)):
            return
        row = np.zeros(len(self.factors))
        for f in active:
            if f in self._index:
                row[self._index[f]] = 1.0
        self._x.append(row)
        self._y.append(math.log(seconds))
        self._fit()

    @property
    def launches(self) -> int:
        return len(self._y)

    @property
    def active(self) -> bool:
        """Whether the costs differ enough (and are measured well enough) to steer the choice."""
        if self.launches < MIN_LAUNCHES:
            return False
        r = np.exp(self._beta)
        return bool(np.any((r < ALIKE[0]) | (r > ALIKE[1])))

    def _fit(self) -> None:
        if self.launches < 2:
            return
        X, y = np.array(self._x), np.array(self._y)
        xc, yc = X - X.mean(0), y - y.mean()          # the intercept, unpenalised
        k = X.shape[1]
        self._beta = np.linalg.solve(xc.T @ xc + RIDGE * np.eye(k), xc.T @ yc)

    def ratio(self, factor: str) -> float:
        """A launch's cost with ``factor`` over without it (the fitted model)."""
        return float(math.exp(self._beta[self._index[factor]]))

    def __call__(self, active: Iterable[str]) -> float:
        if not self.active:
            return 1.0
        s = sum(self._beta[self._index[f]] for f in active if f in self._index)
        return float(math.exp(s))

    def account(self) -> tuple:
        """What :meth:`describe` says, in kind: too few launches, alike, or which factors differ."""
        if self.launches < MIN_LAUNCHES:
            return ("few",)
        return ("costs",) + tuple(f for f in self.factors if not ALIKE[0] <= self.ratio(f) <= ALIKE[1])

    def describe(self) -> str:
        """One sentence for the log: which factors make a launch dearer or cheaper."""
        if self.launches < MIN_LAUNCHES:
            return f"launch costs: {self.launches} launch(es) measured, arms chosen by information alone"
        parts = [f"{f} {self.ratio(f):.2g}x" for f in self.factors
                 if not ALIKE[0] <= self.ratio(f) <= ALIKE[1]]
        if not parts:
            return (f"launch costs alike across arms (from {self.launches} launches): arms chosen by "
                    f"information alone")
        return (f"launch costs differ by arm (from {self.launches} launches: {', '.join(parts)}): search "
                f"arms chosen by information per second of launch")
