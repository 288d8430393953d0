"""What is in the cache on a host, and keeping it bounded: listing repositories, trees and the
per-trial ``{out}`` folders (``bisect-lab cache``), LRU pruning of trees, and the fresh ``{out}``
folder of each trial attempt.

Layout under ``host.cache_root()``: ``repos/<repo-id>/trees/<key>/`` (a tree) with its
``<key>.json`` ready marker, whose mtime is the tree's last use, and ``out/<campaign>/<trial>/``.
"""
from __future__ import annotations

import json
import os
import posixpath
import shutil
import time
from dataclasses import replace
from typing import Callable, Iterable

from ..errors import HostError
from ..hosts.base import Host, HostCommandError
from .plumbing import HostGit
from .records import CacheInfo, OutEntry, Pruned, RepoEntry, TreeEntry
from .worktrees import remove_tree

# Per-trial {out} folders are only read by the trial's own parser; the newest campaigns' are kept
# for people to look at, the rest go (a benchmark's output files can be hundreds of MB per trial).
KEEP_OUT_CAMPAIGNS = 10


class CacheBounds(HostGit):
    """The cache-upkeep half of :class:`~bisect_lab.trees.TreeManager` (mixed into it)."""

    root: str
    trees_dir: str
    max_trees: int | None
    max_bytes: int | None
    keep_out_campaigns: int | None
    log: Callable[[str], None]
    _out_pruned: set[str]

    # ------------------------------------------------------------------ per-trial {out} folders
    def session_out_dir(self, campaign: str, session: str) -> str:
        """A serving session's folder, ``out/<campaign>/session-<session>`` under the host's cache
        root: its ``server.log`` and its readings' ``{out}`` folders."""
        return posixpath.join(self.host.cache_root(), "out", campaign, f"session-{session}")

    def trial_out_dir(self, campaign: str, index: int, session: str | None = None) -> str:
        """A fresh, empty ``{out}`` folder for one attempt of trial ``index`` (``out/<campaign>/<index>``
        under the host's cache root; a reading of serving session ``session``:
        ``out/<campaign>/session-<session>/<index>``), made by one host command.

        A session's readings go into its own folder because a Slurm job numbers the readings of
        its session from 0 (the driver renumbers them): two jobs whose cache root is one shared
        filesystem would otherwise empty each other's ``out/<campaign>/0`` mid-reading.

        Whatever an earlier attempt left there goes first: after ``kill -9`` a resume gives the
        next trial the unfinished trial's index, and a partial result file from the killed attempt
        must never be parsed as the new one's. On the first trial of each campaign this manager
        runs, the ``{out}`` folders of all but the newest ``keep_out_campaigns`` campaigns (this one
        always kept) are removed as well.
        """
        root = posixpath.join(self.host.cache_root(), "out")
        folder = self.session_out_dir(campaign, session) if session else posixpath.join(root, campaign)
        path = posixpath.join(folder, str(int(index)))
        keep = self.keep_out_campaigns if campaign not in self._out_pruned and self.keep_out_campaigns else 0
        if self.host.is_local:
            pruned = _fresh_out_local(root, path, max(0, keep), campaign)     # no process on the hot path
        else:
            res = self.host.quick(["bash", "-c", _OUT_SCRIPT, "bisect-lab-out", root, path, str(max(0, keep)),
                                   campaign], timeout_s=max(300.0, self.git_timeout_s))
            res.check("creating the trial's output folder")
            pruned = [l.split(" ", 1)[1] for l in res.stdout.splitlines() if l.startswith("PRUNED ")]
        self._out_pruned.add(campaign)
        if pruned:
            self.log(f"removed the {{out}} folders of {len(pruned)} older campaign(s) on {self.host.name} "
                     f"(the newest {keep} are kept): {', '.join(pruned[:3])}{' ...' if len(pruned) > 3 else ''}")
        return path

    # ------------------------------------------------------------------ cache bounds
    def cache_info(self) -> CacheInfo:
        """Cache info restricted to this repository."""
        info = cache_info(self.host)
        return CacheInfo(root=info.root, repos=tuple(r for r in info.repos if r.path == self.root),
                         trees=tuple(t for t in info.trees if t.path.startswith(self.trees_dir + "/")))

    def prune(self, *, max_trees: int | None = None, max_bytes: int | None = None,
              keep: Iterable[str] = (), all: bool = False) -> list[TreeEntry]:
        """Remove least recently used trees of this repository until at most ``max_trees`` trees
        and ``max_bytes`` bytes remain (``all=True``: remove every tree). Returns what was removed."""
        entries = [t for t in _list_trees(self.host, posixpath.dirname(self.root))
                   if t.path.startswith(self.trees_dir + "/")]
        victims = _pick_victims(entries, max_trees=max_trees, max_bytes=max_bytes, keep=set(keep), all=all)
        for t in victims:
            self.log(f"removing tree {t.key} (last used {time.ctime(t.last_used)})")
            self._remove(t.key)
        return victims

    def _enforce_limits(self, keep: set[str]) -> None:
        if self.max_trees is None and self.max_bytes is None:
            return
        if self.host.is_local and self.max_bytes is None:
            # Cheap count first: listing markers costs one scandir, no process.
            n = sum(1 for e in os.scandir(self.trees_dir) if e.name.endswith(".json")
                    and not e.name.endswith(".build.json"))
            if n <= (self.max_trees or n):
                return
        self.prune(max_trees=self.max_trees, max_bytes=self.max_bytes, keep=keep)



# A fresh {out} folder for one attempt, and (keep > 0) removal of the {out} folders of campaigns other
# than the newest `keep` by folder mtime (the current one never). argv: root dir keep current.
_OUT_SCRIPT = r"""
set -u
root=$1 dir=$2 keep=$3 current=$4
rm -rf -- "$dir" && mkdir -p -- "$dir" || exit 1
[ "$keep" -gt 0 ] || exit 0
find "$root" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %P\0' | sort -z -r -n | tail -z -n "+$((keep + 1))" |
while IFS= read -r -d '' line; do
    name=${line#* }
    [ "$name" = "$current" ] && continue
    rm -rf -- "$root/$name" && printf 'PRUNED %s\n' "$name"
done
exit 0
"""


def _fresh_out_local(root: str, path: str, keep: int, current: str) -> list[str]:
    """:data:`_OUT_SCRIPT` on this machine, in-process: the names of the campaigns pruned."""
    try:
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
    except OSError as e:
        raise HostError(f"creating the trial's output folder {path}: {e}") from e
    if keep <= 0:
        return []
    dirs = []
    for e in os.scandir(root):
        try:
            if e.is_dir(follow_symlinks=False):
                dirs.append((e.stat(follow_symlinks=False).st_mtime, e.name))
        except OSError:
            continue
    pruned = []
    for _, name in sorted(dirs, reverse=True)[keep:]:
        if name != current:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            pruned.append(name)
    return pruned


# --------------------------------------------------------------------------- cache (all repos)
def _scan_local(root, out_root=None):
    """Markers and metadata of every cached repository under ``root``, and the per-campaign
    ``{out}`` folders under ``out_root`` (runs on the host: for a remote host this function's
    source is sent to its Python, so it imports what it needs)."""
    import json
    import os
    out = {"repos": [], "trees": [], "outputs": []}
    if out_root and os.path.isdir(out_root):
        for name in sorted(os.listdir(out_root)):
            p = os.path.join(out_root, name)
            try:
                if not os.path.isdir(p) or os.path.islink(p):
                    continue
                # a serving session's folder holds its readings' folders (and server.log): each
                # reading is a trial's {out}, the session folder itself is not
                n = sessions = 0
                for e in os.scandir(p):
                    if not e.is_dir(follow_symlinks=False):
                        continue
                    if e.name.startswith("session-"):
                        sessions += 1
                        n += sum(1 for r in os.scandir(e.path) if r.is_dir(follow_symlinks=False))
                    else:
                        n += 1
                out["outputs"].append({"campaign": name, "path": p, "trials": n, "sessions": sessions,
                                       "last_used": os.stat(p).st_mtime})
            except OSError:
                continue
    if not os.path.isdir(root):
        return out
    for rid in sorted(os.listdir(root)):
        base = os.path.join(root, rid)
        meta = {}
        try:
            with open(os.path.join(base, "meta.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            pass
        tdir = os.path.join(base, "trees")
        n = 0
        names = sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []
        for name in names:
            if not name.endswith(".json") or name.endswith(".build.json"):
                continue
            p = os.path.join(tdir, name)
            try:
                with open(p) as f:
                    data = json.load(f)
                mtime = os.stat(p).st_mtime
            except (OSError, ValueError):
                continue
            key = name[:-5]
            data.update(path=os.path.join(tdir, key), last_used=mtime, repo=meta.get("repo", ""),
                        built=os.path.exists(os.path.join(tdir, key + ".build.json")), key=key)
            out["trees"].append(data)
            n += 1
        out["repos"].append({"repo": meta.get("repo", ""), "path": base, "trees": n})
    return out


def _scan(host: Host, repos_root: str) -> dict:
    out_root = posixpath.join(posixpath.dirname(repos_root), "out")
    if host.is_local:
        return _scan_local(repos_root, out_root)
    import inspect
    code = inspect.getsource(_scan_local) + "\nimport json, sys\nprint(json.dumps(_scan_local(*sys.argv[1:3])))\n"
    res = host.python(code, repos_root, out_root, timeout_s=120.0)
    if not res.ok:
        raise HostCommandError("listing the tree cache", res)
    return json.loads(res.stdout)


def _list_trees(host: Host, repos_root: str) -> list[TreeEntry]:
    return _trees_of(_scan(host, repos_root))


def _trees_of(data: dict) -> list[TreeEntry]:
    trees = [TreeEntry(repo=t.get("repo", ""), key=t["key"], path=t["path"], commit=t.get("commit", ""),
                       tree_hash=t.get("tree_hash", ""), patches=tuple(t.get("patches", [])),
                       last_used=t["last_used"], size_bytes=t.get("size_bytes"), built=t["built"])
             for t in data["trees"]]
    return sorted(trees, key=lambda t: t.last_used)


def _pick_victims(entries: list[TreeEntry], *, max_trees, max_bytes, keep: set[str], all: bool) -> list[TreeEntry]:
    entries = sorted(entries, key=lambda t: t.last_used)          # oldest first
    if all:
        return [t for t in entries if t.key not in keep]
    victims: list[TreeEntry] = []
    alive = list(entries)
    total = sum(t.size_bytes or 0 for t in alive)
    for t in entries:
        too_many = max_trees is not None and len(alive) > max_trees
        too_big = max_bytes is not None and total > max_bytes
        if not (too_many or too_big):
            break
        if t.key in keep:
            continue
        victims.append(t)
        alive.remove(t)
        total -= t.size_bytes or 0
    return victims


def as_host(host: "Host | str | os.PathLike") -> Host:
    """A Host, or a local cache folder (what ``--cache`` names) as a LocalHost on it."""
    if isinstance(host, Host):
        return host
    from ..hosts.local import LocalHost
    return LocalHost(cache_dir=host)


def cache_info(host: "Host | str | os.PathLike", *, sizes: bool = False) -> CacheInfo:
    """Every cached repository and tree, and the per-trial ``{out}`` folders by campaign, on
    ``host`` (for ``bisect-lab cache``), least recently used first. ``host`` may also be a local
    cache folder. ``sizes=True`` measures trees whose size is not recorded, and the ``{out}``
    folders (``du``)."""
    host = as_host(host)
    root = posixpath.join(host.cache_root(), "repos")
    data = _scan(host, root)
    trees = _trees_of(data)
    outputs = _outputs_of(data)
    if sizes:
        def du(path: str) -> int | None:
            res = host.run(["du", "-sk", path], timeout_s=300)
            try:
                return int(res.stdout.split()[0]) * 1024
            except (IndexError, ValueError):
                return None
        trees = [t if t.size_bytes is not None else replace(t, size_bytes=du(t.path)) for t in trees]
        outputs = [replace(o, size_bytes=du(o.path)) for o in outputs]
    repos = tuple(RepoEntry(repo=r["repo"], path=r["path"], trees=r["trees"]) for r in data["repos"])
    return CacheInfo(root=host.cache_root(), repos=repos, trees=tuple(trees), outputs=tuple(outputs))


def _outputs_of(data: dict) -> list[OutEntry]:
    outs = [OutEntry(campaign=o["campaign"], path=o["path"], trials=o["trials"], last_used=o["last_used"],
                     size_bytes=None, sessions=o.get("sessions", 0)) for o in data.get("outputs", [])]
    return sorted(outs, key=lambda o: o.last_used)


def prune_outputs(host: "Host | str | os.PathLike", *, keep_campaigns: int | None = None, all: bool = False,
                  log: Callable[[str], None] | None = None) -> list[OutEntry]:
    """Remove the per-trial ``{out}`` folders of all but the ``keep_campaigns`` most recently used
    campaigns on ``host`` (``all=True``: every campaign's). Nothing bisect-lab reads after a trial
    lives there (results, fingerprints and reports are in the results database). Returns what was
    removed."""
    host = as_host(host)
    outputs = _outputs_of(_scan(host, posixpath.join(host.cache_root(), "repos")))
    if all:
        victims = outputs
    elif keep_campaigns is not None:
        victims = outputs[:max(0, len(outputs) - max(0, keep_campaigns))]
    else:
        victims = []
    for o in victims:
        if log:
            log(f"removing the {{out}} folders of campaign {o.campaign} ({o.trials} trials)")
        host.run(["rm", "-rf", "--", o.path], timeout_s=600)
    return victims


def prune_cache(host: "Host | str | os.PathLike", *, max_trees: int | None = None,
                max_bytes: int | None = None, older_than_s: float | None = None, all: bool = False,
                everything: bool = False, keep_out_campaigns: int | None = None,
                log: Callable[[str], None] | None = None) -> Pruned:
    """Remove trees across every cached repository on ``host`` (or local cache folder): least
    recently used first until at most ``max_trees`` / ``max_bytes`` remain, plus every tree unused
    for ``older_than_s`` seconds (``all=True`` or ``everything=True``: every tree, and every
    per-trial ``{out}`` folder). ``keep_out_campaigns``: also remove the ``{out}`` folders of all
    but that many most recently used campaigns. Clone caches are kept. Returns the removed trees
    (a list), with the removed ``{out}`` folders as ``.outputs``."""
    host = as_host(host)
    all = all or everything
    root = posixpath.join(host.cache_root(), "repos")
    entries = _list_trees(host, root)
    victims = _pick_victims(entries, max_trees=max_trees, max_bytes=max_bytes, keep=set(), all=all)
    if older_than_s is not None:
        cutoff = time.time() - older_than_s
        victims += [t for t in entries if t.last_used < cutoff and t not in victims]
    for t in victims:
        repo_root = posixpath.dirname(posixpath.dirname(t.path))
        git_dir = posixpath.join(repo_root, "git")
        if log:
            log(f"removing tree {t.path}")
        remove_tree(host, git_dir, t.path)
    outputs = prune_outputs(host, keep_campaigns=keep_out_campaigns, all=all, log=log) \
        if all or keep_out_campaigns is not None else []
    return Pruned(victims, outputs)


