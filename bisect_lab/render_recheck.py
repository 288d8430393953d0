"""Human output of ``recheck``: was the old value real? (layer 6)."""
from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape

from .results import RecheckResult


def _pct(x) -> str:
    return "-" if not isinstance(x, (int, float)) or not math.isfinite(x) else f"{x * 100:.1f}%"


def _short(v) -> str:
    text = v if isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def render_recheck(res: dict | RecheckResult, console: Console) -> None:
    """The verdict in one sentence, today's launches, then what differs between then and now."""
    r = res if isinstance(res, RecheckResult) else RecheckResult.from_dict(res)
    level = f"{r.level * 100:.0f}%"
    where = "inside" if r.inside else "outside"
    ratio = r.old / r.today if r.today else float("nan")
    console.print(f"[bold]{escape(r.of)}[/bold]: {r.metric} {r.old:.4g} then"
                  + (f" (mean of {r.old_readings} readings of one launch)" if r.old_readings > 1 else "")
                  + f"; today {r.today:.4g} over {r.sessions} launches ({r.readings} readings)")
    console.print(f"the old value lies [bold]{where}[/bold] today's launch-to-launch distribution: "
                  f"{abs(r.sd_away):.1f} sd {'above' if r.sd_away > 0 else 'below'} today's mean "
                  f"({(ratio - 1) * 100:+.1f}%); {level} of launches like it fall in {r.low:.4g} .. {r.high:.4g}")
    if not r.inside:
        console.print("so the old reading is not what this arm gives on this machine today: look at what "
                      "differs below (or at what was different then)")
    console.print(f"launch-to-launch CV {_pct(r.between_cv)}, within a launch {_pct(r.within_cv)}")
    console.print(f"arm {escape(r.arm)} at {(r.commit or '?')[:12]}; recheck campaign {escape(r.campaign)}")
    if r.differences:
        console.print(f"differs between then and now ({len(r.differences)}):")
        for d in r.differences[:40]:
            console.print(f"  {escape(str(d['what']))}: {escape(_short(d['then']))} -> {escape(_short(d['now']))}")
        if len(r.differences) > 40:
            console.print(f"  ... and {len(r.differences) - 40} more (bisect-lab diff {escape(r.of)} {escape(r.campaign)})")
    else:
        console.print("no difference between the old fingerprint and today's")
    for ref in r.fingerprint_missing:
        console.print(f"[yellow]no fingerprint stored for {escape(ref)}[/yellow]")
    for w in r.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
