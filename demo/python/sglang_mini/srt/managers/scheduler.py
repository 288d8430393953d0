"""Scheduler processes: one per tensor-parallel rank, started with multiprocessing "spawn".

Each process builds its shard of the model, reports what it sees (pid, the NCCL_* /
OEA_* variables of its own environment, the all-reduce algorithm it picked), then runs
the benchmark workload (or, under launch_server, one request at a time) in lockstep
with its peers.  Rank 0 reports per-request timings.
"""
from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import time
import traceback

from ..layers.communicator import create_shared_buffers
from .detokenizer_manager import run_detokenizer_process

REPORTED_ENV_PREFIXES = ("NCCL_", "OEA_")


@contextlib.contextmanager
def _process_environment(env: dict):
    """Make ``env`` the whole environment while children are spawned, then restore.

    A spawned child is exec'd with the parent's environment at that moment, so this is
    how the launcher decides exactly what each worker (and /proc/<pid>/environ) sees.
    """
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _rank_env(worker_env: dict, rank: int) -> dict:
    env = dict(worker_env)
    env["SGLANG_TP_RANK"] = str(rank)
    return env


def launch_scheduler_processes(server_args, worker_env: dict):
    """Spawn tp_size workers and the detokenizer (last); returns (processes, control
    connections, shared buffers).

    The caller must keep the shared buffers alive while the workers run: the named
    semaphores in them disappear when the last reference in the launcher goes.
    """
    ctx = mp.get_context("spawn")
    tp = server_args.tp_size
    if tp > 2 and not server_args.uses_torch:
        raise ValueError("sglang_mini on CPU supports tp_size 1 or 2 (the torch path takes any)")
    # the numpy workers all-reduce through shared memory; torch workers through torch.distributed
    shared = None if server_args.uses_torch else create_shared_buffers(ctx, tp)
    procs, ctrls = [], []
    for rank in range(tp):
        parent, child = ctx.Pipe(duplex=True)
        p = ctx.Process(target=run_scheduler_process, name=f"sglang-mini-tp{rank}",
                        args=(server_args, rank, shared, child), daemon=True)
        with _process_environment(_rank_env(worker_env, rank)):
            p.start()
        child.close()
        procs.append(p)
        ctrls.append(parent)
    parent, child = ctx.Pipe(duplex=True)
    p = ctx.Process(target=run_detokenizer_process, name="sglang-mini-detokenizer",
                    args=(server_args.vocab_size, child), daemon=True)
    with _process_environment(worker_env):
        p.start()
    child.close()
    procs.append(p)
    ctrls.append(parent)
    return procs, ctrls, shared


def _build_model_runner(server_args, rank, shared):
    if server_args.uses_torch:
        from ..model_executor.torch_runner import TorchModelRunner
        return TorchModelRunner(server_args, rank)
    from ..model_executor.model_runner import ModelRunner
    return ModelRunner(server_args, rank, shared)


def run_scheduler_process(server_args, rank: int, shared, ctrl) -> None:
    try:
        runner = _build_model_runner(server_args, rank, shared)
        ctrl.send(("ready", {
            "rank": rank, "pid": os.getpid(),
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(REPORTED_ENV_PREFIXES)},
            "all_reduce": runner.describe_comm(),
        }))
        while True:
            cmd, payload = ctrl.recv()
            if cmd == "exit":
                if hasattr(runner, "close"):      # torch.distributed: leave the group cleanly
                    runner.close()
                break
            if cmd == "run":
                gc.collect()
                gc.disable()          # no collector pauses inside the timed loop
                try:
                    result = runner.run_workload(payload)
                finally:
                    gc.enable()
                ctrl.send(("result", result if rank == 0 else None))
            if cmd == "generate":
                # one request of a running server (launch_server): timed by the runner,
                # plus this worker's CPU time for it (the server's --clock cpu readings)
                c0 = time.thread_time()
                gc.disable()
                try:
                    result = runner.generate(payload["prompt"], payload["max_new_tokens"])
                finally:
                    gc.enable()
                result["cpu_s"] = time.thread_time() - c0
                ctrl.send(("result", result if rank == 0 else None))
    except (EOFError, KeyboardInterrupt):
        pass
    except BaseException as e:  # report, don't hang the launcher
        try:
            ctrl.send(("error", {"rank": rank, "type": type(e).__name__, "message": str(e),
                                 "traceback": traceback.format_exc()}))
        except Exception:
            pass
