"""Human output of ``bisect-lab diff``."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def render_diff(res: dict, console: Console) -> None:
    a, b = res["a"], res["b"]
    # refs, arms (env values) and metric names are the user's text: escaped, never rich markup
    console.print(escape(f"A = {a['ref']} (campaign {a['campaign']}, trial {a['trial']})"))
    console.print(escape(f"B = {b['ref']} (campaign {b['campaign']}, trial {b['trial']})"))
    for side in (a, b):
        for arm, ms in side["metrics"].items():
            line = ", ".join(f"{k} {v['median']:.4g} (n={v['n']})" for k, v in sorted(ms.items())[:4])
            console.print(escape(f"  {side['ref']}: {arm}: {line}"), highlight=False)
    t = Table(title="What differed")
    for col in ("what", "A", "B"):
        t.add_column(col, overflow="fold")      # a secret arm differs by its whole tag
    for c in res["config"]:
        t.add_row(escape(c["what"]), escape(str(c["a"])), escape(str(c["b"])))
    for c in res["fingerprint"]:
        t.add_row(escape(c["path"]), escape(str(c["a"])), escape(str(c["b"])))
    if res["config"] or res["fingerprint"]:
        console.print(t)
    else:
        console.print("no differences in configuration or fingerprint")
    for ref in res.get("fingerprint_missing", []):
        console.print(f"[yellow]note:[/] {escape(str(ref))} has no stored fingerprint (no successful trial)")
