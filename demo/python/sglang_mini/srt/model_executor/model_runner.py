"""CPU model runner (numpy): prefill, plain decode or EAGLE-3 speculative decode."""
from __future__ import annotations

import time

import numpy as np

from ..layers.communicator import Communicator
from ..models.deepseek_v2 import init_weights
from ..models.kimi_k25 import EntryClass


class ModelRunner:
    def __init__(self, args, rank: int, shared):
        self.args = args
        self.comm = Communicator(rank, args.tp_size, shared)
        weights = init_weights(args)
        self.model = EntryClass(args, weights, self.comm)
        self.use_graph = not args.disable_cuda_graph
        self.clock = time.perf_counter
        self.spec = None
        if args.speculative_algorithm == "EAGLE3":
            from ..speculative.eagle_worker import EAGLEWorker
            self.spec = EAGLEWorker(self.model, weights, args)
        self.comm.barrier()

    def describe_comm(self) -> str:
        return self.comm.describe()

    def generate(self, prompt: list[int], max_new_tokens: int) -> dict:
        """One request, batch 1. Returns its timings and token counts."""
        t0 = self.clock()
        hidden = self.model.forward(np.asarray(prompt), 0, "extend", self.use_graph)
        last = int(self.model.logits(hidden[-1:]).argmax())
        ttft = self.clock() - t0
        out, seq_len, itl, steps = [last], len(prompt), [], 0
        aux = self.model.aux_hidden_states[-1] if self.spec else None
        verify_path = None
        while len(out) < max_new_tokens:
            ts = self.clock()
            if self.spec:
                new, seq_len, aux = self.spec.step(last, seq_len, aux, self.use_graph)
                verify_path = self.model.last_path
            else:
                hidden = self.model.forward(np.asarray([last]), seq_len, "decode", self.use_graph)
                new, seq_len = [int(self.model.logits(hidden).argmax())], seq_len + 1
                verify_path = self.model.last_path
            last = new[-1]
            out.extend(new)
            steps += 1
            itl.append(self.clock() - ts)
        n = min(len(out), max_new_tokens)
        return {"ttft": ttft, "latency": self.clock() - t0, "itl": itl, "output_len": n,
                "input_len": len(prompt), "steps": steps, "verify_path": verify_path,
                "accepted": len(out) - 1, "output_ids": out[:n]}

    def run_workload(self, wl: dict) -> dict:
        # "cpu": this worker's CPU time instead of wall time (see bench_serving --clock)
        self.clock = time.thread_time if wl.get("clock") == "cpu" else time.perf_counter
        for p in wl["warmup_prompts"]:
            self.generate(p, wl["output_len"])
        t0 = self.clock()
        reqs = [self.generate(p, wl["output_len"]) for p in wl["prompts"]]
        duration = self.clock() - t0
        return {"duration": duration, "requests": reqs, "device": "cpu",
                "cuda_graph": bool(self.use_graph and reqs and reqs[-1]["verify_path"] == "fast")}
