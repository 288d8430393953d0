"""Clean trees: a clone cache per target repository and one worktree per arm.

Everything runs through a :class:`~bisect_lab.hosts.base.Host` (git as a CLI, argv lists, a
timeout on every call), so the same code prepares trees on the local machine and on a GPU box
over SSH; nothing in this package starts a process itself. The user's checkout is only ever
*read* (``git fetch`` from it, ``git bundle`` of it, or hashing a plain folder into a separate
repository); nothing is written there.

Layout under ``host.cache_root()``::

    repos/<repo-id>/meta.json            which repository this is
    repos/<repo-id>/git/                 bare clone cache (refs mirror the source's branches/tags)
    repos/<repo-id>/trees/<key>/         one git worktree per arm (detached)
    repos/<repo-id>/trees/<key>.json     ready marker, written last: a tree without it is never reused
    repos/<repo-id>/trees/<key>.build.json   build marker (per tree hash)
    repos/<repo-id>/patches/<sha256>     patch files copied to a remote host (content-addressed)
    out/<campaign>/<trial>/              the per-trial {out} folders (fresh for every attempt)
    out/<campaign>/session-<name>/       a serving session: server.log and its readings' {out} folders

The key of a tree is a hash of the base commit and the ordered patch *contents* (sha256 of each
patch file), so renaming a patch reuses its tree, and editing one makes a new tree.

Modules: ``clones`` (clone cache, fetch, bundles, folder import), ``refs`` (refs, commit graph),
``worktrees`` (prepare, verify, remove), ``build`` (build step, PYTHONPATH, import check),
``inventory`` (cache listing, pruning, ``{out}`` folders), ``check`` (``check_patchset``),
``records`` (the dataclasses), ``plumbing`` (git argv and environment, parsers), ``manager``
(``TreeManager``, composing them).
"""
from .build import benchmark_python
from .check import check_patchset
from .inventory import KEEP_OUT_CAMPAIGNS, cache_info, prune_cache, prune_outputs
from .manager import TreeManager
from .plumbing import GIT_ENV, apply_error, parse_status, repo_id, tree_key
from .records import (BuildError, CacheInfo, CheckFailure, CheckReport, CommitInfo, ImportCheck, OutEntry,
                      PreparedTree, Pruned, RepoEntry, TreeEntry)
from .worktrees import remove_tree

__all__ = ["BuildError", "CacheInfo", "CheckFailure", "CheckReport", "CommitInfo", "GIT_ENV", "ImportCheck",
           "KEEP_OUT_CAMPAIGNS", "OutEntry", "PreparedTree", "Pruned", "RepoEntry", "TreeEntry", "TreeManager",
           "apply_error", "benchmark_python", "cache_info", "check_patchset", "prune_cache", "prune_outputs",
           "remove_tree", "repo_id", "tree_key"]
