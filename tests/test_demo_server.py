"""The bundled demo's server mode: sglang_mini.launch_server and bench_serving --backend sglang.

The real server runs as a subprocess on a free port in a tree built the way bisect-lab
builds one (a copy of demo/ plus the required patch); the real bench client measures it
over HTTP and the builtin parser reads what it printed and wrote. Launch costs are cut
to a fraction of a second and the timed workloads are short, so the file takes seconds.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bisect_lab.parsers import parse

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo"
PATCHES = ROOT / "patches" / "demo"
# the required patch: without it the server refuses EAGLE3, as the offline bench does
REQUIRED = "eagle3-delegation"
READY = "The server is fired up and ready to roll!"
# short: these tests are about behaviour; --clock cpu keeps the readings steady on a busy box
QUICK = ["--clock", "cpu", "--num-prompts", "4", "--warmup-requests", "1", "--output-len", "32"]

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("demo-server") / "tree"
    shutil.copytree(DEMO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run(["git", "apply", str(PATCHES / f"{REQUIRED}.patch")], cwd=dest,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return dest


def _env(tree: Path) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "OEA_", "SGLANG_MINI_"))}
    e["PYTHONPATH"] = str(tree / "python")
    return e


def _files(tree: Path) -> dict[str, float]:
    # bytecode caches are Python's own (the offline bench is no different); anything else is ours
    return {str(p.relative_to(tree)): p.stat().st_mtime for p in tree.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def get(port: int, path: str):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post(port: int, body) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Server:
    """One launch: the real process, its log in a file (never a pipe that could fill)."""

    def __init__(self, tree: Path, log: Path, *args: str):
        self.port = free_port()
        self.tree, self.log = tree, log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_mini.launch_server", "--device", "cpu",
             "--speculative-algorithm", "EAGLE3", "--port", str(self.port), *args],
            cwd=tree, env=_env(tree), stdout=open(log, "w"), stderr=subprocess.STDOUT)
        self.codes: list[int] = []

    def text(self) -> str:
        return self.log.read_text()

    def wait_listening(self, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.text()
            try:
                self.codes.append(get(self.port, "/health")[0])
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"never listened:\n{self.text()}")

    def wait_ready(self, timeout: float = 60) -> None:
        self.wait_listening()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.text()
            code = get(self.port, "/health")[0]
            self.codes.append(code)
            if code == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"never ready:\n{self.text()}")

    def bench(self, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
        out.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([sys.executable, "-m", "sglang_mini.bench_serving", "--backend", "sglang",
                            "--port", str(self.port), *QUICK, "--output-file", str(out / "res.jsonl"), *args],
                           cwd=out, env=_env(self.tree),
                           capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        return r, parse("sglang-bench-serving", r.stdout, r.stderr, out_dir=str(out), metric="output_throughput")

    def stop(self, timeout: float = 15) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def launch(tree, tmp_path):
    started: list[Server] = []

    def start(*args: str, name: str = "server") -> Server:
        s = Server(tree, tmp_path / f"{name}-{len(started)}.log", *args)
        started.append(s)
        return s
    yield start
    for s in started:
        s.kill()


def _gone(pid: int, timeout: float = 10) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True          # exited; its parent (gone too) just has not reaped it
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_server_health_generate_bench_and_clean_stop(tree, launch, tmp_path):
    before = _files(tree)
    srv = launch("--launch-cost-s", "1.0", "--launch-sd", "0")
    srv.wait_ready()
    # 503 while it launches (the planted second), 200 once ready, and SGLang's ready line
    assert srv.codes[0] == 503 and srv.codes[-1] == 200, srv.codes
    assert READY in srv.text()

    code, info = get(srv.port, "/get_model_info")
    info = json.loads(info)
    assert code == 200 and info["device"] == "cpu" and info["speculative_algorithm"] == "EAGLE3"
    assert info["launch_cost_s"] == 1.0 and info["ready_s"] >= 1.0
    code, out = post(srv.port, {"text": "the bundled demo", "sampling_params": {"max_new_tokens": 12}})
    assert code == 200, out
    assert out["meta_info"]["completion_tokens"] == 12 and out["meta_info"]["prompt_tokens"] == 16
    assert out["text"] and out["meta_info"]["spec_verify_ct"] >= 1
    code, out = post(srv.port, {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5}})
    assert code == 200 and out["meta_info"]["completion_tokens"] == 5
    # bad input: one clear answer, and the server keeps serving
    code, out = post(srv.port, {"sampling_params": {"max_new_tokens": 4}})
    assert code == 400 and "text" in out["error"]
    code, out = post(srv.port, {"text": "x", "sampling_params": {"max_new_tokens": 0}})
    assert code == 400 and "max_new_tokens" in out["error"]
    assert get(srv.port, "/nope")[0] == 404

    r, m = srv.bench(tmp_path / "out")
    assert m["completed"] == 4 and m["total_output_tokens"] == 4 * 32
    assert m["output_throughput"] > 0 and 1.0 <= m["accept_length"] <= 4.0
    assert m["max_concurrency"] == 1 and m["median_ttft_ms"] > 0
    # the printed table and the JSON line agree (the parser prefers the JSON)
    table = parse("sglang-bench-serving", r.stdout)
    assert abs(table["output_throughput"] - m["output_throughput"]) < 0.01
    r2, m2 = srv.bench(tmp_path / "out2", "--max-concurrency", "2", "--clock", "wall")
    assert m2["completed"] == 4 and m2["max_concurrency"] == 2 and m2["output_throughput"] > 0
    # the server's decode log is SGLang's: the server-log parser reads it too
    assert parse("sglang-server-log", srv.text())["decode_log_lines"] >= 8

    pids = [w["pid"] for w in json.loads(get(srv.port, "/get_server_info")[1])["workers"]]
    assert len(pids) == 2                       # the scheduler and the detokenizer
    assert srv.stop() == 0, srv.text()
    assert "Traceback" not in srv.text()
    assert all(_gone(p) for p in pids), pids
    assert _files(tree) == before               # nothing written into the tree


def test_sigterm_during_launch_and_refused_speculation(tree, launch, tmp_path):
    srv = launch("--launch-cost-s", "60")
    srv.wait_listening()
    assert srv.codes == [503]
    t0 = time.monotonic()
    assert srv.stop() == 0, srv.text()
    assert time.monotonic() - t0 < 10 and READY not in srv.text()

    # the pristine demo refuses EAGLE3: the server says why and exits 1 (no traceback)
    pristine = tmp_path / "pristine"
    shutil.copytree(DEMO, pristine, ignore=shutil.ignore_patterns("__pycache__"))
    bad = Server(pristine, tmp_path / "pristine.log", "--launch-cost-s", "0")
    try:
        assert bad.proc.wait(timeout=60) == 1
    finally:
        bad.kill()
    assert "SpeculativeDecodingNotSupported" in bad.text() and "Traceback" not in bad.text()

    # bad input: one line and exit 2 (the server), one line and exit 1 (nothing to measure)
    r = subprocess.run([sys.executable, "-m", "sglang_mini.launch_server", "--port", str(free_port())],
                       cwd=tree, env=dict(_env(tree), SGLANG_MINI_LAUNCH_S="soon"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == "error: SGLANG_MINI_LAUNCH_S='soon' is not a number"
    r = subprocess.run([sys.executable, "-m", "sglang_mini.bench_serving", "--backend", "sglang",
                        "--port", str(free_port())], cwd=tmp_path, env=_env(tree),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("error: cannot reach the server at http://127.0.0.1:")
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_two_launches_of_one_tree_differ_by_more_than_readings_within_one(launch, tmp_path):
    # forced level offsets (0 and -1.2: that launch runs every request e^1.2 = 3.3x as long),
    # far beyond what a loaded 2-core box does to CPU-time readings (up to 1.7x seen inside one
    # launch), so the check cannot flake; inside a launch only the ordinary noise remains
    readings = {}
    for name, offset in (("fast", "0"), ("slow", "-1.2")):
        srv = launch("--launch-cost-s", "0", "--launch-offset", offset, name=name)
        srv.wait_ready()
        info = json.loads(get(srv.port, "/get_model_info")[1])
        assert info["level_offset"] == float(offset)
        readings[name] = [srv.bench(tmp_path / f"{name}{i}")[1]["output_throughput"] for i in range(3)]
        assert srv.stop() == 0
    fast, slow = readings["fast"], readings["slow"]
    assert min(fast) > max(slow), readings
    within = max(max(fast) / min(fast), max(slow) / min(slow))
    between = (sum(fast) / 3) / (sum(slow) / 3)
    assert between > within, readings


def _launch_plan(**kw):
    sys.path.insert(0, str(DEMO / "python"))
    try:
        from sglang_mini.launch_server import LaunchPlan, build_parser
    finally:
        sys.path.pop(0)
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    plan = LaunchPlan(build_parser().parse_args(argv), "cpu")
    for name in [m for m in sys.modules if m == "sglang_mini" or m.startswith("sglang_mini.")]:
        del sys.modules[name]           # the trees' own sglang_mini must not meet this one
    return plan


def test_launch_offsets_are_drawn_per_launch(monkeypatch):
    for k in ("SGLANG_MINI_LAUNCH_S", "SGLANG_MINI_LAUNCH_SD", "SGLANG_MINI_LAUNCH_SEED",
              "SGLANG_MINI_LAUNCH_OFFSET"):
        monkeypatch.delenv(k, raising=False)
    a, b = _launch_plan(launch_seed=1), _launch_plan(launch_seed=1)
    assert a.offset == b.offset != 0 and a.time_factor == b.time_factor
    draws = [_launch_plan(launch_seed=s).offset for s in range(200)]
    assert len(set(draws)) == 200
    sd = (sum(x * x for x in draws) / len(draws)) ** 0.5
    assert 0.010 < sd < 0.020                     # the default 1.5%
    # unseeded launches draw afresh (pid and clock), and the defaults are the documented ones
    p, q = _launch_plan(), _launch_plan()
    assert p.seed != q.seed and p.cost_s == 3.0 and p.sd == 0.015
    assert _launch_plan(launch_sd=0).offset == 0.0
    monkeypatch.setenv("SGLANG_MINI_LAUNCH_OFFSET", "-0.2")
    monkeypatch.setenv("SGLANG_MINI_LAUNCH_S", "0.25")
    forced = _launch_plan()
    assert forced.offset == -0.2 and forced.cost_s == 0.25
    assert abs(forced.time_factor - 1.045 * 2.718281828 ** 0.2) < 1e-6
