"""Fleets: trials on Slurm jobs that each hold one node (layer 5).

:func:`slurm_workers` is what a :class:`~bisect_lab.campaigns.Session` builds instead of one
:class:`~bisect_lab.runner.HostWorker` per ``[host]`` when ``[cluster] engine = "slurm"``:
``max_jobs`` :class:`SlurmJobWorker` slots, run in parallel by the executor like hosts.
"""
from __future__ import annotations

from .job_worker import SlurmJobWorker
from .slurm import SlurmPool, preflight

__all__ = ["SlurmJobWorker", "SlurmPool", "preflight", "slurm_workers"]


def slurm_workers(experiment, store, hosts, *, log) -> list[SlurmJobWorker]:
    """``max_jobs`` job slots for ``experiment``; Slurm is asked first (preflight: exit 2 on an
    unknown partition, account or node, or without sbatch). ``hosts[0]`` is the driver's own
    machine: trees are checked and refs resolved there, before any job waits in the queue."""
    from ..errors import UsageError
    from ..runner import HostWorker
    if experiment.host.ssh:
        raise UsageError('[cluster] engine = "slurm" runs the trials on Slurm nodes: drop [host] ssh '
                         '(or use engine = "ssh")')
    if experiment.gpu.enabled and experiment.gpu.lock_clocks_mhz:
        raise UsageError('[gpu] lock_clocks_mhz is not supported with [cluster] engine = "slurm" yet '
                         "(clocks are locked from the driver's machine; lock them in [cluster] setup)")
    preflight(experiment.cluster, log=log)
    local = hosts[0]
    pool = SlurmPool(experiment, store.dir, cache_dir=getattr(local, "_cache", None), log=log)
    return [SlurmJobWorker(pool, i, HostWorker(local, experiment, log=log))
            for i in range(experiment.cluster.max_jobs)]
