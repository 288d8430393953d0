"""Plot the demo's GPU ground truth (docs/gpu/demo_gpu_raw.json, measured on an H200) and the
GPU attribution campaign's trials in run order (docs/gpu/attribute_gpu_*.sqlite).

    python docs/gpu/make_plot.py      # writes docs/gpu/demo_gpu.png
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


if __name__ == "__main__":
    main()
