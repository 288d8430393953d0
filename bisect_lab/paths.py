"""Default locations: results beside the experiment (never inside the target repository), cache
in the user cache dir.

Where a campaign's results go, first match wins:

1. ``--results``, then ``BISECT_LAB_RESULTS``;
2. the bundled demo and the other experiments shipped beside it (``demo-server.toml``, ...): the
   user data dir, ``$XDG_DATA_HOME/bisect-lab/results/demo`` (``XDG_DATA_HOME`` defaults to
   ``~/.local/share``), never the installation;
3. an experiment file inside its own target repository (the checkout, or the plain folder, that
   ``[target] repo`` names): bisect-lab never creates files in the user's checkout, so the user
   data dir, ``$XDG_DATA_HOME/bisect-lab/results/<target-folder-name>-<hash of its path>``;
4. otherwise ``results/`` beside the experiment file, whatever the current folder.

Every campaign says which on one line at its start. Commands without an experiment (``report``,
``diff``, ``log``, ``--resume`` without EXPERIMENT) read ``./results`` when it holds a results
database, else the user-data folder of a target repository the current folder is inside, else the
folder the last campaign that took a default wrote to (recorded in
``$XDG_DATA_HOME/bisect-lab/last-results``): ``report latest`` from any folder finds what ``run``
just stored.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

_URL_RE = re.compile(r"^([a-z][a-z0-9+.-]*://|[^/\s]+@[^/\s]+:)", re.I)
DB_FILE = "bisect-lab.sqlite"        # as store.DB_NAME (paths sits below the store in the layers)
LAST_RESULTS = "last-results"


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
    """Where the default results of an experiment inside ``root`` (a target repository) go."""
    root = Path(root).resolve()
    key = hashlib.sha256(str(root).encode()).hexdigest()[:10]
    return data_dir() / "results" / f"{root.name or 'root'}-{key}"


def demo_results_dir() -> Path:
    """Where the bundled demo's results go by default: the user data dir, not the installation."""
    return data_dir() / "results" / "demo"


def results_dir(explicit: str | os.PathLike | None = None, *, experiment: str | os.PathLike | None = None,
                target_repo: str | None = None, demo: bool = False,
                cwd: str | os.PathLike | None = None) -> tuple[Path, str]:
    """The results folder to use, and one line saying where it is and why.

    ``experiment``: the experiment file of a campaign (``demo``: it is the bundled demo), with its
    ``[target] repo`` (resolved) as ``target_repo``. Without one (``report``, ``diff``, ``log``) the
    folder is found again from ``cwd`` or from the last campaign's record (see the module).
    """
    if explicit:
        d = Path(explicit)
        return d, f"results: {d.resolve()} (--results)"
    if os.environ.get("BISECT_LAB_RESULTS"):
        d = Path(os.environ["BISECT_LAB_RESULTS"])
        return d, f"results: {d.resolve()} (BISECT_LAB_RESULTS)"
    if demo:
        d = demo_results_dir()
        return d, f"results: {d} (default for the bundled demo experiments; --results to change)"
    if experiment is not None:
        folder = Path(experiment).resolve().parent
        root = target_root(target_repo)
        if root is not None and folder.is_relative_to(root):
            d = redirected_results_dir(root)
            return d, (f"results: {d} (default: the experiment is inside the target repository {root}, "
                       f"and results never go there; --results to change)")
        d = folder / "results"
        return d, f"results: {d} (default: beside the experiment; --results to change)"
    here = Path(cwd or os.getcwd()).resolve()
    if (here / "results" / DB_FILE).is_file():
        return Path("results"), f"results: {here / 'results'} (./results; --results to change)"
    for p in (here, *here.parents):
        d = redirected_results_dir(p)
        if d.is_dir():
            return d, f"results: {d} (default for experiments inside {p}; --results to change)"
    last = last_results_dir()
    if last is not None:
        return last, f"results: {last} (where the last campaign wrote; --results to change)"
    return Path("results"), f"results: {here / 'results'} (default; --results to change)"


def last_results_dir() -> Path | None:
    """The folder the last campaign with a default results folder wrote to, if it still holds a database."""
    try:
        text = (data_dir() / LAST_RESULTS).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    d = Path(text) if text else None
    return d if d is not None and d.is_absolute() and (d / DB_FILE).is_file() else None


def remember_results_dir(d: str | os.PathLike) -> None:
    """Record ``d`` as the folder commands without an experiment read (best effort: a read-only
    home only loses the convenience)."""
    try:
        data_dir().mkdir(parents=True, exist_ok=True)
        tmp = data_dir() / f".{LAST_RESULTS}.{os.getpid()}"
        tmp.write_text(str(Path(d).resolve()) + "\n", encoding="utf-8")
        os.replace(tmp, data_dir() / LAST_RESULTS)
    except OSError:
        pass


def default_cache_dir() -> Path:
    env = os.environ.get("BISECT_LAB_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bisect-lab"
