"""A never-seen arm on a real repository: ``python benchmarks/bench_trees_real.py --source DIR``.

``--source`` is a git repository to clone from (FlashInfer's history: ``github:flashinfer-ai/flashinfer``
as a bare mirror; any repository works). The script clones it into a temp folder (the "user's
checkout"), writes three small real patches against files of that repository (a docstring line, a
constant, a comment in a header), then measures side by side in one run, on the same clone cache:

(a) :meth:`TreeManager.prepare` of a never-seen arm (a new base commit every repetition, given as a
    full sha, as the runner does), in a manager that has already resolved its base;
(b) the bare minimum by hand on the same clone cache: ``git worktree add --detach`` + one
    ``git apply`` per patch;
(c) the same pair with a build step (``[target] build = "true"``; by hand: ``bash -c true`` in the
    tree), which adds what bisect-lab does around a build: the build marker and the ``git status``
    that records which tracked files the build changed.

The two alternate which goes first (ABBA), medians over ``--reps``. ``--profile`` runs cProfile
over extra repetitions of (a) and prints where the time goes; every run also prints the host
commands one preparation starts.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
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
from gitrepos import PatchSpec, write_patchset  # noqa: E402

# Real files of FlashInfer and what each patch does to them (first matching line is edited); for
# another repository, the first three tracked files with at least 20 lines are used instead.
FLASHINFER_EDITS = [
    ("flashinfer/activation.py", None),
    ("include/flashinfer/math.cuh", None),
    ("flashinfer/utils.py", None),
]


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if GIT_ENV.get(k, "x") is not None}
    env.update({k: v for k, v in GIT_ENV.items() if v is not None})
    return env


def git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=git_env(), check=True, capture_output=True,
                          text=True).stdout.strip()


def bare_prepare(git_dir: str, path: str, commit: str, patch_files: list[str], build: str = "") -> None:
    """The baseline: what a person would type, nothing else."""
    env = git_env()
    subprocess.run(["git", "--git-dir", git_dir, "worktree", "add", "-q", "--detach", path, commit],
                   check=True, env=env, capture_output=True)
    for p in patch_files:
        subprocess.run(["git", "apply", p], cwd=path, check=True, env=env, capture_output=True)
    if build:
        subprocess.run(["bash", "-c", build], cwd=path, check=True, env=env, capture_output=True)


def pick_files(src: Path, untouched_for: int) -> list[str]:
    """Three real files that no commit of the last ``untouched_for`` first-parent commits changed
    (so the patches apply to every base commit the run uses)."""
    touched = set(git(src, "log", "--first-parent", f"-n{untouched_for}", "--format=", "--name-only",
                      "HEAD").split())
    tracked = git(src, "ls-files").splitlines()
    wanted = [f for f, _ in FLASHINFER_EDITS if f in tracked and f not in touched]
    for f in tracked:
        if len(wanted) >= 3:
            break
        if f not in touched and f not in wanted and f.endswith((".py", ".h", ".cuh", ".md")):
            text = (src / f).read_text(errors="replace")
            if text.count("\n") >= 20:
                wanted.append(f)
    return wanted[:3]


def make_patches(src: Path, files: list[str], out: Path) -> Path:
    specs = []
    for i, f in enumerate(files):
        p = src / f
        original = p.read_bytes()
        lines = original.decode().splitlines(keepends=True)
        comment = "#" if f.endswith(".py") else "//"
        # A small real edit: a comment line near the top, and a changed line further down.
        lines.insert(min(5, len(lines)), f"{comment} bisect-lab benchmark patch {i}\n")
        j = min(len(lines) - 1, 15)
        lines[j] = lines[j].rstrip("\n") + f"  {comment} touched by p{i}\n"
        p.write_text("".join(lines))
        diff = subprocess.run(["git", "diff", "--no-color", "--", f], cwd=src, env=git_env(),
                              capture_output=True, text=True, check=True).stdout
        p.write_bytes(original)
        specs.append(PatchSpec(f"p{i}", diff, description=f"edit {f}"))
    return write_patchset(out, specs)


def timed(fn) -> float:
    t = time.perf_counter()
    assert fn().reused
    return time.perf_counter() - t


def stats(xs: list[float]) -> str:
    ms = [x * 1000 for x in xs]
    return f"median {statistics.median(ms):8.1f} ms   (min {min(ms):7.1f}, max {max(ms):7.1f}, n={len(ms)})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, help="git repository (bare or not) to clone from")
    ap.add_argument("--reps", type=int, default=9, help="never-seen arms per method")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N more arms of (a)")
    ap.add_argument("--workdir", default=None, help="temp folders go here (default: the system's)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-trees-real-", dir=args.workdir) as tmp:
        tmp = Path(tmp)
        src = tmp / "src"
        t0 = time.perf_counter()
        subprocess.run(["git", "clone", "-q", args.source, str(src)], check=True, env=git_env())
        clone_s = time.perf_counter() - t0
        n_arms = 4 * args.reps + args.profile + 4
        files = pick_files(src, n_arms + 1)
        ps = load_patchset(make_patches(src, files, tmp / "patches"))
        names = list(ps.names)
        patch_files = [str(p.path) for p in ps.patches]
        print(f"source: {args.source}")
        print(f"repository: {len(git(src, 'ls-files').splitlines())} files, "
              f"{git(src, 'rev-list', '--count', 'HEAD')} commits on HEAD (cloned in {clone_s:.1f} s); "
              f"patches: {', '.join(f'{p.name} ({f}, +{p.added})' for p, f in zip(ps.patches, files))}")
        print(f"git {git(src, '--version').split()[-1]}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}")

        host = LocalHost(cache_dir=tmp / "cache")
        target = Target(repo=str(src), ref="HEAD")
        tm = TreeManager(host, target, ps, max_trees=None)
        tm.resolve()                                            # clone cache filled before timing
        commits = git(src, "rev-list", "--first-parent", f"-n{n_arms}", "HEAD").splitlines()
        tm.prepare(names, commit=commits[-1])                   # warm-up: page cache, first worktree
        bare_prepare(tm.git_dir, str(tmp / "bare-warm"), commits[-2], patch_files)

        built = TreeManager(host, Target(repo=str(src), ref="HEAD", build="true"), ps, max_trees=None)
        built.resolve()

        # The host commands one never-seen arm starts, without and with a build step.
        real_run = host.run
        for label, manager, commit in (("", tm, commits[-3]), (" with build step", built, commits[-4])):
            calls: list[str] = []
            host.run = lambda *a, **k: calls.append(a[0] if isinstance(a[0], str) else " ".join(a[0])) or real_run(*a, **k)
            manager.prepare(names, commit=commit)
            host.run = real_run
            print(f"host commands of one never-seen arm{label}: {len(calls)}")
            for c in calls:
                print("   ", (c if "\n" not in c else c.split("\n", 1)[0] + " ...")[:110])

        def pair(manager: TreeManager, picks: list[str], build: str, label: str) -> tuple[list, list]:
            ours, bare = [], []
            for i in range(args.reps):
                c_ours, c_bare = picks[2 * i], picks[2 * i + 1]
                for which in (("ours", "bare") if i % 2 == 0 else ("bare", "ours")):
                    if which == "ours":
                        t = time.perf_counter()
                        tree = manager.prepare(names, commit=c_ours)
                        ours.append(time.perf_counter() - t)
                        assert not tree.reused
                    else:
                        t = time.perf_counter()
                        bare_prepare(tm.git_dir, str(tmp / f"bare-{label}-{i}"), c_bare, patch_files, build)
                        bare.append(time.perf_counter() - t)
            return ours, bare

        ours, bare = pair(tm, commits, "", "a")
        ours_b, bare_b = pair(built, commits[2 * args.reps:], "true", "c")
        # Cross-check: both methods produce the same files (worktree .git links aside).
        bare_prepare(tm.git_dir, str(tmp / "bare-check"), commits[0], patch_files)
        same = subprocess.run(["diff", "-r", "-q", "-x", ".git", tm.prepare(names, commit=commits[0]).path,
                               str(tmp / "bare-check")], capture_output=True, text=True)
        if same.returncode != 0:
            print("content differs between the two methods:\n" + same.stdout, file=sys.stderr)
            return 2
        # The first reuse of a never-seen arm: its verification is the first `git status` of the
        # fresh checkout, which re-hashes the files git wrote in the same second as the index
        # ("racily clean"); with a build step that status ran right after the build instead.
        first_a = [timed(lambda c=c: tm.prepare(names, commit=c)) for c in commits[0:2 * args.reps:2][1:]]
        first_c = [timed(lambda c=c: built.prepare(names, commit=c))
                   for c in commits[2 * args.reps:4 * args.reps:2]]
        reuse = []
        for _ in range(20):
            t = time.perf_counter()
            assert TreeManager(host, target, ps, max_trees=None).prepare(names, commit=commits[0]).reused
            reuse.append(time.perf_counter() - t)

        ratio = statistics.median(ours) / statistics.median(bare)
        paired = statistics.median(o / b for o, b in zip(ours, bare))
        print()
        print(f"(a) never-seen arm, TreeManager.prepare:          {stats(ours)}")
        print(f"(b) bare git worktree add --detach + {len(names)} git apply:  {stats(bare)}")
        print(f"    ratio of medians: {ratio:.2f}x, median of paired ratios: {paired:.2f}x  "
              f"(target <= 1.2x)  {'OK' if ratio <= 1.2 else 'MISSED'}")
        ratio_b = statistics.median(ours_b) / statistics.median(bare_b)
        print(f"(c) never-seen arm with build step 'true':        {stats(ours_b)}")
        print(f"    bare, then bash -c true in the tree:           {stats(bare_b)}")
        print(f"    ratio of medians: {ratio_b:.2f}x, median of paired ratios: "
              f"{statistics.median(o / b for o, b in zip(ours_b, bare_b)):.2f}x  "
              f"(target <= 1.2x)  {'OK' if ratio_b <= 1.2 else 'MISSED'}")
        print(f"    first reuse of an (a) arm:                     {stats(first_a)}")
        print(f"    first reuse of a (c) arm:                      {stats(first_c)}")
        print(f"    reuse of a prepared arm, fresh manager:       {stats(reuse)}")

        if args.profile:
            prof = cProfile.Profile()
            base = 4 * args.reps
            for i in range(args.profile):
                prof.enable()
                tm.prepare(names, commit=commits[base + i])
                prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
            print(f"\ncProfile of {args.profile} never-seen arms (cumulative):")
            print(s.getvalue())
        return 0 if ratio <= 1.2 and ratio_b <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
