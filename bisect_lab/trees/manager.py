"""``TreeManager``: the clone cache and the trees of one target repository on one host.

Composed of the package's parts, each owning one job: :class:`~.clones.CloneCache` (cache,
fetch, bundles, folder import), :class:`~.refs.CommitGraph` (refs and commits),
:class:`~.worktrees.Worktrees` (prepare, verify, remove), :class:`~.build.TreeBuild` (build step,
PYTHONPATH, import check) and :class:`~.inventory.CacheBounds` (``{out}`` folders, LRU bounds).
Every command goes through the :class:`~bisect_lab.hosts.base.Host`.
"""
from __future__ import annotations

import posixpath
from typing import Callable

from ..hosts.base import Host
from ..model import PatchSet, Target
from .build import TreeBuild
from .clones import CloneCache
from .inventory import KEEP_OUT_CAMPAIGNS, CacheBounds
from .plumbing import repo_id
from .records import BuildError
from .refs import CommitGraph
from .worktrees import Worktrees


class TreeManager(CloneCache, CommitGraph, Worktrees, TreeBuild, CacheBounds):
    """Clone cache + worktrees of one target repository on one host.

    ``max_trees`` / ``max_bytes`` bound the tree cache of this repository (least recently used
    trees go first; the tree just prepared is never removed). ``log`` receives one-line progress
    messages (``log("cloning ...")``). ``auto_fetch``: fetch the source once per manager, on the
    first symbolic ref resolution (full shas already present never fetch).
    """

    def __init__(self, host: Host, target: Target, patchset: PatchSet | None = None, *,
                 max_trees: int | None = 32, max_bytes: int | None = None,
                 log: Callable[[str], None] | None = None, auto_fetch: bool = True,
                 git_timeout_s: float = 600.0, fetch_timeout_s: float = 3600.0,
                 build_timeout_s: float = 3600.0, keep_out_campaigns: int | None = KEEP_OUT_CAMPAIGNS):
        self.host = host
        self.target = target
        self.patchset = patchset
        self.max_trees = max_trees
        self.max_bytes = max_bytes
        self.log = log or (lambda msg: None)
        self.auto_fetch = auto_fetch
        self.git_timeout_s = git_timeout_s
        self.fetch_timeout_s = fetch_timeout_s
        self.build_timeout_s = build_timeout_s
        self.root = posixpath.join(host.cache_root(), "repos", repo_id(target.repo))
        self.git_dir = posixpath.join(self.root, "git")
        self.trees_dir = posixpath.join(self.root, "trees")
        self._fetched = False
        self._ready = False
        self._resolved: dict[str, str] = {}
        self._build_failed: dict[str, BuildError] = {}
        self._shipped: dict[str, str] = {}
        self.keep_out_campaigns = keep_out_campaigns
        self._out_pruned: set[str] = set()
