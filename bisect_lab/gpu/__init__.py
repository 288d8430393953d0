"""GPU hygiene (layer 4, docs/DEVELOPING.md): NVML probe, idle wait, reset, clock lock, trial flags.

Everything goes through a :class:`~bisect_lab.hosts.base.Host`, so the same code
serves the local machine and a remote GPU box. NVML is read by a self-contained
probe (:mod:`bisect_lab.gpu.probe_script`) that tests fake with the JSON file
named by ``BISECT_LAB_FAKE_NVML``.

Public API::

    GpuInspector(host).probe() -> GpuSnapshot
    wait_idle(host, policy, *, owned_pids=(), log=None) -> IdleResult
    reset(host, policy, owned_pids=(), *, log=None) -> IdleResult
    lock_clocks(host, policy) / unlock_clocks(host, policy)
    flag_trials({trial: [before, after]}) -> TrialFlags
"""
from .flags import CLOCK_DIFFERS, THROTTLED, TrialFlags, flag_trials
from .hygiene import (KILL_ALL, KILL_CAMPAIGN, GpuError, IdleResult, busy_reasons, lock_clocks, reset,
                      unlock_clocks, wait_idle)
from .probe_script import FAKE_ENV, THROTTLE_BITS, decode_throttle
from .snapshot import (PERF_THROTTLE, GpuInfo, GpuInspector, GpuProcess, GpuSnapshot, ProbeError,
                       probe_source)

__all__ = [
    "CLOCK_DIFFERS", "THROTTLED", "TrialFlags", "flag_trials",
    "KILL_ALL", "KILL_CAMPAIGN", "GpuError", "IdleResult", "busy_reasons", "lock_clocks", "reset",
    "unlock_clocks", "wait_idle",
    "FAKE_ENV", "THROTTLE_BITS", "decode_throttle",
    "PERF_THROTTLE", "GpuInfo", "GpuInspector", "GpuProcess", "GpuSnapshot", "ProbeError", "probe_source",
]
