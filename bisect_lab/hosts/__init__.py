"""Hosts: where commands run (local machine or a GPU box over SSH)."""
from .base import CommandResult, Host, HostCommandError, KilledProcess, Process
from .local import LocalHost

__all__ = ["CommandResult", "Host", "HostCommandError", "KilledProcess", "Process", "LocalHost"]
