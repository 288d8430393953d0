"""Noise-aware bisection over an ordered list of candidates.

Positions ``0 .. n-1`` are in history order; position 0 is the known-good endpoint, position ``n-1``
the known-bad one. The unknown is the change position ``c`` (``1 <= c <= n-1``): positions ``< c``
perform like good, positions ``>= c`` like bad.

Method, in the order it runs (docs/bisection.md has the figures):

1. **Confirm.** Measure both endpoints, alternating in a seeded random order, until a robust Welch
   test on log values says either "bad is worse than good" (go on) or "they differ by less than
   ``min_effect``" (``no-regression``). A noisy 1-vs-1 comparison is the classic way bisection goes
   wrong, so nothing is bisected before this holds.
2. **Posterior.** A distribution over ``c`` and over "no regression of ``min_effect`` or more",
   recomputed from every observation (endpoints included). Noise: normal on log values, with the
   two levels and the scale *integrated out* (flat / Jeffreys priors; the step has a half-normal
   prior either side of ``-min_effect``), so a handful of endpoint samples cannot make it
   overconfident; gross outliers are down-weighted by contaminated-normal EM weights (warm-started
   from the last fit's slow-side outlier calls, so stalls cannot inflate the scale and hide; the
   stall share is learned, see bisection_posterior); a shared
   linear drift, fitted on the endpoint samples only, is removed first. The body of the noise is
   skewed to match the data: its skewness is learned from the residuals (shrunk toward normal) and
   the normal body is swapped for a skew-normal one at the fitted levels and scale of each split.
   One scale per side (and no skew) when the endpoints clearly differ in variance.
3. **Next position.** The one with the largest expected information (mutual information between
   its next measurement and ``c``), from the fitted noise model. A position whose measurement was
   ambiguous keeps the highest information and is simply chosen again: repeats are adaptive, not
   fixed. With ``parallel=k`` each batch size gets the positions of the largest joint information
   (a binary-channel approximation), and the batch grows only while one more position adds at
   least ``PARALLEL_MIN_GAIN`` of what the best single one would; a likely culprit and its
   predecessor are read side by side (the end game).
4. **Endpoints again.** Every ``REMEASURE_EVERY`` trial durations an endpoint is re-measured (drift
   guard; the levels are also the main remaining uncertainty): every ``REMEASURE_EVERY x parallel``
   trials, since drift goes with time, not with the trial count. Also whenever the best split is next
   to an endpoint.
5. **Stop** when one position holds ``confidence`` posterior mass and would still hold
   ``LOO_MASS`` without any one reading of it or of the position before it (``culprit``; a final
   check: if it fails and nothing else is informative, the fragile position is measured again);
   when "no regression" does, or the endpoints alone show a difference below ``min_effect``
   (``no-regression``); when the smallest range holding ``confidence`` cannot be split because its
   inner positions are untestable (``inconclusive``, reason ``untestable``, with the range); or at
   ``max_trials`` (``inconclusive``, reason ``budget``, with the remaining range).

6. **Is the step the whole change?** Before a culprit, the flank test (``bisection_flanks.py``):
   a sequential mixture likelihood ratio of "a second step on one flank" (the positions before
   the step, or from it on) against "none", with readings at the endpoints and next to the step
   while it is undecided. At looks every ``CHECK_EVERY`` trials a bootstrap test of one step
   against a slide or two steps (``bisection_models.py``) opens it too. A second step found ends
   the search: ``gradual`` (a range and its total effect) or ``several`` (each step pinned by a
   sub-bisection), by BIC between a slide and two steps.

7. **Bursts** (``bisection_bursts.py``, one host): a reading far below both levels is held and the
   good endpoint read next; a slow reference means the host is slow (the burst's readings are
   left out, the reference read until it is back), a normal one a lone stall (the reading goes
   back in); a reference slow for ``BURST_MAX_REFS`` readings is a changed machine, its readings a
   block of their own.

Untestable positions (``tell(pos, None)``) are like ``git bisect skip``: never treated as bad, never
proposed again. Everything here is pure and seeded: the same seed and the same sequence of ``tell``
calls give the same decisions, so a campaign resumes by replaying its stored trials.

Code: this module holds the state machine's protocol (``BisectionStrategy``) and the entry point
``bisect_sequence``; its parts are mixins, each in its own module: the confirm step
(``bisection_confirm``), the posterior (``bisection_posterior``), the choice of the next
position (``bisection_search``), the model check (``bisection_check``, fits in
``bisection_models``, the flank test in ``bisection_flanks``), the burst guard (``bisection_bursts``) and the verdict
(``bisection_answer``); the noise model is
``bisection_noise``. ``BisectVerdict`` lives in ``bisect_lab.verdicts``.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..verdicts import BisectVerdict
from .bisection_answer import VerdictBuilder, _replace_trials
from .bisection_bursts import BurstWatch
from .bisection_check import ModelCheck
from .bisection_confirm import MIN_ENDPOINT, ConfirmPhase
from .bisection_flanks import FlankCheck
from .bisection_posterior import DELTA_SCALE, Posterior
from .bisection_search import NextPosition

# The tuning constants, where each part keeps them; importable from here as before the split.
from .bisection_answer import FLAT_T, TOP_MASS, TOP_MAX  # noqa: F401
from .bisection_check import (CHECK_ALPHA_LOOK, CHECK_EVERY, CHECK_FROM, CHECK_REPS,  # noqa: F401
                              MODEL_EXTRA, MODEL_MARGIN, REJECT_T, SECOND_T)
from .bisection_flanks import (FLANK_DELTA, FLANK_MAX, FLANK_MAX_HIGH, FLANK_NULL,  # noqa: F401
                               FLANK_REJECT)
from .bisection_confirm import NULL_MIN_ENDPOINT  # noqa: F401
from .bisection_noise import (NULL_PRIOR, OUT_EPS, OUT_K, SKEW_MAX, SKEW_PRIOR_SD,  # noqa: F401
                              SKEW_SURE, STALL_MADS)
from .bisection_posterior import (DRIFT_PRIOR_SD, EM_ITERS, LOO_MASS, SCALE_PRIOR_N,  # noqa: F401
                                  SEPARATE_P)
from .bisection_search import (END_MASS, END_READS, PARALLEL_MIN_GAIN, RECHECK_MI,  # noqa: F401
                               REMEASURE_EVERY)

__all__ = ["BisectVerdict", "BisectionStrategy", "bisect_sequence"]


class BisectionStrategy(ConfirmPhase, Posterior, NextPosition, ModelCheck, FlankCheck, BurstWatch,
                        VerdictBuilder):
    """Seeded ask/tell state machine for noisy bisection (see the module docstring for the method).

    Parameters: ``n`` positions (>= 2); ``higher_is_better`` for the metric; ``seed``;
    ``max_trials`` budget counting every tell (untestable included); ``confidence`` the posterior
    mass needed to name a culprit; ``min_effect`` the smallest relative regression of interest
    (endpoints closer than that give ``no-regression``); ``parallel`` how many positions may be
    outstanding at once (hosts).

    Protocol: ``ask()`` returns new positions to measure (up to the free slots); measure each once
    and ``tell(position, value)`` (``value=None`` = untestable). ``ask()`` returns ``[]`` only when
    ``done``; if every slot is already outstanding it returns the outstanding positions again. A tell
    for a position that was not asked is accepted as data (replay). Tells after ``done`` are recorded
    in ``trials``/``path`` but do not change the decision.
    """

    def __init__(
        self,
        n: int,
        *,
        higher_is_better: bool = True,
        seed: int = 0,
        max_trials: int = 300,
        confidence: float = 0.95,
        min_effect: float = 0.02,
        parallel: int = 1,
        hosts: int = 1,
    ) -> None:
        if int(n) != n or n < 2:
            raise ValueError(f"n must be an integer >= 2 (good and bad endpoints), got {n!r}")
        if not 0.5 < confidence < 1:
            raise ValueError(f"confidence must be in (0.5, 1), got {confidence!r}")
        if not 0 < min_effect < 1:
            raise ValueError(f"min_effect must be in (0, 1), got {min_effect!r}")
        if max_trials < 2 * MIN_ENDPOINT:
            raise ValueError(f"max_trials must be >= {2 * MIN_ENDPOINT}, got {max_trials!r}")
        if int(parallel) != parallel or parallel < 1:
            raise ValueError(f"parallel must be an integer >= 1, got {parallel!r}")
        self.n = int(n)
        self.higher_is_better = bool(higher_is_better)
        self.seed = int(seed)
        self.max_trials = int(max_trials)
        self.confidence = float(confidence)
        self.min_effect = float(min_effect)
        self.parallel = int(parallel)
        # the driver pins item i of a batch to host i % hosts: the endpoints alternate per host
        self.hosts = max(1, min(int(hosts), self.parallel))
        # Work in u = sign * log(value) so that "good" is always the larger u, and the regression
        # size d = u_good - u_bad > 0 whatever the metric's direction.
        self._sign = 1.0 if higher_is_better else -1.0
        self._d_min = (-math.log(1 - min_effect)) if higher_is_better else math.log(1 + min_effect)
        self._path: list[tuple[int, float | None]] = []
        self._obs_pos: list[int] = []
        self._obs_u: list[float] = []
        self._obs_log: list[float] = []          # as told (log), and the host of each reading
        self._obs_blk: list = []
        self._obs_t: list[int] = []
        self._untestable: set[int] = set()
        self._outstanding: list[int] = []
        self._phase = "confirm"
        self._verdict: BisectVerdict | None = None
        self._last_endpoint_t = 0
        self._params: tuple[float, float, float, float, float] | None = None  # a, b, sg, sb, beta
        self._post: np.ndarray | None = None     # P(c = i), i = 0..n-1 (index 0 always 0)
        self._n_eff = (0.0, 0.0)                 # soft sample counts of the good and bad sides
        self._p_null = 0.0
        self._skew = 0.0                         # learned skewness of the noise (of u)
        self._eps = OUT_EPS                      # learned outlier (stall) share of the readings
        self._frame = (0.0, 0.0, 0.0)            # drift slope, mean trial, centre of the last fit
        self._recheck: int | None = None         # position the final check wants measured again
        self._check_models = True                # off in the sub-bisections of "several"
        self._probe: int | None = None           # position the model check wants measured next
        self._probe_more: list[int] = []         # ... and the further ones of its batch (several hosts)
        self._extra = 0                          # trials spent on the model check
        self._flank_extra = 0                    # ... of them on the flank test (bisection_flanks)
        self._refit_extra = 0                    # ... of them on the refit before `several`
        self._flank: dict | None = None          # the flank test's second step, when it found one
        self._flank_look = False                 # a look rejected one step: the flank test is open
        self._last_check_t = 0
        self._check: dict | None = None
        self._fits = None                        # bisection_models.Fits when one step was rejected
        self._omega: np.ndarray | None = None    # robustness weights of the last fit
        self._steps_todo: list[dict] = []        # several: steps still to pin, in order
        self._steps_done: list[dict] = []
        self._child: BisectionStrategy | None = None
        self._answer: dict = {}                  # range / effect / steps of gradual and several
        self._confirm_obs = 0
        self._replayed = 0                       # readings told before its own (a sub-bisection)
        self._no_more = False                    # budget spent: answer from the data at hand
        self._obs_pathi: list[int] = []          # index into _path of each observation
        self._u_fit: np.ndarray | None = None
        # Scale of the half-normal prior on the step (log units): regressions of interest are a
        # few percent to tens of percent.
        self._delta_scale = max(DELTA_SCALE, 5 * self._d_min)
        self._burst_init()

    # ------------------------------------------------------------------ public protocol
    @property
    def done(self) -> bool:
        """True once a verdict is reached (or the budget is spent)."""
        return self._verdict is not None

    @property
    def trials(self) -> int:
        """Number of tells so far (untestable ones included)."""
        return len(self._path)

    @property
    def posterior(self) -> np.ndarray | None:
        """Copy of P(change position = i) for i in 0..n-1, or None before the confirm step ends.
        Sums to 1 - ``p_no_regression``."""
        return None if self._post is None else self._post.copy()

    @property
    def p_no_regression(self) -> float:
        """Posterior probability of no regression of ``min_effect`` or more (0 before bisecting)."""
        return self._p_null

    def ask(self) -> list[int]:
        """Next positions to measure (at most ``parallel`` outstanding); [] only when done."""
        if self.done:
            return []
        free = self.parallel - len(self._outstanding)
        if free <= 0:
            return list(self._outstanding)
        if self._burst_active() and self._phase in ("confirm", "bisect", "models", "refit"):
            new = self._ask_reference()      # a burst suspected: the reference tells (bisection_bursts)
            if not new:
                return list(self._outstanding)
        elif self._phase == "confirm":
            new = self._ask_confirm(free)
        elif self._phase == "steps":
            new = self._ask_child(free)
        elif self._probe is not None:
            new = [] if self._probe in self._outstanding else [self._probe]
            new += self._probe_more[:max(0, free - len(new))]
            self._probe, self._probe_more = None, []
            if not new:
                return list(self._outstanding)
        else:
            new = self._ask_bisect(free)
        self._outstanding.extend(new)
        return list(new)

    def tell(self, position: int, value: float | None, block=None) -> None:
        """Record one trial of ``position``: its metric value, or None if it was untestable.
        ``block``: the host it was measured on; with several, each host's level is learned from
        the positions several hosts measured (the endpoints first) and taken out of every reading."""
        if isinstance(position, bool) or int(position) != position or not 0 <= position < self.n:
            raise ValueError(f"position must be an integer in 0..{self.n - 1}, got {position!r}")
        position = int(position)
        if value is not None:
            value = float(value)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"value for position {position} must be a finite positive number "
                    f"(effects are ratios), got {value!r}; pass None if it was untestable"
                )
        if position in self._outstanding:
            self._outstanding.remove(position)
        self._path.append((position, value))
        if self.done:
            self._verdict = _replace_trials(self._verdict, self._path)
            return
        t = len(self._path)
        if value is None:
            self._untestable.add(position)
            if position in (0, self.n - 1):
                self._finish("inconclusive", reason="endpoint-untestable")
                return
        else:
            self._obs_pos.append(position)
            self._obs_u.append(self._sign * math.log(value))
            self._obs_log.append(math.log(value))
            self._obs_blk.append(self._block_of(block))
            if len(set(self._obs_blk)) > 1:
                self._deblock()
            self._obs_t.append(t)
            self._obs_pathi.append(t - 1)
            if position in (0, self.n - 1):
                self._last_endpoint_t = t
        # A probe the model check set at an earlier reading and no ask() took (a resume tells the
        # stored trials without asking; several hosts may tell twice between asks) is stale: every
        # update below that wants one sets it anew from the readings, so the same tells give the
        # same next position whether or not ask() ran between them.
        self._probe, self._probe_more = None, []
        held = value is not None and self._burst_tell()
        if not held and value is not None and position in (0, self.n - 1):
            self._machine_watch()            # a changed machine re-blocks the readings the refit reads
        if held:
            pass                             # held out as a suspected burst: nothing to refit
        elif self._phase == "confirm":
            self._update_confirm()
        elif self._phase == "steps":
            if value is not None and len(set(self._obs_blk)) > 1:
                value = math.exp(self._sign * self._obs_u[-1])     # host level taken out
            self._tell_child(position, value)
        elif self._phase == "models":
            self._update_models()
        elif self._phase == "refit":
            self._finish_several()
        else:
            self._update_bisect()
        if not self.done and len(self._path) >= self.max_trials:
            self._out_of_budget()

    def _deblock(self) -> None:
        """Refit the host offsets on every reading and correct every stored one (``blocks``)."""
        from .blocks import host_offsets
        off = host_offsets(self._block_arms(), self._obs_blk, self._obs_log)
        self._obs_u[:] = [self._sign * (v - off.get(b, 0.0)) for v, b in zip(self._obs_log, self._obs_blk)]

    def _block_arms(self) -> list:
        """What each reading is of, for the host-offset fit: its side ('good' / 'bad') where the
        posterior is sure of it (the endpoints always), else its position. A position read on one
        host alone then still tells that host's level (it sits on a side whose level the other
        hosts read too), so the offsets rest on every sure reading, not on the endpoints alone.
        Only on the hosts whose level the shared positions already tie to the first host's: a host
        tied by sure readings alone would fit its offset to them (a wrong side then reinforces
        itself), so its readings keep their positions, as before."""
        if self._post is None or float(self._post.sum()) <= 0:
            return list(self._obs_pos)
        w = np.cumsum(self._post) / float(self._post.sum())        # P(position reads bad)
        last = self.n - 1
        from .blocks import linked_blocks
        tied = linked_blocks(self._obs_pos, self._obs_blk)
        return [p if b not in tied else
                "good" if p == 0 or (p < last and w[p] <= 1 - SKEW_SURE) else
                "bad" if p == last or w[p] >= SKEW_SURE else p
                for p, b in zip(self._obs_pos, self._obs_blk)]

    def host_warnings(self) -> list[str]:
        """The hosts whose level clearly differs from the first one's (``blocks.level_warnings``),
        fitted as the offsets taken out are (on the posterior's sure sides, ``_block_arms``)."""
        from .blocks import level_warnings
        return level_warnings(self._block_arms(), self._obs_blk, [math.exp(v) for v in self._obs_log])

    def verdict(self) -> BisectVerdict:
        """The verdict; before ``done`` a provisional ``inconclusive`` one describing the state."""
        if self._verdict is not None:
            return self._verdict
        return self._make_verdict("inconclusive", reason="running")

    def _out_of_budget(self) -> None:
        """The budget is spent: answer from the data at hand (no more probes or sub-bisections)."""
        self._no_more = True
        self._probe, self._probe_more = None, []
        if self._phase == "steps":
            if self._child is not None:
                child, self._child = self._child, None
                self._child_done(self._steps_todo[0], child)
            self._next_child()
        elif self._phase == "models":
            self._update_models()
        elif self._phase == "refit":
            self._finish_several()
        elif self._phase == "bisect" and self._check_models and self._omega is not None:
            self._model_check(final=True)
        if not self.done:
            self._finish("inconclusive", reason="budget")


# --------------------------------------------------------------------------- library entry
def bisect_sequence(
    n: int,
    measure: Callable[[int], float | None],
    *,
    higher_is_better: bool = True,
    seed: int = 0,
    max_trials: int = 300,
    confidence: float = 0.95,
    min_effect: float = 0.02,
) -> BisectVerdict:
    """Find the first bad position among ``n`` ordered candidates by noisy bisection.

    ``measure(index) -> float | None`` runs one trial of candidate ``index`` (0 = known good,
    ``n-1`` = known bad) and returns its metric, or None when the candidate cannot be tested (build
    failure, patch does not apply). ``verdict.trials`` equals the number of ``measure`` calls.
    """
    strategy = BisectionStrategy(
        n,
        higher_is_better=higher_is_better,
        seed=seed,
        max_trials=max_trials,
        confidence=confidence,
        min_effect=min_effect,
        parallel=1,
    )
    while not strategy.done:
        for position in strategy.ask():
            strategy.tell(position, measure(position))
    return strategy.verdict()
