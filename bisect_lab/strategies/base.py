"""The ask/tell protocol every search strategy follows, plus shared plumbing.

A strategy is a pure, seeded state machine:

* ``ask() -> list[frozenset[str]]``: the next batch of arms to measure; each arm is the set of
  factors set to their *bad* value (``frozenset()`` = good arm, all factors = bad arm). The batch
  lets a runner use several hosts at once. Calling ``ask()`` again before the batch has been told
  returns the arms still outstanding (so a crash between ask and tell is harmless). An empty list
  means done.
* ``tell(active, value)``: one observation, in the order of the asked batch. ``value=None`` is a
  failed trial: it counts against the budget but is never a measurement.
* ``done: bool`` and ``verdict()``.

Same seed + same sequence of ``tell()`` = same decisions: a campaign resumes by replaying its stored
trials (``replay``). To make that hold, a strategy keeps no state that only ``ask()`` changes:
everything it decides is a function of the told observations, and ``self.rng`` is re-seeded from
(seed, number of observations) before each batch is planned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Strategy(Protocol):
    def ask(self) -> list[frozenset[str]]: ...
    def tell(self, active: frozenset[str], value: float | None, block: Hashable = None) -> None: ...
    @property
    def done(self) -> bool: ...
    def verdict(self): ...


@dataclass(frozen=True)
class Observation:
    """One told trial. ``index`` is its position in the campaign (0-based, failures included)."""

    index: int
    active: frozenset[str]
    value: float | None
    block: Hashable = None      # the host it was measured on (None: the one host)

    @property
    def ok(self) -> bool:
        return self.value is not None


class StrategyBase:
    """Bookkeeping shared by strategies: observations, pending batch, budget, seeded RNG.

    Subclasses implement ``_plan() -> list[frozenset[str]]`` (a new non-empty batch, or [] when
    finished) and ``verdict()``; they may override ``_on_tell``.
    """

    name = "strategy"

    def __init__(self, factors: Iterable[str], *, higher_is_better: bool = True, seed: int = 0,
                 max_trials: int = 400):
        fs = list(factors)
        if len(set(fs)) != len(fs):
            raise ValueError("factor names must be unique")
        if not fs:
            raise ValueError("need at least one factor")
        if max_trials < 1:
            raise ValueError("max_trials must be >= 1")
        self.factors: tuple[str, ...] = tuple(fs)
        self.factor_set = frozenset(fs)
        self.higher_is_better = bool(higher_is_better)
        self.seed = seed
        self.max_trials = int(max_trials)
        self.rng = np.random.default_rng(seed)
        self.observations: list[Observation] = []
        self._told: list[Observation] = []        # as told: raw values, with their blocks
        self._pending: list[frozenset[str]] = []
        self._finished = False

    # ------------------------------------------------------------------ protocol
    @property
    def trials(self) -> int:
        return len(self.observations)

    @property
    def failed(self) -> int:
        return sum(1 for o in self.observations if not o.ok)

    @property
    def budget_left(self) -> int:
        return self.max_trials - self.trials

    @property
    def done(self) -> bool:
        return self._finished or (self.budget_left <= 0 and not self._pending)

    def ask(self) -> list[frozenset[str]]:
        if self._pending:
            return list(self._pending)
        if self.done:
            return []
        # randomness depends only on the seed and the observations so far (resume = replay)
        self.rng = np.random.default_rng([int(self.seed) & 0xFFFFFFFF, len(self.observations)])
        batch = [frozenset(a) for a in self._plan()]
        batch = batch[: max(0, self.budget_left)]
        if not batch:
            self._finished = True
            return []
        for a in batch:
            if not a <= self.factor_set:
                raise AssertionError(f"strategy proposed unknown factors {sorted(a - self.factor_set)}")
        self._pending = list(batch)
        return list(batch)

    def tell(self, active, value: float | None, block: Hashable = None) -> None:
        """One reading of ``active``; ``block``: the host it was measured on (readings are
        compared within hosts: see ``blocks``)."""
        active = frozenset(active)
        unknown = active - self.factor_set
        if unknown:
            raise ValueError(f"unknown factors {sorted(unknown)}; known: {sorted(self.factor_set)}")
        if value is not None:
            value = float(value)
            if not np.isfinite(value) or value <= 0:
                # a non-positive or non-finite metric cannot be a ratio-scale measurement
                value = None
        if active in self._pending:
            self._pending.remove(active)
        obs = Observation(len(self.observations), active, value, block)
        self._told.append(obs)
        if len({o.block for o in self._told if o.ok}) > 1:
            # every decision reads host-corrected values, refitted on every reading
            self.observations = deblock(self._told)
            obs = self.observations[-1]
        else:
            self.observations.append(obs)
        self._on_tell(obs)

    # ------------------------------------------------------------------ hooks
    def _plan(self) -> list[frozenset[str]]:
        raise NotImplementedError

    def _on_tell(self, obs: Observation) -> None:
        pass

    def verdict(self):
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def values(self, arm: frozenset[str]) -> list[float]:
        return [o.value for o in self.observations if o.ok and o.active == arm]

    def failures(self, arm: frozenset[str]) -> int:
        return sum(1 for o in self.observations if not o.ok and o.active == arm)


def deblock(told: list[Observation]) -> list[Observation]:
    """``told`` with each value's host offset taken out (``blocks.deblocked``)."""
    from .blocks import deblocked
    vals = deblocked([o.active for o in told], [o.block for o in told], [o.value for o in told])
    return [o if v == o.value else Observation(o.index, o.active, v, o.block) for o, v in zip(told, vals)]


def host_warnings(told: list[Observation]) -> list[str]:
    """The hosts whose level differs (``blocks.level_warnings``)."""
    from .blocks import level_warnings
    return level_warnings([o.active for o in told], [o.block for o in told], [o.value for o in told])


def replay(strategy, trials: Iterable[tuple[frozenset[str], float | None]]):
    """Feed stored trials back into a fresh strategy (resume). Returns the strategy."""
    for active, value in trials:
        strategy.tell(frozenset(active), value)
    return strategy


def drive(strategy, measure: Callable[[frozenset[str]], float | None], *,
          exceptions_fail: bool = False):
    """Run ``strategy`` to completion with ``measure(active) -> float | None``; returns its verdict.

    ``measure`` returning None is a failed trial. With ``exceptions_fail`` an exception raised by
    ``measure`` is also a failed trial; by default it propagates (a bug in the caller's code should
    not be mistaken for a slow arm).
    """
    while True:
        batch = strategy.ask()
        if not batch:
            break
        for arm in batch:
            if exceptions_fail:
                try:
                    v = measure(arm)
                except Exception:  # noqa: BLE001 - asked for: a crashing trial is a failed trial
                    v = None
            else:
                v = measure(arm)
            strategy.tell(arm, v)
    return strategy.verdict()
