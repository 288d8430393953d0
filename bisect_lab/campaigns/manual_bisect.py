"""``bisect --manual`` and ``verdict good|bad|skip``: a bisection on the user's own verdicts, as ``git bisect`` (layer 5).

The user's ``--good`` and ``--bad`` are taken as said (not re-tested). Each step names the next
commit to judge and prepares its tree (the arm's patches applied, the build step done) in the
tree cache, where the user tries it; the repository itself is never touched. Each verdict is
stored as a trial of the ``bisect`` campaign (metric ``verdict``: 1 good, 2 bad, 3 skip; host
``manual``), and every step replays the stored verdicts through the same exact search as
``--run-script`` (:class:`~bisect_lab.strategies.bisection_passfail.PassFailBisection`) driven by
:func:`~bisect_lab.campaigns.drive.drive`: the campaign is its own state, so a step can come from
another shell or another day. Between verdicts the campaign is unfinished (status
``interrupted``); the last verdict stores the answer, a :class:`BisectResult` like any bisection's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..arms import parse_arm
from ..errors import UsageError
from ..model import TrialResult, TrialStatus
from ..results import BisectResult
from ..runner import TrialSpec
from .drive import drive
from .passfail_bisect import METRIC, SKIP, _verdict_of, passfail_result
from .session import Session

VERDICTS = {"good": 1.0, "bad": 2.0, "skip": SKIP}
MODE = "manual"


@dataclass
class NextCommit:
    """The commit the user is asked to judge next."""

    campaign: str
    commit: str
    subject: str
    tree: str                 # its prepared tree, where to try it
    judged: int               # verdicts given so far
    left: int                 # commits still open (skipped ones left out)

    def to_dict(self) -> dict:
        return {"status": "waiting", "campaign": self.campaign, "commit": self.commit, "subject": self.subject,
                "tree": self.tree, "judged": self.judged, "left": self.left}


class _Asked(Exception):
    def __init__(self, spec: TrialSpec):
        self.spec = spec


class _Verdicts:
    """The ``drive`` executor of a manual bisection: stored verdicts first, then the one given now;
    a commit without either stops the loop (:class:`_Asked`)."""

    def __init__(self, session: Session, cid: str, given: float | None):
        self.store, self.cid, self.given = session.store, cid, given
        self.stored: dict[str | None, list[TrialResult]] = {}
        for t in self.store.trials(cid):
            self.stored.setdefault(t.commit, []).append(t)

    def run_batch(self, specs: list[TrialSpec], *, per_host: bool = False) -> list[TrialResult]:
        out = []
        for s in specs:
            q = self.stored.get(s.commit)
            if q:
                out.append(q.pop(0))
                continue
            if self.given is None:
                raise _Asked(s)
            t = TrialResult(campaign=self.cid, trial=self.store.next_trial_index(self.cid), arm=s.arm.spec,
                            status=TrialStatus.OK, host="manual", started=time.time(), duration_s=0.0,
                            metrics={METRIC: self.given}, commit=s.commit, tag="manual")
            self.store.add_trial(t)
            self.given = None
            out.append(t)
        return out


def _shas(session: Session, good: str, bad: str) -> list[str]:
    return [good] + [c.sha for c in session.workers[0].trees.first_parent_chain(good, bad)]


def manual_start(session: Session, good_ref: str, bad_ref: str, *, arm: str = "none") -> NextCommit | BisectResult:
    """Open a manual bisection of good..bad (first-parent line) and name the first commit to judge."""
    exp = session.experiment
    the_arm = parse_arm(arm or "none", exp.patchset)
    trees = session.workers[0].trees
    good, bad = trees.resolve(good_ref), trees.resolve(bad_ref)
    if good == bad:
        raise UsageError(f"--good {good_ref} and --bad {bad_ref} are the same commit ({good[:12]})")
    shas = _shas(session, good, bad)
    if len(shas) < 2:
        raise UsageError(f"{bad_ref} ({bad[:12]}) has no commits that {good_ref} ({good[:12]}) lacks: "
                         "is --good an ancestor of --bad?")
    params = {"good": good, "bad": bad, "arm": the_arm.spec, "mode": MODE, "candidates": len(shas) - 1}
    cid, _ = session.open("bisect", params, None)
    return _step(session, cid, params, None)


def manual_verdict(session: Session, campaign: str, verdict: str) -> NextCommit | BisectResult:
    """Store ``verdict`` (good / bad / skip) for the commit ``campaign`` asked about; name the next
    one, or store and return the answer."""
    if verdict not in VERDICTS:
        raise UsageError(f"verdict {verdict!r}: expected good, bad or skip")
    c = session.store.campaign(campaign)
    if c.kind != "bisect" or c.params.get("mode") != MODE:
        raise UsageError(f"campaign {c.id} is not a manual bisection (start one with bisect --manual)")
    if c.status == "done":
        raise UsageError(f"campaign {c.id} is already finished; see `bisect-lab report {c.id}`")
    cid, _ = session.open("bisect", dict(c.params), c.id)
    return _step(session, cid, c.params, VERDICTS[verdict])


def _step(session: Session, cid: str, params: dict, given: float | None) -> NextCommit | BisectResult:
    from ..strategies.bisection_passfail import PassFailBisection
    the_arm = parse_arm(params["arm"], session.experiment.patchset)
    shas = _shas(session, params["good"], params["bad"])
    search = PassFailBisection(len(shas), check_ends=False)
    runs = _Verdicts(session, cid, given)
    try:
        drive(search, runs, lambda pos: TrialSpec(the_arm, shas[pos], "manual"), value_of=_verdict_of)
    except _Asked as e:
        session.store.set_campaign_status(cid, "interrupted")     # unfinished: `verdict` goes on with it
        tree = session.workers[0].prepare(e.spec)
        trees = session.workers[0].trees
        open_ = [p for p in range(search.lo + 1, search.hi) if p not in search.skipped]
        return NextCommit(cid, e.spec.commit, trees.commit_info(e.spec.commit).subject, str(tree.path),
                          len(session.store.trials(cid)), len(open_))
    untestable = {t.commit: "skip: judged untestable" for t in session.store.trials(cid)
                  if t.metrics.get(METRIC) == SKIP}
    return session.finish(lambda: passfail_result(session, cid, shas, the_arm, search.verdict(), untestable,
                                                  len(shas)))
