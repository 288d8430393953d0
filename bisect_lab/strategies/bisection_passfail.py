"""Bisection on exact pass/fail verdicts, as ``git bisect run`` does (layer 2, pure).

Positions ``0 .. n-1`` run from the good endpoint to the bad one. A verdict is exact, so no
posterior is needed: both endpoints are checked first (a good endpoint that fails, or a bad one
that passes, is said instead of bisecting a false premise), then the midpoint of what is still
open is asked, one position at a time; a skipped position (``None``) is never asked again and the
testable position nearest the middle is asked instead. The answer is the first bad position, or,
when only skipped positions stand between the last good and the first bad one, that range.

Told values: :data:`GOOD` or :data:`BAD`; ``None`` is a skip (an untestable position).
The ask/tell protocol is that of the noisy bisection, and the verdict is a
:class:`~bisect_lab.verdicts.BisectVerdict`, so a campaign stores and reports it the same way.
"""
from __future__ import annotations

from ..verdicts import BisectVerdict

GOOD = 1.0
BAD = 2.0


class PassFailBisection:
    """Binary search over ``n`` positions (``n >= 2``) from exact good / bad / skip verdicts."""

    def __init__(self, n: int, *, max_trials: int | None = None, check_ends: bool = True):
        if n < 2:
            raise ValueError("a bisection needs at least the two endpoints")
        self.n = n
        self.max_trials = max_trials
        self.lo = 0                      # last position known good
        self.hi = n - 1                  # first position known bad
        self.skipped: set[int] = set()
        self.path: list[tuple[int, float | None]] = []
        # ``check_ends=False`` takes the ends as the user declared them (git bisect's manual mode)
        self._endpoint: dict[int, float | None] = {} if check_ends else {0: GOOD, n - 1: BAD}
        self._pending: list[int] = []
        self._stop: str | None = None    # the reason it stopped before converging

    # -- the protocol
    @property
    def done(self) -> bool:
        if self._pending:
            return False
        if self._stop is not None:
            return True
        if self.max_trials is not None and len(self.path) >= self.max_trials:
            return True
        return len(self._endpoint) == 2 and self._next() is None

    def ask(self) -> list[int]:
        if self._pending:
            return list(self._pending)
        if len(self._endpoint) < 2:
            self._pending = [p for p in (0, self.n - 1) if p not in self._endpoint]
        else:
            nxt = self._next()
            self._pending = [nxt] if nxt is not None and not self.done else []
        return list(self._pending)

    def tell(self, pos: int, value: float | None) -> None:
        if pos in self._pending:
            self._pending.remove(pos)
        self.path.append((pos, value))
        if pos in (0, self.n - 1) and pos not in self._endpoint:
            self._endpoint[pos] = value
            if len(self._endpoint) == 2:
                self._check_endpoints()
            return
        if value is None:
            self.skipped.add(pos)
        elif value == BAD:
            self.hi = min(self.hi, pos)
        else:
            self.lo = max(self.lo, pos)

    def _check_endpoints(self) -> None:
        good, bad = self._endpoint[0], self._endpoint[self.n - 1]
        if good is None or bad is None:
            self._stop = "endpoint-untestable"
        elif bad == GOOD:
            self._stop = "bad-passes"
        elif good == BAD:
            self._stop = "good-fails"

    def _next(self) -> int | None:
        """The open position nearest the middle of (lo, hi), skipped ones left out."""
        open_ = [p for p in range(self.lo + 1, self.hi) if p not in self.skipped]
        if not open_:
            return None
        mid = (self.lo + self.hi) / 2
        return min(open_, key=lambda p: (abs(p - mid), p))

    # -- the answer
    def verdict(self) -> BisectVerdict:
        common = dict(trials=len(self.path), effect=None, effect_ci=None, confidence=1.0,
                      path=tuple(self.path), n=self.n)
        if self._stop == "bad-passes":
            return BisectVerdict(status="no-regression", index=None, mass=None, range=None, range_mass=None,
                                 reason="bad-passes", **common)
        if self._stop is not None:
            return BisectVerdict(status="inconclusive", index=None, mass=None, range=None, range_mass=None,
                                 reason=self._stop, **common)
        if len(self._endpoint) < 2 or self._next() is not None:
            return BisectVerdict(status="inconclusive", index=None, mass=None, range=(self.lo + 1, self.hi),
                                 range_mass=1.0, reason="budget" if len(self._endpoint) == 2 else "running",
                                 **common)
        if self.hi - self.lo == 1:
            return BisectVerdict(status="culprit", index=self.hi, mass=1.0, range=(self.hi, self.hi),
                                 range_mass=1.0, reason="exact", **common)
        # only skipped commits stand between the last good and the first bad one (git: "there are
        # only 'skip'ped commits left to test"): the first bad commit is one of them or hi
        return BisectVerdict(status="inconclusive", index=None, mass=None, range=(self.lo + 1, self.hi),
                             range_mass=1.0, reason="untestable", **common)
