"""A tiny benchmark target for the sweep, plugin and report tests: a real git repository, a real
patch set, a real benchmark process that prints SGLang ``bench_serving`` output.

Throughput = 1000 x ``speed.txt`` (committed in the repo) x each ``factors/*.txt`` present (patches add
them) x (1 + seeded gaussian noise of CV ``TOY_CV``). The noise seed is a counter kept in the file
named by ``TOY_STATE``, so a whole test is deterministic while every trial still differs.
"""
from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

BENCH = r'''
import glob, os, random, sys
here = os.path.dirname(os.path.abspath(__file__))
state = os.environ.get("TOY_STATE")
n = 0
if state:
    try:
        n = int(open(state).read() or 0)
    except FileNotFoundError:
        n = 0
    open(state, "w").write(str(n + 1))
rng = random.Random(int(os.environ.get("TOY_SEED", "0")) * 100003 + n)
speed = float(open(os.path.join(here, "speed.txt")).read())
for f in sorted(glob.glob(os.path.join(here, "factors", "*.txt"))):
    speed *= float(open(f).read())
if os.environ.get("TOY_CRASH"):
    print("RuntimeError: CUDA error: out of memory (toy)", file=sys.stderr)
    sys.exit(3)
tput = 1000.0 * speed * (1 + rng.gauss(0, float(os.environ.get("TOY_CV", "0.01"))))
print("============ Serving Benchmark Result ============")
print(f"{'Successful requests:':<40}{32:<10}")
print(f"{'Benchmark duration (s):':<40}{1.23:<10.2f}")
print(f"{'Output token throughput (tok/s):':<40}{tput:<10.2f}")
print(f"{'Total token throughput (tok/s):':<40}{tput * 2:<10.2f}")
print("==================================================")
'''

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Toy", "GIT_AUTHOR_EMAIL": "toy@example.com",
    "GIT_COMMITTER_NAME": "Toy", "GIT_COMMITTER_EMAIL": "toy@example.com",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
}


def git(cwd, *args) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    p = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    if p.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {p.stderr}")
    return p.stdout.strip()


def _factor_patch(name: str, factor: float) -> str:
    return textwrap.dedent(f"""\
        diff --git a/factors/{name}.txt b/factors/{name}.txt
        new file mode 100644
        --- /dev/null
        +++ b/factors/{name}.txt
        @@ -0,0 +1 @@
        +{factor}
        """)


class Toy:
    """The target repository plus its experiment file."""

    def __init__(self, root: Path, *, patches: dict[str, float] | None = None, speed: float = 1.0,
                 cv: float = 0.01, seed: int = 0, repeat: int = 3, min_effect: float = 0.02, warmup: int = 0):
        self.root = Path(root)
        self.repo = self.root / "target"
        self.repo.mkdir(parents=True)
        git(self.repo, "init", "-q", "-b", "main")
        (self.repo / "bench.py").write_text(BENCH)
        (self.repo / "factors").mkdir()
        (self.repo / "factors" / "README").write_text("one factor file per patch\n")
        self.commit(speed, "initial: the toy engine")
        patches = patches if patches is not None else {"slow": 0.75, "noop": 1.0}
        ps = self.root / "patches"
        ps.mkdir()
        manifest = []
        for name, f in patches.items():
            (ps / f"{name}.patch").write_text(_factor_patch(name, f))
            manifest.append(f'[[patch]]\nname = "{name}"\nfile = "{name}.patch"\n'
                            f'description = "multiplies throughput by {f}"\n')
        (ps / "patchset.toml").write_text("\n".join(manifest))
        self.state = self.root / "noise-counter"
        self.experiment = self.root / "toy.toml"
        self.experiment.write_text(textwrap.dedent(f"""\
            name = "toy"
            [target]
            repo = "target"
            ref = "main"
            patches = "patches"
            [benchmark]
            command = "python3 bench.py"
            timeout_s = 30
            parser = "sglang-bench-serving"
            metric = "output_throughput"
            warmup = {warmup}
            [env]
            TOY_STATE = "{self.state}"
            TOY_CV = "{cv}"
            TOY_SEED = "{seed}"
            [gpu]
            enabled = false
            [design]
            seed = {seed}
            repeat = {repeat}
            min_effect = {min_effect}
            retries = 0
            """))

    def commit(self, speed: float, message: str) -> str:
        """Commit a new ``speed.txt`` (the planted performance of the code at that commit)."""
        (self.repo / "speed.txt").write_text(f"{speed}\n")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.repo, "rev-parse", "HEAD")

    def touch(self, message: str) -> str:
        """A commit that changes nothing about speed."""
        (self.repo / "CHANGES").write_text(((self.repo / "CHANGES").read_text() if (self.repo / "CHANGES").exists()
                                            else "") + message + "\n")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", message)
        return git(self.repo, "rev-parse", "HEAD")
