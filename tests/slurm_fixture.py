"""The local Slurm for the fleet tests (started by .ci/slurm-setup.sh, as root).

The ``slurm`` fixture checks that the Slurm client commands are there and that ``sinfo`` shows
idle (or busy) nodes; without them the tests that use it are skipped, or fail when ``CI=true``
(CI must run the Slurm path). It gives the node names.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _missing(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"slurm fixture: {reason} (CI=true: the Slurm tests must run; .ci/run starts "
                    f"Slurm with .ci/slurm-setup.sh)", pytrace=False)
    pytest.skip(f"slurm fixture: {reason}; run .ci/slurm-setup.sh (root) to start a local Slurm")


@pytest.fixture(scope="session")
def slurm() -> list[str]:
    """The names of the local Slurm's usable nodes (at least one)."""
    for tool in ("sbatch", "squeue", "scancel", "sinfo"):
        if shutil.which(tool) is None:
            _missing(f"{tool} is not on PATH")
    try:
        res = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        _missing(f"sinfo failed: {e}")
    nodes = [l.split()[0] for l in res.stdout.splitlines()
             if len(l.split()) == 2 and l.split()[1].rstrip("*") in ("idle", "mix", "alloc", "comp")]
    if res.returncode != 0 or not nodes:
        _missing(f"no Slurm node is up (sinfo: {(res.stderr or res.stdout).strip()[:200]!r})")
    return sorted(set(nodes))
