"""Nightly regression sweeps (layer 5): follow a ref, measure a matrix of arms, judge each series.

A sweep file (TOML)::

    name = "demo-nightly"            # default: the file's stem; the series' identity in the store
    experiment = "demo.toml"         # relative to this file
    ref = "origin/main"              # what to follow (default: the experiment's [target] ref)
    repeat = 5                       # trials per arm per night (default: the experiment's [design] repeat)

    [matrix]
    arms = ["all", "all-minus topk"] # arm specs (DESIGN 3.3)
    # patches = ["all", "topk"]      # or: selections x env values, expanded by bisect_lab.matrix.expand
    # env = { NCCL_PROTO = ["LL", "Simple"] }

    [detect]
    min_effect = 0.03     # smallest slowdown worth an alert (default: the experiment's min_effect)
    alpha = 0.05          # level of the new-night test
    cp_alpha = 0.01       # level of the change-point permutation test
    permutations = 199
    noise_k = 3.0         # a step must also exceed noise_k x the night-to-night spread
    baseline_nights = 5   # nights pooled as "the last good run"

Each night is one campaign of kind ``sweep`` whose trials carry the commit measured. A *series*
is one arm's metric over the nights of a sweep. The newest night of a series is judged twice:

1. **Step test** against the last good run: the trials of the baseline nights (the nights since
   the last change point or the last alert, at most ``baseline_nights``) versus the new night's,
   with :func:`bisect_lab.stats.compare` (Welch on logs). A regression needs a significant
   difference, a slowdown of at least ``min_effect``, and (with 3+ baseline nights) a step larger
   than ``noise_k`` times the night-to-night spread of the baseline medians, so that a machine whose
   nights differ more than its trials do does not page anyone.
2. **Change points** over the whole history of night medians (E-divisive means, permutation test;
   :mod:`bisect_lab.sweep_changepoints`). A significant change to a worse level that started after
   the last alert and still holds on the new night is a regression too (slow drifts that no single
   step shows).

An alerted night starts a new level: the next night is compared with it, so one planted regression
alerts once, not every night after it.
"""
from __future__ import annotations

import logging
import math
import statistics
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .errors import ConfigError, UsageError
from .model import Arm, TrialResult

__all__ = ["SweepConfig", "load_sweep", "run_sweep", "judge_series", "sweep_history", "render_sweep",
           "measure_arms"]

log_ = logging.getLogger("bisect_lab.sweep")


# --------------------------------------------------------------------------- config
@dataclass(frozen=True)
class Detect:
    """Alert settings of a sweep (see the module docstring)."""

    min_effect: float | None = None
    alpha: float = 0.05
    cp_alpha: float = 0.01
    permutations: int = 199
    noise_k: float = 3.0
    baseline_nights: int = 5
    seed: int = 0


@dataclass(frozen=True)
class SweepConfig:
    path: Path
    name: str
    experiment: Path
    ref: str | None
    arms: tuple[str, ...]
    repeat: int | None
    detect: Detect = field(default_factory=Detect)
    bisect_max_trials: int | None = None


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and check a sweep file; errors name the file and the key."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(path, None, "sweep file not found")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(path, None, f"malformed TOML: {e}") from None
    known = {"name", "experiment", "ref", "repeat", "matrix", "detect", "bisect"}
    for k in raw:
        if k not in known:
            raise ConfigError(path, k, f"unknown key; expected one of {', '.join(sorted(known))}")
    exp = raw.get("experiment")
    if not isinstance(exp, str):
        raise ConfigError(path, "experiment", "missing or not a string; expected the experiment TOML file")
    exp_path = (path.parent / exp).resolve()
    if not exp_path.is_file():
        raise ConfigError(path, "experiment", f"{exp_path} does not exist")
    ref = raw.get("ref")
    if ref is not None and not isinstance(ref, str):
        raise ConfigError(path, "ref", f"expected a branch, tag or commit, got {ref!r}")
    repeat = raw.get("repeat")
    if repeat is not None and (not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 2):
        raise ConfigError(path, "repeat", f"expected an integer >= 2, got {repeat!r}")
    m = raw.get("matrix", {})
    if not isinstance(m, dict):
        raise ConfigError(path, "matrix", "expected a table")
    bad = set(m) - {"arms", "patches", "env"}
    if bad:
        raise ConfigError(path, f"matrix.{sorted(bad)[0]}", "unknown key; expected arms, patches or env")
    arms = m.get("arms", [])
    if isinstance(arms, str):
        arms = [arms]
    if not isinstance(arms, list) or not all(isinstance(a, str) for a in arms):
        raise ConfigError(path, "matrix.arms", f"expected a list of arm specs, got {arms!r}")
    arms = list(arms)
    if "patches" in m or "env" in m:
        from .matrix import expand
        env = m.get("env", {})
        if not isinstance(env, dict):
            raise ConfigError(path, "matrix.env", "expected a table VAR = [values]")
        arms += [c.spec for c in expand(None, patches=m.get("patches") or ["all"], env=env)]
    if not arms:
        arms = ["all"]
    d = raw.get("detect", {})
    if not isinstance(d, dict):
        raise ConfigError(path, "detect", "expected a table")
    fields = {f: type(getattr(Detect(), f)) for f in Detect.__dataclass_fields__}
    kw = {}
    for k, v in d.items():
        if k not in fields:
            raise ConfigError(path, f"detect.{k}", f"unknown key; expected one of {', '.join(sorted(fields))}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(path, f"detect.{k}", f"expected a finite non-negative number, got {v!r}")
        if k in ("permutations", "baseline_nights", "seed") and not isinstance(v, int):
            raise ConfigError(path, f"detect.{k}", f"expected an integer, got {v!r}")
        kw[k] = int(v) if k in ("permutations", "baseline_nights", "seed") else float(v)
    b = raw.get("bisect", {})
    if not isinstance(b, dict):
        raise ConfigError(path, "bisect", "expected a table")
    if set(b) - {"max_trials"}:
        raise ConfigError(path, f"bisect.{sorted(set(b) - {'max_trials'})[0]}", "unknown key; expected max_trials")
    max_trials = b.get("max_trials")
    if max_trials is not None and (isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1):
        raise ConfigError(path, "bisect.max_trials", f"expected an integer >= 1, got {max_trials!r}")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip() or "\0" in name):
        raise ConfigError(path, "name", f"expected a non-empty string (the sweep's name), got {name!r}")
    return SweepConfig(path=path.resolve(), name=str(name or path.stem), experiment=exp_path,
                       ref=ref, arms=tuple(dict.fromkeys(arms)), repeat=repeat, detect=Detect(**kw),
                       bisect_max_trials=max_trials)


# --------------------------------------------------------------------------- measuring
def measure_arms(session, specs: list[str], *, repeat: int, commit: str | None = None, tag: str | None = None,
                 kind: str = "run", params: dict | None = None) -> tuple[str, dict, list[TrialResult]]:
    """Like :func:`bisect_lab.campaign.run_arms`, on a given base ``commit`` and with a ``tag`` on
    every trial (the sweep name, a pytest node id). Returns (campaign id, run summary, trials).

    Arms are interleaved in a seeded, balanced random order, so drift spreads over all arms.
    """
    from .arms import parse_arm
    from .campaign import _finish, balanced_order, open_campaign, preflight
    from .runner import Executor, TrialSpec
    from .summaries import run_summary
    exp = session.experiment
    arms: list[Arm] = []
    for s in specs:
        a = parse_arm(s, exp.patchset)
        if a.spec not in [x.spec for x in arms]:
            arms.append(a)
    p = {"arms": [a.spec for a in arms], "repeat": repeat, "seed": exp.design.seed, "commit": commit, "tag": tag,
         "warmup": max(0, exp.benchmark.warmup), "min_effect": exp.design.min_effect, "alpha": exp.design.alpha,
         "metric": exp.benchmark.metric, "higher_is_better": exp.benchmark.higher_is_better}
    p.update(params or {})
    cid, _ = open_campaign(session, kind, p, None)
    session.campaign = cid

    def go():
        preflight(session, arms, commit)
        ex = Executor(exp, session.store, cid, session.workers, on_trial=session.on_trial,
                      on_replay=session.on_replay, log=session.log)
        # Warmup rounds (the experiment's [benchmark] warmup) are stored tagged "warmup" and never judged.
        warmup = max(0, exp.benchmark.warmup)
        order = balanced_order(arms, warmup + repeat, exp.design.seed)
        if session.on_plan:
            session.on_plan(len(order) * len(session.workers))
        nh = len(session.workers)
        batch = [TrialSpec(arm, commit, "warmup" if i < warmup * len(arms) else tag)
                 for i, arm in enumerate(order) for _ in range(nh)]
        step = nh * len(arms)
        for i in range(0, len(batch), step):
            ex.run_batch(batch[i:i + step], per_host=True)
        return run_summary(exp, arms, [t for t in session.store.trials(cid) if t.tag != "warmup"], cid)

    summary = _finish(session, cid, go)
    return cid, summary, [t for t in session.store.trials(cid) if t.tag != "warmup"]


# --------------------------------------------------------------------------- history
@dataclass
class Night:
    """One night of a sweep: its campaign, commit and the ok values per arm."""

    campaign: str
    created: float
    commit: str | None
    values: dict[str, list[float]]
    judgement: dict | None
    failed: int = 0

    def median(self, arm: str) -> float | None:
        v = self.values.get(arm)
        return statistics.median(v) if v else None


def sweep_history(store, name: str, metric: str | None = None) -> list[Night]:
    """Every finished night of sweep ``name``, oldest first."""
    from .summaries import positive_metric
    nights = []
    for c in store.campaigns("sweep"):
        if c.params.get("sweep") != name or c.status != "done":
            continue
        m = metric or c.params.get("metric")
        values: dict[str, list[float]] = {}
        failed = 0
        for t in store.trials(c.id):
            if t.tag == "warmup":
                continue
            v = positive_metric(t.metrics.get(m)) if t.ok else None
            if v is not None:
                values.setdefault(t.arm, []).append(v)
            elif not t.ok:
                failed += 1
        nights.append(Night(c.id, c.created, c.params.get("commit"), values, c.result, failed))
    return nights


def sweep_names(store) -> list[str]:
    """Names of the sweeps recorded in a store."""
    return sorted({c.params.get("sweep") for c in store.campaigns("sweep") if c.params.get("sweep")})


# --------------------------------------------------------------------------- judging
def _alerted(night: Night, arm: str) -> bool:
    for s in (night.judgement or {}).get("series", []):
        if s.get("arm") == arm and s.get("status") == "regression":
            return True
    return False


def judge_series(nights: list[Night], arm: str, *, higher_is_better: bool, min_effect: float,
                 detect: Detect = Detect()) -> dict:
    """Judge the newest night of one series (``nights[-1]``) against its own history.

    Returns a JSON-able dict: ``status`` ("regression" | "improvement" | "ok" | "no-history" |
    "no-data"), ``reason``, the ``comparison`` with the baseline, the baseline nights and commit
    (``last_good_commit``), ``change_points`` over the night medians, and the series itself.
    """
    from .stats.compare import compare
    from .sweep_changepoints import e_divisive
    series = [(i, n) for i, n in enumerate(nights) if n.values.get(arm)]
    out: dict = {"arm": arm, "status": "no-data", "reason": "", "comparison": None, "change_points": [],
                 "baseline": [], "last_good_commit": None, "new_commit": nights[-1].commit if nights else None,
                 "medians": [n.median(arm) for n in nights]}
    if not nights or not nights[-1].values.get(arm):
        out["reason"] = "no successful trial of this arm tonight"
        return out
    new_i = len(nights) - 1
    hist = [(i, n) for i, n in series if i < new_i]
    meds = [n.median(arm) for _, n in series]
    idx_of = [i for i, _ in series]
    cps = e_divisive(meds, alpha=detect.cp_alpha, permutations=detect.permutations, min_size=2, seed=detect.seed)
    out["change_points"] = [dict(cp.to_dict(), night=idx_of[cp.index], commit=nights[idx_of[cp.index]].commit)
                            for cp in cps]
    if not hist:
        out.update(status="no-history", reason="first night of this series: nothing to compare with yet")
        return out
    last_alert = max((i for i, n in hist if _alerted(n, arm)), default=-1)
    last_cp = max((idx_of[cp.index] for cp in cps if idx_of[cp.index] < new_i), default=-1)
    start = max(last_alert, last_cp, 0)
    base = [(i, n) for i, n in hist if i >= start][-max(1, detect.baseline_nights):]
    if not base:
        base = hist[-1:]
    out["baseline"] = [n.campaign for _, n in base]
    out["last_good_commit"] = base[-1][1].commit
    a = [v for _, n in base for v in n.values[arm]]
    b = nights[-1].values[arm]
    reasons = []
    status = "ok"
    if len(a) >= 2 and len(b) >= 2:
        c = compare(a, b, higher_is_better=higher_is_better, min_effect=min_effect, alpha=detect.alpha)
        out["comparison"] = c.to_dict()
        step = math.log(c.ratio)
        # "Beyond min_effect with confidence": the interval's bound nearest to 1 is itself a change
        # of at least min_effect (a significant 0.5% shift of a 1%-noise machine is not an alert).
        near = c.ci_high if step < 0 else c.ci_low
        big = (near <= 1 - min_effect) if step < 0 else (near >= 1 + min_effect)
        beyond_noise, why_not = True, ""
        if len(base) >= 3:
            # Nights differ more than trials do (builds, clocks, machine state): the new night's median
            # must also fall outside the prediction interval of the baseline nights' medians.
            from scipy import stats as _st
            bm = [math.log(statistics.median(n.values[arm])) for _, n in base]
            sd = statistics.stdev(bm)
            q = _st.t.ppf(1 - detect.alpha / 2, len(bm) - 1)
            half = q * sd * math.sqrt(1 + 1 / len(bm))
            new_m = math.log(statistics.median(b))
            out["night_noise"] = sd
            out["prediction_interval"] = [math.exp(statistics.fmean(bm) - half), math.exp(statistics.fmean(bm) + half)]
            beyond_noise = abs(new_m - statistics.fmean(bm)) > half
            why_not = (f"within the night-to-night spread of the last {len(bm)} nights "
                       f"(prediction interval {out['prediction_interval'][0]:.4g} .. {out['prediction_interval'][1]:.4g})")
        if c.verdict == "different" and big and beyond_noise:
            status = "regression" if c.regression else "improvement"
            reasons.append(f"{abs(c.ratio - 1) * 100:.1f}% {'worse' if c.regression else 'better'} than the last "
                           f"good run ({len(base)} night(s), 95% CI {(c.ci_low - 1) * 100:+.1f}% .. "
                           f"{(c.ci_high - 1) * 100:+.1f}%, p={c.p_value:.2g})")
        elif c.verdict == "different" and big:
            reasons.append(f"{(c.ratio - 1) * 100:+.1f}% vs the last good run, but {why_not}: no alert")
        else:
            words = {"same": f"the same within ±{min_effect * 100:g}%", "unknown": "undecided: noisy",
                     "different": "significant, but not beyond the minimum effect"}[c.verdict]
            reasons.append(f"{(c.ratio - 1) * 100:+.1f}% vs the last good run ({words})")
    # Change points: a significant shift to a worse level that started after the last alert and holds tonight.
    for cp in reversed(cps):
        night = idx_of[cp.index]
        if night <= last_alert or night > new_i:
            continue
        worse = (cp.ratio - 1) * (1 if not higher_is_better else -1) > 0
        big = abs(math.log(cp.ratio)) >= -math.log(1 - min_effect)
        if worse and big and status != "regression":
            status = "regression"
            reasons.append(f"change point at night {night + 1} (commit {str(nights[night].commit)[:12]}): level "
                           f"{(cp.ratio - 1) * 100:+.1f}%, permutation p={cp.p_value:.3f}")
            out["last_good_commit"] = nights[night - 1].commit if night > 0 else out["last_good_commit"]
        break
    out["status"] = status
    out["reason"] = "; ".join(reasons)
    return out


# --------------------------------------------------------------------------- the command
def run_sweep(path, *, results, cache=None, bisect_on_regression: bool = False, json_mode: bool = False,
              log: Callable[[str], None] | None = None, hosts=None) -> dict:
    """One night of a sweep: fetch the ref, measure the matrix on its commit, judge every series.

    Returns a JSON-able dict with ``regressions`` (arm specs; non-empty means exit 1), ``series``
    (one judgement per arm), the night's ``campaign`` and ``commit``, and ``bisections`` when
    ``bisect_on_regression`` launched commit bisections between the last good commit and this one.
    ``log`` receives progress lines (default: the ``bisect_lab.sweep`` logger).
    """
    from .campaign import Session
    from .config import load_experiment
    from .store import Store
    cfg = load_sweep(path)
    exp = load_experiment(cfg.experiment)
    log = log or log_.info
    store = Store(results)
    if hosts is None:
        from .hosts import make_hosts
        hosts = make_hosts(exp.host, cache_dir=cache)
    session = Session(exp, store, hosts, log=log)
    try:
        ref = cfg.ref or exp.target.ref or "HEAD"
        trees = session.workers[0].trees
        from .redact import redact_text
        log(f"sweep {cfg.name}: fetching {redact_text(exp.target.repo)}")      # a logger is a sink too
        trees.fetch()
        commit = trees.resolve(ref)
        info = trees.commit_info(commit)
        log(f"sweep {cfg.name}: {ref} is {commit[:12]} {info.subject}")
        repeat = cfg.repeat or exp.design.repeat
        min_effect = cfg.detect.min_effect if cfg.detect.min_effect is not None else exp.design.min_effect
        cid, summary, trials = measure_arms(
            session, list(cfg.arms), repeat=repeat, commit=commit, tag=f"sweep:{cfg.name}", kind="sweep",
            params={"sweep": cfg.name, "sweep_file": str(cfg.path), "ref": ref, "metric": exp.benchmark.metric})
        nights = sweep_history(store, cfg.name, exp.benchmark.metric)
        series = [judge_series(nights, a["arm"], higher_is_better=exp.benchmark.higher_is_better,
                               min_effect=min_effect, detect=cfg.detect) for a in summary["arms"]]
        regressions = [s["arm"] for s in series if s["status"] == "regression"]
        result = {"sweep": cfg.name, "campaign": cid, "ref": ref, "commit": commit,
                  "subject": info.subject, "night": len(nights), "metric": exp.benchmark.metric,
                  "higher_is_better": exp.benchmark.higher_is_better, "min_effect": min_effect,
                  "series": series, "regressions": regressions, "summary": summary, "bisections": [],
                  "report_command": f"bisect-lab --results {results} report {cfg.name} --format html"}
        # The judgement is part of the night: the next night reads it to know where a level started.
        store.finish_campaign(cid, "done", {k: v for k, v in result.items() if k != "summary"})
        if bisect_on_regression and regressions:
            result["bisections"] = _bisect(session, series, regressions, commit, cfg, log)
            store.finish_campaign(cid, "done", {k: v for k, v in result.items() if k != "summary"})
        return result
    finally:
        session.close()
        store.close()


def _bisect(session, series, regressions, commit, cfg, log) -> list[dict]:
    from .bisection import bisect_commits
    out = []
    done: set[tuple] = set()
    for s in series:
        if s["arm"] not in regressions:
            continue
        good = s.get("last_good_commit")
        if not good or good == commit:
            out.append({"arm": s["arm"], "status": "skipped",
                        "reason": "the last good run was on the same commit: the change is not in the code"})
            continue
        key = (good, commit)
        if key in done:           # one bisection per commit range is enough for every arm it hurt
            continue
        done.add(key)
        log(f"bisecting {good[:12]}..{commit[:12]} with arm {s['arm']!r}")
        try:
            res = bisect_commits(session, good, commit, arm=s["arm"], resume=None, max_trials=cfg.bisect_max_trials)
        except Exception as e:      # a failed bisection must not hide tonight's alert
            res = {"status": "error", "error": f"{type(e).__name__}: {e}"}
        out.append(dict(res, arm=s["arm"], good=good, bad=commit))
    return out


# --------------------------------------------------------------------------- rendering
def render_sweep(res: dict, console) -> None:
    """Print a sweep result for people (a rich Console is passed in by the entry point)."""
    from rich.markup import escape as e        # arms, subjects, reasons are the user's text
    from rich.table import Table
    reg = res.get("regressions") or []
    head = "[bold red]REGRESSION[/]" if reg else "[green]no regression[/]"
    console.print(f"{head} — " + e(f"sweep {res['sweep']}, night {res['night']}, {res['ref']} = "
                                   f"{res['commit'][:12]} {res.get('subject', '')} (campaign {res['campaign']})"))
    t = Table(title=e(f"{res['metric']} per arm ({'higher' if res['higher_is_better'] else 'lower'} is better)"))
    for col in ("arm", "status", "tonight", "last good", "change", "why"):
        t.add_column(col)
    for s in res["series"]:
        c = s.get("comparison") or {}
        meds = [m for m in s.get("medians", []) if m is not None]
        color = {"regression": "bold red", "improvement": "green"}.get(s["status"], "")
        t.add_row(e(s["arm"]), f"[{color}]{s['status']}[/]" if color else e(s["status"]),
                  f"{meds[-1]:.2f}" if meds else "-",
                  e((s.get("last_good_commit") or "-")[:12]),
                  f"{(c['ratio'] - 1) * 100:+.1f}%" if c.get("ratio") else "-", e(str(s.get("reason", ""))))
    console.print(t)
    for b in res.get("bisections") or []:
        if b.get("commit"):
            what = "first of several steps at" if b.get("status") == "several" else "first bad commit"
            console.print(e(f"bisection ({b['arm']}): {what} {b['commit']} [{b.get('status')}]"))
        else:
            console.print(e(f"bisection ({b['arm']}): {b.get('status')} {b.get('reason') or b.get('error') or ''}"))
    console.print(e(f"report: {res.get('report_command')}"))
