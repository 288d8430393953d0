"""Attribution in stages: name what explains most of the regression, then attribute what is left.

:class:`~bisect_lab.strategies.attribution.AttributionStrategy` searches hypotheses of one culprit
or one pair. A regression made of a single culprit *plus* an interaction (the story: a patch that
knocks verify off its fast path, and an env-gated patch that only hurts with its variable set) is
then explained by its largest part alone. This wrapper checks, once a stage has named culprits C,
whether "good plus C" is really as bad as "bad". If it is not (a residual regression remains),
a new stage attributes the residual among the remaining factors, with "good plus C" as its good
arm, seeded with every measurement already made inside its space. The answer is the union of the
stages' culprits, with shares of the whole regression.

Bursts of host contention are met twice: as each reading comes in (``staged_reference``: a reading
far below both references waits for the good arm's next reading) and before the answer names its
culprits (``staged_bursts``: adjacent pairs).

Pure and seeded like every strategy: every decision is a function of the told observations, so a
campaign resumes by replaying them.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Iterable

import numpy as np

from .. import stats
from ..verdicts import AttributionVerdict
from .attribution import AttributionStrategy
from .decomposition import loglinear_effects, reference_contrast, reference_ratio, shares_of_regression
from .base import Observation, deblock, drive, host_warnings
from .attribution_fit import stage_misfits
from .hypotheses import EXTENDED_RHO_GRID
from .staged_bursts import BurstGuard
from .staged_reference import ReferenceWatch
from .staged_effects import StructuredEffects
from .staged_small import SmallEffectRule
from .staged_residual import ResidualCheck

# Of the budget left, what a stage may use when another stage may follow: up to STAGE_SHARE, but it
# hands over at STAGE_SOFT_SHARE when it is already sure of some factor (the residual stage then
# checks them). A hard 60% cut made a lone 2% culprit run out of budget in 15% of runs.
STAGE_SHARE = 0.85
STAGE_SOFT_SHARE = 0.6
# ... and at most this many trials (earlier still when its readings fit none of its hypotheses:
# attribution_fit.py); two-factor patterns that settle in one stage take up to about 100.
STAGE_SOFT_TRIALS = 100
DECOMPOSE_REPEATS = 2     # "good plus one culprit" measurements that let the joint re-fit tell pairs apart
DECOMPOSE_MAX = 4         # ... for at most this many culprits (2 x 4 trials)
# A residual stage whose own gate is still undecided after this many trials of its own ends (the
# residual reported as unattributed): heavy tails had made an A/A residual stage run to the budget.
RESIDUAL_PATIENCE = 40
SURE = 0.99               # posterior probability of involvement that an unsettled stage may name
_BUDGET_WARNINGS = ("budget ran out before one explanation was clear", "budget of ")


class StagedAttribution(ResidualCheck, ReferenceWatch, BurstGuard, StructuredEffects, SmallEffectRule):
    """Ask/tell attribution that peels culprits off stage by stage (see module docstring).

    ``thorough=True`` (the command line's ``--strategy thorough``) trades trials for completeness:
    every answer of one culprit is checked for a residual with fresh readings (by default only
    when the stage's own readings hint at one), and each stage also considers a culprit beside one
    four times stronger (``EXTENDED_RHO_GRID``). A 20% and a 5% culprit are then named in full in
    93% of simulated runs instead of about 60%, at about twice the trials for a lone large culprit
    (docs/attribution-history.md, "Seventh stop").
    """

    name = "staged-attribution"

    def __init__(self, factors: Iterable[str], *, higher_is_better: bool = True, seed: int = 0,
                 max_trials: int = 400, min_effect: float = 0.02, alpha: float = 0.05,
                 max_stages: int = 2, thorough: bool = False, robust: bool = True, hosts: int = 1,
                 misfit_handover: bool = True, structure: bool = True, **kw):
        self.factors = tuple(factors)
        self.structure = bool(structure)    # False: effects as before the answer's structure was chosen
        # several hosts: each stage asks one arm per host at a time, chosen by joint information
        self.hosts = max(1, int(hosts))
        if self.hosts > 1:
            kw.setdefault("batch_size", self.hosts)
            kw["hosts"] = self.hosts
        # robust=False: today's rules before robust noise handling (a Gaussian gate, and a stage that
        # handed over unconfirmed still naming what it was sure of), kept for the benchmark's side by side
        self.robust = bool(robust)
        kw["robust"] = self.robust
        self.misfit_handover = bool(misfit_handover)    # False: hand over at the soft limit only
        self.thorough = bool(thorough)
        if self.thorough:
            kw.setdefault("rhos", EXTENDED_RHO_GRID)
            self.name = "staged-attribution (thorough)"
        self.higher_is_better = higher_is_better
        self.seed = seed
        self.max_trials = int(max_trials)
        self.min_effect = float(min_effect)
        self.alpha = float(alpha)
        self.max_stages = max(1, int(max_stages))
        self.kw = kw
        self.observations: list[Observation] = []
        self._told: list[Observation] = []          # as told: raw values, with their hosts
        self.stages: list[tuple[frozenset[str], AttributionStrategy]] = []
        self.verdicts: list[AttributionVerdict] = []
        self.notes: list[str] = []
        self._pending: list[frozenset[str]] = []
        self._stalled: set[int] = set()       # residual stages ended by RESIDUAL_PATIENCE
        self._ended: list[int] = []           # trials so far when each stage's verdict was taken
        self._final: AttributionVerdict | None = None
        self._unconfirmed: set[str] = set()   # culprits of a stage that handed over unconfirmed
        self._misfit_handover = False         # the first stage handed over on a misfit, not its share
        self._residual_init()
        self._ref_init()
        self._start(frozenset())

    # ------------------------------------------------------------------ protocol
    @property
    def _final(self) -> AttributionVerdict | None:
        return self._answer

    @_final.setter
    def _final(self, v: AttributionVerdict | None) -> None:
        # the answer, once ready, in the structure its measured arms choose (staged_effects.py),
        # less any culprit whose own effect is confidently below min_effect (staged_small.py)
        self._answer = None if v is None else self._without_small(self._with_structure(v))

    @property
    def trials(self) -> int:
        return len(self.observations) + self._ref_held()     # held burst readings were run too

    @property
    def done(self) -> bool:
        return self._final is not None

    def ask(self) -> list[frozenset[str]]:
        ref = self._ref_asks() if self._final is None else None
        if ref:
            return ref               # a burst suspected: the reference arm tells (staged_reference)
        if self._pending:
            return list(self._pending)
        while self._final is None:
            base, stage = self.stages[-1]
            if not stage.done and self._hand_over(stage):
                stage.max_trials = stage.trials          # ends the stage: budget spent
                if len(self.stages) > 1:
                    self._stalled.add(len(self.stages) - 1)
            if not stage.done:
                batch = stage.ask()
                if batch:
                    self._pending = [base | a for a in batch]
                    return list(self._pending)
                continue               # the stage just finished: decide what comes next
            extra = self._after_stage()
            if extra:
                self._pending = extra
                return list(extra)
        return []

    def tell(self, active, value: float | None, block=None) -> None:
        """One reading; ``block``: the host it was measured on (readings are compared within
        hosts: a host's level is learned from the arms every host measures, never read as an effect)."""
        active = frozenset(active)
        if value is not None and (not np.isfinite(value) or value <= 0):
            value = None
        # a reading far below both references waits for the reference arm's next reading
        for seq, a, v, b in self._ref_filter(active, value, block):
            self._take(seq, a, v, b)

    def _take(self, seq: int, active: frozenset, value: float | None, block) -> None:
        """Take one reading in: the observations, and the current stage when it is in its space."""
        if active in self._pending:
            self._pending.remove(active)
        self._seq.append(seq)
        self._told.append(Observation(len(self._told), active, value, block))
        if len({o.block for o in self._told if o.ok}) > 1:
            self.observations = deblock(self._told)
        else:
            self.observations.append(self._told[-1])
        base, stage = self.stages[-1]
        if active >= base and not stage.done:
            stage.trial_numbers.append(seq)
            stage.tell(active - base, value, block)

    def verdict(self) -> AttributionVerdict:
        v = self._final if self._final is not None else self._combine(provisional=True)
        # Asked before the end (progress display): the current best combination, provisional.
        hosts = host_warnings(self._told) + self._ref_lines()
        if hosts:
            v = replace(v, warnings=tuple(dict.fromkeys(tuple(v.warnings) + tuple(hosts))))
        if self._ref_bursts:
            v = replace(v, extra=dict(v.extra or {}, bursts=[dict(b) for b in self._ref_bursts]))
        return v

    def plan_estimate(self):
        """The first stage's planning estimate: good against bad, at the noise seen so far."""
        return self.stages[0][1].plan_estimate()

    def estimated_total(self) -> int:
        if self.done:
            return self.trials
        base, stage = self.stages[-1]
        est = getattr(stage, "estimated_total", None)
        inside = stage.trials
        total = self.trials - inside + (est() if callable(est) else stage.max_trials)
        # after a stage, the residual check and the decomposition still measure: at least one more
        # (the progress line read "[71/70]" through a residual check)
        return min(self.max_trials, max(total, self.trials + max(1, len(self._pending))))

    # ------------------------------------------------------------------ stages
    def _start(self, base: frozenset[str]) -> None:
        remaining = [f for f in self.factors if f not in base]
        left = self.max_trials - self.trials
        # A stage that cannot settle must leave room for the next one.
        last = len(self.stages) + 1 >= self.max_stages
        budget = left if last else max(1, math.ceil(STAGE_SHARE * left))
        seeded = [o for o in self.observations if o.active >= base]
        self._seeded = len(seeded)
        self._soft_limit = (None if last else
                            len(seeded) + max(1, min(math.ceil(STAGE_SOFT_SHARE * left), STAGE_SOFT_TRIALS)))
        stage = AttributionStrategy(remaining, higher_is_better=self.higher_is_better,
                                    seed=self.seed + 7919 * len(self.stages),
                                    max_trials=budget + len(seeded), min_effect=self.min_effect,
                                    alpha=self.alpha, futility_trials=self.max_trials, **self.kw)
        stage.trial_numbers = []
        for o in seeded:                        # what was measured inside this stage's space counts
            stage.trial_numbers.append(self._seq[o.index])
            told = self._told[o.index]          # as measured: the stage fits the host levels itself
            stage.tell(o.active - base, told.value, told.block)
        self.stages.append((base, stage))

    def _hand_over(self, stage: AttributionStrategy) -> bool:
        """Past its soft share, the first stage hands over as soon as it is sure of some factor;
        a residual stage ends when its gate has not seen a regression in RESIDUAL_PATIENCE trials."""
        if len(self.stages) > 1:
            own = stage.trials - self._seeded
            if own >= RESIDUAL_PATIENCE and stage.gate_decision not in ("regression", "no-regression"):
                return True
            # a residual the robust gate does confirm but no factor explains (heavy tails that fooled
            # the residual check): as unattributed after STAGE_SOFT_TRIALS, not at the budget
            post = stage.posterior
            return (self.robust and own >= STAGE_SOFT_TRIALS and post is not None
                    and float(post.factor_marginals().max()) < SURE)
        if self._soft_limit is None or len(self.stages) != 1 or (
                stage.trials < self._soft_limit and not (self.robust and self.misfit_handover)):
            return False
        if self.robust and not stage.regression_confirmed:
            # with no confirmed regression there is nothing to peel: handing over had named, at
            # posterior 0.99, whatever a stall or a heavy-tail draw had made look like a culprit
            return False
        post = stage.posterior
        if post is None or float(post.factor_marginals().max()) < SURE:
            return False
        # before the soft limit only when no one-stage hypothesis fits what was measured
        at_limit = stage.trials >= self._soft_limit
        if not (at_limit or stage_misfits(stage)) or not self._sure_now(stage):
            return False
        self._misfit_handover = not at_limit      # what the answer's note says of this stage
        return True

    def _sure_now(self, stage: AttributionStrategy) -> bool:
        """The hand-over's test again on every reading told, as the stage's verdict will read them.

        The stage's posterior and gate are those of its last ask, a batch behind. A 3-way AND had
        handed over at 0.993 on that posterior while the verdict, with one reading more, put the
        factor at 0.988: the stage then named nothing, took the rest of the budget with no way to
        hand over again, and ran to 400 trials.
        """
        gate, post = stage.judged_now()
        if post is None or (self.robust and (gate is None or gate.decision != "regression")):
            return False
        return float(post.factor_marginals().max()) >= SURE

    def _named(self, v: AttributionVerdict, stage: int | None = None) -> list[str]:
        """What a stage names: its confirmed culprits; the first stage, when it ran out of budget,
        may also name the factors it is sure of, because a residual stage then checks them.
        The last stage has no such check after it: only confirmed culprits count there."""
        if v.status == "culprits":
            return list(v.culprits)
        stage = len(self.verdicts) - 1 if stage is None else stage
        if v.status == "inconclusive" and stage == 0 and self.max_stages > 1:
            if self.robust and (v.extra or {}).get("gate") != "regression":
                return []          # no confirmed regression: candidates at most, never culprits
            return sorted(f for f, p in v.candidates if p >= SURE)
        return []

    def _values(self, arm: frozenset[str], since: int = 0) -> list[float]:
        return [o.value for o in self.observations[since:] if o.ok and o.active == arm]

    def _after_stage(self) -> list[frozenset[str]]:
        """The current stage is done: finish, measure the residual check, or start a new stage."""
        base, stage = self.stages[-1]
        if len(self.verdicts) < len(self.stages):
            self.verdicts.append(stage.verdict())
            self._ended.append(self.trials)
        v = self.verdicts[-1]
        stage_named = self._named(v)
        if (not stage_named and len(self.stages) == 1 and v.status == "inconclusive"
                and not stage._finished and stage.max_trials < self.max_trials):
            # the first stage stopped at its share of the budget, sure of nothing: there is no
            # residual to keep trials for, so it gets the rest (15% of a 2% culprit's budget was
            # left unused)
            stage.max_trials = self.max_trials
            # once: with no soft limit it cannot hand over again, so it ends only at the whole
            # budget (a hand-over that then named nothing had looped back here for ever)
            self._soft_limit = None
            self.verdicts.pop()
            self._ended.pop()
            return []
        if not stage_named or len(self.stages) >= self.max_stages:
            note = ("a residual regression could not be attributed within the budget"
                    if len(self.stages) - 1 not in self._stalled else
                    f"'bad' looked worse than 'good plus {', '.join(sorted(base))}' at first, but the "
                    f"residual stage's own comparison stayed undecided for {RESIDUAL_PATIENCE} trials: "
                    "a residual regression, if any, could not be attributed")
            if len(self.stages) > 1 and v.status == "inconclusive" and note not in self.notes:
                self.notes.append(note)
            return self._finish()
        named = base | frozenset(stage_named)
        if named == frozenset(self.factors):
            return self._finish()
        return self._residual_check(v, base, stage_named, named)

    def _finish(self) -> list[frozenset[str]]:
        """Answer, once the culprits of several stages can be told apart (see _decomposition)."""
        return self._decomposition() or self._guarded_answer()  # staged_bursts.py: bursts of contention

    def _decomposition(self) -> list[frozenset[str]]:
        """Arms that let the joint re-fit tell each culprit's own effect from its pairs'.

        Stages search inside their own good arm: the story's stage 1 may name OEA_ENABLE beside
        mla-gather-cast and stage 2 oea-topk, with no arm ever measured that has one of the pair
        without the other. Then "OEA_ENABLE: -12% on its own" would be reported, when the truth is
        "only with oea-topk". "Good plus that culprit alone", measured twice for each culprit,
        separates them (a handful of trials, only after several stages: a single confirmed stage
        measured its own decomposition)."""
        if len(self.verdicts) < 2 and not (self.verdicts and self.verdicts[0].status != "culprits"):
            return []                 # one confirmed stage: its own effects already separate them
        culprits = sorted({c for k, v in enumerate(self.verdicts) for c in self._named(v, k)})
        if not 2 <= len(culprits) <= DECOMPOSE_MAX:
            return []
        left = self.max_trials - self.trials
        want = []
        for c in culprits:
            # failed tries count too: an arm that cannot run is not retried for ever
            tried = sum(1 for o in self.observations if o.active == frozenset((c,)))
            want += [frozenset((c,))] * max(0, DECOMPOSE_REPEATS - tried)
        # interleaved, a culprit at a time, so that drift spreads over all of them
        order = sorted(range(len(want)), key=lambda i: (want[:i].count(want[i]), i))
        return [want[i] for i in order][: max(0, min(2, left))]

    def _contrast(self, obs) -> np.ndarray | None:
        """The whole regression's contrast over ``obs``: bad readings minus good readings."""
        return reference_contrast([o.active for o in obs], frozenset(), frozenset(self.factors))

    def _arm_logs(self) -> dict[frozenset, list[float]]:
        """Each arm's log readings taken in so far."""
        groups: dict[frozenset, list[float]] = {}
        for o in self.observations:
            if o.ok:
                groups.setdefault(o.active, []).append(math.log(o.value))
        return groups

    @staticmethod
    def _arm_spreads(groups: dict) -> list[float]:
        """Robust log-scale spreads of the arms read three times or more."""
        return [stats.robust_sd(v) for v in groups.values() if len(v) >= 3]

    def _noise(self) -> float:
        """Robust log-scale spread of the arms measured more than once (the campaign's noise).

        Median absolute deviations, not standard deviations: one stalled trial in a heavy tail
        must not make a real residual look like noise.
        """
        groups = self._arm_logs()
        mads = self._arm_spreads(groups)
        if mads:
            return float(np.median(mads))
        # no arm measured three times yet (a large culprit found from 2 + 2 references): the pooled
        # standard deviation of the pairs. Zero here had made every reading 2% off "bad" look like
        # a residual and cost a 25% culprit about one trial in three campaigns.
        pairs = [v for v in groups.values() if len(v) >= 2]
        dof = sum(len(v) - 1 for v in pairs)
        if dof:
            return math.sqrt(sum(float(np.var(v, ddof=1)) * (len(v) - 1) for v in pairs) / dof)
        # nothing measured twice (a fast start): the first stage's fitted noise
        post = self.stages[0][1].posterior
        return float(post.levels.sd_good) if post is not None else 0.0

    # ------------------------------------------------------------------ answer
    def _combine(self, provisional: bool = False) -> AttributionVerdict:
        verdicts = list(self.verdicts)
        if len(verdicts) < len(self.stages):          # the current stage has not finished yet
            verdicts.append(self.stages[-1][1].verdict())
        first = verdicts[0]
        stage_named = [self._named(v, k) for k, v in enumerate(verdicts)]
        if provisional or not stage_named[0] or (len(verdicts) == 1 and first.status == "culprits"):
            return replace(first, trials=self.trials, warnings=tuple(first.warnings) + tuple(self.notes),
                           strategy=self.name, factors=self.factors)
        named = [v for v, n in zip(verdicts, stage_named) if n]
        culprits = sorted({c for n in stage_named for c in n})
        handed_over = [k for k, (v, n) in enumerate(zip(verdicts, stage_named)) if n and v.status != "culprits"]
        # named without a confirmation step of their own: the answer's last rule asks their own
        # effect to show (staged_small.py)
        self._unconfirmed = {c for k in handed_over for c in stage_named[k]}
        for k in handed_over:
            who = ", ".join(stage_named[k])
            if k + 1 < len(verdicts):
                note = (f"{who}: named by stage {k + 1} without its own confirmation step (posterior >= "
                        f"{SURE:.2f} when it handed over); stage {k + 2} then attributed what was left")
            else:
                # why the stage stopped short of its confirmation step: its share of the budget,
                # or (the first stage only) readings that no one-stage answer fits
                why = ("handed over before its confirmation step because its readings fit no "
                       "one-stage answer" if k == 0 and self._misfit_handover else
                       "ran out of budget before its confirmation step")
                note = f"{who}: named by a stage that {why} (posterior >= {SURE:.2f})"
                if not self._residual_unsettled:
                    note += "; the residual check (good plus these vs bad) found nothing left to explain"
            if note not in self.notes:
                self.notes.append(note)
        effects = [e for v in named for e in v.effects]
        # Each factor's probability from the latest stage that searched it: a later stage knows
        # the earlier culprits' part and so judges the rest better (stage 1 of the demo may leave
        # a no-op at 0.5 that stage 2, with mla-gather-cast in its good arm, clears).
        candidates: dict[str, float] = {}
        for v in verdicts:
            for name, p in v.candidates:
                candidates[name] = p
        for c in culprits:
            candidates[c] = max(candidates.get(c, 0.0), 0.99)
        # a stage that handed over did so on purpose: its "budget ran out" lines would only mislead.
        # A later stage's lines are about its own arms ("good plus" the earlier culprits against
        # "bad"): they say so, after the notes that explain why that stage ran (the CPU demo printed
        # two "noisy arms" lines with different CVs and no way to tell which pair each was about).
        kept = [[w for w in v.warnings
                 if not ((k in handed_over or k in self._stalled) and w.startswith(_BUDGET_WARNINGS))]
                for k, v in enumerate(verdicts)]
        later = tuple(f"stage {k + 1} ('good plus {', '.join(sorted(self.stages[k][0]))}' vs 'bad'): {w}"
                      for k in range(1, len(kept)) for w in kept[k])
        extra = dict(first.extra)
        extra["stages"] = [{"good_plus": sorted(base), "status": v.status, "culprits": v.culprits,
                            "hypothesis": v.hypothesis,
                            "regression": v.regression.to_dict() if v.regression else None,
                            "ended_after_trials": self._ended[k] if k < len(self._ended) else None}
                           for k, ((base, _), v) in enumerate(zip(self.stages, verdicts))]
        interactions = tuple(i for v in named for i in v.interactions)
        # the stages' own effects have shares of their own regressions (a later stage's good arm is
        # "good plus" the earlier culprits): re-expressed below as shares of the whole
        of_stages = True
        if not effects and len(culprits) == 1:
            # one culprit from a stage that handed over before its own decomposition: its effect
            # on every measurement (a culprit is never reported without one)
            obs = self._kept_obs()
            col = np.array([1.0 if culprits[0] in o.active else 0.0 for o in obs])
            if 0 < col.sum() < len(col) - 1:
                effects = loglinear_effects(np.log([o.value for o in obs]), [col], culprits, ["main"],
                                            alpha=self.alpha, shares_of="references",
                                            whole=self._contrast(obs))
                of_stages = False
        if len(culprits) > 1:
            joint = self._joint(culprits)
            if joint is not None:
                effects, interactions, estimable = joint
                of_stages = False
                # a pattern a confirmed stage named, whose term the joint model cannot estimate
                # from the arms measured (no arm with one member but not the other): keep it
                interactions += tuple(i for v in named if v.status == "culprits" for i in v.interactions
                                      if frozenset(i.factors) not in estimable)
        if of_stages:
            whole = reference_ratio(self._values(frozenset()), self._values(frozenset(self.factors)),
                                    higher_is_better=self.higher_is_better, alpha=self.alpha)
            effects = shares_of_regression(effects, whole, alpha=self.alpha, seed=self.seed + 2)
        return replace(
            first, status="culprits", culprits=culprits, trials=self.trials, effects=tuple(effects),
            interactions=interactions,
            confirmation=tuple(c for v in named for c in v.confirmation),
            confidence=float(np.prod([v.confidence for v in named])),
            hypothesis=" + ".join(v.hypothesis for v in named),
            candidates=tuple(sorted(candidates.items(), key=lambda kv: -kv[1])),
            warnings=tuple(dict.fromkeys(tuple(kept[0]) + tuple(self.notes) + later)), strategy=self.name,
            factors=self.factors, extra=extra)


def attribute_staged(factors, measure: Callable[[frozenset[str]], float | None], higher_is_better: bool = True,
                     seed: int = 0, max_trials: int = 400, **kw) -> AttributionVerdict:
    """:func:`~bisect_lab.strategies.attribution.attribute_one_stage` with residual stages."""
    return drive(StagedAttribution(factors, higher_is_better=higher_is_better, seed=seed,
                                   max_trials=max_trials, **kw), measure)
