"""The one loop every campaign runs: ask a batch, run it, tell each value (layer 5).

A strategy (``bisect_lab.strategies``: attribution, screening, bisection) or a fixed schedule
(:class:`BalancedRounds`, what ``run``, sweep nights and pytest campaigns measure) proposes a
*batch* of items; :func:`drive` turns each into a :class:`~bisect_lab.runner.TrialSpec`, has the
executor run the whole batch (spread over its hosts), and tells the strategy each value in the
order asked. A batch may hold several arms at once: a strategy given several hosts asks one
arm per host (the driver pins the i-th item to the i-th host with ``per_host``), and is told each
value with the host it was measured on (``tell(item, value, block=host)``) where its ``tell``
takes a ``block``: its model then learns each host's level and compares arms within hosts.

Nothing here touches hosts or the store directly: an executor is anything with
``run_batch(specs, per_host=False) -> results``, which is what lets the unit tests drive real
strategies against a table of values.
"""
from __future__ import annotations

import inspect
import random
from typing import Callable, Hashable, Iterable, Protocol, Sequence

from ..model import Arm, TrialResult
from ..runner import TrialSpec


class Batches(Protocol):
    """What :func:`drive` needs of a strategy (the ask/tell protocol of ``bisect_lab.strategies``)."""

    @property
    def done(self) -> bool: ...
    def ask(self) -> Sequence[Hashable]: ...
    def tell(self, item, value: float | None) -> None: ...   # may also take block=host


class Runs(Protocol):
    """What :func:`drive` needs of an executor (``bisect_lab.runner.Executor``)."""

    def run_batch(self, specs: list[TrialSpec], *, per_host: bool = False) -> list[TrialResult]: ...


def metric_of(metric: str) -> Callable[[TrialResult], float | None]:
    """The value a strategy is told for a trial: the metric of a successful trial, else None
    (a failed trial counts against the budget but is never a measurement)."""
    def value(r: TrialResult) -> float | None:
        return r.metrics.get(metric) if r.ok else None
    return value


def drive(strategy: Batches, executor: Runs, spec_of: Callable[[object], TrialSpec], *,
          value_of: Callable[[TrialResult], float | None],
          on_result: Callable[[object, TrialResult], None] | None = None,
          before_batch: Callable[[Sequence], None] | None = None,
          after_batch: Callable[[], None] | None = None, per_host: bool = False) -> int:
    """Run ``strategy`` to its end on ``executor``; returns the number of trials run or replayed.

    ``spec_of(item)``: the trial an asked item means; ``value_of(result)``: what the strategy is
    told; ``on_result(item, result)``: every result, before it is told (untestable commits are
    noted there); ``before_batch(batch)`` / ``after_batch()``: progress and planning lines;
    ``per_host``: pin the i-th spec of a batch to the i-th host (a schedule that gives every host
    the same arms)."""
    n = 0
    blocked = takes_block(strategy)
    while not strategy.done:
        batch = list(strategy.ask())
        if not batch:
            break
        if before_batch:
            before_batch(batch)
        results = executor.run_batch([spec_of(item) for item in batch], per_host=per_host)
        for item, r in zip(batch, results):
            if on_result:
                on_result(item, r)
            if blocked:
                strategy.tell(item, value_of(r), block=r.host)
            else:
                strategy.tell(item, value_of(r))
        n += len(results)
        if after_batch:
            after_batch()
    return n


def takes_block(strategy) -> bool:
    """Does ``strategy.tell`` take ``block=`` (the host a value was measured on)?"""
    try:
        return "block" in inspect.signature(strategy.tell).parameters
    except (TypeError, ValueError):
        return False


def balanced_order(arms: list[Arm], repeat: int, seed: int) -> list[Arm]:
    """``repeat`` rounds; each round holds every arm once. Rounds go in pairs: a seeded random
    order, then the same reversed (ABBA: a drift within a host then moves every arm's mean alike,
    instead of favouring the arms that happened to come first in every round)."""
    rng = random.Random(seed)
    order: list[Arm] = []
    rnd: list[Arm] = []
    for r in range(repeat):
        if r % 2 == 0:
            rnd = list(arms)
            rng.shuffle(rnd)
        else:
            rnd = rnd[::-1]
        order.extend(rnd)
    return order


class BalancedRounds:
    """The fixed schedule of ``run``: ``warmup + repeat`` rounds, each holding every arm once per
    host in a seeded random order (drift of the machine spreads over all arms instead of biasing
    one). Its items are ``(arm, tag)``; warmup rounds carry the tag ``"warmup"`` (stored, never
    judged). It ignores the values it is told: the schedule is decided up front."""

    def __init__(self, arms: Iterable[Arm], *, repeat: int, warmup: int = 0, seed: int = 0, hosts: int = 1,
                 tag: str | None = None):
        arms = list(arms)
        self.per_round = len(arms) * max(1, hosts)
        order = balanced_order(arms, warmup + repeat, seed)
        self.items = [(arm, "warmup" if i < warmup * len(arms) else tag)
                      for i, arm in enumerate(order) for _ in range(max(1, hosts))]
        self._next = 0
        self._asked: list = []

    @property
    def total(self) -> int:
        return len(self.items)

    @property
    def done(self) -> bool:
        return self._next >= len(self.items) and not self._asked

    def ask(self) -> list:
        if not self._asked:
            self._asked = self.items[self._next:self._next + self.per_round]
            self._next += len(self._asked)
        return list(self._asked)

    def tell(self, item, value) -> None:
        if self._asked:
            self._asked.pop(0)
