"""The CPU demo's shape in simulation: how often `attribute` names the whole planted pattern.

    python benchmarks/simulate_demo_shape.py [--cv 0.05] [--reps 100] [--max-trials 150]
    python benchmarks/simulate_demo_shape.py --burst-rate 0.02 --burst-len 6 --main --noref   # + bursts, beside both guards off one at a time

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
from bisect_lab.strategies.base import drive  # noqa: E402
from bisect_lab.strategies.staged import StagedAttribution  # noqa: E402


def one(args):
    cv, max_trials, rep, rate, length, variant = args
    sc = sa.Scenario("demo", "demo shape", (5,), (0.25, 0.15, 0.0), kind="story", cv=cv, burst_rate=rate,
                     burst_len=length)
    seed = [zlib.crc32(b"demo"), int(cv * 1000), rep]
    # make_measure draws the culprits first: the same draw tells which two make the pair
    idx = np.random.default_rng(seed).choice(5, size=3, replace=False)
    names, measure, truth, _ = sa.make_measure(sc, 5, np.random.default_rng(seed))
    pair = frozenset((names[idx[1]], names[idx[2]]))
    st = StagedAttribution(names, seed=rep, max_trials=max_trials)   # what attribute_factors runs
    # "main": the default without the adjacent-pair check; "noref": without the reference guard
    st.burst_guard = variant != "main"
    st.reference_guard = variant != "noref"
    v = drive(st, measure)
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
    ap.add_argument("--burst-rate", type=float, default=0.0, help="chance per trial that a burst of contention starts")
    ap.add_argument("--burst-len", type=int, default=6, help="trials a burst lasts (every reading 20-35%% slower)")
    ap.add_argument("--main", action="store_true", help="also run the default without the adjacent-pair burst check")
    ap.add_argument("--noref", action="store_true", help="also run the default without the reference guard")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = ap.parse_args(argv)
    bursts = f", bursts {a.burst_rate:.0%}/trial x {a.burst_len} trials" if a.burst_rate else ""
    for variant in ["default"] + ["main"] * a.main + ["noref"] * a.noref:
        with mp.Pool(a.jobs) as p:
            res = p.map(one, [(a.cv, a.max_trials, r, a.burst_rate, a.burst_len, variant) for r in range(a.reps)],
                        chunksize=1)
        full, pair, exact, false, trials = (np.array(x) for x in zip(*res))
        print(f"{variant:<7} demo shape, CV {a.cv:.0%}{bursts}, max_trials {a.max_trials}, "
              f"{a.reps} runs: full set {full.mean():.0%}, pair reported {pair.mean():.0%}, exactly 'and' "
              f"{exact.mean():.0%}, false culprit {false.mean():.0%}, trials mean {trials.mean():.1f} "
              f"p95 {np.percentile(trials, 95):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
