"""Benchmark a fixed workload and print SGLang ``bench_serving``-format results.

    python -m sglang_mini.bench_serving [--speculative-algorithm EAGLE3] [--output-file F]
    python -m sglang_mini.bench_serving --backend sglang --port P [--host H] [--max-concurrency C]

Without ``--backend`` (offline) it starts the engine itself, runs the workload and stops.
With ``--backend sglang`` it measures a running ``sglang_mini.launch_server`` over HTTP
(bench_online.py) and prints the same block and JSON line.

Requests run one at a time (batch 1, as in decode-latency-bound serving).  Warmup
requests run first and are not timed; throughput is measured over the timed requests
inside the workers (prefill + decode loop), not over process start-up.
"""
from __future__ import annotations

import os

# Before numpy loads in this process: the launcher sleeps while the workers compute.
for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_k, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402


def _pct(xs, q):
    return float(np.percentile(xs, q)) if xs else float("nan")


def make_workload(args, vocab_size: int) -> dict:
    rng = np.random.default_rng(args.seed + 1)
    def prompts(n):
        return [rng.integers(0, vocab_size, args.input_len).tolist() for _ in range(n)]
    return {"warmup_prompts": prompts(args.warmup_requests), "prompts": prompts(args.num_prompts),
            "output_len": args.output_len, "clock": args.clock}


def summarize(args, sa, res: dict, workers: list) -> dict:
    reqs = res["requests"]
    dur = res["duration"]
    n_in = sum(r["input_len"] for r in reqs)
    n_out = sum(r["output_len"] for r in reqs)
    ttfts = [r["ttft"] * 1e3 for r in reqs]
    tpots = [(r["latency"] - r["ttft"]) / (r["output_len"] - 1) * 1e3 for r in reqs if r["output_len"] > 1]
    itls = [x * 1e3 for r in reqs for x in r["itl"]]
    e2e = [r["latency"] * 1e3 for r in reqs]
    steps = sum(r["steps"] for r in reqs)
    acc = sum(r["accepted"] for r in reqs) / steps if steps else 1.0
    paths = sorted({r["verify_path"] for r in reqs if r["verify_path"]})
    return {
        "backend": "sglang-mini", "device": res["device"], "tp_size": sa.tp_size, "clock": args.clock,
        "speculative_algorithm": sa.speculative_algorithm, "gpu": res.get("gpu"),
        "completed": len(reqs), "duration": dur,
        "total_input_tokens": n_in, "total_output_tokens": n_out,
        "request_throughput": len(reqs) / dur, "input_throughput": n_in / dur,
        "output_throughput": n_out / dur, "total_throughput": (n_in + n_out) / dur,
        "accept_length": acc,
        "mean_e2e_latency_ms": statistics.fmean(e2e), "median_e2e_latency_ms": statistics.median(e2e),
        "mean_ttft_ms": statistics.fmean(ttfts), "median_ttft_ms": statistics.median(ttfts),
        "p99_ttft_ms": _pct(ttfts, 99),
        "mean_tpot_ms": statistics.fmean(tpots) if tpots else float("inf"),
        "median_tpot_ms": statistics.median(tpots) if tpots else float("inf"),
        "p99_tpot_ms": _pct(tpots, 99) if tpots else float("inf"),
        "mean_itl_ms": statistics.fmean(itls), "median_itl_ms": statistics.median(itls),
        "p99_itl_ms": _pct(itls, 99),
        "verify_path": "/".join(paths) or None,
        "cuda_graph": res["cuda_graph"],
        "all_reduce": workers[0]["all_reduce"],
        "worker_pids": [w["pid"] for w in workers],
        "sample_text": reqs[0].get("text", "")[:80] if reqs else "",
        "worker_env": {str(w["rank"]): w["env"] for w in workers},
    }


def print_result(m: dict) -> None:
    def row(label, value, fmt="{:.2f}"):
        v = fmt.format(value) if isinstance(value, float) else str(value)
        print(f"{label + ':':<40} {v:<10}")
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    row("Backend", m["backend"])
    row("Traffic request rate", "inf")
    row("Max request concurrency", m.get("max_concurrency", 1))
    row("Successful requests", m["completed"])
    row("Benchmark duration (s)", m["duration"])
    row("Total input tokens", m["total_input_tokens"])
    row("Total generated tokens", m["total_output_tokens"])
    row("Request throughput (req/s)", m["request_throughput"])
    row("Input token throughput (tok/s)", m["input_throughput"])
    row("Output token throughput (tok/s)", m["output_throughput"])
    row("Total token throughput (tok/s)", m["total_throughput"])
    row("Concurrency", m.get("concurrency", 1.0))
    if m["speculative_algorithm"]:
        row("Accept length", m["accept_length"])
    row("Verify path", m["verify_path"] or "none")
    row("Cuda graph", str(m["cuda_graph"]))
    row("All-reduce", m["all_reduce"])
    print("{s:{c}^{n}}".format(s="End-to-End Latency", n=50, c="-"))
    row("Mean E2E Latency (ms)", m["mean_e2e_latency_ms"])
    row("Median E2E Latency (ms)", m["median_e2e_latency_ms"])
    print("{s:{c}^{n}}".format(s="Time to First Token", n=50, c="-"))
    row("Mean TTFT (ms)", m["mean_ttft_ms"])
    row("Median TTFT (ms)", m["median_ttft_ms"])
    row("P99 TTFT (ms)", m["p99_ttft_ms"])
    print("{s:{c}^{n}}".format(s="Time per Output Token (excl. 1st token)", n=50, c="-"))
    row("Mean TPOT (ms)", m["mean_tpot_ms"])
    row("Median TPOT (ms)", m["median_tpot_ms"])
    row("P99 TPOT (ms)", m["p99_tpot_ms"])
    print("{s:{c}^{n}}".format(s="Inter-token Latency", n=50, c="-"))
    row("Mean ITL (ms)", m["mean_itl_ms"])
    row("Median ITL (ms)", m["median_itl_ms"])
    row("P99 ITL (ms)", m["p99_itl_ms"])
    print("=" * 50)


def _json_line(m: dict) -> str:
    # SGLang writes non-finite numbers as Infinity/NaN (not strict JSON); so do we
    return json.dumps(m, allow_nan=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_mini.bench_serving", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "torch"])
    ap.add_argument("--tp-size", type=int, default=0)
    ap.add_argument("--speculative-algorithm", default=None, help="EAGLE3 or none")
    ap.add_argument("--speculative-num-steps", type=int, default=3)
    ap.add_argument("--disable-cuda-graph", action="store_true")
    ap.add_argument("--num-prompts", type=int, default=None, help="timed requests")
    ap.add_argument("--warmup-requests", type=int, default=2)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="time the requests in wall time (default) or in the rank-0 worker's CPU "
                         "time: steadier on a shared, busy machine (CPU only)")
    ap.add_argument("--output-file", default=None, help="append one JSON line with the results")
    on = ap.add_argument_group("against a running server (sglang_mini.launch_server)")
    on.add_argument("--backend", default=None, help="sglang: measure the server at --host/--port over HTTP")
    on.add_argument("--host", default="127.0.0.1")
    on.add_argument("--port", type=int, default=30000)
    on.add_argument("--base-url", default=None, help="instead of --host/--port")
    on.add_argument("--max-concurrency", type=int, default=None, help="requests in flight (default 1)")
    on.add_argument("--request-timeout-s", type=float, default=600.0)
    # bench_serving's dataset spelling, for command lines written for SGLang
    on.add_argument("--dataset-name", default="random", choices=["random"])
    on.add_argument("--random-input-len", dest="input_len", type=int)
    on.add_argument("--random-output-len", dest="output_len", type=int)
    on.add_argument("--random-range-ratio", type=float, default=1.0, help="accepted; lengths are fixed")
    args = ap.parse_args(argv)
    if args.backend is not None:
        from .bench_online import run
        return run(args)

    from .srt.entrypoints.engine import Engine, EngineError
    from .srt.server_args import ServerArgs

    sa = ServerArgs(device=args.device, tp_size=args.tp_size, seed=args.seed,
                    speculative_algorithm=args.speculative_algorithm,
                    speculative_num_steps=args.speculative_num_steps,
                    disable_cuda_graph=args.disable_cuda_graph)
    try:
        engine = Engine(sa)
    except (EngineError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sa = engine.server_args
    gpu = sa.device == "cuda"
    if args.num_prompts is None:
        args.num_prompts = 8 if gpu else 16
    if args.output_len is None:
        args.output_len = 256 if gpu else 64
    try:
        res = engine.run_workload(make_workload(args, sa.vocab_size))
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        workers = engine.workers
        engine.shutdown()
    m = summarize(args, sa, res, workers)
    print(f"[sglang_mini] device={m['device']} tp={m['tp_size']} spec={m['speculative_algorithm']} "
          f"verify_path={m['verify_path']} cuda_graph={m['cuda_graph']} all_reduce={m['all_reduce']}")
    for w in workers:
        print(f"[sglang_mini] worker rank={w['rank']} pid={w['pid']} env={json.dumps(w['env'], sort_keys=True)}")
    print_result(m)
    if args.output_file:
        with open(args.output_file, "a") as f:
            f.write(_json_line(m) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
