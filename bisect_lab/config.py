"""Experiment files (DESIGN 3.1): TOML -> frozen :class:`~bisect_lab.model.Experiment`.

Every error names the file, the key and what was expected. Relative paths resolve
against the experiment file's folder.
"""
from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .model import ATTRIBUTION_STRATEGIES, Benchmark, Design, Experiment, GpuPolicy, HostConfig, Target
from .patchset import load_patchset
from .redact import is_secret_name, needs_tag, remember

_URL_RE = re.compile(r"^([a-z][a-z0-9+.-]*://|[^/\s]+@[^/\s]+:)", re.I)


def is_url(repo: str) -> bool:
    return bool(_URL_RE.match(repo))


class _Section:
    """Typed, key-checked access to one table of the TOML file."""

    def __init__(self, path: Path, name: str, data: Any, known: set[str]):
        self.path, self.name = path, name
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(path, name, "expected a table")
        unknown = set(data) - known
        if unknown:
            k = sorted(unknown)[0]
            close = difflib.get_close_matches(k, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(path, f"{name}.{k}", f"unknown key{hint}; expected one of {', '.join(sorted(known))}")
        self.data = data

    def _err(self, key, expected):
        return ConfigError(self.path, f"{self.name}.{key}", f"expected {expected}, got {self.data[key]!r}")

    def get(self, key, kind, default=None, *, required=False, what=None):
        if key not in self.data:
            if required:
                raise ConfigError(self.path, f"{self.name}.{key}", f"missing; expected {what or kind.__name__}")
            return default
        v = self.data[key]
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if kind is int and isinstance(v, bool):
            raise self._err(key, what or "an integer")
        if not isinstance(v, kind):
            raise self._err(key, what or kind.__name__)
        return v

    def positive(self, key, kind, default):
        v = self.get(key, kind, default)
        if v is not None and v <= 0:
            raise self._err(key, "a positive number")
        return v

    def str_list(self, key, default=()):
        v = self.data.get(key, list(default))
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(self.path, f"{self.name}.{key}", f"expected a string or a list of strings, got {v!r}")
        return tuple(v)


def _parser_names() -> set[str]:
    try:
        from . import parsers
        return set(getattr(parsers, "PARSERS", {})) or set()
    except Exception:          # parsers is optional at config time
        return set()


def load_experiment(path: str | Path) -> Experiment:
    """Load and validate an experiment file, including its patch set."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(path, None, "experiment file not found")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(path, None, f"malformed TOML: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(path, None, "not a text file (expected TOML)") from None
    return experiment_from_dict(raw, path)


def experiment_from_dict(raw: dict, path: Path) -> Experiment:
    path = Path(path).resolve()
    base = path.parent

    if "target" not in raw:
        raise ConfigError(path, "target", "missing table; expected [target] with repo = ...")
    t = _Section(path, "target", raw["target"], {"repo", "ref", "patches", "build", "pythonpath", "import_check"})
    repo = t.get("repo", str, required=True, what="a git repository path or URL")
    if not is_url(repo):
        rp = (base / Path(repo).expanduser()).resolve()
        if not rp.exists():
            raise ConfigError(path, "target.repo", f"{rp} does not exist")
        if not rp.is_dir():
            raise ConfigError(path, "target.repo", f"{rp} is not a folder")
        repo = str(rp)
    patches_dir = t.get("patches", str)
    patchset = None
    if patches_dir is not None:
        patchset = load_patchset((base / patches_dir).resolve())
    target = Target(
        repo=repo, ref=t.get("ref", str, "HEAD"),
        patches=patchset.root if patchset else None,
        build=t.get("build", str), pythonpath=t.str_list("pythonpath"),
        import_check=t.get("import_check", str))

    if "benchmark" not in raw:
        raise ConfigError(path, "benchmark", "missing table; expected [benchmark] with command = ...")
    b = _Section(path, "benchmark", raw["benchmark"],
                 {"command", "timeout_s", "parser", "metric", "higher_is_better", "patterns", "warmup", "secondary"})
    parser = b.get("parser", str, "sglang-bench-serving")
    known = _parser_names()
    if known and parser not in known:
        raise ConfigError(path, "benchmark.parser", f"unknown parser {parser!r}; expected one of {', '.join(sorted(known))}")
    patterns = b.get("patterns", dict, {})
    for k, v in patterns.items():
        if not isinstance(v, str):
            raise ConfigError(path, f"benchmark.patterns.{k}", "expected a regex string")
        try:
            rx = re.compile(v)
        except re.error as e:
            raise ConfigError(path, f"benchmark.patterns.{k}", f"bad regex: {e}") from None
        if rx.groups != 1:
            raise ConfigError(path, f"benchmark.patterns.{k}", f"expected a regex with exactly one group, got {rx.groups}")
    if parser == "regex" and not patterns:
        raise ConfigError(path, "benchmark.patterns", "parser = \"regex\" needs [benchmark.patterns] metric = 'regex'")
    metric = b.get("metric", str, "output_throughput")
    if parser == "regex" and metric not in patterns:
        raise ConfigError(path, "benchmark.metric", f"{metric!r} has no pattern in [benchmark.patterns]")
    secondary = []
    for k, v in b.get("secondary", dict, {}).items():
        where = f"benchmark.secondary.{k}"
        if v not in ("higher", "lower"):
            raise ConfigError(path, where, f'expected "higher" or "lower" (which way is better), got {v!r}')
        if k == metric:
            raise ConfigError(path, where, f"{k!r} is already the primary metric ([benchmark] metric)")
        if parser == "regex" and k not in patterns:
            raise ConfigError(path, where, f"{k!r} has no pattern in [benchmark.patterns]")
        secondary.append((k, v == "higher"))
    bench = Benchmark(
        command=b.get("command", str, required=True, what="a shell command"),
        timeout_s=b.positive("timeout_s", float, 600.0), parser=parser, metric=metric,
        higher_is_better=b.get("higher_is_better", bool, True),
        patterns=tuple(sorted(patterns.items())), warmup=b.get("warmup", int, 0),
        secondary=tuple(secondary))

    env_raw = raw.get("env", {})
    if not isinstance(env_raw, dict):
        raise ConfigError(path, "env", "expected a table of VAR = \"value\"")
    env = []
    for k, v in env_raw.items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            raise ConfigError(path, f"env.{k}", "not a valid environment variable name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            got = type(v).__name__ if is_secret_name(k) else repr(v)
            raise ConfigError(path, f"env.{k}", f"expected a string value, got {got}")
        if needs_tag(k, str(v)):
            remember(str(v))      # the benchmark gets it; no sink shows it
        env.append((k, str(v)))

    h = _Section(path, "host", raw.get("host"), {"ssh", "port", "key", "connect_timeout_s", "workdir",
                                                 "python", "accept_unknown_host"})
    host = HostConfig(ssh=h.str_list("ssh"), port=h.get("port", int), key=h.get("key", str),
                      connect_timeout_s=h.positive("connect_timeout_s", float, 10.0),
                      workdir=h.get("workdir", str), python=h.get("python", str, "python3"),
                      accept_unknown_host=h.get("accept_unknown_host", bool, False))

    g = _Section(path, "gpu", raw.get("gpu"), {"devices", "idle_timeout_s", "idle_memory_mb", "kill",
                                               "max_temperature_c", "settle_s", "lock_clocks_mhz", "enabled"})
    devices = g.get("devices", list)
    if devices is not None and not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices):
        raise ConfigError(path, "gpu.devices", f"expected a list of GPU indices, got {devices!r}")
    kill = g.get("kill", str, "campaign")
    if kill not in ("campaign", "all-gpu-processes"):
        raise ConfigError(path, "gpu.kill", f"expected \"campaign\" or \"all-gpu-processes\", got {kill!r}")
    gpu = GpuPolicy(devices=tuple(devices) if devices is not None else None,
                    idle_timeout_s=g.positive("idle_timeout_s", float, 120.0),
                    idle_memory_mb=g.positive("idle_memory_mb", float, 1024.0), kill=kill,
                    max_temperature_c=g.get("max_temperature_c", float),
                    settle_s=g.get("settle_s", float, 0.0),
                    lock_clocks_mhz=g.get("lock_clocks_mhz", int),
                    enabled=g.get("enabled", bool, True))

    d = _Section(path, "design", raw.get("design"), {"seed", "max_trials", "min_effect", "alpha", "strategy",
                                                     "repeat", "confidence", "retries"})
    design = Design(seed=d.get("seed", int, 0), max_trials=d.positive("max_trials", int, 200),
                    min_effect=d.positive("min_effect", float, 0.02), alpha=d.positive("alpha", float, 0.05),
                    strategy=d.get("strategy", str, "adaptive"), repeat=d.positive("repeat", int, 5),
                    confidence=d.positive("confidence", float, 0.95), retries=d.get("retries", int, 2))
    if design.strategy == "auto":         # the name before the strategies had names
        design = replace(design, strategy="adaptive")
    if design.strategy not in ATTRIBUTION_STRATEGIES:
        raise ConfigError(path, "design.strategy", f"expected one of {', '.join(ATTRIBUTION_STRATEGIES)}, "
                                                   f"got {design.strategy!r}")
    if not design.alpha < 0.5:
        raise ConfigError(path, "design.alpha", f"expected a value below 0.5, got {design.alpha}")
    if not 0.5 < design.confidence < 1:
        raise ConfigError(path, "design.confidence", f"expected a value between 0.5 and 1, got {design.confidence}")

    name = raw.get("name") or path.stem
    return Experiment(path=path, name=str(name), target=target, benchmark=bench, env=tuple(env),
                      host=host, gpu=gpu, design=design, patchset=patchset)
