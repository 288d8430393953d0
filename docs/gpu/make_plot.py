"""Plot the demo's GPU ground truth (docs/gpu/demo_gpu_raw.json, measured on an H200) and the
GPU attribution campaign's trials in run order (docs/gpu/attribute_gpu_*.sqlite).

    python docs/gpu/make_plot.py      # writes docs/gpu/demo_gpu.png and docs/gpu/demo_gpu_tp2.png

The second figure is the two-GPU run (docs/gpu.md, section 5): TPOT per arm of the NCCL env sweep
and of the propagation check, and the attribution campaign's trials in run order.
"""
import json
import sqlite3
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent


def main():
    raw = json.loads((HERE / "demo_gpu_raw.json").read_text())
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    arms = list(raw)
    for i, arm in enumerate(arms):
        vals = [r["output_throughput"] for r in raw[arm]]
        ax1.scatter([i] * len(vals), vals, s=30, alpha=0.8)
        ax1.hlines(sorted(vals)[len(vals) // 2], i - 0.25, i + 0.25, color="black")
        path = raw[arm][0].get("verify_path", "")
        ax1.annotate(path, (i, max(vals)), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax1.set_xticks(range(len(arms)), arms, rotation=20, ha="right", fontsize=8)
    ax1.set_ylabel("output throughput (tok/s)")
    ax1.set_title("sglang_mini on one H200: per-arm throughput (verify path labelled)", fontsize=9)
    dbs = sorted(HERE.glob("attribute_gpu*.sqlite"))
    if dbs:
        db = sqlite3.connect(dbs[-1])
        rows = db.execute("SELECT trial, arm, status, metrics FROM trials ORDER BY trial").fetchall()
        colors = {}
        for trial, arm, status, metrics in rows:
            v = json.loads(metrics).get("output_throughput")
            if status == "ok" and v is not None:
                c = colors.setdefault(arm, f"C{len(colors) % 10}")
                ax2.scatter(trial, v, color=c, label=arm if arm not in ax2.get_legend_handles_labels()[1] else None)
        ax2.set_xlabel("trial (run order)")
        ax2.set_ylabel("output throughput (tok/s)")
        ax2.set_title(f"bisect-lab attribute on the GPU ({dbs[-1].name}): arms measured", fontsize=9)
        ax2.legend(fontsize=6, loc="best")
    fig.tight_layout()
    fig.savefig(HERE / "demo_gpu.png", dpi=110)


def _trials(db_name: str, kind: str, metric: str):
    db = sqlite3.connect(HERE / db_name)
    rows = db.execute("SELECT t.trial, t.arm, t.status, t.metrics FROM trials t JOIN campaigns c ON c.id = t.campaign "
                      "WHERE c.kind = ? ORDER BY t.campaign, t.trial", (kind,)).fetchall()
    return [(trial, arm, json.loads(m).get(metric)) for trial, arm, status, m in rows if status == "ok"]


def _short(arm: str) -> str:
    """'all-minus mla-gather-cast,sm120-fixes ENV' -> 'nccl,oea ENV' (the optional patches present)."""
    words = arm.split()
    if words[0] == "all-minus":
        gone = set(words[1].split(","))
        kept = [short for name, short in (("oea-topk", "oea"), ("nccl-env-propagation", "nccl"),
                                          ("sm120-fixes", "sm120"), ("mla-gather-cast", "mla")) if name not in gone]
        words = ["only " + ",".join(kept)] + words[2:]
    return " ".join(words).replace("nccl-env-propagation", "nccl")


def tp2():
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    groups: dict[str, list[float]] = {}
    for _, arm, v in _trials("tp2_env_sweep.sqlite", "run", "mean_tpot_ms") + _trials("tp2_attribute2.sqlite", "run", "mean_tpot_ms"):
        groups.setdefault(_short(arm), []).append(v)
    for i, (arm, vals) in enumerate(groups.items()):
        ax1.scatter([i] * len(vals), vals, s=30, alpha=0.8)
        ax1.hlines(sorted(vals)[len(vals) // 2], i - 0.25, i + 0.25, color="black")
    ax1.set_xticks(range(len(groups)), list(groups), rotation=25, ha="right", fontsize=7)
    ax1.set_ylabel("mean TPOT (ms, lower is better)")
    ax1.set_title("tp=2 on two H200s: NCCL env sweep and propagation check", fontsize=9)
    colors: dict[str, str] = {}
    for trial, arm, v in _trials("tp2_attribute2.sqlite", "attribute", "mean_tpot_ms"):
        a = _short(arm)
        c = colors.setdefault(a, f"C{len(colors) % 10}")
        ax2.scatter(trial, v, color=c, label=a if a not in ax2.get_legend_handles_labels()[1] else None)
    ax2.set_xlabel("trial (run order)")
    ax2.set_ylabel("mean TPOT (ms)")
    ax2.set_title("bisect-lab attribute, tp=2 (round 2): culprits oea-topk + env:NCCL_P2P_DISABLE", fontsize=9)
    ax2.legend(fontsize=6, loc="best")
    fig.tight_layout()
    fig.savefig(HERE / "demo_gpu_tp2.png", dpi=110)


if __name__ == "__main__":
    main()
    tp2()
