"""A campaign session for one command: its store, hosts and progress display opened together,
and closed together however the campaign ends (Ctrl-C and SIGTERM included)."""
from __future__ import annotations

import sys

from ._context import Context
from ._progress import Progress


def open_session(ctx: Context, exp, *, quiet: bool):
    """A :class:`~bisect_lab.campaign.Session` reporting each trial to a new :class:`Progress`."""
    from ..campaigns import Session
    from ..store import Store
    progress = Progress(quiet=quiet, metric=exp.benchmark.metric)
    store = Store(ctx.results_dir(exp))
    hosts = ctx.hosts(exp)
    s = Session(exp, store, hosts, log=progress.log, on_trial=progress.trial, on_plan=progress.plan,
                on_replay=progress.replayed)
    return s, progress


def _resume_hint(session) -> str:
    cid = getattr(session, "campaign", None)
    return f"; continue with --resume {cid}" if cid else ""


def with_session(ctx: Context, exp, body):
    """``body(session)``'s result; an interrupt says how to resume and exits 130."""
    session, progress = open_session(ctx, exp, quiet=ctx.json and not sys.stderr.isatty())
    try:
        return body(session)
    except KeyboardInterrupt:
        progress.stop()
        print(f"interrupted{_resume_hint(session)}", file=sys.stderr)
        raise SystemExit(130)
    finally:
        progress.stop()
        session.close()
        session.store.close()
