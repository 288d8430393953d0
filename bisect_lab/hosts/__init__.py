"""Hosts: where commands run (local machine or a GPU box over SSH)."""
from __future__ import annotations

import os

from ..model import HostConfig
from .base import (RUN_ID_VAR, CommandResult, Host, HostCommandError, KilledProcess, Process)
from .local import LocalHost

# SSH support (fabric, paramiko) loads on first use: a GPU box running trials locally,
# and every local campaign, need not have it installed or pay for importing it.
_SSH_NAMES = ("ENV_KNOWN_HOSTS", "ENV_SSH_CONFIG", "SSHHost", "SSHProcess")


def __getattr__(name):
    if name in _SSH_NAMES:
        from . import ssh
        return getattr(ssh, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
    from .ssh import SSHHost
    return [SSHHost(target, port=config.port, key=config.key,
                    connect_timeout_s=config.connect_timeout_s, workdir=config.workdir,
                    accept_unknown_host=config.accept_unknown_host, python_exe=config.python)
            for target in config.ssh]
