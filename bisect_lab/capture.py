"""``bisect-lab patches capture``: a user's uncommitted changes (or a commit range) -> patch set.

The way out of "git stash removed the essential patches too": every change becomes an applyable
patch unit with a name, and the user's checkout is left exactly as it was.

How the checkout stays untouched: the working-tree state is snapshotted into a *temporary index*
(a copy of the user's index, so stat data is fresh and only changed files are re-hashed), with
``GIT_OBJECT_DIRECTORY`` pointing at a temporary object store and the repository's own objects as
an alternate: blobs of untracked files land in the temporary store, the user's ``.git/index``,
objects, refs, stash and config are never written. ``git diff --cached HEAD`` against that index
then yields staged + unstaged + untracked changes (ignored files excluded, the stash not included).

Local only (the user's checkout is on this machine). Read-only inspection (which repository
this is, its git folders, resolving ``HEAD`` and the refs of ``--range``) goes through GitPython
with its pure-Python object database: files are read, no process is started and nothing is
written. The snapshot and the diffs run the git CLI with timeouts, on the private index.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from .errors import UsageError
from .patchset import MANIFEST

__all__ = ["capture", "parse_split", "sanitize_name"]

_GIT_TIMEOUT_S = 600.0
_CLEAR = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
          "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE")


def sanitize_name(text: str) -> str:
    """A patch name of ``[a-z0-9-]``: lowercase, other characters become ``-``, runs collapsed."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return name or "patch"


def parse_split(split: Iterable[str]) -> tuple[bool, list[tuple[str, str]]]:
    """``["file", "GLOB=NAME", ...]`` -> (per_file, [(glob, name), ...]).

    ``file`` (or ``files``; the default) gives one patch per file for files no glob claims. A glob matches the
    repository-relative path with :func:`fnmatch.fnmatch` (``*`` also crosses ``/``); the first
    matching rule wins.
    """
    rules: list[tuple[str, str]] = []
    for item in split:
        if item in ("file", "files"):
            continue
        if "=" not in item:
            raise UsageError(f"--split {item!r}: expected 'file' or GLOB=NAME")
        glob, name = item.rsplit("=", 1)
        if not glob or not name:
            raise UsageError(f"--split {item!r}: expected GLOB=NAME with both parts")
        clean = sanitize_name(name)
        if clean != name:
            raise UsageError(f"--split {item!r}: patch name must be [a-z0-9-] (e.g. {clean!r})")
        rules.append((glob, name))
    return True, rules


class _Git:
    """git CLI on the user's repository, read-only, bytes in and out, always with a timeout."""

    def __init__(self, repo: Path, extra_env: dict[str, str] | None = None):
        self.repo = repo
        env = {k: v for k, v in os.environ.items() if k not in _CLEAR}
        # Literal pathspecs: a file named "a*.py" must select that file only, not a glob.
        env.update({"LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0",
                    "GIT_LITERAL_PATHSPECS": "1"})
        env.update(extra_env or {})
        self.env = env

    def __call__(self, *args: str, check: bool = True) -> bytes:
        try:
            p = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0", *args],
                               cwd=self.repo, env=self.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=_GIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UsageError(f"git {args[0]} in {self.repo} timed out after {_GIT_TIMEOUT_S:.0f} s") from None
        if check and p.returncode != 0:
            err = p.stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"git {' '.join(args[:2])} failed in {self.repo}: {err[-1] if err else p.returncode}")
        return p.stdout


def _names_for(files: Sequence[str], taken: set[str]) -> dict[str, str]:
    """Short unique names per file: the file stem, then parent folders added until unique."""
    out: dict[str, str] = {}
    depth = {f: 1 for f in files}

    def name_of(f: str, d: int) -> str:
        parts = f.split("/")
        stem = parts[-1].rsplit(".", 1)[0] if "." in parts[-1].lstrip(".") else parts[-1]
        return sanitize_name("-".join([*parts[-d:-1], stem]) if d > 1 else stem)

    pending = list(files)
    while pending:
        cands = {f: name_of(f, depth[f]) for f in pending}
        counts: dict[str, int] = {}
        for n in cands.values():
            counts[n] = counts.get(n, 0) + 1
        nxt = []
        for f, n in cands.items():
            maxd = len(f.split("/"))
            if (counts[n] > 1 or n in taken) and depth[f] < maxd:
                depth[f] += 1
                nxt.append(f)
            else:
                base, i = n, 2
                while n in taken:
                    n = f"{base}-{i}"
                    i += 1
                out[f] = n
                taken.add(n)
        pending = nxt
    return out


def _toml(s: str) -> str:
    return json.dumps(s)     # JSON string escapes are valid TOML basic-string escapes


def capture(repo_path: str | os.PathLike, out_dir: str | os.PathLike, *, split: Iterable[str] = (),
            range: str | None = None, force: bool = False) -> Path:
    """Write the uncommitted changes of ``repo_path`` (staged + unstaged + untracked, not ignored
    files, not the stash) — or the changes of ``range`` ``A..B`` — as patch files plus a
    ``patchset.toml`` into ``out_dir``; return ``out_dir``.

    Uncommitted changes: one patch per file by default; ``split=["GLOB=NAME", ...]`` groups
    matching files into patch ``NAME`` (first matching glob wins; others stay one per file). A
    range: one patch per commit (merges left out), as ``git format-patch A..B`` gives, each named
    after its commit's subject and requiring the earlier ones that touch the same files; with
    ``split`` (``["files"]`` or globs) the range's whole diff is split by file instead. Patches
    apply to ``HEAD`` (or to ``A`` for a range); the manifest's ``[capture]`` table records that base commit. The checkout is
    never modified. ``force`` allows writing into a folder that already holds a manifest.
    """
    repo = Path(repo_path).resolve()
    out = Path(out_dir).resolve()
    if not repo.is_dir():
        raise UsageError(f"--repo {repo}: no such folder")
    g = _Git(repo)
    user_repo = _open_repo(repo)
    try:
        return _capture(repo, out, user_repo, g, split, range, force)
    finally:
        user_repo.close()          # ends GitPython's cat-file processes


def _capture(repo: Path, out: Path, user_repo, g: _Git, split: Iterable[str], range: str | None,
             force: bool) -> Path:
    top = Path(user_repo.working_tree_dir).resolve()
    _, rules = parse_split(split)
    if (out / MANIFEST).exists() and not force:
        raise UsageError(f"--out {out} already holds a {MANIFEST}; choose an empty folder")
    if out == top or out.is_relative_to(top):
        raise UsageError(f"--out {out} is inside the checkout {top}; choose a folder outside it "
                         "(the checkout must stay untouched)")

    with tempfile.TemporaryDirectory(prefix="bisect-lab-capture-") as tmp:
        if range is not None:
            if ".." not in range or "..." in range:
                raise UsageError(f"--range {range!r}: expected A..B")
            a, b = range.split("..", 1)
            base = _resolve(g, user_repo, a or "HEAD", "--range")
            tip = _resolve(g, user_repo, b or "HEAD", "--range")
            if not list(split):
                return _capture_commits(repo, out, g, base, tip, range)
            diff_args = [base, tip]
            gd = g
            origin = f"commit range {range} ({base[:12]}..{tip[:12]})"
        else:
            base = _resolve(g, user_repo, "HEAD", "--repo", hint="a checkout with at least one commit")
            gd = _snapshot_worktree(user_repo, top, Path(tmp))
            diff_args = ["--cached", base]
            origin = f"uncommitted changes on top of {base[:12]}"
        files = [f for f in gd("diff", "--name-only", "-z", "--no-renames", *diff_args).decode(
            errors="surrogateescape").split("\0") if f]
        if not files:
            what = f"range {range}" if range else "uncommitted changes (staged, unstaged or untracked)"
            raise UsageError(f"nothing to capture in {repo}: no {what}")
        groups: dict[str, list[str]] = {}
        loose: list[str] = []
        for f in files:
            for glob, name in rules:
                if fnmatch.fnmatchcase(f, glob):
                    groups.setdefault(name, []).append(f)
                    break
            else:
                loose.append(f)
        taken = set(groups)
        for f, name in _names_for(loose, taken).items():
            groups[name] = [f]
        out.mkdir(parents=True, exist_ok=True)
        lines = ["# Captured by bisect-lab patches capture; edit names, aliases and descriptions freely.",
                 f"# Patches apply to {base} ({origin}).", ""]
        order = sorted(groups, key=lambda n: files.index(groups[n][0]))
        for name in order:
            paths = groups[name]
            diff = gd("diff", "--binary", "--full-index", "--no-renames", "--no-color", "--no-ext-diff",
                      *diff_args, "--", *paths)
            (out / f"{name}.patch").write_bytes(diff)
            desc = f"{origin}: {', '.join(paths[:5])}" + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
            lines += ["[[patch]]", f"name = {_toml(name)}", f"file = {_toml(name + '.patch')}",
                      f"description = {_toml(desc)}", "required = false", "requires = []", ""]
        lines += ["[capture]", f"repo = {_toml(str(repo))}", f"base = {_toml(base)}",
                  f"range = {_toml(range) if range else _toml('')}", ""]
        (out / MANIFEST).write_text("\n".join(lines))
    return out


def _patch_name(subject: str, taken: set[str]) -> str:
    """A patch name from a commit subject, as format-patch names its files: at most 40 characters,
    cut at a word, unique (``-2``, ``-3`` ... when two subjects read the same)."""
    name = sanitize_name(subject)
    if len(name) > 40:
        name = name[:41].rsplit("-", 1)[0] or name[:40]
    base, i = name, 2
    while name in taken:
        name = f"{base}-{i}"
        i += 1
    taken.add(name)
    return name


def _capture_commits(repo: Path, out: Path, g: _Git, base: str, tip: str, range: str) -> Path:
    """One patch per commit of ``base..tip`` (merges left out), oldest first, as format-patch."""
    shas = g("rev-list", "--reverse", "--no-merges", f"{base}..{tip}").decode().split()
    if not shas:
        raise UsageError(f"nothing to capture in {repo}: range {range} holds no commits (merges are left out)")
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Captured by bisect-lab patches capture; edit names, aliases and descriptions freely.",
             f"# One patch per commit of {range} ({base[:12]}..{tip[:12]}); they apply to {base} in this order.", ""]
    taken: set[str] = set()
    touched: list[tuple[str, set[str]]] = []        # (patch name, files) of the commits so far
    for k, sha in enumerate(shas, 1):
        subject = g("log", "-1", "--format=%s", sha).decode(errors="replace").strip()
        header = g("log", "-1", f"--format=From %H Mon Sep 17 00:00:00 2001%nFrom: %an <%ae>%nDate: %aD%n"
                               f"Subject: [PATCH {k}/{len(shas)}] %s%n", sha)
        diff = g("diff", "--binary", "--full-index", "--no-renames", "--no-color", "--no-ext-diff", f"{sha}^", sha)
        files = {f for f in g("diff", "--name-only", "-z", "--no-renames", f"{sha}^", sha).decode(
            errors="surrogateescape").split("\0") if f}
        if not diff.strip():
            continue                              # an empty commit: format-patch skips it too
        name = _patch_name(subject, taken)
        (out / f"{name}.patch").write_bytes(header + b"---\n" + diff)
        # a commit touching a file an earlier one touched may not apply without it
        requires = [n for n, fs in touched if fs & files]
        touched.append((name, files))
        lines += ["[[patch]]", f"name = {_toml(name)}", f"file = {_toml(name + '.patch')}",
                  f"description = {_toml(f'commit {sha[:12]}: {subject}')}", "required = false",
                  f"requires = [{', '.join(_toml(n) for n in requires)}]", ""]
    lines += ["[capture]", f"repo = {_toml(str(repo))}", f"base = {_toml(base)}", f"range = {_toml(range)}", ""]
    (out / MANIFEST).write_text("\n".join(lines))
    return out


def _open_repo(path: Path) -> "git.Repo":
    """The user's checkout containing ``path``, opened for reading with GitPython (refs and
    config are read as files; objects through ``git cat-file``). UsageError when it is not one.

    GitPython never touches the index here, and its git processes get the repository's own
    folders explicitly, so a ``GIT_DIR`` or ``GIT_INDEX_FILE`` in the caller's environment (a
    hook, a test) can neither redirect nor write anything; no optional locks either."""
    import git
    try:
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UsageError(f"--repo {path} is not a git checkout") from None
    if repo.bare or not repo.working_tree_dir:
        repo.close()
        raise UsageError(f"--repo {path} is not a git checkout")
    common = os.path.abspath(repo.common_dir)
    repo.git.update_environment(
        GIT_DIR=os.path.abspath(repo.git_dir), GIT_WORK_TREE=os.path.abspath(repo.working_tree_dir),
        GIT_COMMON_DIR=common, GIT_OBJECT_DIRECTORY=os.path.join(common, "objects"),
        GIT_ALTERNATE_OBJECT_DIRECTORIES="", GIT_INDEX_FILE=os.path.join(os.path.abspath(repo.git_dir), "index"),
        GIT_NAMESPACE="", GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return repo


# A ref GitPython resolves exactly as git does: a full sha, or a name (not hex-like: git prefers a
# ref over an abbreviated sha, GitPython the other way) with ~N / ^N steps.
_SIMPLE_REF = re.compile(r"^(?:[0-9a-f]{40}|(?![0-9a-fA-F]{4,39}(?:[~^]|$))[A-Za-z0-9._/-]+)(?:[~^][0-9]*)*$")


def _resolve(g: _Git, repo: "git.Repo", ref: str, flag: str, hint: str = "a commit") -> str:
    if ref.startswith("-"):
        raise UsageError(f"{flag}: {ref!r} is not a ref")
    raw = ""
    if _SIMPLE_REF.match(ref) and ".." not in ref and not ref.endswith((".lock", "/")):
        try:
            obj = repo.rev_parse(ref)
            while obj.type == "tag":
                obj = obj.object
            raw = obj.hexsha if obj.type == "commit" else ""
        except Exception:  # noqa: BLE001 - anything GitPython cannot answer, git itself decides
            raw = ""
    if not raw:
        # Everything else (reflog syntax, :/text, abbreviated shas, a name GitPython missed): git.
        raw = g("rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False).decode().strip()
    if not raw:
        raise UsageError(f"{flag}: unknown ref {ref!r} in {g.repo} (expected {hint})")
    return raw


def _snapshot_worktree(repo: "git.Repo", top: Path, tmp: Path) -> _Git:
    """A git runner whose index is a private copy holding the working tree's state."""
    gitdir = Path(repo.git_dir).resolve()
    common = Path(repo.common_dir).resolve()
    objects = tmp / "objects"
    objects.mkdir()
    index = tmp / "index"
    if (gitdir / "index").is_file():
        shutil.copyfile(gitdir / "index", index)      # read-only use of the user's index
    env = {"GIT_INDEX_FILE": str(index), "GIT_OBJECT_DIRECTORY": str(objects),
           "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common / "objects")}
    gt = _Git(top, env)
    if not index.exists():
        gt("read-tree", "HEAD")
    try:
        gt("add", "-A", "--", ".")
    except UsageError:
        # A split index or an exotic extension the copy cannot use: rebuild from HEAD instead.
        index.unlink(missing_ok=True)
        gt("read-tree", "HEAD")
        gt("add", "-A", "--", ".")
    return gt
