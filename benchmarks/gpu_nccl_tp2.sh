#!/usr/bin/env bash
# The NCCL story on two GPUs (docs/gpu.md, section 5): run from the repository root on a host
# with 2 GPUs and torch, e.g.
#   bash benchmarks/gpu_nccl_tp2.sh OUT probe run       # facts, one direct run, the env sweep
#   bash benchmarks/gpu_nccl_tp2.sh OUT propagation     # NCCL_P2P_DISABLE=1 with and without the propagation patch
#   bash benchmarks/gpu_nccl_tp2.sh OUT check           # the NCCL factor alone, and what NCCL said per trial
#   bash benchmarks/gpu_nccl_tp2.sh OUT attribute       # bisect-lab attribute: patch and NCCL factors
# Everything it prints is also kept under OUT (transcripts, the results database, reports).
set -uo pipefail
OUT=${1:?usage: gpu_nccl_tp2.sh OUT PHASE...}; shift
mkdir -p "$OUT"
ROOT=$PWD
# Never NVLink multicast, in any process (it can take a shared host's GPUs out of service).
export PYTHONPATH=$ROOT PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
command -v python >/dev/null || ln -sf "$(command -v python3)" /usr/local/bin/python
EXP=experiments/demo-gpu-tp2.toml
BL=(python3 -m bisect_lab --results "$OUT/results")

for phase in "$@"; do
case $phase in
probe)
  { nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
    python3 -c "import torch; print('torch', torch.__version__, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())"
  } 2>&1 | tee "$OUT/probe.txt"
  # one direct run of the benchmark on a patched copy, NCCL's own log included
  tree=$(mktemp -d)
  cp -r demo/. "$tree"
  (cd "$tree" && git apply "$ROOT/patches/demo/nccl-env-propagation.patch" "$ROOT/patches/demo/eagle3-delegation.patch")
  (cd "$tree" && PYTHONPATH=$tree/python NCCL_DEBUG=INFO NCCL_PROTO=Simple timeout 170 \
     python3 -m sglang_mini.bench_serving --device cuda --tp-size 2 --speculative-algorithm EAGLE3 \
       --num-prompts 4 --output-len 96 --warmup-requests 1) > "$OUT/direct_tp2.txt" 2>&1
  rc=$?
  echo "direct tp=2 run: exit $rc"
  grep -E "throughput|Verify|Cuda graph|All-reduce|NCCL version|set by environment|Init COMPLETE" "$OUT/direct_tp2.txt" | head -30
  [ $rc = 0 ] || { tail -40 "$OUT/direct_tp2.txt"; exit 1; }     # no point in the later phases
  ;;
run)
  "${BL[@]}" run "$EXP" --repeat 3 \
      --patches "only nccl" --patches "only nccl NCCL_PROTO=Simple" --patches "only nccl NCCL_PROTO=LL" \
      --patches "only nccl NCCL_ALGO=Tree" --patches "only nccl NCCL_P2P_LEVEL=LOC" \
      --patches "none NCCL_PROTO=Simple NCCL_P2P_LEVEL=LOC" 2>&1 | tee "$OUT/run_tp2.txt"
  "${BL[@]}" report latest --format html --out "$OUT/run_tp2.html"
  ;;
propagation)
  # the story's question: does NCCL tuning reach the workers, and does it matter?
  "${BL[@]}" run "$EXP" --repeat 2 --patches "only nccl" --patches "none NCCL_P2P_DISABLE=1" \
      --patches "only nccl NCCL_P2P_DISABLE=1" 2>&1 | tee "$OUT/propagation_tp2.txt"
  "${BL[@]}" report latest --format html --out "$OUT/propagation_tp2.html"
  ;;
check)
  # the NCCL factor on its own (a few trials): does it run, and how large is it?
  "${BL[@]}" run "$EXP" --repeat 2 --patches "only nccl" --patches "only nccl NCCL_P2P_DISABLE=1" 2>&1 | tee "$OUT/check_tp2.txt"
  python3 - "$OUT/results" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1] + "/bisect-lab.sqlite")
for arm, extra in db.execute("SELECT arm, extra FROM trials ORDER BY campaign, trial"):
    n = json.loads(extra).get("nccl", {})
    print(f"{arm:45.45} NCCL {n.get('version')} ranks {n.get('ranks')} env {n.get('env')}")
PY
  ;;
attribute)
  timeout -s INT "${ATTR_TIMEOUT:-440}" "${BL[@]}" attribute "$EXP" --good "${GOOD:-only nccl OEA_ENABLE=1}" \
      --bad "${BAD:-only nccl,oea,sm120 OEA_ENABLE=1 NCCL_P2P_DISABLE=1 NCCL_ALGO=Ring}" \
      --max-trials "${MAX_TRIALS:-40}" 2>&1 | tee "$OUT/attribute_tp2.txt"
  "${BL[@]}" report latest --format html --out "$OUT/attribute_tp2.html"
  ;;
*) echo "unknown phase $phase (probe, run, propagation, check, attribute)"; exit 2 ;;
esac
done
