"""Frozen value objects shared by every layer (layer 1, docs/DEVELOPING.md). Pure: no I/O."""
from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping


# --------------------------------------------------------------------------- patches
# How `attribute` searches (the command line's --strategy, the experiment file's [design] strategy)
ATTRIBUTION_STRATEGIES = ("adaptive", "thorough", "screening")


@dataclass(frozen=True)
class Patch:
    """One applyable unit of a patch set (docs/contracts.md, Patch-set manifest)."""

    name: str
    path: Path                      # absolute path of the .patch file
    sha256: str                     # hash of the patch file's bytes: its identity in tree keys
    aliases: tuple[str, ...] = ()
    description: str = ""
    required: bool = False
    requires: tuple[str, ...] = ()
    files: tuple[str, ...] = ()     # repository paths the diff touches
    added: int = 0
    removed: int = 0


@dataclass(frozen=True)
class PatchSet:
    """A folder of patches plus its manifest, in manifest order."""

    root: Path
    patches: tuple[Patch, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.patches)

    @property
    def required(self) -> frozenset[str]:
        return frozenset(p.name for p in self.patches if p.required)

    def get(self, name: str) -> Patch:
        for p in self.patches:
            if p.name == name:
                return p
        raise KeyError(name)


# --------------------------------------------------------------------------- arms
@dataclass(frozen=True, order=True)
class Arm:
    """One concrete configuration: patch subset + environment (base ref lives in the experiment).

    ``patches`` always includes required patches and everything they require.
    ``env`` holds sorted ``(VAR, value)`` pairs; value ``None`` means "unset".
    ``spec`` is the canonical text form (docs/contracts.md, Arm specs), the arm's identity everywhere.
    """

    spec: str
    patches: frozenset[str] = field(compare=False)
    env: tuple[tuple[str, str | None], ...] = field(default=(), compare=False)

    @property
    def env_dict(self) -> dict[str, str | None]:
        return dict(self.env)

    def factor_values(self) -> dict[str, object]:
        """Factor name -> value: ``patch`` -> True/False is implied by membership; env as ``env:VAR``."""
        return {f"env:{k}": v for k, v in self.env}


def env_text(env: tuple[tuple[str, str | None], ...]) -> str:
    return " ".join(f"{k}={shlex.quote(v) if v else ''}" for k, v in env)


# --------------------------------------------------------------------------- experiment
@dataclass(frozen=True)
class Target:
    repo: str                        # path (absolute, resolved) or URL
    ref: str = "HEAD"
    patches: Path | None = None      # patch-set folder
    build: str | None = None         # per-tree build step, run once per tree hash
    pythonpath: tuple[str, ...] = () # tree-relative folders put first on PYTHONPATH
    import_check: str | None = None  # module that must resolve inside the prepared tree


@dataclass(frozen=True)
class Benchmark:
    command: str
    timeout_s: float = 600.0
    parser: str = "sglang-bench-serving"
    metric: str = "output_throughput"
    higher_is_better: bool = True
    patterns: tuple[tuple[str, str], ...] = ()   # regex parser: metric -> regex with one group
    warmup: int = 0                               # discarded trials per arm at the start
    # (metric, higher_is_better): also compared by `run`, in one Holm family with `metric`;
    # decisions (attribute, bisect, sweep) use `metric` alone
    secondary: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True)
class HostConfig:
    """Where trials run. Empty ``ssh`` means the local machine."""

    ssh: tuple[str, ...] = ()
    port: int | None = None
    key: str | None = None
    connect_timeout_s: float = 10.0
    workdir: str | None = None       # remote cache root (default ~/.cache/bisect-lab)
    python: str = "python3"          # interpreter on the host for probes
    accept_unknown_host: bool = False

    @property
    def is_local(self) -> bool:
        return not self.ssh


@dataclass(frozen=True)
class GpuPolicy:
    devices: tuple[int, ...] | None = None   # None: every GPU
    idle_timeout_s: float = 120.0
    idle_memory_mb: float = 1024.0
    kill: str = "campaign"                   # or "all-gpu-processes"
    max_temperature_c: float | None = None
    settle_s: float = 0.0
    lock_clocks_mhz: int | None = None
    enabled: bool = True


@dataclass(frozen=True)
class Design:
    seed: int = 0
    max_trials: int = 200
    min_effect: float = 0.02                 # minimum relative effect of interest
    alpha: float = 0.05
    strategy: str = "adaptive"               # attribute's default: adaptive | thorough | screening
    repeat: int = 5                          # default trials per arm for `run`
    confidence: float = 0.95                 # bisection stop rule
    retries: int = 2                         # infrastructure-failure retries per trial


@dataclass(frozen=True)
class ServerConfig:
    """A serving stack measured in sessions: one launch, ``warmup_readings`` + ``readings`` benchmark
    runs against it, one clean stop (docs/contracts.md, Serving sessions)."""

    command: str                             # run in the prepared tree; {port} is the session's port
    ready_url: str | None = None             # polled until HTTP 200
    ready_log: str | None = None             # regex searched in the server's log
    ready_timeout_s: float = 900.0
    stop_timeout_s: float = 60.0             # after SIGTERM, then the whole tree is killed
    readings: int | str = "auto"             # readings per session, or "auto"
    warmup_readings: int = 1                 # discarded readings after each launch


@dataclass(frozen=True)
class Experiment:
    path: Path | None                        # the TOML file (None when built in code)
    name: str
    target: Target
    benchmark: Benchmark
    env: tuple[tuple[str, str], ...] = ()
    host: HostConfig = HostConfig()
    gpu: GpuPolicy = GpuPolicy()
    design: Design = Design()
    patchset: PatchSet | None = None
    cluster: ClusterConfig = field(default_factory=lambda: ClusterConfig())   # [cluster]: where trials run
    server: ServerConfig | None = None       # None: every trial is its own session of one reading

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


# --------------------------------------------------------------------------- trials
class TrialStatus(str, enum.Enum):
    OK = "ok"
    APPLY_FAILED = "apply-failed"
    BUILD_FAILED = "build-failed"
    IMPORT_CHECK_FAILED = "import-check-failed"
    GPU_NOT_IDLE = "gpu-not-idle"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    PARSE_ERROR = "parse-error"
    HOST_ERROR = "host-error"
    KILLED = "killed"            # ended by a signal bisect-lab did not send (OOM killer, an admin)
    # Serving sessions: the arm's server never answered, or went away mid-session. Failures of the
    # arm (its server), not of the machine: a retry would launch the same tree again.
    SERVER_NOT_READY = "server-not-ready"
    SERVER_DIED = "server-died"

    @property
    def is_infrastructure(self) -> bool:
        """Failures worth retrying: they say nothing about the arm."""
        return self in (TrialStatus.HOST_ERROR, TrialStatus.GPU_NOT_IDLE, TrialStatus.KILLED)

    @property
    def is_untestable(self) -> bool:
        """Failures that make the arm (or commit) untestable rather than slow."""
        return self in (TrialStatus.APPLY_FAILED, TrialStatus.BUILD_FAILED,
                        TrialStatus.IMPORT_CHECK_FAILED)


@dataclass(frozen=True)
class TrialResult:
    """One benchmark run of one arm on one host, as stored."""

    campaign: str
    trial: int                               # 0-based sequence number within the campaign
    arm: str                                 # canonical spec
    status: TrialStatus
    host: str
    started: float                           # unix time
    duration_s: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    error: str = ""                          # one line + tail of the benchmark's output
    commit: str | None = None                # base commit the tree was built on
    tree_hash: str | None = None
    fingerprint: str | None = None           # content address of the fingerprint
    env_report: Mapping[str, object] = field(default_factory=dict)
    flags: tuple[str, ...] = ()              # e.g. "clock-differs", "throttled"
    tag: str | None = None                   # e.g. the pytest node id, or the strategy's label
    session: str | None = None               # the server launch this reading belongs to ([server])

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK


@dataclass(frozen=True)
class ClusterConfig:
    """``[cluster]``: the engine that runs trials. ``"ssh"`` is the ``[host]`` list; ``"slurm"``
    submits jobs that each hold one node and run a block of trials (bisect_lab.fleet)."""

    engine: str = "ssh"                      # "ssh" | "slurm"
    partition: str | None = None
    account: str | None = None
    max_jobs: int = 1                        # nodes at once
    gpus_per_node: int | None = None
    exclusive: bool = True
    time_limit_min: int = 120
    nodelist: tuple[str, ...] = ()           # pin to these nodes
    setup: tuple[str, ...] = ()              # shell lines run on the node before the worker
    folder: str | None = None                # job folder on a filesystem the nodes share
    pending_limit_min: float | None = None   # jobs pending longer: stop as inconclusive

    @property
    def is_slurm(self) -> bool:
        return self.engine == "slurm"
