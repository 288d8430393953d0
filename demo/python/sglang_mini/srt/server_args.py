"""Server arguments: model shape, parallelism, speculative decoding, device."""
from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass
class ServerArgs:
    # device: "cpu" (numpy), "cuda" (torch + CUDA graphs) or "auto" (cuda when torch sees a GPU);
    # "torch" runs the torch runner with the small CPU shapes wherever torch runs (a check
    # of the GPU code path on machines without a GPU: no graphs there)
    device: str = "auto"
    # 0 = 1 scheduler worker (CPU and a single GPU). tp_size=2 on CPU runs two workers in
    # lockstep with a real all-reduce between them; on a 2-core machine shared with other
    # jobs that lockstep makes timings noisy, so it is not the default. On GPUs tp_size=N
    # runs one worker per GPU with a torch.distributed (NCCL) all-reduce.
    tp_size: int = 0
    # torch.distributed rendezvous of the workers (tcp://host:port); the engine picks a free
    # local port when it is left empty, as SGLang's --dist-init-addr does
    dist_init_addr: str | None = None
    seed: int = 0
    # speculative decoding: None or "EAGLE3"
    speculative_algorithm: str | None = None
    speculative_num_steps: int = 3    # draft tokens per verify
    disable_cuda_graph: bool = False
    # model shape (target); the draft shares embedding and lm_head (EAGLE-3)
    vocab_size: int = 512
    # small on purpose: on CPU the decode step is then bound by per-op dispatch overhead,
    # the analogue of kernel-launch overhead that CUDA graphs remove on a GPU
    hidden_size: int = 64
    num_layers: int = 3
    num_heads: int = 4
    head_dim: int = 16
    kv_lora_rank: int = 32
    num_experts: int = 8
    top_k: int = 2
    moe_intermediate_size: int = 64
    max_seq_len: int = 512
    # all-reduce custom kernel (disabled on hardware where it is known broken)
    disable_custom_all_reduce: bool = False
    attention_backend: str = "mla"

    @property
    def uses_torch(self) -> bool:
        """The torch runner (and torch.distributed between ranks), not the numpy one."""
        return self.device in ("cuda", "torch")

    def resolve(self) -> "ServerArgs":
        """Fill the "auto" values; called once in the engine process."""
        if self.device == "auto":
            self.device = "cuda" if _cuda_available() else "cpu"
        if self.device == "cuda":
            # A GPU run is a bigger model: batch-1 decode there is launch-bound, which is
            # exactly where CUDA graphs (and losing them) matter.
            for k, v in GPU_MODEL_SHAPE.items():
                if getattr(self, k) == getattr(ServerArgs, k):
                    setattr(self, k, v)
        if self.tp_size == 0:
            self.tp_size = 1
        if self.speculative_algorithm in ("", "none", "None"):
            self.speculative_algorithm = None
        if self.speculative_algorithm not in (None, "EAGLE3"):
            raise ValueError(f"unknown speculative algorithm {self.speculative_algorithm!r} (expected EAGLE3)")
        if self.num_experts % self.tp_size:
            raise ValueError("num_experts must divide by tp_size")
        return self


GPU_MODEL_SHAPE = dict(vocab_size=8192, hidden_size=2048, num_layers=8, num_heads=16, head_dim=128,
                       kv_lora_rank=256, num_experts=8, moe_intermediate_size=1024, max_seq_len=2048)


def _cuda_available() -> bool:
    if os.environ.get("SGLANG_MINI_FORCE_CPU"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
