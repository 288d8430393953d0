"""bench_serving against a running server (``--backend sglang --port P``).

Sends the workload as SGLang's native ``POST /generate`` requests, ``--max-concurrency``
at a time, and prints the same result block and JSON line as the offline benchmark, so
the ``sglang-bench-serving`` parser reads both.

Timing: by default (``--clock wall``) as SGLang's bench_serving does, on this side of the
connection: the benchmark duration is the wall time from the first timed request to the
last answer, each request's latency is its round trip. The server answers whole (no
streaming), so TTFT is the round trip less the server's own decode time. With
``--clock cpu`` the times are the ones the server reports in the rank-0 worker's CPU time
(``meta_info.sglang_mini.cpu_s``) and the duration is their sum (the server runs one
request at a time): steadier on a busy shared machine, and still every planted effect,
including the launch's level offset.
"""
from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np

BACKENDS = ("sglang", "sglang-native")
_TEXT_ALPHABET = "abcdefghijklmnopqrstuvwxyz "


class ClientError(RuntimeError):
    pass


def _base_url(args) -> str:
    if args.base_url:
        return args.base_url.rstrip("/")
    host = f"[{args.host}]" if ":" in args.host else args.host
    return f"http://{host}:{args.port}"


def _call(url: str, body: dict | None, timeout: float) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace").strip()[:300]
        raise ClientError(f"{url}: HTTP {e.code} {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ClientError(f"cannot reach the server at {url}: {reason}") from None
    except json.JSONDecodeError:
        raise ClientError(f"{url}: the answer is not JSON") from None


def make_prompts(args, n: int, offset: int = 0) -> list[str]:
    """Seeded random text, one byte (= one demo token) per input token."""
    rng = np.random.default_rng(args.seed + 1 + offset)
    return ["".join(_TEXT_ALPHABET[i] for i in rng.integers(0, len(_TEXT_ALPHABET), args.input_len))
            for _ in range(n)]


def _request(url: str, prompt: str, output_len: int, timeout: float) -> dict:
    t0 = time.perf_counter()
    out = _call(url, {"text": prompt, "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True}},
                timeout)
    rtt = time.perf_counter() - t0
    meta = out.get("meta_info") or {}
    mini = meta.get("sglang_mini") or {}
    if "completion_tokens" not in meta:
        raise ClientError(f"{url}: the answer has no meta_info.completion_tokens")
    return {"rtt": rtt, "start": t0, "end": t0 + rtt, "meta": meta, "mini": mini, "text": out.get("text", "")}


def _request_record(r: dict, clock: str) -> dict:
    """One request in the offline benchmark's record shape (seconds)."""
    meta, mini = r["meta"], r["mini"]
    server_latency = mini.get("latency_s") or meta.get("e2e_latency") or r["rtt"]
    server_ttft = mini.get("ttft_s", 0.0)
    itl = list(mini.get("itl_s") or [])
    if clock == "cpu":
        if "cpu_s" not in mini:
            raise ClientError("--clock cpu needs a sglang_mini server (meta_info.sglang_mini.cpu_s)")
        latency = mini["cpu_s"]
        scale = latency / server_latency if server_latency > 0 else 1.0
        ttft, itl = server_ttft * scale, [x * scale for x in itl]
    else:
        latency = r["rtt"]
        # no streaming: the first token reached us when the whole answer did, less the decode
        ttft = max(0.0, latency - (server_latency - server_ttft))
    steps = mini.get("steps", meta.get("spec_verify_ct", 0))
    return {"ttft": ttft, "latency": latency, "itl": itl, "output_len": int(meta["completion_tokens"]),
            "input_len": int(meta.get("prompt_tokens", 0)), "steps": steps,
            "accepted": mini.get("accepted", int(meta["completion_tokens"]) - 1),
            "verify_path": mini.get("verify_path"), "text": r["text"], "cuda_graph": mini.get("cuda_graph")}


def run(args) -> int:
    """The online benchmark; returns the exit code."""
    from .bench_serving import _json_line, print_result, summarize

    if args.backend not in BACKENDS:
        print(f"error: --backend {args.backend!r}: this client speaks SGLang's native API "
              f"({', '.join(BACKENDS)})", file=sys.stderr)
        return 2
    if args.max_concurrency is not None and args.max_concurrency < 1:
        print("error: --max-concurrency must be at least 1", file=sys.stderr)
        return 2
    base = _base_url(args)
    timeout = args.request_timeout_s
    try:
        info = _call(base + "/get_server_info", None, timeout)
        if args.num_prompts is None:
            args.num_prompts = 8 if info.get("device") == "cuda" else 16
        if args.output_len is None:
            args.output_len = 256 if info.get("device") == "cuda" else 64
        url = base + "/generate"
        for p in make_prompts(args, args.warmup_requests, offset=1000):
            _request(url, p, args.output_len, timeout)
        prompts = make_prompts(args, args.num_prompts)
        conc = args.max_concurrency or 1
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=conc) as pool:
            raw = list(pool.map(lambda p: _request(url, p, args.output_len, timeout), prompts))
        wall = time.perf_counter() - t0
        reqs = [_request_record(r, args.clock) for r in raw]
    except ClientError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    duration = sum(r["latency"] for r in reqs) if args.clock == "cpu" else wall
    workers = [w for w in info.get("workers", []) if w.get("rank") != "detokenizer"] or [
        {"rank": 0, "pid": None, "env": {}, "all_reduce": None}]
    res = {"requests": reqs, "duration": duration, "device": info.get("device"), "gpu": None,
           "cuda_graph": bool(reqs and reqs[-1]["cuda_graph"])}
    sa = SimpleNamespace(tp_size=info.get("tp_size"), speculative_algorithm=info.get("speculative_algorithm"))
    m = summarize(args, sa, res, workers)
    m.update({"backend": args.backend, "max_concurrency": conc,
              "concurrency": sum(r["rtt"] for r in raw) / wall if wall > 0 else 1.0,
              "base_url": base, "server_pid": info.get("pid"), "model_path": info.get("model_path"),
              "server_ready_s": info.get("ready_s"), "server_level_offset": info.get("level_offset"),
              "server_time_factor": info.get("time_factor")})
    print(f"[sglang_mini] server={base} device={m['device']} tp={m['tp_size']} spec={m['speculative_algorithm']} "
          f"verify_path={m['verify_path']} cuda_graph={m['cuda_graph']} all_reduce={m['all_reduce']}")
    for w in workers:
        print(f"[sglang_mini] worker rank={w['rank']} pid={w['pid']} env={json.dumps(w['env'], sort_keys=True)}")
    print_result(m)
    if args.output_file:
        with open(args.output_file, "a") as f:
            f.write(_json_line(m) + "\n")
    return 0
