"""``patches capture``: uncommitted changes or a commit range -> patch set, checkout untouched."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bisect_lab.capture import capture, parse_split, sanitize_name
from bisect_lab.errors import UsageError
from bisect_lab.hosts.local import LocalHost
from bisect_lab.model import Target
from bisect_lab.patchset import load_patchset
from bisect_lab.trees import TreeManager, check_patchset
from gitrepos import dirty_checkout_with_stash, git, linear_repo, snapshot


@pytest.fixture
def user(tmp_path):
    return dirty_checkout_with_stash(tmp_path / "user")


def tree_files(path) -> dict[str, bytes]:
    root = Path(path)
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(root).parts}


def expected_worktree(user) -> dict[str, bytes]:
    """What the user's checkout holds, minus ignored files: what base + all patches must give."""
    files = tree_files(user.path)
    return {k: v for k, v in files.items() if not k.startswith("build/")}


def test_capture_per_file_round_trips_and_leaves_checkout_untouched(user, tmp_path):
    before = snapshot(user.path)
    out = capture(user.path, tmp_path / "ps")
    assert snapshot(user.path) == before
    ps = load_patchset(out)
    by_name = {p.name: p.files for p in ps.patches}
    assert by_name == {"a": ("pkg/a.py",), "b": ("pkg/b.py",), "topk": ("pkg/moe/topk.py",),
                       "new-feature": ("pkg/new_feature.py",), "old": ("docs/old.md",)}
    # Staged and unstaged edits of one file are both in its patch; the stash is not captured.
    topk = ps.get("topk").path.read_text()
    assert "sorted(x)[:k]" in topk and "STASHED" not in "".join(p.path.read_text() for p in ps.patches)
    # Every patch applies to HEAD alone; all together rebuild the user's working tree exactly.
    host = LocalHost(cache_dir=tmp_path / "cache")
    tm = TreeManager(host, Target(repo=str(user.path), ref="HEAD"), ps)
    for name in ps.names:
        tm.apply_check([name])
    t = tm.prepare(ps.names)
    assert tree_files(t.path) == expected_worktree(user)
    assert check_patchset(host, tm.target, ps).ok
    assert snapshot(user.path) == before


def test_capture_by_globs(user, tmp_path):
    before = snapshot(user.path)
    out = capture(user.path, tmp_path / "ps", split=["pkg/moe/*=oea-topk", "pkg/*.py=core", "file"])
    ps = load_patchset(out)
    assert {p.name: set(p.files) for p in ps.patches} == {
        "oea-topk": {"pkg/moe/topk.py"}, "core": {"pkg/a.py", "pkg/b.py", "pkg/new_feature.py"},
        "old": {"docs/old.md"}}
    t = TreeManager(LocalHost(cache_dir=tmp_path / "cache"), Target(repo=str(user.path)), ps).prepare(ps.names)
    assert tree_files(t.path) == expected_worktree(user)
    assert snapshot(user.path) == before


def test_capture_range(tmp_path):
    repo = linear_repo(tmp_path / "src", n_commits=2)
    start = repo.head()
    repo.commit("one", {"pkg/a.py": "A = 'one'\n", "pkg/sub/x.py": "X = 1\n"})
    repo.commit("two", {"pkg/b.py": None, "pkg/sub/y.py": "Y = 2\n"})
    end = repo.head()
    repo.commit("later", {"pkg/a.py": "A = 'later'\n"})           # outside the range
    before = snapshot(repo.path)
    out = capture(repo.path, tmp_path / "ps", range=f"{start[:8]}..{end}", split=["pkg/sub/*=sub"])
    assert snapshot(repo.path) == before
    ps = load_patchset(out)
    assert {p.name: set(p.files) for p in ps.patches} == {"a": {"pkg/a.py"}, "b": {"pkg/b.py"},
                                                          "sub": {"pkg/sub/x.py", "pkg/sub/y.py"}}
    assert f'base = "{start}"' in (out / "patchset.toml").read_text()
    t = TreeManager(LocalHost(cache_dir=tmp_path / "cache"), Target(repo=str(repo.path)), ps).prepare(
        ps.names, commit=start)
    assert t.tree_hash == git(repo.path, "rev-parse", f"{end}^{{tree}}")


def test_capture_binary_and_name_collisions(tmp_path):
    repo = linear_repo(tmp_path / "src", n_commits=1, files={
        "x/util.py": "a\n", "y/util.py": "b\n", "img.bin": bytes(range(256))})
    repo.write({"x/util.py": "a2\n", "y/util.py": "b2\n", "img.bin": bytes(range(255, -1, -1)),
                "Weird Name!.TXT": "w\n", "star*.py": "s\n", "starlet.py": "t\n"})
    out = capture(repo.path, tmp_path / "ps")
    ps = load_patchset(out)
    assert sorted(ps.names) == ["img", "star", "starlet", "weird-name", "x-util", "y-util"]
    assert ps.get("star").files == ("star*.py",)        # a literal path, not a glob
    t = TreeManager(LocalHost(cache_dir=tmp_path / "cache"), Target(repo=str(repo.path)), ps).prepare(ps.names)
    assert Path(t.path, "img.bin").read_bytes() == bytes(range(255, -1, -1))
    assert Path(t.path, "Weird Name!.TXT").read_text() == "w\n"


def test_capture_errors(tmp_path, user):
    clean = linear_repo(tmp_path / "clean", n_commits=1)
    with pytest.raises(UsageError, match="nothing to capture"):
        capture(clean.path, tmp_path / "o1")
    with pytest.raises(UsageError, match="not a git checkout"):
        (tmp_path / "plain").mkdir()
        capture(tmp_path / "plain", tmp_path / "o2")
    with pytest.raises(UsageError, match="unknown ref 'nope'"):
        capture(user.path, tmp_path / "o3", range="nope..HEAD")
    with pytest.raises(UsageError, match="GLOB=NAME"):
        capture(user.path, tmp_path / "o4", split=["pkg/*"])
    with pytest.raises(UsageError, match=r"\[a-z0-9-\]"):
        capture(user.path, tmp_path / "o5", split=["pkg/*=Bad_Name"])
    with pytest.raises(UsageError, match="inside the checkout"):
        capture(user.path, user.path / "patches")
    capture(user.path, tmp_path / "o6")
    with pytest.raises(UsageError, match="already holds"):
        capture(user.path, tmp_path / "o6")
    assert sanitize_name("python/sglang/Foo_bar.py") == "python-sglang-foo-bar-py"
    assert parse_split(["file", "a/*=x"]) == (True, [("a/*", "x")])


def test_snapshot_detects_what_git_commands_change(user):
    """The byte-for-byte check used above can fail: index refresh, stash and config are seen."""
    before = snapshot(user.path)
    st = (user.path / "README").stat()
    os.utime(user.path / "README", (st.st_atime + 5, st.st_mtime + 5))   # same content, new stat
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=user.path, capture_output=True)
    after = snapshot(user.path)
    assert after != before and ".git/index" in [k for k in after["files"] if after["files"][k] != before["files"].get(k)]
    git(user.path, "config", "x.y", "z")
    assert snapshot(user.path)["files"][".git/config"] != before["files"][".git/config"]
    git(user.path, "stash", "drop", "-q")
    assert snapshot(user.path)["stash"] == ""


def test_inspection_ignores_a_hostile_git_environment_and_writes_nothing(user, tmp_path, monkeypatch):
    """GitPython reads the checkout (top level, git folders, HEAD and --range refs): a GIT_DIR or
    GIT_INDEX_FILE in the environment (a hook, a test) redirects nothing, and neither the checkout
    nor the other repository changes by a byte, for a dirty-tree capture and a range capture, from
    the top folder, a subfolder and a linked worktree."""
    expected = {p.name: p.path.read_bytes() for p in load_patchset(capture(user.path, tmp_path / "ref")).patches}
    other = linear_repo(tmp_path / "other", n_commits=2)
    wt = tmp_path / "linked"
    git(user.path, "worktree", "add", "-q", "--detach", str(wt), "HEAD~1")
    (wt / "pkg" / "b.py").write_text("B = 'linked'\n")
    before, before_other = snapshot(user.path), snapshot(other.path)
    assert ".git/worktrees/linked/index" in before["files"]
    monkeypatch.setenv("GIT_DIR", str(other.path / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other.path / ".git" / "index"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other.path))
    got = {p.name: p.path.read_bytes() for p in load_patchset(capture(user.path / "pkg", tmp_path / "sub")).patches}
    assert got == expected
    rng = load_patchset(capture(user.path, tmp_path / "rng", range="HEAD~1..HEAD"))
    assert rng.patches and all(p.path.read_bytes() for p in rng.patches)
    linked = load_patchset(capture(wt, tmp_path / "lnk"))
    assert [p.files for p in linked.patches] == [("pkg/b.py",)]
    with pytest.raises(UsageError, match="unknown ref 'HEAD~99'"):
        capture(user.path, tmp_path / "bad", range="HEAD~99..HEAD")
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_INDEX_FILE")
    monkeypatch.delenv("GIT_WORK_TREE")
    assert snapshot(user.path) == before and snapshot(other.path) == before_other   # index of the linked one too
