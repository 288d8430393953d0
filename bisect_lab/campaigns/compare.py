"""``compare``: two shell commands measured against each other, without an experiment file (layer 5).

The comparison is an ordinary measuring campaign: each command is an arm (``none`` plus the
command in :data:`COMMAND_VAR`), measured in the balanced random rounds of ``run``, warmup
rounds first, and judged by the same summaries and comparisons; it is stored as a ``compare``
campaign whose parameters hold both commands, so ``report`` reads it like a ``run``.

The target is an empty plain folder (nothing is built or patched); the benchmark changes to the
user's folder and runs the arm's command through ``/bin/sh``, under a small timer. The metric is the command's wall
time (:data:`TIME_METRIC`, lower is better), taken around the command alone by a small timer so
that the interpreter's start is not counted, or a number its output shows (a regex with one group).
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..arms import make_arm
from ..model import Arm, Benchmark, Design, Experiment, Target
from ..results import RunResult
from .run import _measure
from .session import Session

COMMAND_VAR = "BISECT_LAB_CMD"
TIME_METRIC = "wall_s"
REGEX_METRIC = "value"
KIND = "compare"

# Runs the arm's command in the user's folder and prints its wall time last; the exit status is
# the command's, so a failing command is a failed trial as in any campaign.
_TIMER = ("import os, subprocess, sys, time\n"
          "t = time.perf_counter()\n"
          "r = subprocess.run(os.environ['" + COMMAND_VAR + "'], shell=True, cwd=sys.argv[1])\n"
          "d = time.perf_counter() - t\n"
          "sys.stdout.flush()\n"
          "if sys.argv[2] == 'time': print(f'bisect-lab-compare wall_s {d:.9f}', flush=True)\n"
          "sys.exit(r.returncode)\n")


def compare_experiment(commands: list[str], *, cwd: Path, target: Path, pattern: str | None = None,
                       higher_is_better: bool = False, repeat: int = 10, warmup: int = 1,
                       timeout_s: float = 600.0, seed: int = 0, min_effect: float = 0.02) -> Experiment:
    """The in-memory experiment of a comparison of ``commands`` run in ``cwd``.

    ``target``: an empty folder standing in for the repository (the arms differ by command
    only). ``pattern``: a regex with one group read from the output instead of the wall time."""
    # The timer runs the command in both modes: it stays alive as the command's parent, so that
    # the arm's environment can be seen reaching the command's processes even when it is short.
    command = (f"{shlex.quote(sys.executable)} -c {shlex.quote(_TIMER)} {shlex.quote(str(cwd))} "
               + ("time" if pattern is None else "output"))
    if pattern is None:
        patterns = ((TIME_METRIC, r"^bisect-lab-compare wall_s ([0-9.eE+-]+)\s*$"),)
        metric, hib = TIME_METRIC, False
    else:
        patterns = ((REGEX_METRIC, pattern),)
        metric, hib = REGEX_METRIC, higher_is_better
    return Experiment(path=None, name="compare", target=Target(repo=str(target)),
                      benchmark=Benchmark(command=command, timeout_s=timeout_s, parser="regex", metric=metric,
                                          higher_is_better=hib, patterns=patterns, warmup=max(0, warmup)),
                      design=Design(seed=seed, repeat=repeat, min_effect=min_effect))


def command_arms(commands: list[str]) -> list[Arm]:
    """One arm per command, in the order given (the first is the reference)."""
    return [make_arm(frozenset(), ((COMMAND_VAR, c),), None) for c in commands]


def command_of(arm_spec: str) -> str:
    """The command an arm of a comparison runs (its spec holds it as ``BISECT_LAB_CMD=...``)."""
    words = shlex.split(arm_spec)
    for w in words:
        name, _, value = w.partition("=")
        if name == COMMAND_VAR:
            return value
    return arm_spec


def compare_commands(session: Session, commands: list[str], *, cwd: Path) -> RunResult:
    """Measure ``commands`` in the balanced rounds of ``run`` and compare them (the second against
    the first); a new ``compare`` campaign holding both commands and the folder they ran in."""
    exp = session.experiment
    arms = command_arms(commands)
    repeat = exp.design.repeat
    params = {"commands": list(commands), "cwd": str(cwd), "arms": [a.spec for a in arms], "repeat": repeat,
              "seed": exp.design.seed, "warmup": exp.benchmark.warmup, "metric": exp.benchmark.metric,
              "higher_is_better": exp.benchmark.higher_is_better, "min_effect": exp.design.min_effect,
              "alpha": exp.design.alpha}
    if exp.benchmark.metric == REGEX_METRIC:
        params["pattern"] = exp.benchmark.patterns[0][1]
    session.open(KIND, params, None)

    def body() -> RunResult:
        res = _measure(session, arms, repeat=repeat, commit=None, tag=None, plan_line=False)
        res.repeat = repeat
        res.more = {**(res.more or {}), "commands": list(commands), "cwd": str(cwd)}
        return res

    return session.finish(body)
