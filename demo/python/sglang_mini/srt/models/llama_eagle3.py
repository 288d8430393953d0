"""EAGLE-3 draft model: one small residual block over fused target hidden states.

It reads the target's hidden states captured at three layers (low, middle, high),
fuses them with a linear layer, and shares the target's embedding and lm_head.
"""
from __future__ import annotations

import numpy as np

from .deepseek_v2 import rms_norm, silu


class LlamaForCausalLMEagle3:
    def __init__(self, weights: dict, embed: np.ndarray, lm_head: np.ndarray):
        self.fc, self.w1, self.w2 = weights["fc"], weights["w1"], weights["w2"]
        self.embed, self.lm_head = embed, lm_head

    def propose(self, token: int, aux_hidden: np.ndarray, num_steps: int) -> list[int]:
        """Chain of ``num_steps`` greedy draft tokens following ``token``."""
        g = aux_hidden @ self.fc
        out = []
        for _ in range(num_steps):
            x = self.embed[token] + g
            h = x + silu(rms_norm(x) @ self.w1) @ self.w2
            token = int(np.argmax(rms_norm(h) @ self.lm_head.T))
            out.append(token)
            g = h - x
        return out
