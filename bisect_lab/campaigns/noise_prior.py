"""The noise prior of an ``attribute`` campaign, read from the store (layer 5): the within-arm spread
of earlier campaigns of the same experiment on the same host (``stats.noise_prior``), and what the
campaign says about it (the line at the start, the line when the strategy drops it, the JSON key).
"""
from __future__ import annotations

from .. import stats
from ..stats.noise_prior import NoisePrior
from .session import Session, experiment_key

# Only the most recent earlier campaigns count: a machine changes (drivers, clocks, a neighbour),
# and the fit check should compare today with how the host reads lately, not a year's average.
MAX_CAMPAIGNS = 5


def stored_noise_prior(session: Session) -> NoisePrior | None:
    """The prior from the latest ``MAX_CAMPAIGNS`` earlier campaigns (created before this one,
    so a resumed campaign gets the same prior) of this experiment: each arm's successful readings
    on this host in one campaign form a group; groups of fewer than 2 readings are skipped. None
    when no campaign has 2 readings of an arm there, or when the campaign runs on several hosts
    (their noise is compared within hosts, not pooled)."""
    from ..summaries import positive_metric
    if len(session.workers) != 1:
        return None
    store, key = session.store, experiment_key(session.experiment)
    host = session.workers[0].host.name
    me = store.campaign(session.campaign)
    earlier = [c for c in store.campaigns() if c.experiment == key and c.id != me.id
               and (c.created, c.id) < (me.created, me.id)]
    groups, used = [], 0
    for c in reversed(earlier):
        if used >= MAX_CAMPAIGNS:
            break
        by_arm: dict[str, list[float]] = {}
        for t in store.trials(c.id):
            v = positive_metric(t.metrics.get(session.metric))
            if t.ok and t.host == host and v is not None:
                by_arm.setdefault(t.arm, []).append(v)
        mine = [v for v in by_arm.values() if len(v) >= 2]
        if mine:
            groups += mine
            used += 1
    return stats.pooled_prior(groups, campaigns=used, host=host) if groups else None


def prior_status(search) -> dict | None:
    """What became of the prior in a staged search (its stages' ``prior_status``): the first
    stage that dropped it says when and why; None without a prior."""
    stages = [s for _, s in getattr(search, "stages", [])]
    states = [s.prior_status() for s in stages if hasattr(s, "prior_status")]
    states = [s for s in states if s is not None]
    if not states:
        return None
    dropped = next((s for s in states if s["dropped_at"] is not None), None)
    return dropped or states[0]


class PriorNotes:
    """Logs, once, the line that says the strategy dropped the prior (after each batch)."""

    def __init__(self, session: Session, search):
        self.session, self.search, self.said = session, search, False

    def update(self) -> None:
        if self.said:
            return
        st = prior_status(self.search)
        if st is not None and st["dropped_at"] is not None:
            self.session.log(st["note"])
            self.said = True
