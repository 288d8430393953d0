"""The CPU demo's shape in simulation: how often `attribute` names the whole planted pattern.

    python benchmarks/simulate_demo_shape.py [--cv 0.05] [--reps 100] [--max-trials 150]

Five factors, one culprit at 25% and an AND pair at 15% (a patch that only hurts with its env
var set), lognormal noise at the given CV: `mla-gather-cast`, `oea-topk` x `OEA_ENABLE` and two
no-ops, as in `bisect-lab attribute --good none --bad "all OEA_ENABLE=1"`. Prints the share of runs
that named exactly the three culprits, that also reported the pair as an interaction ("and" or
"synergy"), that reported exactly one "and" of the pair, and the trials used (docs/attribution.md).
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import zlib  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import simulate_attribution as sa  # noqa: E402
from bisect_lab import attribute_factors  # noqa: E402


def one(args):
    cv, max_trials, rep = args
    sc = sa.Scenario("demo", "demo shape", (5,), (0.25, 0.15, 0.0), kind="story", cv=cv)
    seed = [zlib.crc32(b"demo"), int(cv * 1000), rep]
    # make_measure draws the culprits first: the same draw tells which two make the pair
    idx = np.random.default_rng(seed).choice(5, size=3, replace=False)
    names, measure, truth, _ = sa.make_measure(sc, 5, np.random.default_rng(seed))
    pair = frozenset((names[idx[1]], names[idx[2]]))
    v = attribute_factors(names, measure, seed=rep, max_trials=max_trials)
    full = v.status == "culprits" and list(v.culprits) == truth
    kinds = {frozenset(i.factors): i.kind for i in v.interactions}
    return (full, full and kinds.get(pair) in ("and", "synergy"),
            full and [(frozenset(i.factors), i.kind) for i in v.interactions] == [(pair, "and")],
            bool(set(v.culprits) - set(truth)), v.trials)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cv", type=float, default=0.05)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--max-trials", type=int, default=150)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = ap.parse_args(argv)
    with mp.Pool(a.jobs) as p:
        res = p.map(one, [(a.cv, a.max_trials, r) for r in range(a.reps)], chunksize=1)
    full, pair, exact, false, trials = (np.array(x) for x in zip(*res))
    print(f"demo shape, CV {a.cv:.0%}, max_trials {a.max_trials}, {a.reps} runs: full set {full.mean():.0%}, "
          f"pair reported {pair.mean():.0%}, exactly 'and' {exact.mean():.0%}, false culprit {false.mean():.0%}, "
          f"trials mean {trials.mean():.1f} p95 {np.percentile(trials, 95):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
