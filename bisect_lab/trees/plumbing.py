"""git as the tree package runs it: argv and environment, cache keys, parsers of git's output,
and :class:`HostGit`, the one place a manager's commands and marker files reach its host."""
from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from ..hosts.base import CommandResult, Host, HostCommandError
from ..redact import redact_text
from .records import CommitInfo

_KEY_VERSION = "bisect-lab-tree-v1"
# Overlay for every git call: English messages (we parse stderr), no prompts, no inherited
# repository selection from the caller's environment (a hook or a test could set these).
GIT_ENV: dict[str, str | None] = {
    "LC_ALL": "C", "LANGUAGE": None, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0",
    "GIT_DIR": None, "GIT_WORK_TREE": None, "GIT_INDEX_FILE": None, "GIT_OBJECT_DIRECTORY": None,
    "GIT_ALTERNATE_OBJECT_DIRECTORIES": None, "GIT_COMMON_DIR": None, "GIT_NAMESPACE": None,
}
# The synthetic commit of a prepared tree is deterministic (same tree + base -> same sha).
IDENTITY = {
    "GIT_AUTHOR_NAME": "bisect-lab", "GIT_AUTHOR_EMAIL": "bisect-lab@localhost",
    "GIT_COMMITTER_NAME": "bisect-lab", "GIT_COMMITTER_EMAIL": "bisect-lab@localhost",
    "GIT_AUTHOR_DATE": "@0 +0000", "GIT_COMMITTER_DATE": "@0 +0000",
}
# Refs mirrored from the source: branches keep their names (so "main~3" resolves), tags too, and
# the source's HEAD (a user's detached or feature-branch checkout) lands in refs/remotes/origin/HEAD.
REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
HEAD_REF = "refs/remotes/origin/HEAD"
SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


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



def git_argv(*args: str, git_dir: str | None = None) -> list[str]:
    """``git`` with automatic gc, maintenance and hooks off (``--git-dir`` when given)."""
    pre = ["git", "-c", "gc.auto=0", "-c", "maintenance.auto=0", "-c", "core.hooksPath=/dev/null"]
    if git_dir:
        pre += ["--git-dir", git_dir]
    return [*pre, *args]


def is_local_path(repo: str) -> bool:
    from ..config import is_url
    return not is_url(repo)


_STATUS_WORDS = {"M": "modified", "D": "deleted", "T": "type changed", "A": "added", "R": "renamed",
                 "C": "copied", "U": "unmerged"}


def parse_status(out: str) -> tuple[str, dict[str, str]]:
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


def parse_commits(out: str) -> list[CommitInfo]:
    commits = []
    for line in out.splitlines():
        if not line.strip():
            continue
        sha, subject, author, date, parents = (line.split("\x00") + [""] * 5)[:5]
        commits.append(CommitInfo(sha=sha, subject=subject, author=author, date=date,
                                  parents=tuple(parents.split())))
    return commits


def local_git_toplevel(path: str) -> str | None:
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


def local_staging_repo(folder: str) -> str:
    from ..paths import default_cache_dir
    return str(default_cache_dir() / "staging" / repo_id(os.path.realpath(folder)))


class HostGit:
    """Commands and small marker files of one manager on its host (mixed into TreeManager).

    Needs ``self.host``, ``self.git_dir`` and ``self.git_timeout_s``.
    """

    host: Host
    git_dir: str
    git_timeout_s: float

    def _run(self, argv: Sequence[str], *, what: str, cwd: str | None = None,
             env: Mapping[str, str | None] | None = None, timeout_s: float | None = None,
             check: bool = True, input: str | None = None) -> CommandResult:
        res = self.host.run(list(argv), timeout_s=timeout_s or self.git_timeout_s, cwd=cwd,
                            env={**GIT_ENV, **(env or {})}, input=input)
        if check and not res.ok:
            raise HostCommandError(what, res)
        return res

    def _g(self, *args: str, what: str, **kw) -> CommandResult:
        return self._run(git_argv(*args, git_dir=self.git_dir), what=what, **kw)

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
