"""Experiment files (docs/contracts.md, Experiment file): TOML -> frozen :class:`~bisect_lab.model.Experiment`.

Every error names the file, the key and what was expected. Relative paths resolve
against the experiment file's folder.
"""
from __future__ import annotations

import difflib
import math
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .model import (ATTRIBUTION_STRATEGIES, Benchmark, Design, Experiment, GpuPolicy, HostConfig, ServerConfig,
                    Target)
from .patchset import load_patchset
from .redact import is_secret_name, needs_tag, remember

_URL_RE = re.compile(r"^([a-z][a-z0-9+.-]*://|[^/\s]+@[^/\s]+:)", re.I)


def is_url(repo: str) -> bool:
    return bool(_URL_RE.match(repo))


# Tables of an experiment file. Tables that are planned but not implemented are named, so a file
# written for a later bisect-lab is told so instead of being called a typo.
TABLES = ("target", "benchmark", "env", "host", "gpu", "design", "server", "cluster")
TOP_KEYS = ("name",)
NOT_YET: tuple[str, ...] = ()


def _no_nul(path: Path, where: str, text: str) -> str:
    # A NUL byte cannot go into argv or the environment: every trial would fail with exit 4.
    if "\0" in text:
        raise ConfigError(path, where, "contains a NUL byte (\\0), which no command or environment can carry")
    return text


def _check_top_level(raw: dict, path: Path) -> None:
    """Reject unknown tables and keys at the top level, with a suggestion, as inside tables."""
    known = set(TABLES) | set(TOP_KEYS)
    for k in raw:
        if k in known:
            continue
        kind = "table" if isinstance(raw[k], dict) else "key"
        shown = f"[{k}]" if kind == "table" else repr(k)
        if k in NOT_YET:
            raise ConfigError(path, None, f"table [{k}] is not supported yet by this bisect-lab "
                                          f"(supported: {', '.join(f'[{t}]' for t in TABLES)}, name)")
        close = difflib.get_close_matches(k, sorted(known), n=1)
        hint = ""
        if close:
            hint = f"; did you mean [{close[0]}]?" if close[0] in TABLES else f"; did you mean {close[0]!r}?"
        raise ConfigError(path, None, f"unknown {kind} {shown}{hint} (expected the tables "
                                      f"{', '.join(f'[{t}]' for t in TABLES)} and the key name)")


class _Section:
    """Typed, key-checked access to one table of the TOML file.

    One method per type (:meth:`string`, :meth:`integer`, :meth:`real`, :meth:`flag`,
    :meth:`str_list`), each with its bounds, so every key of every table is checked the same
    way: strings carry no NUL byte, numbers are finite, booleans are not integers.
    """

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
        if isinstance(v, str):
            _no_nul(self.path, f"{self.name}.{key}", v)
        return v

    def string(self, key, default=None, *, required=False, what=None):
        """A string without NUL bytes."""
        return self.get(key, str, default, required=required, what=what)

    def flag(self, key, default):
        return self.get(key, bool, default)

    def integer(self, key, default=None, *, min=None, max=None):
        """An integer (not a boolean) within [min, max]."""
        v = self.get(key, int, default, what="an integer")
        if key in self.data:
            if min is not None and v < min:
                raise self._err(key, f"an integer >= {min}" if max is None else f"an integer from {min} to {max}")
            if max is not None and v > max:
                raise self._err(key, f"an integer from {min} to {max}" if min is not None else f"an integer <= {max}")
        return v

    def real(self, key, default=None, *, positive=False, min=None, above=None, below=None):
        """A finite number (not nan/inf, not a boolean); ``positive``: > 0; ``min``: >= min;
        ``above``/``below``: strict bounds."""
        v = self.get(key, float, default, what="float")
        if key in self.data:
            if not math.isfinite(v):
                raise self._err(key, "a finite number")
            if positive and not v > 0:
                raise self._err(key, "a positive number")
            if min is not None and v < min:
                raise self._err(key, f"a number >= {min}")
            if above is not None and below is not None and not above < v < below:
                raise self._err(key, f"a number between {above} and {below} (exclusive)")
            if above is not None and not v > above:
                raise self._err(key, f"a number above {above}")
            if below is not None and not v < below:
                raise self._err(key, f"a number below {below}")
        return v

    def str_list(self, key, default=()):
        v = self.data.get(key, list(default))
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(self.path, f"{self.name}.{key}", f"expected a string or a list of strings, got {v!r}")
        for x in v:
            _no_nul(self.path, f"{self.name}.{key}", x)
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
    _check_top_level(raw, path)

    if "target" not in raw:
        raise ConfigError(path, "target", "missing table; expected [target] with repo = ...")
    t = _Section(path, "target", raw["target"], {"repo", "ref", "patches", "build", "pythonpath", "import_check"})
    repo = t.string("repo", required=True, what="a git repository path or URL")
    if not is_url(repo):
        rp = (base / Path(repo).expanduser()).resolve()
        if not rp.exists():
            raise ConfigError(path, "target.repo", f"{rp} does not exist")
        if not rp.is_dir():
            raise ConfigError(path, "target.repo", f"{rp} is not a folder")
        repo = str(rp)
    patches_dir = t.string("patches")
    patchset = None
    if patches_dir is not None:
        patchset = load_patchset((base / patches_dir).resolve())
    target = Target(
        repo=repo, ref=t.string("ref", "HEAD"),
        patches=patchset.root if patchset else None,
        build=t.string("build"), pythonpath=t.str_list("pythonpath"),
        import_check=t.string("import_check"))

    if "benchmark" not in raw:
        raise ConfigError(path, "benchmark", "missing table; expected [benchmark] with command = ...")
    b = _Section(path, "benchmark", raw["benchmark"],
                 {"command", "timeout_s", "parser", "metric", "higher_is_better", "patterns", "warmup", "secondary"})
    parser = b.string("parser", "sglang-bench-serving")
    known = _parser_names()
    if known and parser not in known:
        raise ConfigError(path, "benchmark.parser", f"unknown parser {parser!r}; expected one of {', '.join(sorted(known))}")
    patterns = b.get("patterns", dict, {})
    for k, v in patterns.items():
        if not isinstance(v, str):
            raise ConfigError(path, f"benchmark.patterns.{k}", "expected a regex string")
        _no_nul(path, f"benchmark.patterns.{k}", k + v)
        try:
            rx = re.compile(v)
        except re.error as e:
            raise ConfigError(path, f"benchmark.patterns.{k}", f"bad regex: {e}") from None
        if rx.groups != 1:
            raise ConfigError(path, f"benchmark.patterns.{k}", f"expected a regex with exactly one group, got {rx.groups}")
    if parser == "regex" and not patterns:
        raise ConfigError(path, "benchmark.patterns", "parser = \"regex\" needs [benchmark.patterns] metric = 'regex'")
    metric = b.string("metric", "output_throughput")
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
        command=b.string("command", required=True, what="a shell command"),
        timeout_s=b.real("timeout_s", 600.0, positive=True), parser=parser, metric=metric,
        higher_is_better=b.flag("higher_is_better", True),
        patterns=tuple(sorted(patterns.items())), warmup=b.integer("warmup", 0, min=0),
        secondary=tuple(secondary))

    env_raw = raw.get("env", {})
    if not isinstance(env_raw, dict):
        raise ConfigError(path, "env", "expected a table of VAR = \"value\"")
    env = []
    for k, v in env_raw.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise ConfigError(path, f"env.{k!r}" if "\0" in k else f"env.{k}",
                              "not a valid environment variable name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            got = type(v).__name__ if is_secret_name(k) else repr(v)
            raise ConfigError(path, f"env.{k}", f"expected a string value, got {got}")
        value = _no_nul(path, f"env.{k}", str(v))
        if needs_tag(k, value):
            remember(value)      # the benchmark gets it; no sink shows it
        env.append((k, value))

    h = _Section(path, "host", raw.get("host"), {"ssh", "port", "key", "connect_timeout_s", "workdir",
                                                 "python", "accept_unknown_host"})
    host = HostConfig(ssh=h.str_list("ssh"), port=h.integer("port", min=1, max=65535), key=h.string("key"),
                      connect_timeout_s=h.real("connect_timeout_s", 10.0, positive=True),
                      workdir=h.string("workdir"), python=h.string("python", "python3"),
                      accept_unknown_host=h.flag("accept_unknown_host", False))

    g = _Section(path, "gpu", raw.get("gpu"), {"devices", "idle_timeout_s", "idle_memory_mb", "kill",
                                               "max_temperature_c", "settle_s", "lock_clocks_mhz", "enabled"})
    devices = g.get("devices", list)
    if devices is not None and not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices):
        raise ConfigError(path, "gpu.devices", f"expected a list of GPU indices, got {devices!r}")
    kill = g.string("kill", "campaign")
    if kill not in ("campaign", "all-gpu-processes"):
        raise ConfigError(path, "gpu.kill", f"expected \"campaign\" or \"all-gpu-processes\", got {kill!r}")
    gpu = GpuPolicy(devices=tuple(devices) if devices is not None else None,
                    idle_timeout_s=g.real("idle_timeout_s", 120.0, positive=True),
                    idle_memory_mb=g.real("idle_memory_mb", 1024.0, positive=True), kill=kill,
                    max_temperature_c=g.real("max_temperature_c", positive=True),
                    settle_s=g.real("settle_s", 0.0, min=0),
                    lock_clocks_mhz=g.integer("lock_clocks_mhz", min=1),
                    enabled=g.flag("enabled", True))

    d = _Section(path, "design", raw.get("design"), {"seed", "max_trials", "min_effect", "alpha", "strategy",
                                                     "repeat", "confidence", "retries"})
    design = Design(seed=d.integer("seed", 0, min=0), max_trials=d.integer("max_trials", 200, min=1),
                    # min_effect is a relative effect: 1 or more would ask for a ratio <= 0
                    min_effect=d.real("min_effect", 0.02, above=0, below=1),
                    alpha=d.real("alpha", 0.05, positive=True),
                    strategy=d.string("strategy", "adaptive"), repeat=d.integer("repeat", 5, min=1),
                    confidence=d.real("confidence", 0.95, positive=True),
                    retries=d.integer("retries", 2, min=0))
    if design.strategy == "auto":         # the name before the strategies had names
        design = replace(design, strategy="adaptive")
    if design.strategy not in ATTRIBUTION_STRATEGIES:
        raise ConfigError(path, "design.strategy", f"expected one of {', '.join(ATTRIBUTION_STRATEGIES)}, "
                                                   f"got {design.strategy!r}")
    if not design.alpha < 0.5:
        raise ConfigError(path, "design.alpha", f"expected a value below 0.5, got {design.alpha}")
    if not 0.5 < design.confidence < 1:
        raise ConfigError(path, "design.confidence", f"expected a value between 0.5 and 1, got {design.confidence}")

    server = _server(path, raw["server"]) if "server" in raw else None

    name = raw.get("name")
    if name is not None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(path, "name", f"expected a non-empty string (the experiment's name), got {name!r}")
        _no_nul(path, "name", name)
    name = name or path.stem
    from .cluster_config import parse_cluster
    cluster = parse_cluster(raw.get("cluster"), path, _Section)
    return Experiment(path=path, name=str(name), target=target, benchmark=bench, env=tuple(env),
                      host=host, gpu=gpu, design=design, patchset=patchset, server=server,
                      cluster=cluster)


def _server(path: Path, data) -> ServerConfig:
    """The [server] table: how to launch, wait for and stop the arm's server."""
    s = _Section(path, "server", data, {"command", "ready_url", "ready_log", "ready_timeout_s", "stop_timeout_s",
                                        "readings", "warmup_readings"})
    command = s.string("command", required=True, what="a shell command that starts the server")
    ready_url = s.string("ready_url")
    ready_log = s.string("ready_log")
    if ready_url is None and ready_log is None:
        raise ConfigError(path, "server", "needs ready_url = 'http://127.0.0.1:{port}/health' (polled until "
                                          "HTTP 200) or ready_log = 'regex' (searched in the server's log)")
    if ready_url is not None and not re.match(r"https?://", ready_url):
        raise ConfigError(path, "server.ready_url", f"expected an http:// or https:// URL, got {ready_url!r}")
    if ready_log is not None:
        try:
            re.compile(ready_log)
        except re.error as e:
            raise ConfigError(path, "server.ready_log", f"bad regex: {e}") from None
    readings = s.data.get("readings", "auto")
    if readings != "auto" and (isinstance(readings, bool) or not isinstance(readings, int) or readings < 1):
        raise ConfigError(path, "server.readings", f'expected an integer >= 1 or "auto", got {readings!r}')
    return ServerConfig(command=command, ready_url=ready_url, ready_log=ready_log,
                        ready_timeout_s=s.real("ready_timeout_s", 900.0, positive=True),
                        stop_timeout_s=s.real("stop_timeout_s", 60.0, positive=True),
                        readings=readings, warmup_readings=s.integer("warmup_readings", 1, min=0))
