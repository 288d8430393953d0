"""Engine: resolves the server arguments, prepares the worker environment, spawns the
scheduler processes and drives a workload (bench_serving) or single requests
(launch_server) through them.

Like SGLang's launcher, it does not hand its whole environment to the workers: they get
an explicit, filtered copy (the variables a worker needs plus the feature-flag prefixes
the model code reads).  Anything else set in the launching shell stays in the launcher.
"""
from __future__ import annotations

import os

from ..managers.scheduler import launch_scheduler_processes
from ..server_args import ServerArgs

# Plain variables a worker process needs to start and find its packages.
WORKER_ENV_KEEP = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR",
    "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CONDA_PREFIX",
})
# Prefixes of variables that configure code running inside the workers.
WORKER_ENV_PREFIXES = ("SGLANG_", "OEA_", "CUDA_", "TORCH_", "TORCHINDUCTOR_", "OMP_", "MKL_",
                       "OPENBLAS_", "PYTORCH_")


def worker_environment(environ=None) -> dict:
    env = os.environ if environ is None else environ
    out = {k: v for k, v in env.items() if k in WORKER_ENV_KEEP or k.startswith(WORKER_ENV_PREFIXES)}
    # The workers already use every core between them: one BLAS thread each, or they
    # oversubscribe the machine and the timings get noisy.
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        out.setdefault(k, "1")
    return out


# Set in every GPU worker whatever the launching shell says: NVLink multicast (NVLS) can
# take a shared host's GPUs out of service, and the demo's all-reduce never needs it.
GPU_WORKER_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                  "NVSHMEM_DISABLE_NVLS": "1"}


def _free_local_address() -> str:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


class EngineError(RuntimeError):
    pass


class Engine:
    def __init__(self, server_args: ServerArgs | None = None, **kwargs):
        self.server_args = sa = (server_args or ServerArgs(**kwargs)).resolve()
        env = worker_environment()
        if sa.device == "cuda":
            env.update(GPU_WORKER_ENV)
        if sa.tp_size > 1 and sa.uses_torch and not sa.dist_init_addr:
            sa.dist_init_addr = _free_local_address()
        self.procs, self.ctrls, self._shared = launch_scheduler_processes(sa, env)
        self.workers = [self._recv(c, "ready") for c in self.ctrls]
        # schedulers first, the detokenizer last (see launch_scheduler_processes)
        self.sched_ctrls, self.detok_ctrl = self.ctrls[:-1], self.ctrls[-1]

    def _recv(self, ctrl, expect):
        try:
            kind, payload = ctrl.recv()
        except EOFError:
            self.shutdown()
            raise EngineError("a scheduler process exited before answering") from None
        if kind == "error":
            self.shutdown()
            raise EngineError(f"scheduler rank {payload['rank']} failed: {payload['type']}: {payload['message']}")
        assert kind == expect, (kind, expect)
        return payload

    def run_workload(self, workload: dict) -> dict:
        for c in self.sched_ctrls:
            c.send(("run", workload))
        result = [self._recv(c, "result") for c in self.sched_ctrls][0]
        # after the timed part: text for the requests, from the detokenizer process
        self.detok_ctrl.send(("detokenize", [r.pop("output_ids") for r in result["requests"]]))
        texts = self._recv(self.detok_ctrl, "text")
        for r, t in zip(result["requests"], texts):
            r["text"] = t
        return result

    def generate(self, prompt: list[int], max_new_tokens: int) -> dict:
        """One request (batch 1) through the running workers: its timings, token counts,
        the worker's CPU time for it (``cpu_s``) and its text."""
        for c in self.sched_ctrls:
            c.send(("generate", {"prompt": list(prompt), "max_new_tokens": int(max_new_tokens)}))
        result = [self._recv(c, "result") for c in self.sched_ctrls][0]
        self.detok_ctrl.send(("detokenize", [result.pop("output_ids")]))
        result["text"] = self._recv(self.detok_ctrl, "text")[0]
        return result

    def shutdown(self) -> None:
        for c in self.ctrls:
            try:
                c.send(("exit", None))
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        self.ctrls = []
