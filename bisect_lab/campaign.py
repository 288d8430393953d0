"""Campaigns: the plain functions behind ``run``, ``attribute`` and ``bisect`` (layer 5).

The CLI is a thin args-to-kwargs adapter over these (as in asv); the pytest plugin and
sweeps call them too. They never print: progress and log lines go to callbacks.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from .arms import arm_for_active, factors_between, parse_arm
from .errors import BisectLabError, PatchError, UsageError
from .hosts import Host
from .model import ATTRIBUTION_STRATEGIES, Arm, Experiment, TrialResult
from .runner import Executor, HostWorker, TrialSpec
from .store import Store

Log = Callable[[str], None]


@dataclass
class Session:
    """An experiment, its results store and its hosts, ready to run a campaign."""

    experiment: Experiment
    store: Store
    hosts: list[Host]
    log: Log = field(default=lambda m: None)
    on_trial: Callable[[TrialResult], None] | None = None
    on_plan: Callable[[int], None] | None = None      # an estimate of total trials, updated as it changes
    on_replay: Callable[[TrialResult], None] | None = None   # a stored trial taken instead of a run (resume)

    def __post_init__(self):
        from .redact import use_key
        # Arms parsed from now on tag their secrets with this results folder's key: the same
        # token gives the same stored spec in every run against these results (resume).
        use_key(self.store.redaction_key)
        self.workers = [HostWorker(h, self.experiment, log=self.log) for h in self.hosts]

    def close(self):
        for w in self.workers:
            w.close()

    @property
    def metric(self) -> str:
        return self.experiment.benchmark.metric


def _experiment_key(exp: Experiment) -> str:
    return str(exp.path) if exp.path else exp.name


def open_campaign(session: Session, kind: str, params: dict, resume: str | bool | None, *,
                  grow: dict[str, int] | None = None,
                  upgrades: dict[str, tuple] | None = None) -> tuple[str, bool]:
    """Create a campaign, or find the one to resume (same experiment, same parameters).

    ``grow`` maps parameters (a budget) that a resume may raise but not lower to their defaults:
    ``None`` in ``params`` means the default for a new campaign and the stored value for a resumed
    one (filled in ``params``). Raising one also reopens a finished campaign: its stored trials are
    replayed and the strategy goes on where the old budget stopped it. ``upgrades`` maps a
    parameter to the one change of it a resume may make, ``(stored, new, stored's name)`` (the
    default attribution to the thorough one), with the same effect."""
    store, exp = session.store, session.experiment
    grow = grow or {}
    upgrades = upgrades or {}
    if not resume:
        for k, default in grow.items():
            if params.get(k) is None:
                params[k] = default
        cid = store.create_campaign(kind, experiment=_experiment_key(exp), experiment_name=exp.name, params=params)
        return cid, False
    if resume is True:
        c = store.latest_unfinished(kind, _experiment_key(exp))
        if c is None:
            raise UsageError(f"nothing to resume: no unfinished {kind} campaign of {_experiment_key(exp)} "
                             f"in {store.path}")
    else:
        c = store.campaign(resume)
        if c.kind != kind:
            raise UsageError(f"campaign {c.id} is a {c.kind} campaign, not {kind}")
    if c.experiment != _experiment_key(exp):
        raise UsageError(f"campaign {c.id} belongs to {c.experiment}, not {_experiment_key(exp)}")
    raised = _raised_on_resume(c, params, grow, upgrades)
    if raised:
        store.set_campaign_params(c.id, {**c.params, **{k: params[k] for k in raised}})
        was = {k: c.params.get(k, upgrades[k][2] if k in upgrades else None) for k in raised}
        session.log(f"campaign {c.id} ({c.status}): " + ", ".join(f"{k} {was[k]} -> {params[k]}" for k in raised)
                    + f"; its {len(store.trials(c.id))} stored trial(s) are replayed first")
    store.set_campaign_status(c.id, "running")
    # A run that was killed (kill -9, a lost connection) may have left its benchmark running:
    # it would share the GPU with the trials measured now.
    for w in session.workers:
        w.end_leftovers(c.id)
    return c.id, True


def _raised_on_resume(c, params: dict, grow: dict[str, int], upgrades: dict[str, tuple]) -> list[str]:
    """The ``grow`` and ``upgrades`` parameters this resume raises; a usage error for a finished
    campaign that nothing reopens, or for any other parameter that differs (a lowered budget
    included)."""
    for k, default in grow.items():
        if params.get(k) is None:
            params[k] = c.params.get(k, default)
    raised = [k for k in grow if isinstance(params.get(k), int) and isinstance(c.params.get(k), int)
              and params[k] > c.params[k]]
    raised += [k for k, (old, new, _) in upgrades.items() if c.params.get(k) == old and params.get(k) == new]
    if c.status == "done" and not raised:
        more = "".join(f"; to let it go on, resume it with a larger --{k.replace('_', '-')} (it had {c.params[k]})"
                       for k in grow if isinstance(c.params.get(k), int))
        more += "".join(f" or with --{k} {new}" for k, (old, new, _) in upgrades.items() if c.params.get(k) == old)
        raise UsageError(f"campaign {c.id} is already finished; see `bisect-lab report {c.id}`{more}")
    from .redact import redact_tree
    # The stored parameters went through the redaction policy: compare like with like.
    mismatched = {k for k in set(params) | set(c.params)
                  if k not in raised and redact_tree(params.get(k)) != c.params.get(k)}
    if mismatched:
        k = sorted(mismatched)[0]
        why = " (a budget can be raised on resume, not lowered)" if k in grow else ""
        raise UsageError(f"cannot resume {c.id} with different parameters: {k} was {c.params.get(k)!r}, "
                         f"now {redact_tree(params.get(k))!r}{why}")
    return raised


def resume_option(option: str, value) -> dict:
    """How a finished campaign goes on (``resume_with`` in the results; the human output turns it
    into "the same command with --resume CAMPAIGN ..."): an int is a budget to exceed, a string the
    value to give."""
    return {"option": option, "more_than": value} if isinstance(value, int) else {"option": option, "value": value}


def preflight(session: Session, arms: list[Arm], commit: str | None = None) -> None:
    """Prepare the trees of the named arms before spending benchmark time.

    A patch that does not apply to the base ref is a usage error (exit 2), not a
    failed trial: nothing could ever be measured for that arm.
    """
    w = session.workers[0]
    for arm in arms:
        session.log(f"preparing tree for {arm.spec!r}")
        try:
            w.prepare(TrialSpec(arm, commit))
        except PatchError as e:
            raise PatchError(f"arm {arm.spec!r}: {e}", patch=e.patch, file=e.file) from None


def flag_campaign(session: Session, cid: str) -> None:
    """Flag trials whose GPU clocks or throttle state differ from the campaign's norm."""
    from .fingerprint import flag_fingerprints
    fps = {}
    for t in session.store.trials(cid):
        if t.ok and t.fingerprint:
            data = session.store.fingerprint(t.fingerprint)
            if data:
                fps[t.trial] = data
    if not fps:
        return
    flags = flag_fingerprints(fps)
    session.store.set_flags(cid, {k: tuple(v) for k, v in flags.flags.items() if v})


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def stored_plan(session: Session, arms: list[Arm], note: str, labels: list[str] | None = None, *,
                commits: list[str] | None = None) -> str:
    """One line, before any trial: what earlier measurements of the arms (same experiment, same
    host, any campaign: a `run`, an earlier attribution) say resolving ``min_effect`` between them
    costs. ``note`` ends the line (the budget, or what this run measures); ``labels`` name the arms'
    noise (default: their specs). With ``commits`` (a bisection's good and bad ends), the one arm's
    trials at each of those commits are compared instead, and the estimate is per commit."""
    from . import stats
    from .summaries import positive_metric
    from .verdicts import PlanEstimate

    exp, d = session.experiment, session.experiment.design
    host = session.workers[0].host.name
    if commits:
        groups = [(arms[0].spec, c) for c in commits]
        names = [f"{arms[0].spec!r} at {commits[0][:12]}"] + [c[:12] for c in commits[1:]]
    else:
        groups = [(a.spec, None) for a in arms]
        names = [repr(a.spec) for a in arms]
    values: dict[tuple, list[float]] = {g: [] for g in groups}
    for t in session.store.arm_trials(sorted({spec for spec, _ in groups}), experiment=_experiment_key(exp),
                                      host=host):
        v = positive_metric(t.metrics.get(session.metric))
        if v is None:
            continue
        for spec, commit in groups:
            if t.arm == spec and (commit is None or t.commit == commit):
                values[(spec, commit)].append(v)
    known = [v for v in values.values() if len(v) >= 2]
    if not known:
        return f"planning: no earlier measurements of {_and(names)} on {host} to plan from ({note})"
    n = stats.plan_trials(known, min_effect=d.min_effect, alpha=d.alpha)
    counts = [f"{len(v)} {'at' if commits and k else 'of'} {name}"
              for k, (name, v) in enumerate(zip(names, values.values()))]
    counts[0] = counts[0].replace(" of ", " stored trial(s) of ", 1)
    labels = labels or names
    cv = ", ".join(f"{label} {stats.log_cv(v):.1%}" for label, v in zip(labels, values.values()) if len(v) >= 2)
    text = PlanEstimate(float("nan"), float("nan"), d.min_effect, n).describe("commit" if commits else "arm")
    return f"planning from {_and(counts)} on {host} (CV {cv}): {text} ({note})"


class PlanProgress:
    """Logs a strategy's planning estimate as the campaign goes: when it first exists, then when
    it moves by a quarter or more (at most every ``every`` trials)."""

    def __init__(self, session: Session, strategy, every: int = 5):
        self.session, self.strategy, self.every = session, strategy, every
        self.last: int | None = None
        self.at = 0

    def update(self) -> None:
        get = getattr(self.strategy, "plan_estimate", None)
        if not callable(get):
            return
        plan = get()
        n, t = plan.trials_per_arm, self.strategy.trials
        if n is None or (self.last is not None and (abs(n - self.last) < 0.25 * self.last
                                                     or t - self.at < self.every)):
            return
        self.last, self.at = n, t
        self.session.log(f"planning after {t} trials (CV good {plan.cv_good:.1%}, bad {plan.cv_bad:.1%}): "
                         f"{plan.text}")


def comparable_workers(session: Session, what: str) -> list[HostWorker]:
    """The hosts a search may use: one, so that its arms are never compared across machines.

    `run` blocks by host (every host measures every arm); the adaptive searches compare each
    new arm with what came before, so they stay on the first host.
    """
    if len(session.workers) > 1:
        session.log(f"{what} runs on {session.workers[0].host.name} only: its arms are compared with each "
                    f"other, never across hosts (use `run` to measure on every host)")
    return session.workers[:1]


def single_host_warnings(session: Session, what: str, things: str) -> list[str]:
    """What a search that ran on the first of several hosts (comparable_workers) tells its result."""
    if len(session.workers) <= 1:
        return []
    return [f"several hosts: {what} ran on {session.workers[0].host.name} only, so that {things} are never "
            "compared across machines"]


def _finish(session: Session, cid: str, run: Callable[[], dict]) -> dict:
    """Run a campaign body: clocks locked around it, status kept right on every exit path."""
    locked = []
    try:
        if session.experiment.gpu.enabled and session.experiment.gpu.lock_clocks_mhz:
            from .gpu import lock_clocks
            for w in session.workers:
                lock_clocks(w.host, session.experiment.gpu)
                locked.append(w.host)
                session.log(f"{w.host.name}: GPU clocks locked at {session.experiment.gpu.lock_clocks_mhz} MHz")
        result = run()
    except KeyboardInterrupt:
        session.store.set_campaign_status(cid, "interrupted")
        raise
    except Exception:
        session.store.set_campaign_status(cid, "failed")
        raise
    finally:
        if locked:
            from .gpu import unlock_clocks
            for h in locked:
                try:
                    unlock_clocks(h, session.experiment.gpu)
                except BisectLabError as e:
                    session.log(f"{h.name}: could not unlock GPU clocks: {e}")
    session.store.finish_campaign(cid, "done", result)
    return result


# --------------------------------------------------------------------------- run
def balanced_order(arms: list[Arm], repeat: int, seed: int) -> list[Arm]:
    """``repeat`` rounds; each round holds every arm once, in a seeded random order."""
    rng = random.Random(seed)
    order: list[Arm] = []
    for _ in range(repeat):
        rnd = list(arms)
        rng.shuffle(rnd)
        order.extend(rnd)
    return order


def run_arms(session: Session, specs: list[str], *, repeat: int | None = None,
             resume: str | bool | None = None) -> dict:
    """Measure arms interleaved in a randomised balanced order; summaries and pairwise comparisons."""
    from .summaries import run_summary
    exp = session.experiment
    arms = []
    for s in specs:
        a = parse_arm(s, exp.patchset)
        if a.spec not in [x.spec for x in arms]:
            arms.append(a)
    warmup = max(0, exp.benchmark.warmup)
    # a resume keeps the campaign's repeat unless --repeat raises it (more trials of every arm)
    params = {"arms": [a.spec for a in arms], "repeat": repeat, "seed": exp.design.seed, "warmup": warmup}
    cid, resumed = open_campaign(session, "run", params, resume, grow={"repeat": exp.design.repeat})
    session.campaign = cid
    repeat = params["repeat"]

    def go():
        preflight(session, arms)
        if len(arms) > 1:
            session.log(stored_plan(session, arms, f"this run measures {repeat} per arm"))
        ex = Executor(exp, session.store, cid, session.workers, on_trial=session.on_trial,
                      on_replay=session.on_replay, log=session.log)
        order = balanced_order(arms, warmup + repeat, exp.design.seed)
        nh = len(session.workers)
        if session.on_plan:
            session.on_plan(len(order) * nh)
        # Each host measures the whole balanced sequence: arms are compared within a host only.
        batch: list[TrialSpec] = []
        for i, arm in enumerate(order):
            tag = "warmup" if i < warmup * len(arms) else None
            batch.extend(TrialSpec(arm, None, tag) for _ in range(nh))
        step = nh * len(arms)
        for i in range(0, len(batch), step):
            ex.run_batch(batch[i:i + step], per_host=True)
        ex.require_measurements()
        flag_campaign(session, cid)
        trials = [t for t in session.store.trials(cid) if t.tag != "warmup"]
        res = run_summary(exp, arms, trials, cid)
        res["repeat"] = repeat
        if any(r.get("verdict") == "unknown" for r in res["comparisons"]):
            res["resume_with"] = [resume_option("--repeat", repeat)]
        return res

    return _finish(session, cid, go)


# --------------------------------------------------------------------------- attribute
SCREENING_REPEATS = 2      # rounds of a screening design unless --repeats says otherwise


def attribute(session: Session, good_spec: str, bad_spec: str, *, resume: str | bool | None = None,
              max_trials: int | None = None, strategy: str = "adaptive", repeats: int | None = None) -> dict:
    """Find which factors (patches, env vars) explain the difference between two arms.

    ``strategy``: "adaptive" (the default: staged Bayesian attribution, stops as soon as the answer
    is clear), "thorough" (the same, checking every answer for a culprit left over: about twice the
    trials for a lone large culprit, a small second culprit found far more often) or "screening" (a
    fixed factorial / Plackett-Burman design, ``repeats`` rounds)."""
    from .strategies.screening import ScreeningStrategy
    from .strategies.staged import StagedAttribution
    from .summaries import attribution_summary
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
    cid, resumed = open_campaign(session, "attribute", params, resume, grow=grow,
                                 upgrades={"strategy": (None, "thorough", "adaptive")})
    session.campaign = cid
    budget = params["max_trials"]

    def go():
        preflight(session, [good, bad])
        kind = ScreeningStrategy if params.get("strategy") == "screening" else StagedAttribution
        extra = {"repeats": params["repeats"]} if kind is ScreeningStrategy else {}
        if params.get("strategy") == "thorough":
            extra["thorough"] = True
        strategy = kind(factors, higher_is_better=exp.benchmark.higher_is_better, seed=d.seed,
                        max_trials=budget, min_effect=d.min_effect, alpha=d.alpha, **extra)
        ex = Executor(exp, session.store, cid, comparable_workers(session, "attribute"),
                      on_trial=session.on_trial, on_replay=session.on_replay, log=session.log)
        if session.on_plan:
            session.on_plan(budget)
        good_arm = arm_for_active(good, bad, frozenset(), exp.patchset)
        bad_arm = arm_for_active(good, bad, frozenset(factors), exp.patchset)
        session.log(stored_plan(session, [good_arm, bad_arm], f"budget {budget} trials", ["good", "bad"]))
        planning = PlanProgress(session, strategy)
        arm_of: dict[frozenset, Arm] = {}
        while not strategy.done:
            batch = strategy.ask()
            if not batch:
                break
            est = getattr(strategy, "estimated_total", None)
            if session.on_plan and callable(est):
                # a batch may be longer than the estimate allowed for (a residual check reads
                # two arms at a time): the progress line must not read "[52/51]"
                session.on_plan(max(est(), strategy.trials + len(batch)))
            specs = []
            for active in batch:
                if active not in arm_of:
                    arm_of[active] = arm_for_active(good, bad, frozenset(active), exp.patchset)
                specs.append(TrialSpec(arm_of[active]))
            results = ex.run_batch(specs)
            for active, r in zip(batch, results):
                v = r.metrics.get(session.metric) if r.ok else None
                strategy.tell(frozenset(active), v)
            planning.update()
        ex.require_measurements()
        flag_campaign(session, cid)
        verdict = strategy.verdict()
        trials = session.store.trials(cid)
        res = attribution_summary(exp, good, bad, factors, verdict, trials, cid)
        res["warnings"] += single_host_warnings(session, "attribute", "arms")
        res.update({k: params[k] for k in grow})
        screening = kind is ScreeningStrategy
        if res["status"] == "inconclusive" or (not screening and verdict.trials >= budget):
            res["resume_with"] = [resume_option("--repeats", params["repeats"]) if screening
                                  else resume_option("--max-trials", budget)]
        if (res["status"] == "culprits" and isinstance(strategy, StagedAttribution)
                and strategy.residual_unsettled and not strategy.thorough):
            res.setdefault("resume_with", []).append(resume_option("--strategy", "thorough"))
        return res

    return _finish(session, cid, go)
