"""MoE router: pick the top-k experts per token and their (renormalised) weights."""
from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def select_experts(router_logits: np.ndarray, top_k: int, renormalize: bool = True):
    """Return (weights [T, k] float32, ids [T, k] int64) for router logits [T, E].

    Ids come sorted by descending probability so that every implementation (numpy,
    torch, vectorised or per-token) accumulates experts in the same order.
    """
    probs = softmax(router_logits.astype(np.float32))
    ids = np.argsort(-probs, axis=-1, kind="stable")[:, :top_k]
    weights = np.take_along_axis(probs, ids, axis=-1)
    if renormalize:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights.astype(np.float32), ids
