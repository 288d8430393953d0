"""Refs and the commit graph of the clone cache: ref resolution, commit info, bisection candidates,
first-parent chains, merge bases and ancestry.

All of it is git on the cache repository through the host (one ``git log`` answers a whole range):
the cache lives on the host that runs the trials, local or remote alike.
"""
from __future__ import annotations

import re

from ..errors import UsageError
from ..hosts.base import HostCommandError
from ..model import Target
from .plumbing import HEAD_REF, SHA_RE, HostGit, parse_commits
from .records import CommitInfo

_LOG_FORMAT = "--format=%H%x00%s%x00%an <%ae>%x00%aI%x00%P"


class CommitGraph(HostGit):
    """The refs-and-commits half of :class:`~bisect_lab.trees.TreeManager` (mixed into it)."""

    target: Target
    auto_fetch: bool
    _fetched: bool
    _resolved: dict[str, str]

    def resolve(self, ref: str | None = None) -> str:
        """Full commit sha of ``ref`` (default: the target's ref) in the clone cache.

        ``HEAD`` means the source's HEAD (the user's checked-out commit); ``origin/X`` is accepted
        for ``X``. An unknown ref raises :class:`UsageError` naming it.
        """
        ref = ref or self.target.ref or "HEAD"
        if ref in self._resolved:
            return self._resolved[ref]
        self._ensure_repo()
        sha = self._rev_parse(ref)
        if sha is None and self.auto_fetch and not self._fetched:
            self.fetch(ref)
            sha = self._rev_parse(ref)
        elif sha is not None and self.auto_fetch and not self._fetched and not SHA_RE.match(ref):
            # A symbolic ref may have moved since the cache was filled: refresh once per manager.
            self.fetch()
            sha = self._rev_parse(ref)
        if sha is None:
            raise UsageError(f"unknown ref {ref!r} in {self.target.repo} (not a commit, branch or tag there)")
        self._resolved[ref] = self._resolved[sha] = sha
        return sha

    def _rev_parse(self, ref: str) -> str | None:
        cands = [ref]
        m = re.match(r"^HEAD(?=$|[~^@])", ref)
        if m:
            cands = [HEAD_REF + ref[4:]]
        elif ref.startswith("origin/"):
            cands.append(ref[len("origin/"):])
        for c in cands:
            if c.startswith("-"):
                continue
            res = self._g("rev-parse", "--verify", "-q", f"{c}^{{commit}}", what="git rev-parse", check=False)
            if res.ok and res.stdout.strip():
                return res.stdout.strip()
        return None

    def commit_info(self, sha: str) -> CommitInfo:
        """Subject, author, date and parents of one commit."""
        full = self.resolve(sha)
        out = self._g("log", "-1", _LOG_FORMAT, full, what="git log").stdout
        return parse_commits(out)[0]

    def commits_between(self, good: str, bad: str) -> list[CommitInfo]:
        """Bisection candidates: commits reachable from ``bad`` and not from ``good`` (as git bisect
        defines them), ``bad`` included, ``good`` excluded, oldest first in topological order
        (``git rev-list --topo-order --reverse bad ^good``): every commit comes after its parents.

        Merges: commits of a merged side branch are candidates themselves (not hidden behind the
        merge), so a culprit on a side branch is reported as that commit. The list is a
        linearisation of a DAG: a commit's position does not imply that every earlier commit is its
        ancestor; use ``CommitInfo.parents`` to reason on the graph (a commit contains the culprit
        iff the culprit is among its ancestors).
        """
        g, b = self.resolve(good), self.resolve(bad)
        out = self._g("log", "--topo-order", "--reverse", _LOG_FORMAT,
                      b, f"^{g}", "--", what="git log").stdout
        return parse_commits(out)

    def first_parent_chain(self, good: str, bad: str) -> list[CommitInfo]:
        """The commits of ``bad``'s first-parent line that ``good`` lacks, oldest first, ``bad`` last.

        On this chain "contains the culprit" is monotone, which noisy bisection needs; a
        merge on it stands for its whole side branch until that branch is bisected in turn.
        """
        g, b = self.resolve(good), self.resolve(bad)
        out = self._g("log", "--first-parent", "--reverse", _LOG_FORMAT,
                      b, f"^{g}", "--", what="git log").stdout
        return parse_commits(out)

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two commits, or None when they share no history."""
        res = self._g("merge-base", self.resolve(a), self.resolve(b), what="git merge-base", check=False)
        return res.stdout.strip() or None if res.returncode == 0 else None

    def is_ancestor(self, a: str, b: str) -> bool:
        """True when commit ``a`` is an ancestor of (or equal to) ``b``."""
        res = self._g("merge-base", "--is-ancestor", self.resolve(a), self.resolve(b), what="git merge-base",
                      check=False)
        if res.returncode not in (0, 1):
            raise HostCommandError("git merge-base", res)
        return res.returncode == 0

