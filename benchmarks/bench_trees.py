"""Speed of tree preparation (issue 2, "Speed"): run with ``python benchmarks/bench_trees.py``.

Builds a real repository (default 3,000 files, 3,000 commits, via ``git fast-import``) and six
patches, then measures side by side in one run, on the same clone cache and the same commits:

(a) preparing a never-seen arm with :meth:`TreeManager.prepare` versus the bare minimum by hand:
    ``git worktree add --detach`` + one ``git apply`` per patch (target: at most 1.5x);
(b) reusing a prepared arm, in the same manager and in a fresh manager (a new campaign in the
    same process: the first call of a fresh manager resolves nothing when given a full sha);
    each reuse includes its verification, one ``git status`` of the tracked files (a benchmark
    may have modified the tree) (target: under 50 ms).

Every repetition of (a) uses another base commit (``main~i``), so each arm is really never seen;
the two methods alternate which goes first (ABBA) so drift (page cache, disk) hits both alike.
Medians and min/max over the repetitions are printed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from bisect_lab.hosts.local import LocalHost  # noqa: E402
from bisect_lab.model import Target  # noqa: E402
from bisect_lab.patchset import load_patchset  # noqa: E402
from bisect_lab.trees import GIT_ENV, TreeManager  # noqa: E402
from gitrepos import PatchSpec, fast_import_repo, write_patchset  # noqa: E402


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if GIT_ENV.get(k, "x") is not None}
    env.update({k: v for k, v in GIT_ENV.items() if v is not None})
    return env


def bare_prepare(git_dir: str, path: str, commit: str, patch_files: list[str]) -> None:
    """The baseline: what a person would type, nothing else."""
    env = git_env()
    subprocess.run(["git", "--git-dir", git_dir, "worktree", "add", "-q", "--detach", path, commit],
                   check=True, env=env, capture_output=True)
    for p in patch_files:
        subprocess.run(["git", "apply", p], cwd=path, check=True, env=env, capture_output=True)


def stats(xs: list[float]) -> str:
    ms = [x * 1000 for x in xs]
    return f"median {statistics.median(ms):8.1f} ms   (min {min(ms):7.1f}, max {max(ms):7.1f}, n={len(ms)})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--commits", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=15, help="never-seen arms per method")
    ap.add_argument("--reuse-reps", type=int, default=50)
    ap.add_argument("--workdir", default=None, help="keep everything here (default: a temp dir)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-trees-", dir=args.workdir) as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        targets = [f"src/d{d:02d}/f{d * 100 + 7:04d}.py" for d in range(6)]   # six patched files
        repo = fast_import_repo(tmp / "repo", n_files=args.files, n_commits=args.commits, frozen=targets)
        build_s = time.perf_counter() - t0
        specs = []
        for i, f in enumerate(targets):
            lines = (repo.path / f).read_text().splitlines(keepends=True)
            for j in range(3, 40, 9):                       # a few hunks per patch
                lines[j] = f"V{j - 1} = 'patched by p{i}'\n"
            specs.append(PatchSpec(f"p{i}", repo.patch({f: "".join(lines)})))
        ps = load_patchset(write_patchset(tmp / "patches", specs))
        names = list(ps.names)
        patch_files = [str(p.path) for p in ps.patches]
        n_commits = int(repo.git("rev-list", "--count", "main"))
        n_files = len(repo.ls_files())
        print(f"repository: {n_files} files, {n_commits} commits (generated in {build_s:.1f} s); "
              f"6 patches, {sum(p.added for p in ps.patches)} lines added")
        print(f"git {subprocess.run(['git', '--version'], capture_output=True, text=True).stdout.split()[-1]}, "
              f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")

        host = LocalHost(cache_dir=tmp / "cache")
        target = Target(repo=str(repo.path), ref="main")
        tm = TreeManager(host, target, ps, max_trees=None)
        tm.resolve("main")                                  # clone cache filled before timing
        commits = [tm.resolve(f"main~{i}") for i in range(2 * args.reps + 1)]
        tm.prepare(names, commit=commits[-1])               # warm-up: page cache, first worktree
        bare_prepare(tm.git_dir, str(tmp / "bare-warm"), commits[-1], patch_files)

        ours, bare = [], []
        for i in range(args.reps):
            c_ours, c_bare = commits[2 * i], commits[2 * i + 1]
            order = ("ours", "bare") if i % 2 == 0 else ("bare", "ours")
            for which in order:
                if which == "ours":
                    t = time.perf_counter()
                    tree = tm.prepare(names, commit=c_ours)
                    ours.append(time.perf_counter() - t)
                    assert not tree.reused
                else:
                    t = time.perf_counter()
                    bare_prepare(tm.git_dir, str(tmp / f"bare-{i}"), c_bare, patch_files)
                    bare.append(time.perf_counter() - t)
        # Cross-check: both methods produce the same files (worktree .git links aside).
        bare_prepare(tm.git_dir, str(tmp / "bare-check"), commits[0], patch_files)
        same = subprocess.run(["diff", "-r", "-q", "-x", ".git", tm.prepare(names, commit=commits[0]).path,
                               str(tmp / "bare-check")], capture_output=True, text=True)
        if same.returncode != 0:
            print("content differs between the two methods:\n" + same.stdout, file=sys.stderr)
            return 2

        reuse_same, reuse_fresh = [], []
        for i in range(args.reuse_reps):
            t = time.perf_counter()
            r = tm.prepare(names, commit=commits[0])
            reuse_same.append(time.perf_counter() - t)
            assert r.reused
            t = time.perf_counter()
            r = TreeManager(host, target, ps, max_trees=None).prepare(names, commit=commits[0])
            reuse_fresh.append(time.perf_counter() - t)
            assert r.reused
        reuse_symbolic = []
        for i in range(args.reuse_reps // 5 or 1):
            fresh = TreeManager(host, target, ps, max_trees=None, auto_fetch=False)
            t = time.perf_counter()
            fresh.prepare(names)                            # resolves "main": one rev-parse
            reuse_symbolic.append(time.perf_counter() - t)

        ratio = statistics.median(ours) / statistics.median(bare)
        print()
        print(f"(a) never-seen arm, TreeManager.prepare:          {stats(ours)}")
        print(f"    bare git worktree add --detach + 6 git apply:  {stats(bare)}")
        paired = statistics.median(o / b for o, b in zip(ours, bare))
        print(f"    ratio of medians: {ratio:.2f}x, median of paired ratios: {paired:.2f}x  "
              f"(target <= 1.5x)  {'OK' if ratio <= 1.5 else 'MISSED'}")
        print(f"(b) reuse, same manager:                           {stats(reuse_same)}")
        print(f"    reuse, fresh manager, full sha:                {stats(reuse_fresh)}")
        print(f"    reuse, fresh manager, ref 'main' (1 rev-parse): {stats(reuse_symbolic)}")
        worst = max(statistics.median(reuse_same), statistics.median(reuse_fresh))
        print(f"    target < 50 ms: {'OK' if worst < 0.05 else 'MISSED'}")
        return 0 if ratio <= 1.5 and worst < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
