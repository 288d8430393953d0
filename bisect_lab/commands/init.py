"""``bisect-lab init [REPO] [--out FILE]``: a starting experiment file and patch set for a repository.

The repository's uncommitted changes become the patch set (``patches capture``); the experiment
names the repository and the commit they apply to. The benchmark is left for the user: its
command and metric pattern are written as :data:`FILL_IN` placeholders, which ``check`` refuses.

Where it writes: never into the repository. By default a folder beside it,
``<repo>-bisect-lab/`` holding ``experiment.toml`` and ``patches/``; with ``--out FILE`` the
experiment is FILE and the patch set the folder ``<FILE without .toml>-patches`` beside it.
Nothing that exists is overwritten.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..errors import EXIT_OK, UsageError
from . import _options
from ._context import Context, to_json

FILL_IN = "FILL-IN"


def setup_arguments(subparsers):
    p = subparsers.add_parser("init", help="write a starting experiment (and a patch set from the uncommitted "
                                           "changes) for a repository")
    p.add_argument("repo", nargs="?", default=".", help="the repository's checkout (default: the current folder); "
                                                        "never modified")
    p.add_argument("--out", metavar="FILE", help="experiment file to write (default <repo>-bisect-lab/experiment.toml "
                                                 "beside the repository); its patch set goes to <FILE>-patches")
    _options.add_json(p, help=_options.JSON_HELP)
    p.set_defaults(func=run_from_args)
    return p


def run_from_args(args) -> int:
    return run(Context.from_args(args), args.repo, out=args.out)


def _toml(s: str) -> str:
    return json.dumps(s)          # JSON string escapes are valid TOML basic-string escapes


def _checkout_top(repo: Path) -> Path:
    from ..capture import _open_repo
    r = _open_repo(repo)
    try:
        return Path(r.working_tree_dir).resolve()
    finally:
        r.close()


def _head(top: Path) -> str:
    import subprocess
    p = subprocess.run(["git", "-C", str(top), "rev-parse", "--verify", "-q", "HEAD^{commit}"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise UsageError(f"{top}: the repository has no commit yet; commit something first")
    return p.stdout.strip()


def run(ctx: Context, repo: str, *, out: str | None = None) -> int:
    """Write the experiment file (and the patch set of ``repo``'s uncommitted changes, when it has
    any) and say what to do next; the repository is never modified."""
    folder = Path(repo).expanduser()
    if not folder.is_dir():
        raise UsageError(f"init: {repo}: no such folder")
    top = _checkout_top(folder.resolve())
    if out:
        exp_file = Path(out).expanduser().resolve()
        if exp_file.suffix != ".toml":
            raise UsageError(f"init: --out {out}: the experiment file's name must end in .toml")
        patches = exp_file.with_name(exp_file.stem + "-patches")
    else:
        exp_file = (top.parent / f"{top.name}-bisect-lab" / "experiment.toml").resolve()
        patches = exp_file.parent / "patches"
    for p in (exp_file, patches):
        if p == top or p.is_relative_to(top):
            raise UsageError(f"init: {p} is inside the repository {top}; bisect-lab never writes there: "
                             "give --out outside it")
        if p.exists():
            raise UsageError(f"init: {p} already exists; not overwritten (remove it or give another --out)")
    base = _head(top)
    exp_file.parent.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    try:
        from ..capture import capture
        from ..patchset import load_patchset
        capture(top, patches)
        names = list(load_patchset(patches).names)
    except UsageError as e:
        if "nothing to capture" not in str(e):
            raise
    exp_file.write_text(_experiment_text(exp_file, top, base, patches if names else None))
    steps = [f"edit {exp_file}: replace each {FILL_IN} in [benchmark] (the command and the pattern of its number)",
             f"bisect-lab check {exp_file}    # validates it, shows what would run, probes the noise",
             (f"bisect-lab run {exp_file}    # all {len(names)} captured patch(es) against none" if names else
              f"bisect-lab bisect {exp_file} --good REF --bad {base[:12]}    # which commit changed it")]
    if ctx.json:
        print(to_json({"experiment": str(exp_file), "patches": str(patches) if names else None,
                       "patch_names": names, "repo": str(top), "base": base, "next": steps}))
        return EXIT_OK
    print(f"wrote {exp_file}")
    if names:
        print(f"captured {len(names)} patch(es) from the uncommitted changes into {patches}: {', '.join(names)}")
    else:
        print("the checkout has no uncommitted changes: no patch set (add one later with `bisect-lab patches capture`)")
    print("next:")
    for i, s in enumerate(steps, 1):
        print(f"  {i}. {s}")
    return EXIT_OK


def _experiment_text(exp_file: Path, top: Path, base: str, patches: Path | None) -> str:
    here = exp_file.parent
    rel = lambda p: os.path.relpath(p, here)       # the folder can move with its repository
    lines = [f"# Written by bisect-lab init for {top}.",
             f"# Every {FILL_IN} below must be replaced before a campaign: `bisect-lab check` refuses them.",
             "", "[target]", f"repo = {_toml(rel(top))}",
             f"ref = {_toml(base)}    # the commit the patches apply to (HEAD when init ran)"]
    if patches is not None:
        lines.append(f"patches = {_toml(rel(patches))}")
    lines += ["# build = \"pip install -e .\"    # a build step run once per tree, if the benchmark needs one",
              "", "[benchmark]",
              "# Runs in the prepared tree; {out} is an empty folder per trial for result files.",
              f"command = {_toml(FILL_IN + ': your benchmark command, e.g. python3 bench.py --out {out}/result.json')}",
              "timeout_s = 600",
              "parser = \"regex\"               # or sglang-bench-serving, json, ...",
              "metric = \"throughput\"",
              "higher_is_better = true        # false for a latency or a time",
              "warmup = 1                     # discarded trials per arm at the start",
              "", "[benchmark.patterns]",
              f"throughput = {_toml(FILL_IN + ': a regex with one group around the number, e.g. throughput: ([0-9.]+)')}",
              "", "[design]", "repeat = 5", "min_effect = 0.02", ""]
    return "\n".join(lines)
