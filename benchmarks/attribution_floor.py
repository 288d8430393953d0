"""How far is the attribution strategy from an oracle? (one culprit, CV 3%)

The oracle knows what the strategy must learn: the good and bad levels and the noise. It needs no
reference measurements, no regression gate and no confirmation arms; it only searches, choosing
each arm by expected information over the single-culprit hypotheses (the same posterior and
information code as the strategy, with the levels fixed), and stops when one factor holds 99%.
Its trial count is a floor that no design which has to *estimate* the levels can reach; the gap
to the real strategy, run on the same scenarios in the same run, is the price of not knowing them
(references, the gate, confirmation) rather than of the search itself.

    python benchmarks/attribution_floor.py [--reps 100] [--effects 0.05,0.25] [--n 5,10,20] [--and-pair]

A second floor, ``--genie``: a design that *knows the culprits* and measures only the arms that
prove them (good, bad, the strategy's confirmation arms of the true set and, for a pair, all but
each member) in balanced randomised blocks, scored by the strategy's own posterior, stop rule and
significance guard (``AttributionStrategy.proven``), on the main benchmark's scenarios and seeds,
beside the strategy itself. It must still learn the levels and the noise as the strategy does, so
its trial count is what the standard of proof costs even with no search at all:

    python benchmarks/attribution_floor.py --genie one5:5,one5:10,one5:20,and5:10 [--standards 0.99/0.9,0.95/0.8]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import zlib

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bisect_lab import attribute_factors  # noqa: E402
from bisect_lab.strategies.hypotheses import HypothesisSpace, Levels, Posterior  # noqa: E402

CV = 0.03
STOP = 0.99


def _scenario(n: int, effect: float, rep: int):
    rng = np.random.default_rng([zlib.crc32(b"floor"), n, int(effect * 1000), rep])
    culprit = int(rng.integers(n))
    shift = math.log1p(-effect)

    def measure_log(row: np.ndarray) -> float:
        return shift * bool(row[culprit]) + rng.normal(0, CV)

    return culprit, measure_log, rng


def _scenario_and(n: int, effect: float, rep: int):
    """An AND pair: the regression appears only when both culprits are bad."""
    rng = np.random.default_rng([zlib.crc32(b"floor-and"), n, int(effect * 1000), rep])
    pair = tuple(sorted(int(k) for k in rng.choice(n, size=2, replace=False)))
    shift = math.log1p(-effect)

    def measure_log(row: np.ndarray) -> float:
        return shift * bool(row[pair[0]] and row[pair[1]]) + rng.normal(0, CV)

    return pair, measure_log, rng


def oracle(n: int, effect: float, rep: int, kind: str = "single") -> tuple[int, bool]:
    """Trials the known-levels oracle needs, and whether it named the culprit(s). ``single``: one
    culprit, single-culprit hypotheses, stop at 99% on one factor; ``and``: an AND pair, the full
    hypothesis space (one culprit and every pair pattern), stop when two factors hold 99% each and
    no other 5% (the strategy's own per-factor rule)."""
    if kind == "single":
        truth, measure_log, rng = _scenario(n, effect, rep)
        space = HypothesisSpace(n, family_prior=(1.0, 0.0, 0.0, 0.0), max_pair_factors=0)
        log_prior = space.log_prior
    else:
        truth, measure_log, rng = _scenario_and(n, effect, rep)
        space = HypothesisSpace(n)
        log_prior = space.prior(space.allowed(-math.log1p(-effect), math.log1p(0.02)))
    shift = math.log1p(-effect)
    levels = Levels(0.0, shift, CV, CV, 1e-9, 1e-9, 30.0)
    loglik = np.zeros(space.size)
    trials = 0
    while True:
        lp = log_prior + loglik
        lp = lp - np.logaddexp.reduce(lp)
        post = Posterior(space, lp, levels)
        w = post.weights
        if kind == "single":
            if w.max() >= STOP or trials >= 400:
                return trials, int(np.argmax(w)) == truth
        else:
            marg = post.factor_marginals()
            top = np.argsort(-marg)[:2]
            if (marg[top].min() >= STOP and np.delete(marg, top).max() <= 0.05) or trials >= 400:
                return trials, tuple(sorted(int(k) for k in top)) == truth
        order = np.argsort(-post.factor_marginals())
        rows = [rng.random(n) < p for p in (0.2, 0.35, 0.5, 0.65, 0.8) for _ in range(6)]
        for k in range(1, n):                       # prefixes of the ranking: posterior splits
            r = np.zeros(n, bool)
            r[order[:k]] = True
            rows += [r, ~r]
        for h in np.argsort(-w)[:8]:                # the leading hypotheses' own arms
            r = np.zeros(n, bool)
            r[list(space.culprits(int(h)))] = True
            rows += [r, ~r]
            for f in space.culprits(int(h)):
                one = np.zeros(n, bool)
                one[f] = True
                rows += [one, ~one]
        cand = np.unique(np.array(rows), axis=0)
        row = cand[int(np.argmax(post.expected_information(cand)))]
        y = measure_log(row)
        pos = space.positions(row[None, :])[0]
        loglik += -0.5 * ((y - shift * pos) / CV) ** 2
        trials += 1


def strategy(n: int, effect: float, rep: int, kind: str = "single") -> tuple[int, bool]:
    truth, measure_log, _ = (_scenario if kind == "single" else _scenario_and)(n, effect, rep)
    names = [f"f{k:02d}" for k in range(n)]

    def measure(active):
        row = np.array([f in active for f in names])
        return 1000.0 * math.exp(measure_log(row))

    v = attribute_factors(names, measure, seed=rep, max_trials=400)
    want = [names[truth]] if kind == "single" else [names[k] for k in truth]
    return v.trials, v.status == "culprits" and v.culprits == want


def _genie_one(task) -> tuple:
    """One repetition of a simulate_attribution scenario: the genie and the strategy, same seed."""
    import simulate_attribution as sa
    from bisect_lab.strategies.attribution import AttributionStrategy

    key, n, rep, stop, set_p = task
    sc = next(s for s in sa.SCENARIOS if s.key == key)
    out = []
    for method in ("genie", "strategy"):
        rng = np.random.default_rng([zlib.crc32(key.encode()), n, rep])
        names, measure, truth, _ = sa.make_measure(sc, n, rng)
        if method == "strategy":
            v = attribute_factors(names, measure, seed=rep, max_trials=400,
                                  stop_probability=stop, set_probability=set_p)
            out.append((v.trials, v.status == "culprits" and v.culprits == truth))
            continue
        s = AttributionStrategy(names, seed=rep, max_trials=400, stop_probability=stop,
                                set_probability=set_p)
        C, everything = frozenset(truth), frozenset(names)
        arms = [frozenset(), everything] + s.confirmation_arms(C)
        if len(C) > 1:
            arms += [everything - {c} for c in sorted(C)]
        order = np.random.default_rng([zlib.crc32(b"genie"), n, rep])
        named, t = None, 0
        while named is None and t < 400:
            for k in order.permutation(len(arms)):
                s.tell(arms[k], measure(arms[k]))
                t += 1
                if t >= len(arms) and (named := s.proven()) is not None:
                    break
        out.append((t, named is not None and sorted(named) == truth))
    return key, n, out


def genie_main(cells: str, reps: int, standards: str, jobs: int) -> int:
    import multiprocessing as mp

    print(f"{'cell':10} {'standard':>9} | {'method':9} {'acc':>6} {'mean':>6} {'p95':>5}")
    for std in standards.split(","):
        stop, set_p = (float(x) for x in std.split("/"))
        tasks = [(c.split(":")[0], int(c.split(":")[1]), rep, stop, set_p)
                 for c in cells.split(",") for rep in range(reps)]
        with mp.Pool(jobs) as pool:
            res = pool.map(_genie_one, tasks, chunksize=2)
        for cell in cells.split(","):
            key, n = cell.split(":")[0], int(cell.split(":")[1])
            rows = [r[2] for r in res if r[0] == key and r[1] == n]
            for m, method in enumerate(("genie", "strategy")):
                t = np.array([r[m][0] for r in rows])
                acc = np.mean([r[m][1] for r in rows])
                print(f"{cell:10} {std:>9} | {method:9} {acc:6.1%} {t.mean():6.1f} "
                      f"{np.percentile(t, 95):5.0f}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--effects", default="0.05,0.25")
    ap.add_argument("--n", default="5,10,20")
    ap.add_argument("--and-pair", action="store_true",
                    help="also an AND pair at 5%% among 10 (full hypothesis space; slower)")
    ap.add_argument("--genie", metavar="CELLS", default="",
                    help="key:N cells of simulate_attribution (e.g. one5:10,and5:10): the genie floor")
    ap.add_argument("--standards", default="0.99/0.9",
                    help="with --genie: stop_probability/set_probability pairs, comma-separated")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = ap.parse_args(argv)
    if a.genie:
        return genie_main(a.genie, a.reps, a.standards, a.jobs)
    cells = [("single", effect, n) for effect in (float(x) for x in a.effects.split(","))
             for n in (int(x) for x in a.n.split(","))]
    if a.and_pair:
        cells.append(("and", 0.05, 10))
    print(f"{'kind':6} {'effect':>6} {'N':>3} | {'method':9} {'acc':>6} {'mean':>6} {'p95':>5} | seconds")
    for kind, effect, n in cells:
        for name, fn in (("oracle", oracle), ("strategy", strategy)):
            t0 = time.perf_counter()
            res = [fn(n, effect, rep, kind) for rep in range(a.reps)]
            t = np.array([r[0] for r in res])
            acc = np.mean([r[1] for r in res])
            print(f"{kind:6} {effect:6.0%} {n:3d} | {name:9} {acc:6.1%} {t.mean():6.1f} "
                  f"{np.percentile(t, 95):5.0f} | {time.perf_counter() - t0:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
