"""Serve the demo engine over HTTP, in the shape of SGLang's ``launch_server``.

    python -m sglang_mini.launch_server --port 30000 [--device auto|cpu|cuda|torch]
        [--tp-size N] [--speculative-algorithm EAGLE3] [--disable-cuda-graph]

Endpoints (SGLang's native API, stdlib ``http.server``):

- ``GET /health``: 200 once the server is ready, 503 while it launches.
- ``GET /get_model_info``: model path (a label here), vocabulary, device, launch facts.
- ``GET /get_server_info``: the workers (pids, the NCCL_* / OEA_* variables they see,
  all-reduce algorithm), the same facts ``bench_serving`` prints offline.
- ``POST /generate``: ``{"text": ..., "sampling_params": {"max_new_tokens": N}}`` (or
  ``"input_ids"``) -> ``{"text": ..., "meta_info": {"completion_tokens": N, ...}}``.

Requests run one at a time (batch 1), through the same engine, patches and worker
environment as the offline benchmark, so a planted culprit acts on the server exactly as
it acts on ``bench_serving``.

What a launch costs and how launches differ (docs/demo.md):

- Launch cost: the workers build the model; on the GPU path they capture the CUDA graphs
  (the real launch cost there). On CPU a planted cost is added on top: ``--launch-cost-s``
  or ``SGLANG_MINI_LAUNCH_S`` (default 3 s on CPU, 0 on the GPU path).
- Launch-to-launch variation: each launch draws a level offset ``z`` ~ N(0, sd) and runs
  every request ``(1 + 3 sd) * exp(-z)`` times as long as the engine itself takes
  (the ``3 sd`` headroom lets a lucky launch be faster than the median one), so this
  launch's throughput is ``exp(z) / (1 + 3 sd)`` of the engine's, beside the ordinary
  within-launch noise. ``--launch-sd`` / ``SGLANG_MINI_LAUNCH_SD`` (default 0.015, 0 turns
  it off), ``--launch-seed`` / ``SGLANG_MINI_LAUNCH_SEED`` (default: from the pid and the
  clock) and ``--launch-offset`` / ``SGLANG_MINI_LAUNCH_OFFSET`` (forces ``z``).

It prints SGLang's "The server is fired up and ready to roll!" when ready, stops
cleanly on SIGTERM or SIGINT, and writes no files.
"""
from __future__ import annotations

import os

# Before numpy loads in this process: the launcher sleeps while the workers compute.
for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_k, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

READY_LINE = "The server is fired up and ready to roll!"
DEFAULT_LAUNCH_SD = 0.015
DEFAULT_CPU_LAUNCH_S = 3.0
MAX_BODY = 16 << 20


def _setting(value, env: str, default, kind=float):
    """The command-line value, else the environment variable, else the default."""
    if value is not None:
        return value
    raw = os.environ.get(env, "").strip()
    if raw:
        try:
            return kind(raw)
        except ValueError:
            raise ValueError(f"{env}={raw!r} is not a number") from None
    return default


class LaunchPlan:
    """The planted launch facts of this one launch (cost, level offset, time factor)."""

    def __init__(self, args, device: str):
        self.cost_s = max(0.0, _setting(args.launch_cost_s, "SGLANG_MINI_LAUNCH_S",
                                        DEFAULT_CPU_LAUNCH_S if device == "cpu" else 0.0))
        self.sd = max(0.0, _setting(args.launch_sd, "SGLANG_MINI_LAUNCH_SD", DEFAULT_LAUNCH_SD))
        seed = _setting(args.launch_seed, "SGLANG_MINI_LAUNCH_SEED", None, int)
        # a fresh launch is a fresh draw: pid and clock, unless a seed is given
        self.seed = seed if seed is not None else (os.getpid() << 32) ^ time.time_ns()
        forced = _setting(args.launch_offset, "SGLANG_MINI_LAUNCH_OFFSET", None)
        self.offset = forced if forced is not None else (
            random.Random(self.seed).gauss(0.0, self.sd) if self.sd > 0 else 0.0)
        # never below 1: the padding can slow a request down, not speed the engine up
        self.time_factor = max(1.0, (1.0 + 3.0 * self.sd) * math.exp(-self.offset))

    def describe(self) -> dict:
        return {"launch_cost_s": self.cost_s, "launch_sd": self.sd, "launch_seed": self.seed,
                "level_offset": self.offset, "time_factor": self.time_factor}


def _spin_until(deadline: float) -> None:
    # busy, not asleep: the padding is work, so it shows in CPU time (--clock cpu) too
    while time.perf_counter() < deadline:
        pass


def tokenize(text: str, vocab_size: int) -> list[int]:
    """The demo's tokenizer: one token per UTF-8 byte (the model has no real vocabulary)."""
    return [b % vocab_size for b in text.encode("utf-8")] or [0]


class DemoServer:
    """The engine behind the HTTP endpoints: launched in the background, one request at a time."""

    def __init__(self, args):
        from .srt.server_args import ServerArgs
        self.args = args
        self.server_args = ServerArgs(device=args.device, tp_size=args.tp_size, seed=args.seed,
                                      speculative_algorithm=args.speculative_algorithm,
                                      speculative_num_steps=args.speculative_num_steps,
                                      disable_cuda_graph=args.disable_cuda_graph)
        self.engine = None
        self.plan: LaunchPlan | None = None
        self.ready = threading.Event()
        self.failed: str | None = None
        self.stopping = threading.Event()
        self.lock = threading.Lock()         # batch 1: one request in the engine at a time
        self.started = time.monotonic()
        self.ready_s: float | None = None
        self.requests = 0

    # -- launch ------------------------------------------------------------------------
    def load(self) -> None:
        from .srt.entrypoints.engine import Engine, EngineError
        try:
            sa = self.server_args
            print(f"[sglang_mini] Load weight begin. device={sa.device} tp={sa.tp_size or 1} "
                  f"spec={sa.speculative_algorithm}", flush=True)
            engine = Engine(sa)
            self.engine = engine
            sa = engine.server_args
            self.plan = LaunchPlan(self.args, sa.device)
            if self.plan.cost_s and self.stopping.wait(self.plan.cost_s):
                return
            # SGLang sends one warmup request before it declares itself ready
            engine.generate(tokenize("warmup", sa.vocab_size), 8)
        except (EngineError, ValueError) as e:
            self.failed = str(e)
            return
        except Exception as e:          # report, then let main() exit 1
            self.failed = f"{type(e).__name__}: {e}"
            return
        self.ready_s = time.monotonic() - self.started
        p = self.plan
        w = engine.workers[0]
        print(f"[sglang_mini] launch: ready in {self.ready_s:.2f} s (planted launch cost {p.cost_s:.2f} s), "
              f"level offset {p.offset:+.4f} (sd {p.sd:g}), time factor {p.time_factor:.4f}, "
              f"all_reduce={w['all_reduce']}", flush=True)
        for wk in engine.workers:
            print(f"[sglang_mini] worker rank={wk['rank']} pid={wk['pid']} "
                  f"env={json.dumps(wk['env'], sort_keys=True)}", flush=True)
        self.ready.set()
        print(READY_LINE, flush=True)

    def close(self) -> None:
        self.stopping.set()
        with self.lock:
            if self.engine is not None:
                self.engine.shutdown()
                self.engine = None
                return
        # still launching: the workers exist but the engine does not yet
        import multiprocessing as mp
        for p in mp.active_children():
            p.terminate()
            p.join(timeout=5)

    # -- requests ----------------------------------------------------------------------
    def model_info(self) -> dict:
        sa = self.engine.server_args
        return {"model_path": self.args.model_path, "tokenizer_path": self.args.model_path,
                "is_generation": True, "vocab_size": sa.vocab_size, "device": sa.device,
                "tp_size": sa.tp_size, "speculative_algorithm": sa.speculative_algorithm,
                "ready_s": self.ready_s, **self.plan.describe()}

    def server_info(self) -> dict:
        sa = self.engine.server_args
        return {**self.model_info(), "pid": os.getpid(), "disable_cuda_graph": sa.disable_cuda_graph,
                "workers": self.engine.workers, "requests": self.requests}

    def generate(self, body: dict) -> dict:
        sa = self.engine.server_args
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise ValueError("sampling_params must be an object")
        n = params.get("max_new_tokens", 128)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError("sampling_params.max_new_tokens must be a positive integer")
        n = min(n, sa.max_seq_len // 2)
        if "input_ids" in body:
            ids = body["input_ids"]
            if not (isinstance(ids, list) and ids and all(isinstance(t, int) and not isinstance(t, bool) for t in ids)):
                raise ValueError("input_ids must be a non-empty list of token ids (one request; batches are not served)")
            prompt = [t % sa.vocab_size for t in ids]
        elif isinstance(body.get("text"), str):
            prompt = tokenize(body["text"], sa.vocab_size)
        else:
            raise ValueError('give "text" (a string) or "input_ids" (one request; batches are not served)')
        if len(prompt) + n + sa.speculative_num_steps + 2 > sa.max_seq_len:
            raise ValueError(f"prompt of {len(prompt)} tokens + {n} new ones exceeds the context of {sa.max_seq_len}")
        f = self.plan.time_factor
        with self.lock:
            if self.engine is None:
                raise RuntimeError("the server is shutting down")
            t0 = time.perf_counter()
            r = self.engine.generate(prompt, n)
            _spin_until(t0 + (time.perf_counter() - t0) * f)
            e2e = time.perf_counter() - t0
            self.requests += 1
            rid = self.requests
        spec = sa.speculative_algorithm is not None
        graph = bool(r["verify_path"] == "fast" and not sa.disable_cuda_graph and sa.device != "torch")
        accept = (r["accepted"] / r["steps"]) if r["steps"] else 1.0
        gen = r["output_len"] / (r["latency"] * f) if r["latency"] > 0 else float("inf")
        # SGLang's decode log line (the sglang-server-log parser reads it)
        print(f"[sglang_mini] Decode batch. #running-req: 1, #token: {len(prompt) + r['output_len']}, "
              + (f"accept len: {accept:.2f}, " if spec else "")
              + f"cuda graph: {graph}, gen throughput (token/s): {gen:.2f}", flush=True)
        meta = {"id": f"req-{rid}", "prompt_tokens": len(prompt), "completion_tokens": r["output_len"],
                "cached_tokens": 0, "finish_reason": {"type": "length", "length": r["output_len"]},
                "e2e_latency": e2e,
                # the demo's own timings, with the launch's time factor applied as served
                "sglang_mini": {"ttft_s": r["ttft"] * f, "latency_s": r["latency"] * f,
                                "cpu_s": r["cpu_s"] * f, "itl_s": [x * f for x in r["itl"]],
                                "steps": r["steps"], "accepted": r["accepted"],
                                "verify_path": r["verify_path"], "cuda_graph": graph}}
        if spec:
            meta["spec_verify_ct"] = r["steps"]
        return {"text": r["text"], "meta_info": meta}


def make_handler(server: DemoServer):
    class Handler(BaseHTTPRequestHandler):
        server_version = "sglang-mini"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):        # one decode line per request is enough
            if server.args.log_requests:
                super().log_message(fmt, *a)

        def _send(self, code: int, obj=None, text: str | None = None):
            data = (json.dumps(obj, allow_nan=True) if obj is not None else (text or "")).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if obj is not None else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _not_ready(self) -> bool:
            if server.ready.is_set() and not server.stopping.is_set():
                return False
            self._send(503, {"error": "the server is launching" if not server.stopping.is_set()
                             else "the server is shutting down"})
            return True

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                if not self._not_ready():
                    self._send(200, text="")
            elif path in ("/get_model_info", "/get_server_info"):
                if not self._not_ready():
                    self._send(200, server.model_info() if path == "/get_model_info" else server.server_info())
            else:
                self._send(404, {"error": f"no such endpoint: {path}"})

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._send(400, {"error": "bad Content-Length"})
                return
            raw = self.rfile.read(length)
            if path != "/generate":
                self._send(404, {"error": f"no such endpoint: {path}"})
                return
            if self._not_ready():
                return
            try:
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the request body must be a JSON object")
                self._send(200, server.generate(body))
            except (ValueError, TypeError) as e:
                self._send(400, {"error": str(e)})
            except Exception as e:               # the engine failed: say so, keep serving /health
                self._send(500, {"error": f"{type(e).__name__}: {e}"})

    return Handler


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sglang_mini.launch_server", description=__doc__.splitlines()[0])
    ap.add_argument("--model-path", default="sglang-mini", help="a label (the demo's weights are generated)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "torch"])
    ap.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=0)
    ap.add_argument("--speculative-algorithm", default=None, help="EAGLE3 or none")
    ap.add_argument("--speculative-num-steps", type=int, default=3)
    ap.add_argument("--disable-cuda-graph", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="the model's weights (not the launch offset)")
    ap.add_argument("--launch-cost-s", type=float, default=None,
                    help=f"planted launch cost (default: $SGLANG_MINI_LAUNCH_S, else {DEFAULT_CPU_LAUNCH_S:g} on CPU, 0 on GPU)")
    ap.add_argument("--launch-sd", type=float, default=None,
                    help=f"sd of the per-launch level offset (default: $SGLANG_MINI_LAUNCH_SD, else {DEFAULT_LAUNCH_SD})")
    ap.add_argument("--launch-seed", type=int, default=None, help="seed of the offset (default: $SGLANG_MINI_LAUNCH_SEED, else pid and clock)")
    ap.add_argument("--launch-offset", type=float, default=None, help="force the level offset z (default: $SGLANG_MINI_LAUNCH_OFFSET)")
    ap.add_argument("--log-requests", action="store_true", help="log every HTTP request on stderr")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        LaunchPlan(args, "cpu")            # bad SGLANG_MINI_LAUNCH_* values: say so before launching
        server = DemoServer(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        httpd = ThreadingHTTPServer((args.host, args.port), make_handler(server))
    except OSError as e:
        print(f"error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 1
    httpd.daemon_threads = True
    print(f"[sglang_mini] listening on http://{args.host}:{httpd.server_address[1]} (pid {os.getpid()})", flush=True)
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    loader = threading.Thread(target=server.load, name="launch", daemon=True)
    loader.start()
    code = 0
    while not stop.wait(0.1):
        if server.failed:
            print(f"error: {server.failed}", file=sys.stderr)
            code = 1
            break
    if code == 0:
        print("[sglang_mini] shutting down", flush=True)
    server.stopping.set()
    httpd.shutdown()
    httpd.server_close()
    server.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
