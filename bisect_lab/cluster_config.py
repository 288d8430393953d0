"""The ``[cluster]`` table of an experiment file: which engine runs the trials (layer 3).

``engine = "ssh"`` (the default) keeps the ``[host]`` list; ``engine = "slurm"`` sends the trials
to Slurm jobs (bisect_lab.fleet). Keys are checked as in every other table: an unknown key gets a
did-you-mean, a wrong type names what was expected (exit 2).
"""
from __future__ import annotations

import re
from pathlib import Path

from .errors import ConfigError
from .model import ClusterConfig

ENGINES = ("ssh", "slurm")
KEYS = {"engine", "partition", "account", "max_jobs", "gpus_per_node", "exclusive", "time_limit_min",
        "nodelist", "setup", "folder", "pending_limit_min"}
# Slurm's own names: no shell or option syntax can ride in on a partition, account or node name.
_SLURM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-\[\],]*")


def parse_cluster(data, path: Path, section_type) -> ClusterConfig:
    """The ``[cluster]`` table (``data``, None when absent) as a :class:`ClusterConfig`.

    ``section_type`` is the experiment parser's typed table reader (config.py), passed in so that
    this table is checked exactly as the others. A relative ``folder`` is relative to the file."""
    c = section_type(path, "cluster", data, KEYS)
    engine = c.string("engine", "ssh")
    if engine not in ENGINES:
        raise ConfigError(path, "cluster.engine", f'expected "ssh" (the [host] list) or "slurm", got {engine!r}')
    names = {}
    for key in ("partition", "account"):
        v = c.string(key)
        if v is not None and not _SLURM_NAME.fullmatch(v):
            raise ConfigError(path, f"cluster.{key}", f"expected a Slurm {key} name, got {v!r}")
        names[key] = v
    nodelist = c.str_list("nodelist")
    for n in nodelist:
        if not _SLURM_NAME.fullmatch(n):
            raise ConfigError(path, "cluster.nodelist", f"expected Slurm node names, got {n!r}")
    folder = c.string("folder")
    if folder is not None:
        folder = str((Path(path).parent / Path(folder).expanduser()).resolve())
    cfg = ClusterConfig(
        engine=engine, partition=names["partition"], account=names["account"],
        max_jobs=c.integer("max_jobs", 1, min=1, max=1024),
        gpus_per_node=c.integer("gpus_per_node", None, min=0, max=1024),
        exclusive=c.flag("exclusive", True),
        time_limit_min=c.integer("time_limit_min", 120, min=1),
        nodelist=nodelist, setup=c.str_list("setup"), folder=folder,
        pending_limit_min=c.real("pending_limit_min", None, positive=True))
    if engine != "slurm":
        slurm_only = sorted(k for k in (data or {}) if k != "engine")
        if slurm_only:
            raise ConfigError(path, f"cluster.{slurm_only[0]}",
                              'only used with engine = "slurm" (the ssh engine takes its hosts from [host])')
    return cfg
