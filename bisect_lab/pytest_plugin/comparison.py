"""What the ``bisect_lab`` fixture hands back: the trials of some arms (:class:`ArmRuns`) and the
statistical comparison of two arms with its assertions (:class:`PerfComparison`)."""
from __future__ import annotations

import pytest

from .options import UNKNOWN_MODES

class ArmRuns:
    """What :meth:`BisectLab.run` returns: per-arm values and the campaign's summary
    (a :class:`bisect_lab.results.RunResult`; read by key as the dict it was before)."""

    def __init__(self, campaign: str, summary, values: dict[str, list[float]], failures: dict[str, list[str]]):
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
        return f"ArmRuns({self.campaign}, {', '.join(f'{a!r}: n={len(v)}' for a, v in self._values.items())})"


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
        from ..stats.compare import compare
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
        """One line for people: "'b' is 25.1% slower than 'a' (tok: 95% CI 22.0% .. 28.3% slower, p=1e-05, n=5/5)"."""
        if self.stats is None:
            return (f"{self.b!r} vs {self.a!r}: not enough successful trials to compare "
                    f"(n={len(self.a_values)}/{len(self.b_values)})")
        from ..summaries import speed_interval
        s = self.slowdown
        word = "slower" if s > 0 else "faster"
        conf = f"{(1 - self.alpha) * 100:.3g}"
        # the interval in the same words ("22.0% .. 28.3% slower", "3.0% slower .. 1.0% faster")
        interval = speed_interval(self.ci_low, self.ci_high, self.higher_is_better)
        return (f"{self.b!r} is {abs(s) * 100:.1f}% {word} than {self.a!r} ({self.metric}: {conf}% CI {interval}, "
                f"p={self.p_value:.2g}, n={len(self.a_values)}/{len(self.b_values)}"
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
        is *unknown* (more rounds first, if allowed; then fail, skip or xfail, as ``unknown`` says).
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
