"""Hosts: where commands run (local machine or a GPU box over SSH)."""
from __future__ import annotations

import os

from ..model import HostConfig
from .base import (RUN_ID_VAR, CommandResult, Host, HostCommandError, KilledProcess, Process)
from .local import LocalHost
from .ssh import ENV_KNOWN_HOSTS, ENV_SSH_CONFIG, SSHHost, SSHProcess

__all__ = ["CommandResult", "Host", "HostCommandError", "KilledProcess", "Process", "LocalHost",
           "SSHHost", "SSHProcess", "make_hosts", "RUN_ID_VAR", "ENV_SSH_CONFIG",
           "ENV_KNOWN_HOSTS"]


def make_hosts(config: HostConfig, cache_dir: str | os.PathLike | None = None) -> list[Host]:
    """The hosts an experiment runs on: ``[LocalHost]`` when ``config.ssh`` is empty,
    else one :class:`SSHHost` per entry (connections open lazily, on first use).

    ``cache_dir`` is the local cache folder; remote hosts use ``config.workdir``.
    """
    if not config.ssh:
        # "python3" is only the default: locally the running interpreter is the better guess.
        python = None if config.python == "python3" else config.python
        return [LocalHost(cache_dir=cache_dir, python_exe=python)]
    return [SSHHost(target, port=config.port, key=config.key,
                    connect_timeout_s=config.connect_timeout_s, workdir=config.workdir,
                    accept_unknown_host=config.accept_unknown_host, python_exe=config.python)
            for target in config.ssh]
