"""``bisect-lab log``: the campaigns in the results folder, newest first."""
from __future__ import annotations

import time

from ..errors import EXIT_OK
from . import _options
from ._context import Context, console, to_json


def setup_arguments(subparsers):
    lg = subparsers.add_parser("log", help="list campaigns: id, kind, status, answer, trials, when (newest first)")
    lg.add_argument("-n", "--limit", type=_options.positive_int, default=None, metavar="N",
                    help="show only the N newest campaigns")
    lg.add_argument("--kind", choices=["run", "attribute", "bisect", "sweep", "pytest", "compare"], default=None,
                    help="only campaigns of this kind")
    _options.add_json(lg, help="print the list as one JSON array")
    lg.set_defaults(func=run_from_args)
    return lg


def run_from_args(args) -> int:
    return run(Context.from_args(args), limit=args.limit, kind=args.kind)


def answer_of(c) -> str:
    """A campaign's answer in a few words, from its stored result (what ``report`` opens with)."""
    r = c.result or {}
    if not r:
        return "-"
    if c.kind == "bisect":
        sha = r.get("commit")
        return f"{r.get('status', '?')} {sha[:12]}" if sha else str(r.get("status", "?"))
    if c.kind == "attribute":
        culprits = r.get("culprits") or []
        return f"{r.get('status', '?')}: {', '.join(culprits)}" if culprits else str(r.get("status", "?"))
    comps = r.get("comparisons") or []
    if comps:
        from ..summaries import speed_words
        hib = r.get("higher_is_better", True)
        words = []
        for cmp in comps[:3]:
            # as `run` says it ("all is 23.6% slower than none"), not a signed ratio beside "different"
            a, b, verdict = cmp.get("a", "?"), cmp.get("b", "?"), cmp.get("verdict")
            change = speed_words(cmp.get("ratio"), hib)      # the ratio is b's metric over a's
            if verdict == "different" and change != "-":
                words.append(f"{b} is {change} than {a}")
            elif verdict == "same":
                words.append(f"{b} performs like {a}")
            else:
                words.append(f"{b} vs {a}: not settled" + (f" ({change} so far)" if change != "-" else ""))
        return "; ".join(words) + (f"; {len(comps) - 3} more" if len(comps) > 3 else "")
    return str(r.get("status") or "-")


def entries(store, *, kind: str | None = None, limit: int | None = None) -> list[dict]:
    """The campaigns of ``store`` as plain dicts, newest first."""
    out = []
    campaigns = list(reversed(store.campaigns(kind)))
    for c in campaigns[:limit] if limit else campaigns:
        out.append({"id": c.id, "kind": c.kind, "status": c.status, "answer": answer_of(c),
                    "trials": len(store.trials(c.id)), "created": c.created, "finished": c.finished,
                    "experiment": c.experiment})
    return out


def run(ctx: Context, *, limit: int | None = None, kind: str | None = None) -> int:
    """List the campaigns of the results folder (``--json``: one array), newest first."""
    from ..errors import UsageError
    from ..store import DB_NAME, Store
    where = ctx.results_dir()
    if not (where / DB_NAME).is_file():
        raise UsageError(f"no results database at {where / DB_NAME}: run a campaign first, or pass --results")
    store = Store(where, create=False, read_only=True)
    try:
        rows = entries(store, kind=kind, limit=limit)
    finally:
        store.close()
    if ctx.json:
        print(to_json(rows))
        return EXIT_OK
    from rich.markup import escape
    from rich.table import Table
    from ..redact import redact_text
    t = Table(title=escape(f"campaigns in {where}"))
    for col in ("campaign", "kind", "status", "answer", "trials", "when"):
        t.add_column(col)
    for r in rows:
        t.add_row(escape(r["id"]), r["kind"], r["status"], escape(redact_text(r["answer"])), str(r["trials"]),
                  time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"])))
    console().print(t)
    return EXIT_OK
