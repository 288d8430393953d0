"""Sweep files (layer 3): what a nightly regression sweep follows, measures and alerts on.

A sweep file (TOML)::

    name = "demo-nightly"            # default: the file's stem; the series' identity in the store
    experiment = "demo.toml"         # relative to this file
    ref = "origin/main"              # what to follow (default: the experiment's [target] ref)
    repeat = 5                       # trials per arm per night (default: the experiment's [design] repeat)

    [matrix]
    arms = ["all", "all-minus topk"] # arm specs (docs/contracts.md, Arm specs)
    # patches = ["all", "topk"]      # or: selections x env values, expanded by bisect_lab.matrix.expand
    # env = { NCCL_PROTO = ["LL", "Simple"] }

    [detect]
    min_effect = 0.03     # smallest slowdown worth an alert (default: the experiment's min_effect)
    alpha = 0.05          # level of the new-night test
    cp_alpha = 0.01       # level of the change-point permutation test
    permutations = 199
    noise_k = 3.0         # a step must also exceed noise_k x the night-to-night spread
    baseline_nights = 5   # nights pooled as "the last good run"

Each night is one campaign of kind ``sweep`` whose trials carry the commit measured; how a night's
series are judged is :mod:`bisect_lab.stats.series`.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .stats.series import Detect

__all__ = ["SweepConfig", "load_sweep"]


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
