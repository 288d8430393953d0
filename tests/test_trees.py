"""Trees: clone cache, worktrees per arm, reuse, apply errors, builds, import checks, commits.

Real git repositories built in tmp dirs (tests/gitrepos.py), real subprocesses, no mocks.
"""
from __future__ import annotations

import json
import os
import shutil
import posixpath
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bisect_lab.errors import PatchError, UsageError
from bisect_lab.hosts.local import LocalHost
from bisect_lab.model import Target
from bisect_lab.patchset import load_patchset
from bisect_lab.trees import (BuildError, PreparedTree, TreeManager, apply_error, benchmark_python, cache_info,
                              check_patchset, prune_cache)
from gitrepos import (GitRepo, PatchSpec, dirty_checkout_with_stash, git, linear_repo, merge_repo,
                      plain_folder, snapshot, write_patchset)


class NonLocalHost(LocalHost):
    """The local machine driven through the *remote* code paths of trees.py (bundle shipping,
    patch copying, cache listing through the host's Python): a real host, not a mock."""

    is_local = False
    name = "pseudo-remote"


def a_lines(**changes) -> str:
    lines = [f"A{i} = {i}\n" for i in range(20)]
    for k, v in changes.items():
        lines[int(k[1:])] = v
    return "".join(lines)


@pytest.fixture
def host(tmp_path):
    return LocalHost(cache_dir=tmp_path / "cache")


@pytest.fixture
def world(tmp_path):
    """A linear repo plus a patch set: fix-a (a.py line 1), fix-b (b.py), dep-on-a (requires fix-a,
    edits the line fix-a wrote), clash (a.py line 1 differently: conflicts with fix-a)."""
    repo = linear_repo(tmp_path / "src", n_commits=3)
    fa = repo.patch({"pkg/a.py": a_lines(A1="A1 = 'patched'\n")})
    fb = repo.patch({"pkg/b.py": (repo.path / "pkg/b.py").read_text().replace("B3 = 3", "B3 = 33")})
    # dep-on-a is made on top of fix-a: it only applies after it.
    repo.write({"pkg/a.py": a_lines(A1="A1 = 'patched'\n")})
    repo.git("add", "-A")
    repo.git("commit", "-qm", "tmp")
    dep = repo.patch({"pkg/a.py": a_lines(A1="A1 = 'patched twice'\n")})
    repo.git("reset", "-q", "--hard", "HEAD~1")
    clash = repo.patch({"pkg/a.py": a_lines(A1="A1 = 'clash'\n")})
    # Manifest order lists dep-on-a first: dependency order must still apply fix-a before it.
    ps_dir = write_patchset(tmp_path / "ps", [
        PatchSpec("dep-on-a", dep, requires=("fix-a",)),
        PatchSpec("fix-a", fa, aliases=("a",)),
        PatchSpec("fix-b", fb),
        PatchSpec("clash", clash),
    ])
    return repo, load_patchset(ps_dir)


def manager(host, repo, ps=None, **kw) -> TreeManager:
    target = kw.pop("target", None) or Target(repo=str(repo.path if hasattr(repo, "path") else repo), ref="main")
    return TreeManager(host, target, ps, **kw)


def worktrees(tm: TreeManager) -> list[str]:
    out = git(tm.git_dir, "worktree", "list", "--porcelain")
    return [l.split(" ", 1)[1] for l in out.splitlines() if l.startswith("worktree ")][1:]


def git_tree_of(path: str) -> str:
    """Tree id of a folder's content, computed independently of trees.py."""
    env = {"GIT_INDEX_FILE": str(Path(path).parent / "verify.index")}
    try:
        git(path, "add", "-A", env=env)
        return git(path, "write-tree", env=env)
    finally:
        Path(env["GIT_INDEX_FILE"]).unlink(missing_ok=True)


# --------------------------------------------------------------------------- prepare / reuse
def test_prepare_applies_patches_and_records_tree_hash(host, world):
    repo, ps = world
    tm = manager(host, repo, ps)
    t = tm.prepare(["fix-a", "fix-b"])
    assert isinstance(t, PreparedTree) and not t.reused
    assert t.commit == repo.head("main")
    assert "A1 = 'patched'" in Path(t.path, "pkg/a.py").read_text()
    assert "B3 = 33" in Path(t.path, "pkg/b.py").read_text()
    assert t.tree_hash == git_tree_of(t.path)
    assert t.patch_hashes == {"fix-a": ps.get("fix-a").sha256, "fix-b": ps.get("fix-b").sha256}
    assert tm.verify(t)
    clean = tm.prepare([])
    assert clean.tree_hash == git(repo.path, "rev-parse", "main^{tree}")
    assert clean.path != t.path


def test_reuse_is_keyed_by_content_and_survives_a_new_manager(host, world, tmp_path):
    repo, ps = world
    t1 = manager(host, repo, ps).prepare(["fix-b", "fix-a"])
    t2 = manager(host, repo, ps).prepare(["fix-a", "fix-b"])       # another campaign, other order
    assert t2.reused and t2.path == t1.path and t2.tree_hash == t1.tree_hash
    # Same content under another name: same key. Changed content: new tree.
    renamed = write_patchset(tmp_path / "ps2", [PatchSpec("renamed-a", ps.get("fix-a").path.read_text())])
    t3 = manager(host, repo, load_patchset(renamed)).prepare(["renamed-a"])
    again = manager(host, repo, ps).prepare(["fix-a"])
    assert not t3.reused and again.reused and again.key == t3.key and again.patches == ("fix-a",)
    # Another base commit: another tree.
    t4 = manager(host, repo, ps).prepare(["fix-a"], commit=repo.head("main~1"))
    assert t4.key != t3.key and not t4.reused and t4.commit == repo.head("main~1")


def test_reuse_runs_one_git_status_and_is_fast(host, world, monkeypatch):
    repo, ps = world
    tm = manager(host, repo, ps)
    tm.prepare(["fix-a", "fix-b"])
    calls = []
    real_run = host.run                                    # LocalHost.quick runs through run
    monkeypatch.setattr(host, "run", lambda *a, **k: calls.append(a[0]) or real_run(*a, **k))
    t0 = time.perf_counter()
    for _ in range(20):
        assert tm.prepare(["fix-a", "fix-b"]).reused
    per_call = (time.perf_counter() - t0) / 20
    # The only process of a reuse: the verification, one `git status` of tracked files.
    assert len(calls) == 20 and all("status" in c and "--untracked-files=no" in c for c in calls)
    assert per_call < 0.05


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote-code-path"])
def test_a_reused_tree_that_a_benchmark_modified_is_rebuilt(tmp_path, world, remote):
    """A benchmark that edits its tree must not poison later trials: tracked files modified,
    deleted or staged, or HEAD moved, make the next prepare rebuild the tree (and say what
    changed); untracked build outputs do not, and the build then runs once per tree."""
    repo, ps = world
    host = (NonLocalHost if remote else LocalHost)(cache_dir=tmp_path / "cache")
    builds = tmp_path / "builds.txt"
    target = Target(repo=str(repo.path), ref="main",
                    build=f"echo x >> '{builds}' && mkdir -p build && touch build/ext.so pkg/_c.so")
    logs = []
    tm = TreeManager(host, target, ps, log=logs.append)
    t = tm.prepare(["fix-a"])
    again = tm.prepare(["fix-a"])
    assert again.reused and again.built and tm.verify(again)
    assert builds.read_text().count("x") == 1            # untracked build outputs: no rebuild
    a = Path(t.path, "pkg/a.py")
    for damage, word in [(lambda: a.write_text("A1 = 'edited by the benchmark'\n"), "modified pkg/a.py"),
                         (lambda: a.unlink(), "deleted pkg/a.py"),
                         (lambda: (a.write_text("staged\n"), git(t.path, "add", "pkg/a.py")), "modified pkg/a.py"),
                         (lambda: git(t.path, "checkout", "-q", "--detach", repo.head("main~1")), "HEAD is")]:
        damage()
        assert not tm.verify(t)
        logs.clear()
        fresh = TreeManager(host, target, ps, log=logs.append).prepare(["fix-a"])   # a later campaign
        assert not fresh.reused and fresh.path == t.path
        assert "A1 = 'patched'" in a.read_text() and tm.verify(fresh)
        warning = [l for l in logs if l.startswith("warning:")]
        assert len(warning) == 1 and word in warning[0] and "rebuilding" in warning[0], logs
    assert builds.read_text().count("x") == 5            # the rebuilt tree was built again


def test_a_build_that_rewrites_tracked_files_is_its_own_baseline(host, world, tmp_path):
    repo, ps = world
    builds = tmp_path / "builds.txt"
    target = Target(repo=str(repo.path), ref="main",
                    build=f"echo x >> '{builds}' && echo \"VERSION = 'generated'\" >> pkg/b.py")
    tm = TreeManager(host, target, ps)
    t = tm.prepare(["fix-b"])
    for _ in range(3):
        assert tm.prepare(["fix-b"]).reused
    assert builds.read_text().count("x") == 1 and tm.verify(t)
    # An edit on top of what the build wrote is still seen (the content is compared).
    Path(t.path, "pkg/b.py").write_text(Path(t.path, "pkg/b.py").read_text().replace("B3 = 33", "B3 = 0"))
    assert tm.tree_changes(t) == ["modified pkg/b.py"]
    rebuilt = tm.prepare(["fix-b"])
    assert not rebuilt.reused and builds.read_text().count("x") == 2
    assert "B3 = 33" in Path(t.path, "pkg/b.py").read_text()


def test_concurrent_preparation_of_one_arm_builds_it_once(host, world):
    import threading
    repo, ps = world
    manager(host, repo, ps).resolve("main")                  # clone cache exists before the race
    results, errors = [], []

    def go():
        try:
            results.append(manager(host, repo, ps).prepare(["fix-a", "fix-b"]))
        except Exception as e:                                # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({r.path for r in results}) == 1 and len({r.tree_hash for r in results}) == 1
    assert sum(not r.reused for r in results) == 1           # built once, the others waited and reused
    assert worktrees(manager(host, repo, ps)) == [results[0].path]
    assert "A1 = 'patched'" in Path(results[0].path, "pkg/a.py").read_text()


def test_dependency_order_and_closure(host, world):
    repo, ps = world
    t = manager(host, repo, ps).prepare(["dep-on-a"])      # fix-a comes with it, applied first
    assert t.patches == ("fix-a", "dep-on-a")
    assert "A1 = 'patched twice'" in Path(t.path, "pkg/a.py").read_text()


def test_unknown_patch_and_ref_are_one_line_usage_errors(host, world):
    repo, ps = world
    tm = manager(host, repo, ps)
    with pytest.raises(UsageError, match="unknown patch 'nope'.*fix-a"):
        tm.prepare(["nope"])
    with pytest.raises(UsageError, match="unknown ref 'no-such-branch'") as e:
        tm.resolve("no-such-branch")
    assert "\n" not in str(e.value)


def test_conflicting_patch_names_patch_and_file_and_leaves_nothing(host, world):
    repo, ps = world
    tm = manager(host, repo, ps)
    for _ in range(2):                                   # the second try is not a reuse either
        with pytest.raises(PatchError) as e:
            tm.prepare(["fix-a", "clash"])
        assert e.value.patch == "clash" and e.value.file == "pkg/a.py"
        assert "clash" in str(e.value) and "pkg/a.py" in str(e.value) and "\n" not in str(e.value)
    assert worktrees(tm) == []
    assert not Path(tm.trees_dir).exists() or list(Path(tm.trees_dir).iterdir()) == []
    tmp = Path(tm.root, "tmp")                              # no temporary index left either
    assert not tmp.exists() or list(tmp.iterdir()) == []


def test_half_prepared_tree_is_discarded_not_reused(host, world):
    repo, ps = world
    tm = manager(host, repo, ps)
    t = tm.prepare(["fix-a"])
    # Simulate a crash before the marker was written: folder present, marker missing, junk inside.
    Path(t.path + ".json").unlink()
    Path(t.path, "pkg/a.py").write_text("half applied\n")
    again = manager(host, repo, ps).prepare(["fix-a"])
    assert not again.reused and again.path == t.path
    assert "A1 = 'patched'" in Path(again.path, "pkg/a.py").read_text()
    assert worktrees(tm) == [t.path]


def test_deleted_tree_folder_is_recreated(host, world):
    repo, ps = world
    tm = manager(host, repo, ps)
    t = tm.prepare(["fix-b"])
    subprocess.run(["rm", "-rf", t.path, t.path + ".json"], check=True)
    again = manager(host, repo, ps).prepare(["fix-b"])
    assert not again.reused and Path(again.path, "pkg/b.py").exists()


def test_fetch_follows_a_moving_branch(host, world):
    repo, ps = world
    tm = manager(host, repo, ps)
    first = tm.resolve("main")
    new = repo.commit("moved", {"log.txt": "moved\n"})
    assert tm.resolve("main") == first                 # cached within one manager...
    tm.fetch()
    assert tm.resolve("main") == new == tm.resolve("origin/main")   # ...until fetch()
    assert manager(host, repo, ps).resolve("main") == new         # a new manager fetches once
    assert tm.resolve(new[:10]) == new and tm.resolve("main~1") == first


def test_head_means_the_users_checked_out_commit(host, tmp_path):
    repo = linear_repo(tmp_path / "src", n_commits=3)
    repo.git("checkout", "-q", "--detach", "HEAD~1")
    tm = TreeManager(host, Target(repo=str(repo.path), ref="HEAD"))
    assert tm.resolve() == repo.head("HEAD") != repo.head("main")


# --------------------------------------------------------------------------- plain folder / remote
def test_plain_folder_is_imported_by_content(host, tmp_path):
    folder = plain_folder(tmp_path / "plain")
    target = Target(repo=str(folder), ref="HEAD")
    tm = TreeManager(host, target)
    t1 = tm.prepare([])
    assert Path(t1.path, "pkg/a.py").read_text() == "A = 1\n"
    (folder / "pkg/a.py").write_text("A = 2\n")
    (folder / "README").unlink()
    tm.fetch()
    t2 = tm.prepare([])
    assert t2.commit != t1.commit and Path(t2.path, "pkg/a.py").read_text() == "A = 2\n"
    assert not Path(t2.path, "README").exists()
    (folder / "pkg/a.py").write_text("A = 1\n")          # back to the first content: same commit
    (folder / "README").write_text("plain folder\n")
    t3 = TreeManager(host, target).prepare([])
    assert t3.commit == t1.commit and t3.reused
    assert not (folder / ".git").exists()


def test_remote_code_path_ships_bundle_and_patches(tmp_path, world, monkeypatch):
    repo, ps = world
    host = NonLocalHost(cache_dir=tmp_path / "remote-cache")
    tm = manager(host, repo, ps)
    t = tm.prepare(["dep-on-a", "fix-b"])
    assert "A1 = 'patched twice'" in Path(t.path, "pkg/a.py").read_text()
    assert sorted(p.name for p in Path(tm.root, "patches").iterdir()) == sorted(
        f"{ps.get(n).sha256}.patch" for n in ("fix-a", "dep-on-a", "fix-b"))
    assert not Path(tm.root, "incoming.bundle").exists()
    assert manager(host, repo, ps).prepare(["fix-b", "dep-on-a"]).reused
    with pytest.raises(PatchError, match="clash.*pkg/a.py"):
        tm.prepare(["fix-a", "clash"])
    info = cache_info(host)
    assert [r.repo for r in info.repos] == [str(repo.path)] and len(info.trees) == 1
    # Incremental shipping follows new commits, and a HEAD that moves backwards.
    new = repo.commit("new", {"log.txt": "new\n"})
    msgs: list[str] = []
    fresh = manager(host, repo, ps, log=msgs.append)
    assert fresh.resolve("main") == new and Path(fresh.prepare([]).path, "log.txt").read_text() == "new\n"
    repo.git("checkout", "-q", "--detach", "HEAD~2")
    head_tm = TreeManager(host, Target(repo=str(repo.path), ref="HEAD"), log=msgs.append)
    assert head_tm.resolve() == repo.head() != new and head_tm.resolve("main") == new
    bundling = [m for m in msgs if m.startswith("bundling")]
    assert len(bundling) == 2 and all("(incremental)" in m for m in bundling)     # no full fallback
    assert len(TreeManager(host, Target(repo=str(repo.path)), log=msgs.append).resolve()) == 40
    assert len([m for m in msgs if m.startswith("bundling")]) == 2                  # unchanged: nothing sent
    assert not Path(tm.root, "incoming.bundle").exists()
    # Plain folder on a remote host: imported locally, shipped as a bundle.
    folder = plain_folder(tmp_path / "plain")
    monkeypatch.setenv("BISECT_LAB_CACHE", str(tmp_path / "local-cache"))     # the local staging repo
    tf = TreeManager(host, Target(repo=str(folder))).prepare([])
    assert (tmp_path / "local-cache" / "staging").is_dir()
    assert Path(tf.path, "README").read_text() == "plain folder\n"


# --------------------------------------------------------------------------- cache bounds
def test_lru_pruning_by_count_and_cache_commands(host, world):
    repo, ps = world
    tm = manager(host, repo, ps, max_trees=2)
    ta = tm.prepare(["fix-a"])
    time.sleep(0.02)
    tb = tm.prepare(["fix-b"])
    time.sleep(0.02)
    assert tm.prepare(["fix-a"]).reused                  # fix-a is now the most recently used
    time.sleep(0.02)
    tc = tm.prepare([])                                    # third tree: fix-b (LRU) goes
    assert not Path(tb.path).exists() and not Path(tb.path + ".json").exists()
    assert Path(ta.path).is_dir() and Path(tc.path).is_dir()
    assert sorted(worktrees(tm)) == sorted([ta.path, tc.path])
    info = tm.cache_info()
    assert [t.key for t in info.trees] == [ta.key, tc.key]      # least recently used first
    assert info.trees[0].patches == ("fix-a",) and info.repos[0].trees == 2
    data = json.loads(json.dumps(cache_info(host.cache_root()).to_dict()))   # a folder works as host
    assert [t["key"] for t in data["trees"]] == [ta.key, tc.key] and data["repos"][0]["repo"] == str(repo.path)
    removed = prune_cache(host, max_trees=1)
    assert [t.key for t in removed] == [ta.key] and worktrees(tm) == [tc.path]
    assert [t.key for t in prune_cache(host.cache_root(), everything=True)] == [tc.key] and worktrees(tm) == []
    tb2 = tm.prepare(["fix-b"])
    assert not tb2.reused                                  # pruned trees are rebuilt
    assert [t.key for t in tm.prune(all=True)] == [tb2.key] and worktrees(tm) == []


def test_lru_pruning_by_bytes(host, world):
    repo, ps = world
    tm = manager(host, repo, ps, max_trees=None, max_bytes=1)   # every new tree evicts older ones
    t1 = tm.prepare(["fix-a"])
    t2 = tm.prepare(["fix-b"])
    assert not Path(t1.path).exists() and Path(t2.path).is_dir()
    assert cache_info(host).trees[0].size_bytes > 0


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote-code-path"])
def test_trial_out_dirs_are_fresh_and_bounded(tmp_path, world, remote):
    repo, ps = world
    host = (NonLocalHost if remote else LocalHost)(cache_dir=tmp_path / "cache")
    out = tmp_path / "cache" / "out"
    for i in range(5):                                     # five older campaigns, oldest first
        Path(out, f"old{i}", "0").mkdir(parents=True)
        Path(out, f"old{i}", "0", "big.log").write_text("x" * 1000)
        os.utime(Path(out, f"old{i}"), (1000 + i, 1000 + i))
    Path(out, "cur", "0").mkdir(parents=True)
    Path(out, "cur", "0", "res.jsonl").write_text('{"output_throughput": 1.0}\n')   # a killed attempt's
    os.utime(Path(out, "cur"), (900, 900))                 # a resumed old campaign: the oldest folder
    logs = []
    tm = manager(host, repo, ps, keep_out_campaigns=3, log=logs.append)
    d = tm.trial_out_dir("cur", 0)
    assert d == str(out / "cur" / "0") and list(Path(d).iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["cur", "old3", "old4"]
    assert any("older campaign(s)" in l and "old0" in l for l in logs)
    Path(out, "newer", "0").mkdir(parents=True)
    assert tm.trial_out_dir("cur", 1) == str(out / "cur" / "1")     # pruned once per campaign
    assert sorted(p.name for p in out.iterdir()) == ["cur", "newer", "old3", "old4"]
    info = cache_info(host, sizes=True)
    assert {o.campaign: o.trials for o in info.outputs} == {"cur": 2, "newer": 1, "old3": 1, "old4": 1}
    # a serving session's readings: in the session's folder. Two Slurm jobs sharing a cache root
    # each number their session's readings from 0: one's reading 0 must not empty the other's
    s1 = tm.trial_out_dir("cur", 0, "s1")
    assert s1 == str(out / "cur" / "session-s1" / "0")
    Path(s1, "res.jsonl").write_text('{"output_throughput": 2.0}\n')
    s2 = tm.trial_out_dir("cur", 0, "s2")
    assert s2 != s1 and Path(s1, "res.jsonl").exists() and list(Path(s2).iterdir()) == []
    Path(tm.trial_out_dir("cur", 1, "s1")).mkdir(parents=True, exist_ok=True)
    Path(s1).parent.joinpath("server.log").write_text("ready\n")
    # the cache listing counts a session's readings as trials, not its folder as one
    cur = next(o for o in cache_info(host).outputs if o.campaign == "cur")
    assert (cur.trials, cur.sessions) == (2 + 3, 2), cur
    shutil.rmtree(Path(s1).parent)
    shutil.rmtree(Path(s2).parent)
    assert info.out_bytes >= 2000 and info.to_dict()["outputs"][0]["campaign"] == "old3"
    removed = prune_cache(host, keep_out_campaigns=2)
    assert list(removed) == [] and [o.campaign for o in removed.outputs] == ["old3", "old4"]
    assert sorted(o.campaign for o in prune_cache(host, all=True).outputs) == ["cur", "newer"]
    assert list(out.iterdir()) == [] and cache_info(host).outputs == ()


# --------------------------------------------------------------------------- build / env
def test_build_runs_once_per_tree_and_failure_is_reported(host, world, tmp_path):
    repo, ps = world
    counter = tmp_path / "builds.txt"
    target = Target(repo=str(repo.path), ref="main", build=f"echo \"$PWD\" >> '{counter}' && touch built.flag")
    t = TreeManager(host, target, ps).prepare(["fix-a"])
    assert t.built and Path(t.path, "built.flag").exists()
    assert TreeManager(host, target, ps).prepare(["fix-a"]).built
    TreeManager(host, target, ps).prepare(["fix-b"])
    assert counter.read_text().splitlines() == [t.path, TreeManager(host, target, ps).prepare(["fix-b"]).path]
    bad = Target(repo=str(repo.path), ref="main", build="echo compiling; echo 'fatal: no nvcc' >&2; exit 3")
    tm = TreeManager(host, bad, ps)
    for _ in range(2):
        with pytest.raises(BuildError, match="no nvcc") as e:
            tm.prepare(["clash"])
        assert "exit 3" in str(e.value) and "compiling" in e.value.output_tail
    assert not Path(tm.trees_dir, tm.prepare(["clash"], build=False).key + ".build.json").exists()


def test_import_check_catches_a_shadowing_install(host, world, tmp_path):
    repo, ps = world
    target = Target(repo=str(repo.path), ref="main", pythonpath=(".",), import_check="pkg")
    tm = TreeManager(host, target, ps)
    t = tm.prepare(["fix-a"])
    env = tm.pythonpath_env(t)
    assert env == {"PYTHONPATH": t.path}
    ok, where = tm.import_check(t, env)
    assert ok and where == os.path.realpath(os.path.join(t.path, "pkg", "__init__.py"))
    # The user's checkout first on the path (what an editable install does): must be caught.
    ok, msg = tm.import_check(t, {"PYTHONPATH": f"{repo.path}:{t.path}"}, cwd=str(tmp_path))
    assert not ok and str(repo.path / "pkg") in msg and "outside the prepared tree" in msg
    # A .pth file in site-packages (the editable-install mechanism) shadowing the tree.
    site = tmp_path / "site"
    site.mkdir()
    (site / "editable.pth").write_text(str(repo.path) + "\n")
    ok, msg = tm.import_check(t, {"PYTHONPATH": None}, cwd=str(tmp_path),
                              python=_python_with_site(tmp_path, site))
    assert not ok and str(repo.path) in msg
    missing = TreeManager(host, Target(repo=str(repo.path), ref="main", import_check="nothere"), ps)
    ok, msg = missing.import_check(t, {})
    assert not ok and "cannot be found" in msg
    assert tm.pythonpath_env(t, inherited="/x") == {"PYTHONPATH": f"{t.path}:/x"}


def test_import_check_does_not_count_the_working_directory(host, tmp_path):
    """vLLM's layout (package at the repository root) with ``pythonpath = []``: the benchmark, a
    script in a subfolder, imports the copy on PYTHONPATH; the check must see that copy too, not
    the tree that ``python -c`` in the tree's folder would find through the working directory."""
    repo = GitRepo.init(tmp_path / "src")
    repo.commit("package at root", {"mypkg/__init__.py": "VALUE = 1\n", "benchmarks/bench.py": "import mypkg\nprint(mypkg.__file__)\n"})
    site = tmp_path / "site"
    (site / "mypkg").mkdir(parents=True)
    (site / "mypkg" / "__init__.py").write_text("VALUE = 2\n")
    tm = TreeManager(host, Target(repo=str(repo.path), ref="main", import_check="mypkg"))
    t = tm.prepare([])
    env = {"PYTHONPATH": str(site)}
    res = tm.import_probe(t, env, command="python3 benchmarks/bench.py")
    assert not res.ok and res.origin == str(site / "mypkg" / "__init__.py") and res.python
    assert t.path in res.message and str(site) in res.message and "[target] pythonpath" in res.message
    # What the benchmark itself imports, run the same way: the site copy (the check agrees with it).
    bench = subprocess.run(["python3", "benchmarks/bench.py"], cwd=t.path, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(site)})
    assert bench.stdout.strip() == str(site / "mypkg" / "__init__.py"), bench
    ok, msg = tm.import_check(t, {"PYTHONPATH": None})
    assert not ok and "cannot be found" in msg                # nothing but the working directory had it
    listed = TreeManager(host, Target(repo=str(repo.path), ref="main", import_check="mypkg", pythonpath=(".",)))
    ok, where = listed.import_check(t, {**listed.pythonpath_env(t, str(site))})
    assert ok and where == os.path.realpath(os.path.join(t.path, "mypkg", "__init__.py"))
    # The benchmark's own interpreter, taken from its command: here one with an editable install
    # (a .pth in its site dir) of the user's checkout.
    pth_site = tmp_path / "pth-site"
    pth_site.mkdir()
    (pth_site / "editable.pth").write_text(str(repo.path) + "\n")
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    Path(_python_with_site(tmp_path, pth_site)).rename(bindir / "python3")
    res = listed.import_probe(t, {"PYTHONPATH": None}, command=f"cd {{tree}} && {bindir / 'python3'} benchmarks/bench.py")
    assert not res.ok and res.origin == str(repo.path / "mypkg" / "__init__.py")


def test_benchmark_python_is_the_commands_interpreter():
    assert benchmark_python("python3 bench.py") == "python3"
    assert benchmark_python("CUDA_VISIBLE_DEVICES=0 .venv/bin/python -m sglang.bench_serving") == ".venv/bin/python"
    assert benchmark_python("{tree}/env/bin/python3.11 x.py", "/t r") == "/t r/env/bin/python3.11"
    assert benchmark_python("cd x && exec python bench.py {out}") == "python"
    assert benchmark_python("torchrun --nproc 2 bench.py") is None and benchmark_python("echo 'x") is None


def _python_with_site(tmp_path, site) -> str:
    """An interpreter whose site dirs include ``site`` (so its .pth files are processed), the way
    a virtualenv with an editable install behaves. Called as ``py -c CODE ARGS...``."""
    wrapper = tmp_path / "py"
    inner = (f"import site, sys; site.addsitedir({str(site)!r}); code = sys.argv[2]; "
             "sys.argv = sys.argv[:1] + sys.argv[3:]; exec(compile(code, '-c', 'exec'))")
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"{inner}\" \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


# --------------------------------------------------------------------------- commits
def test_commits_between_with_merges(host, tmp_path):
    repo, c = merge_repo(tmp_path / "merges")
    tm = TreeManager(host, Target(repo=str(repo.path), ref="main"))
    commits = tm.commits_between(c["G"], c["M3"])
    shas = [x.sha for x in commits]
    label = {v: k for k, v in c.items()}
    assert sorted(label[s] for s in shas) == sorted(["M1", "M2", "S1", "S2", "S3", "MERGE", "M3"])
    pos = {s: i for i, s in enumerate(shas)}
    for x in commits:                                        # parents always come first
        for p in x.parents:
            if p in pos:
                assert pos[p] < pos[x.sha]
    assert shas[-1] == c["M3"]
    merge = commits[pos[c["MERGE"]]]
    assert merge.is_merge and merge.subject == "MERGE side" and set(merge.parents) == {c["M2"], c["S3"]}
    info = tm.commit_info(c["S2"])
    assert info.subject == "S2" and info.author == "Test Author <author@example.com>" and info.date.startswith("2024-01-01")
    # good on the side branch: main commits before the merge are still candidates (git bisect's set)
    assert {label[x.sha] for x in tm.commits_between(c["S3"], c["M3"])} == {"M1", "M2", "MERGE", "M3"}
    assert tm.is_ancestor(c["S1"], c["MERGE"]) and not tm.is_ancestor(c["S1"], c["M2"])
    # Trees can be prepared on a side-branch commit.
    assert Path(tm.prepare([], commit=c["S2"]).path, "S2.txt").exists()


# --------------------------------------------------------------------------- check
def test_check_patchset_reports_alone_full_set_and_pairs(host, world, tmp_path):
    repo, ps = world
    target = Target(repo=str(repo.path), ref="main")
    rep = check_patchset(host, target, ps)
    assert not rep.ok and rep.alone == ()
    assert [(f.patches, f.patch, f.file) for f in rep.conflicts] == [
        (("dep-on-a", "clash"), "clash", "pkg/a.py"), (("fix-a", "clash"), "clash", "pkg/a.py")]
    assert rep.full_set.patch == "clash" and rep.full_set.file == "pkg/a.py"
    assert any("conflict: fix-a + clash" in l for l in rep.lines()) and "fix-a + clash" in str(rep)
    data = json.loads(json.dumps(rep.to_dict()))
    assert data["ok"] is False and data["conflicts"][1]["file"] == "pkg/a.py" and len(data["problems"]) == 3
    # A patch that does not apply alone (made against other content).
    stale = repo.patch({"pkg/b.py": "something else\n"}, base="main").replace("B0 = 0", "B0 = nope")
    ps2 = load_patchset(write_patchset(tmp_path / "ps-stale", [
        PatchSpec("fix-b", ps.get("fix-b").path.read_text()), PatchSpec("stale", stale)]))
    rep2 = check_patchset(host, target, ps2)
    assert [(f.patch, f.file) for f in rep2.alone] == [("stale", "pkg/b.py")] and rep2.conflicts == ()
    good = load_patchset(write_patchset(tmp_path / "ps-good", [
        PatchSpec("fix-a", ps.get("fix-a").path.read_text()), PatchSpec("fix-b", ps.get("fix-b").path.read_text())]))
    rep3 = check_patchset(host, target, good)
    assert rep3.ok and rep3.pairs_checked == 0 and "all apply" in rep3.lines()[0]
    tm = TreeManager(host, target, ps)
    assert worktrees(tm) == []                             # checking creates no worktree


def test_apply_error_parsing():
    assert apply_error("error: patch failed: a/b.py:12\nerror: a/b.py: patch does not apply\n") == (
        "a/b.py", "patch does not apply")
    assert apply_error("error: x.py: does not exist in index\n") == ("x.py", "does not exist in index")
    assert apply_error("error: No valid patches in input (allow with \"--allow-empty\")\n")[0] is None


# --------------------------------------------------------------------------- the user's checkout
def test_users_checkout_is_never_modified(host, tmp_path):
    repo = dirty_checkout_with_stash(tmp_path / "user")
    patch = repo.patch({"pkg/b.py": "B = 'from a patch'\n"})
    ps = load_patchset(write_patchset(tmp_path / "ps", [PatchSpec("p", patch)]))
    before = snapshot(repo.path)
    assert before["stash"] and "stashed experiment" in before["stash"]
    assert ".git/index" in before["files"] and ".git/refs/stash" in before["files"]
    target = Target(repo=str(repo.path), ref="HEAD", pythonpath=(".",), import_check="pkg")
    tm = TreeManager(host, target, ps)
    t = tm.prepare(["p"])
    tm.fetch()
    assert tm.import_check(t)[0]
    check_patchset(host, target, ps)
    TreeManager(NonLocalHost(cache_dir=tmp_path / "remote"), target, ps).prepare(["p"])
    from bisect_lab.capture import capture
    capture(repo.path, tmp_path / "captured")
    capture(repo.path, tmp_path / "captured-range", range="HEAD~1..HEAD")
    assert snapshot(repo.path) == before
    # The tree holds the committed HEAD + patch, none of the uncommitted changes.
    assert not Path(t.path, "pkg/new_feature.py").exists()
    assert Path(t.path, "pkg/b.py").read_text() == "B = 'from a patch'\n"


# --------------------------------------------------------------------------- over SSH
# The real remote path: an SSHHost against the test sshd on localhost. The repository is shipped
# as a bundle, patches are copied over, the cache is listed with the host's Python.
try:
    from sshd_fixture import sshd  # noqa: F401  (session fixture: a real sshd on localhost)
    from bisect_lab.hosts.ssh import SSHHost
except ImportError:                   # hosts/ssh.py not there yet
    SSHHost = None


@pytest.mark.ssh
@pytest.mark.skipif(SSHHost is None, reason="bisect_lab.hosts.ssh not available")
def test_prepare_over_ssh(tmp_path, world, sshd):
    repo, ps = world
    target = Target(repo=str(repo.path), ref="main", pythonpath=(".",), import_check="pkg")
    host = SSHHost(sshd.target, port=sshd.port, key=sshd.key_path, known_hosts=sshd.known_hosts_path,
                   python_exe=sys.executable, workdir=str(tmp_path / "remote-cache"))
    with host:
        tm = TreeManager(host, target, ps)
        t = tm.prepare(["dep-on-a", "fix-b"])
        assert t.path.startswith(str(tmp_path / "remote-cache"))
        assert "A1 = 'patched twice'" in host.read_bytes(f"{t.path}/pkg/a.py").decode()
        assert TreeManager(host, target, ps).prepare(["fix-b", "dep-on-a"]).reused
        assert tm.import_check(t)[0]
        with pytest.raises(PatchError, match="clash.*pkg/a.py"):
            tm.prepare(["fix-a", "clash"])
        assert [x.key for x in cache_info(host).trees] == [t.key]
        assert check_patchset(host, target, ps).conflicts[0].patches == ("dep-on-a", "clash")
        # A trial's {out} folder is emptied of what an earlier attempt left (a resume after kill -9).
        stale = f"{host.cache_root()}/out/c1/0/res.jsonl"
        host.write_bytes(stale, b'{"output_throughput": 1.0}\n')
        assert tm.trial_out_dir("c1", 0) == posixpath.dirname(stale) and not host.exists(stale)
        assert [(o.campaign, o.trials) for o in cache_info(host).outputs] == [("c1", 1)]
        # A benchmark that edits its tree: the next reuse sees it and rebuilds, over SSH too.
        host.run(["rm", "-f", f"{t.path}/pkg/b.py"], timeout_s=30).check("rm")
        assert tm.tree_changes(t) == ["deleted pkg/b.py"]
        again = TreeManager(host, target, ps).prepare(["fix-b", "dep-on-a"])
        assert not again.reused and host.exists(f"{t.path}/pkg/b.py")


# --------------------------------------------------------------------------- the package's shape
TREES_PKG = Path(__file__).resolve().parent.parent / "bisect_lab" / "trees"


def _sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(TREES_PKG.glob("*.py"))}


def test_the_trees_package_never_imports_subprocess():
    """Every command goes through a Host: no module of the package starts a process itself."""
    import ast
    bad = []
    for name, src in _sources().items():
        for node in ast.walk(ast.parse(src)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{name}: {m}" for m in mods if m.split(".")[0] in ("subprocess", "multiprocessing", "pty")]
            if isinstance(node, ast.Attribute) and node.attr in ("system", "popen", "spawnv", "execv") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                bad.append(f"{name}: os.{node.attr}")
    assert len(_sources()) >= 8 and not bad, bad


def test_one_tree_removal_and_one_folder_import_in_the_source():
    """A tree is removed in one place (``remove_tree``'s shell function) and a plain folder is
    imported in one place (``CloneCache._import_folder``)."""
    srcs = "\n".join(_sources().values())
    assert srcs.count("worktree remove") == 1 and srcs.count("remove_tree() {") == 1
    assert srcs.count('"--work-tree"') == 1 and srcs.count("def _import_folder") == 1


def _counting(host, monkeypatch) -> list[str]:
    calls: list[str] = []
    real_run = host.run
    monkeypatch.setattr(host, "run", lambda *a, **k: calls.append(
        a[0] if isinstance(a[0], str) else " ".join(a[0])) or real_run(*a, **k))
    return calls


def test_rebuild_prune_and_cache_prune_all_remove_through_remove_tree(host, world, monkeypatch):
    repo, ps = world
    tm = manager(host, repo, ps, max_trees=1)
    t = tm.prepare(["fix-a"])
    calls = _counting(host, monkeypatch)
    Path(t.path, "pkg/a.py").write_text("edited\n")
    assert not tm.prepare(["fix-a"]).reused                 # rebuild: one removal, then a new tree
    tm.prepare(["fix-b"])                                   # over max_trees: the LRU tree goes
    prune_cache(host, all=True)                             # and the last one
    removals = [c for c in calls if "bisect-lab-remove" in c]
    assert len(removals) == 3 and all("remove_tree() {" in c for c in calls if "worktree remove" in c)
    assert worktrees(tm) == [] and list(Path(tm.trees_dir).glob("*.json")) == []


def test_local_and_remote_folder_imports_share_one_path(tmp_path, monkeypatch):
    folder = plain_folder(tmp_path / "plain")
    imports = []
    real = TreeManager._import_folder
    monkeypatch.setattr(TreeManager, "_import_folder",
                        lambda self, *a: imports.append(a[2].is_local) or real(self, *a))
    monkeypatch.setenv("BISECT_LAB_CACHE", str(tmp_path / "local-cache"))
    local = TreeManager(LocalHost(cache_dir=tmp_path / "c1"), Target(repo=str(folder))).prepare([])
    remote = TreeManager(NonLocalHost(cache_dir=tmp_path / "c2"), Target(repo=str(folder))).prepare([])
    assert imports == [True, True]         # the remote host's import runs on this machine, then ships
    assert local.commit == remote.commit and local.tree_hash == remote.tree_hash


def test_a_never_seen_arm_is_one_host_command(host, world, monkeypatch):
    """The fresh-arm path: given a full sha, the apply script is the only command (no rev-parse,
    no temporary index, no status, no du); with a build step and a byte bound, the build, one
    ``git status`` (the baseline of what the build changed) and one ``du`` follow, each once."""
    repo, ps = world
    tm = manager(host, repo, ps)
    base = tm.resolve("main~1")
    calls = _counting(host, monkeypatch)
    t = tm.prepare(["fix-a", "fix-b"], commit=base)
    assert not t.reused and len(calls) == 1 and calls[0].startswith("bash -c") and "bisect-lab-apply" in calls[0]
    assert t.tree_hash == git_tree_of(t.path) and tm.verify(t)
    assert git(t.path, "rev-parse", "HEAD") == t.head and git(t.path, "rev-parse", "HEAD~1") == base
    calls.clear()
    target = Target(repo=str(repo.path), ref="main", build="touch build.out")
    built = TreeManager(host, target, ps, max_bytes=10 ** 12).prepare(["fix-a"], commit=base)
    assert built.built and not built.reused
    kinds = [("apply" if "bisect-lab-apply" in c else "status" if " status " in c else
              "du" if c.startswith("du ") else "build" if c == target.build else c) for c in calls]
    assert kinds == ["apply", "build", "status", "du"], kinds
    assert {e.key: e.size_bytes for e in cache_info(host).trees}[built.key] > 0     # measured after the build


def test_a_sha_the_cache_lacks_is_fetched_once_then_prepared(host, tmp_path):
    repo = linear_repo(tmp_path / "src", n_commits=2)
    tm = TreeManager(host, Target(repo=str(repo.path), ref="main"))
    tm.resolve()
    new = repo.commit("later", {"later.txt": "x\n"})
    t = TreeManager(host, Target(repo=str(repo.path), ref="main")).prepare([], commit=new)
    assert t.commit == new and Path(t.path, "later.txt").exists()
    with pytest.raises(UsageError, match="unknown ref"):
        TreeManager(host, Target(repo=str(repo.path), ref="main")).prepare([], commit="0" * 40)
