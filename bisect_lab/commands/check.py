"""``bisect-lab check EXP``: is the experiment ready for a campaign, and how noisy is it here?

In order: the experiment file loads (its own precise errors); no ``FILL-IN`` placeholder of
``init`` is left; the patch set applies, alone and together (``patches check``); what a ``run``
would measure (arms, hosts, the benchmark command with its placeholders filled); how busy each
host is (load average against its cores, other processes on its GPUs); and, unless
``--no-probe``, a few benchmark runs of one arm (``--probe N``, default 3; never stored) whose
spread says how many trials per arm a ``min_effect`` change needs. A problem is exit 2
after everything has been shown; a probe that measures nothing is exit 4.
"""
from __future__ import annotations

import os
import time

from ..errors import EXIT_OK, NoMeasurementError, UsageError
from . import _options
from ._context import Context, experiment_or_demo, to_json

FILL_IN = "FILL-IN"


def setup_arguments(subparsers):
    p = subparsers.add_parser("check", help="validate an experiment, show what would run, probe the noise once")
    _options.add_experiment(p)
    p.add_argument("--arm", default="all", help="the arm the noise probe runs (default all)")
    p.add_argument("--probe", type=_options.positive_int, default=3, help="benchmark runs of the probe (default 3)")
    p.add_argument("--no-probe", action="store_true", help="validate and show only: run no benchmark")
    p.set_defaults(func=run_from_args)
    return p


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.experiment, arm=args.arm, probe=0 if args.no_probe else args.probe)


def run(ctx: Context, experiment: str | None, *, arm: str = "all", probe: int = 3) -> int:
    """Check ``experiment`` (the bundled demo when None) and print what was found."""
    from ..arms import parse_arm
    exp = experiment_or_demo(experiment)
    problems: list[str] = []
    out: dict = {"experiment": str(exp.path), "problems": problems, "warnings": []}
    b = exp.benchmark
    left = [where for where, text in [("[benchmark] command", b.command)]
            + [(f"[benchmark.patterns] {k}", v) for k, v in b.patterns] if FILL_IN in text]
    if left:
        problems.append(f"{', '.join(left)} still hold{'s' if len(left) == 1 else ''} the {FILL_IN} placeholder "
                        f"of `bisect-lab init`: replace it in {exp.path}")
    probe_arm = parse_arm(arm, exp.patchset)
    from .run import default_arms
    # what `run EXPERIMENT` alone measures, the baseline first
    arms = default_arms([], None, exp.patchset) if exp.patchset and exp.patchset.patches else ["none"]
    hosts = ctx.hosts(exp)
    try:
        out["patches"] = _patches(exp, hosts[0], problems)
        out["would_run"] = {"arms": [parse_arm(a, exp.patchset).spec for a in arms], "hosts": [h.name for h in hosts],
                            "trials": len(arms) * exp.design.repeat * len(hosts), "repeat": exp.design.repeat,
                            "warmup": b.warmup, "metric": b.metric, "higher_is_better": b.higher_is_better,
                            "command": b.command}      # {tree} filled in once the probe has prepared one
        out["machine"] = [_busy(h, exp, out["warnings"]) for h in hosts]
        if probe and not left and out["patches"].get("ok", True):
            out["probe"] = _probe(exp, hosts[0], probe_arm, probe, out)
        elif probe:
            out["probe"] = None
            out["warnings"].append("no noise probe: fix the problems first")
    finally:
        for h in hosts:
            h.close()
    if ctx.json:
        print(to_json(out))
    else:
        _show(out)
    if problems:
        raise UsageError(f"check: {problems[0]}" + (f" (and {len(problems) - 1} more above)" if len(problems) > 1 else ""))
    if out.get("probe") and not out["probe"].get("n"):
        raise NoMeasurementError(f"check: the noise probe measured nothing: {out['probe'].get('error')}")
    return EXIT_OK


def _patches(exp, host, problems: list[str]) -> dict:
    if exp.patchset is None or not exp.patchset.patches:
        return {"ok": True, "patches": [], "report": "no patch set"}
    from ..trees import check_patchset
    report = check_patchset(host, exp.target, exp.patchset)
    if not report.ok:
        problems.extend(f"patch set: {p}" for p in (report.problems or ["a patch does not apply"]))
    return {"ok": report.ok, "patches": list(exp.patchset.names), "report": str(report)}


def _busy(host, exp, warnings: list[str]) -> dict:
    """Load against cores and what holds the GPUs: a measurement on a busy machine is noisier
    (and its timing skewed), as pyperf warns."""
    from ..errors import HostError
    from ..gpu import GpuInspector
    row: dict = {"host": host.name}
    try:
        if host.is_local:
            cores, load = os.cpu_count() or 1, os.getloadavg()[0]
        else:
            r = host.quick(["sh", "-c", "nproc; cut -d' ' -f1 /proc/loadavg"], timeout_s=30)
            cores, load = (int(r.stdout.split()[0]), float(r.stdout.split()[1]))
        row.update(cores=cores, load1=load)
        if load >= 0.5 * cores:
            warnings.append(f"{host.name} is busy: load average {load:.2f} on {cores} core(s); "
                            "measurements will be noisier (stop other work, or expect more trials)")
    except (HostError, OSError, ValueError, IndexError) as e:
        row["load_error"] = str(e)
    if exp.gpu.enabled:
        try:
            snap = GpuInspector(host).probe()
            row["gpus"] = snap.summary() if snap.has_gpu else snap.reason or "no GPU"
            for g in snap.select(exp.gpu.devices):
                used = g.memory_used_mb or 0
                if g.processes or used > exp.gpu.idle_memory_mb or (g.utilization_gpu or 0) > 5:
                    warnings.append(f"{host.name} GPU {g.index} is busy: {used:.0f} MiB used, utilisation "
                                    f"{g.utilization_gpu or 0:.0f}%, {len(g.processes or ())} process(es); "
                                    "a campaign waits for it to be idle")
        except (HostError, OSError, ValueError) as e:
            row["gpus"] = f"GPU probe failed: {e}"
    return row


def _probe(exp, host, arm, n: int, out: dict) -> dict:
    """``n`` runs of ``arm`` (never stored): its spread and trial time, and the trials per arm a
    ``min_effect`` change needs at that spread."""
    from ..placeholders import shell_substitute
    from ..runner import HostWorker, TrialSpec
    from ..stats import plan_trials, summarize
    w = HostWorker(host, exp)
    tree = w.prepare(TrialSpec(arm))
    out["would_run"]["command"] = shell_substitute(exp.benchmark.command, {"tree": tree.path,
                                                                          "out": "<a fresh folder per trial>"})
    values, times, error = [], [], ""
    for i in range(n + max(0, exp.benchmark.warmup)):
        t0 = time.monotonic()
        r = w.run(TrialSpec(arm), "check", i).result
        if i < exp.benchmark.warmup:
            continue
        if r.ok and r.metrics.get(exp.benchmark.metric):
            values.append(float(r.metrics[exp.benchmark.metric]))
            times.append(time.monotonic() - t0)
        else:
            error = r.error
    res: dict = {"arm": arm.spec, "runs": n, "n": len(values), "values": values, "error": error}
    if len(values) >= 2:
        s = summarize(values)
        per_arm = int(plan_trials(values, min_effect=exp.design.min_effect, alpha=exp.design.alpha))
        trial_s = sum(times) / len(times)
        res.update(cv=s.cv, median=s.median, trial_s=trial_s, trials_per_arm=per_arm, min_effect=exp.design.min_effect,
                   minutes_two_arms=2 * per_arm * trial_s / 60)
    return res


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _show(out: dict) -> None:
    from ._context import console as Console  # wide when piped: no wrapping at 80 columns
    from rich.markup import escape
    c = Console()
    say = lambda text: c.print(escape(text))
    say(f"experiment: {out['experiment']}")
    say(f"patch set: {out['patches']['report']}")
    wr = out["would_run"]
    named = wr["arms"][0] + " (the baseline)" + "".join(f" and {a}" for a in wr["arms"][1:])
    say(f"`bisect-lab run` would measure {named} on {', '.join(wr['hosts'])}: {wr['trials']} trials "
        f"({wr['repeat']} per arm" + (f", after {wr['warmup']} warmup round(s)" if wr["warmup"] else "")
        + f"), metric {wr['metric']} "
        f"({'higher' if wr['higher_is_better'] else 'lower'} is better)")
    if wr.get("command"):
        say(f"benchmark command: {wr['command']}")
    for m in out["machine"]:
        load = f"load {m['load1']:.2f} on {m['cores']} core(s)" if "load1" in m else m.get("load_error", "")
        say(f"{m['host']}: {load}" + (f"; GPUs: {m['gpus']}" if m.get("gpus") else ""))
    p = out.get("probe")
    if p and p.get("trials_per_arm"):
        say(f"noise probe ({p['n']} runs of {p['arm']}): CV {100 * p['cv']:.1f}%, {p['trial_s']:.1f} s per trial -> "
            f"a {100 * p['min_effect']:g}% effect needs about {p['trials_per_arm']} trials per arm "
            f"(two arms: about {_duration(60 * p['minutes_two_arms'])})")
    elif p:
        say(f"noise probe ({p['runs']} runs of {p['arm']}): {p['n']} measured" + (f"; {p['error']}" if p['error'] else ""))
    for w in out["warnings"]:
        c.print(f"[yellow]warning:[/] {escape(w)}")
    for pr in out["problems"]:
        c.print(f"[red]problem:[/] {escape(pr)}")
