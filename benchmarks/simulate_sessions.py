"""Simulation benchmark for measuring in sessions (issue 21): one server launch, several readings.

The story's cost structure: nine factors (five patches, OEA_ENABLE, three NCCL variables), the
story's culprits (one patch 25% slower; an AND pair, a patch x OEA_ENABLE, 15%), a reading's total
noise CV 4% split into a launch-to-launch part and a within-launch part. Per cell (launch cost in
readings L, between/within sd ratio rho) the staged attribution strategy the CLI runs is driven,
side by side in the same run, by:

  launch   one launch per reading (today): the strategy is told each reading
  fixed5   5 readings per launch: the strategy is told each session's geometric mean
  auto     readings per launch by the product's own rule (campaigns.readings.auto_readings: the
           two-stage optimum of stats.sessions.choose_readings on the campaign's own running variance
           components, a prior until they are trusted, 3 readings before any launch), with the search's floor
           (search_floor_var: past a precision of a launch's mean more readings buy no fewer launches)
  auto-nofloor  the same without the floor (the plain two-stage optimum, as auto was before), on auto's seeds
  auto-ips  auto, with the search arms chosen by information per second of launch (strategies.arm_costs,
           told each session's cost), on auto's seeds: it differs from auto only with --costly
  naive    one launch per arm kept alive, its readings told as if independent (the loop a user
           writes to save launches)

and prints: share right (the three culprits named, status "culprits"), node-hours to the answer in
units of one reading (each launch costs L, each reading 1), their ratio to `launch`, launches,
readings per launch, and the coverage of the reported 95% intervals (every main effect, whose
truth is 0.75 for the 25% patch and 1.0 for every other factor, the AND pair's interaction term,
truth 0.85, and the regression bad vs good, truth 0.6375).

    python benchmarks/simulate_sessions.py --quick           # smoke run (a few repetitions)
    python benchmarks/simulate_sessions.py --reps 200 --jobs 64
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

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bisect_lab import attribute_factors  # noqa: E402
from bisect_lab.campaigns.readings import auto_readings  # noqa: E402
from bisect_lab.stats.sessions import search_floor_var  # noqa: E402
from bisect_lab.strategies.arm_costs import ArmCosts  # noqa: E402

FACTORS = ["mla-gather-cast", "oea-topk", "eagle3-draft", "fp8-kv-cache", "radix-evict",
           "env:OEA_ENABLE", "env:NCCL_ALGO", "env:NCCL_PROTO", "env:NCCL_P2P_LEVEL"]
CULPRIT, PAIR = "mla-gather-cast", frozenset({"oea-topk", "env:OEA_ENABLE"})
TRUTH = sorted([CULPRIT, *PAIR])
MAIN, TERM = 0.75, 0.85
TOTAL_CV = 0.04
CV = [TOTAL_CV]                       # --total-cv changes it (to see how the strategy's trials scale with noise)
LAUNCH_COSTS = (2, 8)
SD_RATIOS = (0.25, 1.0, 4.0)          # launch-to-launch sd / within-launch sd
METHODS = ("launch", "fixed5", "auto", "naive", "auto-nofloor", "auto-ips")
# --costly NAME=RATIO: launches of arms holding NAME cost RATIO x L (a draft model loaded, more graphs)
COSTLY: dict[str, float] = {}
# the attribution's min_effect (attribute_factors' default): where the search's floor sits
MIN_EFFECT = 0.02
FIXED_M = 5
MAX_SESSIONS = 400


def level(active: frozenset) -> float:
    return (math.log(MAIN) if CULPRIT in active else 0.0) + (math.log(TERM) if PAIR <= active else 0.0)


class Machine:
    """The simulated server: a launch draws its offset (launch-to-launch), each reading its own
    noise (within a launch); the cost is counted in readings (a launch costs ``launch``)."""

    def __init__(self, rng, launch: float, rho: float):
        self.rng, self.launch = rng, launch
        self.sw = CV[0] / math.sqrt(1 + rho ** 2)
        self.sb = rho * self.sw
        self.cost = 0.0
        self.launches = 0
        self.readings = 0

    def start(self, active: frozenset = frozenset()) -> float:
        self.cost += self.launch * math.prod(r for f, r in COSTLY.items() if f in active)
        self.launches += 1
        return float(self.rng.normal(0, self.sb))

    def read(self, active: frozenset, offset: float) -> float:
        self.cost += 1
        self.readings += 1
        return 1000.0 * math.exp(level(active) + offset + self.rng.normal(0, self.sw))


def make_measure(method: str, m: Machine, costs=None):
    """measure(active) for the strategy, one told value per call, as ``method`` takes it; ``costs``
    (an ArmCosts, auto-ips) is told every session's cost."""
    sessions: dict[frozenset, list[list[float]]] = {}
    alive: dict[frozenset, float] = {}
    chosen: list[int] = []

    def session(active: frozenset, k: int) -> float:
        before = m.cost
        off = m.start(active)
        vals = [m.read(active, off) for _ in range(k)]
        if costs is not None:
            costs.add(active, m.cost - before)
        sessions.setdefault(active, []).append(vals)
        chosen.append(k)
        return float(np.exp(np.mean(np.log(vals))))

    def measure(active: frozenset) -> float:
        active = frozenset(active)
        if method == "launch":
            return session(active, 1)
        if method == "fixed5":
            return session(active, FIXED_M)
        if method in ("auto", "auto-nofloor", "auto-ips"):
            # the product's own rule (campaigns.readings.auto_readings): costs unknown until the
            # first launch, the same trust thresholds and floors
            k, _ = auto_readings(m.launch if sessions else None, 1.0 if sessions else None,
                                 list(sessions.values()),
                                 floor_var=0.0 if method == "auto-nofloor" else search_floor_var(MIN_EFFECT))
            return session(active, k)
        if active not in alive:                 # naive: one launch per arm, kept alive
            alive[active] = m.start(active)
            chosen.append(0)
        return m.read(active, alive[active])

    return measure, chosen


def truth_of(e) -> float | None:
    if e.kind == "main":
        return MAIN if e.name == CULPRIT else 1.0
    names = set(e.name.split("*"))
    return TERM if names == set(PAIR) else None


def run_one(task):
    launch, rho, method, rep, cv, costly = task
    CV[0] = cv
    COSTLY.clear()
    COSTLY.update(costly)
    # auto-nofloor (the plain two-stage optimum, what auto was before its floor) and auto-ips
    # (auto choosing search arms by information per second of launch) on auto's seeds
    seed_of = "auto" if method in ("auto-nofloor", "auto-ips") else method
    rng = np.random.default_rng([launch, int(rho * 100), METHODS.index(seed_of), rep])
    m = Machine(rng, launch, rho)
    costs = ArmCosts(FACTORS) if method == "auto-ips" else None
    measure, chosen = make_measure(method, m, costs)
    v = attribute_factors(FACTORS, measure, higher_is_better=True, seed=rep, max_trials=MAX_SESSIONS,
                          **({"arm_cost": costs} if costs is not None else {}))
    covered = total = 0
    for e in v.effects:
        t = truth_of(e)
        if t is not None and math.isfinite(e.effect.ci_low):
            total += 1
            covered += e.effect.ci_low <= t <= e.effect.ci_high
    if v.regression is not None and math.isfinite(v.regression.ci_low):
        total += 1
        covered += v.regression.ci_low <= MAIN * TERM <= v.regression.ci_high
    right = v.status == "culprits" and sorted(v.culprits) == TRUTH
    per_launch = m.readings / m.launches if m.launches else float("nan")
    return launch, rho, method, right, m.cost, m.launches, per_launch, covered, total


# --- one comparison at a fixed budget: where the readings per launch pay (no strategy's stage floor)

BUDGET = 240                           # reading units per arm
EFFECT = 0.95


def one_comparison(rng, L: int, rho: float, method: str):
    """good vs bad (5% slower), each arm spending ``BUDGET`` reading units: (covered, log-width)."""
    from bisect_lab.stats import compare
    from bisect_lab.stats.sessions import compare_sessions
    sw = TOTAL_CV / math.sqrt(1 + rho ** 2)
    sb = rho * sw

    def sessions(k, m, lv):
        offs = rng.normal(0, sb, size=(k, 1))
        return list(np.exp(lv + offs + rng.normal(0, sw, size=(k, m))))

    lv_b = math.log(EFFECT)
    if method == "naive":                 # one launch per arm, every reading a unit
        n = BUDGET - L
        a = np.exp(rng.normal(0, sb) + rng.normal(0, sw, n))
        b = np.exp(lv_b + rng.normal(0, sb) + rng.normal(0, sw, n))
        c = compare(a, b)
    else:
        if method == "auto":              # one launch per arm at a time, m re-chosen from the components so far
            a, b, spent = [], [], 0
            while True:
                m, _ = auto_readings(L if a else None, 1.0 if a else None, [a, b])
                if spent + L + m > BUDGET:
                    break
                a, b, spent = a + sessions(1, m, 0.0), b + sessions(1, m, lv_b), spent + L + m
        if method != "auto":
            m = 1 if method == "launch" else FIXED_M
            k = BUDGET // (L + m)
            a, b = sessions(k, m, 0.0), sessions(k, m, lv_b)
        c = compare_sessions(a, b)
    return c.ci_low <= EFFECT <= c.ci_high, math.log(c.ci_high / c.ci_low)


def comparison_table(cells, methods, reps: int) -> list[str]:
    methods = [m for m in methods if m not in ("auto-nofloor", "auto-ips")]   # no search in one comparison
    lines = [f"one comparison, good vs bad 5% slower, {BUDGET} reading units per arm, {reps} repetitions: "
             "coverage of the 95% interval, its width, and the node-hours today's way needs for the same width",
             f"{'L':>2} {'rho':>5} | {'method':<7} {'coverage':>9} {'width':>7} {'node-h to same precision':>25}",
             "-" * 64]
    for L, r in cells:
        widths = {}
        for meth in methods:
            rng = np.random.default_rng([L, int(r * 100), METHODS.index(meth), 99])
            out = [one_comparison(rng, L, r, meth) for _ in range(reps)]
            cov = np.mean([o[0] for o in out])
            widths[meth] = np.mean([o[1] for o in out])
            rel = (widths[meth] / widths["launch"]) ** 2
            note = "" if meth == "naive" else ("  coverage MET" if 0.935 <= cov <= 0.965 else "  coverage MISSED")
            lines.append(f"{L:>2} {r:>5g} | {meth:<7} {cov:>9.1%} {widths[meth] * 100:>6.2f}% {rel:>24.2f}x{note}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 repetitions per cell and method (a smoke run)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per cell and method (default 100)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--cells", default="", help="comma-separated L:rho cells, e.g. 8:0.25,2:4 (default all six)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--comparison-reps", type=int, default=None,
                    help="repetitions of the one-comparison table (default 1000, --quick 50; 0 skips it)")
    ap.add_argument("--no-attribution", action="store_true", help="only the one-comparison table")
    ap.add_argument("--total-cv", type=float, default=TOTAL_CV, help="a reading's total noise (default 4%%)")
    ap.add_argument("--costly", default="", help="NAME=RATIO,...: launches of arms holding NAME cost RATIO x L "
                                                 "(compare auto with auto-ips)")
    a = ap.parse_args(argv)
    reps = a.reps or (3 if a.quick else 100)
    cells = ([(int(c.split(":")[0]), float(c.split(":")[1])) for c in a.cells.split(",") if c] or
             [(L, r) for L in LAUNCH_COSTS for r in SD_RATIOS])
    methods = [x for x in a.methods.split(",") if x]
    if "launch" not in methods:
        methods.insert(0, "launch")             # the baseline the ratios are taken to
    creps = a.comparison_reps if a.comparison_reps is not None else (50 if a.quick else 1000)
    if creps:
        t1 = time.time()
        lines = comparison_table(cells, methods, creps)
        print("\n".join(lines[:1]) + f" ({time.time() - t1:.0f} s)\n" + "\n".join(lines[1:]) + "\n")
    if a.no_attribution:
        return 0
    costly = {k: float(v) for k, v in (x.split("=") for x in a.costly.split(",") if x)}
    unknown = sorted(set(costly) - set(FACTORS))
    if unknown:
        ap.error(f"--costly: unknown factor(s) {', '.join(unknown)}; one of {', '.join(FACTORS)}")
    tasks = [(L, r, meth, rep, a.total_cv, costly) for L, r in cells for meth in methods for rep in range(reps)]
    t0 = time.time()
    if a.jobs > 1:
        with mp.Pool(a.jobs) as pool:
            res = pool.map(run_one, tasks, chunksize=1)
    else:
        res = [run_one(t) for t in tasks]
    print(f"# sessions simulation: the story's 9 factors, reading CV {a.total_cv:.1%} in all, {reps} repetitions "
          f"per cell and method, {a.jobs} job(s), {time.time() - t0:.0f} s"
          + (f"; launches of arms holding {', '.join(f'{k} cost {v:g}x' for k, v in costly.items())}" if costly else ""))
    hdr = (f"{'L':>2} {'rho':>5} | {'method':<12} {'right':>6} {'node-h':>8} {'vs today':>8} {'launches':>8} "
           f"{'per launch':>10} {'coverage':>9} {'(n)':>6} | targets")
    print(hdr)
    print("-" * len(hdr))
    verdicts = []
    for L, r in cells:
        base = np.mean([x[4] for x in res if x[:3] == (L, r, "launch")])
        for meth in methods:
            rows = [x for x in res if x[:3] == (L, r, meth)]
            right = np.mean([x[3] for x in rows])
            cost = np.mean([x[4] for x in rows])
            launches = np.mean([x[5] for x in rows])
            per = np.nanmean([x[6] for x in rows])
            cov_n = sum(x[8] for x in rows)
            cov = sum(x[7] for x in rows) / cov_n if cov_n else float("nan")
            notes = []
            if meth != "naive":
                notes.append("coverage " + ("MET" if 0.935 <= cov <= 0.965 else "MISSED"))
            if meth in ("auto", "auto-nofloor", "auto-ips"):
                notes.append("<= 1.1x today " + ("MET" if cost <= 1.1 * base else "MISSED"))
                if L == 8 and r < 1:
                    notes.append("<= 1/3 today " + ("MET" if cost <= base / 3 else "MISSED"))
            verdicts += notes
            print(f"{L:>2} {r:>5g} | {meth:<12} {right:>6.1%} {cost:>8.1f} {cost / base:>8.2f} {launches:>8.1f} "
                  f"{per:>10.2f} {cov:>9.1%} {cov_n:>6} | {', '.join(notes)}")
    met = sum(v.endswith("MET") for v in verdicts)
    print(f"\ntargets met: {met} of {len(verdicts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
