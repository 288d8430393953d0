"""A campaign session for one command: its store, hosts and progress display opened together,
and closed together however the campaign ends (Ctrl-C and SIGTERM included); and what a
``--resume`` reads back from the stored campaign before the session opens (its experiment, arms
and parameters), so that ``--resume CAMPAIGN`` alone continues it."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..errors import UsageError
from ._context import Context, experiment_or_demo
from ._progress import Progress


def open_session(ctx: Context, exp, *, quiet: bool):
    """A :class:`~bisect_lab.campaigns.Session` reporting each trial to a new :class:`Progress`
    (one line per trial on stderr under ``--json``)."""
    from ..campaigns import Session
    from ..paths import remember_results_dir
    from ..store import Store
    where = ctx.results_dir(exp)
    store = Store(where)
    if not ctx.chose_results:
        remember_results_dir(where)      # `report latest` from any folder reads it
    hosts = ctx.hosts(exp)
    s = None

    def subject_of(sha):
        return s.workers[0].trees.commit_info(sha).subject if s is not None and s.workers else None

    progress = Progress(quiet=quiet, metric=exp.benchmark.metric, lines=ctx.json,
                        kind_of=lambda cid: store.campaign(cid).kind, subject_of=subject_of)
    s = Session(exp, store, hosts, log=progress.log, on_trial=progress.trial, on_plan=progress.plan,
                on_replay=progress.replayed)
    return s, progress


def _resume_hint(session) -> str:
    return f"; continue with --resume {session.campaign}" if session.campaign else ""


def with_session(ctx: Context, exp, body):
    """``body(session)``'s result; an interrupt says how to resume and exits 130."""
    session, progress = open_session(ctx, exp, quiet=False)
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


# ---------------------------------------------------------------------- --resume read back
def resume_point(ctx: Context, kind: str, experiment: str | None, resume: str | bool | None, *,
                 read_back: bool):
    """``(experiment, resume, stored campaign or None)`` for a ``kind`` command.

    Without ``--resume``: the EXPERIMENT, else the bundled demo, as for every fresh run. With it,
    the stored campaign is read first when ``read_back`` (the command line left some of the
    campaign's parameters out) or when no EXPERIMENT was given. Without an EXPERIMENT the
    campaign's experiment file is the experiment, and a bare ``--resume`` (the latest unfinished
    campaign of ``kind``, of any experiment) names the campaign found on stderr. Whenever a
    campaign is read, ``resume`` becomes its id. An EXPERIMENT given must be the campaign's own, as :meth:`Session.open` checks.
    """
    from ..config import load_experiment
    if not resume:
        return experiment_or_demo(experiment), resume, None
    if isinstance(resume, str) and experiment is None and resume.endswith(".toml"):
        experiment, resume = resume, True        # `--resume exp.toml`: the option took the EXPERIMENT
    exp = load_experiment(Path(experiment)) if experiment else None
    if exp is not None and not read_back:
        return exp, resume, None
    c = _stored_campaign(ctx, kind, resume, exp)
    if exp is None:
        exp = _experiment_of(c)
        if resume is True:
            print(f"resuming {c.id} ({c.status}), the latest unfinished {kind} campaign in "
                  f"{ctx.results_dir(exp)}: {c.experiment}", file=sys.stderr)
    # the session opens the campaign read here, not whichever is latest by then
    return exp, c.id, c


def stored_param(c, key: str, option: str):
    """Parameter ``key`` of campaign ``c`` for the option ``option`` that the command line left
    out. An arm whose secret the results hold only as a keyed hash (docs/contracts.md, Secrets)
    cannot be read back: that is a usage error asking for the arm again."""
    from ..redact import is_tag
    if key not in c.params:
        raise UsageError(f"campaign {c.id} has no stored {key}: give {option}")
    value = c.params[key]
    for spec in value if isinstance(value, list) else [value]:
        try:
            words = shlex.split(spec)
        except (TypeError, ValueError):
            continue
        if any(is_tag(w.partition("=")[2]) for w in words):
            raise UsageError(f"campaign {c.id} holds its arm {spec!r} with a secret stored only as a keyed "
                             f"hash: give that arm again with {option} and the real value")
    return value


def _stored_campaign(ctx: Context, kind: str, resume: str | bool, exp):
    from ..campaigns.session import campaign_to_resume, experiment_key
    from ..store import DB_NAME, Store
    where = ctx.results_dir(exp) / DB_NAME
    if not where.is_file():
        raise UsageError(f"nothing to resume: no results database at {where}")
    store = Store(where.parent, create=False)
    try:
        return campaign_to_resume(store, kind, resume, experiment_key(exp) if exp is not None else None)
    finally:
        store.close()


def _experiment_of(c, verb: str = "resume"):
    """The experiment a campaign was run with, from the file it names."""
    from ..config import load_experiment
    path = Path(c.experiment) if c.experiment else None
    if path is None or not path.is_file():
        raise UsageError(f"cannot {verb} {c.id}: its experiment file {c.experiment} no longer exists "
                         f"(put it back at that path)")
    return load_experiment(path)
