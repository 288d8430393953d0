#!/usr/bin/env bash
# The editable-install trap on a real GPU with a real library (run on the GPU machine, from the
# repository root, bisect-lab not installed: PYTHONPATH=. is set here).
#
# The target is a git repository of HF transformers' own source, package at the repository root
# (vLLM's layout), while the machine's site-packages holds transformers too. A benchmark script
# outside the package imports transformers and times a bf16 matmul on the GPU. A patch marks the
# tree's copy (transformers.BISECT_LAB_PATCHED = True) and the benchmark prints whether the copy it
# imported had it.
#   1. pythonpath = []     -> the benchmark imports site-packages' copy: every trial must be
#                             import-check-failed (naming the copy), exit 4 -- not "ok".
#   2. pythonpath = ["."]  -> the tree's copy: trials ok, the patched arm sees its patch, each trial
#                             records where transformers came from (inside the tree).
# Also `gpu status` and `gpu reset` against the real NVML (reset exit code 0 when idle).
# Usage: bash benchmarks/gpu_provenance_check.sh OUTDIR
set -uo pipefail
OUT=${1:?OUTDIR}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=$(mktemp -d)
if [ -n "${BL_DRY:-}" ]; then   # a dry run on a machine without torch: a fake installed copy
  mkdir -p "$W/site/transformers" && echo 'X = 1' > "$W/site/transformers/__init__.py"
  export PYTHONPATH=$PYTHONPATH:$W/site
fi
SITE=$(python3 -c 'import transformers, os; print(os.path.dirname(transformers.__file__))')
echo "site-packages copy: $SITE"
mkdir -p "$W/tgt" && cp -r "$SITE" "$W/tgt/transformers"
( cd "$W/tgt" && git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm "transformers source" )
mkdir -p "$W/patches"
( cd "$W/tgt" && printf '\nBISECT_LAB_PATCHED = True\n' >> transformers/__init__.py && git diff > "$W/patches/mark.patch" && git checkout -q -- . )
cat > "$W/patches/patchset.toml" <<'T'
[[patch]]
name = "mark"
file = "mark.patch"
description = "marks the tree's copy of transformers"
T
if [ -n "${BL_DRY:-}" ]; then
cat > "$W/bench.py" <<'B'
import transformers
print("transformers from", transformers.__file__, "patched", getattr(transformers, "BISECT_LAB_PATCHED", False))
print("throughput: 100.0")
B
else
cat > "$W/bench.py" <<'B'
import time, torch, transformers
# transformers replaces its module by a lazy one at the end of __init__: read the file, not an attribute
print("transformers from", transformers.__file__, "patched", "BISECT_LAB_PATCHED" in open(transformers.__file__).read())
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ a
torch.cuda.synchronize(); t = time.perf_counter(); n = 50
for _ in range(n): a @ a
torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"throughput: {n * 2 * 4096**3 / dt / 1e12:.1f}")
B
fi
for pp in '[]' '["."]'; do
  tag=$([ "$pp" = "[]" ] && echo noparth || echo tree)
  cat > "$W/exp-$tag.toml" <<T
[target]
repo = "$W/tgt"
ref = "HEAD"
patches = "$W/patches"
pythonpath = $pp
import_check = "transformers"
[benchmark]
command = "python3 $W/bench.py"
timeout_s = 120
parser = "regex"
metric = "throughput"
[benchmark.patterns]
throughput = 'throughput: ([0-9.]+)'
[gpu]
idle_timeout_s = 30
[design]
max_trials = 10
T
  echo "=== pythonpath = $pp"
  python3 -m bisect_lab --results "$OUT/res-$tag" --cache "$W/cache" run "$W/exp-$tag.toml" \
      --patches none --patches all --repeat 2 --json > "$OUT/run-$tag.json" 2> "$OUT/run-$tag.err"
  echo "exit $?"; tail -5 "$OUT/run-$tag.err"; head -c 1500 "$OUT/run-$tag.json"; echo
  python3 - "$OUT/res-$tag" <<'P'
import sys, bisect_lab
df = bisect_lab.load(sys.argv[1]).trials()
print(df[["arm", "status"]].value_counts().to_string())
from bisect_lab.store import Store
with Store(sys.argv[1], read_only=True) as s:
    for c in s.campaigns():
        for t in s.trials(c.id):
            x = s.trial_extra(c.id, t.trial) or {}
            print(t.trial, t.arm, t.status.value, (t.error or "")[:200], x.get("import"), (x.get("stdout_tail") or "")[:160].replace("\n", " | "))
P
done
echo "=== gpu status / reset"
python3 -m bisect_lab gpu status --json > "$OUT/gpu-status.json"; echo "status exit $?"
python3 -m bisect_lab gpu reset --json > "$OUT/gpu-reset.json"; echo "reset exit $?"; head -c 600 "$OUT/gpu-reset.json"; echo
