"""How few node-hours can the story's attribution take in sessions? A genie floor (issue 21).

The sessions benchmark (``simulate_sessions.py``) measures the staged attribution on the story's
truth (nine factors; a patch 25% slower and an AND pair, a patch x OEA_ENABLE, 15%) with one
launch per reading (today), a fixed number of readings per launch and ``readings = "auto"``. This
script asks what any design held to the product's standard of proof must spend there.

The genie knows the answer and the noise. It measures only the arms that prove the answer, in
random order, round after round, and stops as soon as the product's own rules would let the
answer stand:

* stage 1 (all nine factors, good = no factor): the arms good, bad, bad minus the culprit, the
  culprit alone, "culprit plus the pair" and the culprit beside each pair member (without the last
  three, "culprit plus some partner" fits: nothing tells the stage that it cannot explain the
  readings). It ends when the product's stage would hand over: the culprit's posterior >= 0.99 and
  no one-stage hypothesis fits (``attribution_fit.stage_misfits``); the regression gate is not
  asked, which only lowers the floor;
* stage 2 (the other eight factors, good = the culprit alone), seeded with stage 1's readings in
  its space as the product seeds it: good, bad, the pair's confirmation arms and bad minus each
  member, until ``AttributionStrategy.proven()`` names the pair (the posterior stop rule and the
  significance guard, not the gate or the confirmation step: again only lower).

No search, no residual check, no decomposition: everything the genie spends is what the standard
of proof costs. It runs at each readings-per-launch ``m`` of a grid and the floor of a cell is the
best ``m`` in hindsight (a second privilege). Beside it, in the same run and on
``simulate_sessions``'s own seeds, today's way (one launch per reading) and ``auto``.

    python benchmarks/sessions_floor.py                     # all six cells, 40 repetitions, about 6 minutes
    python benchmarks/sessions_floor.py --cells 8:0.25 --reps 100
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import simulate_sessions as S  # noqa: E402
from bisect_lab.strategies.attribution import AttributionStrategy  # noqa: E402
from bisect_lab.strategies.attribution_fit import stage_misfits  # noqa: E402
from bisect_lab.strategies.staged import SURE  # noqa: E402  (the hand-over's posterior)

M_GRID = (1, 2, 3, 4, 6, 8, 11, 16)
CAP = 300            # launches a genie stage may take before it counts as failed


def _stage1_done(stage: AttributionStrategy) -> bool | None:
    """Would the product's first stage hand over now? None: not yet; else whether it names the
    story's culprit (the factor it is sure of)."""
    _, post = stage.judged_now()            # the gate is not asked: that only lowers the floor
    if post is None:
        return None
    marg = post.factor_marginals()
    if marg.max() < SURE or not stage_misfits(stage):
        return None
    return stage.factors[int(np.argmax(marg))] == S.CULPRIT


def genie_run(task) -> tuple:
    """One genie campaign at ``m`` readings per launch: (L, rho, m, rep, cost, launches, right)."""
    L, rho, m, rep = task
    rng = np.random.default_rng([zlib.crc32(b"sessions-genie"), L, int(rho * 100), m, rep])
    order = np.random.default_rng([zlib.crc32(b"sessions-genie-order"), rep])
    machine = S.Machine(rng, L, rho)

    def session(arm: frozenset) -> float:
        off = machine.start(arm)
        return float(np.exp(np.mean([math.log(machine.read(arm, off)) for _ in range(m)])))

    told: list[tuple[frozenset, float]] = []       # every session, for seeding stage 2

    def rounds(stage, arms, base, done) -> object:
        """Random-order rounds of ``arms`` (inside ``base``) until ``done(stage)`` is not None."""
        t, out = 0, None
        while out is None and t < CAP:
            for k in order.permutation(len(arms)):
                v = session(arms[k] | base)
                stage.tell(arms[k], v)
                told.append((arms[k] | base, v))
                t += 1
                if t >= len(arms) and (out := done(stage)) is not None:
                    break
        return out

    bad, culprit = frozenset(S.FACTORS), frozenset({S.CULPRIT})
    stage1 = AttributionStrategy(S.FACTORS, seed=rep, max_trials=10 * CAP)
    arms1 = [frozenset(), bad, bad - culprit, culprit, culprit | S.PAIR] + [culprit | {p} for p in sorted(S.PAIR)]
    right = bool(rounds(stage1, arms1, frozenset(), _stage1_done))

    rest = [f for f in S.FACTORS if f != S.CULPRIT]
    stage2 = AttributionStrategy(rest, seed=rep + 7919, max_trials=10 * CAP)
    for arm, v in list(told):
        if arm >= culprit:                  # seeded as the product seeds a residual stage
            stage2.tell(arm - culprit, v)
    pair, every = frozenset(S.PAIR), frozenset(rest)
    arms2 = list(dict.fromkeys([frozenset(), every] + stage2.confirmation_arms(pair)
                               + [every - {p} for p in sorted(pair)]))
    named = rounds(stage2, arms2, culprit, lambda s: s.proven())
    right = right and named is not None and sorted(named) == sorted(S.PAIR)
    return L, rho, m, rep, machine.cost, machine.launches, right


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=40, help="repetitions per cell (and per m for the genie)")
    ap.add_argument("--cells", default="", help="comma-separated L:rho cells, e.g. 8:0.25 (default all six)")
    ap.add_argument("--m", default=",".join(map(str, M_GRID)), help="the genie's readings-per-launch grid")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = ap.parse_args(argv)
    cells = ([(int(c.split(":")[0]), float(c.split(":")[1])) for c in a.cells.split(",") if c] or
             [(L, r) for L in S.LAUNCH_COSTS for r in S.SD_RATIOS])
    grid = [int(x) for x in a.m.split(",") if x]
    strategy_tasks = [(L, r, meth, rep, S.TOTAL_CV, {}) for L, r in cells for meth in ("launch", "auto")
                      for rep in range(a.reps)]
    genie_tasks = [(L, r, m, rep) for L, r in cells for m in grid for rep in range(a.reps)]
    t0 = time.time()
    with mp.Pool(a.jobs) as pool:
        strat = pool.map(S.run_one, strategy_tasks, chunksize=1)
        genie = pool.map(genie_run, genie_tasks, chunksize=4)
    print(f"# the story's attribution in sessions: genie floor against the strategy, reading CV "
          f"{S.TOTAL_CV:.0%} in all, {a.reps} repetitions per cell (the genie: per m of {grid}), "
          f"{a.jobs} job(s), {time.time() - t0:.0f} s")
    hdr = (f"{'L':>2} {'rho':>5} | {'today':>7} {'auto':>7} {'(x today)':>9} {'launches':>8} {'m':>4} | "
           f"{'floor m':>7} {'floor':>7} "
           f"{'(x today)':>9} {'launches':>8} {'right':>6} | {'auto/floor':>10} {'1/3 today':>9}")
    print(hdr)
    print("-" * len(hdr))
    for L, r in cells:
        today = np.mean([x[4] for x in strat if x[:3] == (L, r, "launch")])
        autos = [x for x in strat if x[:3] == (L, r, "auto")]
        auto = np.mean([x[4] for x in autos])
        auto_launches = np.mean([x[5] for x in autos])
        auto_m = np.nanmean([x[6] for x in autos])
        by_m = {m: [x for x in genie if x[:3] == (L, r, m)] for m in grid}
        best = min(grid, key=lambda m: np.mean([x[4] for x in by_m[m]]))
        rows = by_m[best]
        floor = float(np.mean([x[4] for x in rows]))
        launches = float(np.mean([x[5] for x in rows]))
        right = float(np.mean([x[6] for x in rows]))
        below = "below" if today / 3 < floor else "above"
        print(f"{L:>2} {r:>5g} | {today:>7.1f} {auto:>7.1f} {auto / today:>9.2f} {auto_launches:>8.1f} "
              f"{auto_m:>4.1f} | {best:>7d} {floor:>7.1f} "
              f"{floor / today:>9.2f} {launches:>8.1f} {right:>6.0%} | {auto / floor:>10.2f} "
              f"{below + ' floor':>9}")
    print("\nthe genie's node-hours per readings per launch (m):")
    for L, r in cells:
        costs = "  ".join(f"{m}: {np.mean([x[4] for x in genie if x[:3] == (L, r, m)]):.0f}" for m in grid)
        print(f"{L:>2} {r:>5g} | {costs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
