"""The genie floor with and without a noise prior, side by side on the same seeds.

The genie of ``attribution_floor.py --genie`` (a design that knows the culprits and measures only the
arms that prove them, judged by the strategy's own posterior, stop rule and significance guard),
run twice per seed: without a prior, and with the prior a simulated earlier campaign leaves
(``simulate_attribution.simulated_prior``: 40 readings at the true CV). It says what knowing the
noise can buy at the product's standard of proof, whatever the search does.

    python benchmarks/prior_floor.py --cells one5:10 --reps 100
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def genie(task) -> tuple:
    """One seed: trials the genie needs and whether it named the truth, without / with a prior."""
    import simulate_attribution as sa
    from attribution_floor import genie_run
    from bisect_lab.strategies.attribution import AttributionStrategy

    key, n, rep = task
    out = []
    for with_prior in (False, True):
        names, measure, truth, _ = sa.seeded_measure(key, n, rep)
        kw = {"noise_prior": sa.simulated_prior(sa.scenario(key).cv, rep)} if with_prior else {}
        s = AttributionStrategy(names, seed=rep, max_trials=400, **kw)
        out.append(genie_run(s, names, measure, truth, n, rep))
    return key, n, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="one5:10", help="scenario:N,... (simulate_attribution.py's keys)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = ap.parse_args(argv)
    cells = [(c.split(":")[0], int(c.split(":")[1])) for c in a.cells.split(",")]
    tasks = [(k, n, r) for k, n in cells for r in range(a.reps)]
    t0 = time.time()
    with mp.Pool(a.jobs) as pool:
        res = pool.map(genie, tasks, chunksize=4)
    print(f"# genie floor without / with a noise prior: {a.reps} seeds per cell, {a.jobs} job(s), "
          f"{time.time() - t0:.0f} s")
    print(f"{'cell':<12} | {'no prior: mean':>15} {'right':>6} | {'prior: mean':>12} {'right':>6}")
    for k, n in cells:
        rows = [r[2] for r in res if r[:2] == (k, n)]
        none = np.array([r[0] for r in rows], float)
        prior = np.array([r[1] for r in rows], float)
        print(f"{k + ':' + str(n):<12} | {none[:, 0].mean():>15.1f} {none[:, 1].mean():>6.0%} | "
              f"{prior[:, 0].mean():>12.1f} {prior[:, 1].mean():>6.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
