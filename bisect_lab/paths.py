"""Default locations (DESIGN 3.4): results in ./results, cache in the user cache dir."""
from __future__ import annotations

import os
from pathlib import Path


def default_results_dir() -> Path:
    return Path(os.environ.get("BISECT_LAB_RESULTS") or "results")


def default_cache_dir() -> Path:
    env = os.environ.get("BISECT_LAB_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bisect-lab"
