"""The bundled demo target (demo/, sglang_mini) and its patch sets (patches/demo).

Builds trees the way bisect-lab does (a copy of demo/ plus `git apply` of the selected
patches in manifest order), runs the real benchmark in subprocesses, and checks the
planted ground truth on what is deterministic (verify path, accept length, all-reduce
algorithm, worker environments), not on noisy timings.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo"
PATCHES = ROOT / "patches" / "demo"
OPTIONAL = ["oea-topk", "mla-gather-cast", "nccl-env-propagation", "sm120-fixes"]
REQUIRED = "eagle3-delegation"
# a short workload: the checks below are about behaviour, not speed
QUICK = ["--device", "cpu", "--num-prompts", "2", "--warmup-requests", "1", "--output-len", "32"]

pytestmark = pytest.mark.timeout(120)


def manifest_order() -> list[str]:
    return [p["name"] for p in tomllib.loads((PATCHES / "patchset.toml").read_text())["patch"]]


def build_tree(dest: Path, patches: list[str]) -> Path:
    shutil.copytree(DEMO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    order = manifest_order()
    for name in sorted(patches, key=order.index):
        r = subprocess.run(["git", "apply", str(PATCHES / f"{name}.patch")], cwd=dest,
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{name} does not apply on {patches}: {r.stderr}"
    return dest


def bench(tree: Path, *args: str, env: dict | None = None, spec: bool = True):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "OEA_"))}
    e["PYTHONPATH"] = str(tree / "python")
    e.update(env or {})
    out = tree / "bench.jsonl"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "sglang_mini.bench_serving", *QUICK, "--output-file", str(out), *args]
    if spec:
        cmd += ["--speculative-algorithm", "EAGLE3"]
    r = subprocess.run(cmd, cwd=tree, env=e, capture_output=True, text=True, timeout=90)
    js = json.loads(out.read_text().splitlines()[-1]) if r.returncode == 0 else None
    return r, js


def label(text: str, name: str) -> str:
    m = re.search(rf"^{re.escape(name)}:\s+(\S.*?)\s*$", text, re.M)
    assert m, f"no {name!r} in output:\n{text}"
    return m.group(1)


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("demo-trees")
    cache = {}

    def get(*patches: str) -> Path:
        key = tuple(sorted(patches))
        if key not in cache:
            cache[key] = build_tree(base / ("t%d" % len(cache)), list(key))
        return cache[key]
    return get


def test_manifest_names_and_aliases():
    data = tomllib.loads((PATCHES / "patchset.toml").read_text())["patch"]
    by = {p["name"]: p for p in data}
    assert manifest_order() == OPTIONAL + [REQUIRED]
    assert by["oea-topk"]["aliases"] == ["topk", "oea"]
    assert by["mla-gather-cast"]["aliases"] == ["mla"]
    assert by["nccl-env-propagation"]["aliases"] == ["nccl"]
    assert by["sm120-fixes"]["aliases"] == ["sm120"]
    assert by[REQUIRED]["aliases"] == ["eagle", "eagle3"] and by[REQUIRED]["required"] is True
    assert not any(by[n].get("required") for n in OPTIONAL)


def test_every_subset_applies_in_manifest_order(tmp_path):
    for k in range(len(OPTIONAL) + 1):
        for subset in itertools.combinations(OPTIONAL, k):
            build_tree(tmp_path / ("s" + "".join(str(OPTIONAL.index(n)) for n in subset)), [*subset, REQUIRED])


def test_each_patch_changes_only_its_story_files():
    files = {}
    for name in OPTIONAL + [REQUIRED]:
        text = (PATCHES / f"{name}.patch").read_text()
        files[name] = {Path(p).name for p in re.findall(r"^\+\+\+ b/(\S+)", text, re.M)}
    assert files["oea-topk"] == {"topk.py"}
    assert files["mla-gather-cast"] == {"mla_backend.py"}
    assert files["nccl-env-propagation"] == {"engine.py", "scheduler.py"}
    assert files["sm120-fixes"] == {"communicator.py", "server_args.py"}
    assert files[REQUIRED] == {"kimi_k25.py", "deepseek_v2.py"}


def test_pristine_refuses_speculation_but_serves_plain_decode(trees):
    tree = trees()
    r, _ = bench(tree)
    assert r.returncode == 1
    assert "SpeculativeDecodingNotSupported" in r.stderr and "EAGLE3" in r.stderr
    assert "Traceback" not in r.stderr
    r, js = bench(tree, spec=False)
    assert r.returncode == 0, r.stderr
    assert js["speculative_algorithm"] is None and js["output_throughput"] > 0


def test_output_is_sglang_bench_serving_format(trees):
    r, js = bench(trees(REQUIRED))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(r"^=+ Serving Benchmark Result =+$", out, re.M)
    for name in ("Successful requests", "Benchmark duration (s)", "Request throughput (req/s)",
                 "Input token throughput (tok/s)", "Output token throughput (tok/s)",
                 "Total token throughput (tok/s)", "Accept length", "Mean TTFT (ms)",
                 "Median TTFT (ms)", "Mean TPOT (ms)"):
        float(label(out, name))
    assert int(label(out, "Successful requests")) == 2
    assert abs(float(label(out, "Output token throughput (tok/s)")) - js["output_throughput"]) < 0.01
    for key in ("output_throughput", "request_throughput", "input_throughput", "total_throughput",
                "accept_length", "median_ttft_ms", "mean_tpot_ms", "verify_path", "cuda_graph"):
        assert key in js
    assert 1.5 < js["accept_length"] <= 4.0


def test_mla_gather_cast_knocks_verify_off_the_graph_path(trees):
    r0, base = bench(trees(REQUIRED))
    r1, mla = bench(trees("mla-gather-cast", REQUIRED))
    assert r0.returncode == 0 and r1.returncode == 0, r0.stderr + r1.stderr
    assert label(r0.stdout, "Verify path") == "fast" and label(r0.stdout, "Cuda graph") == "True"
    assert label(r1.stdout, "Verify path") == "extend" and label(r1.stdout, "Cuda graph") == "False"
    assert (base["verify_path"], base["cuda_graph"]) == ("fast", True)
    assert (mla["verify_path"], mla["cuda_graph"]) == ("extend", False)
    # the fp16 cache changes nothing the draft/verify agreement depends on
    assert abs(base["accept_length"] - mla["accept_length"]) < 0.1


def test_oea_changes_behaviour_only_with_oea_enable(trees):
    _, base = bench(trees(REQUIRED))
    _, env_only = bench(trees(REQUIRED), env={"OEA_ENABLE": "1"})
    _, patch_only = bench(trees("oea-topk", REQUIRED))
    r, both = bench(trees("oea-topk", REQUIRED), env={"OEA_ENABLE": "1"})
    assert r.returncode == 0, r.stderr
    # greedy decoding of seeded weights: the accept length is exact, not noisy
    assert env_only["accept_length"] == base["accept_length"]
    assert patch_only["accept_length"] == base["accept_length"]
    assert both["accept_length"] < base["accept_length"] - 0.2
    assert both["worker_env"]["0"].get("OEA_ENABLE") == "1"


def test_nccl_propagation_changes_what_the_workers_see(trees):
    env = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}
    r0, without = bench(trees(REQUIRED), env=env)
    r1, with_ = bench(trees("nccl-env-propagation", REQUIRED), env=env)
    assert r0.returncode == 0 and r1.returncode == 0, r0.stderr + r1.stderr
    # launcher + scheduler + detokenizer: the variables stay in the launcher without the patch
    assert without["worker_env"] == {"0": {}, "detokenizer": {}}
    assert len(set(without["worker_pids"])) == 2
    assert without["all_reduce"].startswith("ring/Simple")
    assert with_["worker_env"]["0"] == env == with_["worker_env"]["detokenizer"]
    assert with_["all_reduce"].startswith("tree/LL")
    assert label(r1.stdout, "All-reduce").startswith("tree/LL")


def test_nccl_algorithms_really_run_with_two_workers(trees):
    """tp=2: the all-reduce between the two schedulers follows what reached them."""
    tree = trees("nccl-env-propagation", REQUIRED)
    results = {}
    for algo, proto in (("Ring", "Simple"), ("Tree", "LL")):
        r, js = bench(tree, "--tp-size", "2", env={"NCCL_ALGO": algo, "NCCL_PROTO": proto})
        assert r.returncode == 0, r.stderr
        assert js["all_reduce"] == f"{algo.lower()}/{proto} (tp=2)"
        assert set(js["worker_env"]) == {"0", "1", "detokenizer"}
        results[algo] = js
    # the sums are bit-identical whatever the algorithm: the same tokens come out
    assert results["Ring"]["accept_length"] == results["Tree"]["accept_length"]
    assert results["Ring"]["sample_text"] == results["Tree"]["sample_text"]


def test_sm120_fixes_is_a_no_op_here(trees):
    _, base = bench(trees(REQUIRED))
    _, sm = bench(trees("sm120-fixes", REQUIRED), env={"NCCL_PROTO": "LL128"})
    assert sm["accept_length"] == base["accept_length"]
    assert sm["all_reduce"] == base["all_reduce"] and sm["verify_path"] == base["verify_path"]


def test_torch_runner_paths_without_a_gpu(trees):
    """The GPU code path (torch runner) on CPU: same planted behaviour, no CUDA graphs."""
    pytest.importorskip("torch")
    r, _ = bench(trees(), "--device", "torch")
    assert r.returncode == 1 and "SpeculativeDecodingNotSupported" in r.stderr
    r0, base = bench(trees(REQUIRED), "--device", "torch")
    r1, mla = bench(trees("mla-gather-cast", REQUIRED), "--device", "torch")
    assert r0.returncode == 0 and r1.returncode == 0, r0.stderr + r1.stderr
    assert base["verify_path"] == "fast" and mla["verify_path"] == "extend"
    assert base["cuda_graph"] is False and mla["cuda_graph"] is False     # no GPU here
    assert abs(base["accept_length"] - mla["accept_length"]) < 0.3


def test_torch_runner_tensor_parallel_without_a_gpu(trees):
    """tp=2 on the torch path: one process per rank, experts split, the MoE output summed
    by torch.distributed (gloo here, NCCL on GPUs) in lockstep on both paths of verify."""
    pytest.importorskip("torch")
    env = {"NCCL_PROTO": "Simple"}
    r0, one = bench(trees("nccl-env-propagation", REQUIRED), "--device", "torch", env=env)
    r1, two = bench(trees("nccl-env-propagation", REQUIRED), "--device", "torch", "--tp-size", "2", env=env)
    r2, mla = bench(trees("mla-gather-cast", REQUIRED), "--device", "torch", "--tp-size", "2", env=env)
    assert r0.returncode == 0 and r1.returncode == 0 and r2.returncode == 0, r0.stderr + r1.stderr + r2.stderr
    assert two["all_reduce"] == "gloo (tp=2)" and two["tp_size"] == 2
    assert two["worker_env"]["0"] == two["worker_env"]["1"] == env
    assert len(set(two["worker_pids"])) == 3            # two ranks and the detokenizer
    # same model, the expert sums split across ranks: bf16 rounding may move a token or two
    assert abs(two["accept_length"] - one["accept_length"]) < 0.3
    assert two["verify_path"] == "fast" and mla["verify_path"] == "extend"
    assert mla["worker_env"]["0"] == {}                  # without the propagation patch
