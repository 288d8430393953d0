"""What NCCL_DEBUG=INFO lines say NCCL actually used (layer 3: text in, facts out).

NCCL echoes every NCCL_* variable it honours (``NCCL INFO NCCL_ALGO set by environment to
Ring``), its version, and one ``Init COMPLETE`` line per rank. Parsed from the benchmark's
output and stored with the trial, these confirm from NCCL's side what env verification saw
from the process side.
"""
from __future__ import annotations

import re

_VERSION = re.compile(r"NCCL INFO NCCL version ([0-9][\w.+-]*)")
# NCCL ends some of these lines with a period ("NCCL_NVLS_ENABLE set by environment to 0.")
_SET_BY_ENV = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (\S+?)\.?\s*$")
# "NCCL INFO comm 0x.. rank 0 nranks 2 ... Init COMPLETE" (2.21) or
# "NCCL INFO ncclCommInitRankConfig comm 0x.. rank 0 nranks 2 ... Init COMPLETE" (2.28)
_INIT = re.compile(r"NCCL INFO (?:\w+ )?comm \S+ rank (\d+) nranks (\d+).*Init COMPLETE")
_RANK_PREFIX = re.compile(r"\[(\d+)\] NCCL INFO")
_DEMO_ALLREDUCE = re.compile(r"\[tp(\d+)\] NCCL INFO all-reduce (\S+)")


def nccl_info(text: str) -> dict:
    """Facts from NCCL_DEBUG=INFO lines in ``text``; ``{}`` when there are none.

    Keys: ``lines`` (how many INFO lines), ``version``, ``env`` (variable -> the values NCCL
    reported taking from the environment), ``ranks`` (ranks whose communicator finished init),
    ``nranks``, ``allreduce`` (rank -> algorithm/protocol, where the program reports it).
    """
    lines = [l for l in text.splitlines() if "NCCL INFO" in l]
    if not lines:
        return {}
    out: dict = {"lines": len(lines)}
    env: dict[str, list[str]] = {}
    ranks: set[int] = set()
    allreduce: dict[str, str] = {}
    for line in lines:
        if m := _VERSION.search(line):
            out["version"] = m.group(1)
        if m := _SET_BY_ENV.search(line):
            vals = env.setdefault(m.group(1), [])
            if m.group(2) not in vals:
                vals.append(m.group(2))
        if m := _INIT.search(line):
            ranks.add(int(m.group(1)))
            out["nranks"] = int(m.group(2))
        if m := _DEMO_ALLREDUCE.search(line):
            allreduce[m.group(1)] = m.group(2)
    if env:
        out["env"] = env
    if ranks:
        out["ranks"] = sorted(ranks)
    if allreduce:
        out["allreduce"] = allreduce
    return out


def nccl_warnings(info: dict, expected: dict[str, str | None]) -> list[str]:
    """NCCL_* variables the arm set that NCCL reported taking with another value (or not at all)."""
    if not info:
        return []
    seen = info.get("env", {})
    # Only a real NCCL (it prints its version and per-rank init) is expected to echo its
    # environment; a program's own "NCCL INFO" lines (the CPU demo's) prove nothing either way.
    real = "version" in info or "ranks" in info
    out = []
    for var, value in sorted(expected.items()):
        if not var.startswith("NCCL_") or value is None or var in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"):
            continue
        got = seen.get(var)
        if got is None:
            if real:
                out.append(f"NCCL never mentioned {var} (expected {value}): it reads some variables only "
                           "when it needs them, and a misspelt one never")
        elif any(g != value for g in got):
            out.append(f"NCCL reported {var}={'/'.join(got)}, the arm set {value}")
    return out
