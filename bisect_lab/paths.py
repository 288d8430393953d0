"""Default locations: results in ./results (never inside the target repository), cache in the
user cache dir.

The results default is ``./results``, except when the current folder is inside the experiment's
target repository (the checkout, or the plain folder, that ``[target] repo`` names): bisect-lab never creates
files in the user's checkout, so there the default is the user data dir,
``$XDG_DATA_HOME/bisect-lab/results/<target-folder-name>-<hash of its path>`` (``XDG_DATA_HOME``
defaults to ``~/.local/share``). Commands without an experiment (``report``, ``diff``) look there
too, from the same folder, so ``report latest`` finds what ``run`` stored. ``--results`` and
``BISECT_LAB_RESULTS`` override both.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

_URL_RE = re.compile(r"^([a-z][a-z0-9+.-]*://|[^/\s]+@[^/\s]+:)", re.I)


def default_results_dir() -> Path:
    """``BISECT_LAB_RESULTS`` or ``./results`` (entry points use :func:`results_dir`)."""
    return Path(os.environ.get("BISECT_LAB_RESULTS") or "results")


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "bisect-lab"


def target_root(repo: str | None) -> Path | None:
    """The folder a local target repository occupies; None for a URL. As for trees, the folder
    itself is the target (a plain folder inside some other repository is its own target)."""
    if not repo or _URL_RE.match(repo):
        return None
    return Path(repo).expanduser().resolve()


def redirected_results_dir(root: Path) -> Path:
    """Where the default results of runs started inside ``root`` (a target repository) go."""
    root = Path(root).resolve()
    key = hashlib.sha256(str(root).encode()).hexdigest()[:10]
    return data_dir() / "results" / f"{root.name or 'root'}-{key}"


def results_dir(explicit: str | os.PathLike | None = None, *, target_repo: str | None = None,
                cwd: str | os.PathLike | None = None) -> tuple[Path, str | None]:
    """The results folder to use, and a line saying where the default put it (None when the user
    chose it with ``--results`` or ``BISECT_LAB_RESULTS``).

    ``target_repo``: the experiment's ``[target] repo`` (resolved), for commands that have one;
    without it (``report``, ``diff``) the folder a run from ``cwd`` would have used is found again.
    """
    if explicit:
        return Path(explicit), None
    if os.environ.get("BISECT_LAB_RESULTS"):
        return Path(os.environ["BISECT_LAB_RESULTS"]), None
    here = Path(cwd or os.getcwd()).resolve()
    root = target_root(target_repo)
    if root is not None and here.is_relative_to(root):
        d = redirected_results_dir(root)
        return d, f"results: {d} (default: never inside the target repository {root}; --results to change)"
    if target_repo is None:
        for p in (here, *here.parents):
            d = redirected_results_dir(p)
            if d.is_dir():
                return d, f"results: {d} (default for runs from inside {p}; --results to change)"
    return Path("results"), f"results: {here / 'results'} (default; --results to change)"


def default_cache_dir() -> Path:
    env = os.environ.get("BISECT_LAB_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bisect-lab"
