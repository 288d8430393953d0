"""Measure the demo's planted ground truth: per-arm output throughput, median and CV.

Builds each arm the way bisect-lab does (a copy of demo/ with the arm's patches applied
by `git apply` in manifest order; eagle3-delegation is always in), then runs the demo
benchmark REPEAT times per arm, arms interleaved in a shuffled order each round so that
drift hits every arm alike.  Prints a Markdown table (for docs/demo.md).

    python benchmarks/demo_ground_truth.py [--repeat 5] [--arms "none" "all OEA_ENABLE=1" ...]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo"
PATCHES = ROOT / "patches" / "demo"
REQUIRED = "eagle3-delegation"
OPTIONAL = ["oea-topk", "mla-gather-cast", "nccl-env-propagation", "sm120-fixes"]
ALIASES = {"topk": "oea-topk", "oea": "oea-topk", "mla": "mla-gather-cast", "nccl": "nccl-env-propagation",
           "sm120": "sm120-fixes"}
# --device cpu unless the extra arguments say otherwise (the last --device wins)
BENCH = ["-m", "sglang_mini.bench_serving", "--device", "cpu", "--speculative-algorithm", "EAGLE3"]

DEFAULT_ARMS = [
    "none", "all",
    "all-minus topk", "all-minus mla", "all-minus nccl", "all-minus sm120",
    "only topk", "only mla", "only nccl", "only sm120",
    "none OEA_ENABLE=1", "only topk OEA_ENABLE=1", "all OEA_ENABLE=1",
    "none NCCL_ALGO=Tree", "only nccl NCCL_ALGO=Tree", "only nccl NCCL_PROTO=LL",
]


def parse_arm(spec: str) -> tuple[list[str], dict]:
    """A small subset of the arm-spec grammar: none | all | all-minus a,b | only a,b, then VAR=value."""
    words = spec.split()
    env = dict(w.split("=", 1) for w in words if "=" in w)
    sel = [w for w in words if "=" not in w]
    names = lambda s: [ALIASES.get(x, x) for x in s.split(",")]  # noqa: E731
    if sel[0] == "none":
        patches = []
    elif sel[0] == "all":
        patches = list(OPTIONAL)
    elif sel[0] == "all-minus":
        patches = [p for p in OPTIONAL if p not in names(sel[1])]
    elif sel[0] in ("only", "none-plus"):
        patches = names(sel[1])
    else:
        raise SystemExit(f"bad arm {spec!r}")
    return patches + [REQUIRED], env


def build(dest: Path, patches: list[str]) -> Path:
    order = [p["name"] for p in tomllib.loads((PATCHES / "patchset.toml").read_text())["patch"]]
    shutil.copytree(DEMO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for name in sorted(patches, key=order.index):
        subprocess.run(["git", "apply", str(PATCHES / f"{name}.patch")], cwd=dest, check=True)
    return dest


def run_once(tree: Path, env: dict, extra: list[str]) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "OEA_"))}
    e.update(env, PYTHONPATH=str(tree / "python"))
    out = tree / "bench.jsonl"
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, *BENCH, *extra, "--output-file", str(out)], cwd=tree, env=e,
                       capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"benchmark failed in {tree}: {r.stderr[-2000:]}")
    js = json.loads(out.read_text().splitlines()[-1])
    js["wall_s"] = wall
    return js


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--arms", nargs="+", default=DEFAULT_ARMS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write all raw results here")
    ap.add_argument("bench_args", nargs="*", help="extra benchmark arguments (after --)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="demo-gt-"))
    trees, envs = {}, {}
    for i, arm in enumerate(a.arms):
        patches, env = parse_arm(arm)
        key = tuple(sorted(patches))
        if key not in trees:
            trees[key] = build(tmp / f"t{len(trees)}", patches)
        envs[arm] = (trees[key], env)
    rng = random.Random(a.seed)
    results = {arm: [] for arm in a.arms}
    t_start = time.time()
    for rnd in range(a.repeat):
        order = list(a.arms)
        rng.shuffle(order)
        for arm in order:
            tree, env = envs[arm]
            results[arm].append(run_once(tree, env, a.bench_args))
        print(f"round {rnd + 1}/{a.repeat} done ({time.time() - t_start:.0f}s)", file=sys.stderr)
    base = statistics.median(r["output_throughput"] for r in results[a.arms[0]])
    print(f"| arm | n | median output tok/s | CV | vs `{a.arms[0]}` | accept length | verify path | "
          f"all-reduce (workers) | run wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arm in a.arms:
        rs = results[arm]
        v = [r["output_throughput"] for r in rs]
        med = statistics.median(v)
        cv = statistics.stdev(v) / statistics.mean(v) * 100 if len(v) > 1 else float("nan")
        print(f"| `{arm}` | {len(v)} | {med:.1f} | {cv:.1f}% | {100 * (med / base - 1):+.1f}% | "
              f"{rs[0]['accept_length']:.2f} | {rs[0]['verify_path']} | {rs[0]['all_reduce']} | "
              f"{statistics.median(r['wall_s'] for r in rs):.2f} |")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
