"""Clean trees: a clone cache per target repository and one worktree per arm (DESIGN 2, 4).

Everything runs through a :class:`~bisect_lab.hosts.base.Host` (git as a CLI, argv lists, a
timeout on every call), so the same code prepares trees on the local machine and on a GPU box
over SSH. The user's checkout is only ever *read* (``git fetch`` from it, ``git bundle`` of it,
or hashing a plain folder into a separate repository); nothing is written there.

Layout under ``host.cache_root()``::

    repos/<repo-id>/meta.json            which repository this is
    repos/<repo-id>/git/                 bare clone cache (refs mirror the source's branches/tags)
    repos/<repo-id>/trees/<key>/         one git worktree per arm (detached)
    repos/<repo-id>/trees/<key>.json     ready marker, written last: a tree without it is never reused
    repos/<repo-id>/trees/<key>.build.json   build marker (per tree hash)
    repos/<repo-id>/patches/<sha256>     patch files copied to a remote host (content-addressed)

How a tree is made (``prepare``): the patches are applied in dependency order to a *temporary
index* holding the base commit (``git apply --cached``), so a patch that does not apply fails
before any worktree exists (nothing half-applied can be left behind or reused); the result is
written as a tree object (its id is :attr:`PreparedTree.tree_hash`) and a deterministic commit
whose parent is the base; ``git worktree add --detach`` checks that commit out. ``git status`` in
a tree is therefore clean right after preparation, which is what :meth:`TreeManager.verify` uses.

The key of a tree is a hash of the base commit and the ordered patch *contents* (sha256 of each
patch file), so renaming a patch reuses its tree, and editing one makes a new tree. Reuse is a
marker read plus one ``git status`` of the tracked files (a benchmark may have modified its tree:
a tree whose tracked files or HEAD changed is rebuilt, untracked build outputs do not count).

Layout, continued: ``out/<campaign>/<trial>/`` holds the per-trial ``{out}`` folders
(:meth:`TreeManager.trial_out_dir`: fresh for every attempt; only the newest campaigns' are kept).
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from .errors import BisectLabError, HostError, PatchError, UsageError
from .hosts.base import CommandResult, Host, HostCommandError
from .model import Patch, PatchSet, Target
from .patchset import closure, dependency_order
from .redact import redact_text

__all__ = ["BuildError", "CacheInfo", "CheckFailure", "CheckReport", "CommitInfo", "ImportCheck", "KEEP_OUT_CAMPAIGNS",
           "OutEntry", "PreparedTree", "Pruned", "RepoEntry", "TreeEntry", "TreeManager", "benchmark_python",
           "cache_info", "check_patchset", "prune_cache", "prune_outputs", "repo_id"]

_KEY_VERSION = "bisect-lab-tree-v1"
# Overlay for every git call: English messages (we parse stderr), no prompts, no inherited
# repository selection from the caller's environment (a hook or a test could set these).
GIT_ENV: dict[str, str | None] = {
    "LC_ALL": "C", "LANGUAGE": None, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0",
    "GIT_DIR": None, "GIT_WORK_TREE": None, "GIT_INDEX_FILE": None, "GIT_OBJECT_DIRECTORY": None,
    "GIT_ALTERNATE_OBJECT_DIRECTORIES": None, "GIT_COMMON_DIR": None, "GIT_NAMESPACE": None,
}
# The synthetic commit of a prepared tree is deterministic (same tree + base -> same sha).
_IDENTITY = {
    "GIT_AUTHOR_NAME": "bisect-lab", "GIT_AUTHOR_EMAIL": "bisect-lab@localhost",
    "GIT_COMMITTER_NAME": "bisect-lab", "GIT_COMMITTER_EMAIL": "bisect-lab@localhost",
    "GIT_AUTHOR_DATE": "@0 +0000", "GIT_COMMITTER_DATE": "@0 +0000",
}
# Refs mirrored from the source: branches keep their names (so "main~3" resolves), tags too, and
# the source's HEAD (a user's detached or feature-branch checkout) lands in refs/remotes/origin/HEAD.
_REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
_HEAD_REF = "refs/remotes/origin/HEAD"
_SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# Per-trial {out} folders are only read by the trial's own parser; the newest campaigns' are kept
# for people to look at, the rest go (a benchmark's output files can be hundreds of MB per trial).
KEEP_OUT_CAMPAIGNS = 10


# --------------------------------------------------------------------------- data
class BuildError(BisectLabError):
    """The per-tree build step failed; reported like a patch failure (the arm is untestable)."""

    def __init__(self, message: str, tree: str | None = None, output_tail: str = ""):
        self.tree = tree
        self.output_tail = output_tail
        super().__init__(message)


@dataclass(frozen=True)
class PreparedTree:
    """A ready tree on the host.

    ``path``: absolute folder on the host; ``commit``: the base commit; ``tree_hash``: git tree
    object id of base + patches (identical content -> identical hash); ``head``: the synthetic
    commit checked out in the worktree; ``key``: cache key (base + ordered patch hashes);
    ``patches``: names in the order applied; ``patch_hashes``: name -> sha256 of the patch file;
    ``reused``: True when an existing tree was returned; ``built``: the build step has succeeded.
    """

    path: str
    commit: str
    tree_hash: str
    key: str
    reused: bool
    patches: tuple[str, ...] = ()
    patch_hashes: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    head: str = ""
    built: bool = False


@dataclass(frozen=True)
class CommitInfo:
    """One commit: full sha, subject line, ``Name <email>``, ISO-8601 author date, parent shas."""

    sha: str
    subject: str
    author: str
    date: str
    parents: tuple[str, ...] = ()

    @property
    def is_merge(self) -> bool:
        return len(self.parents) > 1


@dataclass(frozen=True)
class TreeEntry:
    """One cached tree, as listed by :func:`cache_info`."""

    repo: str               # the target repository it belongs to
    key: str
    path: str
    commit: str
    tree_hash: str
    patches: tuple[str, ...]
    last_used: float        # unix time (marker mtime; touched on every reuse)
    size_bytes: int | None  # None when not measured
    built: bool

    def to_dict(self) -> dict:
        d = asdict(self)
        d["patches"] = list(self.patches)
        return d


@dataclass(frozen=True)
class RepoEntry:
    repo: str
    path: str               # the cache folder of this repository
    trees: int


@dataclass(frozen=True)
class OutEntry:
    """The per-trial ``{out}`` folders of one campaign on a host (``out/<campaign>/<trial>``)."""

    campaign: str
    path: str
    trials: int             # trial folders in it
    last_used: float        # unix time (folder mtime: a new trial folder bumps it)
    size_bytes: int | None  # None when not measured

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CacheInfo:
    """What ``bisect-lab cache`` shows."""

    root: str
    repos: tuple[RepoEntry, ...]
    trees: tuple[TreeEntry, ...]
    outputs: tuple[OutEntry, ...] = ()

    @property
    def out_bytes(self) -> int:
        return sum(o.size_bytes or 0 for o in self.outputs)

    @property
    def total_bytes(self) -> int:
        """Trees and ``{out}`` folders together (what measured sizes there are)."""
        return sum(t.size_bytes or 0 for t in self.trees) + self.out_bytes

    def to_dict(self) -> dict:
        """Plain data for ``--json``: root, total_bytes, out_bytes, repos, trees (LRU first) and
        outputs (the per-trial ``{out}`` folders by campaign, least recently used first)."""
        return {"root": self.root, "total_bytes": self.total_bytes, "out_bytes": self.out_bytes,
                "repos": [asdict(r) for r in self.repos], "trees": [t.to_dict() for t in self.trees],
                "outputs": [o.to_dict() for o in self.outputs]}


class Pruned(list):
    """The trees :func:`prune_cache` removed (a list, as before), with the ``{out}`` folders it
    removed as ``.outputs``."""

    outputs: list[OutEntry]

    def __init__(self, trees=(), outputs=()):
        super().__init__(trees)
        self.outputs = list(outputs)


@dataclass(frozen=True)
class CheckFailure:
    """One problem found by :func:`check_patchset`.

    ``kind``: ``"alone"`` (a patch with what it requires), ``"full-set"`` or ``"pair"``;
    ``patches``: what was being combined (one name, all names, or the pair); ``patch``: the patch
    that failed to apply; ``file``: the failing file (from git's message) when known.
    """

    kind: str
    patches: tuple[str, ...]
    patch: str
    file: str | None
    message: str

    def line(self) -> str:
        where = f" ({self.file})" if self.file else ""
        if self.kind == "pair":
            return f"conflict: {self.patches[0]} + {self.patches[1]}: {self.patch} fails{where}: {self.message}"
        if self.kind == "full-set":
            return f"full set: {self.patch} fails{where}: {self.message}"
        return f"{self.patches[0]}: {self.patch} fails{where}: {self.message}"


@dataclass(frozen=True)
class CheckReport:
    """Result of :func:`check_patchset`. ``ok`` is False when anything fails to apply."""

    ref: str
    base: str
    patches: tuple[str, ...]
    alone: tuple[CheckFailure, ...] = ()
    full_set: CheckFailure | None = None
    conflicts: tuple[CheckFailure, ...] = ()
    pairs_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.alone and self.full_set is None and not self.conflicts

    @property
    def failures(self) -> tuple[CheckFailure, ...]:
        return (*self.alone, *((self.full_set,) if self.full_set else ()), *self.conflicts)

    @property
    def problems(self) -> list[str]:
        """One line per failure (empty when ok)."""
        return [f.line() for f in self.failures]

    def to_dict(self) -> dict:
        """Plain data for ``--json``."""
        return {"ok": self.ok, "ref": self.ref, "base": self.base, "patches": list(self.patches),
                "pairs_checked": self.pairs_checked,
                "alone": [asdict(f) for f in self.alone],
                "full_set": asdict(self.full_set) if self.full_set else None,
                "conflicts": [asdict(f) for f in self.conflicts], "problems": self.problems}

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """Human-readable lines (the CLI prints them)."""
        head = f"{len(self.patches)} patches checked against {self.ref} ({self.base[:12]}), {self.pairs_checked} overlapping pairs"
        if self.ok:
            return [head + ": all apply, alone, together and in pairs"]
        return [head + ":"] + ["  " + f.line() for f in self.failures]


@dataclass(frozen=True)
class ImportCheck:
    """What :meth:`TreeManager.import_probe` found: ``origin`` is the file the module resolves to
    (empty when it does not resolve), ``python`` the interpreter that answered."""

    ok: bool
    module: str
    origin: str
    python: str
    message: str

    def to_dict(self) -> dict:
        return {"module": self.module, "origin": self.origin, "python": self.python, "ok": self.ok}


# --------------------------------------------------------------------------- helpers
def repo_id(repo: str) -> str:
    """Cache folder name of a target repository (path or URL). A URL's password is left out: an
    unsalted hash of it would let a guessed password be tested against the folder's name."""
    return hashlib.sha256(redact_text(repo).encode()).hexdigest()[:16]


def tree_key(commit: str, patch_hashes: Sequence[str]) -> str:
    """Cache key of a tree: base commit + ordered patch content hashes."""
    h = hashlib.sha256("\n".join((_KEY_VERSION, commit, *patch_hashes)).encode())
    return h.hexdigest()[:24]


_APPLY_FILE_RES = (
    re.compile(r"^error: patch failed: (?P<file>.+):\d+$", re.M),
    re.compile(r"^error: (?P<file>.+?): (?:patch does not apply|does not exist in index|"
               r"already exists in index|already exists in working directory|No such file or directory|"
               r"does not match index|wrong type|has type \d+, expected \d+)$", re.M),
)


def apply_error(stderr: str) -> tuple[str | None, str]:
    """(failing file, one-line reason) from ``git apply`` stderr."""
    for rx in _APPLY_FILE_RES:
        m = rx.search(stderr)
        if m:
            rest = [l for l in stderr.splitlines() if l.startswith("error: ") and "patch failed" not in l]
            reason = rest[0].split(": ")[-1] if rest else "patch does not apply"
            return m.group("file"), reason
    lines = [l.removeprefix("error: ").removeprefix("fatal: ") for l in stderr.splitlines() if l.strip()]
    return None, (lines[0] if lines else "git apply failed")


_PYTHON_WORD = re.compile(r"^python(\d+(\.\d+)*)?$")


def benchmark_python(command: str, tree: str | None = None) -> str | None:
    """The interpreter a benchmark command starts: its first word named ``python``, ``python3``,
    ``python3.11`` (a path allowed: ``.venv/bin/python``, ``{tree}/env/bin/python``), or None
    (``torchrun ...``, ``bash run.sh``, or a command that does not parse)."""
    import shlex
    if tree is not None:
        command = command.replace("{tree}", shlex.quote(tree))
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for w in words:
        if "=" not in w and _PYTHON_WORD.match(posixpath.basename(w)):
            return w
    return None


def _git(*args: str, git_dir: str | None = None) -> list[str]:
    pre = ["git", "-c", "gc.auto=0", "-c", "maintenance.auto=0", "-c", "core.hooksPath=/dev/null"]
    if git_dir:
        pre += ["--git-dir", git_dir]
    return [*pre, *args]


def _is_local_path(repo: str) -> bool:
    from .config import is_url
    return not is_url(repo)


# --------------------------------------------------------------------------- manager
class TreeManager:
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

    # ------------------------------------------------------------------ git plumbing
    def _run(self, argv: Sequence[str], *, what: str, cwd: str | None = None,
             env: Mapping[str, str | None] | None = None, timeout_s: float | None = None,
             check: bool = True, input: str | None = None) -> CommandResult:
        res = self.host.run(list(argv), timeout_s=timeout_s or self.git_timeout_s, cwd=cwd,
                            env={**GIT_ENV, **(env or {})}, input=input)
        if check and not res.ok:
            raise HostCommandError(what, res)
        return res

    def _g(self, *args: str, what: str, **kw) -> CommandResult:
        return self._run(_git(*args, git_dir=self.git_dir), what=what, **kw)

    def _ensure_repo(self) -> None:
        """Create the bare cache repository (once) and fetch into it."""
        if self._ready:
            return
        if not self.host.exists(posixpath.join(self.git_dir, "HEAD")):
            self.log(f"creating clone cache for {redact_text(self.target.repo)} in {self.git_dir}")
            tmp = f"{self.git_dir}.tmp-{uuid.uuid4().hex[:8]}"
            self._run(_git("init", "-q", "--bare", tmp), what="git init")
            # A rename makes the cache appear atomically: a crash never leaves a half-created one.
            res = self._run(["mv", "-T", tmp, self.git_dir], what="mv", check=False)
            if not res.ok:
                self._run(["rm", "-rf", tmp], what="rm", check=False)
            self.host.write_bytes(posixpath.join(self.root, "meta.json"),
                                  json.dumps({"repo": redact_text(self.target.repo)}).encode())
            self._ready = True
            self.fetch()
        self._ready = True

    # ------------------------------------------------------------------ fetch
    def fetch(self, ref: str | None = None) -> None:
        """Update the clone cache from the source (all branches, tags and the source's HEAD;
        ``ref`` additionally fetches that ref, e.g. a sha not on any branch).

        Sources: a URL is fetched by the host itself; a local git repository is fetched directly
        (local host) or shipped as a ``git bundle`` through ``host.write_bytes`` (remote host); a
        plain folder is imported as a one-commit repository whose commit depends only on the
        content (same content -> same commit).
        """
        self._ensure_repo()
        self._fetched = True
        self._resolved.clear()
        repo = self.target.repo
        if not _is_local_path(repo):
            self._fetch_from(repo, ref)
            return
        if not os.path.isdir(repo):
            raise UsageError(f"target repository {repo} does not exist")
        if _local_git_toplevel(repo) is None:
            if self.host.is_local:
                self._import_folder(repo, self.git_dir)
            else:
                staging = _local_staging_repo(repo)
                self._import_folder_locally(repo, staging)
                self._ship_bundle(staging, ref)
            return
        if self.host.is_local:
            self._fetch_from(repo, ref)
        else:
            self._ship_bundle(repo, ref)

    def _fetch_from(self, source: str, ref: str | None, *, what: str | None = None) -> None:
        self.log(f"fetching {redact_text(source)}")
        what = what or f"git fetch {redact_text(source)}"      # error messages name the source too
        specs = [*_REFSPECS, f"+HEAD:{_HEAD_REF}"]
        res = self._g("fetch", "-q", "--update-head-ok", "--no-write-fetch-head", source, *specs,
                      what=what, timeout_s=self.fetch_timeout_s, check=False)
        if not res.ok and "HEAD" in res.stderr:
            # A source without a valid HEAD (empty or unborn branch): fetch branches and tags only.
            res = self._g("fetch", "-q", "--update-head-ok", "--no-write-fetch-head", source, *_REFSPECS,
                          what=what, timeout_s=self.fetch_timeout_s, check=False)
        if not res.ok:
            raise HostCommandError(what, res)
        if ref and _SHA_RE.match(ref):
            # A commit not reachable from any branch (servers allowing it): best effort.
            self._g("fetch", "-q", "--no-write-fetch-head", source, ref, what="git fetch sha",
                    timeout_s=self.fetch_timeout_s, check=False)

    def _ship_bundle(self, local_repo: str, ref: str | None) -> None:
        """Send a local repository to a remote host as a bundle and fetch from it there.

        Incremental: the commits shipped last time (recorded on the host in ``shipped.json``) are
        excluded from the bundle, and the refs are then set explicitly on the host (so a branch or
        HEAD that moved *backwards* is followed too). Any failure of that path falls back to a full
        bundle. Nothing is sent when the source's refs did not change.
        """
        import subprocess
        import tempfile
        env = {k: v for k, v in os.environ.items() if k not in GIT_ENV}
        env["LC_ALL"] = "C"

        def local_git(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
            return subprocess.run(["git", "-C", local_repo, *args], env=env, capture_output=True, text=True,
                                  input=input, timeout=self.fetch_timeout_s)

        refs: dict[str, str] = {}
        for line in local_git("show-ref", "--head").stdout.splitlines():
            sha, name = line.split(" ", 1)
            if name == "HEAD" or name.startswith(("refs/heads/", "refs/tags/")):
                refs[name] = sha
        digest = hashlib.sha256(json.dumps(refs, sort_keys=True).encode()).hexdigest()
        marker = posixpath.join(self.root, "shipped.json")
        shipped = self._read_json(marker) or {}
        if shipped.get("digest") == digest:
            return           # nothing changed since the last bundle
        have = [t for t in shipped.get("tips", []) if _SHA_RE.match(t)]
        if have:             # only exclusions the local repository knows (it may have been gc'ed)
            probe = local_git("cat-file", "--batch-check", input="".join(t + "\n" for t in have)).stdout
            have = [w[0] for w in (l.split() for l in probe.splitlines()) if len(w) == 3 and w[1] == "commit"]
        updates = "".join(f"update {_HEAD_REF if n == 'HEAD' else n} {sha}\n" for n, sha in sorted(refs.items()))
        for incremental in ((True, False) if have else (False,)):
            self.log(f"bundling {local_repo} for {self.host.name}" + (" (incremental)" if incremental else ""))
            with tempfile.TemporaryDirectory() as tmp:
                bundle = os.path.join(tmp, "repo.bundle")
                args = ["bundle", "create", "-q", bundle, "HEAD", "--branches", "--tags"]
                if incremental:
                    args += ["--not", *have]
                p = local_git(*args)
                if p.returncode != 0 and not (incremental and "empty bundle" in p.stderr):
                    raise HostError(f"git bundle of {local_repo} failed: "
                                    f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
                data = Path(bundle).read_bytes() if p.returncode == 0 else None
            remote = posixpath.join(self.root, "incoming.bundle")
            if data is not None:
                self.host.write_bytes(remote, data, timeout_s=max(60.0, len(data) / 1e6))
            res = self._run(["bash", "-c", _SHIP_SCRIPT, "bisect-lab-ship", self.git_dir,
                             remote if data is not None else "", *_REFSPECS],
                            what=f"git fetch (bundle of {local_repo})", check=False,
                            timeout_s=self.fetch_timeout_s, input=updates)
            if res.ok:
                break
            if not incremental:
                raise HostCommandError(f"git fetch (bundle of {local_repo})", res)
        tips = sorted(set(refs.values()))
        self._write_json(marker, {"digest": digest, "tips": tips})

    def _import_folder(self, folder: str, git_dir: str) -> str:
        """Import a plain folder into ``git_dir`` (on this host) as one parentless commit.

        The import index is kept between imports (``import.index`` in the git dir): its stat cache
        means a re-import only re-hashes files that changed.
        """
        env = {"GIT_INDEX_FILE": posixpath.join(git_dir, "import.index"), **_IDENTITY}
        self._run(_git("--work-tree", folder, "add", "-A", "--", ".", git_dir=git_dir),
                  what=f"import of folder {folder}", env=env, cwd=folder)
        tree = self._run(_git("write-tree", git_dir=git_dir), what="git write-tree", env=env).stdout.strip()
        return self._commit_import(tree, folder, git_dir, run=self._run)

    def _import_folder_locally(self, folder: str, git_dir: str) -> str:
        """Same as :meth:`_import_folder` into a repository on this machine (to be bundled)."""
        from .hosts.local import LocalHost
        local = LocalHost()

        def run(argv, *, what, env=None, cwd=None, check=True, timeout_s=None):
            res = local.run(list(argv), timeout_s=timeout_s or self.git_timeout_s, cwd=cwd,
                            env={**GIT_ENV, **(env or {})})
            if check and not res.ok:
                raise HostCommandError(what, res)
            return res

        if not os.path.exists(os.path.join(git_dir, "HEAD")):
            run(_git("init", "-q", "--bare", git_dir), what="git init")
        env = {"GIT_INDEX_FILE": os.path.join(git_dir, "import.index"), **_IDENTITY}
        run(_git("--work-tree", folder, "add", "-A", "--", ".", git_dir=git_dir), what="import",
            env=env, cwd=folder)
        tree = run(_git("write-tree", git_dir=git_dir), what="write-tree", env=env).stdout.strip()
        return self._commit_import(tree, folder, git_dir, run=run)

    @staticmethod
    def _commit_import(tree: str, folder: str, git_dir: str, *, run) -> str:
        # Fixed identity, date and message: the commit id is a function of the content only.
        sha = run(_git("commit-tree", tree, "-m", "bisect-lab import of a plain folder", git_dir=git_dir),
                  what="git commit-tree", env=_IDENTITY).stdout.strip()
        for ref in ("refs/heads/main", _HEAD_REF):
            run(_git("update-ref", ref, sha, git_dir=git_dir), what="git update-ref")
        run(_git("symbolic-ref", "HEAD", "refs/heads/main", git_dir=git_dir), what="git symbolic-ref")
        return sha

    # ------------------------------------------------------------------ refs and commits
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
        elif sha is not None and self.auto_fetch and not self._fetched and not _SHA_RE.match(ref):
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
            cands = [_HEAD_REF + ref[4:]]
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
        out = self._g("log", "-1", "--format=%H%x00%s%x00%an <%ae>%x00%aI%x00%P", full, what="git log").stdout
        return _parse_commits(out)[0]

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
        out = self._g("log", "--topo-order", "--reverse", "--format=%H%x00%s%x00%an <%ae>%x00%aI%x00%P",
                      b, f"^{g}", "--", what="git log").stdout
        return _parse_commits(out)

    def first_parent_chain(self, good: str, bad: str) -> list[CommitInfo]:
        """The commits of ``bad``'s first-parent line that ``good`` lacks, oldest first, ``bad`` last.

        On this chain "contains the culprit" is monotone, which noisy bisection needs; a
        merge on it stands for its whole side branch until that branch is bisected in turn.
        """
        g, b = self.resolve(good), self.resolve(bad)
        out = self._g("log", "--first-parent", "--reverse", "--format=%H%x00%s%x00%an <%ae>%x00%aI%x00%P",
                      b, f"^{g}", "--", what="git log").stdout
        return _parse_commits(out)

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

    # ------------------------------------------------------------------ patches
    def _ordered(self, names: Iterable[str]) -> list[Patch]:
        names = list(names)
        if not names:
            return []
        if self.patchset is None:
            raise UsageError(f"patches {', '.join(sorted(names))} requested but the target has no patch set")
        valid = set(self.patchset.names)
        unknown = [n for n in names if n not in valid]
        if unknown:
            raise UsageError(f"unknown patch {unknown[0]!r}; valid names: {', '.join(self.patchset.names)}")
        return dependency_order(self.patchset, closure(self.patchset, names))

    def _patch_path(self, p: Patch) -> str:
        """Where the patch file is on the host (copied there, content-addressed, when remote)."""
        if self.host.is_local:
            return str(p.path)
        remote = posixpath.join(self.root, "patches", f"{p.sha256}.patch")
        if self._shipped.get(p.sha256) != remote:
            if not self.host.exists(remote):
                self.host.write_bytes(remote, Path(p.path).read_bytes())
            self._shipped[p.sha256] = remote
        return remote

    def _apply(self, commit: str, patches: Sequence[Patch], *, create: str | None = None,
               message: str = "", marker: str = "") -> tuple[str, str | None, set[str]]:
        """Apply ``patches`` in order to a temporary index of ``commit`` and write the tree;
        with ``create`` (a tree path) also make the tree's commit and check it out there.

        One host command runs the whole pipeline (:data:`_APPLY_SCRIPT`): on a remote host every
        round trip costs, so preparing a tree is one of them. ``marker`` is the ready marker's JSON
        with ``@TREE@``/``@HEAD@`` placeholders, written last by the script. Returns (tree id, head
        commit or None, flags: ``DISCARDED`` a leftover folder was removed, ``READY`` another
        process prepared this tree meanwhile). Raises :class:`PatchError` naming the first
        patch that does not apply and its file; nothing is left behind then.
        """
        argv = ["bash", "-c", _APPLY_SCRIPT, "bisect-lab-apply", self.git_dir, self._tmp_index(), commit,
                create or "", message, marker, *(self._patch_path(p) for p in patches)]
        res = self._run(argv, what="applying patches", env=_IDENTITY, check=False)
        out = dict((line.split(" ", 1) + [""])[:2] for line in res.stdout.splitlines() if line.strip())
        if "FAILED" in out and not res.timed_out:
            p = patches[int(out["FAILED"])]
            file, reason = apply_error(res.stderr)
            where = f" at {file}" if file else ""
            raise PatchError(f"patch {p.name!r} does not apply to {commit[:12]}{where}: {reason}",
                             patch=p.name, file=file)
        if not res.ok or "TREE" not in out or (create and not ({"DONE", "READY"} & set(out))):
            raise HostCommandError(f"preparing a tree of {commit[:12]}" if create else "git apply --cached", res)
        return out["TREE"], out.get("HEAD"), {k for k in ("DISCARDED", "READY") if k in out}

    def _tmp_index(self) -> str:
        return posixpath.join(self.root, "tmp", f"index-{os.getpid()}-{uuid.uuid4().hex[:8]}")

    def apply_check(self, patch_names: Iterable[str], commit: str | None = None, *,
                    expand: bool = True) -> str:
        """Check that the patches (with what they require, in dependency order) apply to
        ``commit``; return the resulting tree id without creating any worktree.
        ``expand=False`` applies exactly ``patch_names`` in the given order."""
        commit = self.resolve(commit) if commit else self.resolve()
        patches = self._ordered(patch_names) if expand else [self.patchset.get(n) for n in patch_names]
        return self._apply(commit, patches)[0]

    # ------------------------------------------------------------------ trees
    def _paths(self, key: str) -> tuple[str, str, str]:
        base = posixpath.join(self.trees_dir, key)
        return base, base + ".json", base + ".build.json"

    def _read_json(self, path: str) -> dict | None:
        try:
            if self.host.is_local:
                with open(path, "rb") as f:
                    return json.loads(f.read())
            return json.loads(self.host.read_bytes(path))      # one round trip, no exists() first
        except (FileNotFoundError, ValueError):
            return None

    def _write_json(self, path: str, data: dict) -> None:
        """Write so that a reader sees the whole marker or none (locally: temp file + rename)."""
        blob = json.dumps(data, indent=1, sort_keys=True).encode()
        if self.host.is_local:
            tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
            with open(tmp, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        else:
            # One round trip: a torn write leaves JSON that does not parse, which reads as "no
            # marker" (the tree is rebuilt), never as a valid marker of a half-prepared tree.
            self.host.write_bytes(path, blob)

    def _touch(self, path: str) -> None:
        if self.host.is_local:
            try:
                os.utime(path)
            except FileNotFoundError:
                pass
        else:
            self.host.quick(["touch", "-c", path], timeout_s=self.git_timeout_s)

    def prepare(self, arm_patches: Iterable[str] = (), commit: str | None = None, *,
                build: bool = True) -> PreparedTree:
        """A clean tree of ``commit`` (default: the target's ref) with ``arm_patches`` applied.

        Patches are applied with what they require, in dependency order. A tree with the same key
        (base commit + ordered patch contents) that is already prepared is reused after one
        ``git status`` (:meth:`tree_changes`); one whose tracked files or HEAD changed since is
        rebuilt, with a warning in the log naming the changes. ``build``: run the target's build
        step (once per tree hash).

        Raises :class:`PatchError` (patch and file named; no tree is left behind),
        :class:`BuildError`, :class:`UsageError` (unknown patch or ref).
        """
        patches = self._ordered(arm_patches)
        if commit is None or not _SHA_RE.match(commit):
            commit = self.resolve(commit) if commit else self.resolve()
        hashes = {p.name: p.sha256 for p in patches}
        key = tree_key(commit, [p.sha256 for p in patches])
        path, marker, _ = self._paths(key)
        info = self._read_json(marker)
        tree = None
        if info is not None and info.get("key") == key:
            # Hot path: the marker, an mtime bump for the LRU order and one `git status` (the
            # benchmark of an earlier trial may have edited the tree: trust is checked, not assumed).
            tree = PreparedTree(path=path, commit=commit, tree_hash=info["tree_hash"], key=key, reused=True,
                                patches=tuple(hashes), patch_hashes=hashes, head=info.get("head", ""))
            changes = self.tree_changes(tree, touch=marker)
            if changes:
                shown = "; ".join(changes[:5]) + (f"; and {len(changes) - 5} more" if len(changes) > 5 else "")
                self.log(f"warning: tree {key} ({commit[:12]} + {', '.join(hashes) or 'no patches'}) was modified "
                         f"after it was prepared ({shown}): rebuilding it")
                self._remove_worktree(*self._paths(key))
                tree = None
        if tree is None:
            tree = self._create(key, commit, patches)
        if build and self.target.build:
            tree = self.build(tree)
        return tree

    def _create(self, key: str, commit: str, patches: list[Patch]) -> PreparedTree:
        self._ensure_repo()
        commit = self.resolve(commit)          # fetches a sha the cache does not hold yet
        path, marker, build_marker = self._paths(key)
        hashes = {p.name: p.sha256 for p in patches}
        msg = f"bisect-lab tree {key}\n\nbase {commit}\n" + "".join(f"patch {p.name} {p.sha256}\n" for p in patches)
        # The marker is written by the script itself, last and under the tree's lock, so a
        # concurrent preparation of the same arm waits and then reuses it.
        template = {"key": key, "commit": commit, "tree_hash": "@TREE@", "head": "@HEAD@",
                    "patches": list(hashes), "patch_hashes": hashes, "repo": redact_text(self.target.repo),
                    "created": time.time()}
        tree_hash, head, flags = self._apply(commit, patches, create=path, message=msg,
                                             marker=json.dumps(template, indent=1, sort_keys=True))
        if "READY" in flags:
            info = self._read_json(marker) or {}
            return PreparedTree(path=path, commit=commit, tree_hash=info.get("tree_hash", tree_hash), key=key,
                                reused=True, patches=tuple(hashes), patch_hashes=hashes,
                                head=info.get("head", ""))
        if "DISCARDED" in flags:
            # A leftover folder without marker: a crashed or interrupted preparation.
            self.log(f"discarded half-prepared tree {path}")
        self.log(f"prepared tree {key} ({commit[:12]} + {', '.join(hashes) or 'no patches'})")
        if self.max_bytes is not None:
            data = self._read_json(marker) or {}
            data["size_bytes"] = self._du(path)
            self._write_json(marker, data)
        tree = PreparedTree(path=path, commit=commit, tree_hash=tree_hash, key=key, reused=False,
                            patches=tuple(hashes), patch_hashes=hashes, head=head or "")
        self._enforce_limits(keep={key})
        return tree

    def _du(self, path: str) -> int | None:
        res = self._run(["du", "-sk", path], what="du", check=False, timeout_s=300)
        try:
            return int(res.stdout.split()[0]) * 1024
        except (IndexError, ValueError):
            return None

    def _remove_worktree(self, path: str, marker: str, build_marker: str) -> None:
        # Marker first: from this instant on the tree is never reused, whatever happens next.
        self._run(["rm", "-f", marker, build_marker, path + ".lock"], what="rm", check=False)
        self._g("worktree", "remove", "--force", "--force", path, what="git worktree remove", check=False)
        self._run(["rm", "-rf", path], what="rm", check=False)
        self._g("worktree", "prune", what="git worktree prune", check=False)

    def verify(self, tree: PreparedTree) -> bool:
        """True when ``tree`` still holds exactly what was prepared (and built): see
        :meth:`tree_changes`."""
        return not self.tree_changes(tree)

    def tree_changes(self, tree: PreparedTree, *, touch: str | None = None) -> list[str]:
        """What differs in ``tree`` from what was prepared, one short line per change
        (``"deleted knobs_slow.py"``, ``"HEAD is 0123456789ab, not the prepared ..."``); empty when
        the tree is intact.

        One ``git status`` (tracked files only: git compares each file's stat data with its index,
        ctime included, which no program can set back, and hashes the content when in doubt), so
        untracked build outputs (``pip install -e .``, compiled extensions, ``build/``) never count
        while a modified, deleted or staged tracked file, or a moved HEAD, does. Changes to tracked
        files that the build step itself made are its baseline (recorded with their content hash
        by :meth:`build`), not changes. ``touch``: also bump this marker's mtime in the same host
        command (one round trip over SSH).
        """
        state = self._status(tree.path, touch=touch)
        if state is None:
            return [f"the tree folder {tree.path} is missing or not a git worktree"]
        head, entries = state
        changes = []
        if tree.head and head != tree.head:
            changes.append(f"HEAD is {head[:12] or '(none)'}, not the prepared {tree.head[:12]}")
        if entries and self.target.build:
            baseline = (self._read_json(self._paths(tree.key)[2]) or {}).get("tracked_changes")
            if baseline is not None and sorted(baseline) == sorted(entries) and \
                    self._hashes(tree.path, entries) == baseline:
                entries = {}
        changes += [f"{what} {path}" for path, what in sorted(entries.items())]
        return changes

    def _status(self, path: str, *, touch: str | None = None) -> tuple[str, dict[str, str]] | None:
        """(HEAD sha, {path: "modified"|"deleted"|...}) of a worktree, or None when it is not one."""
        argv = _git("-C", path, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=no",
                    "--ignore-submodules=all")
        # Optional locks allowed: git may write back the refreshed index, so files checked out in the
        # same instant as the index (racily clean) are hashed once, not on every reuse.
        env = {**GIT_ENV, "GIT_OPTIONAL_LOCKS": None}
        if touch and self.host.is_local:
            self._touch(touch)
        elif touch:
            argv = ["sh", "-c", 'touch -c "$1" 2>/dev/null; shift; exec "$@"', "bisect-lab-verify", touch, *argv]
        res = self.host.quick(argv, timeout_s=self.git_timeout_s, env=env)
        if not res.ok:
            return None
        return _parse_status(res.stdout)

    def _hashes(self, path: str, entries: Mapping[str, str]) -> dict[str, str]:
        """{path: [what, content hash or ""]} of changed tracked files (a build's baseline)."""
        present = [p for p, what in sorted(entries.items()) if what != "deleted"]
        ids: list[str] = []
        if present:
            res = self._run(_git("-C", path, "hash-object", "--", *present), what="git hash-object", check=False)
            ids = res.stdout.split() if res.ok else []
        blobs = dict(zip(present, ids)) if len(ids) == len(present) else {}
        return {p: [what, blobs.get(p, "")] for p, what in entries.items()}

    # ------------------------------------------------------------------ build / environment
    def build(self, tree: PreparedTree) -> PreparedTree:
        """Run the target's build step in ``tree`` once per tree hash (cached by a marker).

        Raises :class:`BuildError` with the tail of the output; a failure is remembered for the
        life of this manager (not on disk, so a transient failure is retried by the next campaign).
        """
        cmd = self.target.build
        if not cmd:
            return tree
        _, _, bmarker = self._paths(tree.key)
        info = self._read_json(bmarker)
        if info and info.get("tree_hash") == tree.tree_hash and info.get("command") == cmd:
            return _replace(tree, built=True)
        if tree.key in self._build_failed:
            raise self._build_failed[tree.key]
        self.log(f"building tree {tree.key}: {cmd}")
        res = self.host.run(cmd, timeout_s=self.build_timeout_s, cwd=tree.path,
                            env={**self.pythonpath_env(tree)})
        if not res.ok:
            out = (res.stdout + res.stderr).strip()
            tail = "\n".join(out.splitlines()[-30:])
            last = out.splitlines()[-1] if out else ""
            why = "timed out" if res.timed_out else f"exit {res.returncode}"
            err = BuildError(f"build step {cmd!r} failed in tree {tree.key} ({why}): {last[:300]}",
                             tree=tree.path, output_tail=tail)
            self._build_failed[tree.key] = err
            raise err
        record = {"tree_hash": tree.tree_hash, "command": cmd, "duration_s": res.duration_s, "built": time.time()}
        state = self._status(tree.path)
        if state and state[1]:
            # A build that rewrites tracked files (a generated version file): that state, content
            # included, is what later reuses are checked against.
            record["tracked_changes"] = self._hashes(tree.path, state[1])
            self.log(f"build step {cmd!r} changed tracked files in tree {tree.key}: "
                     + ", ".join(sorted(state[1])[:5]))
        self._write_json(bmarker, record)
        if self.max_bytes is not None:     # a build can grow the tree a lot: refresh its size
            _, marker, _ = self._paths(tree.key)
            data = self._read_json(marker)
            if data:
                data["size_bytes"] = self._du(tree.path)
                self._write_json(marker, data)
        return _replace(tree, built=True)

    def pythonpath_env(self, tree: PreparedTree, inherited: str | None = None) -> dict[str, str]:
        """``{"PYTHONPATH": ...}`` with the tree folders of ``target.pythonpath`` first, then
        ``inherited`` (pass the trial's existing PYTHONPATH to keep it). ``{}`` when there is
        nothing to set."""
        parts = [posixpath.normpath(posixpath.join(tree.path, p)) for p in self.target.pythonpath]
        if inherited:
            parts.append(inherited)
        return {"PYTHONPATH": ":".join(parts)} if parts else {}

    def import_check(self, tree: PreparedTree, env: Mapping[str, str | None] | None = None, *,
                     cwd: str | None = None, python: str | None = None, command: str | None = None,
                     timeout_s: float = 120.0) -> tuple[bool, str]:
        """Verify that ``target.import_check`` resolves inside ``tree`` in the trial's environment.

        ``(True, origin)`` or ``(False, message)``: see :meth:`import_probe`, which also says which
        interpreter answered.
        """
        res = self.import_probe(tree, env, cwd=cwd, python=python, command=command, timeout_s=timeout_s)
        return res.ok, (res.origin if res.ok else res.message)

    def import_probe(self, tree: PreparedTree, env: Mapping[str, str | None] | None = None, *,
                     cwd: str | None = None, python: str | None = None, command: str | None = None,
                     timeout_s: float = 120.0) -> "ImportCheck":
        """Where ``target.import_check`` is imported from in the trial's environment, and whether
        that is inside ``tree``.

        The probe runs the benchmark's own interpreter: ``python``, else the first ``python*`` word
        of the benchmark ``command`` (``python3 bench.py``, ``.venv/bin/python -m x``,
        ``{tree}/env/bin/python``), else the host's (``host.python_exe``); with ``env``, the overlay
        the benchmark gets (default: :meth:`pythonpath_env`), in ``cwd`` (default: the tree), and
        without the working directory on ``sys.path`` (what ``-c`` would add and a benchmark script
        does not get): a package at the tree's root that only the working directory makes
        importable does not pass, while the benchmark would import an installed or PYTHONPATH copy.
        """
        mod = self.target.import_check
        if not mod:
            return ImportCheck(True, "", "", "", "no import check configured")
        env = dict(self.pythonpath_env(tree) if env is None else env)
        exe = python or benchmark_python(command or "", tree.path) or self.host.python_exe
        res = self.host.run([exe, "-c", _IMPORT_PROBE, mod, tree.path], timeout_s=timeout_s,
                            cwd=cwd or tree.path, env=env)
        lines = dict((l.split(" ", 1) + [""])[:2] for l in res.stdout.strip().splitlines() if l.strip())
        used = lines.get("PYTHON", exe)
        hint = (f"; list the tree folder that holds {mod} in [target] pythonpath (now "
                f"{list(self.target.pythonpath)}) or remove the other copy")
        if res.ok and "INSIDE" in lines:
            return ImportCheck(True, mod, lines["INSIDE"], used, f"import {mod} resolves inside the tree")
        if "OUTSIDE" in lines:
            return ImportCheck(False, mod, lines["OUTSIDE"], used,
                               f"import {mod} resolves to {lines['OUTSIDE']} with {used}, outside the prepared tree "
                               f"{tree.path}: the benchmark would measure that copy, not the tree under test "
                               f"(an installed or editable copy, or a PYTHONPATH entry, shadows it){hint}")
        if "MISSING" in lines:
            return ImportCheck(False, mod, "", used,
                               f"import {mod} cannot be found by {used} in the trial's environment, "
                               f"the working directory aside (tree {tree.path}){hint}")
        err = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return ImportCheck(False, mod, "", used,
                           f"import check of {mod} with {exe} failed ({'timed out' if res.timed_out else err})")

    # ------------------------------------------------------------------ per-trial {out} folders
    def trial_out_dir(self, campaign: str, index: int) -> str:
        """A fresh, empty ``{out}`` folder for one attempt of trial ``index`` (``out/<campaign>/<index>``
        under the host's cache root), made by one host command.

        Whatever an earlier attempt left there goes first: after ``kill -9`` a resume gives the
        next trial the unfinished trial's index, and a partial result file from the killed attempt
        must never be parsed as the new one's. On the first trial of each campaign this manager
        runs, the ``{out}`` folders of all but the newest ``keep_out_campaigns`` campaigns (this one
        always kept) are removed as well.
        """
        root = posixpath.join(self.host.cache_root(), "out")
        path = posixpath.join(root, campaign, str(int(index)))
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
            self._remove_worktree(*self._paths(t.key))
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


def _replace(tree: PreparedTree, **kw) -> PreparedTree:
    from dataclasses import replace
    return replace(tree, **kw)


_IMPORT_PROBE = r"""
import importlib.util, os, sys
# Resolve the module the way the benchmark will import it: from PYTHONPATH, site-packages and .pth
# files. `-c` puts the working directory (the tree) first on sys.path, which the benchmark does not
# get when it is a script in a subfolder, a script elsewhere or an entry point: drop it, as
# `python -P` (3.11+) does, on any version.
if sys.path and sys.path[0] == "" and not getattr(sys.flags, "safe_path", False):
    del sys.path[0]
mod, root = sys.argv[1], os.path.realpath(sys.argv[2])
print("PYTHON", sys.executable)
try:
    spec = importlib.util.find_spec(mod)
except Exception as e:
    print("ERROR", repr(e)); sys.exit(3)
if spec is None:
    print("MISSING -"); sys.exit(3)
origin = spec.origin if spec.origin not in (None, "namespace", "built-in", "frozen") else \
    next(iter(spec.submodule_search_locations or []), None)
if origin is None:
    print("OUTSIDE", spec.origin); sys.exit(4)
real = os.path.realpath(origin)
inside = os.path.commonpath([real, root]) == root
print("INSIDE" if inside else "OUTSIDE", real)
sys.exit(0 if inside else 4)
"""


# The tree pipeline as one host command (argv: git_dir index commit path message marker patches...).
# stdout protocol: "TREE <id>", "HEAD <sha>", "DISCARDED", "READY", "DONE", or "FAILED <i>" (patch i, with
# git apply's stderr on stderr). Arguments arrive as argv: nothing is interpolated into the script.
_APPLY_SCRIPT = r"""
set -u
git_dir=$1 index=$2 commit=$3 path=$4 msg=$5 marker=$6
shift 6
g() { git -c gc.auto=0 -c maintenance.auto=0 -c core.hooksPath=/dev/null --git-dir "$git_dir" "$@"; }
trap 'rm -f "$index" "$index.lock"' EXIT
mkdir -p "${index%/*}" || exit 1
export GIT_INDEX_FILE=$index
g read-tree "$commit" || exit 2
if [ $# -gt 0 ]; then
    # Fast path: one git apply for all (all-or-nothing, successive patches to a file are fine).
    # On failure, start again patch by patch to name the culprit.
    if ! g apply --cached --whitespace=nowarn "$@" 2>/dev/null; then
        g read-tree "$commit" || exit 2
        i=0
        for p in "$@"; do
            g apply --cached --whitespace=nowarn "$p" || { echo "FAILED $i"; exit 3; }
            i=$((i + 1))
        done
    fi
fi
tree=$(g write-tree) || exit 4
echo "TREE $tree"
[ -n "$path" ] || exit 0
# From here on the tree's own index must be used, not the temporary one.
unset GIT_INDEX_FILE
mkdir -p "${path%/*}" || exit 1
# One preparation of a given tree at a time on this host; a waiter finds the marker and reuses.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$path.lock" && flock -w 3600 9 || exit 7
    if [ -s "$path.json" ]; then echo "READY"; exit 0; fi
fi
head=$(g commit-tree "$tree" -p "$commit" -m "$msg") || exit 5
echo "HEAD $head"
if [ -e "$path" ]; then
    echo "DISCARDED"
    rm -f "$path.json" "$path.build.json"
    g worktree remove --force --force "$path" 2>/dev/null
    rm -rf "$path"
    g worktree prune
fi
if ! out=$(g worktree add -q --detach "$path" "$head" 2>&1); then
    case $out in
    *"already registered"*)
        # The folder was deleted by hand: forget the stale registration and retry once.
        g worktree prune
        out=$(g worktree add -q --detach "$path" "$head" 2>&1) || { echo "$out" >&2; rm -rf "$path"; g worktree prune; exit 6; } ;;
    *)
        echo "$out" >&2; rm -rf "$path"; g worktree prune; exit 6 ;;
    esac
fi
# The ready marker, last: written to a temporary name and renamed, so it is whole or absent.
m=${marker//@TREE@/$tree}
m=${m//@HEAD@/$head}
printf '%s' "$m" > "$path.json.tmp-$$" && mv -f "$path.json.tmp-$$" "$path.json" || exit 8
echo "DONE"
"""


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
    import shutil
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


# Fetch a shipped bundle (if any) and set the refs to the source's values, atomically.
# argv: git_dir bundle-or-empty refspecs...; the ref updates (update-ref --stdin lines) on stdin.
_SHIP_SCRIPT = r"""
set -u
git_dir=$1 bundle=$2
shift 2
g() { git -c gc.auto=0 -c maintenance.auto=0 -c core.hooksPath=/dev/null --git-dir "$git_dir" "$@"; }
if [ -n "$bundle" ]; then
    trap 'rm -f "$bundle"' EXIT
    g fetch -q --update-head-ok --no-write-fetch-head "$bundle" "$@" </dev/null || exit 2
fi
g update-ref --stdin || exit 3
"""


_STATUS_WORDS = {"M": "modified", "D": "deleted", "T": "type changed", "A": "added", "R": "renamed",
                 "C": "copied", "U": "unmerged"}


def _parse_status(out: str) -> tuple[str, dict[str, str]]:
    """(HEAD sha, {path: change}) from ``git status --porcelain=v2 --branch -z``.

    A change in the worktree wins over a staged one in the word (``deleted`` rather than
    ``modified`` for a file staged and then removed); the origin of a rename is listed as renamed.
    """
    head, entries = "", {}
    records = out.split("\0")
    i = 0
    while i < len(records):
        rec = records[i]
        i += 1
        if rec.startswith("# branch.oid "):
            head = rec.split()[2] if rec.split()[2] != "(initial)" else ""
            continue
        kind = rec[:1]
        fields = {"1": 8, "2": 9, "u": 10}.get(kind)
        if fields is None:
            continue
        parts = rec.split(" ", fields)
        if len(parts) <= fields:
            continue
        xy, path = parts[1], parts[fields]
        y, x = xy[1:2], xy[:1]
        entries[path] = _STATUS_WORDS.get(y if y != "." else x, "changed")
        if kind == "2" and i < len(records):
            entries[records[i]] = "renamed"           # the rename's origin: the next -z record
            i += 1
    return head, entries


def _parse_commits(out: str) -> list[CommitInfo]:
    commits = []
    for line in out.splitlines():
        if not line.strip():
            continue
        sha, subject, author, date, parents = (line.split("\x00") + [""] * 5)[:5]
        commits.append(CommitInfo(sha=sha, subject=subject, author=author, date=date,
                                  parents=tuple(parents.split())))
    return commits


def _local_git_toplevel(path: str) -> str | None:
    """The repository containing ``path`` when it is a git checkout (or bare repo), else None.

    A plain folder that happens to sit inside some other repository is still a plain folder:
    only a ``.git`` entry in the folder itself (or a bare repository) counts.
    """
    p = Path(path)
    if (p / ".git").exists():
        return str(p)
    if (p / "HEAD").is_file() and (p / "objects").is_dir() and (p / "refs").is_dir():
        return str(p)
    return None


def _local_staging_repo(folder: str) -> str:
    from .paths import default_cache_dir
    return str(default_cache_dir() / "staging" / repo_id(os.path.realpath(folder)))


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
                n = sum(1 for e in os.scandir(p) if e.is_dir(follow_symlinks=False))
                out["outputs"].append({"campaign": name, "path": p, "trials": n, "last_used": os.stat(p).st_mtime})
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


def _as_host(host: "Host | str | os.PathLike") -> Host:
    """A Host, or a local cache folder (what ``--cache`` names) as a LocalHost on it."""
    if isinstance(host, Host):
        return host
    from .hosts.local import LocalHost
    return LocalHost(cache_dir=host)


def cache_info(host: "Host | str | os.PathLike", *, sizes: bool = False) -> CacheInfo:
    """Every cached repository and tree, and the per-trial ``{out}`` folders by campaign, on
    ``host`` (for ``bisect-lab cache``), least recently used first. ``host`` may also be a local
    cache folder. ``sizes=True`` measures trees whose size is not recorded, and the ``{out}``
    folders (``du``)."""
    host = _as_host(host)
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
        trees = [t if t.size_bytes is not None else _replace_entry(t, size_bytes=du(t.path)) for t in trees]
        outputs = [_replace_entry(o, size_bytes=du(o.path)) for o in outputs]
    repos = tuple(RepoEntry(repo=r["repo"], path=r["path"], trees=r["trees"]) for r in data["repos"])
    return CacheInfo(root=host.cache_root(), repos=repos, trees=tuple(trees), outputs=tuple(outputs))


def _outputs_of(data: dict) -> list[OutEntry]:
    outs = [OutEntry(campaign=o["campaign"], path=o["path"], trials=o["trials"], last_used=o["last_used"],
                     size_bytes=None) for o in data.get("outputs", [])]
    return sorted(outs, key=lambda o: o.last_used)


def prune_outputs(host: "Host | str | os.PathLike", *, keep_campaigns: int | None = None, all: bool = False,
                  log: Callable[[str], None] | None = None) -> list[OutEntry]:
    """Remove the per-trial ``{out}`` folders of all but the ``keep_campaigns`` most recently used
    campaigns on ``host`` (``all=True``: every campaign's). Nothing bisect-lab reads after a trial
    lives there (results, fingerprints and reports are in the results database). Returns what was
    removed."""
    host = _as_host(host)
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


def _replace_entry(t: TreeEntry, **kw) -> TreeEntry:
    from dataclasses import replace
    return replace(t, **kw)


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
    host = _as_host(host)
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
        host.run(["rm", "-f", t.path + ".json", t.path + ".build.json", t.path + ".lock"], timeout_s=60)
        host.run(_git("worktree", "remove", "--force", "--force", t.path, git_dir=git_dir), timeout_s=600,
                 env=GIT_ENV)
        host.run(["rm", "-rf", t.path], timeout_s=600)
        host.run(_git("worktree", "prune", git_dir=git_dir), timeout_s=120, env=GIT_ENV)
    outputs = prune_outputs(host, keep_campaigns=keep_out_campaigns, all=all, log=log) \
        if all or keep_out_campaigns is not None else []
    return Pruned(victims, outputs)


# --------------------------------------------------------------------------- check
def check_patchset(host: Host, target: Target, patchset: PatchSet, *, ref: str | None = None,
                   manager: TreeManager | None = None) -> CheckReport:
    """Check a patch set against the target's base ref without creating any worktree.

    1. each patch applies to the base with what it requires (dependency order);
    2. the full set applies;
    3. every pair of patches that touch a common file applies together (patches touching disjoint
       files cannot conflict, so other pairs are skipped); a failing pair is listed as a conflict
       naming both patches, the one that failed and the file.
    Pairs involving a patch that fails alone are not checked (already reported).
    """
    tm = manager or TreeManager(host, target, patchset)
    ref = ref or target.ref or "HEAD"
    base = tm.resolve(ref)
    names = patchset.names
    alone: list[CheckFailure] = []
    bad: set[str] = set()

    def attempt(selection, kind, label) -> CheckFailure | None:
        try:
            tm.apply_check(selection, base)
            return None
        except PatchError as e:
            msg = str(e).split(": ", 1)[-1]
            return CheckFailure(kind=kind, patches=tuple(label), patch=e.patch or "?", file=e.file, message=msg)

    for n in names:
        f = attempt([n], "alone", [n])
        if f:
            alone.append(f)
            bad.add(n)
    full = attempt(list(names), "full-set", names) if names else None
    conflicts: list[CheckFailure] = []
    pairs = 0
    good = [n for n in names if n not in bad and not (closure(patchset, [n]) & bad)]
    files = {n: {f for m in closure(patchset, [n]) for f in patchset.get(m).files} for n in good}
    for i, a in enumerate(good):
        for b in good[i + 1:]:
            if b in closure(patchset, [a]) or a in closure(patchset, [b]):
                continue       # already applied together by the "alone" check
            if not files[a] & files[b]:
                continue
            pairs += 1
            f = attempt([a, b], "pair", [a, b])
            if f:
                conflicts.append(f)
    return CheckReport(ref=ref, base=base, patches=tuple(names), alone=tuple(alone), full_set=full,
                       conflicts=tuple(conflicts), pairs_checked=pairs)
