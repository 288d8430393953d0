"""``attribute``: which factors (patches, env vars) explain bad vs good (layer 5).

The same staged strategy as the library's ``bisect_lab.attribute_factors``, wired to real trials
through the one loop (:func:`~bisect_lab.campaigns.drive.drive`).
"""
from __future__ import annotations

from ..arms import arm_for_active, factors_between, parse_arm
from ..errors import UsageError
from ..model import ATTRIBUTION_STRATEGIES, Arm
from ..results import AttributionResult
from ..runner import TrialSpec
from .drive import drive, metric_of
from .noise_prior import PriorNotes, prior_status, stored_noise_prior
from .planning import PlanProgress, stored_plan
from .session import Session, resume_option

SCREENING_REPEATS = 2      # rounds of a screening design unless --repeats says otherwise


def attribute(session: Session, good_spec: str, bad_spec: str, *, resume: str | bool | None = None,
              max_trials: int | None = None, strategy: str = "adaptive",
              repeats: int | None = None, noise_prior: bool = True) -> AttributionResult:
    """Find which factors (patches, env vars) explain the difference between two arms.

    ``strategy``: "adaptive" (the default: staged Bayesian attribution, stops as soon as the answer
    is clear), "thorough" (the same, checking every answer for a culprit left over: about twice the
    trials for a lone large culprit, a small second culprit found far more often) or "screening" (a
    fixed factorial / Plackett-Burman design, ``repeats`` rounds). ``noise_prior``: give the
    adaptive search the noise of earlier campaigns of this experiment on this host
    (``campaigns.noise_prior``; the strategy checks it against today's readings and drops it when
    they disagree); False: today's readings alone (``--no-prior``)."""
    from ..strategies.screening import ScreeningStrategy
    from ..strategies.staged import StagedAttribution
    exp = session.experiment
    good = parse_arm(good_spec, exp.patchset)
    bad = parse_arm(bad_spec, exp.patchset)
    factors = factors_between(good, bad)
    if not factors:
        raise UsageError(f"the good and bad arms are the same configuration ({good.spec!r}): nothing to attribute")
    d = exp.design
    if strategy not in ATTRIBUTION_STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r}: one of {', '.join(ATTRIBUTION_STRATEGIES)}")
    # a resume keeps the campaign's budget (and a screening design's rounds) unless raised
    params = {"good": good.spec, "bad": bad.spec, "factors": factors, "seed": d.seed, "max_trials": max_trials,
              "min_effect": d.min_effect, "alpha": d.alpha}
    grow = {"max_trials": d.max_trials}
    if strategy != "adaptive":            # campaigns stored before --strategy existed still resume
        params.update(strategy=strategy)
    if strategy == "screening":
        params.update(repeats=repeats)
        grow["repeats"] = SCREENING_REPEATS
    # a default campaign may go on as a thorough one (its readings replayed into the thorough search)
    session.open("attribute", params, resume, grow=grow, upgrades={"strategy": (None, "thorough", "adaptive")})
    budget = params["max_trials"]

    def body() -> AttributionResult:
        session.preflight([good, bad])
        screening = params.get("strategy") == "screening"
        kind = ScreeningStrategy if screening else StagedAttribution
        extra = {"repeats": params["repeats"]} if screening else {}
        if params.get("strategy") == "thorough":
            extra["thorough"] = True
        workers = session.comparable_workers("attribute")
        if len(workers) > 1 and not screening:
            extra["hosts"] = len(workers)     # one arm per host at a time, compared within hosts
        costs = None
        if exp.server is not None and not screening:
            # serving launches differ in price by arm: search arms by information per second
            from .readings import LaunchCosts
            costs = LaunchCosts(session.store, session.campaign, factors, session.log)
            extra["arm_cost"] = costs.costs
        prior = stored_noise_prior(session) if noise_prior and not screening else None
        if prior is not None:
            extra["noise_prior"] = prior
        search = kind(factors, higher_is_better=exp.benchmark.higher_is_better, seed=d.seed,
                      max_trials=budget, min_effect=d.min_effect, alpha=d.alpha, **extra)
        ex = session.executor(workers)
        session.plan(budget)
        good_arm = arm_for_active(good, bad, frozenset(), exp.patchset)
        bad_arm = arm_for_active(good, bad, frozenset(factors), exp.patchset)
        session.log(stored_plan(session, [good_arm, bad_arm], f"budget {budget} trials", ["good", "bad"]))
        if prior is not None:
            session.log(prior.describe())
        notes = PriorNotes(session, search)
        planning = PlanProgress(session, search, arms=(good_arm.spec, bad_arm.spec))
        arm_of: dict[frozenset, Arm] = {}

        def spec_of(active) -> TrialSpec:
            active = frozenset(active)
            if active not in arm_of:
                arm_of[active] = arm_for_active(good, bad, active, exp.patchset)
                if costs is not None:
                    costs.active_of[arm_of[active].spec] = active
            return TrialSpec(arm_of[active])

        def after_batch() -> None:
            if costs is not None:
                costs.update()
            planning.update()
            notes.update()

        def before_batch(batch) -> None:
            est = getattr(search, "estimated_total", None)
            if callable(est):
                # a batch may be longer than the estimate allowed for (a residual check reads
                # two arms at a time): the progress line must not read "[52/51]"
                session.plan(max(est(), search.trials + len(batch)))

        # item i of a batch on host i % hosts: the strategy laid its batches out for that
        drive(search, ex, spec_of, value_of=metric_of(session.metric), before_batch=before_batch,
              after_batch=after_batch, per_host=len(workers) > 1)
        session.conclude(ex)
        verdict = search.verdict()
        res = _result(session, good, bad, factors, verdict)
        notes.update()
        res.more["noise_prior"] = prior_status(search)
        for k in grow:
            setattr(res, k, params[k])
        if res.status == "inconclusive" or (not screening and verdict.trials >= budget):
            res.resume_with = [resume_option("--repeats", params["repeats"]) if screening
                               else resume_option("--max-trials", budget)]
        if (res.status == "culprits" and isinstance(search, StagedAttribution)
                and search.residual_unsettled and not search.thorough):
            res.resume_with = (res.resume_with or []) + [resume_option("--strategy", "thorough")]
        return res

    return session.finish(body)


def _result(session: Session, good: Arm, bad: Arm, factors: list[str], verdict) -> AttributionResult:
    """The verdict with what the campaign adds: trial counts, arms, the environment's account."""
    from ..summaries import env_propagation, env_warnings, flag_warnings
    trials = session.store.trials(session.campaign)
    res = AttributionResult.from_dict(verdict.to_dict())
    res.status = verdict.status
    res.culprits = sorted(verdict.culprits)
    res.trials = len(trials)
    res.measurements = verdict.trials
    res.failed_trials = sum(1 for t in trials if not t.ok)
    res.campaign = session.campaign
    res.good, res.bad = good.spec, bad.spec
    res.factors = factors
    res.metric = session.experiment.benchmark.metric
    res.env_propagation = env_propagation(trials)
    res.warnings = list(res.warnings) + env_warnings(trials) + flag_warnings(trials)
    return res
