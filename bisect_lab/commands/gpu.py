"""``bisect-lab gpu status | reset``: the GPUs of an experiment's hosts (or of this machine)."""
from __future__ import annotations

import sys

from ..errors import EXIT_NO_MEASUREMENT, EXIT_OK
from . import _options
from ._context import Context, experiment_or_demo, to_json


def setup_arguments(subparsers):
    g = subparsers.add_parser("gpu", help="GPU status / reset of a host")
    gsub = g.add_subparsers(dest="action", required=True, parser_class=type(g))
    gs = gsub.add_parser("status")
    _options.add_experiment(gs)
    gr = gsub.add_parser("reset", help="kill GPU processes bisect-lab started (or all, with --kill-all) and wait idle")
    _options.add_experiment(gr)
    gr.add_argument("--kill-all", action="store_true", help="also kill GPU processes bisect-lab did not start (logged)")
    g.set_defaults(func=run_from_args)
    return g


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.action, args.experiment, kill_all=getattr(args, "kill_all", False))


def run(ctx: Context, action: str, experiment: str | None = None, *, kill_all: bool = False) -> int:
    """``status`` or ``reset`` the GPUs of ``experiment``'s hosts (this machine when None).

    A reset that did not succeed on some host is exit 4, after the full output.
    """
    from ..gpu import GpuInspector, reset
    exp = experiment_or_demo(experiment) if experiment else None
    if exp is not None:
        hosts = ctx.hosts(exp)
        policy = exp.gpu
    else:
        from ..hosts import LocalHost
        from ..model import GpuPolicy
        hosts, policy = [LocalHost(cache_dir=ctx.cache_dir())], GpuPolicy()
    try:
        out = {}
        for h in hosts:
            if action == "status":
                snap = GpuInspector(h).probe()
                out[h.name] = snap.to_dict()
            else:
                if kill_all:
                    from dataclasses import replace
                    policy = replace(policy, kill="all-gpu-processes")
                res = reset(h, policy, owned_pids=())
                out[h.name] = res.to_dict()
    finally:
        for h in hosts:
            h.close()
    if ctx.json:
        print(to_json(out))
    else:
        from ..redact import redact_text
        for name, d in out.items():
            for line in (status_lines if action == "status" else reset_lines)(name, d):
                print(redact_text(line))
    if action == "reset":
        # "could not" is exit 4 (as a host that cannot be made ready for a trial), after the full output
        failed = [(name, r) for name, r in out.items() if isinstance(r, dict) and r.get("ok") is False]
        for name, r in failed:
            print(f"bisect-lab: error: gpu reset on {name} did not succeed: {r.get('status')}: {r.get('reason')}",
                  file=sys.stderr)
        if failed:
            return EXIT_NO_MEASUREMENT
    return EXIT_OK


def _num(v, unit: str) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{v:.0f}{unit}"


def _gpu_line(g: dict) -> str:
    procs = g.get("processes")
    n = "not visible" if procs is None else str(len(procs))
    throttle = ", ".join(r for r in g.get("throttle_reasons") or () if r != "gpu_idle") or "none"
    return (f"  GPU {g.get('index')}: {g.get('name') or '?'}, memory {_num(g.get('memory_used_mb'), '')}/"
            f"{_num(g.get('memory_total_mb'), ' MiB')}, utilization {_num(g.get('utilization_gpu'), '%')}, "
            f"{_num(g.get('temperature_c'), ' C')}, SM clock {_num(g.get('sm_clock_mhz'), '')}/"
            f"{_num(g.get('sm_clock_max_mhz'), ' MHz')}, power {_num(g.get('power_w'), '')}/"
            f"{_num(g.get('power_limit_w'), ' W')}, throttle {throttle}, processes {n}")


def status_lines(host: str, snap: dict) -> list[str]:
    """``gpu status`` for people: one line per host, one per GPU (``--json`` has every field)."""
    gpus = snap.get("gpus") or []
    if not gpus:
        return [f"{host}: {snap.get('reason') or 'no GPU'}"]
    driver = f", driver {snap['driver_version']}" if snap.get("driver_version") else ""
    return [f"{host}: {len(gpus)} GPU(s) via {snap.get('backend')}{driver}"] + [_gpu_line(g) for g in gpus]


def reset_lines(host: str, res: dict) -> list[str]:
    """``gpu reset`` for people: what happened on the host and what was killed."""
    lines = [f"{host}: {res.get('status')}" + (f" ({res['reason']})" if res.get("reason") else "")
             + (f", waited {res['waited_s']:.1f}s" if isinstance(res.get("waited_s"), (int, float)) else "")]
    lines += [f"  killed pid {k.get('pid')}: {k.get('cmdline') or '?'}" for k in res.get("killed") or []]
    return lines
