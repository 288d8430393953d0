"""Build real git repositories in temporary folders, for tests and benchmarks.

Everything here runs the real ``git`` CLI (no mocks) with a fixed identity and
fixed dates, so commit ids are reproducible within a git version. Typical use::

    from gitrepos import GitRepo, PatchSpec, linear_repo, snapshot, write_patchset   # tests/ is on sys.path under pytest

    repo = linear_repo(tmp_path / "src", n_commits=3)          # GitRepo
    p = repo.patch({"pkg/mod.py": "x = 2\\n"})                  # unified diff text vs HEAD
    ps_dir = write_patchset(tmp_path / "ps", [PatchSpec("fix-x", p)])
    snap = snapshot(repo.path)   # ...run code that must not touch the repo...
    assert snapshot(repo.path) == snap

The helpers:

- :class:`GitRepo` — a checkout: ``write``, ``commit``, ``branch``, ``switch``, ``merge``, ``stash``,
  ``patch`` (make a patch from edits without touching the checkout), ``git`` (run anything).
- :func:`linear_repo`, :func:`merge_repo`, :func:`dirty_checkout_with_stash`, :func:`plain_folder`,
  :func:`fast_import_repo` (thousands of files and commits in seconds).
- :class:`PatchSpec` + :func:`write_patchset` — patch files plus a ``patchset.toml``.
- :func:`snapshot` — a byte-for-byte picture of a checkout (working tree and all of ``.git``).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

__all__ = ["GIT_ENV", "GitRepo", "PatchSpec", "dirty_checkout_with_stash", "fast_import_repo",
           "git", "linear_repo", "merge_repo", "plain_folder", "snapshot", "write_files",
           "write_patchset"]

#: Environment for every git call made here: fixed identity and dates, no user/system config.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer", "GIT_COMMITTER_EMAIL": "committer@example.com",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
}
_CLEAR = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
          "GIT_ALTERNATE_OBJECT_DIRECTORIES")

Content = "str | bytes | None"    # None deletes the file


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAR}
    env.update(GIT_ENV)
    env.update(extra or {})
    return env


def git(cwd: str | os.PathLike, *args: str, env: Mapping[str, str] | None = None,
        input: bytes | str | None = None, check: bool = True, binary: bool = False):
    """Run ``git ARGS`` in ``cwd``; return stdout (str, stripped of the final newline; bytes if ``binary``).

    Raises ``subprocess.CalledProcessError`` (with stderr in the message) when ``check`` and git fails.
    """
    if isinstance(input, str):
        input = input.encode()
    p = subprocess.run(["git", *args], cwd=cwd, env=_env(env), input=input,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if check and p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, ["git", *args], p.stdout,
                                            p.stderr.decode(errors="replace"))
    if binary:
        return p.stdout
    out = p.stdout.decode(errors="replace")
    return out[:-1] if out.endswith("\n") else out


def write_files(root: str | os.PathLike, files: Mapping[str, "str | bytes | None"]) -> None:
    """Write ``{relative path: content}`` under ``root`` (None deletes; folders are created)."""
    root = Path(root)
    for rel, content in files.items():
        p = root / rel
        if content is None:
            if p.exists():
                p.unlink()
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        p.write_bytes(content)


@dataclass
class GitRepo:
    """A real git checkout at ``path`` (non-bare), driven through the git CLI."""

    path: Path

    @classmethod
    def init(cls, path: str | os.PathLike, branch: str = "main") -> "GitRepo":
        """Create an empty repository whose first branch is ``branch``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "-q", "-b", branch)
        return cls(path)

    def git(self, *args: str, **kw):
        """Run git in this checkout (see :func:`git`)."""
        return git(self.path, *args, **kw)

    def write(self, files: Mapping[str, "str | bytes | None"]) -> None:
        """Change the working tree only (nothing staged)."""
        write_files(self.path, files)

    def commit(self, message: str, files: Mapping[str, "str | bytes | None"] | None = None, *,
               date: str | None = None) -> str:
        """Write ``files`` (if any), stage everything, commit; return the new full sha."""
        if files:
            self.write(files)
        self.git("add", "-A")
        env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else None
        self.git("commit", "-q", "--allow-empty", "-m", message, env=env)
        return self.head()

    def head(self, ref: str = "HEAD") -> str:
        """Full sha of ``ref``."""
        return self.git("rev-parse", "--verify", f"{ref}^{{commit}}")

    def branch(self, name: str, start: str = "HEAD") -> None:
        self.git("branch", name, start)

    def switch(self, name: str) -> None:
        self.git("checkout", "-q", name)

    def merge(self, branch: str, message: str | None = None) -> str:
        """A true merge commit (``--no-ff``) of ``branch`` into the current branch; returns its sha."""
        self.git("merge", "-q", "--no-ff", "-m", message or f"Merge {branch}", branch)
        return self.head()

    def stash(self, files: Mapping[str, "str | bytes | None"], message: str = "wip") -> None:
        """Make a change and stash it (so the stash list is not empty)."""
        self.write(files)
        self.git("stash", "push", "-q", "-u", "-m", message)

    def read(self, rel: str, ref: str = "HEAD") -> bytes:
        """Content of ``rel`` at ``ref``."""
        return self.git("show", f"{ref}:{rel}", binary=True)

    def patch(self, edits: Mapping[str, "str | bytes | None"], base: str = "HEAD") -> str:
        """A ``git diff --binary`` that turns ``base`` into ``base`` + ``edits`` (None deletes).

        The checkout is not touched: the diff is built in a temporary index (objects go into this
        repository's object store, which is fine for test repositories).
        """
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self.git("read-tree", base, env=env)
            for rel, content in edits.items():
                if content is None:
                    self.git("update-index", "--force-remove", "--", rel, env=env)
                    continue
                data = content.encode() if isinstance(content, str) else content
                blob = self.git("hash-object", "-w", "--stdin", input=data)
                self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}", env=env)
            return self.git("diff", "--cached", "--binary", "--full-index", "--no-renames", base,
                            env=env, binary=True).decode()

    def ls_files(self, ref: str = "HEAD") -> list[str]:
        return self.git("ls-tree", "-r", "--name-only", ref).splitlines()


def linear_repo(path: str | os.PathLike, n_commits: int = 3,
                files: Mapping[str, str] | None = None) -> GitRepo:
    """A repository with ``n_commits`` commits on ``main``.

    The first commit holds ``files`` (default: a small Python package ``pkg/`` with
    ``__init__.py``, ``a.py``, ``b.py`` and a ``README``); each later commit i appends a line to
    ``log.txt`` only, so patches to the package apply on every commit.
    """
    repo = GitRepo.init(path)
    base = dict(files) if files is not None else {
        "README": "demo repository\n",
        "pkg/__init__.py": "",
        "pkg/a.py": "".join(f"A{i} = {i}\n" for i in range(20)),
        "pkg/b.py": "".join(f"B{i} = {i}\n" for i in range(20)),
    }
    repo.commit("initial", base, date="2024-01-01T00:00:00+0000")
    for i in range(1, n_commits):
        log = (repo.path / "log.txt").read_text() if (repo.path / "log.txt").exists() else ""
        repo.commit(f"commit {i}", {"log.txt": log + f"line {i}\n"},
                    date=f"2024-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}+0000")
    return repo


def merge_repo(path: str | os.PathLike) -> tuple[GitRepo, dict[str, str]]:
    """A history with a merged side branch::

        G -- M1 -- M2 -------- MERGE -- M3
          \\                   /
           S1 -- S2 -- S3 ----

    Returns the repo and ``{"G", "M1", "M2", "S1", "S2", "S3", "MERGE", "M3": sha}``. Every commit
    touches its own file ``<label>.txt``, so any commit can be a planted "culprit" by content.
    """
    repo = GitRepo.init(path)
    c: dict[str, str] = {}
    c["G"] = repo.commit("G", {"G.txt": "G\n", "pkg/__init__.py": ""}, date="2024-01-01T00:00:00+0000")
    repo.branch("side")
    c["M1"] = repo.commit("M1", {"M1.txt": "M1\n"}, date="2024-01-01T01:00:00+0000")
    repo.switch("side")
    c["S1"] = repo.commit("S1", {"S1.txt": "S1\n"}, date="2024-01-01T00:10:00+0000")
    c["S2"] = repo.commit("S2", {"S2.txt": "S2\n"}, date="2024-01-01T00:20:00+0000")
    c["S3"] = repo.commit("S3", {"S3.txt": "S3\n"}, date="2024-01-01T00:30:00+0000")
    repo.switch("main")
    c["M2"] = repo.commit("M2", {"M2.txt": "M2\n"}, date="2024-01-01T02:00:00+0000")
    c["MERGE"] = repo.merge("side", "MERGE side")
    c["M3"] = repo.commit("M3", {"M3.txt": "M3\n"}, date="2024-01-01T04:00:00+0000")
    return repo, c


def dirty_checkout_with_stash(path: str | os.PathLike) -> GitRepo:
    """A user's checkout in the state of the story: committed history, a stash entry, a staged
    change, an unstaged change, an untracked file and an ignored file.

    Layout of uncommitted changes relative to HEAD:

    - ``pkg/a.py`` staged edit (``A0 = 100``), ``pkg/b.py`` unstaged edit (``B0 = 200``),
    - ``pkg/moe/topk.py`` staged, then edited again unstaged (both edits must be captured),
    - ``pkg/new_feature.py`` untracked, ``build/out.bin`` ignored (must not be captured),
    - ``docs/old.md`` deleted in the working tree (unstaged).
    """
    repo = linear_repo(path, n_commits=2, files={
        "README": "demo repository\n",
        ".gitignore": "build/\n",
        "pkg/__init__.py": "",
        "pkg/a.py": "".join(f"A{i} = {i}\n" for i in range(20)),
        "pkg/b.py": "".join(f"B{i} = {i}\n" for i in range(20)),
        "pkg/moe/__init__.py": "",
        "pkg/moe/topk.py": "def topk(x):\n    return x\n",
        "docs/old.md": "old docs\n",
    })
    repo.stash({"pkg/a.py": "STASHED = True\n"}, message="stashed experiment")
    repo.write({"pkg/a.py": (repo.path / "pkg/a.py").read_text().replace("A0 = 0", "A0 = 100")})
    repo.write({"pkg/moe/topk.py": "def topk(x):\n    return sorted(x)\n"})
    repo.git("add", "pkg/a.py", "pkg/moe/topk.py")
    repo.write({"pkg/moe/topk.py": "def topk(x, k=1):\n    return sorted(x)[:k]\n"})
    repo.write({"pkg/b.py": (repo.path / "pkg/b.py").read_text().replace("B0 = 0", "B0 = 200")})
    repo.write({"pkg/new_feature.py": "FEATURE = 1\n", "build/out.bin": b"\x00\x01ignored"})
    (repo.path / "docs/old.md").unlink()
    return repo


def plain_folder(path: str | os.PathLike, files: Mapping[str, "str | bytes"] | None = None) -> Path:
    """A folder that is not a git repository (the ``repo = "/some/folder"`` case)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    write_files(path, files if files is not None else {
        "pkg/__init__.py": "", "pkg/a.py": "A = 1\n", "README": "plain folder\n"})
    return path


def fast_import_repo(path: str | os.PathLike, n_files: int = 3000, n_commits: int = 3000, *,
                     touched_per_commit: int = 2, frozen: Iterable[str] = (),
                     seed: int = 0) -> GitRepo:
    """A large repository generated with ``git fast-import`` (3,000 files x 3,000 commits: a few seconds).

    The first commit creates ``n_files`` files ``src/dNN/fNNNN.py`` of ~40 lines each; each of the
    following ``n_commits - 1`` commits rewrites one line in ``touched_per_commit`` files, never in
    the ``frozen`` paths (keep patch targets there so patches apply on every commit). The checkout
    is populated (``git reset --hard``) so the folder looks like a user's repository.
    """
    import random
    rnd = random.Random(seed)
    repo = GitRepo.init(path)
    names = [f"src/d{i // 100:02d}/f{i:04d}.py" for i in range(n_files)]
    frozen = set(frozen)
    mutable = [n for n in names if n not in frozen]
    contents = {n: [f"# {n}\n"] + [f"V{j} = {j}\n" for j in range(40)] for n in names}
    out: list[bytes] = []

    def data(b: bytes) -> None:
        out.append(b"data %d\n" % len(b))
        out.append(b)
        out.append(b"\n")

    t0 = 1_700_000_000
    for c in range(n_commits):
        out.append(b"commit refs/heads/main\n")
        out.append(b"mark :%d\n" % (c + 1))
        out.append(b"author Gen <gen@example.com> %d +0000\n" % (t0 + c))
        out.append(b"committer Gen <gen@example.com> %d +0000\n" % (t0 + c))
        data(b"commit %d" % c)
        if c:
            out.append(b"from :%d\n" % c)
        touched = names if c == 0 else rnd.sample(mutable, touched_per_commit)
        for n in touched:
            if c:
                lines = contents[n]
                lines[1 + rnd.randrange(40)] = f"V_{c} = {c}\n"
            out.append(b"M 100644 inline %s\n" % n.encode())
            data("".join(contents[n]).encode())
    out.append(b"done\n")
    git(repo.path, "fast-import", "--quiet", "--done", input=b"".join(out))
    git(repo.path, "reset", "-q", "--hard", "main")
    return repo


@dataclass(frozen=True)
class PatchSpec:
    """One patch of a patch set to write: name, diff text and manifest fields."""

    name: str
    diff: str
    aliases: tuple[str, ...] = ()
    required: bool = False
    requires: tuple[str, ...] = ()
    description: str = ""
    file: str | None = None          # default: "<name>.patch"


def _toml_str(s: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes for the characters we emit.
    import json
    return json.dumps(s)


def write_patchset(folder: str | os.PathLike, patches: Iterable[PatchSpec]) -> Path:
    """Write patch files and ``patchset.toml`` into ``folder``; return the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for p in patches:
        fname = p.file or f"{p.name}.patch"
        (folder / fname).write_bytes(p.diff.encode())
        lines += ["[[patch]]", f"name = {_toml_str(p.name)}", f"file = {_toml_str(fname)}",
                  f"aliases = [{', '.join(map(_toml_str, p.aliases))}]",
                  f"required = {'true' if p.required else 'false'}",
                  f"requires = [{', '.join(map(_toml_str, p.requires))}]",
                  f"description = {_toml_str(p.description)}", ""]
    (folder / "patchset.toml").write_text("\n".join(lines))
    return folder


def snapshot(path: str | os.PathLike) -> dict[str, object]:
    """Byte-for-byte picture of a checkout: every file under ``path`` (``.git`` included: index,
    refs, packed-refs, logs, stash, config, HEAD, objects) as ``{relative path: sha256}``, plus file
    modes and the stash list. Compare two snapshots with ``==``.
    """
    path = Path(path)
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            rel = str(p.relative_to(path))
            if p.is_symlink():
                files[rel] = "link:" + os.readlink(p)
            else:
                files[rel] = f"{oct(p.stat().st_mode)}:" + hashlib.sha256(p.read_bytes()).hexdigest()
    stash = git(path, "stash", "list", check=False) if (path / ".git").exists() else None
    return {"files": files, "stash": stash}
