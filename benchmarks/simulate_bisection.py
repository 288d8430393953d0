"""Simulation benchmark: noisy bisection vs single-run and fixed-repeat bisection (issue 5).

Run from the repository root:

    python benchmarks/simulate_bisection.py            # full run (the figures in docs/bisection.md)
    python benchmarks/simulate_bisection.py --quick    # fewer repetitions, a minute or two

1,000 candidates, the change position drawn uniformly, a throughput-like metric (higher is better)
with noise of CV 3% shaped like the launch-bound decode loop measured on an H200 (heavy right tail;
the eager arm of the 2026-11-29 decode-noise measurement). Every method sees the same
scenarios and the same per-repetition truth; each prints accuracy, mean and p95 trials.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bisect_lab.strategies.bisection import BisectionStrategy, bisect_sequence  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baseline_bisection  # noqa: E402  (the strategy before model checking: method "before")


def main_bisect_sequence(*args, **kwargs):
    """Method "main" (benchmarks/baseline_main/), imported on use: it borrows today's confirm,
    check and verdict mixins, and has not run since the burst guard (no ``_burst_held``) nor
    imported since the flank test (the old check's constants are gone); kept as the record of
    the stall work's baseline. Compare against a checkout of an earlier commit instead."""
    from baseline_main.bisection import bisect_sequence
    return bisect_sequence(*args, **kwargs)

# tok/s of the eager (no CUDA graphs) arm, one process launch per sample, from
# h200_decode_noise_2026-11-29.json: median 905, CV 14%, a long right tail (1.28x, 1.36x).
H200_EAGER_TOK_S = (
    1066.99, 865.73, 1156.95, 886.32, 749.51, 891.5, 964.47, 829.09,
    887.34, 973.0, 871.35, 918.69, 1226.13, 1086.82,
)
N = 1000
CV = 0.03


def _h200_residuals() -> np.ndarray:
    x = np.asarray(H200_EAGER_TOK_S)
    r = x / x.mean() - 1.0
    return (r - r.mean()) / r.std()


_RES = _h200_residuals()


def h200_noise(rng: np.random.Generator, cv: float) -> float:
    """One multiplicative noise factor with the measured H200 shape, rescaled to ``cv``.

    Smoothed bootstrap: a measured standardized residual plus a small Gaussian jitter (bandwidth
    0.35), so the simulation does not only ever produce 14 distinct values; rescaled so the SD is
    ``cv``. The right tail of the measured data is kept."""
    z = (rng.choice(_RES) + 0.35 * rng.standard_normal()) / math.sqrt(1 + 0.35**2)
    return max(1.0 + cv * z, 0.05)


@dataclass(frozen=True)
class Scenario:
    name: str
    step: float                  # relative drop of the metric at the change position (0 = none)
    untestable: float = 0.0      # share of inner positions that cannot be measured
    drift_per_trial: float = 0.0  # multiplicative drift of every measurement per trial
    min_effect: float = 0.02
    reps_share: float = 1.0      # share of the repetitions (slow scenarios run fewer)
    # Truths that are not one step. slide: the metric drops slide_per per commit over slide_len
    # commits from a uniform start (expected answer "gradual"). steps: further relative changes
    # (negative = faster) after the first one, at positions drawn uniformly at least MIN_GAP apart
    # (expected answer "several").
    slide_per: float = 0.0
    slide_len: int = 0
    steps: tuple = ()
    # Stalls: this share of readings is slower by a factor drawn uniformly in stall_size (e.g.
    # (1.5, 3.0): 1.5x to 3x slower); noise "t3": Student-t (3 df) noise of the same CV.
    stall_rate: float = 0.0
    stall_size: tuple = (1.5, 3.0)
    # Bursts of host contention (issue #23): before each reading outside a burst, a burst starts
    # with probability burst_rate; it covers burst_len consecutive readings in the strategy's ask
    # order (that one included), each slower by one level drawn uniformly in burst_size for the
    # whole burst, times 1 + burst_jitter * N(0, 1) per reading.
    burst_rate: float = 0.0
    burst_len: int = 6
    burst_size: tuple = (0.20, 0.35)
    burst_jitter: float = 0.03
    # A machine that changes mid-campaign (issue #23): every reading from the machine_from-th
    # (1-based, in ask order) on is machine_step slower (relative, like step).
    machine_step: float = 0.0
    machine_from: int = 0
    noise: str = ""              # "" = the run's --noise
    cv: float = 0.0              # 0 = CV
    methods: tuple = ()          # () = every method


NEW_METHODS = ("noisy", "before", "main", "noguard")


def _slide(per: float, length: int, suffix: str = "", **kw) -> Scenario:
    """A slide of ``per`` per commit over ``length`` commits (expected answer `gradual`), run by the
    new methods at half the repetitions like the other truths that are not one step."""
    return Scenario(f"slide {per * 100:g}%/commit x {length}{suffix}", 0.0, slide_per=per,
                    slide_len=length, reps_share=0.5, methods=NEW_METHODS, **kw)

SCENARIOS = (
    Scenario("step 5%", 0.05),
    Scenario("step 25%", 0.25),
    Scenario("step 2% (min_effect 1%)", 0.02, min_effect=0.01, reps_share=0.4),
    Scenario("no step", 0.0),
    Scenario("step 5%, 10% untestable", 0.05, untestable=0.10),
    Scenario("step 5%, drift -2%/100 trials", 0.05, drift_per_trial=-0.0002),
    _slide(0.002, 50),
    Scenario("two steps 3% then 4%", 0.03, steps=(0.04,), reps_share=0.5, methods=NEW_METHODS),
    Scenario("+15% then -4% back, CV 5%", 0.15, steps=(-0.04,), cv=0.05, reps_share=0.5,
             methods=NEW_METHODS),
    Scenario("dip: 8% then 4% back", 0.08, steps=(-0.04,), reps_share=0.5, methods=NEW_METHODS),
    Scenario("step 5%, stalls 2% (1.5-3x)", 0.05, stall_rate=0.02, reps_share=0.5, methods=NEW_METHODS),
    Scenario("step 5%, stalls 5% (1.2-2x)", 0.05, stall_rate=0.05, stall_size=(1.2, 2.0),
             reps_share=0.5, methods=NEW_METHODS),
    Scenario("step 5%, t3 noise", 0.05, noise="t3", reps_share=0.5, methods=NEW_METHODS),
    Scenario("no step, stalls 3% (1.5-3x)", 0.0, stall_rate=0.03, reps_share=0.5, methods=NEW_METHODS),
    # 14-17: bursts of host contention and a machine change mid-campaign (issue #23); appended so
    # the cells above keep their seeds (the seed holds the scenario's index).
    Scenario("step 5%, bursts", 0.05, burst_rate=0.02, reps_share=0.5, methods=NEW_METHODS),
    Scenario("no step, bursts", 0.0, burst_rate=0.02, reps_share=0.5, methods=NEW_METHODS),
    Scenario("step 5%, machine -3% from trial 40", 0.05, machine_step=0.03, machine_from=40,
             reps_share=0.5, methods=NEW_METHODS),
    Scenario("no step, machine -3% from trial 40", 0.0, machine_step=0.03, machine_from=40,
             reps_share=0.5, methods=NEW_METHODS),
    # 18-20: slides of other shapes, added after the refit before `several` was chosen on cell 6
    # (2026-12-07): held out from its tuning.
    _slide(0.005, 20),
    _slide(0.001, 100),
    _slide(0.002, 50, ", CV 2%", cv=0.02),
    # 21-22: a machine that changes by less than a burst's gap, early (2026-12-07, evening: a scratch
    # sweep found the 5% step answered no-regression in 16 of 40 runs)
    Scenario("step 5%, machine -8% from trial 20", 0.05, machine_step=0.08, machine_from=20,
             reps_share=0.5, methods=NEW_METHODS),
    Scenario("no step, machine -8% from trial 20", 0.0, machine_step=0.08, machine_from=20,
             reps_share=0.5, methods=NEW_METHODS),
    # 23-25: steep short slides (2026-12-07, night: a scratch sweep found 1%/commit x 10 named as
    # one commit in a third of the runs, with a 5-8% effect for a 1% commit)
    _slide(0.01, 10),
    _slide(0.02, 5),
    _slide(0.005, 30, ", CV 5%", cv=0.05),
    # 26-31: held out (2026-12-07, late night): shapes no rule was tuned on, picked to find what
    # the cells above miss, then run once. Bursts that cover the confirm step, a host that speeds
    # up, a steeper drift, two equal steps, more stalls, heavier noise. Cell 26's failure (a burst
    # over the confirm step) was then fixed, so it is held out no longer.
    Scenario("step 8%, long bursts (3%, 10 readings)", 0.08, burst_rate=0.03, burst_len=10,
             reps_share=0.5, methods=NEW_METHODS),
    Scenario("step 5%, machine +5% from trial 30", 0.05, machine_step=-0.05, machine_from=30,
             reps_share=0.5, methods=NEW_METHODS),
    Scenario("no step, drift -3%/100 trials", 0.0, drift_per_trial=-0.0003, reps_share=0.5,
             methods=NEW_METHODS),
    Scenario("two steps 6% then 6%", 0.06, steps=(0.06,), reps_share=0.5, methods=NEW_METHODS),
    Scenario("no step, stalls 8% (1.2-1.6x)", 0.0, stall_rate=0.08, stall_size=(1.2, 1.6),
             reps_share=0.5, methods=NEW_METHODS),
    Scenario("no step, t3 noise, CV 5%", 0.0, noise="t3", cv=0.05, reps_share=0.5, methods=NEW_METHODS),
)
MIN_GAP = 10


NOISE = "h200"  # or "normal" (--noise): Gaussian noise of the same CV, for comparison


class World:
    """The simulated history of one repetition: truth, untestable set, noise, drift, trial count."""

    def __init__(self, sc: Scenario, rep: int, scenario_index: int):
        self.rng = np.random.default_rng([20261129, scenario_index, rep])
        self.change = int(self.rng.integers(1, N))
        self.changes = [self.change]   # first bad position of each step
        if sc.steps:
            while len(self.changes) < 1 + len(sc.steps):
                c = int(self.rng.integers(1, N))
                if all(abs(c - x) >= MIN_GAP for x in self.changes):
                    self.changes.append(c)
            self.changes.sort()
            self.change = self.changes[0]
        self.slide = None
        if sc.slide_len:
            first = int(self.rng.integers(1, N - sc.slide_len))
            self.slide = (first, first + sc.slide_len - 1)
            self.change = first
        k = int(round(sc.untestable * (N - 2)))
        inner = np.arange(1, N - 1)
        self.untestable = set(self.rng.choice(inner, k, replace=False).tolist()) if k else set()
        self.sc = sc
        self.calls = 0
        self.burst_left = 0      # readings left in the current burst
        self.burst_level = 0.0

    def measure(self, i: int) -> float | None:
        self.calls += 1
        # Host contention runs on the clock, not on the build: a burst is drawn and counted for
        # an untestable position too. Nothing is drawn when the scenario has no bursts, so the
        # other cells' random streams are unchanged.
        in_burst = False
        if self.sc.burst_rate:
            if self.burst_left == 0 and self.rng.random() < self.sc.burst_rate:
                self.burst_left = self.sc.burst_len
                self.burst_level = float(self.rng.uniform(*self.sc.burst_size))
            if self.burst_left:
                self.burst_left -= 1
                in_burst = True
        if i in self.untestable:
            return None
        drift = 1.0 + self.sc.drift_per_trial * self.calls
        cv = self.sc.cv or CV
        noise = self.sc.noise or NOISE
        if noise == "normal":
            z = max(1.0 + cv * self.rng.standard_normal(), 0.05)
        elif noise == "t3":
            z = max(1.0 + cv * self.rng.standard_t(3) / math.sqrt(3.0), 0.05)
        else:
            z = h200_noise(self.rng, cv)
        v = self.level(i) * drift * z
        if self.sc.stall_rate and self.rng.random() < self.sc.stall_rate:
            v /= self.rng.uniform(*self.sc.stall_size)
        if in_burst:
            v *= (1.0 - self.burst_level) * max(1.0 + self.sc.burst_jitter * self.rng.standard_normal(), 0.05)
        if self.sc.machine_step and self.calls >= self.sc.machine_from:
            v *= 1.0 - self.sc.machine_step
        return v

    def level(self, i: int) -> float:
        level = 100.0
        sizes = (self.sc.step,) + tuple(self.sc.steps)
        for c, s in zip(self.changes, sizes):
            if s and i >= c:
                level *= 1 - s
        if self.slide is not None and i >= self.slide[0]:
            level *= (1 - self.sc.slide_per) ** (min(i, self.slide[1]) - self.slide[0] + 1)
        return level

    def expected(self) -> str:
        if self.slide is not None:
            return "gradual"
        if len(self.changes) > 1:
            return "several"
        return "culprit" if self.sc.step else "no-regression"

    def acceptable_range(self, lo: int, hi: int) -> bool:
        """An ambiguous answer is right when it holds the truth and nothing inside could split it."""
        return lo <= self.change <= hi and hi > lo and all(p in self.untestable for p in range(lo, hi))


# --------------------------------------------------------------------------- baselines
def _classic(world: World, repeats: int, min_effect: float) -> tuple[str, int | None, tuple | None]:
    """git-bisect-run style: each verdict is the mean of ``repeats`` runs against the midpoint
    between the endpoint means; untestable positions are skipped (the nearest other position
    inside the range is tried, like git bisect skip)."""

    def m(i: int) -> float | None:
        vals = []
        for _ in range(repeats):
            v = world.measure(i)
            if v is None:
                return None  # a build failure is known after the first try
            vals.append(v)
        return float(np.mean(vals))

    good, bad = m(0), m(N - 1)
    if good is None or bad is None or bad > good * (1 - min_effect):
        return "no-regression", None, None
    threshold = math.sqrt(good * bad)
    lo, hi = 0, N - 1
    skipped: set[int] = set()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        order = sorted(range(lo + 1, hi), key=lambda p: (abs(p - mid), p))
        v = None
        for p in order:
            if p in skipped:
                continue
            v = m(p)
            if v is None:
                skipped.add(p)
                continue
            mid = p
            break
        if v is None:
            return "inconclusive", None, (lo + 1, hi)
        if v < threshold:
            hi = mid
        else:
            lo = mid
    return "culprit", hi, None


def run_one(args: tuple) -> tuple:
    si, rep, method = args[:3]
    global NOISE
    if len(args) > 3:
        NOISE = args[3]
    sc = SCENARIOS[si]
    world = World(sc, rep, si)
    effect = None
    steps: list = []
    if method in ("noisy", "before", "main", "noguard"):
        fn = {"noisy": bisect_sequence, "before": baseline_bisection.bisect_sequence,
              "main": main_bisect_sequence, "noguard": bisect_sequence}[method]
        BisectionStrategy.burst_guard = method != "noguard"
        try:
            v = fn(N, world.measure, seed=rep, min_effect=sc.min_effect)
        finally:
            BisectionStrategy.burst_guard = True
        status, index, rng = v.status, v.index, v.range
        effect = v.effect
        steps = [(st["index"], tuple(st["range"])) for st in (getattr(v, "steps", None) or ())]
        assert v.trials == world.calls, (v.trials, world.calls)
    elif method == "single-run":
        status, index, rng = _classic(world, 1, sc.min_effect)
    else:
        status, index, rng = _classic(world, 5, sc.min_effect)
    want = world.expected()
    if want == "no-regression":
        ok = status == "no-regression"
    elif want == "gradual":
        # Right: called gradual with a range that overlaps the slide.
        ok = status == "gradual" and rng is not None and rng[0] <= world.slide[1] and rng[1] >= world.slide[0]
    elif want == "several":
        # Right: called several, and every true step lies in a reported step's range.
        ok = status == "several" and all(any(lo <= c <= hi for _, (lo, hi) in steps) for c in world.changes)
    elif status == "culprit":
        ok = index == world.change
    else:
        ok = rng is not None and world.acceptable_range(*rng)
    exact = status == want == "several" and sorted((i for i, _ in steps), key=lambda i: (i is None, i or 0)) == world.changes
    # The commit of the largest slowdown named exactly, as the culprit or as one of the steps: where
    # the other step is a speed-up (a dip), that commit is the regression a user bisects for.
    sizes = (sc.step,) + tuple(sc.steps)
    main = world.changes[int(np.argmax(sizes))] if sc.steps else None
    main_named = main is not None and (index == main if status == "culprit" else
                                       any(i == main for i, _ in steps))
    return si, method, ok, world.calls, status, effect, exact, main_named

# "main": a frozen copy of the strategy as on main at 760128a (benchmarks/baseline_main/), the
# baseline of the stall work (issue #23), run on the same seeds as "noisy".
# "noguard": today's strategy without the burst guard (strategies/bisection_bursts.py), same seeds.
METHODS = ("noisy", "before", "main", "noguard", "single-run", "fixed-5")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 repetitions per scenario")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per scenario (default 1000)")
    ap.add_argument("--noise", choices=("h200", "normal"), default="h200",
                    help="noise shape at CV 3%% (default: the measured H200 eager shape)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--first-rep", type=int, default=0,
                    help="first repetition (seed) number: e.g. 5000 for runs the tuning never saw")
    ap.add_argument("--only", default="", help="comma-separated scenario numbers (0 = step 5%%)")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods")
    a = ap.parse_args(argv)
    reps = a.reps or (60 if a.quick else 1000)
    t0 = time.time()
    only = {int(x) for x in a.only.split(",") if x.strip()} or set(range(len(SCENARIOS)))
    methods = [m for m in a.methods.split(",") if m in METHODS]
    work = [
        (si, r, m, a.noise)
        for si, sc in enumerate(SCENARIOS) if si in only
        for m in methods if (not sc.methods or m in sc.methods)
        for r in range(a.first_rep, a.first_rep + max(1, int(round(reps * sc.reps_share))))
    ]
    results: dict[tuple[int, str], list[tuple]] = {}
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for si, m, ok, trials, status, effect, exact, main_named in ex.map(run_one, work, chunksize=10):
            results.setdefault((si, m), []).append((ok, trials, status, effect, exact, main_named))
    shape = "H200 eager noise shape" if a.noise == "h200" else "normal noise"
    print(f"noisy bisection benchmark: {N} candidates, CV {CV:.0%} ({shape}), "
          f"{reps} repetitions per scenario and method (x reps_share for slow scenarios: see n)")
    w = max([32] + [len(sc.name) for si, sc in enumerate(SCENARIOS) if si in only])
    print(f"{'scenario':{w}s} {'method':11s} {'n':>5s} {'accuracy':>8s} {'mean':>6s} {'p95':>5s} "
          f"{'effect':>6s}  outcomes")
    for si, sc in enumerate(SCENARIOS):
        if si not in only:
            continue
        for m in methods:
            if (si, m) not in results:
                continue
            rows = results[(si, m)]
            acc = np.mean([r[0] for r in rows])
            tr = np.array([r[1] for r in rows])
            counts: dict[str, int] = {}
            for r in rows:
                counts[r[2]] = counts.get(r[2], 0) + 1
            oc = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
            # median reported effect (of the first step), as a percentage change
            effs = [r[3] for r in rows if r[3] is not None and r[2] != "no-regression"]
            eff = f"{(np.median(effs) - 1) * 100:+5.1f}%" if effs else "     -"
            extra = (f" (every step exact: {sum(r[4] for r in rows)}; the largest slowdown's commit "
                     f"named: {sum(r[5] for r in rows)})" if sc.steps else "")
            print(f"{sc.name:{w}s} {m:11s} {len(rows):5d} {acc:8.1%} {tr.mean():6.1f} "
                  f"{np.percentile(tr, 95):5.0f} {eff}  {oc}{extra}")
        print()
    rows = results.get((0, "noisy"))
    if rows:
        acc = np.mean([r[0] for r in rows])
        tr = np.array([r[1] for r in rows])
        ok = acc >= 0.95 and tr.mean() <= 50 and np.percentile(tr, 95) <= 90
        print(f"target (step 5%, noisy): accuracy >= 95%, mean <= 50, p95 <= 90: "
              f"{'MET' if ok else 'NOT MET'} ({acc:.1%}, {tr.mean():.1f}, {np.percentile(tr, 95):.0f})")
    print(f"wall time {time.time() - t0:.0f} s with {a.jobs} processes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
