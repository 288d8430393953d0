"""The campaign session: an experiment, its results store and its hosts, and a campaign's lifecycle (layer 5).

Lifecycle of a campaign, the same for every kind::

    session = Session(experiment, store, hosts, log=...)
    cid, resumed = session.open("attribute", params, resume)   # new, or the one to resume
    result = session.finish(body)                              # clocks locked around body();
                                                               # status right on every exit path
    session.close()

``body`` builds its :class:`~bisect_lab.runner.Executor` with :meth:`Session.executor` (the one
place one is built) and ends with :meth:`Session.conclude`, so every campaign kind gets the same
"no measurement at all" check and the same GPU clock / throttle flags.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, TypeVar

from ..errors import BisectLabError, PatchError, UsageError
from ..hosts import Host
from ..model import Arm, Experiment, TrialResult
from ..runner import Executor, HostWorker, TrialSpec
from ..results import Result
from ..store import Store

Log = Callable[[str], None]
R = TypeVar("R", bound=Result)


def experiment_key(exp: Experiment) -> str:
    """How the store names an experiment: its file's path, else its name."""
    return str(exp.path) if exp.path else exp.name


def resume_option(option: str, value) -> dict:
    """How a finished campaign goes on (``resume_with`` in the results; the human output turns it
    into "the same command with --resume CAMPAIGN ..."): an int is a budget to exceed, a string the
    value to give."""
    return {"option": option, "more_than": value} if isinstance(value, int) else {"option": option, "value": value}


@dataclass
class Session:
    """An experiment, its results store and its hosts, ready to run campaigns one after another.

    ``campaign`` is the id of the campaign opened last (None before the first :meth:`open`): an
    interrupted command names it in its "continue with --resume" line.
    """

    experiment: Experiment
    store: Store
    hosts: list[Host]
    log: Log = field(default=lambda m: None)
    on_trial: Callable[[TrialResult], None] | None = None
    on_plan: Callable[[int], None] | None = None      # an estimate of total trials, updated as it changes
    on_replay: Callable[[TrialResult], None] | None = None   # a stored trial taken instead of a run (resume)
    campaign: str | None = None
    # readings per serving session regardless of [server] readings (recheck: as many as the old launch)
    fixed_readings: int | None = None

    def __post_init__(self):
        from ..redact import use_key
        # Arms parsed from now on tag their secrets with this results folder's key: the same
        # token gives the same stored spec in every run against these results (resume).
        use_key(self.store.redaction_key)
        if self.experiment.cluster.is_slurm:     # [cluster] engine = "slurm": job slots instead of hosts
            from ..fleet import slurm_workers
            self.workers = slurm_workers(self.experiment, self.store, self.hosts, log=self.log)
        else:
            self.workers = [HostWorker(h, self.experiment, log=self.log) for h in self.hosts]

    def close(self) -> None:
        for w in self.workers:
            w.close()

    @property
    def metric(self) -> str:
        return self.experiment.benchmark.metric

    def plan(self, total: int) -> None:
        """Tell the progress display how many trials the campaign is expected to take."""
        if self.on_plan:
            self.on_plan(total)

    # ------------------------------------------------------------------ open / resume
    def open(self, kind: str, params: dict, resume: str | bool | None = None, *,
             grow: dict[str, int] | None = None, upgrades: dict[str, tuple] | None = None,
             recorded: tuple[str, ...] = ()) -> tuple[str, bool]:
        """Create a campaign, or find the one to resume (same experiment, same parameters).

        ``grow`` maps parameters (a budget) that a resume may raise but not lower to their defaults:
        ``None`` in ``params`` means the default for a new campaign and the stored value for a resumed
        one (filled in ``params``). Raising one also reopens a finished campaign: its stored trials are
        replayed and the strategy goes on where the old budget stopped it. ``upgrades`` maps a
        parameter to the one change of it a resume may make, ``(stored, new, stored's name)`` (the
        default attribution to the thorough one), with the same effect. ``recorded``: parameters a
        campaign of an earlier version did not store yet (a bisection's metric and direction); a
        resume of such a campaign records them instead of refusing it as different."""
        store, exp = self.store, self.experiment
        grow = grow or {}
        upgrades = upgrades or {}
        if not resume:
            for k, default in grow.items():
                if params.get(k) is None:
                    params[k] = default
            self.campaign = store.create_campaign(kind, experiment=experiment_key(exp), experiment_name=exp.name,
                                                  params=params)
            return self.campaign, False
        c = campaign_to_resume(store, kind, resume, experiment_key(exp))
        missing = {k: params[k] for k in recorded if k not in c.params and k in params}
        if missing:
            store.set_campaign_params(c.id, {**c.params, **missing})
            c = campaign_to_resume(store, kind, c.id, experiment_key(exp))
        raised = _raised_on_resume(c, params, grow, upgrades)
        if raised:
            store.set_campaign_params(c.id, {**c.params, **{k: params[k] for k in raised}})
            was = {k: c.params.get(k, upgrades[k][2] if k in upgrades else None) for k in raised}
            self.log(f"campaign {c.id} ({c.status}): " + ", ".join(f"{k} {was[k]} -> {params[k]}" for k in raised)
                     + f"; its {len(store.trials(c.id))} stored trial(s) are replayed first")
        store.set_campaign_status(c.id, "running")
        self.campaign = c.id
        # A run that was killed (kill -9, a lost connection) may have left its benchmark running:
        # it would share the GPU with the trials measured now.
        for w in self.workers:
            w.end_leftovers(c.id)
        return c.id, True

    # ------------------------------------------------------------------ the body's tools
    def executor(self, workers: list[HostWorker] | None = None) -> Executor:
        """The executor of the open campaign, on ``workers`` (default: every host)."""
        srv = self.experiment.server
        readings_for = None
        if srv is not None and self.fixed_readings:
            readings_for = lambda spec: self.fixed_readings      # noqa: E731  (recheck: as many as then)
        elif srv is not None and srv.readings == "auto":
            # the cost-aware choice, re-made before each launch from this campaign's own costs and noise
            from ..stats.sessions import search_floor_var
            from .readings import AutoReadings
            c = self.store.campaign(self._cid())
            floor = 0.0
            if c.kind in ("attribute", "bisect"):
                floor = search_floor_var(c.params.get("min_effect", self.experiment.design.min_effect))
            readings_for = AutoReadings(self.store, self._cid(), self.metric, self.log, floor_var=floor)
        return Executor(self.experiment, self.store, self._cid(), self.workers if workers is None else workers,
                        on_trial=self.on_trial, on_replay=self.on_replay, log=self.log, readings_for=readings_for)

    def preflight(self, arms: list[Arm], commit: str | None = None) -> None:
        """Prepare the trees of the named arms before spending benchmark time.

        A patch that does not apply to the base ref is a usage error (exit 2), not a
        failed trial: nothing could ever be measured for that arm.
        """
        w = self.workers[0]
        for arm in arms:
            self.log(f"preparing tree for {arm.spec!r}")
            try:
                w.prepare(TrialSpec(arm, commit))
            except PatchError as e:
                raise PatchError(f"arm {arm.spec!r}: {e}", patch=e.patch, file=e.file) from None

    def comparable_workers(self, what: str) -> list[HostWorker]:
        """The hosts a search may use: all of them. A search given several hosts asks one arm per
        host at a time and compares arms within hosts (each host's level is learned from the
        reference arms every host measures), so adding hosts cuts wall time without mixing machines.
        """
        if len(self.workers) > 1:
            self.log(f"{what} runs on {len(self.workers)} hosts at once "
                     f"({', '.join(w.host.name for w in self.workers)}): arms are compared within hosts, "
                     "each host's level learned from the arms every host measures")
        return list(self.workers)

    def single_host_warnings(self, what: str, things: str) -> list[str]:
        """What a search on several hosts adds to its result beyond the strategy's own lines (a host
        whose level differs is named by the strategy): nothing now that every host is used; kept
        for callers of the one-host era."""
        return []

    def conclude(self, executor: Executor) -> None:
        """The common end of every campaign body: no successful trial at all is exit 4 (not an
        "inconclusive"), and trials whose GPU clocks or throttle state differ from the campaign's
        norm are flagged.

        Every kind gets the flags on purpose — sweep nights and pytest campaigns included: a night
        measured on a throttled GPU is exactly what a sweep must not alert on unannounced."""
        executor.require_measurements()
        self.flag()

    def flag(self) -> None:
        """Flag trials whose GPU clocks or throttle state differ from the campaign's norm."""
        from ..fingerprint import flag_fingerprints
        cid = self._cid()
        fps = {}
        for t in self.store.trials(cid):
            if t.ok and t.fingerprint:
                data = self.store.fingerprint(t.fingerprint)
                if data:
                    fps[t.trial] = data
        if not fps:
            return
        flags = flag_fingerprints(fps)
        self.store.set_flags(cid, {k: tuple(v) for k, v in flags.flags.items() if v})

    # ------------------------------------------------------------------ finish
    def finish(self, body: Callable[[], R], *, store_result: bool = True) -> R:
        """Run a campaign body: GPU clocks locked around it, the campaign's status right on every
        exit path (interrupted, failed, done), its result stored (``store_result``)."""
        cid = self._cid()
        exp = self.experiment
        locked = []
        try:
            if exp.gpu.enabled and exp.gpu.lock_clocks_mhz:
                from ..gpu import lock_clocks
                for w in self.workers:
                    lock_clocks(w.host, exp.gpu)
                    locked.append(w.host)
                    self.log(f"{w.host.name}: GPU clocks locked at {exp.gpu.lock_clocks_mhz} MHz")
            result = body()
        except KeyboardInterrupt:
            self.store.set_campaign_status(cid, "interrupted")
            raise
        except Exception:
            self.store.set_campaign_status(cid, "failed")
            raise
        finally:
            if locked:
                from ..gpu import unlock_clocks
                for h in locked:
                    try:
                        unlock_clocks(h, exp.gpu)
                    except BisectLabError as e:
                        self.log(f"{h.name}: could not unlock GPU clocks: {e}")
        if store_result:
            self.store.finish_campaign(cid, "done", result.stored())
        return result

    def _cid(self) -> str:
        if self.campaign is None:
            raise RuntimeError("no campaign is open: call Session.open first")
        return self.campaign


def campaign_to_resume(store: Store, kind: str, resume: str | bool, experiment: str | None):
    """The stored campaign that ``resume`` names: an id (or a unique prefix), or ``True`` for the
    latest unfinished campaign of ``kind``, of ``experiment`` (an :func:`experiment_key`) when given,
    else of any experiment. A usage error when there is none, it is of another kind, or it belongs
    to another experiment than the one given.

    :meth:`Session.open` finds its campaign here; the command line also reads a campaign through
    it before any session exists, to take the experiment and arms that ``--resume`` left out."""
    if resume is True:
        c = store.latest_unfinished(kind, experiment)
        if c is None:
            of = f" of {experiment}" if experiment is not None else ""
            raise UsageError(f"nothing to resume: no unfinished {kind} campaign{of} in {store.path}")
    else:
        c = store.campaign(resume)
        if c.kind != kind:
            raise UsageError(f"campaign {c.id} is a {c.kind} campaign, not {kind}")
    if experiment is not None and c.experiment != experiment:
        raise UsageError(f"campaign {c.id} belongs to {c.experiment}, not {experiment}")
    return c


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
    from ..redact import redact_tree
    # The stored parameters went through the redaction policy: compare like with like.
    mismatched = {k for k in set(params) | set(c.params)
                  if k not in raised and redact_tree(params.get(k)) != c.params.get(k)}
    if mismatched:
        k = sorted(mismatched)[0]
        why = " (a budget can be raised on resume, not lowered)" if k in grow else ""
        raise UsageError(f"cannot resume {c.id} with different parameters: {k} was {c.params.get(k)!r}, "
                         f"now {redact_tree(params.get(k))!r}{why}")
    return raised
