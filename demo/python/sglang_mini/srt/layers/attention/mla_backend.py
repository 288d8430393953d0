"""MLA-style attention over a latent KV cache (the "absorbed" decode form).

Each layer caches one latent vector c_kv (kv_lora_rank floats) per token instead of
per-head K and V.  A query is projected into the latent space per head, scored against
the cached latents, and the weighted latent sum is projected back out per head.

Two ways to run a forward over T new tokens:

* ``forward_batched``: all T query tokens at once against one contiguous view of the
  cache, causal mask among the new tokens.  Static shapes: this is the path the graph
  runner captures (CUDA graphs on GPU; on CPU its analogue is the single vectorised call).
* ``forward_extend``: the general "extend" path used for prefill: token by token over
  the cache prefix that token may see.  It handles any layout, but is eager and slow.

``can_run_graph(mode)`` tells the model runner which modes may take the batched path.
"""
from __future__ import annotations

import numpy as np

from ..moe.topk import softmax

# How the KV cache is laid out; the verify graph runner relies on a contiguous view.
KV_LAYOUT = "contiguous"
KV_DTYPE = np.float32


class MLAKVCache:
    """One contiguous [max_len, rank] float32 buffer per layer: reads are views, no copies."""

    def __init__(self, num_layers: int, max_len: int, rank: int):
        self.buf = np.zeros((num_layers, max_len, rank), KV_DTYPE)

    def write(self, layer: int, start: int, c: np.ndarray) -> None:
        self.buf[layer, start:start + c.shape[0]] = c

    def read(self, layer: int, end: int) -> np.ndarray:
        return self.buf[layer, :end]


class MLAAttentionBackend:
    layout = KV_LAYOUT

    def __init__(self, num_layers: int, max_len: int, rank: int, head_dim: int):
        self.cache = MLAKVCache(num_layers, max_len, rank)
        self.scale = np.float32(1.0 / np.sqrt(head_dim + rank))

    def can_run_graph(self, forward_mode: str) -> bool:
        """Decode and target-verify have static shapes over a contiguous cache: capturable."""
        return forward_mode in ("decode", "target_verify")

    def reset(self) -> None:
        self.cache.buf[:] = 0

    def forward_batched(self, layer: int, q_lat: np.ndarray, c_new: np.ndarray, start: int) -> np.ndarray:
        """q_lat [T, heads, rank], c_new [T, rank] -> latent outputs [T, heads, rank]."""
        t = q_lat.shape[0]
        self.cache.write(layer, start, c_new)
        kv = self.cache.read(layer, start + t)                      # [S, R]
        scores = np.einsum("thr,sr->ths", q_lat, kv) * self.scale   # [T, H, S]
        if t > 1:
            # token i sees the prefix plus new tokens 0..i
            s = np.arange(start + t)
            mask = s[None, :] > (start + np.arange(t))[:, None]
            scores = np.where(mask[:, None, :], np.float32(-1e30), scores)
        return np.einsum("ths,sr->thr", softmax(scores), kv)

    def forward_extend(self, layer: int, q_lat: np.ndarray, c_new: np.ndarray, start: int) -> np.ndarray:
        """Same result as :meth:`forward_batched`, one query token at a time."""
        t = q_lat.shape[0]
        self.cache.write(layer, start, c_new)
        out = np.empty_like(q_lat)
        for i in range(t):
            kv = self.cache.read(layer, start + i + 1)
            p = softmax((q_lat[i] @ kv.T) * self.scale)             # [H, S]
            out[i] = p @ kv
        return out
