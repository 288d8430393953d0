"""Wall time of the CPU demo's `run` on a real Slurm with 1 and with 2 job slots (`max_jobs`).

Each configuration runs the bundled demo experiment (experiments/demo.toml, CPU) with
`[cluster] engine = "slurm"` through the real CLI in a fresh results and cache folder, the same
total number of trials on both sides: `run` gives every job slot every arm `--repeat` times, so
one slot gets twice the repeats of two. Wall time counts everything a user waits for (tree
preparation, queue wait, job start, trials, stopping the jobs).

    python benchmarks/slurm_wall_time.py [--repeat 4] [--partition NAME] [--slots 1,2]

Needs a Slurm whose nodes share this machine's filesystem (CI: .ci/slurm-setup.sh).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def experiment(folder: Path, slots: int, partition: str | None) -> Path:
    text = (ROOT / "experiments" / "demo.toml").read_text()
    text = text.replace('"../demo"', f'"{ROOT / "demo"}"').replace('"../patches/demo"', f'"{ROOT / "patches" / "demo"}"')
    text += f'\n[cluster]\nengine = "slurm"\nmax_jobs = {slots}\ntime_limit_min = 30\n'
    if partition:
        text += f'partition = "{partition}"\n'
    exp = folder / f"demo-slurm-{slots}.toml"
    exp.write_text(text)
    return exp


def one(slots: int, total_repeat: int, partition: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bl-slurm-{slots}-") as tmp:
        tmp = Path(tmp)
        exp = experiment(tmp, slots, partition)
        repeat = total_repeat // slots
        cmd = [sys.executable, "-m", "bisect_lab", "--results", str(tmp / "res"), "--cache", str(tmp / "cache"),
               "run", str(exp), "--patches", "all", "--patches", "none", "--repeat", str(repeat)]
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        wall = time.monotonic() - t0
        if p.returncode != 0:
            sys.exit(f"slots={slots}: bisect-lab exited {p.returncode}: {p.stderr.strip()[-500:]}")
        with sqlite3.connect(tmp / "res" / "bisect-lab.sqlite") as db:
            rows = db.execute("SELECT host, status, duration_s FROM trials").fetchall()
        waits = [float(m) for m in re.findall(r"after ([0-9.]+) s in the queue", p.stderr)]
        return {"slots": slots, "repeat": repeat, "trials": len(rows), "ok": sum(r[1] == "ok" for r in rows),
                "nodes": sorted({r[0] for r in rows}), "wall_s": wall,
                "trial_s": sum(r[2] for r in rows) / max(1, len(rows)),
                "queue_s": max(waits) if waits else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=4, help="repeats per arm with ONE slot (split over more)")
    ap.add_argument("--partition", default=None)
    ap.add_argument("--slots", default="1,2")
    a = ap.parse_args()
    if shutil.which("sbatch") is None:
        sys.exit("sbatch is not on PATH: start a Slurm first (.ci/slurm-setup.sh)")
    slots = [int(s) for s in a.slots.split(",")]
    if any(a.repeat % s for s in slots):
        sys.exit(f"--repeat {a.repeat} must split evenly over {slots} slots")
    res = [one(s, a.repeat, a.partition) for s in slots]
    print(f"CPU demo `run` (arms all, none) on Slurm; {os.cpu_count()} CPU cores on this machine")
    print(f"{'max_jobs':>8} {'repeat':>6} {'trials':>6} {'ok':>3} {'wall s':>7} {'vs 1':>6} "
          f"{'trial s':>7} {'queue s':>7}  nodes")
    base = res[0]["wall_s"]
    for r in res:
        print(f"{r['slots']:>8} {r['repeat']:>6} {r['trials']:>6} {r['ok']:>3} {r['wall_s']:>7.1f} "
              f"{r['wall_s'] / base:>5.2f}x {r['trial_s']:>7.2f} {r['queue_s']:>7.1f}  {', '.join(r['nodes'])}")


if __name__ == "__main__":
    main()
