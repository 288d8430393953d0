"""Several nodes at once: simulated wall time and total trials for 1, 2, 4 and 8 nodes.

Pure simulation, seeded. A batch of k trials on k nodes takes one trial time (wall time is counted
in trial durations: ceil(batch / nodes) per batch). Item i of a batch runs on node i % nodes, as the
campaign driver pins it; every value is told with its node (``tell(item, value, block=node)``).
Nodes differ in level: every odd node reads ``--diffs`` slower on every arm (0, 1 and 3%).

Scenarios: attribution on the story's shape (one 25% culprit + an AND pair of 15%, among 10 factors,
CV 4%) and on one 5% culprit among 10 (CV 3%); bisection of a 10% step over 1,000 commits (CV 3%).
The 1-node row of each scenario is the baseline, run in the same invocation.

    python3 benchmarks/simulate_fleet.py            # 40 repetitions per cell
    python3 benchmarks/simulate_fleet.py --quick    # 4 repetitions, 1 and 4 nodes, a smoke run
    python3 benchmarks/simulate_fleet.py --only bisect --nodes 1,4 --first-rep 120 --reps 120  # held out
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import zlib
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bisect_lab.strategies.bisection import BisectionStrategy  # noqa: E402
from bisect_lab.strategies.staged import StagedAttribution  # noqa: E402
from simulate_attribution import seeded_measure  # noqa: E402

SCENARIOS = {"story": ("attribution, the story (25% + AND pair 15%), 10 factors, CV 4%", 10),
             "one5": ("attribution, one 5% culprit among 10, CV 3%", 10),
             "bisect": ("bisection, 10% step over 1,000 commits, CV 3%", 1000)}


def node_factor(node: int, diff: float) -> float:
    return (1.0 - diff) if node % 2 else 1.0


def run_attribution(key: str, n: int, rep: int, nodes: int, diff: float):
    names, measure, truth, _ = seeded_measure(key, n, rep)
    s = StagedAttribution(names, seed=rep, max_trials=400, hosts=nodes)
    wall = trials = 0
    while not s.done:
        batch = s.ask()
        if not batch:
            break
        wall += math.ceil(len(batch) / nodes)
        for i, arm in enumerate(batch):
            node = i % nodes
            s.tell(arm, measure(arm) * node_factor(node, diff), block=f"node{node}")
            trials += 1
    v = s.verdict()
    return v.status == "culprits" and sorted(v.culprits) == truth, wall, trials


def run_bisection(n: int, rep: int, nodes: int, diff: float):
    rng = np.random.default_rng([zlib.crc32(b"fleet-bisect"), rep])
    step = int(rng.integers(1, n))
    s = BisectionStrategy(n, seed=rep, max_trials=300, min_effect=0.05, parallel=nodes, hosts=nodes)
    wall = trials = 0
    while not s.done:
        batch = s.ask()
        if not batch:
            break
        wall += math.ceil(len(batch) / nodes)
        for i, pos in enumerate(batch):
            node = i % nodes
            level = 0.9 if pos >= step else 1.0
            s.tell(pos, 1000.0 * level * node_factor(node, diff) * math.exp(rng.normal(0, 0.03)),
                   block=f"node{node}")
            trials += 1
    v = s.verdict()
    return v.status == "culprit" and v.index == step, wall, trials


def run_one(args):
    key, rep, nodes, diff = args
    if key == "bisect":
        ok, wall, trials = run_bisection(SCENARIOS[key][1], rep, nodes, diff)
    else:
        ok, wall, trials = run_attribution(key, SCENARIOS[key][1], rep, nodes, diff)
    return key, nodes, diff, ok, wall, trials


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 repetitions, 1 and 4 nodes, 0 and 3%%")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--only", default="", help="comma-separated scenario keys: " + ", ".join(SCENARIOS))
    ap.add_argument("--nodes", default="", help="comma-separated node counts (default 1,2,4,8)")
    ap.add_argument("--diffs", default="", help="comma-separated node level differences (default 0,0.01,0.03)")
    ap.add_argument("--first-rep", type=int, default=0, help="first seed (a held-out set: e.g. 120)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = ap.parse_args(argv)
    reps = a.reps or (4 if a.quick else 40)
    keys = [k for k in a.only.split(",") if k] or list(SCENARIOS)
    nodes = [int(x) for x in a.nodes.split(",") if x] or ([1, 4] if a.quick else [1, 2, 4, 8])
    if 1 not in nodes:
        nodes = [1] + nodes              # the baseline, in the same run
    diffs = [float(x) for x in a.diffs.split(",") if x] or ([0.0, 0.03] if a.quick else [0.0, 0.01, 0.03])
    jobs = [(k, r, m, d) for k in keys for m in nodes for d in (diffs if m > 1 else [0.0])
            for r in range(a.first_rep, a.first_rep + reps)]
    if a.jobs > 1:
        with Pool(a.jobs) as p:
            out = p.map(run_one, jobs, chunksize=2)
    else:
        out = [run_one(j) for j in jobs]
    cells: dict = {}
    for key, m, d, ok, wall, trials in out:
        cells.setdefault((key, m, d), []).append((ok, wall, trials))
    print(f"{reps} repetitions per cell; wall time in trial durations (a batch of k on k nodes = 1)")
    print(f"{'scenario':<8} {'nodes':>5} {'diff':>5} {'right':>7} {'wall':>7} {'x 1 node':>8} "
          f"{'trials':>7} {'x 1 node':>8}")
    for key in keys:
        base = cells[(key, 1, 0.0)]
        bw, bt = np.mean([c[1] for c in base]), np.mean([c[2] for c in base])
        for m in nodes:
            for d in (diffs if m > 1 else [0.0]):
                c = cells[(key, m, d)]
                right = np.mean([x[0] for x in c])
                w, t = np.mean([x[1] for x in c]), np.mean([x[2] for x in c])
                print(f"{key:<8} {m:>5} {d:>5.0%} {right:>7.1%} {w:>7.1f} {w / bw:>8.2f} {t:>7.1f} {t / bt:>8.2f}")
    print("scenarios: " + "; ".join(f"{k}: {SCENARIOS[k][0]}" for k in keys))
    print("targets: 4 nodes <= 0.35x one node's wall time at >= 95% right, total trials <= 1.3x one node's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
