"""A toy target for end-to-end tests of the CLI: a real git repo, real patches, a real benchmark process.

The benchmark prints SGLang ``bench_serving`` output. Its throughput is the product
of factors that live in the tree (one file per patch) and in the environment, with
real random noise (CV about 1%), so the tests check that bisect-lab recovers a
planted ground truth rather than a hard-coded answer (``TOY_TTFT`` scales its median TTFT alone).
Env knobs make it crash, hang, print garbage, or spawn workers with a clean environment.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from gitrepos import GitRepo, PatchSpec, write_patchset

BENCH = r'''
import os, random, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from knobs import FACTORS
if os.environ.get("TOY_CRASH"):
    print("loading model...", flush=True)
    print("RuntimeError: CUDA error: out of memory (toy)", file=sys.stderr)
    sys.exit(3)
if os.environ.get("TOY_HANG"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)
if os.environ.get("TOY_GARBAGE"):
    print("#$%^ no numbers here")
    sys.exit(0)
if os.environ.get("TOY_SPAWN"):
    # A worker started with a clean environment, like a launcher that filters env vars.
    subprocess.run([sys.executable, "-c", "import time; time.sleep(1.0)"], env={"PATH": os.environ.get("PATH", "")})
factor = 1.0
for name, f in FACTORS.items():
    factor *= f
if os.environ.get("TOY_GATE") == "1" and os.path.exists(os.path.join(os.path.dirname(__file__), "gated_on")):
    factor *= 0.80
tput = 100.0 * factor * random.gauss(1.0, float(os.environ.get("TOY_CV", "0.01")))
print("============ Serving Benchmark Result ============")
print(f"{'Successful requests:':<40}{32:<10}")
print(f"{'Benchmark duration (s):':<40}{1.23:<10.2f}")
print(f"{'Output token throughput (tok/s):':<40}{tput:<10.2f}")
print(f"{'Total token throughput (tok/s):':<40}{tput * 2:<10.2f}")
# latency moves on its own knob: a secondary metric that throughput does not reflect
ttft = 50.0 * float(os.environ.get("TOY_TTFT", "1")) * random.gauss(1.0, float(os.environ.get("TOY_CV", "0.01")))
print(f"{'Median TTFT (ms):':<40}{ttft:<10.2f}")
print("==================================================")
'''


def make_toy(root: Path, *, effects: dict[str, float] | None = None, required: tuple[str, ...] = (),
             bench_command: str = "python3 bench.py", timeout_s: float = 20, extra_toml: str = "",
             design: str = "", conflict: bool = False) -> Path:
    """Build repo + patch set + experiment under ``root``; return the experiment file.

    ``effects``: patch name -> throughput factor when applied (1.0 = no-op). A patch
    named ``gated`` also creates a marker file that makes TOY_GATE=1 cost 20%.
    ``conflict``: add a patch ``clash`` that conflicts with the first one.
    """
    effects = effects if effects is not None else {"slow": 0.7, "noop": 1.0, "gated": 1.0, "fast": 1.0}
    repo = GitRepo.init(root / "target")
    files = {"bench.py": BENCH, "README": "toy target\n", "knobs.py": textwrap.dedent('''
        # Loads every knobs_<name>.py present in the tree: each patch adds one.
        import glob, os
        FACTORS = {}
        for f in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "knobs_*.py"))):
            exec(open(f).read())
    ''')}
    repo.commit("toy target", files)
    specs = []
    names = list(effects)
    for name, factor in effects.items():
        edits = {f"knobs_{name}.py": f"FACTORS[{name!r}] = {factor!r}\n"}
        if name == "gated":
            edits["gated_on"] = "1\n"
        specs.append(PatchSpec(name, repo.patch(edits), required=name in required))
    if conflict and names:
        specs.append(PatchSpec("clash", repo.patch({f"knobs_{names[0]}.py": "FACTORS['clash'] = 1.0\n"})))
    write_patchset(root / "patches", specs)
    exp = root / "toy.toml"
    exp.write_text(textwrap.dedent(f"""
        [target]
        repo = "target"
        ref = "main"
        patches = "patches"

        [benchmark]
        command = "{bench_command}"
        timeout_s = {timeout_s}
        parser = "sglang-bench-serving"
        metric = "output_throughput"

        [gpu]
        enabled = false

        [design]
        seed = 1
        repeat = 4
        retries = 1
        {design}
    """) + textwrap.dedent(extra_toml))
    return exp
