"""What going on as a thorough attribution costs (`attribute --resume CAMPAIGN --strategy thorough`).

A default campaign that named the large culprit of an unequal pair can go on as a thorough one: its
stored readings are replayed into the thorough search (an arm it asks for takes the next stored
reading of that arm, as the CLI's Executor does), and only what is missing is measured. Beside it,
in the same run and on the same scenario seeds: the default alone, the thorough strategy from the
start, and the default followed by a fresh thorough campaign (what a user paid before the resume
could change strategy). Trials of the resumed campaign count every stored reading, used or not.

    python benchmarks/attribution_escalation.py [--cells two20_5:10,two12_4:10,one25:10] [--reps 60]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from bisect_lab import attribute_factors  # noqa: E402
from simulate_attribution import seeded_measure  # noqa: E402


def one(args):
    key, n, rep = args
    names, measure, truth, _ = seeded_measure(key, n, rep)
    log = []

    def recorded(active):
        v = measure(active)
        log.append((active, v))
        return v
    default = attribute_factors(names, recorded, seed=rep, max_trials=400)
    stored = collections.defaultdict(collections.deque)
    for active, v in log:
        stored[active].append(v)
    fresh = [0]

    def replayed(active):
        if stored[active]:
            return stored[active].popleft()
        fresh[0] += 1
        return measure(active)
    resumed = attribute_factors(names, replayed, seed=rep, max_trials=400, thorough=True)
    names, measure2, truth, _ = seeded_measure(key, n, rep)
    thorough = attribute_factors(names, measure2, seed=rep, max_trials=400, thorough=True)
    right = lambda v: sorted(v.culprits) == sorted(truth)   # noqa: E731
    return (right(default), default.trials, right(resumed), len(log) + fresh[0],
            right(thorough), thorough.trials)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="two20_5:10,two12_4:10,one25:10")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = ap.parse_args(argv)
    from concurrent.futures import ProcessPoolExecutor
    print(f"# {a.reps} seeds per cell; acc = exactly the right culprits; mean trials")
    print(f"{'cell':12} | {'default':>13} | {'default, then resumed thorough':>30} | "
          f"{'thorough from the start':>23} | {'default + new thorough':>22}")
    for cell in a.cells.split(","):
        key, n = cell.split(":")
        with ProcessPoolExecutor(a.jobs) as ex:
            r = np.array(list(ex.map(one, [(key, int(n), rep) for rep in range(a.reps)])), dtype=float)
        print(f"{cell:12} | {r[:, 0].mean():5.0%} {r[:, 1].mean():6.1f} | {r[:, 2].mean():22.0%} {r[:, 3].mean():6.1f} | "
              f"{r[:, 4].mean():15.0%} {r[:, 5].mean():6.1f} | {r[:, 4].mean():14.0%} {r[:, 1].mean() + r[:, 5].mean():6.1f}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
