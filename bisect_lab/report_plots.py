"""Figures of reports (layer 6): matplotlib on the Agg backend, returned as PNG bytes.

Each function takes plain data (lists, dicts) and returns ``bytes`` of a PNG, or None when there is
nothing to draw. Colours: one per arm in a fixed order; red marks what went wrong (regressions,
culprits, failures), so a reader's eye lands there first.
"""
from __future__ import annotations

import io
import math
import statistics

import matplotlib

matplotlib.use("Agg")        # no display: reports render on CI machines and over SSH
import matplotlib.pyplot as plt  # noqa: E402

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a"]
BAD = "#d62728"
DPI = 110


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _short(label: str, n: int = 48) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


def arm_colours(arms: list[str], counts: dict[str, int] | None = None) -> dict[str, str | None]:
    """A colour per arm for the run-order plot: the fixed palette up to 12 arms, matplotlib's
    tab20 up to 20; beyond that the 19 arms with most trials keep a colour (an attribution's good
    and bad ends and its most measured combinations) and the rest are None (drawn grey, one legend
    entry "other arms")."""
    if len(arms) <= len(PALETTE):
        return {a: PALETTE[k] for k, a in enumerate(arms)}
    tab20 = [matplotlib.colors.to_hex(c) for c in plt.get_cmap("tab20").colors]
    if len(arms) <= len(tab20):
        return {a: tab20[k] for k, a in enumerate(arms)}
    counts = counts or {}
    keep = sorted(arms, key=lambda a: (-counts.get(a, 0), arms.index(a)))[:len(tab20) - 1]
    ordered = [a for a in arms if a in keep]
    colours: dict[str, str | None] = {a: tab20[k] for k, a in enumerate(ordered)}
    colours.update({a: None for a in arms if a not in colours})
    return colours


def run_order(points: list[tuple[int, str, float | None]], metric: str, arms: list[str]) -> bytes | None:
    """Each trial's value in run order, one colour per arm with a legend (see :func:`arm_colours`
    for many arms); failed trials as red ticks at the bottom.

    ``points``: (trial index, arm, value or None for a failed trial). A rolling median per arm
    (window 5) makes drift over the campaign visible.
    """
    if not any(v is not None for _, _, v in points):
        return None
    counts: dict[str, int] = {}
    for _, a, v in points:
        if v is not None:
            counts[a] = counts.get(a, 0) + 1
    colours = arm_colours(arms, counts)
    fig, ax = plt.subplots(figsize=(9, 3.4))
    others = [a for a in arms if colours.get(a) is None and counts.get(a)]
    for arm in arms:
        xs = [i for i, a, v in points if a == arm and v is not None]
        ys = [v for i, a, v in points if a == arm and v is not None]
        if not xs:
            continue
        color = colours.get(arm)
        if color is None:
            label = f"other arms ({len(others)})" if arm == others[0] else None
            ax.plot(xs, ys, "o", ms=3, color="#999999", alpha=0.6, label=label)
            continue
        ax.plot(xs, ys, "o", ms=4, color=color, alpha=0.85, label=_short(arm))
        if len(ys) >= 5:
            w = 5
            roll = [statistics.median(ys[max(0, j - w + 1): j + 1]) for j in range(len(ys))]
            ax.plot(xs, roll, "-", lw=1.2, color=color, alpha=0.6)
    fails = [i for i, _, v in points if v is None]
    if fails:
        ax.plot(fails, [0] * len(fails), "|", color=BAD, ms=14, mew=2, transform=ax.get_xaxis_transform(),
                label=f"failed trial ({len(fails)})", clip_on=False)
    ax.set_xlabel("trial (run order)")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.set_title("Every trial in the order it ran (lines: rolling median of 5)", fontsize=10)
    entries = len(ax.get_legend_handles_labels()[1])
    ax.legend(fontsize=8 if entries <= 12 else 6.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False,
              ncol=1 if entries <= 12 else 2)
    return _png(fig)


def distributions(values: dict[str, list[float]], metric: str, higher_is_better: bool) -> bytes | None:
    """One row per arm: box plot plus every value (jittered), median marked; arms top to bottom."""
    arms = [a for a, v in values.items() if v]
    if not arms:
        return None
    import random
    rng = random.Random(0)       # fixed jitter: the same report twice gives the same picture
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(arms) + 1.3))
    data = [values[a] for a in arms]
    pos = list(range(len(arms), 0, -1))
    style = dict(positions=pos, widths=0.5, showfliers=False, medianprops={"color": "black"},
                 boxprops={"color": "#999999"}, whiskerprops={"color": "#999999"}, capprops={"color": "#999999"})
    try:
        ax.boxplot(data, orientation="horizontal", **style)      # matplotlib >= 3.10
    except TypeError:
        ax.boxplot(data, vert=False, **style)                    # older: the same, spelled the old way
    for k, (p, d) in enumerate(zip(pos, data)):
        ax.plot(d, [p + rng.uniform(-0.15, 0.15) for _ in d], "o", ms=4, alpha=0.8, color=PALETTE[k % len(PALETTE)])
    ax.set_yticks(pos)
    ax.set_yticklabels([f"{_short(a)}  (n={len(values[a])})" for a in arms], fontsize=8)
    ax.set_xlabel(f"{metric} ({'higher' if higher_is_better else 'lower'} is better)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("Distribution of each arm's values", fontsize=10)
    return _png(fig)


def effects(rows: list[dict], *, min_effect: float, title: str) -> bytes | None:
    """Forest plot: one row per factor, effect in % with its interval; the band is +-min_effect.

    ``rows``: dicts with ``name``, ``ratio``, ``ci_low``, ``ci_high`` and ``culprit`` (bool).
    """
    rows = [r for r in rows if r.get("ratio") is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.4))
    ys = list(range(len(rows), 0, -1))
    ax.axvspan(-min_effect * 100, min_effect * 100, color="#dddddd", alpha=0.6, lw=0,
               label=f"smaller than the minimum effect (±{min_effect * 100:g}%)")
    ax.axvline(0, color="black", lw=0.8)
    for y, r in zip(ys, rows):
        c = BAD if r.get("culprit") else "#1f77b4"
        x = (r["ratio"] - 1) * 100
        lo = (r["ci_low"] - 1) * 100 if r.get("ci_low") is not None else x
        hi = (r["ci_high"] - 1) * 100 if r.get("ci_high") is not None else x
        ax.plot([lo, hi], [y, y], "-", color=c, lw=2)
        ax.plot([x], [y], "o", color=c, ms=7)
        ax.annotate(f"{x:+.1f}%", (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8, color=c)
    ax.set_yticks(ys)
    ax.set_yticklabels([_short(r["name"], 40) for r in rows], fontsize=9)
    ax.set_xlabel("effect on the metric, % (dot: estimate; bar: 95% interval; red: named culprit)")
    ax.set_ylim(0.3, len(rows) + 0.8)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title, fontsize=10)
    return _png(fig)


def bisection_path(path: list[tuple[int, float | None]], labels: list[str], *, culprit: int | None,
                   metric: str, good_level: float | None = None, bad_level: float | None = None,
                   discounted: set[int] | frozenset[int] = frozenset()) -> bytes | None:
    """Bisection path: left, each measured commit's values by position (culprit in red; readings
    the noise model discounted as stalls hollow); right, which position was measured at each step."""
    if not path:
        return None
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    n = max(len(labels), max(p for p, _ in path) + 1)
    for i, (p, v) in enumerate(path):
        if v is None:
            ax.plot([p], [0], "x", color="#999999", transform=ax.get_xaxis_transform())
            continue
        c = "#555555" if culprit is None else (BAD if p >= culprit else "#2ca02c")
        if i in discounted:
            ax.plot([p], [v], "o", ms=7, mfc="none", color=c, label="discounted (stall)")
        else:
            ax.plot([p], [v], "o", ms=5, color=c, alpha=0.8)
    if discounted:
        handles = [h for h, lab in zip(*ax.get_legend_handles_labels()) if lab == "discounted (stall)"][:1]
        if handles:
            ax.legend(handles, ["discounted (stall)"], fontsize=7, loc="best")
    if culprit is not None:
        ax.axvline(culprit - 0.5, color=BAD, ls="--", lw=1)
        ax.annotate("first bad", (culprit - 0.45, 1.0), xycoords=("data", "axes fraction"), va="top",
                    fontsize=8, color=BAD)
    for lvl, name in ((good_level, "good level"), (bad_level, "bad level")):
        if lvl is not None:
            ax.axhline(lvl, color="#999999", ls=":", lw=1)
    step = max(1, math.ceil(n / 12))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks)
    ax.set_xticklabels([labels[t][:7] if t < len(labels) else str(t) for t in ticks], rotation=45, fontsize=7)
    ax.set_xlabel("commit (oldest = last good, left)")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.set_title("Values per commit (green: good side, red: bad side)", fontsize=10)
    ax2.plot(range(1, len(path) + 1), [p for p, _ in path], "-o", ms=3, color="#1f77b4")
    if culprit is not None:
        ax2.axhline(culprit, color=BAD, ls="--", lw=1)
    ax2.set_xlabel("trial")
    ax2.set_ylabel("commit position")
    ax2.set_title("Search path", fontsize=10)
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def sweep_series(series: dict[str, list[tuple[int, list[float]]]], nights: list[str], metric: str, *,
                 change_points: dict[str, list[int]], alerts: dict[str, list[int]]) -> bytes | None:
    """Sweep series: per arm, every trial (dots) and the night medians (line) over nights; change
    points as dashed verticals, alerted nights as red rings."""
    if not any(series.values()):
        return None
    arms = list(series)
    fig, axes = plt.subplots(len(arms), 1, figsize=(9, 2.4 * len(arms) + 0.6), sharex=True, squeeze=False)
    for k, arm in enumerate(arms):
        ax = axes[k][0]
        color = PALETTE[k % len(PALETTE)]
        pts = series[arm]
        for i, vals in pts:
            ax.plot([i] * len(vals), vals, "o", ms=3, color=color, alpha=0.45)
        xs = [i for i, v in pts if v]
        meds = [statistics.median(v) for _, v in pts if v]
        ax.plot(xs, meds, "-", color=color, lw=1.6, label="night median")
        for cp in change_points.get(arm, []):
            ax.axvline(cp - 0.5, color="black", ls="--", lw=1)
            ax.annotate("change point", (cp - 0.45, 0.98), xycoords=("data", "axes fraction"), va="top", fontsize=7)
        for a in alerts.get(arm, []):
            m = dict(zip(xs, meds)).get(a)
            if m is not None:
                ax.plot([a], [m], "o", ms=13, mfc="none", mec=BAD, mew=2)
        ax.set_ylabel(metric, fontsize=8)
        ax.set_title(_short(arm, 80), fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    ax = axes[-1][0]
    step = max(1, math.ceil(len(nights) / 14))
    ax.set_xticks(list(range(0, len(nights), step)))
    ax.set_xticklabels([nights[i] for i in range(0, len(nights), step)], rotation=45, fontsize=7, ha="right")
    ax.set_xlabel("night (commit)")
    fig.suptitle("Series over nights (dots: trials; line: night median; dashed: change point; red ring: alert)",
                 fontsize=10)
    fig.tight_layout()
    return _png(fig)
