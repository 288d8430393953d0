"""Which report a name asks for: a campaign (id, unique prefix, ``latest``) or a sweep (its name)."""
from __future__ import annotations

from ..errors import UsageError
from ..store import Store
from .attribution import attribution_report
from .bisection import bisect_report
from .document import Report, redacted
from .run import run_report
from .sweep import sweep_report

__all__ = ["build_report", "campaign_named", "report_name"]


def build_report(store: Store, what: str) -> Report:
    """The report of a campaign (id, unique prefix, or ``latest``) or of a sweep (its name);
    every text in it has passed the redaction policy (a database written before it had one may
    hold secrets in errors or output tails)."""
    return redacted(_build_report(store, what))


def campaign_named(store: Store, what: str):
    """The campaign ``what`` names (an id, a unique prefix, or ``latest``); None for a sweep's name.
    A usage error listing the recent campaigns when it names nothing."""
    from ..nights import sweep_names
    if what in sweep_names(store):
        return None
    try:
        everything = store.campaigns() if what == "latest" else []
        return everything[-1] if everything else store.campaign(what)
    except Exception as e:
        names = sweep_names(store)
        recent = [x.id for x in store.campaigns()[-5:]]
        raise UsageError(f"{e}; recent campaigns: {', '.join(recent) or 'none'}"
                         + (f"; sweeps: {', '.join(names)}" if names else "")) from None


def report_name(store: Store, what: str) -> str:
    """The report file's stem for ``what``: the campaign's own id (``latest`` and a prefix are
    resolved, so the next campaign's report never overwrites this one), else the sweep's name."""
    c = campaign_named(store, what)
    return (c.id if c is not None else what).replace("/", "_")


def _build_report(store: Store, what: str) -> Report:
    c = campaign_named(store, what)
    if c is None:
        return sweep_report(store, what)
    trials = store.trials(c.id)
    if c.kind == "attribute":
        return attribution_report(store, c, trials)
    if c.kind == "bisect":
        return bisect_report(store, c, trials)
    if c.kind == "sweep" and c.status == "done":
        return sweep_report(store, c.params.get("sweep") or c.id, upto=c.id)
    return run_report(store, c, trials)
