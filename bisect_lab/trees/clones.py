"""The clone cache of one target repository on a host: creating it, fetching into it, shipping a
local repository to a remote host as a bundle, and importing a plain folder.

The user's checkout is only ever read here: ``git fetch`` from it (upload-pack reads),
``git bundle create`` of it, or hashing a plain folder with ``--work-tree`` and a private index
into a separate repository.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import tempfile
import uuid
from pathlib import Path
from typing import Callable

from ..errors import HostError, UsageError
from ..hosts.base import CommandResult, Host, HostCommandError
from ..model import Target
from ..redact import redact_text
from .plumbing import (GIT_ENV, HEAD_REF, IDENTITY, REFSPECS, SHA_RE, HostGit, git_argv, is_local_path,
                       local_git_toplevel, local_staging_repo)


class CloneCache(HostGit):
    """The clone-cache half of :class:`~bisect_lab.trees.TreeManager` (mixed into it).

    Needs ``target``, ``root``, ``git_dir``, ``log``, ``fetch_timeout_s`` and the ``_ready``,
    ``_fetched`` and ``_resolved`` state that the manager sets up.
    """

    target: Target
    root: str
    log: Callable[[str], None]
    fetch_timeout_s: float
    _ready: bool
    _fetched: bool
    _resolved: dict[str, str]

    def _ensure_repo(self) -> None:
        """Create the bare cache repository (once) and fetch into it."""
        if self._ready:
            return
        if not self.host.exists(posixpath.join(self.git_dir, "HEAD")):
            self.log(f"creating clone cache for {redact_text(self.target.repo)} in {self.git_dir}")
            tmp = f"{self.git_dir}.tmp-{uuid.uuid4().hex[:8]}"
            self._run(git_argv("init", "-q", "--bare", tmp), what="git init")
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
        if not is_local_path(repo):
            self._fetch_from(repo, ref)
            return
        if not os.path.isdir(repo):
            raise UsageError(f"target repository {repo} does not exist")
        if local_git_toplevel(repo) is None:
            if self.host.is_local:
                self._import_folder(repo, self.git_dir, self.host)
            else:
                # Imported on this machine into a staging repository, then shipped like a checkout.
                from ..hosts.local import LocalHost
                staging = local_staging_repo(repo)
                self._import_folder(repo, staging, LocalHost())
                self._ship_bundle(staging, ref)
            return
        if self.host.is_local:
            self._fetch_from(repo, ref)
        else:
            self._ship_bundle(repo, ref)

    def _fetch_from(self, source: str, ref: str | None, *, what: str | None = None) -> None:
        self.log(f"fetching {redact_text(source)}")
        what = what or f"git fetch {redact_text(source)}"      # error messages name the source too
        specs = [*REFSPECS, f"+HEAD:{HEAD_REF}"]
        res = self._g("fetch", "-q", "--update-head-ok", "--no-write-fetch-head", source, *specs,
                      what=what, timeout_s=self.fetch_timeout_s, check=False)
        if not res.ok and "HEAD" in res.stderr:
            # A source without a valid HEAD (empty or unborn branch): fetch branches and tags only.
            res = self._g("fetch", "-q", "--update-head-ok", "--no-write-fetch-head", source, *REFSPECS,
                          what=what, timeout_s=self.fetch_timeout_s, check=False)
        if not res.ok:
            raise HostCommandError(what, res)
        if ref and SHA_RE.match(ref):
            # A commit not reachable from any branch (servers allowing it): best effort.
            self._g("fetch", "-q", "--no-write-fetch-head", source, ref, what="git fetch sha",
                    timeout_s=self.fetch_timeout_s, check=False)

    def _ship_bundle(self, local_repo: str, ref: str | None) -> None:
        """Send a local repository to a remote host as a bundle and fetch from it there.

        Incremental: the commits shipped last time (recorded on the host in ``shipped.json``) are
        excluded from the bundle, and the refs are then set explicitly on the host (so a branch or
        HEAD that moved *backwards* is followed too). Any failure of that path falls back to a full
        bundle. Nothing is sent when the source's refs did not change. The local repository is read
        through a :class:`~bisect_lab.hosts.local.LocalHost`, like every other command here.
        """
        from ..hosts.local import LocalHost
        local = LocalHost()

        def local_git(*args: str, input: str | None = None) -> CommandResult:
            return local.run(git_argv("-C", local_repo, *args), timeout_s=self.fetch_timeout_s, env=GIT_ENV,
                             input=input)

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
        have = [t for t in shipped.get("tips", []) if SHA_RE.match(t)]
        if have:             # only exclusions the local repository knows (it may have been gc'ed)
            probe = local_git("cat-file", "--batch-check", input="".join(t + "\n" for t in have)).stdout
            have = [w[0] for w in (l.split() for l in probe.splitlines()) if len(w) == 3 and w[1] == "commit"]
        updates = "".join(f"update {HEAD_REF if n == 'HEAD' else n} {sha}\n" for n, sha in sorted(refs.items()))
        for incremental in ((True, False) if have else (False,)):
            self.log(f"bundling {local_repo} for {self.host.name}" + (" (incremental)" if incremental else ""))
            with tempfile.TemporaryDirectory() as tmp:
                bundle = os.path.join(tmp, "repo.bundle")
                args = ["bundle", "create", "-q", bundle, "HEAD", "--branches", "--tags"]
                if incremental:
                    args += ["--not", *have]
                p = local_git(*args)
                if not p.ok and not (incremental and "empty bundle" in p.stderr):
                    raise HostError(f"git bundle of {local_repo} failed: "
                                    f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
                data = Path(bundle).read_bytes() if p.ok else None
            remote = posixpath.join(self.root, "incoming.bundle")
            if data is not None:
                self.host.write_bytes(remote, data, timeout_s=max(60.0, len(data) / 1e6))
            res = self._run(["bash", "-c", _SHIP_SCRIPT, "bisect-lab-ship", self.git_dir,
                             remote if data is not None else "", *REFSPECS],
                            what=f"git fetch (bundle of {local_repo})", check=False,
                            timeout_s=self.fetch_timeout_s, input=updates)
            if res.ok:
                break
            if not incremental:
                raise HostCommandError(f"git fetch (bundle of {local_repo})", res)
        tips = sorted(set(refs.values()))
        self._write_json(marker, {"digest": digest, "tips": tips})

    def _import_folder(self, folder: str, git_dir: str, host: Host) -> str:
        """Import a plain folder (on this machine) into the bare repository ``git_dir`` on ``host``
        as one parentless commit, and point ``main``, ``HEAD`` and the source-HEAD ref at it.

        ``host`` is the manager's own host when it is this machine (``git_dir``: the clone cache),
        else a LocalHost and a staging repository that is then bundled. The commit has a fixed
        identity, date and message: its id is a function of the content only. The import index is
        kept between imports (``import.index`` in the git dir): its stat cache means a re-import
        only re-hashes files that changed.
        """
        def run(argv: list[str], what: str, env: dict | None = None, cwd: str | None = None,
                input: str | None = None) -> CommandResult:
            res = host.run(argv, timeout_s=self.git_timeout_s, cwd=cwd, env={**GIT_ENV, **(env or {})}, input=input)
            if not res.ok:
                raise HostCommandError(what, res)
            return res

        if not host.exists(posixpath.join(git_dir, "HEAD")):
            run(git_argv("init", "-q", "--bare", git_dir), "git init")
        env = {"GIT_INDEX_FILE": posixpath.join(git_dir, "import.index"), **IDENTITY}
        run(git_argv("--work-tree", folder, "add", "-A", "--", ".", git_dir=git_dir), f"import of folder {folder}",
            env=env, cwd=folder)
        tree = run(git_argv("write-tree", git_dir=git_dir), "git write-tree", env=env).stdout.strip()
        sha = run(git_argv("commit-tree", tree, "-m", "bisect-lab import of a plain folder", git_dir=git_dir),
                  "git commit-tree", env=IDENTITY).stdout.strip()
        run(git_argv("update-ref", "--stdin", git_dir=git_dir), "git update-ref",
            input="".join(f"update {ref} {sha}\n" for ref in ("refs/heads/main", HEAD_REF)))
        run(git_argv("symbolic-ref", "HEAD", "refs/heads/main", git_dir=git_dir), "git symbolic-ref")
        return sha


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
